"""Experts split by the expert dim (the planner's ``experts`` rule, forced by ``ExpertParallel``)
lowered to dispatch, local experts and combine: a routed top-2 MoE whose 4 experts run as
transformers' grouped product, planned on 2 gloo ranks, runs and trains equal to one device
(output, loss and every gradient) from one compile, at batch sizes and routings that send one
rank no row; on a (2, 2) mesh too, the experts split over one axis, the plan free on the other;
and with its experts run as ``torch._grouped_mm`` (the op of GPUs) instead, transformers' block
too (inferring, per token).
transformers' own MoE block trains so with its batch split over the same axis too (data parallel:
each rank routes its own tokens, a per-token region, and dispatches all its rows), and on (2, 2)
with its batch split on one axis and its experts on the other, where the planner runs the region
per token on both; GPT-OSS's layer trains so with its per-expert bias tables split by the expert
dim too. Every rank's program of such a plan is the same graph text (the one compile rank 0 makes
serves every rank through Inductor's cache)."""

import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.tensor import Shard
from torch.export import Dim

from lowering import launch
from lowering.expert_parallel import local_counts
from lowering.lower import lower
from lowering.parallel import ParallelModule
from planner import ExpertParallel, Mesh, RequireShard, trace_module
from planner.problem.per_token import PER_TOKEN_EXPERTS
from planner.strategies.builtin import EXPERTS
from tests.lowering.handmade import rank_view, sized_groups
from tests.planner.models import GroupedExperts, transformers_gpt_oss_moe, transformers_moe_block

BATCHES = ((2, False), (4, True), (6, False))  # (batch, every token routed to experts 0 and 1: rank 1 gets no row)


def _model() -> GroupedExperts:
    """4 experts of 8 x 8 whose gate sends a token with a very negative first feature to experts 0 and 1."""
    torch.manual_seed(0)
    model = GroupedExperts()
    with torch.no_grad():
        model.gate.weight[:, 0] = torch.tensor([-3.0, -3.0, 3.0, 3.0])
    return model


def _tokens(batch: int, to_rank_0: bool) -> torch.Tensor:
    x = torch.randn(batch, 6, 8, generator=torch.Generator().manual_seed(batch))
    if to_rank_0:
        x[..., 0] = -4.0 - x[..., 0].abs()
    return x


class TorchGroupedExperts(GroupedExperts):
    """:class:`GroupedExperts` whose experts run as ``torch._grouped_mm`` (in bfloat16, which its
    meta function wants), as transformers' MoE layers do on GPUs; its routed rows are scaled by a
    learned vector first, so that in training they take a gradient, as a layer's activations do
    (the product of the results' gradient by the experts transposed)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def run_experts(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        offs = counts.cumsum(0).to(torch.int32)
        return torch._grouped_mm((routed * self.scale).bfloat16(), self.w.bfloat16(), offs).float()


def _torch_grouped_model() -> TorchGroupedExperts:
    """:func:`_model`'s experts and gate, run by ``torch._grouped_mm``."""
    model = TorchGroupedExperts()
    model.load_state_dict(_model().state_dict(), strict=False)  # all but the scale
    return model


def _moe_block():
    """transformers' Mixtral MoE block whose gate sends a token with a very negative first feature to experts 0 and 1."""
    model = transformers_moe_block()
    with torch.no_grad():
        model.gate.weight[:, 0] = torch.tensor([-3.0, -3.0, 3.0, 3.0])
    return model


def _run(rank, training, mesh, model=_model, experts="w", batches=BATCHES, **options):
    model = model()
    options = options or {"placement_constraints": [ExpertParallel("ep")]}
    pm = ParallelModule(model, (torch.randn(4, 6, 8),), dynamic_shapes=({0: Dim("batch")},), mesh=mesh,
                        batch_sizes=[4, 32], training=training, **options)
    errors, received = [], []
    for batch, to_rank_0 in batches:
        x = _tokens(batch, to_rank_0)
        with torch.set_grad_enabled(training):
            out = pm(*pm.shard_inputs(x)).full_tensor()
            expected = model(x)
        errors.append(float((out - expected).abs().max()) / (1 + float(expected.abs().max())))
        if training:
            loss, expected_loss = out.square().sum(), expected.square().sum()
            errors.append(abs(float(loss) - float(expected_loss)) / (1 + abs(float(expected_loss))))
            loss.backward()
            model.zero_grad()
            expected_loss.backward()
            for name, p in pm.named_parameters():
                grad = model.get_parameter(name).grad
                errors.append(float((p.grad.full_tensor() - grad).abs().max()) / (1 + float(grad.abs().max())))
            received.append(bool(pm.get_parameter(experts).grad.to_local().abs().sum() > 0))  # this rank's experts had rows
            for p in pm.parameters():
                p.grad = None
    all_to_alls = [n for n in pm.program.graph_module.graph.nodes if "all_to_all_single" in str(n.target)]
    return max(errors), pm.compile_count, pm.plan.param_placements[experts], len(all_to_alls), received


