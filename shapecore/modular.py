"""Modular analysis: which residue class an integer expression always lies in.

A :class:`ModularSet` ``(coeff, base)`` says ``e ∈ {coeff*k + base | k ∈ Z}``, i.e.
``e ≡ base (mod coeff)``; ``coeff == 0`` means ``e == base`` exactly and ``coeff == 1`` says
nothing. ``base`` is normalized into ``[0, coeff)``. Symbols start from the congruences that
facts established (``Eq(Mod(s0, 8), 0)`` gives ``s0 ∈ (8, 0)``) and the rules compose:

* ``x + y``: ``(gcd(c1, c2), b1 + b2)``
* ``x * y``: ``(c1*k + b1)(c2*j + b2) = c1*c2*k*j + c1*b2*k + c2*b1*j + b1*b2``, so
  ``(gcd(c1*c2, c1*b2, c2*b1), b1*b2)``
* ``x // d`` (``d > 0`` constant dividing ``c``): ``(c/d, b // d)``
* ``x % d`` (``d`` a nonzero constant): ``(0, b % d)`` when ``d | c``, else ``(gcd(c, d), b)``
* ``Max``/``Min`` are one of their arguments: ``(gcd(c1, c2, b1 - b2), b1)``
* ``r * x`` for a rational ``r = p/q``: exact only when ``q`` divides ``c`` and ``b``.

:func:`modular_set` returns None when an expression is not known to be integer-valued.
:func:`solve_linear_congruence` turns ``a*x ≡ r (mod m)`` into ``x ≡ r' (mod m')``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import sympy

from shapecore import functions as F
from shapecore.ranges import ValueRange, is_infinite

__all__ = ["ModularSet", "modular_set", "solve_linear_congruence", "combine_congruences", "tighten"]


class ModularSet:
    """``{coeff*k + base}``; ``coeff == 0`` is the constant ``base``.

    Immutable by convention (a plain slotted class, cheap to build on every analyzer step).
    """

    __slots__ = ("coeff", "base")

    def __init__(self, coeff: int, base: int) -> None:
        self.coeff = coeff
        self.base = base

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModularSet) and self.coeff == other.coeff and self.base == other.base

    def __hash__(self) -> int:
        return hash((self.coeff, self.base))

    def __repr__(self) -> str:
        return f"ModularSet(coeff={self.coeff!r}, base={self.base!r})"

    @classmethod
    def of(cls, coeff: int, base: int) -> ModularSet:
        coeff = abs(coeff)
        return cls(coeff, base % coeff if coeff else base)

    @property
    def is_constant(self) -> bool:
        return self.coeff == 0

    def __add__(self, other: ModularSet) -> ModularSet:
        return ModularSet.of(math.gcd(self.coeff, other.coeff), self.base + other.base)

    def __mul__(self, other: ModularSet) -> ModularSet:
        c1, b1, c2, b2 = self.coeff, self.base, other.coeff, other.base
        return ModularSet.of(math.gcd(c1 * c2, c1 * b2, c2 * b1), b1 * b2)

    def union(self, other: ModularSet) -> ModularSet:
        return ModularSet.of(math.gcd(self.coeff, other.coeff, self.base - other.base), self.base)

    def residue(self, modulus: int) -> int | None:
        """``e % modulus`` if it is the same for every member, else None."""
        if self.coeff % modulus == 0:
            return self.base % modulus
        return None


ANY = ModularSet(1, 0)


def modular_set(
    expr: sympy.Basic, congruences: Mapping[sympy.Symbol, ModularSet]
) -> ModularSet | None:
    """The residue class of ``expr``, or None when it is not known to be an integer."""
    return _Analyzer(congruences).analyze(expr)


class _Analyzer:
    def __init__(self, congruences: Mapping[sympy.Symbol, ModularSet]) -> None:
        self.congruences = congruences
        self.memo: dict[sympy.Basic, ModularSet | None] = {}

    def analyze(self, expr: sympy.Basic) -> ModularSet | None:
        if expr in self.memo:
            return self.memo[expr]
        found = self.memo[expr] = self._analyze(expr)
        return found

    def _all(self, args: tuple[sympy.Basic, ...]) -> list[ModularSet] | None:
        sets = [self.analyze(a) for a in args]
        return None if any(s is None for s in sets) else sets  # type: ignore[return-value]

    def _analyze(self, expr: sympy.Basic) -> ModularSet | None:
        if expr.is_Integer:
            return ModularSet(0, int(expr))
        if expr.is_Symbol:
            return self.congruences.get(expr, ANY) if expr.is_integer else None
        if expr.is_Add:
            sets = self._all(expr.args)
            if sets is None:
                return None
            total = sets[0]
            for s in sets[1:]:
                total = total + s
            return total
        if expr.is_Mul:
            coeff, rest = expr.as_coeff_Mul()
            if coeff.is_Rational and not coeff.is_Integer:
                inner = self.analyze(rest)
                if inner is None:
                    return None
                scaled = ModularSet(inner.coeff * int(coeff.p), inner.base * int(coeff.p))
                q = int(coeff.q)
                if scaled.coeff % q or scaled.base % q:
                    return None
                return ModularSet.of(scaled.coeff // q, scaled.base // q)
            sets = self._all(expr.args)
            if sets is None:
                return None
            product = sets[0]
            for s in sets[1:]:
                product = product * s
            return product
        if expr.is_Pow:
            if not (expr.exp.is_Integer and expr.exp >= 0):
                return None
            base = self.analyze(expr.base)
            if base is None:
                return None
            power = ModularSet(0, 1)
            for _ in range(int(expr.exp)):
                power = power * base
            return power
        if isinstance(expr, (F.FloorDiv, F.Mod)) and not expr.is_integer:
            return None  # of a float (0.1 % 2 is 0.1): no residue class; ANY would say it is an int
        if isinstance(expr, F.FloorDiv):
            return self._floordiv(*expr.args)
        if isinstance(expr, F.Mod):
            return self._mod(*expr.args)
        if isinstance(expr, (F.Max, F.Min)):
            sets = self._all(expr.args)
            if sets is None:
                return None
            joined = sets[0]
            for s in sets[1:]:
                joined = joined.union(s)
            return joined
        return ANY if expr.is_integer else None

    def _floordiv(self, a: sympy.Basic, d: sympy.Basic) -> ModularSet:
        inner = self.analyze(a)
        if inner is not None and d.is_Integer and d > 0:
            divisor = int(d)
            if inner.coeff % divisor == 0:
                return ModularSet.of(inner.coeff // divisor, inner.base // divisor)
        return ANY

    def _mod(self, a: sympy.Basic, d: sympy.Basic) -> ModularSet:
        inner = self.analyze(a)
        if inner is None or not d.is_Integer:
            return ANY
        divisor = int(d)
        residue = inner.residue(divisor)  # Python's %, so already in (divisor, 0] when divisor < 0
        if residue is not None:
            return ModularSet(0, residue)
        return ModularSet.of(math.gcd(inner.coeff, divisor), inner.base)


def solve_linear_congruence(a: int, r: int, m: int) -> ModularSet | None:
    """All ``x`` with ``a*x ≡ r (mod m)``, as a residue class; None when there are none."""
    m = abs(m)
    if m == 0:
        if a == 0:
            return ANY if r == 0 else None
        return ModularSet(0, r // a) if r % a == 0 else None
    g = math.gcd(a, m)
    if r % g:
        return None
    m2 = m // g
    if m2 == 1:
        return ANY
    return ModularSet.of(m2, (r // g) * pow(a // g, -1, m2))


def combine_congruences(x: ModularSet, y: ModularSet) -> ModularSet | None:
    """The intersection of two residue classes (Chinese remainder theorem), None if empty."""
    if x.is_constant or y.is_constant:
        const, other = (x, y) if x.is_constant else (y, x)
        if other.is_constant:
            return const if const.base == other.base else None
        return const if (const.base - other.base) % other.coeff == 0 else None
    g = math.gcd(x.coeff, y.coeff)
    if (y.base - x.base) % g:
        return None
    lcm = x.coeff // g * y.coeff
    # x.base + x.coeff*t ≡ y.base (mod y.coeff)  =>  t ≡ (y.base - x.base)/g * inv(x.coeff/g) (mod y.coeff/g)
    step = y.coeff // g
    t = ((y.base - x.base) // g * pow(x.coeff // g, -1, step)) % step if step > 1 else 0
    return ModularSet.of(lcm, x.base + x.coeff * t)


def tighten(r: ValueRange, residues: ModularSet) -> ValueRange:
    """``r`` shrunk to its integer members in the residue class ``residues`` (maybe empty).

    ``x ≡ 0 (mod 8)`` and ``x >= 1`` give ``x >= 8``.
    """
    if residues.is_constant:
        return ValueRange.point(residues.base) if residues.base in r else ValueRange(1, 0)
    step, base = residues.coeff, residues.base
    lo, hi = r.lo, r.hi
    if not is_infinite(lo):
        lo = math.ceil(Fraction(lo))
        lo += (base - lo) % step
    if not is_infinite(hi):
        hi = math.floor(Fraction(hi))
        hi -= (hi - base) % step
    return ValueRange(lo, hi)
