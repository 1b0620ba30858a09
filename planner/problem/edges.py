"""Step 3 of :func:`~planner.problem.build_problem`: each group's costs, and the edges between groups.

Group costs are ``[choices, points]`` sums over the group's nodes, each at the candidate it
picks for the choice. An edge inside a group becomes one of its :class:`~planner.problem.model.InnerEdges`;
edges across groups with the same tensor shape and the same producer-placement and
consumer-need partitions of their groups' choices share one :class:`~planner.problem.model.EdgeClass`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from planner.graph import GraphNode
from planner.placements import Codes
from planner.problem.model import EdgeClass, InnerEdges

if TYPE_CHECKING:
    from planner.problem.model import Problem

__all__ = ["add_group_costs", "add_edges"]


def add_group_costs(problem: Problem) -> None:
    """Fill every group's ``compute`` and ``memory``."""
    n = len(problem.points)
    for group in problem.groups:
        group.compute = np.zeros((group.choices, n))
        group.memory = np.zeros((group.choices, n))
    for node in problem.graph:
        group = problem.groups[problem.group_of[node.name]]
        candidates = problem.candidates[node.name]
        picked = [candidates[i] for i in problem.pick[node.name]]
        group.compute += np.stack([c.compute for c in picked])
        group.memory += np.stack([sum(c.memory.values(), np.zeros(n)) for c in picked])


def add_edges(problem: Problem) -> None:
    """Fill every group's ``inner`` edges and ``problem.edge_classes``, in graph order."""
    classes: dict[tuple, EdgeClass] = {}
    for node in problem.graph:
        for k, producer in enumerate(node.operands):
            _add_edge(problem, node, k, producer, classes)
    problem.edge_classes = list(classes.values())


def _add_edge(problem: Problem, node: GraphNode, k: int, producer: str, classes: dict[tuple, EdgeClass]) -> None:
    meta = problem.graph.nodes[producer].output
    gp, gn = problem.group_of[producer], problem.group_of[node.name]
    given = tuple(problem.candidates[producer][i].outputs[0] for i in problem.pick[producer])
    needed = tuple(problem.candidates[node.name][i].inputs[k] for i in problem.pick[node.name])
    if gp == gn:
        if given != needed:
            inner = problem.groups[gn].inner.setdefault((meta, given, needed), InnerEdges(meta, given, needed))  # type: ignore[arg-type]
            inner.count += 1
        return
    rows, cols = _partition(given), _partition(needed)  # type: ignore[arg-type]
    key = (meta, gp, tuple((p, tuple(c)) for p, c in rows), gn, tuple((p, tuple(c)) for p, c in cols))
    found = classes.get(key)
    if found is None:
        found = classes[key] = EdgeClass(meta, gp, gn, rows, cols)
    found.count += 1
    found.edges.append((node.name, k, producer))


def _partition(placements: Sequence[Codes]) -> list[tuple[Codes, list[int]]]:
    """Choices grouped by the placement they give, in order of first appearance."""
    out: dict[Codes, list[int]] = {}
    for c, p in enumerate(placements):
        out.setdefault(p, []).append(c)
    return list(out.items())
