"""Greedy baseline: each group, in graph order, takes its cheapest choice given those before it.

The cost of a choice is its groups' compute and in-group resharding plus the resharding on
every edge class whose other group is already decided (later neighbours are ignored). If
the result breaks the memory budget, memory is priced in with a multiplier that doubles
until the plan fits (or the multiplier is absurd, and the best effort, the plan of all passes
that needs the least memory, is returned with status ``over memory budget``). Same interface as :class:`~planner.ilp.IlpModel`.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from planner.ilp import Solution
from planner.problem import EdgeClass, Problem

__all__ = ["GreedyModel"]


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
        self.build_seconds = time.perf_counter() - start

    def _dist(self, cls: EdgeClass, src: tuple, dst: tuple, weights: np.ndarray) -> float:
        return 0.0 if src == dst else cls.count * float(self.problem.move_cost(cls.meta, src, dst, weights) @ weights)

    def _pass(self, weights: np.ndarray, memory_price: float) -> list[int]:
        problem = self.problem
        choices: list[int | None] = [None] * len(problem.groups)
        for g in self.order:
            group = problem.groups[g]
            score = problem.group_cost(g, weights) + memory_price * group.memory.max(axis=1)  # type: ignore[union-attr]
            for cls in self.touching[g]:
                other = cls.consumer_group if cls.producer_group == g else cls.producer_group
                if choices[other] is None:
                    continue
                if cls.producer_group == g:
                    dst = next(p for p, block in cls.cols if choices[other] in block)
                    for src, block in cls.rows:
                        score[block] += self._dist(cls, src, dst, weights)
                else:
                    src = next(p for p, block in cls.rows if choices[other] in block)
                    for dst, block in cls.cols:
                        score[block] += self._dist(cls, src, dst, weights)
            choices[g] = int(np.argmin(score))
        return choices  # type: ignore[return-value]

    def _peak_memory(self, choices: list[int]) -> float:
        return float(self.problem.peak_memory(choices).total.max())

    def _fit_memory(self, weights: np.ndarray, unpriced: list[int]) -> tuple[list[int], str]:
        """The first pass with memory priced in, at a price that doubles, whose plan fits the budget;
        if none does, the plan of all passes (``unpriced`` included) that needs the least memory."""
        budget = self.memory_budget
        assert budget is not None
        scale = float(max(self.problem.group_cost(g, weights).max() for g in range(len(self.problem.groups)))) or 1.0
        price = scale / max(budget, 1.0)
        least, least_peak = unpriced, self._peak_memory(unpriced)
        while price < 1e12 * scale:
            choices = self._pass(weights, price)
            peak = self._peak_memory(choices)
            if peak <= budget:
                return choices, "greedy"
            if peak < least_peak:
                least, least_peak = choices, peak
            price *= 2
        return least, "over memory budget"

    def solve(self, weights: np.ndarray, *, time_limit: float = 60.0) -> Solution:
        start = time.perf_counter()
        choices = self._pass(weights, 0.0)
        status = "greedy"
        if self.memory_budget is not None and self._peak_memory(choices) > self.memory_budget:
            choices, status = self._fit_memory(weights, choices)
        objective = float(self.problem.evaluate(choices, weights).total @ weights)
        return Solution(choices, status, objective, None, None, 0, 0, self.build_seconds, time.perf_counter() - start)
