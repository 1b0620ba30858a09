"""Resharding: every arc of a state graph is a collective that really moves the data there,
and the cheapest path is the cheapest sequence of such steps."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.placements import P_CODE, R_CODE, decode, shard_code
from planner.resharding import StateGraph, transition_kind
from tests.planner.simulate import assemble, split

S0, S1 = shard_code(0), shard_code(1)


def test_transition_kinds():
    assert transition_kind((S0,), 0, R_CODE) == "all_gather"
    assert transition_kind((P_CODE,), 0, R_CODE) == "all_reduce"
    assert transition_kind((P_CODE,), 0, S1) == "reduce_scatter"
    assert transition_kind((R_CODE,), 0, S1) == "chunk"
    assert transition_kind((S0,), 0, S1) == "all_to_all"
    assert transition_kind((R_CODE,), 0, P_CODE) == "to_partial"
    assert transition_kind((S0,), 0, P_CODE) is None
    # an outer axis may not change a dim an inner axis still splits
    assert transition_kind((S0, S0), 0, R_CODE) is None
    assert transition_kind((R_CODE, S0), 0, S0) is None
    assert transition_kind((S0, S0), 1, R_CODE) == "all_gather"


def _apply(pieces, coords, mesh, axis, kind, old, new):
    """The collective ``kind`` on ``axis``, done by hand on every rank's piece."""
    out = {}
    n = mesh[axis]
    for coord in coords:
        group = [pieces[coord[:axis] + (c,) + coord[axis + 1 :]] for c in range(n)]
        mine = pieces[coord]
        if kind == "all_gather":
            out[coord] = torch.cat(group, dim=old - 2)
        elif kind == "all_reduce":
            out[coord] = sum(group)
        elif kind == "reduce_scatter":
            out[coord] = torch.chunk(sum(group), n, dim=new - 2)[coord[axis]]
        elif kind == "all_to_all":
            out[coord] = torch.chunk(torch.cat(group, dim=old - 2), n, dim=new - 2)[coord[axis]]
        elif kind == "chunk":
            out[coord] = torch.chunk(mine, n, dim=new - 2)[coord[axis]]
        else:  # to_partial
            out[coord] = mine if coord[axis] == 0 else torch.zeros_like(mine)
    return out


@pytest.mark.parametrize("mesh, shape", [((2, 2), (4, 8)), ((2, 3), (12, 6)), ((2, 2, 2), (8, 8))])
def test_every_arc_moves_the_data_it_claims(mesh, shape):
    value = torch.randn(shape, dtype=torch.float64)
    graph = StateGraph(len(shape), len(mesh), lambda s: True, lambda s: np.ones(1), lambda k, a, b, c: np.ones((len(b), 1)))
    coords = list(itertools.product(*(range(n) for n in mesh)))
    gen = torch.Generator().manual_seed(0)
    for i, j, axis, kind in graph.arcs:
        src, dst = graph.states[i], graph.states[j]
        pieces = split(value, decode(src), mesh, gen)
        moved = _apply(pieces, coords, mesh, axis, kind, src[axis], dst[axis])
        torch.testing.assert_close(assemble(moved, shape, decode(dst), mesh), value, msg=lambda m: f"{src} -> {dst} by {kind}: {m}")


def _graph(mesh):
    def nbytes(state):
        factor = math.prod(mesh[a] for a, c in enumerate(state) if c >= 2)
        return np.array([64.0 / factor, 4096.0 / factor])

    def cost(kind, axis, before, after):
        scale = {"all_gather": 1.0, "all_reduce": 2.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "chunk": 0.0, "to_partial": 0.0}[kind]
        return scale * (axis + 1) * np.maximum(before, after) + (0.0 if scale == 0 else 1.0)

    return StateGraph(2, len(mesh), lambda s: True, nbytes, cost)


def _cheapest_by_enumeration(graph, src, dst, weights, depth=4):
    best = math.inf
    frontier = [(graph.index[src], 0.0)]
    for _ in range(depth):
        nxt = []
        for state, cost in frontier:
            for a in graph.out[state]:
                total = cost + float(graph.costs[a] @ weights)
                j = graph.arcs[a][1]
                if graph.states[j] == dst:
                    best = min(best, total)
                nxt.append((j, total))
        frontier = nxt
    return best


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cheapest_path_is_cheapest(data):
    graph = _graph((2, 2))
    src = data.draw(st.sampled_from(graph.states))
    dst = data.draw(st.sampled_from(graph.states))
    weights = np.array(data.draw(st.sampled_from([(1.0, 0.0), (0.0, 1.0), (0.5, 0.5)])))
    path = graph.path(src, dst, weights)
    if src == dst:
        assert path == []
        return
    assert path is not None
    state = src
    for a in path:
        i, j, _, _ = graph.arcs[a]
        assert graph.states[i] == state
        state = graph.states[j]
    assert state == dst
    cost = sum(float(graph.costs[a] @ weights) for a in path)
    assert cost == pytest.approx(_cheapest_by_enumeration(graph, src, dst, weights), rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_distances_to_a_state_are_the_cheapest_paths_costs(data):
    graph = _graph((2, 2))
    dst = data.draw(st.sampled_from(graph.states))
    weights = np.array(data.draw(st.sampled_from([(1.0, 0.0), (0.0, 1.0), (0.5, 0.5)])))
    distances = graph.distances_to(dst, weights)
    for i, src in enumerate(graph.states):
        path = graph.path(src, dst, weights)
        expected = math.inf if path is None else sum(float(graph.costs[a] @ weights) for a in path)
        assert distances[i] == pytest.approx(expected, rel=1e-12)


def test_disallowed_states_are_never_passed_through():
    graph = StateGraph(2, 2, lambda s: S1 not in s, lambda s: np.ones(1), lambda k, a, b, c: np.ones((len(b), 1)))
    assert all(S1 not in s for s in graph.states)


def test_an_all_to_all_never_moves_a_dim_it_may_not_exchange():
    # dim 0 is data-dependent (uneven pieces): S(0) <-> S(1) goes through R by all_gather and chunk
    graph = StateGraph(2, 1, lambda s: True, lambda s: np.ones(1), lambda k, a, b, c: np.ones((len(b), 1)),
                       exchanged=lambda d: d != 0)
    assert not [arc for arc in graph.arcs if arc[3] == "all_to_all"]
    assert [graph.arcs[a][3] for a in graph.path((S0,), (S1,), np.ones(1))] == ["all_gather", "chunk"]
