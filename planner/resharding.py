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
        self._reverse_trees: dict[tuple[int, bytes], list[float]] = {}
        self._adjacencies: dict[tuple[bytes, bool], list[list[tuple[int, float, int]]]] = {}

    def _tree(self, src: int, weights: np.ndarray) -> tuple[list[float], list[int]]:
        """Dijkstra from ``src``: distance and the arc into each state (-1: none)."""
        key = (src, weights.tobytes())
        found = self._trees.get(key)
        if found is None:
            found = self._trees[key] = _dijkstra(src, self._adjacency(weights, reverse=False))
        return found

    def distances_to(self, dst: Codes, weights: np.ndarray) -> list[float]:
        """The cost under ``weights`` of the cheapest redistribution from every state (by index)
        to ``dst`` (inf where there is none): one Dijkstra over the arcs reversed, where asking
        :meth:`path` from each state would run one per state."""
        key = (self.index[dst], weights.tobytes())
        found = self._reverse_trees.get(key)
        if found is None:
            found = self._reverse_trees[key] = _dijkstra(key[0], self._adjacency(weights, reverse=True))[0]
        return found

    def _adjacency(self, weights: np.ndarray, *, reverse: bool) -> list[list[tuple[int, float, int]]]:
        """Per state, its arcs as (other end, cost under ``weights``, arc): leaving it, or with
        ``reverse`` entering it."""
        key = (weights.tobytes(), reverse)
        found = self._adjacencies.get(key)
        if found is None:
            scalar = (self.costs @ weights).tolist()
            found = [[] for _ in self.states]
            for a, (i, j, _, _) in enumerate(self.arcs):
                found[j if reverse else i].append((i if reverse else j, scalar[a], a))
            self._adjacencies[key] = found
        return found

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


def _dijkstra(src: int, adjacency: list[list[tuple[int, float, int]]]) -> tuple[list[float], list[int]]:
    """Distance from ``src`` to every state over ``adjacency`` (:meth:`StateGraph._adjacency`), and
    the arc into each on a cheapest path (-1: none; a tie keeps the arc found first)."""
    inf = float("inf")
    dist = [inf] * len(adjacency)
    via = [-1] * len(adjacency)
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
    return dist, via
