"""Greedy baseline: each group, in graph order, takes its cheapest choice given those before it.

The cost of a choice is its groups' compute and in-group resharding plus the resharding on
every edge class whose other group is already decided (later neighbours are ignored). Groups
that must agree (:attr:`~planner.problem.Problem.agreements`: a per-token region's nodes) take
their key at the first of them, as one decision: the key whose cheapest choice of each of them,
in itself, costs least in all; the rest then choose among the choices of that key. If
the result breaks the memory budget, memory is priced in where it breaks it: the peak the
ILP constrains (:meth:`~planner.problem.Problem.peak_memory`, storages live step by step). Each
program step where the plan holds more than the budget gets a price per byte held there, which
doubles while the step stays over; a choice then pays for the bytes its nodes hold live at the
priced steps and for the redistribution buffers live there that it causes with the groups
decided before it. From the first prices whose plan fits, a few passes at prices between them and
the ones before look for a cheaper plan that fits, the cheapest is returned; when the prices grow absurd,
the best effort (the plan of all passes that needs the least memory) is returned with status
``over memory budget``. Same interface as :class:`~planner.ilp.IlpModel`.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from planner.ilp import Solution
from planner.problem import EdgeClass, Problem

__all__ = ["GreedyModel"]

_REFINE = 4  # passes between the first price that fits and the one before it, for a cheaper plan that fits


class GreedyModel:
    """Greedy assignment over a :class:`~planner.problem.Problem`."""

    def __init__(self, problem: Problem, *, memory_budget: float | None = None) -> None:
        start = time.perf_counter()
        self.problem = problem
        self.memory_budget = memory_budget
        self.touching: dict[int, list[EdgeClass]] = defaultdict(list)
        for cls in problem.edge_classes:
            self.touching[cls.producer_group].append(cls)
            self.touching[cls.consumer_group].append(cls)
        order = {name: i for i, name in enumerate(problem.graph.nodes)}
        self.order = sorted(range(len(problem.groups)), key=lambda g: min(order[n] for n in problem.groups[g].nodes))
        self._live: dict[int, list[np.ndarray]] = {}  # Problem.live_memory, per step priced
        self.agreement_of = {g: i for i, members in enumerate(problem.agreements) for g, _ in members}
        self.build_seconds = time.perf_counter() - start

    def _dist(self, cls: EdgeClass, src: tuple, dst: tuple, weights: np.ndarray) -> float:
        return 0.0 if src == dst else cls.count * float(self.problem.move_cost(cls.meta, src, dst, weights) @ weights)

    def _own_cost(self, g: int, weights: np.ndarray, prices: _MemoryPrices | None) -> np.ndarray:
        """What each choice of group ``g`` costs in itself (its memory priced under ``prices``)."""
        score = self.problem.group_cost(g, weights)
        return score if prices is None else score + prices.held[g]

    def _agreed_key(self, i: int, g: int, score: np.ndarray, weights: np.ndarray, prices: _MemoryPrices | None) -> object:
        """The key agreement ``i`` takes, decided at its first group ``g`` (choices costing ``score``)
        as one decision: the key whose cheapest choice of ``g`` and of each other group costs least."""
        members = self.problem.agreements[i]
        keys = dict(members)[g]
        total = {k: float(score[[c for c, key in enumerate(keys) if key == k]].min()) for k in dict.fromkeys(keys)}
        for h, their in members:
            if h != g:
                own = self._own_cost(h, weights, prices)
                for k in total:
                    total[k] += float(own[[c for c, key in enumerate(their) if key == k]].min())
        return min(total, key=total.__getitem__)

    def _pass(self, weights: np.ndarray, prices: _MemoryPrices | None = None) -> list[int]:
        problem = self.problem
        choices: list[int | None] = [None] * len(problem.groups)
        agreed: dict[int, object] = {}  # the key each agreement took
        for g in self.order:
            score = self._own_cost(g, weights, prices)
            for cls in self.touching[g]:
                other = cls.consumer_group if cls.producer_group == g else cls.producer_group
                if choices[other] is None:
                    continue
                if cls.producer_group == g:
                    dst = next(p for p, block in cls.cols if choices[other] in block)
                    pairs = [(src, dst, block) for src, block in cls.rows]
                else:
                    src = next(p for p, block in cls.rows if choices[other] in block)
                    pairs = [(src, dst, block) for dst, block in cls.cols]
                for src, dst, block in pairs:
                    score[block] += self._dist(cls, src, dst, weights)
                    if prices is not None and src != dst:
                        score[block] += prices.buffer(cls, src, dst)
            if (i := self.agreement_of.get(g)) is not None:  # its groups take choices of one key
                if i not in agreed:
                    agreed[i] = self._agreed_key(i, g, score, weights, prices)
                keys = dict(problem.agreements[i])[g]
                score = np.where([key == agreed[i] for key in keys], score, np.inf)
            choices[g] = int(np.argmin(score))
        return choices  # type: ignore[return-value]

    def _fit_memory(self, weights: np.ndarray, unpriced: list[int]) -> tuple[list[int], str]:
        """The first pass with the steps over the budget priced (see the module docstring) whose
        plan fits, then the cheapest plan that fits among :data:`_REFINE` passes priced between
        it and the pass before; if none fits, the plan of all passes (``unpriced`` included)
        needing the least memory."""
        budget = self.memory_budget
        assert budget is not None
        problem = self.problem
        scale = float(max(problem.group_cost(g, weights).max() for g in range(len(problem.groups)))) or 1.0
        first = scale / max(budget, 1.0)  # a step's first price per byte: a budget's worth costs the dearest choice
        price = np.zeros((len(problem.liveness.steps), len(problem.points)))
        timeline = problem.peak_memory(unpriced).timeline
        least, least_peak = unpriced, float(timeline.max())
        while True:
            below = price.copy()
            over = timeline > budget
            price[over] = np.where(price[over] > 0, 2 * price[over], first)
            if price.max() >= 1e12 * first:
                return least, "over memory budget"
            choices, peak = self._priced_pass(weights, price)
            if peak <= budget:
                break
            if peak < least_peak:
                least, least_peak = choices, peak
        best, best_cost = choices, float(problem.evaluate(choices, weights).total @ weights)
        low, high = 0.0, 1.0  # the price below + share · (price − price below): fits at high, not at low
        for _ in range(_REFINE):
            share = (low + high) / 2
            choices, peak = self._priced_pass(weights, below + share * (price - below))
            if peak > budget:
                low = share
                continue
            high = share
            cost = float(problem.evaluate(choices, weights).total @ weights)
            if cost < best_cost:
                best, best_cost = choices, cost
        return best, "greedy"

    def _priced_pass(self, weights: np.ndarray, price: np.ndarray) -> tuple[list[int], float]:
        """A pass with memory priced at ``price`` (``[steps, points]``, per byte), and its plan's peak."""
        choices = self._pass(weights, _MemoryPrices(self.problem, price, self._live))
        return choices, float(self.problem.peak_memory(choices).total.max())

    def solve(self, weights: np.ndarray, *, time_limit: float = 60.0) -> Solution:
        start = time.perf_counter()
        choices = self._pass(weights)
        status = "greedy"
        if self.memory_budget is not None and float(self.problem.peak_memory(choices).total.max()) > self.memory_budget:
            choices, status = self._fit_memory(weights, choices)
        objective = float(self.problem.evaluate(choices, weights).total @ weights)
        return Solution(choices, status, objective, None, None, 0, 0, self.build_seconds, time.perf_counter() - start)


