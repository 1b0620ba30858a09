"""Step 3 of :func:`~planner.problem.build_problem`: each group's costs, and the edges between groups.

Group costs are ``[choices, points]`` sums over the group's nodes, each at the candidate it
picks for the choice. An edge inside a group becomes one of its :class:`~planner.problem.model.InnerEdges`;
edges across groups with the same tensor shape and the same producer-placement and
consumer-need partitions of their groups' choices share one :class:`~planner.problem.model.EdgeClass`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

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
    stacked: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # identical layers share both lists
    for node in problem.graph:
        group = problem.groups[problem.group_of[node.name]]
        candidates, pick = problem.candidates[node.name], problem.pick[node.name]
        found = stacked.get((id(candidates), id(pick)))
        if found is None:
            picked = [candidates[i] for i in pick]
            found = stacked[id(candidates), id(pick)] = (np.stack([c.compute for c in picked]),
                                                        np.stack([sum(c.memory.values(), np.zeros(n)) for c in picked]))
        group.compute += found[0]
        group.memory += found[1]


def add_edges(problem: Problem) -> None:
    """Fill every group's ``inner`` edges and ``problem.edge_classes``, in graph order."""
    classes: dict[tuple, EdgeClass] = {}
    sides: dict[tuple[int, int, int], _Side] = {}
    for node in problem.graph:
        for k, producer in enumerate(node.operands):
            _add_edge(problem, node, k, producer, classes, sides)
    problem.edge_classes = list(classes.values())


class _Side(NamedTuple):
    """The placement an edge's end takes at each choice of its group, and those choices partitioned by it."""

    placements: tuple[Codes, ...]
    blocks: list[tuple[Codes, list[int]]]
    key: tuple


def _side(problem: Problem, name: str, k: int, sides: dict[tuple[int, int, int], _Side]) -> _Side:
    """The producer side (``k`` = -1: its output) or consumer side (operand ``k``) of node ``name``'s
    edges; nodes sharing their candidates and pick (identical layers) share it."""
    candidates, pick = problem.candidates[name], problem.pick[name]
    found = sides.get((id(candidates), id(pick), k))
    if found is None:
        placements = tuple(candidates[i].outputs[0] if k < 0 else candidates[i].inputs[k] for i in pick)
        blocks = _partition(placements)  # type: ignore[arg-type]
        found = sides[id(candidates), id(pick), k] = _Side(placements, blocks, tuple((p, tuple(c)) for p, c in blocks))  # type: ignore[arg-type]
    return found


def _add_edge(problem: Problem, node: GraphNode, k: int, producer: str, classes: dict[tuple, EdgeClass],
              sides: dict[tuple[int, int, int], _Side]) -> None:
    meta = problem.graph.nodes[producer].output
    gp, gn = problem.group_of[producer], problem.group_of[node.name]
    given, needed = _side(problem, producer, -1, sides), _side(problem, node.name, k, sides)
    if gp == gn:
        if given.placements != needed.placements:
            inner = problem.groups[gn].inner.setdefault((meta, given.placements, needed.placements),
                                                        InnerEdges(meta, given.placements, needed.placements))  # type: ignore[arg-type]
            inner.count += 1
        return
    key = (meta, gp, given.key, gn, needed.key)
    found = classes.get(key)
    if found is None:
        found = classes[key] = EdgeClass(meta, gp, gn, given.blocks, needed.blocks)
    found.count += 1
    found.edges.append((node.name, k, producer))


def _partition(placements: Sequence[Codes]) -> list[tuple[Codes, list[int]]]:
    """Choices grouped by the placement they give, in order of first appearance."""
    out: dict[Codes, list[int]] = {}
    for c, p in enumerate(placements):
        out.setdefault(p, []).append(c)
    return list(out.items())
