"""Placement changes on local tensors, eagerly and compiled by Inductor with dynamic shapes (gloo)."""

import pytest
import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.fx.experimental.proxy_tensor import make_fx

from lowering.collectives import Step, all_reduce_over, apply_steps, gather_steps, local_shard
from lowering.errors import LoweringError
from lowering.launch import launch
from lowering.mesh_groups import MeshGroups, mesh_groups
from planner.mesh import Mesh

MESH = Mesh((2, 2), ("dp", "tp"))
R, P, S0, S1 = Replicate(), Partial(), Shard(0), Shard(1)

# (source placements, steps, target placements): every kind, on both axes, nested splits included.
CASES = [
    ((S0, R), [Step(0, "all_gather", S0, R)], (R, R)),
    ((S0, S0), [Step(1, "all_gather", S0, R), Step(0, "all_gather", S0, R)], (R, R)),
    ((R, R), [Step(0, "chunk", R, S1), Step(1, "chunk", R, S1)], (S1, S1)),
    ((P, R), [Step(0, "all_reduce", P, R)], (R, R)),
    ((R, P), [Step(1, "reduce_scatter", P, S1)], (R, S1)),
    ((S0, P), [Step(1, "reduce_scatter", P, S0)], (S0, S0)),
    ((S0, S1), [Step(1, "all_to_all", S1, S0)], (S0, S0)),
    ((S0, R), [Step(0, "all_to_all", S0, S1)], (S1, R)),
    ((R, S1), [Step(1, "all_to_all", S1, S0)], (R, S0)),
    ((P, S0), [Step(1, "all_gather", S0, R), Step(0, "reduce_scatter", P, S0)], (S0, R)),
]


def _source_piece(x, placements, groups):
    """This rank's piece of ``x`` placed as ``placements``; a Partial axis holds (coordinate + 1) * x."""
    scale = 1
    for axis, p in enumerate(placements):
        if isinstance(p, Partial):
            scale *= groups.coordinate[axis] + 1
    plain = tuple(R if isinstance(p, Partial) else p for p in placements)
    return local_shard(x, plain, groups) * scale


def _partial_total(placements):
    total = 1
    for axis, p in enumerate(placements):
        if isinstance(p, Partial):
            total *= sum(c + 1 for c in range(MESH.shape[axis]))
    return total


def _run_cases(rank):
    groups = mesh_groups(MESH)
    x = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
    for src, steps, dst in CASES:
        moved = apply_steps(_source_piece(x, src, groups), steps, src, dst, groups)
        expected = local_shard(x, dst, groups) * _partial_total(src)
        torch.testing.assert_close(moved, expected, msg=f"{src} -> {dst}")
        back = apply_steps(moved, gather_steps(dst), dst, (R, R), groups)
        torch.testing.assert_close(back, x * _partial_total(src), msg=f"gathering {dst}")
    return len(CASES)


@pytest.mark.slow  # gloo ranks
def test_every_kind_of_step_moves_the_data_where_the_target_placement_says():
    assert launch(_run_cases, 4, timeout=120) == [len(CASES)] * 4


def _wrong_nesting(rank):
    groups = mesh_groups(MESH)
    x = torch.zeros(8, 4)
    with pytest.raises(LoweringError, match="axis 1 still splits it inside"):
        apply_steps(local_shard(x, (S0, S0), groups), [Step(0, "all_gather", S0, R)], (S0, S0), (R, S0), groups)
    with pytest.raises(LoweringError, match="splits dim 1 outside the split by axis 1"):
        apply_steps(local_shard(x, (S0, S1), groups), [Step(0, "all_to_all", S0, S1)], (S0, S1), (S1, S1), groups)
    with pytest.raises(LoweringError, match="expects S\\(1\\) there"):
        apply_steps(x, [Step(0, "all_gather", S1, R)], (S0, R), (R, R), groups)
    with pytest.raises(LoweringError, match="end at"):
        apply_steps(x, [], (S0, R), (R, R), groups)
    return True


@pytest.mark.slow  # gloo ranks
def test_steps_that_would_scramble_nested_splits_or_do_not_fit_are_refused():
    assert launch(_wrong_nesting, 4, timeout=120) == [True] * 4


