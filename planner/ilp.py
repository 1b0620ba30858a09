"""The ILP: one choice per decision group, redistributions routed as flows.

With groups ``g`` (choices ``c``), edge classes ``e`` (``count_e`` edges over one tensor shape,
producer group ``p(e)``, consumer group ``n(e)``, see :class:`~planner.problem.EdgeClass`) and
the weights ``w`` of the batch points::

    minimize    Σ_g Σ_c  cost_w[g,c] · x[g,c]  +  Σ_e count_e · route_w[e]
    subject to  Σ_c x[g,c] = 1                                   for every group g
                (one routing family per edge class, below)
                Σ_{c of key k} x[g,c] = Σ_{c of key k} x[h,c]      for the groups g, h of an agreement, each key k
                Σ_g Σ_c live_t[g,c,k] · x[g,c] ≤ budget          for every point k and binding step t
                x binary

``cost_w[g,c]`` is the compute of the group's nodes and the resharding between them. The
producer of class ``e`` *gives* placement ``a`` with indicator ``X_e[a] = Σ_{c gives a} x[p(e),c]``
and the consumer *needs* ``b`` with ``Z_e[b] = Σ_{c needs b} x[n(e),c]``. ``route_w[e]`` is
linearized one of two ways, whichever has fewer variables:

* **transportation** — ``y[e,a,b] ≥ 0`` with ``Σ_b y[e,a,b] = X_e[a]``, ``Σ_a y[e,a,b] = Z_e[b]``
  and cost ``Σ_a,b dist_w(a, b) · y[e,a,b]``, ``dist_w`` the cheapest redistribution;
* **flow** — one unit routed through the tensor's state graph
  (:class:`~planner.resharding.StateGraph`): ``f[e,arc] ≥ 0`` with, at every state ``s``,
  ``out(s) − in(s) = X_e[s] − Z_e[s]``, and cost ``Σ_arc cost_w(arc) · f[e,arc]``.

**Memory.** The peak bytes per device of a plan is the largest, over the program's steps
``t``, of the bytes held by the storages live at ``t`` (:mod:`planner.problem.liveness`). Which
storages are live at ``t`` does not depend on the plan, only their bytes do, so the memory at
``t`` is linear in ``x`` (``live_t``, :meth:`~planner.problem.Problem.live_memory`) and "the
peak fits the budget" is exactly one such constraint per step. Most of them never bind, so
they are added lazily: the model starts with the steps where the all-first-choice plan goes
over the budget and those where the least-memory plan (each group's smallest choice) holds the
most, over the budget or not (a tight budget binds there), and after each solve
the chosen plan's memory at every step is computed; where it exceeds the budget at a point,
the constraints of the steps holding the most (:data:`_CUTS_PER_POINT` of them) are added
and the model solved again. A redistribution's buffer depends on two choices (producer and
consumer); it enters a step's constraint as ``Σ_b size(b)·v_b`` with ``v_b ≥ 0`` and
``v_b ≥ Z[b] − X[b]`` for each placement ``b`` the consumer may need (``Z``, ``X``: the
consumer-needs and producer-gives indicators; :meth:`IlpModel._buffer`), whose least value at
a one-hot ``x`` is the buffer: a plan meets a step's constraint (for some ``v``) exactly when
its memory there fits the budget. So every
constraint added holds for every plan that fits (the loop never cuts one off), a plan over
the budget always adds a new one, and the loop stops at a plan whose exact peak fits, or at
infeasibility: a :class:`MemoryBudgetError` with what the plan needing the least memory needs
(:meth:`IlpModel.least_peak_choices`: the same constraints, minimizing the peak) and what
dominates it. The LP relaxation (:meth:`IlpModel.lower_bound`) uses the constraints added so
far: a valid, possibly weaker, bound. A budgeted solve starts from the cheaper of the LP relaxation
rounded to a plan that fits (:meth:`IlpModel._relax_and_fix`) and the plan the relaxation takes
with memory priced at its duals instead of bounded (:meth:`IlpModel._priced_plan`, which fits or
is not taken); when the relaxation's bound does not prove it within ``mip_gap``, a best-first
branch and bound on the relaxation goes on from it
(:mod:`planner.branching`, its nodes' plans over the budget adding their rows as above). Only
without either plan does the MIP run, in rounds that share the solve's time limit, from the
greedy plan (:class:`~planner.greedy.GreedyModel`, which prices the same peak) when it fits: a
solve out of time returns the best plan found, at worst its start, and the larger of the
search's (or MIP's) bound and the relaxation's. A solve stops at a plan proved within
``mip_gap`` of the optimum, the rounded plan itself when the relaxation's bound proves it: such
a plan depends on no clock, one stopped by the time limit may. Under a tight budget the
relaxation is weak (a mixture of plans fits where none does: on the 1-layer LLaMA training
graph on (2, 2) the root relaxation lies 4.3% below the optimum, which HiGHS's MIP proves in
about 135 CPU s, ``bench/memory_budget.py``); the rounded plan lies 0.12% above the optimum
there. The relaxation's optimum there mixes real plans (the MLP's weights and activations split
2 ways in one, 4 in the other): memory priced at the relaxation's duals, the MIP without a
budget reaches the same 5.012 ms (no Lagrangian bound is stronger), and HiGHS's cuts reach
5.038 ms in 60 s; the search proves the plan within 1.2% in 10 s (the MIP: 4.2%).

Regret is measured against ``opt_k``, the optimum of point ``k`` alone or a lower bound on it
(:meth:`IlpModel.lower_bound`). Under ``objective="regret"`` (:func:`solve_mean_regret`)
the weights become ``w_k / opt_k``: the mean regret. Under ``objective="worst-regret"``
(:meth:`IlpModel.solve_worst_regret`) the model minimizes ``t + ε·Σ_k w_k·cost_k(x)/opt_k``
subject to ``cost_k(x) ≤ t·opt_k`` at every point ``k``: the plan whose worst regret is smallest.

With ``x`` one-hot both linearizations are exact without integrality on ``y`` or ``f``: the marginals are
one-hot, so the transportation plan is the taken pair and the flow is a cheapest path; and
their LP relaxations coincide (a min-cost flow decomposes into cheapest paths). Costs are
nonnegative, so a cheapest flow needs no cycle and no arc carries more than the one unit
routed: bounding every ``y`` and ``f`` by 1, as :meth:`IlpModel.lower_bound`'s relaxation
does, changes neither optimum. Nor does bounding a buffer's ``v`` by 1 (it costs nothing, only
loosens the memory rows as it falls, and ``Z[b] − X[b] ≤ 1``), which keeps the relaxation's
Lagrangian finite at duals whose reduced cost of ``v`` is a rounding error below 0. A class with
one row or one column needs neither: its cost folds into the other group's ``x``; groups
with one choice are constants. Costs enter in microseconds. The model is built once;
:meth:`IlpModel.solve` sets the objective for a weight vector (the per-point optima that
regret is measured against reuse the model).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import highspy
import mip
import numpy as np

from planner.branching import branch_and_bound, search_threads
from planner.plan import MEMORY_PARTS, PART_NAMES, MemoryBreakdown, format_bytes
from planner.problem import EdgeClass, Problem
from planner.relaxation import INTEGRAL, LinearRows, LpRelaxation, RelaxedBound, fractional_groups
from shapecore.errors import ShapecoreError

__all__ = ["IlpModel", "MemoryBudgetError", "Optimum", "RangePlans", "Solution", "SOLVERS", "solve_mean_regret"]

SOLVERS = {"highs": mip.HIGHS, "cbc": mip.CBC}
_SCALE = 1e6  # seconds -> microseconds
_TIE_BREAK = 1e-3  # weight of the expected ratio beside the worst ratio
_REGRET_GAP = 1e-2  # the worst-regret MIP stops within 1% of its bound (its LP relaxation is weak)
_EXACT_GAP = 1e-4  # a plan proved within this gap counts as optimal (python-mip's default gap)
_MEMORY_TOLERANCE = 1e-6  # a plan's peak may exceed the budget by this fraction (the solver's feasibility tolerance)
_CUTS_PER_POINT = 4  # memory constraints added per batch point and round: the steps holding the most
_LAST_ROUND_SECONDS = 1.0  # a memory round begun after the time limit: time to take the start plan
_ROUNDING_SHARE = 0.75  # the relaxation and its rounding end within this share of a budgeted solve's time limit
_PEAK_PRICE = 1e3  # least_peak_choices' first rounds: the peak (in units of the least-memory plan's) at this many plans' costs
_PRICE_SCALES = (1.001, 1.01, 1.05)  # _priced_plan: memory priced at these multiples of its duals


class Optimum(NamedTuple):
    """A batch point's own optimum (seconds): proved optimal when ``exact``, else a lower bound on it.

    ``source`` says where it comes from: ``"mip"`` (the point's own ILP: its optimum, or the
    bound it reached by its time limit), ``"lp relaxation"`` (:meth:`IlpModel.lower_bound`; exact
    when the relaxation's optimum is a plan), or
    ``"partial lp relaxation"`` (the relaxation stopped early, at its time limit: a weaker bound).
    """

    value: float
    exact: bool
    source: str


class RangePlans(NamedTuple):
    """:meth:`IlpModel.worst_regret_per_range`'s answer: one plan (a choice per group) per range, whether
    the MIP proved ``worst`` (the least worst regret, within 1%), the bound it reached, and the seconds."""

    choices: list[list[int]]
    optimal: bool
    worst: float
    bound: float
    solve_seconds: float


@dataclass
class Solution:
    """A choice per group and how the solver got there (objective: expected seconds)."""

    choices: list[int]
    status: str
    objective: float
    bound: float | None
    gap: float | None
    variables: int
    constraints: int
    build_seconds: float
    solve_seconds: float


class IlpModel:
    """The formulation of the module docstring on python-mip, built once per problem; a solve
    stops at a plan proved within ``mip_gap`` (relative) of the optimum."""

    def __init__(self, problem: Problem, *, solver: str = "highs", memory_budget: float | None = None,
                 mip_gap: float = 1e-4) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)} or 'greedy', got {solver!r}")
        start = time.perf_counter()
        self.problem = problem
        self.solver = solver
        self.lp = LinearRows()  # the model's columns and rows, as arrays (its LP relaxation's); python-mip's from them
        self._mip: mip.Model | None = None  # built from lp when first asked for (:attr:`model`)
        self._names: list[str] = []  # each column's name, for the python-mip model
        self._row_names: list[str] = []
        self._memory_rows: list[int] = []  # the rows of lp that are memory constraints (:meth:`_add_memory_constraint`)
        self._binary: list[int] = []  # the columns that are binary in the MIP (the x)
        self.x: list[list[int] | None] = []  # columns, as every variable below
        self.folded: list[EdgeClass] = []  # one row or one column: priced on the other group's choices
        self.transport: list[tuple[EdgeClass, list[list[int]]]] = []
        self.flows: list[tuple[EdgeClass, list[int]]] = []
        self.memory_budget = memory_budget
        self.mip_gap = mip_gap  # a solve stops at a plan proved within this fraction of the optimum
        self.memory_steps: set[tuple[int, int]] = set()  # (point, step) whose memory constraint is in the model
        self._buffers: dict[tuple, list[tuple[int | None, np.ndarray]]] = {}  # _buffer's terms, per span
        self._buffer_rows: list[tuple[int, dict[int, float], float]] = []  # v ≥ Σ terms + constant
        self._peak: int | None = None  # least_peak_choices' model: the peak (in units of memory_budget) it minimizes
        self._relaxation: LpRelaxation | None = None  # built by the first lower_bound
        self._flows: tuple[np.ndarray, np.ndarray] | None = None  # _flow_costs, once
        self._add_choice_variables()
        self._add_agreements()
        for cls in problem.edge_classes:
            self._add_routing(cls)
        if memory_budget is not None:
            self._add_memory_cuts([0] * len(problem.groups), seed=True)
            least = self.problem.peak_memory(self.least_memory_choices()).timeline
            for k in range(least.shape[1]):  # where the most sharded plan holds the most: where a tight budget binds
                for step in np.argsort(-least[:, k], kind="stable")[:_CUTS_PER_POINT].tolist():
                    if (k, step) not in self.memory_steps:
                        self._add_memory_constraint(k, step)
        self.build_seconds = time.perf_counter() - start

    # -- the python-mip model ---------------------------------------------------------------------

    @property
    def model(self) -> mip.Model:
        """The python-mip model of :attr:`lp` (the ``x`` binary), built when first asked for: a plan
        whose LP relaxation is one-hot (:meth:`solve`) needs none. On the 32-layer LLaMA training
        graph on (2, 4, 8) (224k columns, 25k rows) it takes 1.7–2.0 CPU s to build, the rows as
        arrays 0.3–0.4: the regret objective's plan there, found by the relaxation, uses none."""
        if self._mip is None:
            model = mip.Model(sense=mip.MINIMIZE, solver_name=SOLVERS[self.solver])
            model.verbose = 0
            model.threads = 1
            model.max_mip_gap = self.mip_gap
            binary = set(self._binary)
            for i, name in enumerate(self._names):
                model.add_var(var_type=mip.BINARY if i in binary else mip.CONTINUOUS, lb=0.0, name=name)
            self._mip = model
            lp = self.lp
            for r, name in enumerate(self._row_names):
                terms = dict(zip(lp.index[lp.starts[r]:lp.starts[r + 1]], lp.value[lp.starts[r]:lp.starts[r + 1]]))
                sense = "=" if lp.row_lower[r] == lp.row_upper[r] else "<"
                self._add_constr(terms, -lp.row_upper[r], sense, name)
        return self._mip

    def _add_constr(self, terms: dict[int, float], const: float, sense: str, name: str) -> mip.Constr:
        """``Σ terms + const`` ``=`` or ``<`` (≤) 0 in the python-mip model (``terms``: column → coefficient)."""
        columns = self.model.vars
        return self.model.add_constr(mip.LinExpr(expr={columns[i]: c for i, c in terms.items()}, const=const, sense=sense), name)

    # -- families of variables and constraints ------------------------------------------------

    def _add_choice_variables(self) -> None:
        """x[g,c] binary with Σ_c x[g,c] = 1; single-choice groups are constants."""
        for g, group in enumerate(self.problem.groups):
            if group.choices == 1:
                self.x.append(None)
                continue
            xs = self._add_columns([f"x{g}_{c}" for c in range(group.choices)], binary=True)
            self._equation({v: 1.0 for v in xs}, 1.0, f"one{g}")
            self.x.append(xs)

    def _add_agreements(self) -> None:
        """Σ_{c of key k} x[g,c] equal over the groups ``g`` of each of
        :attr:`~planner.problem.Problem.agreements`, for every key but one (the sums over all
        keys are 1): at a one-hot ``x`` its groups take choices of one key."""
        for i, members in enumerate(self.problem.agreements):
            (first, keys), *others = members
            for j, k in enumerate(list(dict.fromkeys(keys))[:-1]):
                for g, their in others:
                    terms: dict[int, float] = {}
                    constant = self._indicator(first, [c for c, key in enumerate(keys) if key == k], 1.0, terms)
                    constant += self._indicator(g, [c for c, key in enumerate(their) if key == k], -1.0, terms)
                    self._equation(terms, -constant, f"agree{i}_{g}_{j}")

    def _equation(self, terms: dict[int, float], rhs: float, name: str) -> None:
        """Σ terms = rhs (expressions built as dicts: python-mip's operators are slow at this size)."""
        self._add_row(terms, -rhs, "=", name)

    def _add_row(self, terms: dict[int, float], const: float, sense: str, name: str) -> None:
        """``Σ terms + const`` ``=`` or ``<`` (≤) 0, in :attr:`lp` (and the python-mip model once built)."""
        self.lp.add_row(terms.items(), -const if sense == "=" else -np.inf, -const)
        self._row_names.append(name)
        if self._mip is not None:
            self._add_constr({i: c for i, c in terms.items() if c}, const, sense, name)

    def _add_columns(self, names: list[str], *, binary: bool = False) -> list[int]:
        """Columns ``≥ 0`` (binary: in ``{0, 1}``), in :attr:`lp` (and the python-mip model once built)."""
        first = self.lp.columns
        self.lp.add_columns(len(names), upper=1.0 if binary else np.inf)
        self._names.extend(names)
        columns = list(range(first, first + len(names)))
        if binary:
            self._binary.extend(columns)
        if self._mip is not None:
            for name in names:
                self._mip.add_var(var_type=mip.BINARY if binary else mip.CONTINUOUS, lb=0.0, name=name)
        return columns

    def _add_column(self, name: str) -> int:
        """A continuous ``v ≥ 0``, in :attr:`lp` (and the python-mip model once built)."""
        return self._add_columns([name])[0]

    def _indicator(self, g: int, choices: list[int], sign: float, terms: dict[int, float]) -> float:
        """Add ``sign·Σ x[g,c]`` over ``choices`` to ``terms``; returns the constant part (single-choice groups)."""
        xs = self.x[g]
        if xs is None:
            return sign if 0 in choices else 0.0
        for c in choices:
            terms[xs[c]] = terms.get(xs[c], 0.0) + sign
        return 0.0

    def _add_routing(self, cls: EdgeClass) -> None:
        """One routing family per edge class with several rows and columns (see the docstring)."""
        if len(cls.rows) == 1 or len(cls.cols) == 1:
            self.folded.append(cls)
            return
        e = len(self.transport) + len(self.flows)
        graph = self.problem.state_graph(cls.meta)
        if len(cls.rows) * len(cls.cols) <= len(graph.arcs):
            flat = self._add_columns([f"y{e}_{a}_{b}" for a in range(len(cls.rows)) for b in range(len(cls.cols))])
            ys = [flat[a * len(cls.cols):(a + 1) * len(cls.cols)] for a in range(len(cls.rows))]
            for a, (_, block) in enumerate(cls.rows):
                terms = {y: 1.0 for y in ys[a]}
                constant = self._indicator(cls.producer_group, block, -1.0, terms)
                self._equation(terms, -constant, f"give{e}_{a}")
            for b, (_, block) in enumerate(cls.cols):
                terms = {ys[a][b]: 1.0 for a in range(len(cls.rows))}
                constant = self._indicator(cls.consumer_group, block, -1.0, terms)
                self._equation(terms, -constant, f"need{e}_{b}")
            self.transport.append((cls, ys))
            return
        fs = self._add_columns([f"f{e}_{a}" for a in range(len(graph.arcs))])
        balance: list[dict[int, float]] = [{} for _ in graph.states]
        constant = [0.0] * len(graph.states)
        for a, (i, j, _, _) in enumerate(graph.arcs):
            balance[i][fs[a]] = 1.0
            balance[j][fs[a]] = -1.0
        for placement, block in cls.rows:
            s = graph.index[placement]
            constant[s] += self._indicator(cls.producer_group, block, -1.0, balance[s])
        for placement, block in cls.cols:
            s = graph.index[placement]
            constant[s] += self._indicator(cls.consumer_group, block, 1.0, balance[s])
        for s, terms in enumerate(balance):
            if terms:
                self._equation(terms, -constant[s], f"flow{e}_{s}")
        self.flows.append((cls, fs))

    def least_memory_choices(self) -> list[int]:
        """Each group's choice holding the fewest bytes (at its largest point): the most sharded plan."""
        return [int(np.argmin(group.memory.max(axis=1))) for group in self.problem.groups]  # type: ignore[union-attr]

    def _add_memory_cuts(self, choices: list[int], *, per_point: int | None = _CUTS_PER_POINT, seed: bool = False) -> bool:
        """Add the memory constraints of the ``per_point`` steps (every one: None) holding the
        most memory under ``choices`` at each point, where it exceeds the budget; returns whether
        any was added. A solved plan over the budget always adds one (its peak step's
        constraint, exact for it, cuts it off)."""
        timeline = self.problem.peak_memory(choices).timeline
        limit = self.memory_budget if self._peak is None else self.model.vars[self._peak].x * self.memory_budget  # type: ignore[operator]
        added = False
        for k in range(timeline.shape[1]):
            for step in np.argsort(-timeline[:, k], kind="stable")[:per_point].tolist():
                if timeline[step, k] <= limit * (1 + _MEMORY_TOLERANCE):
                    break
                if (k, step) in self.memory_steps:
                    if not seed:
                        raise AssertionError(f"the memory constraint of step {step} at point {k} holds for a plan that "
                                             f"needs {timeline[step, k]:.0f} bytes there: the ILP and peak_memory disagree")
                    continue
                self._add_memory_constraint(k, step)
                added = True
        return added

    def _add_memory_constraint(self, k: int, step: int) -> None:
        """Σ live_step[g,c,k]·x[g,c] + Σ size_b·v_b ≤ budget (bytes per device, in units of the
        budget, so the solver's feasibility tolerance is :data:`_MEMORY_TOLERANCE` of it), the
        ``v`` those of the redistribution buffers live at ``step`` (:meth:`_buffer`); ``≤ peak``
        in :meth:`least_peak_choices`' model."""
        self.memory_steps.add((k, step))
        budget = self.memory_budget
        assert budget is not None
        fixed = -1.0 if self._peak is None else 0.0
        terms: dict[int, float] = {}
        for live, xs in zip(self.problem.live_memory(step), self.x):
            column = live[:, k] / budget
            if xs is None:
                fixed += float(column[0])
            else:
                terms.update((xs[c], float(column[c])) for c in range(len(xs)) if column[c])
        for span in self.problem.reshard_spans():
            if span[2] <= step <= span[3]:
                for v, size in self._buffer(span):
                    share = float(size[k]) / budget
                    if v is None:
                        fixed += share
                    else:
                        terms[v] = terms.get(v, 0.0) + share
        if self._peak is not None:
            terms[self._peak] = -1.0
        self._memory_rows.append(len(self.lp.row_lower))
        self._add_row(terms, fixed, "<", f"memory{k}_{step}")

    def _buffer(self, span: tuple[str, int, int, int, bool]) -> list[tuple[int | None, np.ndarray]]:
        """What the redistribution of ``span`` holds, as terms ``(v, bytes per point)`` whose sum
        ``Σ bytes·v`` at every one-hot ``x`` is its buffer (``v`` None: always held).

        Producer and consumer in one group: ``v`` is each choice's ``x`` that redistributes (exact).
        Otherwise, with ``Z[b]``/``X[b]`` the indicators that the consumer needs / the producer
        gives placement ``b``, one ``v_b ≥ Z[b] − X[b]``, ``v_b ≥ 0`` per placement ``b`` the
        consumer may need (``X − Z`` and the placements given, for a gradient's unreduced
        storage): at a one-hot ``x`` the least ``v_b`` is 1 for the placement needed when it is
        not the one given, else 0. Its LP relaxation, ``Σ_b size_b·max(0, Z[b] − X[b])``, is
        no weaker than one buffer ``u ≥ size_b·(Z[b] − X[b])`` for every ``b``. The ``v`` are
        indicators, shared by every point and step."""
        found = self._buffers.get(span[:2] + span[4:])
        if found is not None:
            return found
        problem = self.problem
        consumer, operand, _, _, source = span
        producer = problem.graph.nodes[consumer].operands[operand]
        gp, gc = problem.group_of[producer], problem.group_of[consumer]
        gives = [problem.candidates[producer][i].outputs[0] for i in problem.pick[producer]]
        needs = [problem.candidates[consumer][i].inputs[operand] for i in problem.pick[consumer]]
        meta = problem.graph.nodes[producer].output
        found = []
        if gp == gc:
            xs = self.x[gp]
            for c, (a, b) in enumerate(zip(gives, needs)):
                if a != b:
                    found.append((None if xs is None else xs[c], problem.local(meta, a if source else b).nbytes))
        else:
            sign = -1.0 if source else 1.0
            for b in dict.fromkeys(gives if source else needs):
                terms: dict[int, float] = {}
                constant = self._indicator(gc, [c for c, p in enumerate(needs) if p == b], sign, terms)
                constant += self._indicator(gp, [c for c, p in enumerate(gives) if p == b], -sign, terms)
                terms = {v: c for v, c in terms.items() if c}
                if not terms:
                    if constant > 0:
                        found.append((None, problem.local(meta, b).nbytes))
                    continue
                v = self._add_column(f"v{len(self.lp.lower)}")
                self._buffer_rows.append((v, terms, constant))
                self._add_row({**terms, v: -1.0}, constant, "<", f"buffer{len(self.lp.row_lower)}")
                found.append((v, problem.local(meta, b).nbytes))
        self._buffers[span[:2] + span[4:]] = found
        return found

    def _optimize(self, time_limit: float, start: Callable[[], dict[int, float]] | None = None) -> mip.OptimizationStatus:
        """Solve the MIP, from ``start()`` (every variable's value in a plan that fits, asked
        again each round: a round's constraints add variables) when given; under a memory
        budget, re-solve with the chosen plan's peak step constrained until its exact peak fits
        (see the module docstring). The rounds share ``time_limit``; a round begun after it gets
        :data:`_LAST_ROUND_SECONDS`, in which the solver takes the start (it meets every
        constraint) if it finds nothing better, so the loop ends at a plan that fits."""
        deadline = time.perf_counter() + time_limit
        while True:  # each round adds a constraint not in the model: there are finitely many
            if start is not None:
                columns = self.model.vars
                self.model.start = [(columns[i], value) for i, value in start().items()]
            status = self.model.optimize(max_seconds=max(deadline - time.perf_counter(), _LAST_ROUND_SECONDS))
            if self.memory_budget is None or status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
                return status
            if not self._add_memory_cuts(self._chosen()):
                return status

    def _greedy_start(self, weights: np.ndarray) -> Callable[[], dict[int, float]] | None:
        """Under a memory budget, the greedy plan (:class:`~planner.greedy.GreedyModel`, memory
        priced at the steps over the budget) when it fits, as :meth:`_optimize`'s start: a plan
        the MIP starts from, so that a solve stopped by its time limit still has one. None
        without a budget or a fit."""
        if self.memory_budget is None:
            return None
        from planner.greedy import GreedyModel  # the greedy baseline reports its plans as this module's Solution

        greedy = GreedyModel(self.problem, memory_budget=self.memory_budget).solve(weights)
        return functools.partial(self._values, greedy.choices, weights) if greedy.status == "greedy" else None

    def _chosen(self) -> list[int]:
        columns = self.model.vars
        return [0 if xs is None else int(np.argmax([columns[v].x for v in xs])) for xs in self.x]

    # -- objective ------------------------------------------------------------------------------

    def _cost_matrix(self, route: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cost (per batch point) of every column, ``[columns, points]``, and the constant, with
        redistributions that are not flows routed for the weights ``route``."""
        problem = self.problem
        costs = [problem.group_costs(g, route) for g in range(len(problem.groups))]
        for cls in self.folded:
            if len(cls.rows) == 1:  # the producer's placement is fixed: price each consumer choice
                group, moves = cls.consumer_group, ((cls.rows[0][0], dst, block) for dst, block in cls.cols)
            else:  # one column: price each producer choice
                group, moves = cls.producer_group, ((src, cls.cols[0][0], block) for src, block in cls.rows)
            for src, dst, block in moves:
                value = cls.count * self._dist(cls, src, dst, route)
                for c in block:
                    costs[group][c] += value
        constant = np.zeros(len(problem.points))
        matrix = np.zeros((self.lp.columns, len(problem.points)))
        for g, xs in enumerate(self.x):
            if xs is None:
                constant += costs[g][0]
            else:
                matrix[xs] = costs[g]
        for cls, ys in self.transport:
            for a, (src, _) in enumerate(cls.rows):
                for b, (dst, _) in enumerate(cls.cols):
                    matrix[ys[a][b]] = cls.count * self._dist(cls, src, dst, route)
        columns, flow_costs = self._flow_costs()
        matrix[columns] = flow_costs
        return matrix, constant

    def _flow_costs(self) -> tuple[np.ndarray, np.ndarray]:
        """The flow columns and their costs per point (arc costs times edges: no route to choose)."""
        if self._flows is None:
            columns = [v for _, fs in self.flows for v in fs]
            costs = [self.problem.state_graph(cls.meta).costs * cls.count for cls, _ in self.flows]
            self._flows = (np.array(columns, dtype=np.int64),
                           np.concatenate(costs) if costs else np.zeros((0, len(self.problem.points))))
        return self._flows

    def _dist(self, cls: EdgeClass, src: tuple, dst: tuple, weights: np.ndarray) -> np.ndarray:
        if src == dst:
            return np.zeros(len(self.problem.points))
        return self.problem.move_cost(cls.meta, src, dst, weights)

    def _objective(self, weights: np.ndarray) -> tuple[np.ndarray, float]:
        """The ``weights``-expected cost: every column's coefficient (microseconds) and the constant part (seconds)."""
        matrix, constant = self._cost_matrix(weights)
        return matrix @ weights * _SCALE, float(constant @ weights)

    def _linear(self, coefficients: np.ndarray) -> mip.LinExpr:
        """``Σ coefficient·column`` over the nonzero ``coefficients`` (one per column)."""
        columns = self.model.vars
        return mip.LinExpr(expr={columns[i]: c for i, c in zip(np.flatnonzero(coefficients).tolist(),
                                                                coefficients[coefficients != 0].tolist())})

    def _set_objective(self, weights: np.ndarray) -> float:
        """Make the ``weights``-expected cost the objective; returns its constant part (seconds)."""
        costs, constant = self._objective(weights)
        self.model.objective = self._linear(costs)
        return constant

    def solve(self, weights: np.ndarray, *, time_limit: float = 60.0) -> Solution:
        """Minimize the ``weights``-expected cost; the best solution found within ``time_limit``.

        The LP relaxation is solved first (warm-started from the last bound's basis, when
        :meth:`lower_bound` built it): when its optimum is one-hot (and, under a memory budget,
        fits it) that is the MIP's optimum, found without the MIP's presolve and search (on the
        32-layer LLaMA training graph on (2, 4, 8), 0.4–1.7 s instead of 6 s, the regret
        objective's relaxation being one-hot there; a fresh model's solve of the expected cost,
        ``bench/planner.py``'s first solve: 1.1–1.3 s instead of the MIP's 10.9–11.7 on the
        2-layer graph on (2, 4, 8), 0.15 s instead of 1.4–1.8 on the 32-layer on (8, 8)), and
        no MIP can state another: HiGHS 1.15's MIP proved an optimum of 2.20 ns on an MLP's
        forward on (2, 2, 2) where the relaxation's one-hot optimum is a plan of 1.71 ns
        (``tests/planner/test_ilp.py``). Under a budget the relaxation's solution is then
        rounded by :meth:`_relax_and_fix` to a plan that fits, and priced (:meth:`_priced_plan`); the cheaper plan is the seed:
        when the relaxation's bound proves it within :attr:`mip_gap` it is
        the answer, else :meth:`_search` goes on from it until it proves a plan or the time is
        up (its bound, when higher, replaces the relaxation's). Without a seed the MIP is solved (under
        a budget from the greedy plan, :meth:`_greedy_start`), its bound the larger of the MIP's
        and the relaxation's (the MIP may not finish its own root in the time). The relaxation
        gets at most half of ``time_limit``, the pricing and the rounding what is left of
        :data:`_ROUNDING_SHARE` of it; the search or the MIP, the rest. Status ``optimal`` (proved within
        :data:`_EXACT_GAP`), ``within mip_gap`` or ``feasible (time limit)``."""
        start = time.perf_counter()
        costs, constant = self._objective(weights)
        relaxed = None
        if self.lp.columns:
            self._build_relaxation()
            relaxed, choices = self._relaxed(costs, time_limit / 2)
            if choices is not None:
                objective = relaxed.value / _SCALE + constant
                return Solution(choices=choices, status="optimal", objective=objective, bound=objective, gap=0.0,
                                variables=self.lp.columns, constraints=len(self.lp.row_lower),
                                build_seconds=self.build_seconds, solve_seconds=time.perf_counter() - start)
            if self.memory_budget is not None and relaxed.values is not None:
                deadline = start + time_limit * _ROUNDING_SHARE
                seeds = [self._priced_plan(weights, relaxed.duals, deadline),  # type: ignore[arg-type]  # set with values
                         self._relax_and_fix(weights, relaxed.values, deadline)]
                costs = self._objective(weights)[0]  # the rounding may have added buffers
                found = {tuple(s): float(self.problem.evaluate(s, weights).total @ weights) for s in seeds if s is not None}
                if found:
                    seed = list(min(found, key=found.__getitem__))  # the cheaper (the priced one on a tie)
                    objective = found[tuple(seed)]
                    bound = min(relaxed.value / _SCALE + constant, objective)
                    proved = objective - bound <= self.mip_gap * objective
                    if not proved:  # the search from the plan, instead of the MIP
                        seed, objective, bound, proved = self._search(weights, seed, objective, bound, start + time_limit)
                    gap = max(0.0, (objective - bound) / objective) if objective > 0 else 0.0
                    return Solution(choices=seed, status=_proved(gap) if proved else "feasible (time limit)",
                                    objective=objective, bound=bound, gap=gap, variables=self.lp.columns,
                                    constraints=len(self.lp.row_lower), build_seconds=self.build_seconds,
                                    solve_seconds=time.perf_counter() - start)
        if not self.lp.columns:  # every decision has one choice (python-mip refuses a model without a column)
            return self._only_plan(constant, start, time_limit)
        self.model.objective = self._linear(costs)
        status = self._optimize(max(time_limit - (time.perf_counter() - start), 0.0), self._greedy_start(weights))
        if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
            raise self._failure(status, time_limit)
        choices = self._chosen()
        objective = float(self.model.objective_value) / _SCALE + constant
        bound = float(self.model.objective_bound) / _SCALE + constant
        if relaxed is not None:  # a lower bound on a relaxation of the MIP (fewer memory rows, or cut short)
            bound = min(max(bound, relaxed.value / _SCALE + constant), objective)
        gap = max(0.0, (objective - bound) / objective) if objective > 0 else 0.0
        return Solution(
            choices=choices,
            status=_proved(gap) if status == mip.OptimizationStatus.OPTIMAL else "feasible (time limit)",
            objective=objective,
            bound=bound,
            gap=gap,
            variables=self.model.num_cols,
            constraints=self.model.num_rows,
            build_seconds=self.build_seconds,
            solve_seconds=time.perf_counter() - start,
        )

    def _search(self, weights: np.ndarray, seed: list[int], objective: float, bound: float,
                deadline: float) -> tuple[list[int], float, float, bool]:
        """The plan, its cost, a lower bound on the optimum and whether it proves the plan within
        :attr:`mip_gap`, after :func:`~planner.branching.branch_and_bound` from ``seed`` (a plan that
        fits, costing ``objective``; ``bound``: the relaxation's) until it proves a plan within
        :attr:`mip_gap` or ``deadline`` (``time.perf_counter``) passes."""
        relaxation = self._build_relaxation()
        relaxations = [relaxation, *(relaxation.copy() for _ in range(search_threads() - 1))]

        def check(choices: list[int]) -> np.ndarray | None:
            if not self._add_memory_cuts(choices):
                return None
            self._build_relaxation()
            for twin in relaxations[1:]:
                twin.extend(self.lp, unit_columns=self._unit_columns())
            return self._objective(weights)[0]

        costs, constant = self._objective(weights)
        searched = branch_and_bound(relaxations, costs, constant * _SCALE, self.x, (seed, objective * _SCALE),
                                    check, gap=self.mip_gap, deadline=deadline)
        if searched.choices is not seed:
            seed, objective = searched.choices, float(self.problem.evaluate(searched.choices, weights).total @ weights)
        return seed, objective, min(max(bound, searched.bound / _SCALE), objective), searched.proved

    def _only_plan(self, cost: float, start: float, time_limit: float) -> Solution:
        """The one plan there is, when no decision has a choice (a plan on a one-device mesh)."""
        choices = self._chosen()
        peak = float(self.problem.peak_memory(choices).total.max())
        if self.memory_budget is not None and peak > self.memory_budget * (1 + _MEMORY_TOLERANCE):
            raise self._over_budget(time_limit)
        return Solution(choices=choices, status="optimal", objective=cost, bound=cost, gap=0.0, variables=0,
                        constraints=len(self.lp.row_lower), build_seconds=self.build_seconds,
                        solve_seconds=time.perf_counter() - start)

    def lower_bound(self, weights: np.ndarray, *, time_limit: float = 60.0) -> Optimum:
        """A lower bound on the ``weights``-expected cost of every plan: the LP relaxation's optimum
        (:class:`~planner.relaxation.LpRelaxation`, warm-started from the previous call's basis).

        When the relaxation's optimum is a plan (:meth:`_relaxed`), the bound is the optimum:
        ``exact``. When the relaxation does not finish within ``time_limit``, the bound is the
        larger of the Lagrangian at the duals it reached and :meth:`decision_minimum`: weaker,
        never above the optimum, its ``source`` ``"partial lp relaxation"``. The relaxation lies within 1.2% of
        the optimum on the 32-layer LLaMA training graph on (8, 8), within 0.1% on (2, 4, 8)
        at 2 layers (``bench/planner.py``).
        """
        costs, constant = self._objective(weights)
        self._build_relaxation()
        bound, choices = self._relaxed(costs, time_limit)
        if bound.finished:
            return Optimum(bound.value / _SCALE + constant, exact=choices is not None, source="lp relaxation")
        return Optimum(max(bound.value / _SCALE + constant, self.decision_minimum(weights)), exact=False,
                       source="partial lp relaxation")

    def _unit_columns(self) -> np.ndarray:
        """The routing columns (transportation and flow) and the buffers' ``v``, which no optimum
        needs above 1 (see the module docstring)."""
        transport = np.array([v for _, ys in self.transport for row in ys for v in row], dtype=np.int64)
        buffers = np.array([v for v, _, _ in self._buffer_rows], dtype=np.int64)
        return np.concatenate([transport, self._flow_costs()[0], buffers])

    def _build_relaxation(self) -> LpRelaxation:
        """The LP relaxation of :attr:`lp` (built once; the rows added since join it)."""
        if self._relaxation is None:
            self._relaxation = LpRelaxation(self.lp, unit_columns=self._unit_columns(),
                                            barrier_first=self.memory_budget is not None)
        else:
            self._relaxation.extend(self.lp, unit_columns=self._unit_columns())
        return self._relaxation

    def _priced_plan(self, weights: np.ndarray, duals: np.ndarray, deadline: float) -> list[int] | None:
        """The cheapest plan that fits the budget among the optima of the relaxation without the
        memory rows it had at its optimum, each priced instead at :data:`_PRICE_SCALES` times its
        dual there (``duals``, one per row then; a Lagrangian heuristic): where that optimum mixes a
        plan over the budget with one within it, memory priced a little above its duals tips the
        balance to the one within. None where none fits or ``deadline`` (``time.perf_counter``)
        passes. Under their budgets (``bench/memory_budget.py``, (2, 2)): GPT-2's optimum (2.4249
        ms, the rounding's 2.9043), LLaMA's 5.4702 (the rounding's 5.2443), Phi-3's 11.80 (the
        rounding's 6.92, the greedy plan's 15.56; 8.04 ms at the duals of the relaxation before it
        bounded the buffers' ``v`` by 1, another optimal vertex).
        """
        rows = np.array([r for r in self._memory_rows if r < len(duals)], dtype=np.int64)
        if not len(rows):
            return None
        relaxation = self._build_relaxation()
        costs = self._objective(weights)[0]
        found: dict[tuple[int, ...], float] = {}
        for scale in _PRICE_SCALES:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            values = relaxation.priced_optimum(costs, rows, scale * np.maximum(-duals[rows], 0.0), time_limit=left)
            if values is None:
                continue
            choices = tuple(0 if xs is None else int(np.argmax(values[xs])) for xs in self.x)
            peak = float(self.problem.peak_memory(list(choices)).total.max())
            if choices not in found and peak <= self.memory_budget * (1 + _MEMORY_TOLERANCE):  # type: ignore[operator]
                found[choices] = float(self.problem.evaluate(list(choices), weights).total @ weights)
        return list(min(found, key=found.__getitem__)) if found else None

    def _relax_and_fix(self, weights: np.ndarray, values: np.ndarray, deadline: float) -> list[int] | None:
        """A plan that fits the memory budget, rounded from the relaxation's solution ``values``
        (relax and fix): every group whose ``x`` is fractional takes its largest (its other
        choices held at 0) and the relaxation is solved again, from the basis it holds (a few
        hundred iterations), until it is integral. When that leaves no solution, the more decided
        half of those groups is fixed, then only the most decided one; when that leaves none
        either, its largest choice is ruled out instead: each solve holds more columns at 0, so
        the rounding ends (on Phi-3's training graph on (2, 2) under its budget, the half reaches a
        plan of 6.92 ms in about 2 s, where fixing one group at a time took 9 s to 6.88 ms and a
        10 s solve ended at the priced plan's 11.80). A plan over the budget adds its steps'
        constraints (:meth:`_add_memory_cuts`) and goes on from the fixes made,
        or, when these leave no plan under the new rows, from the first half of its steps, a
        quarter, an eighth, none (rows are added finitely often, so the rounding ends: on Phi-3's
        training graph on (2, 2) the fixes first left none, ``bench/memory_budget.py``). None
        when no plan is left or ``deadline`` (``time.perf_counter``) passes. On the 1-layer LLaMA training
        graph on (2, 2) under its budget (``bench/memory_budget.py``) two rounds (0.6 CPU s) take
        the root relaxation (5.012 ms) to a plan within 0.12% of the optimum (5.244 against
        5.238 ms), where the greedy plan costs 18.2 ms."""
        relaxation = self._build_relaxation()
        costs = self._objective(weights)[0]
        zero: list[int] = []  # the columns held at 0, in the order the rounding fixed them
        kept: list[int] = []  # len(zero) after each rounding step
        while True:
            choices = [0 if xs is None else int(np.argmax(values[xs])) for xs in self.x]
            fractional = sorted(fractional_groups(values, self.x),
                                key=lambda g: -float(values[self.x[g]].max()))  # type: ignore[index]
            if fractional:
                def others(groups: list[int]) -> list[int]:
                    return [v for g in groups for c, v in enumerate(self.x[g]) if c != choices[g]]  # type: ignore[arg-type]
                first = fractional[0]
                tries = [zero + others(fractional[:n]) for n in (len(fractional), len(fractional) // 2) if n > 1]
                tries += [zero + others([first]), zero + [self.x[first][choices[first]]]]  # type: ignore[index]
            elif self._add_memory_cuts(choices):  # a plan over the budget: solve again with its steps' rows
                relaxation, costs = self._build_relaxation(), self._objective(weights)[0]
                # the fixes may leave no plan under the new rows: undo the later half of the steps, and again
                steps = dict.fromkeys([len(kept), len(kept) // 2, len(kept) // 4, len(kept) // 8, 0])
                tries = [zero[:kept[n - 1]] if n else [] for n in steps]
            else:
                return choices
            for fixed in tries:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return None
                bound = relaxation.minimize(costs, time_limit=left, zero=np.array(fixed, dtype=np.int64))
                if bound.values is not None:
                    if len(fixed) < len(zero):
                        kept = [n for n in kept if n <= len(fixed)]
                    zero, values = fixed, bound.values
                    if kept[-1:] != [len(zero)]:
                        kept.append(len(zero))
                    break
            else:
                return None

    def _relaxed(self, costs: np.ndarray, time_limit: float) -> tuple[RelaxedBound, list[int] | None]:
        """The LP relaxation minimized for the objective ``costs`` (:meth:`_objective`'s), and the
        plan it chose when that is a plan: every ``x`` within :data:`~planner.relaxation.INTEGRAL` of 0 or 1 and, under
        a memory budget, a peak that fits it (the relaxation may lack memory constraints added
        since it was built). Such a plan is optimal: no plan costs less than the relaxation's
        minimum, and the flows of a one-hot ``x`` cost what the plan costs."""
        relaxation = self._relaxation
        assert relaxation is not None
        bound = relaxation.minimize(costs[:relaxation.columns], time_limit=time_limit)
        if bound.infeasible:
            raise self._failure(mip.OptimizationStatus.INFEASIBLE, time_limit)
        if bound.values is None:
            return bound, None
        choices = []
        for xs in self.x:
            if xs is None:
                choices.append(0)
                continue
            values = bound.values[xs]
            if np.abs(values - np.round(values)).max() > INTEGRAL:
                return bound, None
            choices.append(int(np.argmax(values)))
        if self.memory_budget is not None:
            timeline = self.problem.peak_memory(choices).timeline
            if timeline.max(initial=0.0) > self.memory_budget * (1 + _MEMORY_TOLERANCE):
                return bound, None
        return bound, choices

    def decision_minimum(self, weights: np.ndarray) -> float:
        """A lower bound on the ``weights``-expected cost of every plan, found without a solver:
        each group's cheapest choice, priced with the cheapest redistribution into it on every
        routed edge class (from whichever placement the producer gives). Every edge is charged
        to its consumer at no more than it costs, so no plan costs less."""
        costs, constant = self._objective(weights)
        incoming: dict[int, list[tuple[EdgeClass, list[float]]]] = {}
        for cls, ys in self.transport:
            cheapest = [min(float(costs[row[b]]) for row in ys) for b in range(len(cls.cols))]
            incoming.setdefault(cls.consumer_group, []).append((cls, cheapest))
        for cls, _ in self.flows:
            given = [src for src, _ in cls.rows]
            cheapest = [0.0 if dst in given else  # the producer may give it as it is (most placements)
                        min(cls.count * float(self._dist(cls, src, dst, weights) @ weights) * _SCALE for src in given)
                        for dst, _ in cls.cols]
            incoming.setdefault(cls.consumer_group, []).append((cls, cheapest))
        total = 0.0
        for g, xs in enumerate(self.x):
            if xs is None:
                continue
            best = costs[xs]
            for cls, cheapest in incoming.get(g, ()):
                for (_, block), cost in zip(cls.cols, cheapest):
                    best[block] += cost
            total += float(best.min())
        return total / _SCALE + constant

    def _values(self, choices: list[int], weights: np.ndarray) -> dict[int, float]:
        """Every variable's value in the solution that takes ``choices`` (redistributions routed for ``weights``)."""
        values: dict[int, float] = {}
        for g, xs in enumerate(self.x):
            if xs is not None:
                values.update((v, float(c == choices[g])) for c, v in enumerate(xs))
        for cls, ys in self.transport:
            a = next(i for i, (_, block) in enumerate(cls.rows) if choices[cls.producer_group] in block)
            b = next(i for i, (_, block) in enumerate(cls.cols) if choices[cls.consumer_group] in block)
            values.update((y, float(i == a and j == b)) for i, row in enumerate(ys) for j, y in enumerate(row))
        for cls, fs in self.flows:
            src = next(p for p, block in cls.rows if choices[cls.producer_group] in block)
            dst = next(p for p, block in cls.cols if choices[cls.consumer_group] in block)
            used = set(self.problem.state_graph(cls.meta).path(src, dst, weights) or ()) if src != dst else set()
            values.update((f, float(a in used)) for a, f in enumerate(fs))
        for v, terms, constant in self._buffer_rows:
            values[v] = max(0.0, constant + sum(c * values[x] for x, c in terms.items()))
        return values

    def solve_worst_regret(self, weights: np.ndarray, optima: np.ndarray, *, time_limit: float = 60.0) -> Solution:
        """Minimize the worst ratio of cost to ``optima`` over the points (ties: expected ratio).

        First the expected ratio is minimized (:func:`solve_mean_regret`, whose plan seeds the next one);
        then ``t`` and ``cost_k(x) ≤ t · optimum_k`` for every point ``k`` are added
        (redistributions that are not flows routed for ``weights``), solved to within 1% of the
        bound or the time limit, and the rows removed again (``t`` stays, a column no later
        objective or row reads). The returned ``gap`` is the worst ratio's.
        """
        start = time.perf_counter()
        seed = solve_mean_regret(self, weights, optima, time_limit=time_limit).choices
        costs, constant = self._cost_matrix(weights)
        used = np.flatnonzero(costs.any(axis=1)).tolist()
        costs = costs[used]
        matrix = costs / optima
        t = self._add_column("worst_regret")
        rows = []
        for k in range(len(optima)):
            terms = {v: c for v, c in zip(used, matrix[:, k].tolist()) if c}
            terms[t] = -1.0
            rows.append(self._add_constr(terms, float(constant[k] / optima[k]), "<", f"regret{k}"))
        tie_break = {v: c * _TIE_BREAK for v, c in zip(used, (matrix @ weights).tolist()) if c}
        tie_break[t] = 1.0
        columns = self.model.vars
        self.model.objective = mip.LinExpr(expr={columns[i]: c for i, c in tie_break.items()})
        seeded = self._values(seed, weights)
        worst_seeded = float(max(((sum(matrix[i, k] * seeded[v] for i, v in enumerate(used)) + constant[k] / optima[k])
                                  for k in range(len(optima)))))
        gap = self.model.max_mip_gap
        self.model.max_mip_gap = _REGRET_GAP
        try:
            status = self._optimize(time_limit, lambda: {**self._values(seed, weights), t: worst_seeded})
            if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
                raise self._failure(status, time_limit)
            choices = self._chosen()
            values = np.array([columns[i].x for i in used])
            objective = float((values @ costs + constant) @ weights)
            worst, bound = float(self.model.objective_value), float(self.model.objective_bound)
        finally:
            self.model.max_mip_gap = gap
            self.model.remove(rows)
        return Solution(
            choices=choices,
            status="optimal" if status == mip.OptimizationStatus.OPTIMAL else "feasible (time limit)",
            objective=objective,
            bound=None,
            gap=max(0.0, (worst - bound) / worst) if worst > 0 else 0.0,
            variables=self.model.num_cols,
            constraints=self.model.num_rows + len(rows),
            build_seconds=self.build_seconds,
            solve_seconds=time.perf_counter() - start,
        )

    def worst_regret_per_range(self, weights: np.ndarray, optima: np.ndarray, ranges: Sequence[Sequence[int]], *,
                               time_limit: float = 60.0) -> RangePlans:
        """The least worst regret of one plan per batch range whose parameters are placed alike in
        every range (the placements a module holds its parameters, gradients and optimizer state
        in), and those plans.

        ``ranges``: the points of each range (each point in one). One copy of the model per range,
        each copy's ratio rows ``cost_k(x_r) ≤ t·optimum_k`` for its points ``k`` (redistributions
        that are not flows routed for the range's ``weights``), and ``x_r[g, c] = x_s[g, c]`` for
        every group ``g`` holding a parameter placeholder (whole: the parameter's views and its
        gradient's delivery, which follow it in every plan, too); minimizes ``t`` with HiGHS to
        within 1% of its bound. Splitting a range only frees plans, so a range per point gives the
        least any ranges reach. What plans per range can reach, not a plan the planner makes: a
        MIP ``len(ranges)`` times the size of the plan's (on the 80-layer LLaMA-3-70B-shaped training
        graph on (8, 8), minutes).
        """
        if self.memory_budget is not None:
            raise ValueError("worst_regret_per_range does not take a memory budget: build the model without one")
        start = time.perf_counter()
        lp, columns, copies = self.lp, self.lp.columns, len(ranges)
        seed = solve_mean_regret(self, weights, optima, time_limit=time_limit).choices  # in every range: a start
        highs = highspy.Highs()
        for name, value in {"output_flag": False, "threads": 1, "mip_rel_gap": _REGRET_GAP,
                            "time_limit": float(time_limit)}.items():
            highs.setOptionValue(name, value)
        t = columns * copies
        upper = np.array(lp.upper)
        upper[self._unit_columns()] = 1.0  # as the relaxation bounds them
        highs.addVars(t + 1, np.concatenate([np.tile(lp.lower, copies), [0.0]]),
                      np.concatenate([np.tile(upper, copies), [highspy.kHighsInf]]))
        index, starts = np.array(lp.index, dtype=np.int64), np.array(lp.starts[:-1], dtype=np.int32)
        binary = np.array(self._binary, dtype=np.int64)
        for r in range(copies):
            highs.addRows(len(lp.row_lower), np.array(lp.row_lower), np.array(lp.row_upper), len(index), starts,
                          (index + r * columns).astype(np.int32), np.array(lp.value))
            highs.changeColsIntegrality(len(binary), (binary + r * columns).astype(np.int32),
                                        np.full(len(binary), highspy.HighsVarType.kInteger))
        routes = [np.where(np.isin(np.arange(len(weights)), points), weights, 0.0) for points in ranges]
        routes = [route / route.sum() for route in routes]  # each range's redistributions routed for its weights
        initial, seeded = np.zeros(t + 1), 0.0
        for r, (points, route) in enumerate(zip(ranges, routes)):
            matrix, constant = self._cost_matrix(route)
            for k in points:
                used = np.flatnonzero(matrix[:, k])
                highs.addRow(-highspy.kHighsInf, -constant[k] / optima[k], len(used) + 1,
                             np.concatenate([used + r * columns, [t]]).astype(np.int32),
                             np.concatenate([matrix[used, k] / optima[k], [-1.0]]))
            for v, value in self._values(seed, route).items():
                initial[v + r * columns] = value
            seeded = max(seeded, float((self.problem.evaluate(seed, route).total / optima)[list(points)].max()))
        graph = self.problem.graph
        for g, group in enumerate(self.problem.groups):
            if self.x[g] is not None and any(graph.nodes[name].role == "param" for name in group.nodes):
                for v in self.x[g]:
                    for r in range(1, copies):
                        highs.addRow(0.0, 0.0, 2, np.array([v, v + r * columns], dtype=np.int32), np.array([1.0, -1.0]))
        highs.changeColCost(t, 1.0)
        initial[t] = seeded * (1 + 1e-6)
        solution = highspy.HighsSolution()
        solution.col_value = initial.tolist()
        highs.setSolution(solution)
        highs.run()
        info = highs.getInfo()
        if info.primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
            raise ValueError(f"the solver found no plans ({highs.modelStatusToString(highs.getModelStatus())}); "
                             "raise time_limit")
        values = np.array(highs.getSolution().col_value)
        choices = [[0 if xs is None else int(np.argmax(values[np.array(xs) + r * columns])) for xs in self.x]
                   for r in range(copies)]
        return RangePlans(choices, highs.getModelStatus() == highspy.HighsModelStatus.kOptimal,
                          float(info.objective_function_value), float(info.mip_dual_bound), time.perf_counter() - start)

    def _failure(self, status: mip.OptimizationStatus, time_limit: float) -> ValueError:
        if status == mip.OptimizationStatus.INFEASIBLE:
            return self._over_budget(time_limit)
        if status == mip.OptimizationStatus.NO_SOLUTION_FOUND:
            return ValueError("the solver found no plan within the time limit; raise time_limit")
        return ValueError(f"the ILP solver stopped with status {status.name}")

    def least_peak_choices(self, *, time_limit: float = 60.0) -> tuple[list[int], bool]:
        """The plan whose peak memory per device, at its largest batch point, is least; and
        whether the solver proved it least (to its relative gap, ``1e-4``; else it is the least
        found within ``time_limit`` per solve).

        A model of its own minimizes ``peak`` subject to ``memory at step t ≤ peak`` at every
        point, the steps added lazily as under a budget (after each solve, every step where the
        chosen plan's memory exceeds ``peak``). The first rounds price the plan's cost beside
        the peak, which steers the solver to the steps that bind; the last minimizes the peak
        alone, so what it proves least is the least.
        """
        problem, weights = self.problem, self.problem.points.weights
        least = self.least_memory_choices()
        model = IlpModel(problem, solver=self.solver)
        model.memory_budget = float(problem.peak_memory(least).total.max()) or 1.0  # the unit of the memory constraints
        model._peak = model._add_column("peak")
        model._set_objective(weights)
        cost = float(problem.evaluate(least, weights).total @ weights) * _SCALE
        peak = model.model.vars[model._peak]
        model.model.objective = model.model.objective + _PEAK_PRICE * max(cost, 1.0) * peak
        for k, step in enumerate(problem.peak_memory(least).steps.tolist()):
            model._add_memory_constraint(k, step)
        tie_break = True
        while True:  # each round adds a constraint not in the model, or drops the tie-break
            status = model.model.optimize(max_seconds=time_limit)
            if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
                raise ValueError(f"the solver found no plan while minimizing the peak memory (status {status.name}); "
                                 "raise time_limit")
            choices = model._chosen()
            if model._add_memory_cuts(choices, per_point=None):
                continue
            if not tie_break:
                return choices, status == mip.OptimizationStatus.OPTIMAL
            tie_break = False
            model.model.objective = mip.LinExpr(expr={peak: 1.0})

    def _over_budget(self, time_limit: float) -> MemoryBudgetError:
        """Why no plan fits: the least memory any plan needs per device, and what dominates it."""
        choices, exact = self.least_peak_choices(time_limit=time_limit)
        return MemoryBudgetError(self.memory_budget, self.problem.peak_breakdown(choices), exact)  # type: ignore[arg-type]


def _proved(gap: float) -> str:
    """The status of a plan proved within ``gap`` of the optimum."""
    return "optimal" if gap <= _EXACT_GAP else "within mip_gap"


class MemoryBudgetError(ShapecoreError, ValueError):
    """No plan fits ``budget`` (bytes per device): the plan needing the least memory needs
    ``memory`` (its peak: bytes per part, the batch point and the node where it is reached);
    ``exact``: the solver proved no plan needs less (else it is the least found in the time limit).
    It pickles with these fields (a rank's error crosses ``lowering.launch`` as itself)."""

    def __init__(self, budget: float, memory: MemoryBreakdown, exact: bool) -> None:
        self.budget, self.memory, self.exact = budget, memory, exact
        dominant = max(MEMORY_PARTS, key=lambda part: getattr(memory, part))
        least = "the plan needing the least memory" if exact else "the least-memory plan found within the time limit"
        super().__init__(
            f"no plan fits the memory budget of {format_bytes(budget)} per device: {least} needs {memory}; "
            f"{PART_NAMES.get(dominant, dominant)} dominate. Raise memory_budget to at least "
            f"{format_bytes(memory.total, up=True)}, use a bigger mesh, or drop batch sizes")


def solve_mean_regret(model: IlpModel | Any, weights: np.ndarray, optima: np.ndarray, *, time_limit: float = 60.0) -> Solution:
    """Minimize the ``weights``-expected ratio of each point's cost to its ``optima`` with
    ``model`` (the ILP or the greedy baseline). The returned ``objective`` is the plan's
    expected cost (seconds); ``gap`` is the ratio's."""
    ratio = weights / optima
    solution = model.solve(ratio / ratio.sum(), time_limit=time_limit)
    return replace(solution, objective=float(model.problem.evaluate(solution.choices, weights).total @ weights), bound=None)
