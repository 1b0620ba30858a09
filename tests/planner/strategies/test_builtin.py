"""The built-in rules compute the op they are proposed for: forward and backward ops, checked
piecewise against torch on real tensors (:mod:`tests.planner.strategies.differential`)."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import BuiltinProvider, DTensorProvider, Mesh
from planner.graph import read_graph
from planner.placements import Partial, Replicate, Shard
from planner.strategies.builtin import splits_experts
from tests.planner.strategies.differential import CASES, MESHES, check_all, real, trace


def _with_grads(fn, args):
    def step(*xs):
        xs = [x.detach().requires_grad_(x.is_floating_point()) for x in xs]
        out = fn(*xs)
        grads = torch.autograd.grad(out.sum(), [x for x in xs if x.requires_grad])
        return (out, *grads)

    return step, args


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_rules_compute_the_op(case):
    fn, args = CASES[case]
    assert check_all(fn, args, BuiltinProvider()) > 0


def test_fill_is_split_as_its_operand():
    """``x.new_empty_strided(...).fill_(1.0)`` traces to ``fill`` in a training graph, which DTensor
    keeps whole: a batch split met it as a conflict ("it may take only R")."""
    fn, args = CASES["fill"]
    assert check_all(fn, args, BuiltinProvider(), ops=["fill"]) >= 2 * 3  # per fill: its dims split, on (2,) and (2, 2)


@pytest.mark.parametrize("case", ["linear", "norms", "embedding", "attention", "conv", "pooling", "softmax", "broadcast",
                                  "slicing", "index", "index_put", "scatter", "index_add"])
def test_builtin_rules_compute_the_backward_ops(case):
    fn, args = _with_grads(*CASES[case])
    assert check_all(fn, args, BuiltinProvider(), mesh=Mesh((2,))) > 0


def test_batch_norm_with_batch_statistics_splits_the_batch_only_with_its_all_reduces_priced():
    def step(x, w, b, m, v):
        return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.1, 1e-5)

    gm, _ = trace(step, real(4, 6, 2, 2), real(6), real(6), real(6), real(6).abs())
    graph = read_graph(gm)
    node = next(n for n in graph if n.role == "op" and "batch_norm" in n.target)
    strategies = BuiltinProvider().strategies(node, graph, Mesh((2, 2)))
    split_batch = [s for s in strategies if any(p == Shard(0) for p in s.inputs[0])]
    assert split_batch and all(s.all_reduces for s in split_batch)
    assert {s.all_reduces for s in split_batch} >= {((0, 7), (0, 6)), ((0, 7), (0, 6), (1, 7), (1, 6))}
    assert not any(p in (Shard(2), Shard(3)) for s in strategies for p in s.inputs[0])  # spatial dims need the stats too


def test_factory_ops_may_be_created_as_this_ranks_piece_when_the_batch_is_required_split():
    import planner
    from planner import RequireShard
    from torch.export import Dim
    from tests.planner.models import Positions

    plan = planner.plan_module(Positions(), (torch.randn(8, 8),), dynamic_shapes=({0: 2 * Dim("batch")},),
                               mesh=Mesh((2,), ("dp",)), placement_constraints=[RequireShard("batch", axis="dp")])
    assert all(plan.placements[n] == (Shard(0),) for n in ("full", "new_empty_strided")), plan.placements
    assert plan.placements["arange"] == (Replicate(),)  # only replicates; its reader takes the piece


@st.composite
def _group_offsets(draw, dtype):
    """Cumulative row counts of 1 to 4 groups, some possibly empty, ending at a multiple of 8 rows
    (a matrix with rows as its columns keeps 16-byte strides in bfloat16, as ``_grouped_mm`` wants)."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    counts[-1] += -sum(counts) % 8 or (8 if sum(counts) == 0 else 0)
    return torch.tensor(counts, dtype=dtype).cumsum(0).to(dtype)