@pytest.mark.slow  # gloo ranks, Inductor compiles
# training on (2,) is transformers' Mixtral's (tests/models/test_training.py)
@pytest.mark.parametrize("training, mesh", [(False, Mesh((2,), ("ep",))), (True, Mesh((2, 2), ("dp", "ep")))],
                         ids=["inference", "training on (2, 2)"])
def test_experts_split_by_the_expert_dim_run_equal_to_one_device_from_one_compile(training, mesh):
    results = launch(functools.partial(_run, training=training, mesh=mesh), mesh.size, timeout=600)
    for rank, (error, compiles, w, all_to_alls, received) in enumerate(results):
        assert error <= 1e-5
        assert compiles == 1  # every batch size and routing
        assert w[-1] == Shard(0)  # each rank holds 2 of the 4 experts
        # the counts, the rows and the results exchanged; in training, again for the backward
        assert all_to_alls == 3 * (1 + training)
        if training:  # the second batch's rows all went to experts 0 and 1, which "ep" rank 0 holds
            assert received == [True, rank % 2 == 0, True]


@pytest.mark.slow  # gloo ranks, Inductor compiles
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_experts_of_torch_grouped_mm_split_by_the_expert_dim_run_equal_to_one_device_from_one_compile(training):
    """The same MoE, its experts one ``torch._grouped_mm`` (rows by stacked experts, offsets from
    the counts): the op transformers' MoE layers run on GPUs, planned expert parallel alike; in
    training its weight gradient (``[K, S] @ [S, N]``) and its rows' gradient (``[S, N] @ [E, N, K]``)
    too, each rank's rows and their gradients sent to their expert's rank and back."""
    mesh = Mesh((2,), ("ep",))
    run = functools.partial(_run, training=training, mesh=mesh, model=_torch_grouped_model, batches=BATCHES[:2])
    for rank, (error, compiles, w, all_to_alls, received) in enumerate(launch(run, mesh.size, timeout=600)):
        assert error <= 1e-2  # bfloat16 products, each expert's on its own rank
        assert compiles == 1
        assert w == (Shard(0),)
        # the counts, the rows and the results exchanged; in training, the counts and rows again
        # for the weight gradient, and the counts, the results' gradient and the rows' gradient
        # for the rows' gradient product
        assert all_to_alls == 3 + (2 + 3) * training
        if training:
            assert received == [True, rank == 0]  # the second batch's rows all went to experts 0 and 1


# The experts on another axis of (2, 2) (the chain run per token on both: each of the 4 ranks
# routing its own tokens, dispatching them over "ep") is the (2, 2) case of tests/models/
# test_training.py's six MoE decoders, which asserts those rules
@pytest.mark.slow  # gloo ranks, Inductor compiles
def test_data_parallel_with_the_experts_split_trains_equal_to_one_device_from_one_compile():
    """transformers' MoE block, its batch split (each rank routes its own tokens: per token) and its
    experts split over the same axis: each rank's own sorted rows go to their expert's rank and back."""
    mesh = Mesh((2,), ("dp",))
    run = functools.partial(_run, training=True, mesh=mesh, model=_moe_block, experts="experts.gate_up_proj",
                            batches=tuple((mesh.size * b, to_rank_0) for b, to_rank_0 in BATCHES),  # 2 rows a rank at least
                            constraints=[f"Eq(Mod(batch, {mesh.size}), 0)"],
                            placement_constraints=[RequireShard("batch", "dp"), ExpertParallel("dp")])
    for rank, (error, compiles, w, all_to_alls, received) in enumerate(launch(run, mesh.size, timeout=600)):
        assert error <= 1e-5
        assert compiles == 1
        assert w[-1] == Shard(0)
        assert all_to_alls == 3 * 4  # both products, forward and backward
        assert received == [True, rank == 0, True]  # the second batch's rows all went to experts 0 and 1


