"""Per-token regions: transformers' routing chain (Mixtral's sparse MoE block) is recognised and
runs per token where the batch is split (its experts as ``torch._grouped_mm``, inferring, too); a chain that differs from the pattern anywhere, and a
sort that heads no such chain, keep the sort's refusal."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Replicate, Shard
from torch.export import Dim

import planner
from planner import PER_TOKEN, ExpertParallel, Mesh, Pin, PlacementConflict, RequireShard
from planner.api import prepare
from planner.graph import read_graph
from planner.greedy import GreedyModel
from planner.ilp import IlpModel
from planner.placements import P_CODE, R_CODE, shard_code
from planner.problem.per_token import PER_TOKEN_EXPERTS, find_regions, per_token_rule_axes
from shapecore.torch import trace_for_planning
from tests.planner.models import GroupedExperts, transformers_gpt_oss_moe, transformers_moe_block

CONSTRAINTS = ["Eq(Mod(batch, 4), 0)"]


@pytest.fixture(scope="module")
def block():
    return trace_for_planning(transformers_moe_block(), (torch.randn(4, 3, 8),), dynamic_shapes={"hidden_states": {0: Dim("batch")}},
                              training=True)


def _plan(traced, mesh, constraints):
    graph = traced.exported if traced.exported is not None else traced.graph_module
    return planner.plan(graph, mesh, shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[4, 32],
                        constraints=CONSTRAINTS, placement_constraints=constraints)


def test_the_routing_chain_of_a_transformers_moe_block_is_one_region(block):
    graph = read_graph(block.graph_module)
    (region,) = find_regions(graph)
    targets = {graph.nodes[name].target for name in region.placements}
    assert {"aten.sort.default", "aten.histc.default", "aten.index_put.default", "aten.arange.default",
            "transformers.grouped_mm_fallback.default", "transformers.grouped_mm_fallback_backward.default"} <= targets
    assert region.tokens.free_symbols  # the batch's tokens
    # the region's only tensors read outside it are per token (S(0)) or the weights' partial gradients (P)
    out = {name for name in region.placements for user, _ in graph.users[name] if user not in region.placements}
    assert out and all(graph.nodes[name].target in ("aten.index.Tensor", "aten.index_put.default", "aten.new_zeros.default")
                       or graph.nodes[name].role == "getitem" for name in out)


def test_the_batch_split_runs_the_chain_per_token_and_sums_the_experts_gradients(block):
    plan = _plan(block, Mesh((2,)), [RequireShard("batch", 0)])
    assert plan.input_placements[0] == (Shard(0),)
    rules = {d.node: d.rule for d in plan.decisions.values() if "grouped_mm_fallback" in d.op or "sort" in d.op}
    assert len(rules) == 5 and set(rules.values()) == {PER_TOKEN}  # the sort, two products and their backwards
    assert [plan.param_placements[f"experts.{w}"] for w in ("gate_up_proj", "down_proj")] == [(Replicate(),)] * 2
    assert plan.decisions["grouped_mm_fallback_backward"].strategy.startswith("S(0) | P <- ")  # each rank's rows' sum


def test_expert_parallel_on_the_data_parallel_axis_dispatches_each_ranks_own_rows(block):
    free = _plan(block, Mesh((2,)), [RequireShard("batch", 0)])
    forced = _plan(block, Mesh((2,)), [RequireShard("batch", 0), ExpertParallel(0)])
    rules = {d.node: d.rule for d in forced.decisions.values() if "grouped_mm_fallback" in d.op}
    assert set(rules.values()) == {PER_TOKEN_EXPERTS}
    assert forced.param_placements["experts.gate_up_proj"] == (Shard(0),)
    assert free.param_placements["experts.gate_up_proj"] == (Replicate(),)  # what the planner weighs without it


def test_data_parallel_and_expert_parallel_on_two_axes(block):
    """Per token on "dp", experts split on "ep": the planner weighs running per token on "ep" too
    (each rank dispatching its own rows, rather than every "ep" rank routing the "dp" group's
    tokens), and takes it there, for every node of the region."""
    plan = _plan(block, Mesh((2, 2), ("dp", "ep")), [RequireShard("batch", "dp"), ExpertParallel("ep")])
    rules = {d.node: d.rule for d in plan.decisions.values() if "grouped_mm_fallback" in d.op}
    assert set(rules.values()) == {f"{PER_TOKEN}/{PER_TOKEN_EXPERTS}"}
    (region,) = find_regions(read_graph(block.graph_module))
    assert _region_axes(plan, region) == {frozenset({0, 1})}


def test_experts_biases_gathered_by_the_sorted_ids_run_per_token_and_sum_their_gradients():
    """GPT-OSS's experts add a bias per routed row, gathered from a per-expert table by the sorted
    ids, whose gradient is scattered back by them: part of the region (each rank's rows take their
    expert's bias from the whole table; the gradient, summed per expert over each rank's rows, is
    partial). Was a PlacementConflict on the sort, with the batch split and the experts on (2, 2)."""
    traced = trace_for_planning(transformers_gpt_oss_moe(), (torch.randn(4, 3, 8),),
                                dynamic_shapes={"hidden_states": {0: Dim("batch")}}, training=True)
    graph = read_graph(traced.graph_module)
    (region,) = find_regions(graph)
    tables = [name for name in region.placements if graph.nodes[name].target == "aten.index.Tensor"
              and graph.operand_meta(graph.nodes[name], 0).shape[0] == 4]
    assert len(tables) == 2  # gate-up and down biases
    plan = _plan(traced, Mesh((2, 2), ("dp", "ep")), [RequireShard("batch", "dp"), ExpertParallel("ep")])
    (axes,) = {per_token_rule_axes(plan.decisions[name].rule, 2) for name in region.placements}  # one set, all alike
    assert 0 in axes  # the batch's axis
    assert plan.param_placements["experts.gate_up_proj"] == (Replicate(), Shard(0))
    scatters = [name for name in region.placements if graph.nodes[name].target == "aten.index_put.default"
                and graph.nodes[name].output.shape[0] == 4]
    assert len(scatters) == 2 and all(region.placements[name][0] == (P_CODE,) for name in scatters)


@pytest.fixture(scope="module")
def gpt_oss():
    return trace_for_planning(transformers_gpt_oss_moe(), (torch.randn(4, 3, 8),),
                              dynamic_shapes={"hidden_states": {0: Dim("batch")}}, training=True)


BIASES = ("experts.gate_up_proj_bias", "experts.down_proj_bias")


@pytest.mark.parametrize("mesh, constraints, ep", [
    (Mesh((2,), ("dp",)), [RequireShard("batch", "dp"), ExpertParallel("dp")], 0),
    (Mesh((2, 2), ("dp", "ep")), [RequireShard("batch", "dp"), ExpertParallel("ep")], 1)], ids=["(2,)", "(2, 2)"])
def test_expert_parallel_splits_the_experts_biases_by_the_expert_dim_too(gpt_oss, mesh, constraints, ep):
    """Under expert parallelism each rank holds only its experts' biases (``Shard(0)`` on the
    experts' axis, like the weights): each gather of them by the sorted ids and each scatter of their
    gradient runs ``per_token+experts`` there, the gradient each expert's own on its rank (``S(0)``,
    no partial sum over that axis). Was: the tables whole on every rank, their gradient partial."""
    graph = read_graph(gpt_oss.graph_module)
    (region,) = find_regions(graph)
    plan = _plan(gpt_oss, mesh, constraints)
    assert {name: plan.param_placements[name][ep] for name in BIASES} == {name: Shard(0) for name in BIASES}
    tables = [name for name in region.placements if graph.nodes[name].target in ("aten.index.Tensor", "aten.index_put.default")
              and 4 in (graph.operand_meta(graph.nodes[name], 0).shape[0], graph.nodes[name].output.shape[0])]
    assert len(tables) == 4  # two gathers, two gradients
    assert {ep} <= {a for name in tables for a in per_token_rule_axes(plan.decisions[name].rule, mesh.ndim, experts=True)}
    gradients = [name for name in tables if graph.nodes[name].target == "aten.index_put.default"]
    assert all(plan.placements[name][ep] == Shard(0) for name in gradients)


def test_splitting_the_experts_biases_is_a_choice_the_planner_weighs(gpt_oss):
    """Without ``ExpertParallel`` a bias gather and a gradient scatter propose both forms on the
    per-token axis (the table whole, and split by the expert dim), each priced: the split form
    exchanges rows (it costs more compute seconds, with its all_to_alls) and holds less."""
    problem = prepare(gpt_oss.graph_module, Mesh((2,)), shape_env=gpt_oss.env, dims=gpt_oss.dim_exprs,
                      batch_sizes=[4096], constraints=CONSTRAINTS).problem
    (region,) = find_regions(problem.graph)
    for name in region.placements:
        node = problem.graph.nodes[name]
        if node.target != "aten.index.Tensor" or problem.graph.operand_meta(node, 0).shape[0] != 4:
            continue
        rules = {c.strategy.rule: c for c in problem.candidates[name]}
        whole, split = rules[PER_TOKEN], rules[PER_TOKEN_EXPERTS]
        assert whole.inputs[0] == (R_CODE,) and split.inputs[0] == (shard_code(0),)
        assert (split.compute > whole.compute).all()


def _region_axes(plan, region):
    """The sets of per-token axes the plan's decisions take across ``region``'s nodes (one: all alike)."""
    return {per_token_rule_axes(plan.decisions[name].rule, plan.mesh.ndim) for name in region.placements}


@pytest.mark.parametrize("batch, axes", [(65536, frozenset({0})), (4, frozenset())], ids=["large batch", "small batch"])
def test_a_default_plan_weighs_running_the_chain_per_token(block, batch, axes):
    """No constraint asks for it: at a large batch running the chain on each rank's own tokens costs
    less than replicating it, and every node of the region takes it; at a small batch, none does."""
    plan = planner.plan(block.graph_module, Mesh((2,)), shape_env=block.env, dims=block.dim_exprs, batch_sizes=[batch],
                        constraints=CONSTRAINTS)
    (region,) = find_regions(read_graph(block.graph_module))
    assert _region_axes(plan, region) == {axes}


def test_running_per_token_is_priced_as_each_ranks_share_of_the_chain(block, problems):
    """On (2,) a region node's per-token form computes half of what its replicated form does where it
    makes per-token rows (what makes counts, offsets or the experts' gradient, whole on each rank,
    no more than all of it); a plan running per token redistributes nothing between region nodes,
    the tokens split where they enter, and leaves the experts' gradient a partial sum."""
    problem = problems["(2,)"]
    (region,) = find_regions(problem.graph)
    for name, (outputs, _) in region.placements.items():
        candidates = problem.candidates[name]
        whole = next(c for c in candidates if PER_TOKEN not in c.strategy.rule
                     and all(codes in (None, (R_CODE,)) for codes in (*c.outputs, *c.inputs)))
        mine = next(c for c in candidates if c.strategy.rule == PER_TOKEN)
        if set(outputs) - {None} == {shard_code(0)}:  # (a grouped product reads its experts' weights whole)
            assert mine.compute == pytest.approx(whole.compute / 2, rel=1e-2), name
        else:
            assert (mine.compute <= whole.compute).all(), name
    plan = planner.plan(block.graph_module, Mesh((2,)), shape_env=block.env, dims=block.dim_exprs, batch_sizes=[65536],
                        constraints=CONSTRAINTS)
    assert _region_axes(plan, region) == {frozenset({0})}
    assert not [r for r in plan.redistributions if r.producer in region.placements and r.consumer in region.placements]
    assert plan.input_placements[0] == (Shard(0),)
    assert plan.decisions["grouped_mm_fallback_backward"].strategy.startswith("S(0) | P <- ")


