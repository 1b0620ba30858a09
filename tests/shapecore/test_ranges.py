"""Value ranges contain every value the expression takes inside the symbol ranges."""

import math

import pytest
import sympy
from hypothesis import assume, given
from hypothesis import strategies as st

import shapecore.functions as F
from shapecore import ValueRange, evaluate, int_symbol
from shapecore.ranges import UNBOUNDED, bound, decide
from shapecore.testing import claims, int_exprs

NAMES = ("s0", "s1", "s2")


@st.composite
def boxes(draw):
    """Symbol ranges (some one-sided) and a point inside them."""
    ranges, point = {}, {}
    for name in NAMES:
        lo = draw(st.integers(-30, 30))
        hi = lo + draw(st.integers(0, 40))
        value = draw(st.integers(lo, hi))
        kind = draw(st.sampled_from(["both", "lo", "hi", "none"]))
        ranges[int_symbol(name)] = ValueRange(lo if kind in ("both", "lo") else -math.inf,
                                              hi if kind in ("both", "hi") else math.inf)
        point[name] = value
    return ranges, point


@given(expr=int_exprs(NAMES, max_leaves=8), box=boxes())
def test_bound_contains_every_value(expr, box):
    ranges, point = box
    try:
        value = evaluate(expr, point)
    except ZeroDivisionError:
        return
    assert value in bound(expr, ranges)


@given(claim=claims(NAMES), box=boxes())
def test_decide_agrees_with_evaluation(claim, box):
    ranges, point = box
    verdict = decide(claim, ranges)
    assume(verdict is not None)
    try:
        assert evaluate(claim, point) is verdict
    except ZeroDivisionError:
        pass


def test_examples():
    n = int_symbol("n")
    ranges = {n: ValueRange(3, 10000)}
    assert bound(F.FloorDiv(n, 3), ranges) == ValueRange(1, 3333)
    assert bound(F.Mod(n, 8), ranges) == ValueRange(0, 7)
    assert bound(F.Mod(n, 20000), ranges) == ValueRange(3, 10000)
    assert bound(F.Mod(-n, 8), ranges) == ValueRange(0, 7)
    assert bound(F.Mod(n, -8), ranges) == ValueRange(-7, 0)
    assert bound(n**2, {n: ValueRange(-3, 2)}) == ValueRange(0, 9)
    assert bound(F.Max(n, 5000), ranges) == ValueRange(5000, 10000)
    assert bound(F.FloorDiv(7, n), {n: ValueRange(1, math.inf)}) == ValueRange(0, 7)
    assert bound(F.FloorDiv(-7, n), {n: ValueRange(1, math.inf)}) == ValueRange(-7, -1)
    assert bound(F.FloorDiv(n, n - n + int_symbol("d")), {}) == UNBOUNDED


@pytest.mark.parametrize("a, b", [((0, 5), (2, 3)), ((-4, 4), (-2, 7)), ((-math.inf, 3), (1, 1))])
def test_interval_arithmetic_is_exact_at_corners(a, b):
    x, y = ValueRange(*a), ValueRange(*b)
    assert (x + y).as_tuple() == (a[0] + b[0], a[1] + b[1])
    assert (-x).as_tuple() == (-a[1], -a[0])
    assert str(x * y).startswith("[")


def test_integers_beyond_a_floats_range_stay_exact():
    # 10**400 + inf and 10**400 * inf raised OverflowError: exact ints must never meet float arithmetic.
    x, big = int_symbol("x"), 10**400
    assert bound(x + big, {x: ValueRange(0, math.inf)}) == ValueRange(big, math.inf)
    assert bound(x * big, {x: ValueRange(-math.inf, -1)}) == ValueRange(-math.inf, -big)
    assert bound(x - big, {x: ValueRange(big, 2 * big)}) == ValueRange(0, big)
    assert decide(sympy.Gt(x + 1, big), {x: ValueRange(big, math.inf)}) is True


def test_the_remainder_of_a_float_by_one_is_not_taken_for_an_int():
    """Fuzzer cases: Mod(Mod(u1 + 1.5, u0), 1) and Mod(Mod(0.001, b + 3), -1) were bounded to 0,
    as the ends of an unbounded (float) range count as integers; Python gives 0.5 and -0.999."""
    from shapecore import prove

    assert prove("Mod((u1 + (1.5)), u0) % 1 == 0", ranges={"u0": (-3, -3), "u1": (-4, -3)}).status == "refuted"
    assert prove("Eq(Mod(Mod(1e-3, b + 3), -1), 0)", ranges={"b": (-8, -1)}).status == "refuted"


def test_a_division_with_a_float_operand_is_unbounded():
    """Fuzzer case: Python computes -1152921504606846977.0 // x in floats, rounding x = -(2**60 + 3)
    to -2**60 first (quotient 1.0); ranges bounded the exact quotient's floor, 0, and proved it."""
    from shapecore import prove, simplify

    x_value = -(2**60) - 3
    big, x = F.float_number(-1152921504606846977.0), int_symbol("x")
    for division in (F.FloorDiv(big, x), F.Mod(big, x), F.CeilDiv(x, F.float_number(0.5))):
        assert bound(division, {x: ValueRange.point(x_value)}) == UNBOUNDED
    at_x = {"x": (x_value, x_value)}
    assert prove("Eq(CleanDiv(-1152921504606846977.0, x), 0)", ranges=at_x).status == "refuted"
    assert prove("Eq(Mod(-1152921504606846977.0, x), -1152921504606846977.0)", ranges=at_x).status == "refuted"
    assert simplify(["Eq(FloorDiv(-1152921504606846977.0, x), 0)"], ranges=at_x).guards != ()


def test_max_and_min_with_a_float_operand_are_unbounded():
    """Fuzzer case: min(x, a, 0) with a float x is float(a), rounded for a past 2**53, so
    a >= Min(x, a, 0) is False at a = -1152921504606846979; it was proved from Min's rule."""
    from shapecore import prove

    a = int_symbol("a")
    for lattice in (F.Min, F.Max):
        assert bound(lattice(a, F.float_number(0.5)), {a: ValueRange.point(-(2**60) - 3)}) == UNBOUNDED
    at_a = {"a": (-(2**60) - 3, -(2**60) - 3)}
    assert prove("a >= Min(0.5, a, 0)", ranges=at_a).status == "refuted"
    assert prove("Max(a, 0.5) == a", ranges={"a": (2**60 + 3, 2**60 + 3)}).status == "refuted"
