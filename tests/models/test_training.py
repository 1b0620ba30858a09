"""Real models trained by the parallel module equal one-device training, step by step.

Each model of the zoo (transformers GPT-2 with tied embeddings, LLaMA, Phi-3, Mixtral, BERT, the
T5 encoder, a BatchNorm CNN in eval mode) is traced for training, planned and compiled once, then
takes 5 AdamW steps at batch sizes the guards accept, on 2 gloo ranks (mesh (2,)) and, three of
them, on 4 (mesh (2, 2), weights split by a memory budget); after each step the loss and every parameter
(``full_tensor()``) equal one device's (fp32, rtol 1e-4). The plan gives each parameter one
gradient under its own name (a tied weight: one tensor, one placement, one gradient). On 2 ranks,
LLaMA is planned with its batch split required (``RequireShard``), and Mixtral with its expert
weights split on their hidden dim, its expert products (transformers' ``grouped_mm_fallback``)
computing on the pieces, and with each rank routing its own tokens (required; that the planner
chooses it unprompted at a large batch is checked by planning alone).

transformers' six MoE decoders (``MOE_CASES``: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3,
GPT-OSS) train with their experts split by the expert dim (``ExpertParallel``: each rank computes
its own experts, the rows dispatched to them and combined back) on (2,) and on (2, 2) (the batch
split over the other axis), a step's batch routed to two experts only; all six in one launch per mesh (a rank's setup and a launch
cost more than a model's steps).

AdamW's ``eps`` is 1e-4, not 1e-8: a parameter whose true gradient is zero (BERT's attention key
bias: softmax ignores a shift shared by all keys) gets rounding noise of about 1e-9 as its
gradient, and with eps 1e-8 Adam turns noise of either sign into a full step of that sign.

A parameter's value after a step is cloned before the next: ``full_tensor()`` of a replicated
DTensor is a view of the live parameter, which later steps update in place.
"""

import functools

import pytest
import torch
from torch.distributed.tensor import Shard
from torch.export import Dim

import lowering
import planner
from lowering import launch
from planner import PER_TOKEN, ExpertParallel, MinShards, RequireShard
from tests.models.zoo import CASES, MIXTRAL_EXPERTS_SPLIT, MOE_CASES, one_token_batch, train_one_device

pytestmark = pytest.mark.slow  # gloo ranks, each model compiled by Inductor

CONSTRAINT = "Eq(Mod(batch, 4), 0)"
BATCH_SIZES = [8, 16, 8, 24, 16]  # split 4 ways, at least 2 rows each: Inductor specializes a piece of 1 row
OPTIMIZER = dict(lr=1e-2, eps=1e-4)


def _gradients_per_parameter(pm, model):
    """For each parameter (by its own name), how many gradients the plan computes for it."""
    first: dict[int, str] = {}
    own = {n: first.setdefault(id(p), n) for n, p in model.named_parameters(remove_duplicate=False)}
    counts = dict.fromkeys(first.values(), 0)
    for output in pm.plan.graph_outputs:
        if output is not None and output.role == "grad":
            counts[own[output.grad_of]] += 1
    return counts


def _batches(name, uneven=False):
    """The steps' ``(inputs, target)`` for case ``name`` (of ``CASES`` or ``MOE_CASES``); ``uneven``:
    step 1's holds one token throughout, which a MoE layer routes to its top experts only."""
    case = MOE_CASES.get(name) or CASES[name]
    return [one_token_batch(b) if uneven and step == 1 else case.batch(b) for step, b in enumerate(BATCH_SIZES)]


