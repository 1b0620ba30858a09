"""The greedy baseline: a feasible plan, priced at its true cost, never better than the ILP's optimum."""

from __future__ import annotations

from planner.greedy import GreedyModel
from planner.ilp import IlpModel


def test_greedy_is_never_better_than_the_ilp(tiny_mlp):
    weights = tiny_mlp.points.weights
    assert GreedyModel(tiny_mlp).solve(weights).objective >= IlpModel(tiny_mlp).solve(weights).objective * (1 - 1e-12)
