"""lower(): the local graph emits exactly the plan's collectives, has polynomial shapes, and
computes the single-device result (run eagerly here; compiled runs are in test_parallel)."""

import functools

import pytest
import torch
from torch import nn
from torch.export import Dim

from lowering.collectives import gather_steps, apply_steps, local_shard
from lowering.errors import LoweringError
from lowering.launch import launch
from lowering.lower import EmittedCollective, lower
from planner.mesh import Mesh
from tests.lowering.handmade import handmade_plan, rank_view
from tests.lowering.single_device import errors_against

pytestmark = pytest.mark.slow  # gloo ranks


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).reshape(x.shape[0] // 2, 2, 8).softmax(-1)


def _export(model, batch=8):
    return torch.export.export(model, (torch.randn(batch, 8),), dynamic_shapes=({0: 4 * Dim("k")},)).graph_module


def _names(gm):
    return [n.name for n in gm.graph.nodes if n.op != "output"]


MEGATRON = {  # 2-D: batch on dp, column- then row-parallel on tp
    "p_fc1_weight": "R,S(0)", "p_fc1_bias": "R,S(0)", "p_fc2_weight": "R,S(1)", "x": "S(0),R",
    "linear": "S(0),S(1)", "relu": "S(0),S(1)", "linear_1": "S(0),R", "reshape": "S(0),R", "softmax": "S(0),R",
}
MEGATRON_MOVES = [("reshape", 0, "linear_1", "S(0),P", "S(0),R", [(1, "all_reduce", "P", "R")])]


def _megatron_plan(gm, mesh):
    placements = dict(MEGATRON, linear_1="S(0),P")
    return handmade_plan(gm, mesh, placements, redistributions=MEGATRON_MOVES, output_placements=["S(0),R"])


def _run_eagerly(program, model, x):
    """Global output of ``program`` for global input ``x`` (shard, run, gather)."""
    params = dict(model.named_parameters())
    tensors = []
    for i in program.inputs:
        full = x if i.name == "x" else params[i.name.removeprefix("p_").replace("_", ".", 1)].detach()
        tensors.append(local_shard(full, i.placements, program.groups))
    values = program.localizer.local_values({program.symbols[0].of: x.shape[0] // 4})
    (out,) = program([values[s.name] for s in program.symbols], tensors)
    placements = program.output_placements[0]
    return apply_steps(out, gather_steps(placements), placements, (torch.distributed.tensor.Replicate(),) * 2,
                       program.groups)


def _megatron(rank):
    torch.manual_seed(0)
    model = MLP()
    gm = _export(model)
    program = lower(gm, _megatron_plan(gm, Mesh((2, 2), ("dp", "tp"))))
    collectives = [str(n.target) for n in program.graph_module.graph.nodes if "c10d_functional" in str(n.target)]
    shapes = [str(n.meta["val"].shape) for n in program.graph_module.graph.nodes
              if isinstance(n.meta.get("val"), torch.Tensor)]
    results = []
    for batch in (8, 24):
        x = torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))
        results.append(bool(torch.allclose(_run_eagerly(program, model, x), model(x), rtol=1e-4, atol=1e-6)))
    return program.collectives, collectives, shapes, repr(program.localizer), results


def test_the_local_graph_emits_exactly_the_planned_collectives_and_polynomial_shapes():
    for emitted, ops, shapes, localizer, results in launch(_megatron, 4, timeout=120):
        assert emitted == (EmittedCollective("reshape", 0, "linear_1", 1, "all_reduce"),)
        assert ops == ["_c10d_functional.all_reduce.default", "_c10d_functional.wait_tensor.default"]
        assert localizer.endswith(" = 1*b0)")  # global batch 4*k split in 2 is 2*k: no proof needed
        assert not [s for s in shapes if "//" in s or "FloorDiv" in s]
        assert results == [True, True]


def _broken(rank, placements, moves, match):
    gm = _export(MLP())
    plan = handmade_plan(gm, Mesh((2,), ("tp",)), placements, redistributions=moves, output_placements=["R"])
    with pytest.raises(LoweringError, match=match):
        lower(gm, plan)
    return True


TP = {"p_fc1_weight": "S(0)", "p_fc1_bias": "S(0)", "p_fc2_weight": "S(1)", "x": "R", "linear": "S(1)",
      "relu": "S(1)", "linear_1": "P", "reshape": "R", "softmax": "R"}


@pytest.mark.parametrize("placements, moves, match", [
    # relu claims a whole tensor while its operand is split and nothing gathers it.
    (dict(TP, relu="R"), [], r"node relu: the local result has shape \[4\*b0, 8\] but placement R"),
    # softmax needs its last dim whole.
    (dict(TP, reshape="S(2)", softmax="S(2)"), [("reshape", 0, "linear_1", "P", "S(1)", [(0, "reduce_scatter", "P", "S(1)")])],
     r"softmax .* needs dim 2 of reshape whole"),
    # the redistribution starts from a placement the producer does not have.
    (TP, [("reshape", 0, "linear_1", "R", "R", [])], r"places linear_1 as \(Partial\(sum\),\), not"),
])
def test_a_plan_the_lowering_cannot_honour_is_refused_with_the_node_named(placements, moves, match):
    import functools

    assert launch(functools.partial(_broken, placements=placements, moves=moves, match=match), 2, timeout=120) == [True, True]


def test_on_a_one_device_mesh_the_local_program_has_no_collective_and_computes_the_model():
    # the tensor-parallel plan on a mesh of one: each step over its axis is no op at all (no process group here)
    torch.manual_seed(0)
    model = MLP()
    gm = _export(model)
    plan = handmade_plan(gm, Mesh((1,), ("tp",)), TP, output_placements=["S(0)"],
                         redistributions=[("reshape", 0, "linear_1", "P", "R", [(0, "all_reduce", "P", "R")]),
                                          ("output", 0, "softmax", "R", "S(0)", [(0, "chunk", "R", "S(0)")])])
    program = lower(gm, plan, groups=rank_view(plan.mesh, (0,)))
    assert [c.kind for c in program.collectives] == ["all_reduce", "chunk"]  # the plan's steps, each emitted as nothing
    assert not [n for n in program.graph_module.graph.nodes if "c10d" in str(n.target)]
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(12))
    params = dict(model.named_parameters())
    tensors = [x if i.name == "x" else params[i.name.removeprefix("p_").replace("_", ".", 1)].detach()
               for i in program.inputs]
    values = program.localizer.local_values({program.symbols[0].of: 3})
    (out,) = program([values[s.name] for s in program.symbols], tensors)
    torch.testing.assert_close(out, model(x))


