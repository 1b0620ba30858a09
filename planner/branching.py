"""Best-first branch and bound on the ILP's LP relaxation: the bound of a budgeted solve.

Under a tight memory budget the relaxation's optimum mixes whole plans (one cheap and over the
budget, one dear and within it) that no plan between them matches: a plan partly of one and
partly of the other pays the redistributions where they meet, which the mixture never does.
Cuts do not see that (:mod:`planner.ilp`'s docstring), and fixing one group's choice moves the
bound little, since its neighbours mix around it; HiGHS's MIP spends its time at its root there
(its cuts and heuristics). This search branches many times instead, each node a warm re-solve of
:class:`~planner.relaxation.LpRelaxation` with some choice columns held at 0 (from its parent's
optimal basis, presolve off: about 150 dual simplex iterations, 0.1–0.2 s on that graph, half
the iterations of a start from the basis of whichever node was solved last):

* a node whose optimum takes a fractional group ``g`` branches on ``c``, its largest choice there:
  ``x[g,c] = 1`` (its other choices held at 0) or ``x[g,c] = 0``. Every plan of the node is in
  one child. ``g`` is the fractional group whose two children are expected to gain the most
  (pseudocosts: the product of the bound each direction gained per unit of value it moved, as
  seen so far; the most fractional group before any is seen);
* nodes are solved lazily and taken lowest bound first, so the least bound of the open nodes
  (and the incumbent) is a lower bound on every plan that fits the rows;
* a node whose optimum is a plan (one-hot) is the caller's to check (:data:`Check`): a plan
  that fits closes the node and may become the incumbent; one over the budget adds the memory
  rows of its steps (the relaxation grows, every node's bound stays a bound) and is solved again;
* a solved node holds at 0 below it the choices its reduced costs price out (:class:`_Settler`);
* the lowest open nodes that need an LP (most often the two children of the node just branched)
  are solved side by side, one per copy of the relaxation (:data:`SEARCH_THREADS`), and their
  results taken in order, so the search does not depend on which solve ends first (it differs
  from one node at a time: the second node is solved before the first's result is seen).

The search stops when the least open bound proves the incumbent within ``gap`` (relative), when
no node is left (the incumbent is optimal), or at ``deadline``. Costs are the relaxation's
(:meth:`planner.ilp.IlpModel._objective`) plus ``offset``. On the 1-layer LLaMA training graph on
(2, 2) under its budget (``bench/memory_budget.py``, 10 s, 2 CPUs, load 1), where the relaxation
lies 4.3% below the optimum, the MIP's bound rose by 0.2% in its 8 s (a gap of 4.2%), this
search's by 3.6–3.7% (a gap of 0.69–0.83%; one node at a time 1.26–1.32%), and it proves 1% in 8.2–8.4 s
(11 CPU s; one node at a time 11.9–12.5 s); on GPT-2's it proves the optimum in 5–6 s (the MIP:
0.89% in 10 s).
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from planner.relaxation import Basis, LpRelaxation, RelaxedBound, fractional_groups

__all__ = ["SEARCH_THREADS", "Check", "Searched", "branch_and_bound", "search_threads"]


Check = Callable[[list[int]], "np.ndarray | None"]
"""Called with the plan a node's optimum takes: None when it fits (every constraint holds), else the
costs after the rows it breaks joined the relaxation (:meth:`LpRelaxation.extend`; the node is solved again)."""


SEARCH_THREADS = 2
"""The most nodes a search solves side by side (each on its own copy of the relaxation, in a thread
of its own: highspy lets go of the GIL while HiGHS solves). Each branching makes two children, and
they are the lowest open nodes: the search seldom finds a third that needs an LP at once."""


def search_threads() -> int:
    """:data:`SEARCH_THREADS`, or the CPUs this process may run on where it may run on fewer."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(SEARCH_THREADS, cpus))


_SETTLE_MARGIN = 1e-9
"""Reduced-cost fixing rules a choice out only where its bound clears the incumbent's cost by this
much of it: the bound holds at any duals (HiGHS's are optimal only within its tolerances), and this
covers the rounding of its floating-point sums."""