def _compiled_steps(rank):
    from torch._inductor.compile_fx import compile_fx

    groups = mesh_groups(Mesh((2,), ("tp",)))
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return compile_fx(gm, example_inputs)

    def program(x):
        y = apply_steps(x, [Step(0, "all_to_all", S0, S1)], (S0,), (S1,), groups)       # (2b, 4)
        y = apply_steps(y.relu(), [Step(0, "all_gather", S1, R)], (S1,), (R,), groups)  # (2b, 8)
        y = apply_steps(y * 2, [Step(0, "chunk", R, S0)], (R,), (S0,), groups)          # (b, 8)
        y = apply_steps(y + 1, [Step(0, "reduce_scatter", P, S1)], (P,), (S1,), groups)  # (b, 4)
        return apply_steps(y, [Step(0, "all_reduce", P, R)], (P,), (R,), groups)

    compiled = torch.compile(program, backend=backend, dynamic=True, fullgraph=True)
    for b in (3, 5, 8):
        x = torch.randn(b, 8, generator=torch.Generator().manual_seed(b * 10 + rank))
        torch.testing.assert_close(compiled(x), program(x))
    ops = {str(n.target) for n in compiles[0].graph.nodes if n.op == "call_function"}
    return len(compiles), sorted(op for op in ops if "c10d_functional" in op)


@pytest.mark.slow  # gloo ranks
def test_functional_collectives_compile_once_with_dynamic_shapes_on_gloo():
    results = launch(_compiled_steps, 2, timeout=240)
    for compiles, ops in results:
        assert compiles == 1
        assert ops == [f"_c10d_functional.{op}" for op in
                       ("all_gather_into_tensor", "all_reduce", "all_to_all_single", "reduce_scatter_tensor", "wait_tensor")]


@pytest.mark.parametrize("shape, placements", [((9, 4), (S0, R)), ((6, 4), (S0, S0)), ((8, 3), (R, S1))])
def test_a_size_the_mesh_does_not_divide_is_refused_instead_of_cut_short(shape, placements):
    # local_shard reads only this rank's coordinate: no process group needed
    groups = MeshGroups(MESH, None, (1, 1), ("dp", "tp"), torch.device("cpu"))
    with pytest.raises(ValueError, match="does not split into 2 equal pieces"):
        local_shard(torch.zeros(shape), placements, groups)


@pytest.mark.parametrize("step", [Step(1, "all_gather", S0, R), Step(1, "all_reduce", Partial("avg"), R),
                                  Step(1, "reduce_scatter", P, S1), Step(1, "all_to_all", S0, S1),
                                  Step(1, "chunk", R, S0), Step(1, "to_partial", R, P)],
                         ids=lambda step: step.kind)
def test_a_step_over_a_mesh_axis_of_size_one_runs_nothing(step):
    # one rank's piece is the whole tensor and its partial the whole sum: no collective, no mask, no copy;
    # the group's name is not even looked up (no process group exists here). Traced as lower() traces it,
    # with the mesh coordinate an input of the program
    groups = MeshGroups(Mesh((2, 1), ("dp", "one")), None, (1, 0), ("dp", "no group"), torch.device("cpu"))
    x, coordinate = torch.randn(4, 6), torch.tensor([1, 0])
    traced = make_fx(lambda t, c: apply_steps(t, [step], (S0, step.src), (S0, step.dst), groups, coordinate=c))(
        x, coordinate)
    assert [n.op for n in traced.graph.nodes] == ["placeholder", "placeholder", "output"]
    assert apply_steps(x, [step], (S0, step.src), (S0, step.dst), groups) is x


def test_an_ops_own_all_reduce_over_a_mesh_axis_of_size_one_runs_nothing():
    # a batch norm's synced statistics on a hand-made plan that splits the batch on a size-1 axis
    groups = MeshGroups(Mesh((2, 1), ("dp", "one")), None, (1, 0), ("dp", "no group"), torch.device("cpu"))
    x = torch.randn(3)
    assert all_reduce_over(x, [1], groups) is x