class _Slices(nn.Module):
    """Slices and selects off the batch dim: their backward ops take the gradient's full size as an argument."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return y[:, 2:] * y.select(1, 0).unsqueeze(1)


_DATA_PARALLEL = {  # _Slices' joint graph, the batch split: weights whole, their gradients summed across ranks
    **dict.fromkeys(["primals_1", "primals_2", "t"], "R"),
    **dict.fromkeys(["primals_3", "tangents_1", "addmm", "slice_1", "slice_2", "select", "unsqueeze", "sum_1", "squeeze",
                     "select_backward", "slice_backward", "slice_backward_1"], "S(0)"),
    "t_1": "S(1)", **dict.fromkeys(["mm", "t_2", "sum_2", "view", "t_3"], "P")}


def _data_parallel(gm):
    """:data:`_DATA_PARALLEL` with the graph's products and its one sum (of the two paths of ``x``'s
    gradient) split too: found by their ops, as torch releases number them differently
    (2.13: ``mul_10``, ``mul_13``, ``mul_14``, ``add_17``; 2.15: ``mul``, ``mul_1``, ``mul_2``, ``add``)."""
    elementwise = [n.name for op in (torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor)
                   for n in gm.graph.find_nodes(op="call_function", target=op)]
    return {**_DATA_PARALLEL, **dict.fromkeys(elementwise, "S(0)")}


_SUM_GRADIENTS = [("output", k, name, "P", "R", [(0, "all_reduce", "P", "R")]) for k, name in ((1, "t_3"), (2, "view"))]


def _sliced_training(rank):
    from shapecore.torch import trace_for_planning

    torch.manual_seed(0)
    model = _Slices()
    gm = trace_for_planning(model, (torch.randn(4, 8),), dynamic_shapes=({0: 2 * Dim("k")},), training=True).graph_module
    plan = handmade_plan(gm, Mesh((2,), ("dp",)), _data_parallel(gm), redistributions=_SUM_GRADIENTS,
                         output_placements=["S(0)", "R", "R"])
    program = lower(gm, plan)
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(6))
    full = {"primals_1": model.fc.weight.detach(), "primals_2": model.fc.bias.detach(), "primals_3": x,
            "tangents_1": torch.ones(6, 6)}
    tensors = [local_shard(full[i.name], i.placements, program.groups) for i in program.inputs]
    values = program.localizer.local_values({program.symbols[0].of: 3})
    _, weight_grad, bias_grad = program([values[s.name] for s in program.symbols], tensors)[:3]
    model(x).sum().backward()
    return float((weight_grad - model.fc.weight.grad).abs().max()), float((bias_grad - model.fc.bias.grad).abs().max())


def test_slice_and_select_backward_allocate_the_local_gradient_when_the_batch_is_split():
    for errors in launch(_sliced_training, 2, timeout=120):
        assert max(errors) < 1e-5, errors


class _Gather(nn.Module):
    """A table read at the positions an index gives (BERT's token_type_ids: ``torch.gather`` of a buffer)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 8))

    def forward(self, index):
        return torch.gather(self.table.expand(index.shape[0], -1), 1, index) * 2


def _gather_with_a_split_index(rank):
    torch.manual_seed(0)
    model = _Gather()
    index = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(4))
    gm = torch.export.export(model, (index,), dynamic_shapes=({0: Dim("batch")},)).graph_module
    # the index split along the gathered dim (DTensor's index sharding): the output follows it, the table is whole
    placements = {"p_table": "R", "expand": "R", "index": "S(1)", "gather": "S(1)", "mul": "S(1)"}
    program = lower(gm, handmade_plan(gm, Mesh((2,), ("tp",)), placements, output_placements=["S(1)"]))
    full = {"p_table": model.table.detach(), "index": index}
    tensors = [local_shard(full[i.name], i.placements, program.groups) for i in program.inputs]
    values = program.localizer.local_values({program.symbols[0].of: 4})
    (out,) = program([values[s.name] for s in program.symbols], tensors)
    whole = apply_steps(out, gather_steps(program.output_placements[0]), program.output_placements[0],
                        (torch.distributed.tensor.Replicate(),), program.groups)
    return bool(torch.equal(whole, model(index)))


