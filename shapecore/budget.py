"""z3's budget for one call: a deterministic resource count, with a wall-clock backstop.

Every public call that may ask z3 (:func:`shapecore.prove`, each query of a
:class:`~shapecore.Reasoner` or :class:`~shapecore.ShapeEnv`, :func:`shapecore.simplify`)
makes one :class:`Budget` from its ``timeout_ms`` and runs all its z3 checks under it:

* **resources** (deterministic): ``timeout_ms * RLIMIT_PER_MS`` units of z3's own resource
  counter (``rlimit``) for all the call's checks together. z3 counts them the same way on any
  machine and under any load, so a check that runs out answers ``unknown`` at the same point
  every time; each check is charged the units it used, whatever it answered. Where a call's
  checks must share, each gets a part of what is left (:meth:`Budget.part`).
* **backstop** (wall clock): the call's checks together run at most ``timeout_ms`` of wall
  time; then z3 is cancelled and the check answers ``unknown``. Only then
  (:attr:`Budget.backstop_fired`) can an answer depend on the machine and its load.

So the same call gets the same answers on an idle and on a busy machine, unless the backstop
fires. Why both, measured with z3 5.4 on a 2-core machine:

* z3's units per millisecond vary by more than 100x between queries (over the test suite's
  checks: 5th percentile ~170, median ~2,800 units per CPU millisecond), so neither budget
  can stand in for the other;
* some nonlinear steps count almost no units: nla's assignment check hands z3's candidate
  model to nlsat, whose root isolation on a degree-8 polynomial ran for minutes on ~5,000
  units (issue 9's hang, with ``rlimit`` alone). That check is switched off where z3 has it
  (``arith.nl.nra_check_assignment``, z3 >= 5.0): the same query is then proved in 3 ms.
  ``max_steps``, tactic limits and ``rlimit`` never stopped it; only a cancellation
  (``timeout``, ``Z3_interrupt``, ``TryFor``) did;
* z3 sees a cancellation only between such steps, so the backstop can be late by one step
  (up to ~2.5 s was measured on that query before the check was switched off).

``RLIMIT_PER_MS`` is set so that typical solving spends the units in a quarter of
``timeout_ms`` or less on that machine (over whole ``simplify`` calls of the guard corpus and
the tests, z3 counted 1,500 to 6,000 units per CPU millisecond): a machine about four times
slower or busier still answers the same before the backstop decides anything.
"""

from __future__ import annotations

import functools
import time

import z3

from shapecore.errors import ArgumentError

__all__ = ["Budget", "RLIMIT_PER_MS", "validate_timeout"]

RLIMIT_PER_MS = 500
"""z3 resource units per millisecond of ``timeout_ms``: the fixed rate of the deterministic budget."""

_CHECK_ASSIGNMENT = "arith.nl.nra_check_assignment"