class _Routed(torch.nn.Module):
    """transformers' GPT-OSS MoE layer giving its output alone (not its router's scores), its gate
    sending a token with a very negative first feature to experts 0 and 1."""

    def __init__(self) -> None:
        super().__init__()
        self.block = transformers_gpt_oss_moe()
        with torch.no_grad():
            self.block.router.weight[:, 0] = torch.tensor([-3.0, -3.0, 3.0, 3.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)[0]


# The chain run whole (its tokens not split) with the tables split is GPT-OSS's case on (2,) in
# tests/models/test_training.py's six MoE decoders (their bias tables asserted Shard(0) there)
@pytest.mark.slow  # gloo ranks, Inductor compiles
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_experts_biases_split_by_the_expert_dim_run_equal_to_one_device(training):
    """GPT-OSS's experts add a bias per routed row from per-expert tables: with the experts split,
    each rank holds its experts' biases only (``Shard(0)``), serves them to the rows routed to its
    experts (the counts sent to it, the biases back) and, in training, sums their gradient per
    expert from the rows sent to it, here where each rank routes its own tokens (the batch split
    over the experts' axis), the tables riding on their products' exchanges. Runs and trains equal
    to one device from one compile, a routing that sends one rank no row included. Was: the tables
    whole on every rank, their gradient a partial sum; then exchanges of their own."""
    mesh = Mesh((2,), ("ep",))
    run = functools.partial(_run, training=training, mesh=mesh, model=_Routed, experts="block.experts.down_proj_bias",
                            batches=((4, False), (8, True)), constraints=["Eq(Mod(batch, 2), 0)"],
                            placement_constraints=[RequireShard("batch", "ep"), ExpertParallel("ep")])
    for rank, (error, compiles, bias, all_to_alls, received) in enumerate(launch(run, mesh.size, timeout=600)):
        assert error <= 1e-5
        assert compiles == 1
        assert bias == (Shard(0),)
        # both products (3 each: the counts, the rows, the results), each bias gather riding on its
        # product's (was: 2 more each, the counts and the biases); in training the products'
        # backward too, each gradient scatter summed from the rows its product's backward sends
        assert all_to_alls == 3 * 2 * (1 + training)
        assert received == ([True, rank == 0] if training else [])  # batch 8's rows all went to experts 0 and 1


class _BFloat16(torch.nn.Module):
    """``block`` in bfloat16 (its experts then run as ``torch._grouped_mm``), taking and giving float32."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x.bfloat16()).float()


def _bfloat16_moe_block() -> _BFloat16:
    return _BFloat16(_moe_block())


@pytest.mark.slow  # gloo ranks, Inductor compiles
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_data_and_expert_parallel_on_one_axis_runs_a_torch_grouped_mm_block_equal_to_one_device(training):
    """transformers' MoE block with its experts as ``torch._grouped_mm``: each rank routes its own
    tokens (a per-token region) and dispatches its own sorted rows to their expert's rank; in
    training the backward's products too, each weight gradient from the rows transposed."""
    mesh = Mesh((2,), ("dp",))
    run = functools.partial(_run, training=training, mesh=mesh, model=_bfloat16_moe_block,
                            experts="block.experts.gate_up_proj", batches=((4, False), (8, True)),
                            constraints=["Eq(Mod(batch, 2), 0)"],
                            placement_constraints=[RequireShard("batch", "dp"), ExpertParallel("dp")])
    for error, compiles, w, all_to_alls, _ in launch(run, mesh.size, timeout=600):
        assert error <= 2e-2  # bfloat16 products
        assert compiles == 1
        assert w == (Shard(0),)
        # both products; in training the second one's rows' gradient too (the planner keeps the
        # weight gradients partial per token, their sums scattered to the experts' owners)
        assert all_to_alls == 3 * (2 + training)


@pytest.mark.slow  # plans a MoE and lowers it for 2 ranks: seconds (no process, no compile)
@pytest.mark.parametrize("model, required, rule",
                         [(_model, [], EXPERTS), (_moe_block, [RequireShard("batch", "dp")], PER_TOKEN_EXPERTS)],
                         ids=["experts", "each rank routing its own tokens"])
def test_every_rank_of_an_expert_parallel_plan_lowers_to_the_same_program(model, required, rule):
    """Rank 0 compiles and the others load its result from Inductor's cache only when all ranks'
    graph texts are the same (``ParallelModule._compile_first``); each compiles its own otherwise.
    Which experts and rows are a rank's is read off the program's coordinate input, and its groups
    go by rank-independent names, so the ranks of a (2, 2) plan with the experts over "ep" lower to
    one text (the two ranks that differ on both axes lowered here): the rows a block of the sorted
    rows, or, the batch split over "dp" and each rank routing its own tokens, all of the rank's own."""
    mesh = Mesh((2, 2), ("dp", "ep"))
    traced = trace_module(model(), (torch.randn(8, 6, 8),), dynamic_shapes=({0: Dim("batch")},), training=True,
                          batch_sizes=[8, 32], constraints=["Eq(Mod(batch, 4), 0)"],
                          placement_constraints=[*required, ExpertParallel("ep")])
    plan = traced.plan(mesh)
    products = [d.rule.split("/")[1] for d in plan.decisions.values() if "grouped_mm" in d.node]
    assert products and set(products) == {rule}, products
    with sized_groups(mesh):
        first, last = (lower(traced.traced.graph_module, plan, groups=rank_view(mesh, c)).graph_module.code
                       for c in ((0, 0), (1, 1)))
    assert "all_to_all_single" in first
    assert first == last


@given(counts=st.lists(st.integers(0, 5), min_size=1, max_size=6), ranks=st.integers(1, 4), data=st.data())
def test_each_ranks_counts_are_its_block_of_the_sorted_rows_per_expert(counts, ranks, data):
    """Against the experts of each row of the rank's block, counted one by one (``len(counts)``: none)."""
    total = sum(counts) + data.draw(st.integers(0, 3))  # rows past the last offset: no expert's
    total += -total % ranks
    expert_of = [e for e, c in enumerate(counts) for _ in range(c)] + [len(counts)] * (total - sum(counts))
    rows = total // ranks
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    for rank in range(ranks):
        block = expert_of[rank * rows:(rank + 1) * rows]
        expected = [block.count(e) for e in range(len(counts))]
        assert local_counts(offs, rows, torch.tensor(rank)).tolist() == expected