def test_a_pin_on_one_region_node_decides_the_whole_region(block):
    """The sort's permutation pinned split (only running per token gives it so) takes every node of
    the region per token, at a batch where it would not pay; a product pinned whole besides is a
    conflict, said as such."""
    graph = read_graph(block.graph_module)
    (region,) = find_regions(graph)
    perm = next(n.name for n in graph if n.role == "getitem" and n.source == region.sort and n.index == 1)

    def plan(pins):
        return planner.plan(block.graph_module, Mesh((2,)), shape_env=block.env, dims=block.dim_exprs, batch_sizes=[4],
                            constraints=CONSTRAINTS, placement_constraints=pins)

    assert _region_axes(plan([Pin(perm, "S(0)")]), region) == {frozenset({0})}
    with pytest.raises(ValueError, match="may not all run per token on one set of mesh axes"):
        plan([Pin(perm, "S(0)"), Pin("grouped_mm_fallback", "R")])


@pytest.mark.parametrize("divisibility", ["prove", "assume", "uneven"])
def test_tokens_that_may_not_split_evenly_never_run_per_token(block, divisibility):
    """Without ``batch % 4 == 0`` the tokens (``3*batch``) split in 2 is refuted (batch 3): no policy
    offers the region per token, not even where it would cost least."""
    plan = planner.plan(block.graph_module, Mesh((2,)), shape_env=block.env, dims=block.dim_exprs, batch_sizes=[65536],
                        divisibility=divisibility)
    assert not any(PER_TOKEN in d.rule for d in plan.decisions.values())