class _MemoryPrices:
    """What a choice pays for memory under ``price`` (``[steps, points]``, per byte live at a step;
    ``live_memory`` caches :meth:`~planner.problem.Problem.live_memory` by step):
    ``held[g][c]``, for the bytes group ``g``'s nodes hold at the priced steps under choice ``c``
    (redistributions inside the group included), and :meth:`buffer`, for the redistribution
    buffers of an edge class's edges live there."""

    def __init__(self, problem: Problem, price: np.ndarray, live_memory: dict[int, list[np.ndarray]]) -> None:
        self.problem = problem
        self.held = [np.zeros(group.choices) for group in problem.groups]
        for step in np.flatnonzero(price.any(axis=1)).tolist():
            if step not in live_memory:
                live_memory[step] = problem.live_memory(step)
            for g, live in enumerate(live_memory[step]):
                self.held[g] += live @ price[step]
        total = np.vstack([np.zeros(price.shape[1]), np.cumsum(price, axis=0)])
        span_price: dict[tuple[str, int], list[tuple[np.ndarray, bool]]] = defaultdict(list)
        for consumer, k, first, last, source in problem.reshard_spans():
            paid = total[last + 1] - total[first]
            if paid.any():
                span_price[consumer, k].append((paid, source))
        self._classes: dict[int, list[tuple[np.ndarray, bool]]] = {}
        for cls in problem.edge_classes:
            self._classes[id(cls)] = [paid for consumer, k, _ in cls.edges for paid in span_price.get((consumer, k), ())]
        for (consumer, k), paid in span_price.items():
            producer = problem.graph.nodes[consumer].operands[k]
            g = problem.group_of[consumer]
            if problem.group_of[producer] != g:
                continue
            meta = problem.graph.nodes[producer].output
            gives, needs = problem.candidates[producer], problem.candidates[consumer]
            for c in range(problem.groups[g].choices):
                src = gives[problem.pick[producer][c]].outputs[0]
                dst = needs[problem.pick[consumer][c]].inputs[k]
                if src != dst:
                    self.held[g][c] += sum(float(p @ problem.local(meta, src if source else dst).nbytes) for p, source in paid)

    def buffer(self, cls: EdgeClass, src: tuple, dst: tuple) -> float:
        """What the buffers of ``cls``'s edges, redistributed from ``src`` to ``dst``, cost at the priced steps."""
        local = self.problem.local
        return sum(float(paid @ local(cls.meta, src if source else dst).nbytes) for paid, source in self._classes[id(cls)])