def _train_one(name, mesh, options, batches):
    case = MOE_CASES.get(name) or CASES[name]
    model = case.model()
    pm = lowering.parallelize(model, (batches[0][0],), dynamic_shapes=({0: Dim("batch")},), mesh=mesh, training=True,
                              constraints=[CONSTRAINT], hardware="cpu-gloo", regret="off", **options)
    optimizer = torch.optim.AdamW(pm.parameters(), **OPTIMIZER)
    history = []
    for inputs, target in batches:
        loss = case.loss(pm(inputs).full_tensor(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append((loss.item(), {n: p.full_tensor().detach().clone() for n, p in pm.named_parameters()}))
    split = sorted(n for n, p in pm.named_parameters() if any(q.is_shard() for q in p.placements))
    plan = {"gradients": _gradients_per_parameter(pm, model), "memory": pm.plan.cost.memory.total,
            "placed": sorted(pm.plan.param_placements), "inputs": [str(p) for p in pm.plan.input_placements],
            "rules": {d.node: d.rule for d in pm.plan.decisions.values()},
            "placements": dict(pm.plan.param_placements)}
    return history, pm.compile_count, split, plan


def _train(rank, names, mesh, options, uneven=False):
    """On each rank: every case of ``names`` in turn trained (one launch for them all)."""
    return {name: _train_one(name, mesh, options, _batches(name, uneven)) for name in names}


def _compare(results, expected):
    """Every rank's training of a case (``results``: per rank, what :func:`_train_one` returns)
    equals one device's (``expected``), from one compile, with one gradient per parameter."""
    for history, compiles, _, plan in results:
        assert set(plan["gradients"].values()) == {1}, plan["gradients"]  # one gradient per tensor
        for step, ((loss, params), (want_loss, want_params)) in enumerate(zip(history, expected)):
            assert loss == pytest.approx(want_loss, rel=1e-4), (step, loss, want_loss)
            assert params.keys() == want_params.keys()
            for n, p in params.items():
                torch.testing.assert_close(p, want_params[n], rtol=1e-4, atol=1e-6, msg=lambda m: f"step {step} {n}: {m}")
        assert compiles == 1


def _check(name, mesh, rules=None, **options):
    """Train ``name`` on ``mesh`` (``options``: plan options) and compare with one device, the plan
    choosing ``rules`` (node name: rule) where given; the names of the split parameters."""
    ranks = 2 if mesh == (2,) else 4
    expected = train_one_device(CASES[name], _batches(name), **OPTIMIZER)
    results = [r[name] for r in launch(functools.partial(_train, names=[name], mesh=mesh, options=options), ranks,
                                       timeout=900)]
    _compare(results, expected)
    _, _, split, plan = results[0]
    if any(isinstance(c, RequireShard) for c in options.get("placement_constraints", ())):  # the batch split required
        assert plan["inputs"][0].startswith("(Shard(dim=0)"), plan["inputs"]
    if name == "gpt2":  # lm_head.weight is transformer.wte.weight: one tensor, one placement
        assert ("m.transformer.wte.weight" in plan["placed"]) != ("m.lm_head.weight" in plan["placed"])
    if "memory_budget" in options:
        assert plan["memory"] <= options["memory_budget"]
    assert {node: plan["rules"][node] for node in rules or {}} == (rules or {})
    return split


# What a case is planned under on (2,) besides its time limit (a constraint a user may give), the
# rules its plan must pick (node: rule) and the parameters it must split (None: not checked); one run
# per model checks both the training and what the constraint asks.
TWO_RANKS = {
    # its attention mask's ``arange`` spans the batch and only replicates: the tensors computed from
    # it take their pieces locally (was a PlacementConflict on arange)
    "llama": ({"placement_constraints": [RequireShard("batch", 0)]}, None, None),
    # transformers' grouped_mm_fallback computes on the expert weights' pieces: the gate-up product
    # split on its contraction (a partial sum), the down product on its columns
    "mixtral": ({"placement_constraints": MIXTRAL_EXPERTS_SPLIT},
                {"grouped_mm_fallback": "contraction", "grouped_mm_fallback_1": "columns"},
                ["m.model.layers.0.mlp.experts.down_proj", "m.model.layers.0.mlp.experts.gate_up_proj"]),
}


PER_TOKEN_RULES = {node: PER_TOKEN for node in ("sort", "histc", "grouped_mm_fallback", "grouped_mm_fallback_backward_1",
                                                "arange_5", "index_put_3")}


def _routed_counts(model):
    """Rows routed to each expert, per forward of ``model`` (a list it appends to): a hook on each
    of its experts' modules (transformers' ``...Experts``), which take the top-k ids as argument 1."""
    counts = []
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            module.register_forward_pre_hook(
                lambda m, args: counts.append(torch.bincount(args[1].flatten(), minlength=m.num_experts).tolist()))
    return counts


# six models traced, planned and lowered per rank, each compiled once (rank 0 compiles, the other ranks
# load it from Inductor's cache: most of the time): several minutes on CI's 2 cores, 18-25 on this
# machine at load 6-20, past the suite's 900 s per test
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("mesh, axis, required", [((2,), 0, []), ((2, 2), 1, [RequireShard("batch", 0)])],
                         ids=["(2,)", "(2, 2) with the batch split"])
def test_moe_models_with_their_experts_split_by_the_expert_dim_train_equal_to_one_device(mesh, axis, required):
    """Expert parallel (``ExpertParallel``): each rank holds 2 of the 4 experts of every layer (gate-up
    and down), its tokens' rows dispatched to their expert's rank and combined back, in the forward
    and the backward (GPT-OSS's experts' bias tables split alike, each rank serving its experts'
    biases); on (2, 2) over the second axis, the batch split over the first (data parallel:
    each rank routes its own tokens, a per-token region; left free, the planner replicates there).
    Step 1 leaves some expert no row (its batch holds one token throughout: checked on one device);
    the six models train in one launch."""
    expected = {}
    for name, case in MOE_CASES.items():
        model = case.model()
        routed = _routed_counts(model)
        expected[name] = train_one_device(case, _batches(name, uneven=True), model, **OPTIMIZER)
        assert 0 in routed[1] and 0 not in routed[0], (name, routed)  # uneven routing, and even
    options = {"time_limit": 10, "placement_constraints": [ExpertParallel(axis), *required]}
    results = launch(functools.partial(_train, names=list(MOE_CASES), mesh=mesh, options=options, uneven=True),
                     2 if mesh == (2,) else 4, timeout=2300)
    for name in MOE_CASES:
        _compare([r[name] for r in results], expected[name])
        _, _, _, plan = results[0][name]
        # the experts' weights, and GPT-OSS's per-expert bias tables too: each rank holds its experts' only
        experts = [n for n in plan["placements"] if n.endswith(("experts.gate_up_proj", "experts.down_proj",
                                                                "experts.gate_up_proj_bias", "experts.down_proj_bias"))]
        assert len(experts) == (4 if name == "gpt-oss" else 2), experts
        assert all(plan["placements"][n][axis] == Shard(0) for n in experts), plan["placements"]
        products = {node: rule for node, rule in plan["rules"].items() if node.startswith("grouped_mm_fallback")}
        assert len(products) == 4 and all(rule.endswith("experts") for rule in products.values()), products
        if required:  # the batch split, the routing run per token there
            assert plan["inputs"][0].startswith("(Shard(dim=0)"), plan["inputs"]
            assert all(rule.startswith(PER_TOKEN) for rule in products.values()), products


def test_mixtral_planned_for_a_large_batch_routes_per_token_unprompted():
    """With no constraint, at batch 4096 the plan runs the routing per token (what the test above
    trains), its batch split: the planner weighs the region on a whole model by itself."""
    case = CASES["mixtral"]
    inputs, _ = case.batch(BATCH_SIZES[0])
    plan = planner.plan_module(case.model(), (inputs,), dynamic_shapes=({0: Dim("batch")},), mesh=(2,), training=True,
                               constraints=[CONSTRAINT], hardware="cpu-gloo", regret="off", time_limit=10,
                               batch_sizes=[4096])
    assert {node: plan.decisions[node].rule for node in PER_TOKEN_RULES} == PER_TOKEN_RULES
    assert str(plan.input_placements[0]).startswith("(Shard(dim=0)"), plan.input_placements


@pytest.mark.parametrize("name", list(CASES))
def test_training_on_two_ranks_equals_one_device(name):
    options, rules, expected_split = TWO_RANKS.get(name, ({}, None, None))
    split = _check(name, (2,), rules=rules, time_limit=10, **options)
    assert expected_split is None or split == expected_split


# The relative gap each case's plan under its budget is proved within (``mip_gap``), where the proof
# takes seconds: GPT-2's search (planner/branching.py) proves its plan optimal (its rounded relaxation
# was within 21%; 14.5 CPU s, the MIP's within 5% 18.3), the CNN's optimal (2.22 ms)
# within 5%; Phi-3's rounded relaxation within 33% (7.38 ms, greedy's plan 15.56): a smaller gap
# there leaves the plan to a MIP not seen to end within minutes.
BUDGET_GAPS = {"gpt2": 0.05, "cnn": 0.05, "phi3": 0.5}


# Mixtral on (2, 2) under its budget (its experts split 2-D: columns on one axis, contraction on the
# other) matches but for one element of its embedding after step 1, by 2.4e-6 (rtol 2.6e-3). That is
# the row's first AdamW step (gradient 3e-4, eps 1e-4), which moves by 6x any change of the gradient,
# and the gradients differ by 4.4e-7 there: at step 0 every gradient is within 5.4e-7 of its tensor's
# largest (rounding), at step 1 within 8.1e-6 (rounding on parameters a step apart) (issue 21)
# On (2, 2) the cases whose split weights differ most: tied embeddings (GPT-2), fused projections cut
# into pieces (Phi-3, a grouped-query decoder as LLaMA is) and convolutions with BatchNorm (the CNN);
# each takes a minute of this 2-core machine. BERT's (95 s) split weights of GPT-2's kinds (embeddings,
# attention and MLP linears, LayerNorms); BERT trains on (2,) above.
@pytest.mark.parametrize("name", ["gpt2", "phi3", "cnn"])
def test_training_with_weights_split_on_a_two_by_two_mesh_equals_one_device(name):
    # The ILP, stopped by a proved gap, not by the clock: its plan is then the same at any load (one
    # cut short by a time limit may not be); the time limit is never reached.
    # GPT-2's plan keeps its tied embedding whole under the budget (it splits the block's linears):
    # required split here, so that a split tied weight is trained (forward and gradient)
    required = [MinShards(2, "*wte.weight")] if name == "gpt2" else []
    split = _check(name, (2, 2), memory_budget=CASES[name].memory_budget, mip_gap=BUDGET_GAPS[name], time_limit=600,
                   placement_constraints=required)
    assert split  # some weight split
    if name == "gpt2":  # the tied embedding among them: a split tied weight computes, forward and gradient
        assert "m.transformer.wte.weight" in split