MESHES = {"(2,)": Mesh((2,)), "(2, 2)": Mesh((2, 2))}


@pytest.fixture(scope="module")
def problems(block):
    """The block's problem on each mesh, at a batch where running per token is worth weighing."""
    graph = block.graph_module
    return {name: prepare(graph, mesh, shape_env=block.env, dims=block.dim_exprs, batch_sizes=[4096],
                          constraints=CONSTRAINTS).problem for name, mesh in MESHES.items()}


def _mixed_regions(problem, choices):
    """The regions whose nodes take different sets of per-token axes under ``choices``."""
    ndim = problem.mesh.ndim
    return [region.sort for region in find_regions(problem.graph)
            if len({per_token_rule_axes(problem.chosen(choices, name).strategy.rule, ndim) for name in region.placements}) > 1]


@contextlib.contextmanager
def _priced(problem, factors):
    """``problem`` with group ``g``'s compute per choice scaled by ``factors(g)`` for a while."""
    before = [group.compute for group in problem.groups]
    for g, group in enumerate(problem.groups):
        group.compute = group.compute * factors(g)[:, None]
    try:
        yield
    finally:
        for group, compute in zip(problem.groups, before):
            group.compute = compute


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mesh=st.sampled_from(list(MESHES)), seed=st.integers(0, 2**32 - 1))
def test_no_plan_mixes_per_token_and_other_nodes_of_a_region(problems, mesh, seed):
    """Whatever each choice costs, the ILP's and the greedy plans run a region's nodes per token on
    one set of axes: on each axis all of them or none."""
    problem = problems[mesh]
    assert problem.agreements  # the region is weighed
    rng = np.random.default_rng(seed)
    with _priced(problem, lambda g: np.exp(rng.uniform(-4.0, 4.0, problem.groups[g].choices))):
        for model in (IlpModel(problem), GreedyModel(problem)):
            assert _mixed_regions(problem, model.solve(problem.points.weights).choices) == []


