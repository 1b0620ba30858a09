"""Resharding: the placements a tensor may pass through, and the cheapest way between two.

A redistribution changes one mesh axis at a time (:class:`~planner.plan.CollectiveStep`):

=============  ==================  =====================
from → to      collective          needs
=============  ==================  =====================
``S(d) → R``   ``all_gather``      no later axis shards ``d``
``P → R``      ``all_reduce``
``P → S(d)``   ``reduce_scatter``  no later axis shards ``d``
``R → S(d)``   ``chunk`` (local)   no later axis shards ``d``
``S(d)→S(e)``  ``all_to_all``      no later axis shards ``d`` or ``e``
``R → P``      ``to_partial``
=============  ==================  =====================

The "no later axis" conditions keep DTensor's nesting order (a lower mesh axis is the outer
split of a dim), so every intermediate state is a placement the lowering can hold.

:class:`StateGraph` is, for one tensor, every placement that passes the divisibility policy
(its *states*) and every legal single-axis step between them (its *arcs*, each with a cost
vector over the batch points). The cheapest redistribution is a shortest path in it; the ILP
routes a unit of flow through the same arcs, so the solver and the plan price a
redistribution identically. Placements are compact codes (:mod:`planner.placements`).
Dijkstra breaks ties by state order, so paths are deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import numpy as np

from planner.placements import P_CODE, R_CODE, Codes
from planner.plan import CollectiveKind

__all__ = ["transition_kind", "StateGraph"]


def transition_kind(state: Codes, axis: int, new: int) -> CollectiveKind | None:
    """The collective that changes ``state[axis]`` to ``new``, or None if not allowed there."""
    old = state[axis]
    if old == new:
        return None
    later = state[axis + 1 :]
    if new == P_CODE:
        return "to_partial" if old == R_CODE else None
    if old >= 2:  # Shard
        if old in later:
            return None
        if new == R_CODE:
            return "all_gather"
        return None if new in later else "all_to_all"
    if old == P_CODE:
        if new == R_CODE:
            return "all_reduce"
        return None if new in later else "reduce_scatter"
    return None if new in later else "chunk"  # Replicate -> Shard


class StateGraph:
    """Allowed placements of one tensor and the single-axis steps between them.

    ``bytes_of(state)`` gives local bytes per device at every batch point; ``collective(kind,
    axis, before, after)`` prices a step from arrays of bytes (one row per arc);
    ``exchanged(d)``: whether an ``all_to_all`` may move dim ``d`` (a data-dependent dim's
    uneven pieces move by an ``all_gather`` then a ``chunk``, priced as such).
    """

    def __init__(
        self,
        tensor_ndim: int,
        mesh_ndim: int,
        allowed: Callable[[Codes], bool],
        bytes_of: Callable[[Codes], np.ndarray],
        collective: Callable[[CollectiveKind, int, np.ndarray, np.ndarray], np.ndarray],
        exchanged: Callable[[int], bool] = lambda d: True,
    ) -> None:
        options = [R_CODE, P_CODE] + [2 + d for d in range(tensor_ndim)]
        self.states: list[Codes] = [s for s in itertools.product(options, repeat=mesh_ndim) if allowed(s)]
        self.index: dict[Codes, int] = {s: i for i, s in enumerate(self.states)}
        arcs: list[tuple[int, int, int, CollectiveKind]] = []
        for i, state in enumerate(self.states):
            for axis in range(mesh_ndim):
                for new in options:
                    kind = transition_kind(state, axis, new)
                    if kind is None or (kind == "all_to_all" and not (exchanged(state[axis] - 2) and exchanged(new - 2))):
                        continue
                    j = self.index.get(state[:axis] + (new,) + state[axis + 1 :])
                    if j is not None:
                        arcs.append((i, j, axis, kind))
        self.arcs = arcs
        sizes = np.stack([bytes_of(s) for s in self.states]) if self.states else np.zeros((0, 1))
        self.costs = np.zeros((len(arcs), sizes.shape[1]))
        by_kind: dict[tuple[CollectiveKind, int], list[int]] = {}
        for a, (_, _, axis, kind) in enumerate(arcs):
            by_kind.setdefault((kind, axis), []).append(a)
        for (kind, axis), members in by_kind.items():
            rows = np.array(members)
            before = sizes[[arcs[a][0] for a in members]]
            after = sizes[[arcs[a][1] for a in members]]
            self.costs[rows] = collective(kind, axis, before, after)
        self.out: list[list[int]] = [[] for _ in self.states]
        for a, (i, _, _, _) in enumerate(arcs):
            self.out[i].append(a)
        self._trees: dict[tuple[int, bytes], tuple[list[float], list[int]]] = {}
        self._adjacency: dict[bytes, list[list[tuple[int, float, int]]]] = {}

    def _tree(self, src: int, weights: np.ndarray) -> tuple[list[float], list[int]]:
        """Dijkstra from ``src``: distance and the arc into each state (-1: none)."""
        key = (src, weights.tobytes())
        found = self._trees.get(key)
        if found is not None:
            return found
        adjacency = self._adjacency.get(weights.tobytes())
        if adjacency is None:
            scalar = (self.costs @ weights).tolist()
            adjacency = self._adjacency[weights.tobytes()] = [
                [(self.arcs[a][1], scalar[a], a) for a in arcs] for arcs in self.out
            ]
        inf = float("inf")
        dist = [inf] * len(self.states)
        via = [-1] * len(self.states)
        dist[src] = 0.0
        heap = [(0.0, src)]
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            d, i = pop(heap)
            if d > dist[i]:
                continue
            for j, cost, a in adjacency[i]:
                nd = d + cost
                if nd < dist[j] - 1e-15 * nd:
                    dist[j] = nd
                    via[j] = a
                    push(heap, (nd, j))
        self._trees[key] = (dist, via)
        return dist, via

    def path(self, src: Codes, dst: Codes, weights: np.ndarray) -> list[int] | None:
        """Arcs of the cheapest path from ``src`` to ``dst`` under ``weights`` (None if unreachable)."""
        s, t = self.index[src], self.index[dst]
        dist, via = self._tree(s, weights)
        if dist[t] == float("inf"):
            return None
        arcs: list[int] = []
        while t != s:
            a = via[t]
            arcs.append(a)
            t = self.arcs[a][0]
        return arcs[::-1]
