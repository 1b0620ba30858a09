"""Errors of the lowering. Each names the culprit and what to do about it.

* :class:`LoweringError` — a plan or graph the lowering cannot turn into a correct local
  program (raised while lowering, before anything runs).
* :class:`GuardViolation` — inputs that break one of the plan's guards; raised on every rank,
  before any collective of the program.
* :class:`InputError` — inputs that do not fit the traced program (their structure, a
  non-tensor where a tensor was traced, the number of dims, the dtype, a DTensor placed
  otherwise than the plan wants); raised with the same text on every rank, before any
  collective of the program, when every rank passed the same misfit.
* :class:`RankMismatch` — ranks called the program with inputs that do not agree (global
  shapes, or misfits on some ranks only); raised with the same text on every rank, before any
  collective of the program.
"""

from __future__ import annotations

__all__ = ["LoweringError", "GuardViolation", "InputError", "RankMismatch"]


class LoweringError(Exception):
    """The plan cannot be lowered to a correct per-rank program."""


class GuardViolation(ValueError):
    """Inputs break a guard the plan (or its compiled program) relies on.

    ``guard`` is the guard's text, ``values`` the symbol values it was evaluated at.
    """

    def __init__(self, message: str, *, guard: str = "", values: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.guard = guard
        self.values = dict(values or {})

    def __reduce__(self):  # keep the fields when sent between processes
        return (_rebuild_guard_violation, (str(self), self.guard, self.values))


def _rebuild_guard_violation(message: str, guard: str, values: dict[str, int]) -> GuardViolation:
    return GuardViolation(message, guard=guard, values=values)


class RankMismatch(ValueError):
    """Ranks passed inputs that disagree with each other."""


class InputError(TypeError, ValueError):
    """Inputs that do not fit the traced program; the message names each input, what the program
    expects and what was given. Both a TypeError (a wrong kind of value) and a ValueError (a
    tensor of the wrong dtype or number of dims), as callers may catch either."""