def test_the_agreement_is_what_keeps_a_region_whole(problems):
    """Where the grouped products find running per token dear and the rest of the region cheap, the
    cheapest plan with no agreement mixes them; the ILP's and the greedy plans do not."""
    problem = problems["(2,)"]
    (members,) = problem.agreements
    products = {problem.group_of[name] for name in problem.graph.nodes if name.startswith("grouped_mm_fallback")}
    keys = dict(members)

    def factors(g):
        if g not in keys:
            return np.ones(problem.groups[g].choices)
        dear = 1e3 if g in products else 1e-3
        return np.array([dear if key else 1 / dear for key in keys[g]])

    with _priced(problem, factors):
        problem.agreements = []
        try:
            assert _mixed_regions(problem, IlpModel(problem).solve(problem.points.weights).choices)
        finally:
            problem.agreements = [members]
        for model in (IlpModel(problem), GreedyModel(problem)):
            assert _mixed_regions(problem, model.solve(problem.points.weights).choices) == []


def _bfloat16_block(training):
    """The block in bfloat16, which runs its experts as ``torch._grouped_mm`` (as on GPUs)."""
    return trace_for_planning(transformers_moe_block().to(torch.bfloat16), (torch.randn(4, 3, 8, dtype=torch.bfloat16),),
                              dynamic_shapes={"hidden_states": {0: Dim("batch")}}, training=training)


