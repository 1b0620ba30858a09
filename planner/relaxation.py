"""The ILP's LP relaxation in HiGHS, solved point after point for lower bounds on each one's optimum.

:meth:`IlpModel.lower_bound <planner.ilp.IlpModel.lower_bound>` bounds the optimum of each
batch point alone (what regret is measured against) by this relaxation. It is solved with
highspy directly rather than through python-mip, for what was measured on the LLaMA training
graph on a (2, 4, 8) mesh (about 225k columns, 25k rows; 19 CPU seconds for three batch points
through python-mip, 7 here, ``bench/planner.py --whole``):

* HiGHS's LP presolve costs more than it saves here (it does not see the one-hot structure
  its MIP presolve uses): presolve is off and the dual simplex runs on the model as built
  (the barrier, the primal simplex, and the MIP stopped at its root or at a 1% gap were slower).
  Under a memory budget the first solve is the interior point method's, with crossover to a
  basis for the later ones (``barrier_first``): on the 1-layer LLaMA training graph on (2, 2)
  under its budget 1.2 CPU s, the dual simplex 2.7 (7.1k iterations), the primal 31;
* between solves only the objective changes, so each starts from an earlier solve's optimal
  basis: the one whose solution costs least under the new objective (each is a vertex of the
  same polytope, so the least costly is the nearest start by that measure). On that graph the
  regret objective's relaxation took 22.5k iterations (4.3 CPU s) from the last bound's basis
  (batch 8) and 3.2k (0.5 s) from batch 64's, the one it picks;
* python-mip sets an objective one coefficient at a time, which after a solve takes seconds on
  that many columns; here it is one array. And the python-mip model's HiGHS clock, which its
  time limit is measured on across solves, is left to the plan's own solve;
* the model reaches HiGHS as arrays (:class:`LinearRows`, which the ILP fills beside its
  python-mip model) rather than through a model file, which took about a second to write and
  read back at that size.

A solve may hold some columns at 0 (``zero``, :meth:`LpRelaxation.minimize`: the relaxation
with some choices ruled out, as relax-and-fix asks, :meth:`~planner.ilp.IlpModel.solve`), or drop
some rows and price them into the objective at their duals (:meth:`LpRelaxation.priced_optimum`);
such a solve's basis is no start for later ones. Rows and columns added to the :class:`LinearRows`
after the relaxation was built join it by :meth:`LpRelaxation.extend` (memory constraints
found on the way), HiGHS's basis growing with them. :meth:`LpRelaxation.copy` holds the
relaxation as it stands in a HiGHS instance of its own (the branch and bound solves nodes side by
side on copies, each extended with the original).

Columns the caller names in ``unit_columns`` are bounded above by 1 (a relaxation of the
problem with that bound, which the caller vouches has the same optimum). When a solve stops
early (its time limit), :meth:`LpRelaxation.minimize` still returns a valid bound: the
Lagrangian dual function at the row duals it reached,
``Σ_i min_{r ∈ [l_i, u_i]} y_i·r + Σ_j min_{x ∈ [lo_j, up_j]} (c_j − a_j·y)·x``, a lower bound
on the relaxation for *any* duals ``y`` (``-inf`` where an infinite bound meets a cost of the
wrong sign).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import highspy
import numpy as np

__all__ = ["INTEGRAL", "Basis", "LinearRows", "LpRelaxation", "RelaxedBound", "fractional_groups"]

INTEGRAL = 1e-6
"""An LP value this close to 0 or 1 counts as integral (HiGHS's feasibility tolerance is 1e-7)."""

_OPTIONS = {"output_flag": False, "presolve": "off", "solver": "simplex", "simplex_strategy": 1}  # 1: serial dual simplex
_STARTS = 8  # optimal bases kept to start later solves from (the most recent)


def fractional_groups(values: np.ndarray, groups: Sequence[list[int] | None]) -> list[int]:
    """The groups (each its choice columns, None: one choice) whose values in ``values`` are not all
    within :data:`INTEGRAL` of 0 or 1, in order."""
    return [g for g, xs in enumerate(groups) if xs is not None and np.abs(values[xs] - np.round(values[xs])).max() > INTEGRAL]


class Basis(NamedTuple):
    """An optimal basis, as HiGHS gives it, and the size of the relaxation it is one of."""

    status: highspy.HighsBasis
    columns: int
    rows: int


class RelaxedBound(NamedTuple):
    """A lower bound on the relaxation's minimum: the minimum itself when ``finished``, reached
    at the column values ``values`` with the row duals ``duals`` and the basis ``basis`` (all None
    when the solve stopped early or found no solution)."""

    value: float
    finished: bool
    infeasible: bool = False
    values: np.ndarray | None = None
    duals: np.ndarray | None = None
    basis: Basis | None = None


class LinearRows:
    """A linear program's columns (bounds) and rows (``lower ≤ Σ value·column ≤ upper``), in the
    order they are added: the LP relaxation of a MIP built beside it, column for column."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    def add_columns(self, count: int, *, upper: float = np.inf) -> None:
        """``count`` columns in ``[0, upper]``."""
        self.lower.extend([0.0] * count)
        self.upper.extend([upper] * count)

    def add_row(self, terms: Iterable[tuple[int, float]], lower: float, upper: float) -> None:
        """``lower ≤ Σ value·x[column] ≤ upper`` over ``terms`` (column, value; zeros left out)."""
        for column, value in terms:
            if value:
                self.index.append(column)
                self.value.append(value)
        self.starts.append(len(self.index))
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    @property
    def columns(self) -> int:
        return len(self.lower)


class LpRelaxation:
    """The linear program ``rows`` (as built so far), in a HiGHS instance of its own."""

    def __init__(self, rows: LinearRows, *, unit_columns: np.ndarray, barrier_first: bool = False) -> None:
        self.highs = highspy.Highs()
        for name, value in _OPTIONS.items():
            self.highs.setOptionValue(name, value)
        self._barrier = barrier_first  # the first solve by the interior point method (and crossover, for a basis)
        self.columns = 0
        self.lower, self.upper = np.zeros(0), np.zeros(0)
        self.row_lower, self.row_upper = np.zeros(0), np.zeros(0)
        self.entry_column, self.entry_value, self.entry_row = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        self.starts: list[tuple[np.ndarray, highspy.HighsBasis]] = []
        """Earlier optimal solutions and their bases, the most recent last, for :meth:`_start`."""
        self._held: int | None = None  # the start whose basis HiGHS holds
        self.extend(rows, unit_columns=unit_columns)

    def extend(self, rows: LinearRows, *, unit_columns: np.ndarray | None = None) -> None:
        """Add the columns and rows of ``rows`` beyond those the relaxation holds (those of the new
        columns among ``unit_columns`` bounded by 1). HiGHS keeps its basis, the new rows' slacks basic;
        the earlier solutions, shorter than the columns now, are dropped as starts."""
        first_column, first_row = self.columns, len(self.row_lower)
        if not rows.columns:  # nothing to solve (minimize answers 0)
            return
        lower, upper = np.array(rows.lower[first_column:]), np.array(rows.upper[first_column:])
        if unit_columns is not None:
            unit = np.asarray(unit_columns, dtype=np.int64) - first_column
            unit = unit[unit >= 0]
            upper[unit] = np.minimum(upper[unit], 1.0)
        starts = np.array(rows.starts[first_row:], dtype=np.int64)
        self._add(lower, upper, np.array(rows.row_lower[first_row:]), np.array(rows.row_upper[first_row:]), starts - starts[0],
                  np.array(rows.index[starts[0]:], dtype=np.int64), np.array(rows.value[starts[0]:]))

    def copy(self) -> LpRelaxation:
        """Another relaxation of the same columns and rows in a HiGHS instance of its own, holding no
        basis (a start is given with each solve): for solving nodes side by side, each in its own thread."""
        twin = LpRelaxation(LinearRows(), unit_columns=np.zeros(0, np.int64))
        twin._add(self.lower, self.upper, self.row_lower, self.row_upper,
                  np.searchsorted(self.entry_row, np.arange(len(self.row_lower) + 1)), self.entry_column, self.entry_value)
        return twin

    def _add(self, lower: np.ndarray, upper: np.ndarray, row_lower: np.ndarray, row_upper: np.ndarray,
             starts: np.ndarray, column: np.ndarray, value: np.ndarray) -> None:
        """Add columns (their bounds) and rows (their bounds; row ``i``'s entries ``starts[i]:starts[i + 1]``
        of ``column`` and ``value``, numbered among the columns after these are added)."""
        first_row = len(self.row_lower)
        if len(lower):
            self.highs.addVars(len(lower), lower, upper)
        if len(row_lower):
            self.highs.addRows(len(row_lower), row_lower, row_upper, len(column), starts[:-1].astype(np.int32),
                               column.astype(np.int32), value)
        if self.columns and (len(lower) or len(row_lower)):
            self.starts, self._held = [], None
        self.columns += len(lower)
        self.lower, self.upper = np.append(self.lower, lower), np.append(self.upper, upper)
        self.row_lower, self.row_upper = np.append(self.row_lower, row_lower), np.append(self.row_upper, row_upper)
        self.entry_row = np.append(self.entry_row, np.repeat(np.arange(first_row, first_row + len(row_lower)), np.diff(starts)))
        self.entry_column, self.entry_value = np.append(self.entry_column, column), np.append(self.entry_value, value)

    def minimize(self, costs: np.ndarray, *, time_limit: float, zero: np.ndarray | None = None,
                 start: Basis | None = None) -> RelaxedBound:
        """A lower bound on ``min costs·x`` over the relaxation, the columns ``zero`` held at 0:
        its minimum if found within ``time_limit`` seconds, else the Lagrangian at the duals
        reached (see the module docstring). The solve starts from :meth:`_start`'s basis, or with
        ``zero``, from ``start`` (a basis of a solve with fewer columns held, where the relaxation
        has not grown since: a branch's parent) or else the basis HiGHS holds (the previous solve's:
        relax-and-fix rules out a few more choices each time); only solves without ``zero`` are
        kept as starts."""
        if not self.columns:
            return RelaxedBound(0.0, True, values=np.zeros(0))
        restricted = zero is not None and len(zero) > 0
        if restricted:
            zero = np.unique(np.asarray(zero, dtype=np.int32))  # HiGHS refuses a set that names a column twice
            self._bound(zero, np.zeros(len(zero)))
            if start is not None and (start.columns, start.rows) == (self.columns, len(self.row_lower)):
                self.highs.setBasis(start.status)
        else:
            self._start(costs)
        self.highs.changeColsCost(self.columns, np.arange(self.columns, dtype=np.int32), costs)
        self.highs.setOptionValue("time_limit", self.highs.getRunTime() + float(time_limit))  # HiGHS's clock runs on across runs
        if self._barrier:
            self.highs.setOptionValue("solver", "ipm")
        self.highs.run()
        if self._barrier:
            self.highs.setOptionValue("solver", _OPTIONS["solver"])
            self._barrier = False
        status = self.highs.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            solution = self.highs.getSolution()
            values = np.array(solution.col_value)
            basis = self.highs.getBasis()
            bound = RelaxedBound(float(self.highs.getInfo().objective_function_value), True, values=values,
                                 duals=np.array(solution.row_dual), basis=Basis(basis, self.columns, len(self.row_lower)))
            if not restricted:
                self.starts = [*self.starts[-(_STARTS - 1):], (values, basis)]
        elif status == highspy.HighsModelStatus.kInfeasible:
            bound = RelaxedBound(float("inf"), True, infeasible=True)
        elif restricted:  # a Lagrangian would bound the restricted problem, not this relaxation
            bound = RelaxedBound(float("-inf"), False)
        else:
            bound = RelaxedBound(self.lagrangian(costs, np.array(self.highs.getSolution().row_dual)), False)
        self._held = len(self.starts) - 1 if status == highspy.HighsModelStatus.kOptimal and not restricted else None
        if restricted:  # changing the model clears HiGHS's solution: restored once it is read
            self._bound(zero, self.upper[zero])
        return bound

    def priced_optimum(self, costs: np.ndarray, rows: np.ndarray, prices: np.ndarray, *,
                       time_limit: float) -> np.ndarray | None:
        """The column values minimizing ``costs·x + Σ prices[i]·(row i's activity)`` over the
        relaxation without ``rows`` (a Lagrangian subproblem, ``prices`` one per row of ``rows``);
        None when it finds no optimum within ``time_limit``. The rows' bounds are restored and
        HiGHS holds the last optimum's basis again (or, where the model grew since, what it holds)."""
        chosen = np.asarray(rows, dtype=np.int32)
        row_prices = np.zeros(len(self.row_lower))
        row_prices[chosen] = prices
        priced = costs + np.bincount(self.entry_column, weights=self.entry_value * row_prices[self.entry_row],
                                     minlength=self.columns)
        self._row_bounds(chosen, np.full(len(chosen), -np.inf), np.full(len(chosen), np.inf))
        self.highs.changeColsCost(self.columns, np.arange(self.columns, dtype=np.int32), priced)
        self.highs.setOptionValue("time_limit", self.highs.getRunTime() + float(time_limit))
        self.highs.run()
        optimal = self.highs.getModelStatus() == highspy.HighsModelStatus.kOptimal
        values = np.array(self.highs.getSolution().col_value) if optimal else None
        self._row_bounds(chosen, self.row_lower[chosen], self.row_upper[chosen])
        if self.starts:
            self.highs.setBasis(self.starts[-1][1])
        self._held = len(self.starts) - 1 if self.starts else None
        return values

    def _row_bounds(self, rows: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        """Set the bounds of ``rows`` (distinct)."""
        status = self.highs.changeRowsBounds(len(rows), rows, lower, upper)
        if status != highspy.HighsStatus.kOk:
            raise RuntimeError(f"HiGHS refused the bounds of {len(rows)} rows ({status})")

    def _bound(self, columns: np.ndarray, upper: np.ndarray) -> None:
        """Set the upper bounds of ``columns`` (distinct), their lower bounds as built."""
        status = self.highs.changeColsBounds(len(columns), columns, self.lower[columns], upper)
        if status != highspy.HighsStatus.kOk:
            raise RuntimeError(f"HiGHS refused the bounds of {len(columns)} columns ({status})")

    def _start(self, costs: np.ndarray) -> None:
        """Give HiGHS the basis of the earlier optimal solution that costs least under ``costs``
        (ties: the most recent); before the first, it starts from what it holds."""
        if not self.starts:
            return
        best = min(range(len(self.starts)), key=lambda i: (float(costs @ self.starts[i][0]), -i))
        if best != self._held:
            self.highs.setBasis(self.starts[best][1])
            self._held = best

    def lagrangian(self, costs: np.ndarray, duals: np.ndarray) -> float:
        """The Lagrangian dual function at ``duals`` (one per row): a lower bound on the relaxation's minimum."""
        return self.reduced_costs(costs, duals)[0]

    def reduced_costs(self, costs: np.ndarray, duals: np.ndarray,
                      zero: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """The Lagrangian dual function at ``duals`` (one per row) over the relaxation with the
        columns ``zero`` held at 0, and the reduced costs ``d = costs - Aᵀ·duals``: every ``x`` of
        that relaxation costs at least the Lagrangian plus ``Σ_j (d_j·x_j - min_{x ∈ [lo_j, up_j]} d_j·x)``,
        each term at least 0 (what reduced-cost fixing reads)."""
        upper = self.upper.copy()
        if zero is not None:
            upper[np.asarray(zero, dtype=np.int64)] = 0.0
        if len(duals) != len(self.row_lower):  # no duals at all (the solve stopped before it had any)
            duals = np.zeros(len(self.row_lower))
        # a dual whose sign meets a row's infinite side is replaced by 0 (any duals give a bound)
        duals = np.where(((duals > 0) & np.isneginf(self.row_lower)) | ((duals < 0) & np.isposinf(self.row_upper)), 0.0, duals)
        reduced = costs - np.bincount(self.entry_column, weights=self.entry_value * duals[self.entry_row],
                                      minlength=self.columns)
        with np.errstate(invalid="ignore"):  # 0·inf: a zero dual or reduced cost takes no bound
            rows = np.where(duals > 0, duals * self.row_lower, duals * self.row_upper)
            rows[duals == 0] = 0.0
            cols = np.where(reduced > 0, reduced * self.lower, reduced * upper)
            cols[reduced == 0] = 0.0
        return float(rows.sum() + cols.sum()), reduced
