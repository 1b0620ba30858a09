"""The branch and bound of a budgeted solve (``planner/branching.py``), against the MIP's optimum."""

from __future__ import annotations

import time
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import planner.ilp
from planner import Mesh
from planner.branching import _Settler
from planner.ilp import _SCALE, IlpModel
from planner.relaxation import LpRelaxation
from tests.planner.models import MLP, on_meta
from tests.planner.problems import problem_of


@pytest.fixture(scope="module")
def training_mlp_2():
    """A 32-64-32 MLP's joint forward+backward graph on a 2-way mesh, costed at batches 16 and 4096:
    under a budget its relaxation mixes plans (its minimum lies below every plan that fits)."""
    return problem_of(on_meta(MLP, 32, 64), torch.randn(16, 32, device="meta"), Mesh((2,)), training=True,
                      batch_sizes=[16, 4096])


def _budget(problem, share: float) -> float:
    """A budget ``share`` of the way from the least-memory plan's peak to the unbudgeted optimum's."""
    free = float(problem.peak_memory(IlpModel(problem).solve(problem.points.weights).choices).total.max())
    least = float(problem.peak_memory(IlpModel(problem).least_memory_choices()).total.max())
    return least + share * (free - least)


def _mip_optimum(problem, budget: float) -> float:
    """The optimum under ``budget`` as the MIP proves it (no rounded or priced plan: the MIP runs, from the greedy plan)."""
    model = IlpModel(problem, memory_budget=budget, mip_gap=0.0)
    with (mock.patch.object(IlpModel, "_relax_and_fix", return_value=None),
          mock.patch.object(IlpModel, "_priced_plan", return_value=None)):
        solution = model.solve(problem.points.weights)
    assert solution.status == "optimal"
    return solution.objective


@settings(max_examples=10, deadline=None)
@given(share=st.floats(0.0, 0.95), gap=st.sampled_from([0.0, 1e-4, 0.05, 0.3]))
@example(share=0.2937443783534788, gap=0.0)  # the rounding leaves no plan: the MIP runs, and proves the same
def test_a_budgeted_solve_searches_instead_of_the_mip_and_proves_what_the_mip_proves(training_mlp_2, share, gap):
    """Where the relaxation's bound does not prove the rounded (or priced) plan, the search does
    (was: the MIP, which ran out of time at the root on the LLaMA case), and the MIP runs only where
    neither found a plan: the bound is below the MIP's optimum, the plan fits and is within ``gap`` of it."""
    weights = training_mlp_2.points.weights
    budget = _budget(training_mlp_2, share)
    optimum = _mip_optimum(training_mlp_2, budget)
    model = IlpModel(training_mlp_2, memory_budget=budget, mip_gap=gap)
    relaxed = model.lower_bound(weights).value
    assert relaxed < optimum * (1 - 0.3)  # the relaxation alone proves nothing within these gaps
    rounded, mip_runs = [], []
    relax_and_fix, priced_plan, optimize = IlpModel._relax_and_fix, IlpModel._priced_plan, IlpModel._optimize

    def rounding(self, *args):
        rounded.append(relax_and_fix(self, *args))
        return rounded[-1]

    def pricing(self, *args):
        rounded.append(priced_plan(self, *args))
        return rounded[-1]

    def mip(self, *args):
        mip_runs.append(args)
        return optimize(self, *args)

    with (mock.patch.object(IlpModel, "_relax_and_fix", rounding), mock.patch.object(IlpModel, "_priced_plan", pricing),
          mock.patch.object(IlpModel, "_optimize", mip)):
        solution = model.solve(weights)
    # the MIP runs only where neither left a plan (share 0.2937, gap 0: the rounding, from the basis lower_bound left)
    assert len(rounded) == 2 and (not mip_runs or rounded == [None, None])
    assert solution.status == ("optimal" if solution.gap <= 1e-4 else "within mip_gap")
    assert relaxed * (1 - 1e-9) <= solution.bound <= optimum * (1 + 1e-9) <= solution.objective * (1 + 2e-9)
    assert solution.objective - optimum <= (gap + 1e-9) * solution.objective
    assert float(training_mlp_2.peak_memory(solution.choices).total.max()) <= budget * (1 + 1e-6)


def test_a_plan_the_search_finds_over_the_budget_adds_its_rows_and_the_search_goes_on(training_mlp_2):
    """A node whose optimum is a plan over the budget (a step without its row) adds the rows of its
    steps and is solved again; plans that fit become the incumbent. From no memory row at all and
    the least-memory plan, the search proves the MIP's optimum."""
    weights = training_mlp_2.points.weights
    budget = _budget(training_mlp_2, 0.5)
    optimum = _mip_optimum(training_mlp_2, budget)
    model = IlpModel(training_mlp_2)  # no memory row
    model.memory_budget = budget
    least = model.least_memory_choices()
    cost = float(training_mlp_2.evaluate(least, weights).total @ weights)
    choices, objective, bound, proved = model._search(weights, least, cost, -np.inf, time.perf_counter() + 60)
    assert model.memory_steps, "no plan over the budget: nothing was tested"
    assert proved and objective == pytest.approx(optimum, rel=1e-9) and bound == pytest.approx(optimum, rel=1e-9)
    assert objective < cost and float(training_mlp_2.peak_memory(choices).total.max()) <= budget * (1 + 1e-6)


