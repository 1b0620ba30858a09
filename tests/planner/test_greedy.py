"""The greedy baseline: a feasible plan, priced at its true cost, never better than the ILP's optimum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.greedy import GreedyModel
from planner.ilp import IlpModel


def _peak_memory(problem, choices) -> float:
    """The most bytes per device the plan holds at any batch point."""
    return float(sum(problem.evaluate(choices).memory.values()).max())


def _true_cost(problem, choices, weights) -> float:
    return float(problem.evaluate(choices, weights).total @ weights)


def test_greedy_is_never_better_than_the_ilp(tiny_mlp):
    weights = tiny_mlp.points.weights
    assert GreedyModel(tiny_mlp).solve(weights).objective >= IlpModel(tiny_mlp).solve(weights).objective * (1 - 1e-12)


@settings(max_examples=25)
@given(share=st.floats(0.0, 1.0))
def test_at_any_weights_the_greedy_plan_is_a_plan_priced_at_its_true_cost_and_no_better_than_the_optimum(tiny_mlp, share):
    weights = np.array([share, 1.0 - share])
    solution = GreedyModel(tiny_mlp).solve(weights)
    assert solution.status == "greedy"
    assert len(solution.choices) == len(tiny_mlp.groups)
    assert all(0 <= c < g.choices for c, g in zip(solution.choices, tiny_mlp.groups))
    assert solution.objective == pytest.approx(_true_cost(tiny_mlp, solution.choices, weights), rel=1e-12)
    assert solution.objective >= IlpModel(tiny_mlp).solve(weights).objective * (1 - 1e-9)


def test_a_memory_budget_is_met_when_some_plan_meets_it(tiny_mlp):
    weights = tiny_mlp.points.weights
    free = GreedyModel(tiny_mlp).solve(weights)
    budget = 0.7 * _peak_memory(tiny_mlp, free.choices)
    solution = GreedyModel(tiny_mlp, memory_budget=budget).solve(weights)
    assert solution.status == "greedy" and _peak_memory(tiny_mlp, solution.choices) <= budget
    assert solution.objective >= IlpModel(tiny_mlp, memory_budget=budget).solve(weights).objective * (1 - 1e-9)


def test_a_budget_no_plan_meets_is_reported_with_the_best_effort(tiny_mlp):
    weights = tiny_mlp.points.weights
    solution = GreedyModel(tiny_mlp, memory_budget=1.0).solve(weights)
    assert solution.status == "over memory budget" and _peak_memory(tiny_mlp, solution.choices) > 1.0
    assert solution.objective == pytest.approx(_true_cost(tiny_mlp, solution.choices, weights), rel=1e-12)
    unpriced = GreedyModel(tiny_mlp).solve(weights)  # memory priced in never needs more of it
    assert _peak_memory(tiny_mlp, solution.choices) < _peak_memory(tiny_mlp, unpriced.choices)
