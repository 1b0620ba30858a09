"""The LP relaxation in HiGHS: warm starts change nothing but the time, and its Lagrangian bounds
the relaxation's minimum from below at any duals (the bound a solve cut short returns)."""

from __future__ import annotations

import copy
import time

import highspy
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.export import Dim

from planner import Mesh
from planner.api import prepare
from planner.ilp import IlpModel
from planner.relaxation import LpRelaxation
from shapecore.torch import trace_for_planning
from tests.planner.models import MLP, on_meta


@pytest.fixture(scope="module")
def model():
    traced = trace_for_planning(on_meta(MLP, 32, 64), (torch.randn(16, 32, device="meta"),),
                                dynamic_shapes={"x": {0: Dim("batch")}}, training=True)
    problem = prepare(traced.graph_module, Mesh((2, 2)), shape_env=traced.env, dims=traced.dim_exprs,
                      constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[8, 64, 512]).problem
    return IlpModel(problem)


def _relaxation(model: IlpModel) -> LpRelaxation:
    return LpRelaxation(model.lp, unit_columns=np.array([v for _, fs in model.flows for v in fs], dtype=np.int64))


def _costs(model: IlpModel, weights: np.ndarray) -> np.ndarray:
    return model._objective(weights)[0]


def _read_back(model: IlpModel, folder) -> tuple[np.ndarray, ...]:
    """The python-mip model through a model file, as HiGHS reads it: column and row bounds, entries."""
    path = str(folder / "model.mps")
    model.model.write(path)
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    assert highs.readModel(path) == highspy.HighsStatus.kOk
    lp = highs.getLp()
    matrix = lp.a_matrix_  # column-wise
    columns = np.repeat(np.arange(lp.num_col_), np.diff(np.array(matrix.start_)))
    entries = sorted(zip(np.array(matrix.index_).tolist(), columns.tolist(), np.array(matrix.value_).tolist()))
    return np.array(lp.col_lower_), np.array(lp.col_upper_), np.array(lp.row_lower_), np.array(lp.row_upper_), np.array(entries)


def test_the_rows_kept_beside_the_model_are_the_model_under_a_budget_too(model, tiny_mlp, tmp_path):
    free = IlpModel(tiny_mlp).solve(tiny_mlp.points.weights)
    least = IlpModel(tiny_mlp).least_memory_choices()
    budget = float(tiny_mlp.peak_memory(free.choices).total.max() + tiny_mlp.peak_memory(least).total.max()) / 2
    budgeted = IlpModel(tiny_mlp, memory_budget=budget)
    budgeted.solve(tiny_mlp.points.weights)  # memory constraints and buffers added as the solve goes
    assert budgeted.memory_steps
    for ilp in (model, budgeted):
        rows = ilp.lp
        entries = sorted((r, c, v) for r in range(len(rows.row_lower))
                         for c, v in zip(rows.index[rows.starts[r]:rows.starts[r + 1]], rows.value[rows.starts[r]:rows.starts[r + 1]]))
        expected = _read_back(ilp, tmp_path)
        for mine, theirs in zip((rows.lower, rows.upper, rows.row_lower, rows.row_upper, entries), expected):
            assert np.allclose(np.array(mine, dtype=float), theirs, rtol=1e-14, atol=0)  # a model file keeps 15 digits


def test_warm_started_minima_equal_cold_ones(model):
    assert model.flows, "expected flow-routed edge classes (the columns bounded by 1)"
    warm = _relaxation(model)
    for weights in ([0, 0, 1], [1, 0, 0], [0.2, 0.3, 0.5], [0, 1, 0]):
        costs = _costs(model, np.array(weights, dtype=float))
        hot, cold = warm.minimize(costs, time_limit=60), _relaxation(model).minimize(costs, time_limit=60)
        assert hot.finished and cold.finished
        assert hot.value == pytest.approx(cold.value, rel=1e-9, abs=1e-9)


@settings(max_examples=15, deadline=None)
@given(sequence=st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3).filter(any), min_size=2, max_size=6),
       cut_short=st.integers(0, 5))
