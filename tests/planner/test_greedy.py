"""The greedy baseline: a feasible plan, priced at its true cost, never better than the ILP's optimum;
under a memory budget, a status that says whether its plan fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.greedy import GreedyModel, _MemoryPrices
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


def test_a_budget_the_greedy_plan_meets_costs_no_less_than_the_ilps_plan_under_it(training_mlp):
    weights = training_mlp.points.weights
    budget = 0.8 * _peak_memory(training_mlp, GreedyModel(training_mlp).solve(weights).choices)
    solution = GreedyModel(training_mlp, memory_budget=budget).solve(weights)
    assert solution.status == "greedy" and _peak_memory(training_mlp, solution.choices) <= budget
    assert solution.objective >= IlpModel(training_mlp, memory_budget=budget).solve(weights).objective * (1 - 1e-9)


@settings(max_examples=20)
@given(which=st.sampled_from(["tiny_mlp", "training_mlp"]), fraction=st.floats(0.2, 1.0))
def test_under_any_budget_the_status_says_whether_the_plan_fits(request, which, fraction):
    problem = request.getfixturevalue(which)
    weights = problem.points.weights
    budget = fraction * _peak_memory(problem, GreedyModel(problem).solve(weights).choices)
    solution = GreedyModel(problem, memory_budget=budget).solve(weights)
    fits = _peak_memory(problem, solution.choices) <= budget
    assert solution.status == ("greedy" if fits else "over memory budget")
    assert solution.objective == pytest.approx(_true_cost(problem, solution.choices, weights), rel=1e-12)
    unpriced = GreedyModel(problem).solve(weights)  # pricing memory in never ends needing more of it
    assert _peak_memory(problem, solution.choices) <= _peak_memory(problem, unpriced.choices)


def test_a_budget_no_plan_meets_is_reported_over_budget_with_the_plan_needing_the_least_memory(tiny_mlp):
    weights = tiny_mlp.points.weights
    solution = GreedyModel(tiny_mlp, memory_budget=1.0).solve(weights)
    assert solution.status == "over memory budget" and _peak_memory(tiny_mlp, solution.choices) > 1.0
    assert solution.objective == pytest.approx(_true_cost(tiny_mlp, solution.choices, weights), rel=1e-12)
    unpriced = GreedyModel(tiny_mlp).solve(weights)  # the best effort needs no more memory than not trying
    assert _peak_memory(tiny_mlp, solution.choices) <= _peak_memory(tiny_mlp, unpriced.choices)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_what_a_pass_pays_for_memory_is_its_plans_memory_at_the_priced_steps(training_mlp, data):
    """Each group's held bytes and each edge class's buffers, at the prices of some steps, add up
    to the plan's memory at those steps as :meth:`Problem.peak_memory` counts it: the peak the ILP constrains."""
    problem = training_mlp
    steps = data.draw(st.lists(st.integers(0, len(problem.liveness.steps) - 1), min_size=1, max_size=6), label="steps")
    price = np.zeros((len(problem.liveness.steps), len(problem.points)))
    for step in steps:
        price[step] = data.draw(st.lists(st.floats(0.0, 1.0), min_size=len(problem.points), max_size=len(problem.points)))
    choices = [data.draw(st.integers(0, g.choices - 1)) for g in problem.groups]
    prices = _MemoryPrices(problem, price, {})
    paid = sum(prices.held[g][c] for g, c in enumerate(choices))
    for cls in problem.edge_classes:
        src = next(p for p, block in cls.rows if choices[cls.producer_group] in block)
        dst = next(p for p, block in cls.cols if choices[cls.consumer_group] in block)
        if src != dst:
            paid += prices.buffer(cls, src, dst)
    assert paid == pytest.approx(float((price * problem.peak_memory(choices).timeline).sum()), rel=1e-12, abs=1e-9)


def test_a_budget_the_bytes_groups_hold_would_miss_is_met_by_pricing_the_peak(tiny_mlp):
    """Pricing each group's bytes, wherever they are live, left this budget over (status
    ``over memory budget``); pricing the steps over it finds a plan that fits."""
    weights = tiny_mlp.points.weights
    least = float(tiny_mlp.peak_memory(IlpModel(tiny_mlp).least_peak_choices()[0]).total.max())
    unpriced = _peak_memory(tiny_mlp, GreedyModel(tiny_mlp).solve(weights).choices)
    budget = least + 0.3 * (unpriced - least)
    solution = GreedyModel(tiny_mlp, memory_budget=budget).solve(weights)
    assert solution.status == "greedy" and _peak_memory(tiny_mlp, solution.choices) <= budget
