"""Hand-made plans for lowering tests that must not depend on the planner's choices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.mesh import Mesh
from planner.placements import parse_placements
from planner.plan import CollectiveStep, CostBreakdown, Plan, Redistribution, SolverStats


def handmade_plan(gm, mesh: Mesh, placements: Mapping[str, str], *, redistributions: Sequence[tuple] = (),
                  guards: Sequence[str] = (), output_placements: Sequence[str] | None = None) -> Plan:
    """A plan for ``gm``: ``placements`` node name -> text such as ``"S(0),R"`` (every tensor node);
    ``redistributions``: (consumer, operand, producer, src, dst, [(axis, kind, src, dst), ...])."""
    parsed = {name: parse_placements(text) for name, text in placements.items()}
    moves = tuple(
        Redistribution(consumer, k, producer, parse_placements(src), parse_placements(dst),
                       tuple(CollectiveStep(a, kind, parse_placements(s)[0], parse_placements(d)[0], 0.0)
                             for a, kind, s, d in steps), 0.0)
        for consumer, k, producer, src, dst, steps in redistributions
    )
    outputs = output_placements if output_placements is not None else []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return Plan(
        mesh=mesh, placements=parsed, tuple_placements={}, redistributions=moves, param_placements={},
        input_placements=tuple(parsed.get(n.name) for n in placeholders),
        output_placements=tuple(parse_placements(t) for t in outputs), guards=tuple(guards), proofs=(),
        pruned=(), decisions={}, cost=CostBreakdown(),
        batch_costs=(), stats=SolverStats(solver="handmade", objective_kind="expected", status="optimal", graph_nodes=0,
                                          decision_nodes=0, variables=0, constraints=0, objective=0.0, bound=None,
                                          gap=None),
    )
