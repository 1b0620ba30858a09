"""Hand-made plans, and one rank's view of a mesh with no process group, for lowering tests that
must not depend on the planner's choices or start processes; :func:`sized_groups` gives that view's
group names a size, so that a program with collectives is lowered (not run) in this process too."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch.distributed.device_mesh import DeviceMesh

from lowering.mesh_groups import MeshGroups

from planner.graph import input_roles, output_roles, read_graph
from planner.mesh import Mesh
from planner.placements import parse_placements
from planner.plan import CollectiveStep, CostBreakdown, Plan, Redistribution, SolverStats


def handmade_plan(gm, mesh: Mesh, placements: Mapping[str, str], *, redistributions: Sequence[tuple] = (),
                  guards: Sequence[str] = (), output_placements: Sequence[str] | None = None, exported=None) -> Plan:
    """A plan for ``gm``: ``placements`` node name -> text such as ``"S(0),R"`` (every tensor node);
    ``redistributions``: (consumer, operand, producer, src, dst, [(axis, kind, src, dst), ...]);
    ``exported``: the ExportedProgram ``gm`` came from, which says which placeholder is a parameter."""
    graph = read_graph(gm, exported=exported)
    parsed = {name: parse_placements(text) for name, text in placements.items()}
    moves = tuple(
        Redistribution(consumer, k, producer, parse_placements(src), parse_placements(dst),
                       tuple(CollectiveStep(a, kind, parse_placements(s)[0], parse_placements(d)[0], 0.0)
                             for a, kind, s, d in steps), 0.0)
        for consumer, k, producer, src, dst, steps in redistributions
    )
    outputs = output_placements if output_placements is not None else []
    return Plan(
        mesh=mesh, placements=parsed, tuple_placements={}, redistributions=moves, param_placements={},
        input_placements=tuple(None if name is None else parsed.get(name) for name in graph.inputs),
        output_placements=tuple(parse_placements(t) for t in outputs), trace_guards=tuple(guards), proofs=(),
        pruned=(), decisions={}, cost=CostBreakdown(), graph_inputs=input_roles(graph), graph_outputs=output_roles(graph),
        batch_costs=(), stats=SolverStats(solver="handmade", objective_kind="expected", status="optimal", graph_nodes=0,
                                          decision_nodes=0, variables=0, constraints=0, objective=0.0, bound=None,
                                          gap=None),
    )


def rank_view(mesh: Mesh, coordinate: Sequence[int], device: torch.device = torch.device("cpu")) -> MeshGroups:
    """The mesh as the rank at ``coordinate`` sees it, with no process group behind it: what
    needs no communication (sharding, registering DTensors, programs without collectives) runs
    in this process as that rank, its tensors on ``device`` (another than the CPU: programs
    lowered for it are traced on fake tensors there, never run)."""
    rank = sum(c * math.prod(mesh.shape[a + 1:]) for a, c in enumerate(coordinate))
    device_mesh = DeviceMesh("cpu", torch.arange(mesh.size).reshape(mesh.shape), mesh_dim_names=mesh.axis_names,
                             _init_backend=False, _rank=rank)
    return MeshGroups(mesh, device_mesh, tuple(coordinate), tuple(_group_name(name) for name in mesh.axis_names), device)


def _group_name(axis_name: str) -> str:
    """The name :func:`rank_view` gives the group of an axis: the same for every rank, as
    :func:`lowering.mesh_groups.mesh_groups` names it."""
    return f"unused:{axis_name}"


@contextmanager
def sized_groups(mesh: Mesh) -> Iterator[None]:
    """Within it, the group names of :func:`rank_view` resolve to process groups of their axis'
    size that cannot communicate: tracing a functional collective reads only its group's size, so
    any rank's program is lowered here, collectives included (not run)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import _register_process_group, _unregister_process_group

    names = [_group_name(name) for name in mesh.axis_names]
    groups = [dist.ProcessGroup(0, size) for size in mesh.shape]  # held: the registry keeps no reference
    for name, group in zip(names, groups):
        _register_process_group(name, group)
    try:
        yield
    finally:
        for name in names:
            _unregister_process_group(name)
