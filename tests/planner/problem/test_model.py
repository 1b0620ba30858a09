"""The questions a Problem answers: a tensor's per-device shape under a placement, the divisibility
verdicts a placement relies on, the cheapest redistribution between two placements, and the
candidate each node takes under an assignment."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.placements import P_CODE, R_CODE, code_shard_axes, format_codes, shard_code
from planner.problem import MEMORY_PARTS


def _tensors(problem):
    """One node output per distinct shape, in graph order."""
    return list(dict.fromkeys(m for node in problem.graph for m in node.outputs if m is not None))


def _codes(problem, meta, *, partial=False):
    options = [R_CODE] + ([P_CODE] if partial else []) + [shard_code(d) for d in range(meta.ndim)]
    return [c for c in itertools.product(options, repeat=problem.mesh.ndim)]


@settings(max_examples=40)
@given(data=st.data())
def test_the_local_shape_divides_each_dim_by_the_mesh_axes_that_split_it(problem, data):
    meta = data.draw(st.sampled_from(_tensors(problem)))
    codes = data.draw(st.sampled_from(_codes(problem, meta, partial=True)))
    local = problem.local(meta, codes)
    assert local.itemsize == meta.itemsize and len(local.dims) == meta.ndim
    for d, size in enumerate(meta.shape):
        pieces = math.prod(problem.mesh.shape[a] for a in code_shard_axes(codes, d))
        np.testing.assert_array_equal(local.dims[d], np.ceil(problem.points.size(size) / pieces))


def test_verdicts_name_every_split_dim_and_its_divisor(problem):
    for meta in _tensors(problem):
        for codes in _codes(problem, meta):
            verdicts = problem.verdicts(meta, codes)
            split = sorted({c - 2 for c in codes if c >= 2})
            assert [d for d, _, _ in verdicts] == split
            for d, axes, verdict in verdicts:
                assert axes == code_shard_axes(codes, d)
                assert verdict == problem.divisibility.check(meta.shape[d], math.prod(problem.mesh.shape[a] for a in axes))
            assert problem.allowed(meta, codes) == all(v.allowed for _, _, v in verdicts)
    meta = _tensors(problem)[0]
    with pytest.raises(ValueError, match=rf"shards dim {meta.ndim} of a {meta.ndim}-d tensor"):
        problem.verdicts(meta, (shard_code(meta.ndim),) * problem.mesh.ndim)


@settings(max_examples=40)
@given(data=st.data())
def test_a_redistribution_steps_from_the_source_to_the_target_through_allowed_placements(problem, data):
    meta = data.draw(st.sampled_from(_tensors(problem)))
    allowed = [c for c in _codes(problem, meta, partial=True) if problem.allowed(meta, c)]
    src = data.draw(st.sampled_from(allowed))
    dst = data.draw(st.sampled_from([c for c in allowed if P_CODE not in c]))  # a partial sum is made, not reached
    weights = problem.points.weights
    moves = problem.moves(meta, src, dst, weights)
    state = list(src)
    total = np.zeros(len(problem.points))
    for axis, _, before, after, cost in moves:
        assert state[axis] == before and before != after
        state[axis] = after
        assert problem.allowed(meta, tuple(state)), f"passes through {format_codes(tuple(state))}"
        total = total + cost
    assert tuple(state) == dst and (moves == []) == (src == dst)
    np.testing.assert_allclose(problem.move_cost(meta, src, dst, weights), total, rtol=1e-12)


def test_an_assignment_gives_each_node_the_candidate_its_group_picks_and_its_true_cost(problem):
    choices = [g.choices - 1 for g in problem.groups]
    for node in problem.graph:
        candidate = problem.chosen(choices, node.name)
        assert candidate is problem.candidates[node.name][problem.pick[node.name][choices[problem.group_of[node.name]]]]
        assert problem.output_codes(choices, node.name) == candidate.outputs[0]
    evaluation = problem.evaluate(choices)
    assert set(evaluation.memory) == set(MEMORY_PARTS)
    np.testing.assert_allclose(evaluation.compute, sum(problem.chosen(choices, n.name).compute for n in problem.graph))
    np.testing.assert_allclose(evaluation.total, evaluation.compute + evaluation.communication)
    assert (evaluation.communication >= 0).all()
    again = problem.evaluate(choices, problem.points.weights)
    np.testing.assert_array_equal(again.total, evaluation.total)


def test_on_a_mesh_axis_of_size_one_nothing_is_placed_and_nothing_moves(problem_with_a_size_one_axis):
    # one rank's Shard is the whole tensor, its Partial the whole sum: only R, and no step over the axis
    problem = problem_with_a_size_one_axis
    placements = [p for cands in problem.candidates.values() for c in cands for p in (*c.outputs, *c.inputs) if p]
    assert placements and all(p[1] == R_CODE for p in placements)
    assert any(p[0] != R_CODE for p in placements)  # the size-2 axis still splits
    for meta in _tensors(problem):
        graph = problem.state_graph(meta)
        assert all(s[1] == R_CODE for s in graph.states) and all(axis == 0 for _, _, axis, _ in graph.arcs)
