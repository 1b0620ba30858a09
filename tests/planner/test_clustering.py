"""Clustering: identical layers share one decision, a restriction whose plan is priced at its true cost."""

from __future__ import annotations

import pytest

from planner import Mesh
from planner.api import prepare
from planner.ilp import IlpModel


@pytest.mark.slow  # a 3-layer decoder's training graph (traced once), prepared and solved twice
def test_clustering_prices_the_plan_it_picks_and_costs_little(decoder_trace):
    gm, env, dims = decoder_trace.graph_module, decoder_trace.env, decoder_trace.dim_exprs
    objectives = []
    for cluster in (True, False):
        problem = prepare(gm, Mesh((2, 2)), shape_env=env, dims=dims, constraints=["Eq(Mod(batch, 4), 0)"],
                          batch_sizes=[8, 64], cluster=cluster, merge_followers=cluster).problem
        solution = IlpModel(problem).solve(problem.points.weights)
        assert solution.objective == pytest.approx(float(problem.evaluate(solution.choices).total @ problem.points.weights), rel=1e-9)
        objectives.append((solution.objective, len(problem.groups), problem.clusters))
    (clustered, groups_c, clusters), (flat, groups_f, _) = objectives
    assert clusters > 0 and groups_c < groups_f
    assert flat * (1 - 1e-9) <= clustered <= flat * 1.01  # a restriction, and a mild one


