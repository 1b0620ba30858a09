"""The decision problem prices every assignment exactly as the graph does: its groups and edge
classes are a faithful decomposition of :meth:`Problem.evaluate` (what the solvers rely on)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.problem import MEMORY_PARTS


def _placement(partition, choice):
    return next(p for p, choices in partition if choice in choices)


def test_groups_and_edge_classes_cover_every_node_and_edge_once(problem):
    if problem.clusters:
        assert problem.shared and problem.merged_followers
    assert sorted(n for g in problem.groups for n in g.nodes) == sorted(node.name for node in problem.graph)
    for node in problem.graph:
        assert len(problem.pick[node.name]) == problem.groups[problem.group_of[node.name]].choices
    across = sorted((node.name, k, p) for node in problem.graph for k, p in enumerate(node.operands)
                    if problem.group_of[p] != problem.group_of[node.name])
    assert sorted(e for c in problem.edge_classes for e in c.edges) == across
    assert all(c.count == len(c.edges) for c in problem.edge_classes)
    for name, representative in problem.shared.items():
        assert problem.candidates[name] is problem.candidates[representative]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_group_and_edge_class_costs_sum_to_the_true_cost(problem, data):
    choices = [data.draw(st.integers(0, g.choices - 1)) for g in problem.groups]
    weights = problem.points.weights
    total = sum(problem.group_costs(g, weights)[c] for g, c in enumerate(choices))
    for edges in problem.edge_classes:
        src = _placement(edges.rows, choices[edges.producer_group])
        dst = _placement(edges.cols, choices[edges.consumer_group])
        total = total + edges.count * problem.move_cost(edges.meta, src, dst, weights)
    memory = sum(problem.groups[g].memory[c] for g, c in enumerate(choices))
    truth = problem.evaluate(choices, weights)
    np.testing.assert_allclose(total, truth.total, rtol=1e-9)
    held = sum(problem.candidates[n][problem.pick[n][choices[problem.group_of[n]]]].memory.get(part, 0.0)
               for n in problem.liveness.holders for part in MEMORY_PARTS)
    np.testing.assert_allclose(memory, held, rtol=1e-9)  # a group's memory: what its nodes hold, all at once