def _grouped_step(op):
    """``op(x, w, offs)`` and the gradients of ``<op(...), g>`` for ``x`` and ``w``."""
    def step(x, w, offs, g):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        out = op(x, w, offs)
        return (out, *torch.autograd.grad(out, [x, w], g))

    return step


@settings(max_examples=15, deadline=None)
@given(offs=_group_offsets(torch.int64))
def test_transformers_grouped_mm_fallback_rules_compute_the_op_and_its_backward(offs):
    import transformers.integrations.moe  # noqa: F401 - registers torch.ops.transformers.grouped_mm_fallback

    rows = int(offs[-1])
    step = _grouped_step(lambda x, w, offs: torch.ops.transformers.grouped_mm_fallback(x, w, offs))
    args = (real(rows, 4), real(len(offs), 4, 8), offs, real(rows, 8))
    for op in ("grouped_mm_fallback.default", "grouped_mm_fallback_backward.default"):
        assert check_all(step, args, BuiltinProvider(), ops=[op]) > len(MESHES)  # more than replicated


def test_transformers_grouped_mm_fallback_splits_its_experts_over_one_axis_exchanging_its_rows():
    import transformers.integrations.moe  # noqa: F401 - registers torch.ops.transformers.grouped_mm_fallback

    offs = torch.tensor([3, 3, 8, 8])
    gm, _ = trace(_grouped_step(lambda x, w, offs: torch.ops.transformers.grouped_mm_fallback(x, w, offs)),
                  real(8, 4), real(4, 4, 8), offs, real(8, 8))
    graph = read_graph(gm)
    for node in (n for n in graph if n.role == "op" and "grouped_mm_fallback" in n.target):
        expert_parallel = [s for s in BuiltinProvider().strategies(node, graph, Mesh((2, 2))) if "experts" in s.rule]
        assert {s.rule for s in expert_parallel} >= {"experts/replicate", "replicate/experts", "experts/columns"}
        assert not any(s.rule == "experts/experts" for s in expert_parallel)  # dispatched over one axis
        for s in expert_parallel:
            axis = s.rule.split("/").index("experts")
            assert s.inputs[1][axis] == Shard(0) and s.inputs[0][axis] == Shard(0) and s.inputs[2][axis] == Replicate()
            # the counts (offs), the rows (and, backward, their gradients) and the output rows sent
            exchanged = (2, 0, 3) if len(s.inputs) == 3 else (2, 0, 3, 4)
            assert s.all_to_alls == tuple((axis, k) for k in exchanged)


def test_torch_grouped_mm_splits_its_experts_in_its_forward_and_weight_gradient_layouts():
    """Its forward (rows by stacked experts) and its rows' gradient (the same layout) exchange the
    counts, their rows and the results, as ``grouped_mm_fallback`` does; its weight gradient
    (``[K, S] @ [S, N]``) the counts and the rows of both, keeping its experts' gradients."""
    offs = torch.tensor([3, 3, 5, 8], dtype=torch.int32)  # 8 rows: halves of 4, no 16 bytes of bfloat16 columns
    gm, _ = trace(_grouped_step(lambda x, w, offs: torch._grouped_mm(x, w, offs=offs)), real(8, 8, dtype=torch.bfloat16),
                  real(4, 8, 8, dtype=torch.bfloat16), offs, real(8, 8, dtype=torch.bfloat16))
    graph = read_graph(gm)
    nodes = [n for n in graph if n.target == "aten._grouped_mm.default"]
    # layout -> (dim of a that holds the rows, tensors exchanged)
    expected = {(2, 3): (0, (2, 0, 3)), (2, 2): (1, (2, 0, 1))}
    for node in nodes:
        metas = [graph.operand_meta(node, k) for k in range(len(node.operands))]
        rows, exchanged = expected[(metas[0].ndim, metas[1].ndim)]
        assert splits_experts(node, metas)
        expert_parallel = [s for s in BuiltinProvider().strategies(node, graph, Mesh((2, 2))) if "experts" in s.rule]
        assert {s.rule.split("/").count("experts") for s in expert_parallel} == {1}  # dispatched over one axis
        for s in expert_parallel:  # the rows it splits are dispatched: no 16-byte stride to keep
            axis = s.rule.split("/").index("experts")
            assert s.inputs[0][axis] == Shard(rows) and s.inputs[1][axis] == Shard(0) and s.inputs[2][axis] == Replicate()
            assert s.outputs[0][axis] == Shard(0)
            assert s.all_to_alls == tuple((axis, k) for k in exchanged)
    assert sorted(graph.operand_meta(n, 1).ndim for n in nodes) == [2, 3, 3]
    gm, _ = trace(lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), real(4, 8, 8, dtype=torch.bfloat16),
                  real(8, 8, dtype=torch.bfloat16), offs)  # [E, M, K] @ [K, S]: no stacked experts to split
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten._grouped_mm.default")
    assert not splits_experts(node, [graph.operand_meta(node, k) for k in range(3)])
    assert not any("experts" in s.rule for s in BuiltinProvider().strategies(node, graph, Mesh((2, 2))))


