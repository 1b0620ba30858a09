"""Value ranges: sound interval bounds of expressions over integer symbols.

A :class:`ValueRange` ``[lo, hi]`` has endpoints that are ints, ``Fraction``\\ s or ``±inf``.
:func:`bound` propagates the ranges of symbols through ``+ * **`` (integer exponents),
``FloorDiv``, ``Mod``, ``Max`` and ``Min``; anything else, and a division, remainder, Max or
Min with a float operand (Python rounds it), is ``(-inf, inf)``.

Contract: for every assignment inside the symbol ranges under which ``expr`` is defined,
``evaluate(expr)`` lies in ``bound(expr)``. Bounds may be loose, never wrong. Each rule below
follows from monotonicity: ``a // b`` for ``b > 0`` is monotone increasing in ``a`` and, for a
fixed sign of ``a``, monotone in ``b``; ``a % b`` lies in ``[0, b)`` for ``b > 0`` (``(b, 0]``
for ``b < 0``) and equals ``a - k*b`` when ``a`` stays within one period ``[k*b, (k+1)*b)``.

:func:`decide` turns bounds into a three-valued answer for a relation or boolean combination.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import sympy

from shapecore import functions as F
from shapecore.operations import SHORT_CIRCUITS

__all__ = ["ValueRange", "UNBOUNDED", "bound", "decide", "Bound", "is_infinite"]

Bound = int | Fraction | float
INF = math.inf


class ValueRange:
    """The closed interval ``[lo, hi]``; ``lo`` may be ``-inf`` and ``hi`` may be ``inf``.

    Immutable by convention (a plain slotted class: built on every analyzer step, where a
    frozen dataclass's ``__init__`` costs twice as much).
    """

    __slots__ = ("lo", "hi")

    def __init__(self, lo: Bound, hi: Bound) -> None:
        self.lo = lo
        self.hi = hi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueRange) and self.lo == other.lo and self.hi == other.hi

    def __hash__(self) -> int:
        return hash((self.lo, self.hi))

    def __repr__(self) -> str:
        return f"ValueRange(lo={self.lo!r}, hi={self.hi!r})"

    @classmethod
    def point(cls, value: Bound) -> ValueRange:
        return cls(value, value)

    @property
    def is_empty(self) -> bool:
        return self.lo > self.hi

    @property
    def is_point(self) -> bool:
        return self.lo == self.hi

    def __contains__(self, value: Bound) -> bool:
        return self.lo <= value <= self.hi

    def __and__(self, other: ValueRange) -> ValueRange:
        return ValueRange(max(self.lo, other.lo), min(self.hi, other.hi))

    def __or__(self, other: ValueRange) -> ValueRange:
        return ValueRange(min(self.lo, other.lo), max(self.hi, other.hi))

    def __add__(self, other: ValueRange) -> ValueRange:
        return ValueRange(_add(self.lo, other.lo), _add(self.hi, other.hi))

    def __neg__(self) -> ValueRange:
        return ValueRange(-self.hi, -self.lo)

    def __mul__(self, other: ValueRange) -> ValueRange:
        corners = [_mul(a, b) for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return ValueRange(min(corners), max(corners))

    def as_tuple(self) -> tuple[Bound, Bound]:
        return (self.lo, self.hi)

    def __str__(self) -> str:
        return f"[{_fmt(self.lo)}, {_fmt(self.hi)}]"


UNBOUNDED = ValueRange(-INF, INF)


def _fmt(value: Bound) -> str:
    if value == INF:
        return "inf"
    if value == -INF:
        return "-inf"
    return str(value)


def is_infinite(value: Bound) -> bool:
    """Whether an endpoint is ``±inf``. ``math.isinf`` would convert an int to float, and an
    exact int beyond a float's range (``10**400``) raises OverflowError there."""
    return isinstance(value, float) and math.isinf(value)


def _add(a: Bound, b: Bound) -> Bound:
    """``a + b``, exact: an int beyond a float's range must not meet ``±inf`` (OverflowError)."""
    if is_infinite(a) != is_infinite(b):
        return a if is_infinite(a) else b
    return a + b


def _mul(a: Bound, b: Bound) -> Bound:
    if a == 0 or b == 0:
        return 0
    if is_infinite(a) or is_infinite(b):
        return INF if (a > 0) == (b > 0) else -INF
    return a * b


def _is_integral(value: Bound) -> bool:
    return isinstance(value, int) or is_infinite(value)


def _floor_div(x: Bound, y: Bound) -> Bound:
    """``floor(x / y)`` for ``y > 0``, with ``x`` possibly infinite and ``y`` possibly ``inf``."""
    if is_infinite(x):
        return x
    if y == INF:
        return 0 if x >= 0 else -1
    if type(x) is int and type(y) is int:
        return x // y
    return math.floor(Fraction(x) / Fraction(y))


def _floordiv(a: ValueRange, b: ValueRange) -> ValueRange:
    if b.hi < 0:
        return _floordiv(-a, -b)
    if b.lo <= 0:
        return UNBOUNDED
    if a.lo >= 0:
        return ValueRange(_floor_div(a.lo, b.hi), _floor_div(a.hi, b.lo))
    if a.hi <= 0:
        return ValueRange(_floor_div(a.lo, b.lo), _floor_div(a.hi, b.hi))
    return ValueRange(_floor_div(a.lo, b.lo), _floor_div(a.hi, b.lo))


def _mod(a: ValueRange, b: ValueRange, integers: bool) -> ValueRange:
    """``a % b``'s range; ``integers``: both operands are integer-valued (a float's remainder by 1
    is anywhere in [0, 1), whatever its range's ends: an unbounded one's are no integers)."""
    if b.hi < 0:
        return -_mod(-a, -b, integers)
    if b.lo <= 0:
        return ValueRange(min(b.lo, 0), max(b.hi, 0))
    integral = integers and all(_is_integral(v) for v in (a.lo, a.hi, b.lo, b.hi))
    if b.is_point and not is_infinite(b.lo) and not is_infinite(a.lo) and not is_infinite(a.hi):
        k = _floor_div(a.lo, b.lo)
        if _floor_div(a.hi, b.lo) == k:
            return ValueRange(a.lo - k * b.lo, a.hi - k * b.lo)
    top = b.hi - 1 if integral else b.hi
    if a.lo >= 0:
        top = min(top, a.hi)
    return ValueRange(0, top)


_POWER_BITS = 1 << 20  # a power bound larger than this is not computed


def _bits(value: Bound) -> int:
    """Binary digits of ``value``'s magnitude (0 for ``±inf``, whose powers are floats)."""
    return 0 if is_infinite(value) else abs(math.ceil(value)).bit_length() + 1


def _pow(base: ValueRange, exp: sympy.Basic) -> ValueRange:
    if not (exp.is_Integer and exp >= 0):
        return UNBOUNDED
    n = int(exp)
    if n == 0:
        return ValueRange.point(1)
    if max(_bits(base.lo), _bits(base.hi)) * n > _POWER_BITS:  # too large to compute: no bound
        return UNBOUNDED
    lo, hi = base.lo**n, base.hi**n
    if n % 2 == 1 or base.lo >= 0:
        return ValueRange(lo, hi)
    if base.hi <= 0:
        return ValueRange(hi, lo)
    return ValueRange(0, max(lo, hi))


def _constant(expr: sympy.Basic) -> ValueRange | None:
    if expr.is_Integer:
        return ValueRange.point(int(expr))
    if expr.is_Rational:
        return ValueRange.point(Fraction(int(expr.p), int(expr.q)))
    if isinstance(expr, F.PythonFloat):  # a double's exact value, as Python compares it
        return ValueRange.point(Fraction(float(expr)))
    return None


def bound(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    """A range containing every value of ``expr`` when its symbols lie in ``ranges``.

    Symbols absent from ``ranges`` are unbounded integers.
    """
    return _Bounder(ranges).bound(expr)


class _Bounder:
    def __init__(self, ranges: Mapping[sympy.Symbol, ValueRange]) -> None:
        self.ranges = ranges
        self.memo: dict[sympy.Basic, ValueRange] = {}

    def bound(self, expr: sympy.Basic) -> ValueRange:
        found = self.memo.get(expr)
        if found is None:
            found = self.memo[expr] = self._bound(expr)
        return found

    def _bound(self, expr: sympy.Basic) -> ValueRange:
        constant = _constant(expr)
        if constant is not None:
            return constant
        if expr.is_Symbol:
            return self.ranges.get(expr, UNBOUNDED)
        args = expr.args
        if expr.is_Add:
            total = self.bound(args[0])
            for arg in args[1:]:
                total = total + self.bound(arg)
            return total
        if expr.is_Mul:
            product = self.bound(args[0])
            for arg in args[1:]:
                product = product * self.bound(arg)
            return product
        if expr.is_Pow:
            return _pow(self.bound(expr.base), expr.exp)
        if F.rounded_in_floats(expr):  # rounded by Python: no integer rule bounds it
            return UNBOUNDED
        if isinstance(expr, F.FloorDiv):
            return _floordiv(self.bound(args[0]), self.bound(args[1]))
        if isinstance(expr, F.Mod):
            return _mod(self.bound(args[0]), self.bound(args[1]), all(a.is_integer for a in args))
        if isinstance(expr, F.Max):
            ranges = [self.bound(a) for a in args]
            return ValueRange(max(r.lo for r in ranges), max(r.hi for r in ranges))
        if isinstance(expr, F.Min):
            ranges = [self.bound(a) for a in args]
            return ValueRange(min(r.lo for r in ranges), min(r.hi for r in ranges))
        return UNBOUNDED


def decide_difference(relation: type, difference: ValueRange) -> bool | None:
    """Truth of ``d <rel> 0`` for every ``d`` in ``difference``; None when it varies."""
    lo, hi = difference.lo, difference.hi
    if relation is sympy.Eq:
        return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
    if relation is sympy.Ne:
        return False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None)
    if relation is sympy.Lt:
        return True if hi < 0 else (False if lo >= 0 else None)
    if relation is sympy.Le:
        return True if hi <= 0 else (False if lo > 0 else None)
    if relation is sympy.Gt:
        return True if lo > 0 else (False if hi <= 0 else None)
    if relation is sympy.Ge:
        return True if lo >= 0 else (False if hi < 0 else None)
    raise TypeError(f"not a relation: {relation.__name__}")


def decide(claim: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> bool | None:
    """Truth of a relation or boolean combination for all values in ``ranges``, or None."""
    return _decide(claim, _Bounder(ranges))


def _decide(claim: sympy.Basic, bounder: _Bounder) -> bool | None:
    if claim is sympy.true:
        return True
    if claim is sympy.false:
        return False
    if claim.is_Relational:
        lhs, rhs = claim.args
        return decide_difference(type(claim), bounder.bound(lhs - rhs))
    if isinstance(claim, sympy.Not):
        inner = _decide(claim.args[0], bounder)
        return None if inner is None else not inner
    if isinstance(claim, (sympy.And, sympy.Or, *SHORT_CIRCUITS)):  # values: Python's and/or are And/Or
        values = [_decide(arg, bounder) for arg in claim.args]
        absorbing = isinstance(claim, (sympy.Or, F.PythonOr))
        if absorbing in values:
            return absorbing
        return None if None in values else not absorbing
    return None