def test_gather_takes_an_index_split_along_the_gathered_dim():
    # was refused: "gather needs dim 1 of index whole", though only the gathered tensor needs it whole
    assert launch(_gather_with_a_split_index, 2, timeout=120) == [True, True]


def test_an_uneven_split_of_a_size_that_is_not_data_dependent_is_refused_before_any_process_group():
    import planner
    from planner import RequireShard
    from shapecore.torch import trace_for_planning

    traced = trace_for_planning(MLP(), (torch.randn(8, 8),), dynamic_shapes={"x": {0: 4 * Dim("k")}})
    plan = planner.plan(traced.graph_module, Mesh((3,)), shape_env=traced.env, dims=traced.dim_exprs,
                        divisibility="uneven", placement_constraints=[RequireShard("k", 0)])
    assert any(p.status == "uneven" and p.size.startswith("4*s") for p in plan.proofs)
    with pytest.raises(LoweringError, match=r"\(size 4\*k\) unevenly; the lowering splits unevenly only a data-dependent size"):
        lower(traced.graph_module, plan)  # the size in the Dim's name, not the trace's symbol


def _factory_pieces(rank):
    from lowering.parallel import ParallelModule
    from planner import RequireShard
    from tests.planner.models import Positions

    torch.manual_seed(0)
    model = Positions()
    pm = ParallelModule(model, (torch.randn(8, 8),), dynamic_shapes=({0: 2 * Dim("batch")},), mesh=Mesh((2,), ("dp",)),
                        placement_constraints=[RequireShard("batch", axis="dp")])
    same = []
    for batch in (4, 10):
        x = torch.randn(batch, 8)
        same.append(bool(torch.allclose(pm(*pm.shard_inputs(x)).full_tensor(), model(x), rtol=1e-5, atol=1e-6)))
    return same, pm.compile_count, [str(pm.plan.placements[n]) for n in ("full", "new_empty_strided")]


def test_factory_ops_created_as_this_ranks_piece_compute_the_single_device_result():
    for same, compiles, placed in launch(_factory_pieces, 2, timeout=300):
        assert same == [True, True] and compiles == 1
        assert set(placed) == {"(Shard(dim=0),)"}


class _ScatterBack(nn.Module):
    """Rows picked by an index (``x[index]``), through a layer, added back where they came from
    (``index_put`` accumulating): a mixture of experts' routing by hand."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, index):
        return torch.zeros_like(x).index_put((index,), self.fc(x[index]), accumulate=True)


def _scatter_back_by_a_split_index(rank, training):
    from lowering.parallel import ParallelModule
    from planner import Pin, RequireShard

    torch.manual_seed(0)
    model = _ScatterBack()
    pm = ParallelModule(model, (torch.randn(6, 8), torch.randint(0, 6, (4,))), mesh=Mesh((2,)), training=training,
                        dynamic_shapes=({0: Dim("batch")}, {0: 2 * Dim("routed")}),
                        placement_constraints=[RequireShard("routed", 0), Pin("index_put", "P")])
    errors = []
    for batch, routed in ((6, 4), (10, 12)):
        generator = torch.Generator().manual_seed(batch)
        x, index = torch.randn(batch, 8, generator=generator), torch.randint(0, batch, (routed,), generator=generator)
        errors.extend(errors_against(pm, model, (x, index), training=training))
    rules = {d.node: d.rule for d in pm.plan.decisions.values() if "index" in d.op}
    return max(errors), pm.compile_count, rules


@pytest.mark.parametrize("training", [False, True])
def test_rows_gathered_and_added_back_by_a_split_index_compute_the_single_device_result(training):
    """``x[index]`` split by the index's pieces (``x`` whole), and ``index_put`` accumulating each
    rank's rows into a partial result (its backward gathers the gradient's rows alike)."""
    for error, compiles, rules in launch(functools.partial(_scatter_back_by_a_split_index, training=training), 2,
                                         timeout=300):
        assert error < 1e-5 and compiles == 1
        assert set(rules.values()) == {"index0"}, rules
