"""Localization: global sizes as polynomials in fresh local symbols.

The algebra. Every symbol ``s`` of the trace gets a *multiplier* ``M_s``: the largest divisor
of the mesh size ``n`` for which shapecore proves ``Eq(Mod(s, M_s), 0)`` under the trace's
facts and the plan's guards (``M_s = 1`` for a symbol no sharded dim mentions). The lowering
writes ``s = M_s·b`` with a fresh local symbol ``b`` (``b0, b1, …``). A tensor dim of global
size ``e(s…)`` split into ``k`` pieces (``k`` divides ``n``) then has the local extent
``e(M·b…) / k``; when that is a polynomial in the ``b`` with integer coefficients, which is
the case whenever each sharded dim is a monomial in symbols the proofs cover, it is used as
is: no ``FloorDiv``/``CleanDiv`` for Inductor to reason about or guard on. Otherwise the extent
is ``FloorDiv(e(M·b…), k)``, exact under the plan's guards, and :attr:`Localizer.inexact`
records it.

At run time ``b = s / M_s`` exactly, because the entry check has verified the plan's guards,
from which the proofs of ``M_s | s`` follow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from shapecore import FloorDiv, ShapeEnv, creation_order, int_symbol

__all__ = ["LocalSymbol", "Localizer", "choose_multipliers", "divisors", "make_symbols"]


@dataclass(frozen=True)
class LocalSymbol:
    """``of = multiplier·name``: the local symbol ``name`` standing for the global symbol ``of``."""

    name: str
    of: str
    multiplier: int
    hint: int

    def value_of(self, global_value: int) -> int:
        """This symbol's value when ``of`` is ``global_value`` (exact: the guards have been checked)."""
        value, remainder = divmod(global_value, self.multiplier)
        assert remainder == 0, (self, global_value)
        return value


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, descending."""
    return sorted((d for d in range(1, n + 1) if n % d == 0), reverse=True)


def choose_multipliers(env: ShapeEnv, symbols: Iterable[str], mesh_size: int) -> dict[str, int]:
    """For each symbol, the largest divisor ``m`` of ``mesh_size`` with ``Eq(Mod(s, m), 0)`` proved in ``env``."""
    chosen = {}
    for name in sorted(symbols):
        chosen[name] = next(m for m in divisors(mesh_size) if m == 1 or env.prove(f"Eq(Mod({name}, {m}), 0)").proved)
    return chosen


def _is_integer_polynomial(expr: sympy.Basic, symbols: list[sympy.Symbol]) -> bool:
    if not expr.is_polynomial(*symbols):
        return False
    return all(c.is_Integer for c in sympy.Poly(expr, *symbols).coeffs()) if symbols else expr.is_Integer


class Localizer:
    """Maps global size expressions (shapecore, over trace symbols) to local ones (over ``b``)."""

    def __init__(self, symbols: Iterable[LocalSymbol]) -> None:
        self.symbols = tuple(symbols)
        self.by_global = {s.of: s for s in self.symbols}
        self._substitution = {int_symbol(s.of): s.multiplier * int_symbol(s.name) for s in self.symbols}
        self._locals = [int_symbol(s.name) for s in self.symbols]
        self.inexact: dict[str, str] = {}

    def defines(self, expr: sympy.Basic) -> bool:
        """Whether every symbol of ``expr`` has a local symbol (a data-dependent one has none)."""
        return {s.name for s in expr.free_symbols} <= self.by_global.keys()

    def value(self, expr: sympy.Basic) -> sympy.Basic:
        """The global value ``expr`` written over the local symbols."""
        unknown = {s.name for s in expr.free_symbols} - set(self.by_global)
        if unknown:
            raise KeyError(f"{expr} mentions {', '.join(sorted(unknown))}, which the trace does not define")
        return sympy.expand(expr.xreplace(self._substitution))

    def extent(self, expr: sympy.Basic, pieces: int) -> sympy.Basic:
        """Local extent of a dim of global size ``expr`` split into ``pieces`` equal parts."""
        value = self.value(expr)
        local = sympy.expand(value / pieces)
        if _is_integer_polynomial(local, self._locals):
            return local
        floor = FloorDiv(value, pieces)
        self.inexact[str(expr)] = f"{floor} (not a polynomial: {expr} / {pieces} with {self._describe()})"
        return floor

    def local_values(self, global_values: Mapping[str, int]) -> dict[str, int]:
        """Local symbol values from the global ones (all of them must be given)."""
        return {s.name: s.value_of(global_values[s.of]) for s in self.symbols}

    def _describe(self) -> str:
        return ", ".join(f"{s.of} = {s.multiplier}*{s.name}" for s in self.symbols) or "no symbols"

    def __repr__(self) -> str:
        return f"Localizer({self._describe()})"


def make_symbols(multipliers: Mapping[str, int], hints: Mapping[str, Any]) -> list[LocalSymbol]:
    """Local symbols ``b0, b1, …`` for the global symbols, in creation order (``s2`` before ``s10``)."""
    symbols = []
    for i, name in enumerate(sorted(multipliers, key=creation_order)):
        m = multipliers[name]
        hint = int(hints[name]) // m if name in hints else 2
        symbols.append(LocalSymbol(f"b{i}", name, m, hint))
    return symbols