@pytest.fixture(scope="module")
def inferred():
    return _bfloat16_block(training=False)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_torch_grouped_mm_experts_run_per_token_and_expert_parallel(inferred, training):
    """Its chain is a region, as an inference trace writes it and in training, where each weight
    gradient is a product of the rows transposed (``Shard(1)`` per token) and the rows: ``Partial``."""
    traced = _bfloat16_block(training=True) if training else inferred
    graph = read_graph(traced.graph_module)
    (region,) = find_regions(graph)
    products = [name for name in region.placements if graph.nodes[name].target == "aten._grouped_mm.default"]
    # in training, both weights' gradients and the second product's rows' gradient (the first one's
    # rows are the block's input's, which takes none)
    assert len(products) == (5 if training else 2)
    weight_gradients = [name for name in products if graph.nodes[name].output.ndim == 3]
    assert len(weight_gradients) == 2 * training
    for name in weight_gradients:
        assert region.placements[name] == ((P_CODE,), (shard_code(1), shard_code(0), R_CODE))
    for constraints, rule in (([RequireShard("batch", 0)], PER_TOKEN),
                              ([RequireShard("batch", 0), ExpertParallel(0)], PER_TOKEN_EXPERTS)):
        plan = _plan(traced, Mesh((2,)), constraints)
        rules = {d.node: d.rule for d in plan.decisions.values() if d.op == "aten._grouped_mm.default"}
        assert {rules[name] for name in products if name not in weight_gradients} == {rule}
        # a weight gradient may also stay partial per token, its sum then scattered to the experts' owners
        assert {rules[name] for name in weight_gradients} <= {PER_TOKEN, rule}


def test_rows_transposed_that_are_read_outside_the_weight_gradient_are_no_region():
    traced = _bfloat16_block(training=True)
    graph = traced.graph_module.graph
    product = next(n for n in graph.nodes if str(n.target) == "aten._grouped_mm.default" and n.meta["val"].dim() == 3)
    with graph.inserting_after(product):
        leak = graph.call_function(torch.ops.aten.sum.default, (product.args[0],))  # the rows transposed, summed
    leak.meta["val"] = product.args[0].meta["val"].sum()
    try:
        assert find_regions(read_graph(traced.graph_module)) == []
    finally:
        graph.erase_node(leak)


@pytest.mark.parametrize("op, change", [("aten.arange.start_step", lambda args: (1, args[1])),
                                        ("aten.div.Tensor_mode", lambda args: (args[0], 3))],
                         ids=["positions from 1", "tokens of other copies"])
def test_an_inference_chain_that_differs_from_the_pattern_is_no_region(inferred, op, change):
    node = next(n for n in inferred.graph_module.graph.nodes if str(n.target) == op)
    with _changed(node, change(node.args)):
        assert find_regions(read_graph(inferred.graph_module)) == []


@contextlib.contextmanager
def _changed(node, args):
    """``node`` with the arguments ``args`` for a while."""
    before = node.args
    node.args = args
    try:
        yield
    finally:
        node.args = before


MUTATIONS = {  # op -> its arguments changed so that the per-token equality breaks
    "a descending sort": ("aten.sort", lambda args: (args[0], -1, True)),
    "counts over other bins": ("aten.histc", lambda args: (args[0], 5, 0, 4)),
    "tokens of other copies": ("aten.floor_divide", lambda args: (args[0], 3)),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_chain_that_differs_from_the_pattern_is_no_region(block, mutation):
    op, change = MUTATIONS[mutation]
    node = next(n for n in block.graph_module.graph.nodes if str(n.target).startswith(op + "."))
    with _changed(node, change(node.args)):
        assert find_regions(read_graph(block.graph_module)) == []


def test_a_region_tensor_read_outside_the_chain_is_no_region(block):
    graph = block.graph_module.graph
    rows = next(n for n in graph.nodes if str(n.target) == "transformers.grouped_mm_fallback.default")
    with graph.inserting_after(rows):
        leak = graph.call_function(torch.ops.aten.sum.default, (rows,))  # the sorted rows summed: no per-token value
    leak.meta["val"] = rows.meta["val"].sum()
    try:
        assert find_regions(read_graph(block.graph_module)) == []
    finally:
        graph.erase_node(leak)


def test_a_sort_that_heads_no_such_chain_is_still_refused():
    """The hand-cut routed MoE sorts with ``argsort`` and counts the unsorted ids (``one_hot``):
    not the pattern, so its sort keeps its refusal of the batch split."""
    traced = trace_for_planning(GroupedExperts(), (torch.randn(4, 6, 8),), dynamic_shapes={"x": {0: Dim("batch")}})
    assert find_regions(read_graph(traced.graph_module)) == []
    with pytest.raises(PlacementConflict, match=r"RequireShard\('batch', axis=0\) conflicts with the strategies of node sort"):
        _plan(traced, Mesh((2,)), [RequireShard("batch", 0)])