def test_minima_from_any_earlier_basis_equal_cold_ones(model, sequence, cut_short):
    """Each solve starts from the earlier optimum that costs least under its objective (or, after
    a solve stopped early, from that one's); none changes the minimum found."""
    warm = _relaxation(model)
    for i, weights in enumerate(sequence):
        costs = _costs(model, np.array(weights) / sum(weights))
        cold = _relaxation(model).minimize(costs, time_limit=60)
        if i == cut_short:
            warm.minimize(costs, time_limit=0.0)  # leaves HiGHS at a basis that is no start
        hot = warm.minimize(costs, time_limit=60)
        assert hot.finished and cold.finished and hot.value == pytest.approx(cold.value, rel=1e-9, abs=1e-9)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_solve_starts_from_the_earlier_optimum_that_costs_least_under_its_objective(model, seed):
    """Asked again for an objective it met before, after another one, the relaxation starts at
    that objective's optimum: no pivot to make (random costs: each has its own optimum)."""
    relaxation = _relaxation(model)
    first, second = np.random.default_rng(seed).uniform(0.0, 1.0, (2, relaxation.columns))
    relaxation.minimize(first, time_limit=60)
    relaxation.minimize(second, time_limit=60)
    (mine, _), (other, _) = relaxation.starts
    assume(first @ other > first @ mine * (1 + 1e-6))  # the second optimum is no optimum of the first objective
    assert relaxation.minimize(first, time_limit=60).finished
    assert relaxation.highs.getInfo().simplex_iteration_count == 0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-3, 1e3), point=st.integers(0, 2))
def test_the_lagrangian_at_any_duals_is_at_most_the_minimum_and_meets_it_at_the_optimal_ones(model, seed, scale, point):
    relaxation = _relaxation(model)
    costs = _costs(model, np.eye(3)[point])
    minimum = relaxation.minimize(costs, time_limit=60)
    optimal = np.array(relaxation.highs.getSolution().row_dual)
    assert relaxation.lagrangian(costs, optimal) == pytest.approx(minimum.value, rel=1e-6, abs=1e-9)
    shaken = optimal + scale * np.random.default_rng(seed).standard_normal(len(optimal)) * (np.abs(optimal).max() + 1)
    assert relaxation.lagrangian(costs, shaken) <= minimum.value * (1 + 1e-9) + 1e-9
    assert relaxation.lagrangian(costs, np.zeros(0)) <= minimum.value * (1 + 1e-9) + 1e-9  # no duals at all


def test_a_solve_cut_short_returns_a_valid_bound(model):
    costs = _costs(model, np.eye(3)[0])
    minimum = _relaxation(model).minimize(costs, time_limit=60).value
    short = _relaxation(model).minimize(costs, time_limit=0.0)
    assert not short.finished and short.value <= minimum * (1 + 1e-9) + 1e-9


