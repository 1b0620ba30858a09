"""The ILP's LP relaxation in HiGHS, solved point after point for lower bounds on each one's optimum.

:meth:`IlpModel.lower_bound <planner.ilp.IlpModel.lower_bound>` bounds the optimum of each
batch point alone (what regret is measured against) by this relaxation. It is solved with
highspy directly rather than through python-mip, for what was measured on the LLaMA training
graph on a (2, 4, 8) mesh (about 225k columns, 25k rows; 19 CPU seconds for three batch points
through python-mip, 7 here, ``bench/planner.py --whole``):

* HiGHS's LP presolve costs more than it saves here (it does not see the one-hot structure
  its MIP presolve uses): presolve is off and the dual simplex runs on the model as built
  (the barrier, the primal simplex, and the MIP stopped at its root or at a 1% gap were slower);
* between batch points only the objective changes, so each solve starts from the previous
  point's basis (about half the iterations of a cold start at batch 64);
* python-mip sets an objective one coefficient at a time, which after a solve takes seconds on
  that many columns; here it is one array. And the python-mip model's HiGHS clock, which its
  time limit is measured on across solves, is left to the plan's own solve.

Columns the caller names in ``unit_columns`` are bounded above by 1 (a relaxation of the
problem with that bound, which the caller vouches has the same optimum). When a solve stops
early (its time limit), :meth:`LpRelaxation.minimize` still returns a valid bound: the
Lagrangian dual function at the row duals it reached,
``Σ_i min_{r ∈ [l_i, u_i]} y_i·r + Σ_j min_{x ∈ [lo_j, up_j]} (c_j − a_j·y)·x``, a lower bound
on the relaxation for *any* duals ``y`` (``-inf`` where an infinite bound meets a cost of the
wrong sign).
"""

from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

import highspy
import mip
import numpy as np

__all__ = ["LpRelaxation", "RelaxedBound"]

_OPTIONS = {"output_flag": False, "presolve": "off", "solver": "simplex", "simplex_strategy": 1}  # 1: serial dual simplex


class RelaxedBound(NamedTuple):
    """A lower bound on the relaxation's minimum: the minimum itself when ``finished``, reached
    at the column values ``values`` (None when the solve stopped early or found no solution)."""

    value: float
    finished: bool
    infeasible: bool = False
    values: np.ndarray | None = None


class LpRelaxation:
    """The LP relaxation of ``model`` (a python-mip model, as built so far), in a HiGHS instance of its own."""

    def __init__(self, model: mip.Model, *, unit_columns: np.ndarray) -> None:
        self.highs = highspy.Highs()
        for name, value in _OPTIONS.items():
            self.highs.setOptionValue(name, value)
        self.columns = model.num_cols
        if self.columns:
            with tempfile.TemporaryDirectory() as folder:  # python-mip's one public way out is a model file
                path = os.path.join(folder, "model.mps")
                model.write(path)
                if self.highs.readModel(path) != highspy.HighsStatus.kOk:
                    raise RuntimeError(f"HiGHS could not read back the model python-mip wrote ({path})")
        every = np.arange(self.columns, dtype=np.int32)
        self.highs.changeColsIntegrality(self.columns, every, np.full(self.columns, highspy.HighsVarType.kContinuous))
        lp = self.highs.getLp()
        self.lower, self.upper = np.array(lp.col_lower_), np.array(lp.col_upper_)
        unit = np.asarray(unit_columns, dtype=np.int32)
        self.upper[unit] = np.minimum(self.upper[unit], 1.0)
        self.highs.changeColsBounds(self.columns, every, self.lower, self.upper)
        self.highs.changeObjectiveOffset(0.0)
        matrix = lp.a_matrix_  # column-wise
        self.entry_column = np.repeat(every, np.diff(np.array(matrix.start_)))
        self.entry_row, self.entry_value = np.array(matrix.index_, dtype=np.int64), np.array(matrix.value_)
        self.row_lower, self.row_upper = np.array(lp.row_lower_), np.array(lp.row_upper_)

    def minimize(self, costs: np.ndarray, *, time_limit: float) -> RelaxedBound:
        """A lower bound on ``min costs·x`` over the relaxation: its minimum if found within
        ``time_limit`` seconds, else the Lagrangian at the duals reached (see the module docstring)."""
        if not self.columns:
            return RelaxedBound(0.0, True, values=np.zeros(0))
        self.highs.changeColsCost(self.columns, np.arange(self.columns, dtype=np.int32), costs)
        self.highs.setOptionValue("time_limit", self.highs.getRunTime() + float(time_limit))  # HiGHS's clock runs on across runs
        self.highs.run()
        status = self.highs.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            return RelaxedBound(float(self.highs.getInfo().objective_function_value), True,
                                values=np.array(self.highs.getSolution().col_value))
        if status == highspy.HighsModelStatus.kInfeasible:
            return RelaxedBound(float("inf"), True, infeasible=True)
        return RelaxedBound(self.lagrangian(costs, np.array(self.highs.getSolution().row_dual)), False)

    def lagrangian(self, costs: np.ndarray, duals: np.ndarray) -> float:
        """The Lagrangian dual function at ``duals`` (one per row): a lower bound on the relaxation's minimum."""
        if len(duals) != len(self.row_lower):  # no duals at all (the solve stopped before it had any)
            duals = np.zeros(len(self.row_lower))
        # a dual whose sign meets a row's infinite side is replaced by 0 (any duals give a bound)
        duals = np.where(((duals > 0) & np.isneginf(self.row_lower)) | ((duals < 0) & np.isposinf(self.row_upper)), 0.0, duals)
        with np.errstate(invalid="ignore"):  # 0·inf: a zero dual or reduced cost takes no bound
            rows = np.where(duals > 0, duals * self.row_lower, duals * self.row_upper)
            rows[duals == 0] = 0.0
            reduced = costs - np.bincount(self.entry_column, weights=self.entry_value * duals[self.entry_row],
                                          minlength=self.columns)
            cols = np.where(reduced > 0, reduced * self.lower, reduced * self.upper)
            cols[reduced == 0] = 0.0
        return float(rows.sum() + cols.sum())