class Searched(NamedTuple):
    """What :func:`branch_and_bound` reached: a lower bound on every plan's cost, the best plan
    found (the incumbent given, or a better one) and its cost, and whether the bound proves it
    within the gap asked."""

    bound: float
    choices: list[int]
    cost: float
    proved: bool


class _Pseudocosts:
    """The bound each branch direction of a group gained per unit of value it moved, as seen so far
    (a group never branched on: the mean over those that were; 1 before any)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, bool], list[float]] = {}

    def record(self, g: int, up: bool, moved: float, gain: float) -> None:
        self.seen.setdefault((g, up), []).append(gain / moved)

    def score(self, g: int, largest: float) -> float:
        """The product of the gains expected of ``x[g,c] = 1`` (moving ``1 - largest``) and ``x[g,c] = 0``."""
        up, down = (float(np.mean(self.seen.get((g, d)) or [self._mean(d)])) for d in (True, False))
        return max(up * (1 - largest), 1e-6) * max(down * largest, 1e-6)

    def _mean(self, up: bool) -> float:
        means = [np.mean(gains) for (_, d), gains in self.seen.items() if d == up]
        return float(np.mean(means)) if means else 1.0


class _Settler:
    """Reduced-cost fixing: the choice columns a node's subtree may hold at 0 besides its own.

    At a node's optimum with row duals ``y`` and reduced costs ``d``, every ``x`` of the node
    costs at least the Lagrangian ``L(y)`` plus ``d_j·x_j`` for each column at 0 with ``d_j > 0``
    (plus ``-d_j·(1 - x_j)`` for each at 1 with ``d_j < 0``: :meth:`LpRelaxation.reduced_costs`).
    A choice whose ``L + d_j`` reaches the incumbent's cost leaves no cheaper plan below the
    node, and neither does leaving a choice whose ``L - d_j`` reaches it: the one is held at 0,
    the other's group at that choice. Only plans costing at least the incumbent are ruled out,
    so the search's bound (the least open node's, at most the incumbent's cost) stays one on
    every plan."""

    def __init__(self, relaxation: LpRelaxation, groups: Sequence[list[int] | None]) -> None:
        self.relaxation = relaxation
        chosen = [xs for xs in groups if xs is not None]
        self.columns = np.array([v for xs in chosen for v in xs], dtype=np.int64)
        self.group = np.repeat(np.arange(len(chosen)), [len(xs) for xs in chosen])

    def __call__(self, costs: np.ndarray, solved: RelaxedBound, zero: np.ndarray, ceiling: float) -> np.ndarray:
        """``zero`` and the choice columns no plan of the node costing under ``ceiling`` takes."""
        if solved.duals is None or not len(self.columns):
            return zero
        floor, reduced = self.relaxation.reduced_costs(costs, solved.duals, zero)
        slack = ceiling - floor + _SETTLE_MARGIN * abs(ceiling)
        d = reduced[self.columns]
        free = ~np.isin(self.columns, zero)
        dear, kept = free & (d > slack), free & (-d > slack)
        dear |= np.isin(self.group, self.group[kept]) & ~kept
        return np.union1d(zero, self.columns[dear]) if dear.any() else zero


class _Node(NamedTuple):
    """An open node of the search, ordered by its bound (then by when it was made)."""

    bound: float
    tie: int
    zero: np.ndarray
    """The columns held at 0."""
    values: np.ndarray | None
    """Its optimum (None: not solved with the rows there are now)."""
    rows: int
    """The rows it was solved with."""
    origin: tuple[int, bool, float, float] | None
    """How it was branched: (group, up, value moved, parent's bound), or None."""
    start: Basis | None
    """The basis to solve it from: its parent's optimum's, or None."""


def branch_and_bound(relaxations: Sequence[LpRelaxation], costs: np.ndarray, offset: float,
                     groups: Sequence[list[int] | None], incumbent: tuple[list[int], float], check: Check, *,
                     gap: float, deadline: float) -> Searched:
    """Search as the module docstring says, from ``incumbent`` (a plan that fits, and its cost).

    ``relaxations``: the relaxation and its copies (:meth:`LpRelaxation.copy`; ``check`` extends
    them all); with ``k`` of them the ``k`` lowest open nodes that need an LP are solved side by
    side, one per thread, and their results taken in that order, so the search is the same however
    the threads run (only ``deadline`` depends on the clock). ``groups``: each group's choice
    columns (None: one choice); ``deadline``: ``time.perf_counter``."""
    best, best_cost = incumbent
    settle = _Settler(relaxations[0], groups)
    held: list[Basis | None] = [None] * len(relaxations)  # the basis each relaxation's HiGHS holds
    pseudocosts = _Pseudocosts()
    count = 0
    heap: list[_Node] = [_Node(-np.inf, 0, np.zeros(0, np.int64), None, -1, None, None)]
    with ThreadPoolExecutor(len(relaxations)) as threads:
        while heap:
            if heap[0].bound + offset >= (1 - gap) * best_cost or time.perf_counter() >= deadline:
                break
            rows = len(relaxations[0].row_lower)
            if heap[0].values is not None and heap[0].rows == rows:  # solved: branched, or checked
                node = heapq.heappop(heap)
                fractional = fractional_groups(node.values, groups)
                if not fractional:
                    choices = [0 if xs is None else int(np.argmax(node.values[xs])) for xs in groups]
                    updated = check(choices)
                    if updated is not None:  # over the budget: its rows joined; solved again
                        costs = updated
                        count += 1
                        heapq.heappush(heap, node._replace(tie=count, values=None, rows=-1, origin=None))
                    elif node.bound + offset < best_cost:
                        best, best_cost = choices, node.bound + offset
                    continue
                g = max(fractional, key=lambda g: (pseudocosts.score(g, float(node.values[groups[g]].max())), -g))  # type: ignore[index]
                xs = groups[g]
                assert xs is not None
                c = int(np.argmax(node.values[xs]))
                largest = float(node.values[xs[c]])
                for up, ruled_out, moved in ((True, [v for i, v in enumerate(xs) if i != c], 1 - largest),
                                             (False, [xs[c]], largest)):
                    count += 1
                    heapq.heappush(heap, _Node(node.bound, count, np.union1d(node.zero, ruled_out), None, -1,
                                               (g, up, moved, node.bound), node.start))
                continue
            batch = []  # the lowest nodes that need an LP, one per relaxation
            while (heap and len(batch) < len(relaxations) and heap[0].bound + offset < (1 - gap) * best_cost
                   and (heap[0].values is None or heap[0].rows != rows)):
                batch.append(heapq.heappop(heap))
            solves = _assign(batch, held)
            results = list(threads.map(
                lambda job: relaxations[job[1]].minimize(costs, time_limit=deadline - time.perf_counter(), zero=job[0].zero,
                                                         start=None if job[0].start is held[job[1]] else job[0].start),
                solves))  # a start HiGHS holds is given as None
            out_of_time = False
            for (node, r), result in zip(solves, results):
                held[r] = result.basis
                if result.infeasible:
                    continue
                count += 1
                if result.values is None:  # out of time: the node stays open at its parent's bound
                    heapq.heappush(heap, node._replace(tie=count, values=None, rows=-1))
                    out_of_time = True
                    continue
                if node.origin is not None:
                    g, up, moved, parent = node.origin
                    pseudocosts.record(g, up, moved, result.value - parent)
                zero = settle(costs, result, node.zero, best_cost - offset)
                heapq.heappush(heap, _Node(max(node.bound, result.value), count, zero, result.values,
                                           len(relaxations[0].row_lower), None, result.basis))
            if out_of_time:
                break
    lowest = heap[0].bound + offset if heap else best_cost
    bound = min(lowest, best_cost)
    return Searched(bound, best, best_cost, best_cost - bound <= gap * best_cost)


def _assign(batch: list[_Node], held: list[Basis | None]) -> list[tuple[_Node, int]]:
    """Each node of ``batch`` paired with a relaxation of its own to solve it on: one whose HiGHS holds
    the node's start where there is one (no basis to set), else the first not yet taken."""
    free = list(range(len(held)))
    solves = []
    for node in batch:
        r = next((r for r in free if node.start is not None and held[r] is node.start), free[0])
        free.remove(r)
        solves.append((node, r))
    return solves