def test_each_solve_gets_its_whole_time_limit(model):
    relaxation = _relaxation(model)
    costs = _costs(model, np.eye(3)[0])
    slept: list[float] = []

    def slow_first_solve(_) -> None:
        if not slept:
            time.sleep(0.3)
            slept.append(0.3)

    relaxation.highs.cbSimplexInterrupt.subscribe(slow_first_solve)
    assert relaxation.minimize(costs, time_limit=60).finished and relaxation.highs.getRunTime() >= 0.3
    again = _costs(model, np.eye(3)[2])  # another point: some pivots to make
    assert relaxation.minimize(again, time_limit=0.1).finished  # HiGHS's clock reads 0.3 s already: the limit is this solve's


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), point=st.integers(0, 2))
def test_a_solve_with_columns_held_at_zero_is_the_relaxation_without_them_and_changes_no_later_solve(model, seed, point):
    """Relax and fix's solves: ``zero`` (a column named twice among them: HiGHS refused such a set,
    and the solve ran with none held) is the relaxation whose columns there are bounded by 0,
    and the next solve without it is the whole relaxation's."""
    rng = np.random.default_rng(seed)
    costs = _costs(model, np.eye(3)[point])
    relaxation = _relaxation(model)
    whole = relaxation.minimize(costs, time_limit=60)
    choices = [v for xs in model.x if xs is not None for v in xs]
    zero = rng.choice(choices, size=len(choices) // 3, replace=False)
    held = relaxation.minimize(costs, time_limit=60, zero=np.concatenate([zero, zero[:2]]))
    bounded = copy.deepcopy(model.lp)
    for column in zero.tolist():
        bounded.upper[column] = 0.0
    flows = np.array([v for _, fs in model.flows for v in fs], dtype=np.int64)
    cold = LpRelaxation(bounded, unit_columns=flows).minimize(costs, time_limit=60)
    assert held.infeasible == cold.infeasible
    if not held.infeasible:
        assert held.value == pytest.approx(cold.value, rel=1e-9, abs=1e-9) and not held.values[zero].any()
    assert relaxation.minimize(costs, time_limit=60).value == pytest.approx(whole.value, rel=1e-9, abs=1e-9)


@settings(max_examples=10, deadline=None)
@given(share=st.floats(0.0, 1.0), seed=st.integers(0, 2**32 - 1))
def test_under_a_budget_the_lagrangian_at_the_optimal_duals_is_the_minimum_and_bounds_a_node(model, share, seed):
    """Under a memory budget (the buffers' ``v`` columns in its rows), the Lagrangian at the optimum's
    duals is the minimum (was ``-inf``: a ``v`` unbounded above at a reduced cost a rounding error
    below 0), and at a node's duals (some choices held at 0) it is that node's minimum, and a
    column strictly between its bounds there has no reduced cost."""
    problem = model.problem
    least = float(problem.peak_memory(IlpModel(problem).least_memory_choices()).total.max())
    free = float(problem.peak_memory(IlpModel(problem).solve(problem.points.weights).choices).total.max())
    budgeted = IlpModel(problem, memory_budget=least + share * (free - least))
    relaxation = budgeted._build_relaxation()
    costs = budgeted._objective(problem.points.weights)[0]
    root = relaxation.minimize(costs, time_limit=60)
    assert budgeted._buffer_rows and root.finished
    assert relaxation.lagrangian(costs, root.duals) == pytest.approx(root.value, rel=1e-6, abs=1e-9)
    rng = np.random.default_rng(seed)
    zero = np.array([v for xs in budgeted.x if xs is not None for v in rng.choice(xs, size=len(xs) - 1, replace=False)])
    node = relaxation.minimize(costs, time_limit=60, zero=zero)
    assume(not node.infeasible)
    floor, reduced = relaxation.reduced_costs(costs, node.duals, zero)
    assert floor == pytest.approx(node.value, rel=1e-6, abs=1e-9)
    inside = (node.values > 1e-6) & (node.values < relaxation.upper - 1e-6)  # basic: no reduced cost
    assert np.abs(reduced[inside]).max(initial=0.0) <= 1e-6 * (np.abs(costs).max() + 1)


def test_a_copy_holds_the_same_relaxation_and_grows_with_it(tiny_mlp):
    """A copy (the search solves nodes side by side on copies) is the relaxation as it stands, unit
    bounds included: at any node it has the original's minimum, from the original's basis or its
    own; and after a budget's rows join both, a relaxation built afresh's."""
    free = IlpModel(tiny_mlp).solve(tiny_mlp.points.weights)
    budgeted = IlpModel(tiny_mlp)  # no memory row yet
    budgeted.memory_budget = 0.9 * float(tiny_mlp.peak_memory(free.choices).total.max())
    costs = budgeted._objective(tiny_mlp.points.weights)[0]
    original = budgeted._build_relaxation()
    root = original.minimize(costs, time_limit=60)
    twin = original.copy()
    assert (twin.columns, len(twin.row_lower)) == (original.columns, len(original.row_lower))
    assert np.array_equal(twin.upper, original.upper) and twin.starts == []
    rng = np.random.default_rng(0)
    choices = [v for xs in budgeted.x if xs is not None for v in xs]
    for start in (root.basis, None):  # the original's optimal basis, then whatever the copy holds
        zero = rng.choice(choices, size=len(choices) // 4, replace=False)
        mine, theirs = original.minimize(costs, time_limit=60, zero=zero), twin.minimize(costs, time_limit=60, zero=zero, start=start)
        assert mine.infeasible == theirs.infeasible
        if not mine.infeasible:
            assert theirs.value == pytest.approx(mine.value, rel=1e-9, abs=1e-9)
    assert budgeted._add_memory_cuts(free.choices)  # rows (and the columns of their buffers) join the model
    budgeted._build_relaxation()
    twin.extend(budgeted.lp, unit_columns=budgeted._unit_columns())
    costs = budgeted._objective(tiny_mlp.points.weights)[0]
    fresh = LpRelaxation(budgeted.lp, unit_columns=budgeted._unit_columns()).minimize(costs, time_limit=60)
    assert twin.minimize(costs, time_limit=60).value == pytest.approx(fresh.value, rel=1e-9, abs=1e-9)
    assert original.minimize(costs, time_limit=60).value == pytest.approx(fresh.value, rel=1e-9, abs=1e-9)