@pytest.mark.parametrize("dim, experts, chosen", [(1023, 64, "experts"), (7, 4, "replicate")])
def test_the_planner_splits_the_experts_where_that_is_cheaper(dim, experts, chosen):
    """64 experts of 1023 x 1023 weights (a hidden size no axis splits: no column or contraction
    split): reading them dominates, so each rank reads its half, its rows exchanged; 4 tiny
    experts: the exchanges' latency dominates, so they are replicated."""
    import planner
    from torch.export import Dim
    from tests.planner.models import GroupedExperts, on_meta

    plan = planner.plan_module(on_meta(GroupedExperts, dim, experts), (torch.randn(4, 6, dim, device="meta"),),
                               dynamic_shapes={"x": {0: Dim("batch")}}, mesh=(2,), batch_sizes=[4, 32], training=True)
    rules = {d.rule for d in plan.decisions.values() if "grouped_mm_fallback" in d.op}
    assert rules == {chosen}
    assert plan.param_placements["w"] == ((Shard(0),) if chosen == "experts" else (Replicate(),))


_GROUPED_MM_LAYOUTS = {
    "2d@3d, and its backward: 2d@3d and 2d@2d": (_grouped_step(lambda x, w, offs: torch._grouped_mm(x, w, offs=offs)),
                                                 lambda rows, groups: ((rows, 32), (groups, 32, 32), (rows, 32))),
    "3d@2d": (lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), lambda rows, groups: ((groups, 16, 32), (32, rows))),
}


@settings(max_examples=6, deadline=None)
@given(offs=_group_offsets(torch.int32))
@pytest.mark.parametrize("layout", sorted(_GROUPED_MM_LAYOUTS))
def test_grouped_mm_rules_compute_the_op_in_each_layout(layout, offs):
    fn, shapes = _GROUPED_MM_LAYOUTS[layout]
    run = [real(*shape, dtype=torch.float32) for shape in shapes(int(offs[-1]), len(offs))]
    run.insert(2, offs)
    traced = [t.bfloat16() if t.is_floating_point() else t for t in run]  # its meta function takes bfloat16 only
    assert check_all(fn, traced, BuiltinProvider(), ops=["_grouped_mm"], run=run) > len(MESHES)


def test_grouped_mm_without_offsets_is_a_batched_product():
    a, b = real(4, 16, 32, dtype=torch.float32), real(4, 32, 16, dtype=torch.float32)
    assert check_all(torch._grouped_mm, (a.bfloat16(), b.bfloat16()), BuiltinProvider(), run=(a, b)) > len(MESHES)


