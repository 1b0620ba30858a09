"""Step 3 of the decision problem: a group's costs are its nodes' costs at the candidates they
pick; an edge inside a group is counted in the group, and edges across groups share an edge class
only when they carry the same tensor shape between the same placements at every choice."""

from __future__ import annotations

import numpy as np


def _given(problem, name, choice):
    return problem.candidates[name][problem.pick[name][choice]].outputs[0]


def _needed(problem, name, k, choice):
    return problem.candidates[name][problem.pick[name][choice]].inputs[k]


def test_a_groups_costs_are_its_nodes_costs_at_the_candidates_they_pick(problem):
    for group in problem.groups:
        for c in range(group.choices):
            picked = [problem.candidates[n][problem.pick[n][c]] for n in group.nodes]
            np.testing.assert_allclose(group.compute[c], sum(p.compute for p in picked), rtol=1e-12)
            np.testing.assert_allclose(group.memory[c], sum(sum(p.memory.values()) for p in picked), rtol=1e-12)


def test_an_edge_class_gives_each_choice_of_its_groups_the_placement_every_edge_of_it_has(problem):
    for cls in problem.edge_classes:
        producers, consumers = problem.groups[cls.producer_group], problem.groups[cls.consumer_group]
        assert sorted(c for _, block in cls.rows for c in block) == list(range(producers.choices))
        assert sorted(c for _, block in cls.cols for c in block) == list(range(consumers.choices))
        for consumer, k, producer in cls.edges:
            assert problem.graph[consumer].operands[k] == producer and problem.graph[producer].output == cls.meta
            for placement, block in cls.rows:
                assert all(_given(problem, producer, c) == placement for c in block)
            for placement, block in cls.cols:
                assert all(_needed(problem, consumer, k, c) == placement for c in block)


def test_inner_edges_count_the_edges_of_a_group_whose_placements_differ_at_some_choice(problem):
    for g, group in enumerate(problem.groups):
        expected = {}
        for name in group.nodes:
            for k, producer in enumerate(problem.graph[name].operands):
                if problem.group_of[producer] != g:
                    continue
                given = tuple(_given(problem, producer, c) for c in range(group.choices))
                needed = tuple(_needed(problem, name, k, c) for c in range(group.choices))
                if given != needed:
                    key = (problem.graph[producer].output, given, needed)
                    expected[key] = expected.get(key, 0) + 1
        assert {key: inner.count for key, inner in group.inner.items()} == expected