def validate_timeout(timeout_ms: int) -> int:
    """``timeout_ms`` itself if it is a positive int (milliseconds), else ArgumentError (a ValueError)."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise ArgumentError(f"timeout_ms must be a positive int (milliseconds), got {timeout_ms!r}")
    return timeout_ms


@functools.cache
def _has_check_assignment() -> bool:
    descriptions = z3.Solver(ctx=z3.Context()).param_descrs()
    return any(descriptions.get_name(i) == _CHECK_ASSIGNMENT for i in range(descriptions.size()))


def _configure(solver: z3.Solver | z3.Optimize) -> None:
    """Switch off nla's nlsat assignment check, which z3 does not count against ``rlimit``
    (see the module docstring), where z3 has it."""
    if isinstance(solver, z3.Solver) and _has_check_assignment():
        solver.set(_CHECK_ASSIGNMENT, False)


def _units_counted(solver: z3.Solver | z3.Optimize) -> int:
    """z3's resource counter for the solver's context (it counts every check in the context)."""
    statistics = solver.statistics()
    for i in reversed(range(len(statistics))):  # it is among the last entries
        key, value = statistics[i]
        if key == "rlimit count":
            return int(value)
    return 0


class Budget:
    """What z3 may still spend in one call: resource units (deterministic) and wall time (backstop).

    >>> budget = Budget(100)
    >>> budget.units, budget.timeout_ms
    (50000, 100)

    ``units`` defaults to ``timeout_ms * RLIMIT_PER_MS``. :meth:`check` runs one z3 check
    under what is left; :meth:`part` gives a share of it to a group of checks.
    """

    def __init__(self, timeout_ms: int, *, units: int | None = None) -> None:
        if units is not None and (isinstance(units, bool) or not isinstance(units, int) or units <= 0):
            raise ValueError(f"units must be a positive int, got {units!r}")
        self.timeout_ms = validate_timeout(timeout_ms)
        self.units = timeout_ms * RLIMIT_PER_MS if units is None else units
        self.used = 0  # units charged to this budget (and to each budget it is a part of)
        self.elapsed_ms = 0.0  # wall time of the checks, kept on the call's root budget
        self.backstop_fired = False
        self.outcome = ""  # why the last check answered unknown: "resources", "backstop" or z3's reason
        self._parent: Budget | None = None

    @property
    def _root(self) -> Budget:
        budget = self
        while budget._parent is not None:
            budget = budget._parent
        return budget

    @property
    def units_left(self) -> int:
        """Units the next check may use: this budget's, within every budget it is a part of."""
        left = self.units - self.used
        return left if self._parent is None else min(left, self._parent.units_left)

    @property
    def wall_left_ms(self) -> float:
        root = self._root
        return 0.0 if root.backstop_fired else root.timeout_ms - root.elapsed_ms

    def part(self, fraction: float) -> Budget:
        """A budget for some of this call's checks: ``fraction`` of the units left, the same clock."""
        part = Budget(self.timeout_ms, units=max(1, int(self.units_left * fraction)))
        part._parent = self
        return part

    def _charge(self, units: int) -> None:
        budget: Budget | None = self
        while budget is not None:
            budget.used += units
            budget = budget._parent

    def check(self, solver: z3.Solver | z3.Optimize, *assumptions: z3.BoolRef) -> z3.CheckSatResult:
        """``solver.check(*assumptions)`` within what is left; ``unknown`` at once if nothing is.

        ``outcome`` then says why: ``resources`` (the units ran out: deterministic),
        ``backstop`` (the wall-clock backstop fired) or z3's own reason (incomplete).
        """
        units, wall_ms = self.units_left, self.wall_left_ms
        if units < 1:
            self.outcome = "resources"
            return z3.unknown
        if wall_ms < 1:
            self.outcome = "backstop"
            self._root.backstop_fired = True
            return z3.unknown
        _configure(solver)
        solver.set("rlimit", units)
        solver.set("timeout", max(1, int(wall_ms)))
        before = _units_counted(solver)
        start = time.perf_counter()
        try:
            result = solver.check(*assumptions)
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1000
            self._root.elapsed_ms += elapsed_ms
            used = _units_counted(solver) - before
            self._charge(used)
        self.outcome = ""
        if result == z3.unknown:
            if used >= units:
                self.outcome = "resources"
            elif elapsed_ms >= wall_ms:
                self.outcome = "backstop"
                self._root.backstop_fired = True
            else:
                self.outcome = solver.reason_unknown()
        return result

    def describe(self) -> str:
        """A sentence for an ``unknown`` answer: which budget stopped z3."""
        if self.outcome == "resources":
            return f"z3's deterministic budget ({self.units} resource units, from timeout_ms={self.timeout_ms}) ran out"
        if self.outcome == "backstop":
            return (f"the wall-clock backstop stopped z3 (timeout_ms={self.timeout_ms}); "
                    "this answer may differ on a less busy machine")
        return f"z3 gave up ({self.outcome})"