def test_grouped_mm_splits_a_matrix_dim_only_where_each_piece_keeps_16_byte_strides():
    offs = torch.tensor([4, 4, 16], dtype=torch.int32)
    gm, _ = trace(lambda x, w, offs: torch._grouped_mm(x, w, offs=offs), real(16, 16, dtype=torch.bfloat16),
                  real(3, 16, 32, dtype=torch.bfloat16), offs)
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten._grouped_mm.default")
    strategies = BuiltinProvider().strategies(node, graph, Mesh((2, 2)))
    weight = {s.inputs[1] for s in strategies}
    assert (Shard(2), Shard(2)) in weight  # 32 columns of bfloat16 in 4 pieces: 8, 16 bytes each
    assert (Shard(1), Replicate()) in weight  # 16 rows in 2 pieces: 8
    assert (Shard(1), Shard(1)) not in weight  # 16 rows in 4 pieces: 4, 8 bytes
    assert not any(isinstance(p, Shard) and p.dim == 0 for s in strategies if "experts" not in s.rule
                   for ps in s.inputs for p in ps)  # groups, rows: whole, but where dispatched to their expert's rank


def test_a_tiny_mixtral_plans_its_experts_by_the_grouped_product_rules():
    from torch.export import Dim

    import planner
    from tests.models.zoo import CASES, MIXTRAL_EXPERTS_SPLIT

    case = CASES["mixtral"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = planner.plan_module(case.model(), (case.batch(8)[0],), dynamic_shapes=({0: Dim("batch")},),
                                   mesh=Mesh((2,)), training=True, constraints=["Eq(Mod(batch, 2), 0)"],
                                   placement_constraints=MIXTRAL_EXPERTS_SPLIT, time_limit=10)
    assert not [w for w in caught if "grouped_mm" in str(w.message)], [str(w.message) for w in caught]
    rules = {d.node: (d.provider, d.rule) for d in plan.decisions.values() if "grouped_mm_fallback" in d.op}
    assert len(rules) == 4 and {p for p, _ in rules.values()} == {"builtin"}  # two products, two backwards
    assert rules["grouped_mm_fallback"][1] == "contraction" and rules["grouped_mm_fallback_1"][1] == "columns"
    assert not [r for r in plan.redistributions if r.consumer in ("grouped_mm_fallback", "grouped_mm_fallback_1")
                and r.operand == 1]  # the weights' pieces are used as they are


def test_floor_divide_splits_as_an_elementwise_op():
    """torch does not tag it pointwise; transformers' MoE routing divides token positions with it."""
    fn, args = CASES["floor_divide"]
    assert check_all(fn, args, BuiltinProvider(), ops=["floor_divide"]) > 2 * len(MESHES)  # more than replicated


def test_empty_permuted_is_created_as_this_ranks_piece_like_the_other_factory_ops():
    """An inference trace writes ``empty_like`` as ``empty_permuted`` (the lowering gives it the local size)."""
    gm, _ = trace(lambda x: torch.empty_permuted(x.shape, (1, 0), dtype=x.dtype).copy_(x) * 2, real(4, 6))
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten.empty_permuted.default")
    rules = {s.rule for s in BuiltinProvider().strategies(node, graph, Mesh((2,)))}
    assert rules == {"replicate", "S0", "S1"}


def test_scatter_splits_no_dim_along_which_its_index_is_smaller():
    """``index`` may be smaller than ``src`` (and, off ``dim``, than ``x``): their pieces would not line up."""
    i, s = torch.rand(4, 8, 4).argsort(1)[:, :4], real(4, 4, 4)
    gm, _ = trace(lambda x, i, s: (x.scatter_add(1, i[:, :2], s), x.scatter(1, i[:2], s)), real(4, 8, 4), i, s)
    graph = read_graph(gm)
    rules = {n.target: {s.rule for s in BuiltinProvider().strategies(n, graph, Mesh((2,)))}
             for n in graph if n.role == "op" and "scatter" in n.target}
    assert rules == {"aten.scatter_add.default": {"replicate", "S0", "S2", "partial"},
                     "aten.scatter.src": {"replicate", "S2"}}



def test_index_add_adds_a_piece_of_its_source_only_into_a_partial_x():
    """A rank adding its slices of ``source`` into a whole ``x`` (or into its piece of ``dim``,
    whose rows the index numbers globally) is never offered; nor a partial mask (``True + True`` is
    ``True``)."""
    i = torch.randint(0, 8, (4,))
    gm, _ = trace(lambda x, i, s, m: (x.index_add(1, i, s), m.index_add(1, i, m[:, :4])), real(4, 8, 4), i, real(4, 4, 4),
                  real(4, 8) > 0)
    graph = read_graph(gm)
    real_add, mask_add = (n for n in graph if n.target == "aten.index_add.default")
    strategies = BuiltinProvider().strategies(real_add, graph, Mesh((2, 2)))
    assert {r for s in strategies for r in s.rule.split("/")} == {"replicate", "S0", "S2", "partial", "index"}
    for s in strategies:
        (out,), (x, index, source) = s.outputs, s.inputs
        for axis in range(2):
            if source[axis] in (Partial(), Shard(1)):
                assert x[axis] == out[axis] == Partial()
            if index[axis] != Replicate():
                assert (x[axis], index[axis], source[axis]) == (Partial(), Shard(0), Shard(1))
    assert {s.rule for s in BuiltinProvider().strategies(mask_add, graph, Mesh((2,)))} == {"replicate", "S0"}


def test_index_select_gathers_a_partial_sum_into_a_partial_output_as_index_does():
    """Linear in ``x``: rows gathered from each rank's summand sum to the rows of the sum (the
    differential test above computes it); was: a partial ``x`` reduced before every gather."""
    fn, args = CASES["index_select"]
    gm, _ = trace(fn, *args)
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten.index_select.default")
    strategies = BuiltinProvider().strategies(node, graph, Mesh((2,)))
    assert [(s.inputs, s.outputs) for s in strategies if s.rule == "partial"] == [(((Partial(),), (Replicate(),)), ((Partial(),),))]
    assert check_all(fn, args, BuiltinProvider(), ops=["index_select"]) >= len(strategies)


def test_indexing_by_a_mask_is_left_to_the_next_provider():
    """A mask's result has as many rows as it has true entries."""
    gm, _ = trace(lambda x, m, v: torch.ops.aten.index_put(x, [m], v, True), real(4, 4), real(4) > 0, real(4))
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten.index_put.default")
    assert BuiltinProvider().strategies(node, graph, Mesh((2,))) is None


def test_a_conversion_keeps_a_partial_sum_only_where_it_keeps_sums():
    """Rounding to an integer does not (1.5 + 1.5 is 3, 1 + 1 is 2), nor does a mask (1 + -1 is 0)."""
    def fn(x):
        return x.long(), x.long().bool(), x.float(), x.long().double(), x.long().int(), (x > 0).double()

    gm, _ = trace(fn, real(4, 4))
    graph = read_graph(gm)
    partial = {(graph.operand_meta(n, 0).dtype, n.output.dtype):
               any(s.rule == "partial" for s in BuiltinProvider().strategies(n, graph, Mesh((2,))))
               for n in graph if n.target == "aten._to_copy.default"}
    assert partial == {("float64", "int64"): False, ("int64", "bool"): False, ("float64", "float32"): True,
                       ("int64", "float64"): True, ("int64", "int32"): True, ("bool", "float64"): True}
    assert check_all(fn, (real(4, 4) * 4,), BuiltinProvider(), ops=["_to_copy"]) > 0


def test_safe_softmax_offers_the_placements_dtensor_does():
    """SDPA's math path traces to ``_safe_softmax``; the built-in rule gives what DTensor's whole-mesh
    rule did (which priced every pair of its 125 placements on a 3-axis mesh, 1.4 CPU s per plan)."""
    gm, _ = trace(*CASES["safe_softmax"][:1], *CASES["safe_softmax"][1])
    graph = read_graph(gm)
    node = next(n for n in graph if n.target == "aten._safe_softmax.default")

    def placements(provider, mesh):
        return {(s.outputs, s.inputs) for s in provider.strategies(node, graph, mesh)}

    for mesh in [*MESHES, Mesh((2, 2, 2))]:
        assert placements(BuiltinProvider(), mesh) == placements(DTensorProvider(), mesh)
