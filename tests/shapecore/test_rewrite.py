"""Every rewrite rule preserves values wherever the knowledge it used holds."""

import math

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import shapecore.functions as F
from shapecore import ModularSet, ValueRange, evaluate, int_symbol
from shapecore.rewrite import canonicalize, divisors, simplify
from shapecore.testing import int_exprs

NAMES = ("s0", "s1", "s2")


@st.composite
def knowledge_and_point(draw):
    """Ranges and residue classes per symbol, and a point satisfying all of them."""
    ranges, congruences, point = {}, {}, {}
    for name in NAMES:
        coeff = draw(st.sampled_from([1, 2, 4, 8]))
        base = draw(st.integers(0, coeff - 1))
        lo = draw(st.integers(-20, 20))
        k = draw(st.integers(0, 6))
        value = base + coeff * math.ceil((lo - base) / coeff) + coeff * k
        hi = value + draw(st.integers(0, 30))
        symbol = int_symbol(name)
        ranges[symbol] = ValueRange(lo, hi) if draw(st.booleans()) else ValueRange(lo, math.inf)
        congruences[symbol] = ModularSet.of(coeff, base)
        point[name] = value
    return ranges, congruences, point


@given(expr=int_exprs(NAMES, max_leaves=8), known=knowledge_and_point())
def test_simplify_preserves_value(expr, known):
    ranges, congruences, point = known
    try:
        expected = evaluate(expr, point)
    except ZeroDivisionError:
        expected = None
    try:
        simplified, _ = simplify(canonicalize(expr), ranges, congruences)
    except ZeroDivisionError:  # allowed only where the expression is undefined
        assert expected is None
        return
    if expected is not None:
        assert evaluate(simplified, point) == expected


@given(expr=int_exprs(NAMES, max_leaves=8), values=st.fixed_dictionaries({n: st.integers(-40, 40) for n in NAMES}))
def test_canonicalize_preserves_value_where_defined(expr, values):
    """The reasoner relies on exactly this: canonical forms agree wherever the input is defined.

    (Constant folding such as ``Mod(x, 1) = 0`` or sympy's ``0*x = 0`` may drop an undefined
    part, so the canonical form can be defined where the input is not.)
    """
    try:
        canonical = canonicalize(expr)
    except ZeroDivisionError:  # a divisor folded to zero: undefined everywhere
        with pytest.raises(ZeroDivisionError):
            evaluate(expr, values)
        return
    try:
        expected = evaluate(expr, values)
    except ZeroDivisionError:
        return
    assert evaluate(canonical, values) == expected
    assert not {type(n) for n in sympy.preorder_traversal(canonical)} & {F.PythonMod, F.CleanDiv, F.CeilDiv, F.ModularIndexing}


def test_rules():
    s0, s1, n = int_symbol("s0"), int_symbol("s1"), int_symbol("n")
    ranges = {n: ValueRange(3, 10000)}
    assert simplify(F.Mod(8 * s0 + s1, 8), {}, {})[0] == F.Mod(s1, 8)
    assert simplify(F.FloorDiv(8 * s0 + s1, 8), {}, {})[0] == s0 + F.FloorDiv(s1, 8)
    assert simplify(F.Mod(16 * s0, 128), {}, {})[0] == 16 * F.Mod(s0, 8)
    assert simplify(F.Mod(F.Mod(s0, 16), 8), {}, {})[0] == F.Mod(s0, 8)
    assert simplify(F.FloorDiv(F.FloorDiv(s0, 2), 3), {}, {})[0] == F.FloorDiv(s0, 6)
    assert simplify(16 * s0 - 128 * F.FloorDiv(s0, 8), {}, {})[0] == 16 * F.Mod(s0, 8)
    assert simplify(n - F.FloorDiv(n, 3), {}, {})[0] == 2 * F.FloorDiv(n, 3) + F.Mod(n, 3)
    assert simplify(F.Max(n, 2), ranges, {}) == (n, {"ranges"})
    assert simplify(F.FloorDiv(s0, 8) * 8, {}, {s0: ModularSet(8, 0)}) == (s0, {"modular"})


def test_divisors_are_the_nonconstant_ones():
    s0, s1 = int_symbol("s0"), int_symbol("s1")
    assert divisors(sympy.Eq(F.FloorDiv(s0, s1) + F.Mod(s0, 8), 0)) == {s1}
    assert divisors(F.ModularIndexing(s0, s1, 4)) == {s1}
