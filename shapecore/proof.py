"""The reasoner's answer: a three-valued :class:`Proof` that says who decided and why.

A claim *holds* under an assignment when it evaluates to ``True`` without a zero divisor.

* ``proved``: it holds under every assignment that satisfies every fact;
* ``refuted``: ``counterexample`` satisfies every fact and the claim does not hold there
  (checked by exact evaluation before it is reported);
* ``unknown``: neither could be shown in time; ``reason`` says what stopped the reasoner.

``method`` names the layer that decided: ``rewrite`` (canonical form and constant folding),
``ranges`` (interval bounds), ``modular`` (residue classes), ``differences`` (chains of
``x - y <= c``), ``z3``, ``search`` (a
counterexample found by trying values), or ``facts`` (the facts contradict each other, so
every claim follows). A Proof is deliberately not usable as a bool: write ``proof.proved``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

import sympy

from shapecore.z3backend import smtlib_script

__all__ = ["Proof", "DeferredProof", "Status"]

Status = Literal["proved", "refuted", "unknown"]


@dataclass(frozen=True)
class Proof:
    """Outcome of proving ``claim`` under a fact scope."""

    claim: sympy.Basic
    status: Status
    method: str
    counterexample: Mapping[str, int] | None = None
    facts_used: tuple[sympy.Basic, ...] | None = None
    reason: str = ""
    facts: tuple[sympy.Basic, ...] = field(default=(), repr=False, compare=False)

    @property
    def proved(self) -> bool:
        return self.status == "proved"

    @property
    def refuted(self) -> bool:
        return self.status == "refuted"

    def __bool__(self) -> bool:
        raise TypeError("a Proof is three-valued: test proof.proved or proof.status, not the Proof itself")

    def to_smtlib(self) -> str:
        """A self-contained SMT-LIB2 script: ``(check-sat)`` is ``unsat`` iff the claim follows."""
        return smtlib_script(list(self.facts), self.claim)

    def __str__(self) -> str:
        text = f"{self.status} ({self.method}): {self.claim}"
        if self.counterexample is not None:
            assignment = ", ".join(f"{k}={v}" for k, v in sorted(self.counterexample.items()))
            text += f"; counterexample {assignment}"
        if self.reason:
            text += f"; {self.reason}"
        return text


class DeferredProof(Proof):
    """A :class:`Proof` whose sympy parts are built when first read: ``build()`` returns
    ``(claim, facts, facts_used)``. An answer found without sympy (:mod:`shapecore.quick_proving`)
    costs none until they are asked for. It equals, hashes and pickles as the Proof it stands for.
    """

    def __init__(self, status: Status, method: str, build: Callable[[], tuple], counterexample: Mapping[str, int] | None = None) -> None:
        self.__dict__.update(status=status, method=method, counterexample=counterexample, reason="", _build=build)

    @functools.cached_property
    def _parts(self) -> tuple:
        return self._build()

    claim = property(lambda self: self._parts[0])  # type: ignore[assignment]
    facts = property(lambda self: self._parts[1])  # type: ignore[assignment]
    facts_used = property(lambda self: self._parts[2])  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Proof):
            return NotImplemented
        return _compared(self) == _compared(other)

    __hash__ = Proof.__hash__

    def __reduce__(self) -> tuple:
        return Proof, tuple(getattr(self, f.name) for f in fields(self))


def _compared(proof: Proof) -> tuple:
    return (proof.claim, proof.status, proof.method, proof.counterexample, proof.facts_used, proof.reason)