def test_nodes_solved_side_by_side_give_the_same_search_however_the_threads_run(training_mlp):
    """With two copies of the relaxation the search solves its two lowest open nodes at once, each
    in a thread of its own, and takes their results in order: with each solve delayed at random,
    so that either may end first, it solves the same nodes and ends with the same plan, cost and
    bound, proving the MIP's optimum (the budget's rows found on the way joining both copies)."""
    weights = training_mlp.points.weights
    budget = _budget(training_mlp, 0.3)  # 37 LPs
    optimum = _mip_optimum(training_mlp, budget)
    minimize = LpRelaxation.minimize

    def search(delays: np.random.Generator | None):
        solved_on = []

        def delayed(self, *args, **kwargs):
            solved_on.append((self, tuple(np.asarray(kwargs.get("zero", ())).tolist())))
            if delays is not None:
                time.sleep(float(delays.uniform(0, 0.01)))
            return minimize(self, *args, **kwargs)

        model = IlpModel(training_mlp)  # no memory row: the search adds them
        model.memory_budget = budget
        least = model.least_memory_choices()
        cost = float(training_mlp.evaluate(least, weights).total @ weights)
        with (mock.patch.object(planner.ilp, "search_threads", return_value=2),
              mock.patch.object(LpRelaxation, "minimize", delayed)):
            found = model._search(weights, least, cost, -np.inf, time.perf_counter() + 60)
        assert model.memory_steps and len({id(lp) for lp, _ in solved_on}) == 2  # rows joined; both copies solved nodes
        return found, sorted(zero for _, zero in solved_on)

    first = search(None)
    choices, objective, bound, proved = first[0]
    assert proved and objective == pytest.approx(optimum, rel=1e-9) and bound == pytest.approx(optimum, rel=1e-9)
    for seed in (1, 2):
        assert search(np.random.default_rng(seed)) == first


def _node_optimum(problem, budget: float, zero: np.ndarray) -> list[int] | None:
    """The cheapest plan under ``budget`` that takes none of the choice columns ``zero`` (the MIP's, proved), or None."""
    model = IlpModel(problem, memory_budget=budget, mip_gap=0.0)
    for column in zero.tolist():  # in the rows the relaxation is built from, and in the MIP
        model.lp.upper[column] = model.model.vars[column].ub = 0.0
    with (mock.patch.object(IlpModel, "_relax_and_fix", return_value=None),
          mock.patch.object(IlpModel, "_priced_plan", return_value=None),
          mock.patch.object(IlpModel, "_greedy_start", return_value=None)):  # greedy's plan may take a held column
        try:
            solution = model.solve(problem.points.weights)
        except ValueError:  # no plan fits with those columns held
            return None
    assert solution.status == "optimal"
    return solution.choices


def test_reduced_cost_fixing_keeps_every_plan_of_a_node_cheaper_than_the_incumbent(training_mlp_2):
    """At nodes of random held columns under budgets from loose to tight, the columns a node's
    subtree holds at 0 by reduced costs (:class:`planner.branching._Settler`), with the incumbent
    just above the node's best plan that fits (the MIP's), never include one of that plan's: the
    tightest incumbent that leaves it a plan to find. And they rule out choices at most nodes."""
    weights = training_mlp_2.points.weights
    rng = np.random.default_rng(0)
    settled_any = 0
    for share in (0.2, 0.5, 0.9):
        budget = _budget(training_mlp_2, share)
        model = IlpModel(training_mlp_2, memory_budget=budget)
        relaxation = model._build_relaxation()
        costs, constant = model._objective(weights)
        for _ in range(4):
            zero = np.array([v for xs in model.x if xs is not None and len(xs) > 1
                             for v in rng.choice(xs, size=rng.integers(0, len(xs)), replace=False)], dtype=np.int64)
            node = relaxation.minimize(costs, time_limit=60, zero=zero)
            plan = _node_optimum(training_mlp_2, budget, zero)
            if node.infeasible or plan is None:
                continue
            cost = (float(training_mlp_2.evaluate(plan, weights).total @ weights) - constant) * _SCALE
            assert node.value <= cost * (1 + 1e-9) + 1e-9
            settled = _Settler(relaxation, model.x)(costs, node, zero, cost * (1 + 1e-7) + 1e-7)
            taken = {xs[c] for xs, c in zip(model.x, plan) if xs is not None}
            assert not taken & set(np.setdiff1d(settled, zero).tolist()), (share, sorted(taken & set(settled.tolist())))
            settled_any += len(settled) > len(zero)
    assert settled_any >= 3  # the property was tested where it rules something out
