"""The vocabulary evaluates like Python's ints, and like torch's sympy functions where defined."""

import math
from fractions import Fraction

import pytest
import sympy
from hypothesis import example, given
from hypothesis import strategies as st

import shapecore.functions as F
from shapecore import evaluate, int_symbol

ints = st.integers(-10**6, 10**6)
small = st.integers(-50, 50)

PYTHON = {
    F.FloorDiv: lambda a, b: a // b,
    F.CleanDiv: lambda a, b: a // b,
    F.CeilDiv: lambda a, b: -((-a) // b),
    F.Mod: lambda a, b: a % b,
    F.PythonMod: lambda a, b: a % b,
    F.Max: max,
    F.Min: min,
}
DIVISIONS = {F.FloorDiv, F.CleanDiv, F.CeilDiv, F.Mod, F.PythonMod}


@pytest.mark.parametrize("op", list(PYTHON), ids=lambda op: op.__name__)
@given(a=ints, b=st.one_of(small, ints))
def test_constant_folding_matches_python(op, a, b):
    if op in DIVISIONS and b == 0:
        with pytest.raises(ZeroDivisionError):
            op(sympy.Integer(a), sympy.Integer(b))
        return
    assert op(sympy.Integer(a), sympy.Integer(b)) == PYTHON[op](a, b)


@pytest.mark.parametrize("op", list(PYTHON), ids=lambda op: op.__name__)
@given(a=ints, b=st.one_of(small, ints))
def test_symbolic_evaluation_matches_python(op, a, b):
    x, y = int_symbol("x"), int_symbol("y")
    expr = op(x, y)
    if op in DIVISIONS and b == 0:
        with pytest.raises(ZeroDivisionError):
            evaluate(expr, {"x": a, "y": b})
        return
    assert evaluate(expr, {"x": a, "y": b}) == PYTHON[op](a, b)


@given(a=ints, b=small.filter(bool), c=small.filter(bool))
def test_modular_indexing_is_floordiv_then_mod(a, b, c):
    expected = (a // b) % c
    assert F.ModularIndexing(sympy.Integer(a), sympy.Integer(b), sympy.Integer(c)) == expected
    x = int_symbol("x")
    assert evaluate(F.ModularIndexing(x, b, c), {"x": a}) == expected


@given(a=ints, b=ints.filter(bool))
def test_mod_and_python_mod_never_disagree(a, b):
    x, y = int_symbol("x"), int_symbol("y")
    values = {"x": a, "y": b}
    assert evaluate(F.Mod(x, y), values) == evaluate(F.PythonMod(x, y), values) == a % b
    assert F.Mod(sympy.Integer(a), sympy.Integer(b)) == F.PythonMod(sympy.Integer(a), sympy.Integer(b))


@given(a=ints, b=ints.filter(bool))
def test_float_functions_follow_python(a, b):
    x, y = int_symbol("x"), int_symbol("y")
    values = {"x": a, "y": b}
    assert evaluate(F.ToFloat(x), values) == float(a)
    assert evaluate(F.IntTrueDiv(x, y), values) == a / b
    assert evaluate(F.FloatTrueDiv(x, y), values) == float(a) / float(b)
    assert evaluate(F.TruncToInt(F.IntTrueDiv(x, y)), values) == math.trunc(a / b)
    assert evaluate(F.FloorToInt(F.IntTrueDiv(x, y)), values) == math.floor(a / b)
    assert evaluate(F.CeilToInt(F.IntTrueDiv(x, y)), values) == math.ceil(a / b)
    assert evaluate(F.RoundToInt(F.IntTrueDiv(x, y)), values) == round(a / b)
    assert evaluate(F.TruncToFloat(F.IntTrueDiv(x, y)), values) == float(math.trunc(a / b))
    assert F.TruncToInt(F.IntTrueDiv(sympy.Integer(a), sympy.Integer(b))) == math.trunc(a / b)


def test_identities_hold_for_every_integer_only():
    x = int_symbol("x")
    assert F.FloorDiv(x, 1) == x
    assert F.FloorDiv(x, -1) == -x
    assert F.Mod(x, 1) == 0
    assert F.Mod(0, x) != 0, "0 % x is undefined at x == 0, so it must not fold"
    assert F.FloorDiv(x, x) != 1, "x // x is undefined at x == 0, so it must not fold"


# -- differential: torch's own functions on the same inputs ------------------------------------

import torch.utils._sympy.functions as torch_functions  # noqa: E402  (the test may import torch)

TORCH = {
    F.FloorDiv: (torch_functions.FloorDiv, lambda a, b: b != 0),
    F.CleanDiv: (torch_functions.CleanDiv, lambda a, b: b != 0),
    F.PythonMod: (torch_functions.PythonMod, lambda a, b: b != 0),
    # torch's Mod and CeilDiv are defined only for a >= 0, b >= 1
    F.Mod: (torch_functions.Mod, lambda a, b: a >= 0 and b >= 1),
    F.CeilDiv: (torch_functions.CeilDiv, lambda a, b: b >= 1),
    F.Max: (torch_functions.Max, lambda a, b: True),
    F.Min: (torch_functions.Min, lambda a, b: True),
}


@pytest.mark.parametrize("op", list(TORCH), ids=lambda op: op.__name__)
@given(a=ints, b=st.one_of(small, ints))
def test_matches_torch_where_torch_is_defined(op, a, b):
    torch_op, defined = TORCH[op]
    if not defined(a, b):
        return
    assert op(sympy.Integer(a), sympy.Integer(b)) == torch_op(sympy.Integer(a), sympy.Integer(b))


@given(a=ints, b=small.filter(bool), c=small.filter(bool))
def test_modular_indexing_matches_torch(a, b, c):
    args = (sympy.Integer(a), sympy.Integer(b), sympy.Integer(c))
    assert F.ModularIndexing(*args) == torch_functions.ModularIndexing(*args)


@given(a=ints, b=ints.filter(bool))
def test_float_functions_match_torch(a, b):
    A, B = sympy.Integer(a), sympy.Integer(b)
    assert float(F.IntTrueDiv(A, B)) == float(torch_functions.IntTrueDiv(A, B))
    assert float(F.ToFloat(A)) == float(torch_functions.ToFloat(A))
    quotient = sympy.Float(a / b)
    for ours, theirs in [(F.TruncToInt, torch_functions.TruncToInt), (F.FloorToInt, torch_functions.FloorToInt),
                         (F.CeilToInt, torch_functions.CeilToInt), (F.RoundToInt, torch_functions.RoundToInt)]:
        assert ours(quotient) == theirs(quotient)


# -- float constants: exactly one double, as Python compares it ---------------------------------

COMPARISONS = {sympy.Eq: lambda a, b: a == b, sympy.Ne: lambda a, b: a != b, sympy.Lt: lambda a, b: a < b,
               sympy.Le: lambda a, b: a <= b, sympy.Gt: lambda a, b: a > b, sympy.Ge: lambda a, b: a >= b}
doubles = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def _double_and_near_int(draw):
    """A double and an int at most a few units from it, where a double's precision runs out."""
    value = draw(st.one_of(doubles, st.integers(-(2**70), 2**70).map(float)))
    return value, int(value) + draw(st.integers(-3, 3))


@pytest.mark.parametrize("relation", list(COMPARISONS), ids=lambda r: r.__name__)
@given(pair=_double_and_near_int(), flip=st.booleans())
def test_a_float_constant_compares_with_an_int_as_python_does(relation, pair, flip):
    f, n = pair
    lhs, rhs = (F.float_number(f), sympy.Integer(n)) if not flip else (sympy.Integer(n), F.float_number(f))
    expected = COMPARISONS[relation](f, n) if not flip else COMPARISONS[relation](n, f)
    assert bool(relation(lhs, rhs)) is expected
    if relation not in (sympy.Eq, sympy.Ne):
        assert bool(getattr(lhs, {sympy.Lt: "__lt__", sympy.Le: "__le__", sympy.Gt: "__gt__", sympy.Ge: "__ge__"}[relation])(rhs)) is expected


@given(a=doubles, b=st.one_of(doubles, st.integers(-(2**70), 2**70)))
@example(a=72057594037921344.0, b=0)  # Add(x, 0) is x, whose str is its shortest repr, 7.205759403792134e+16
def test_sympy_arithmetic_on_a_float_constant_is_exact(a, b):
    x, y = F.float_number(a), F.float_number(b) if isinstance(b, float) else sympy.Integer(b)
    exact_a, exact_b = Fraction(a), Fraction(b)

    def value(number: sympy.Basic) -> Fraction:  # exact: a float's str is its shortest repr, not its value
        rational = sympy.Rational(number)
        return Fraction(int(rational.p), int(rational.q))

    assert value(x + y) == exact_a + exact_b and value(x - y) == exact_a - exact_b
    assert value(x * y) == exact_a * exact_b
    assert float(-x) == -a and isinstance(-x, F.PythonFloat)
    if y != 0:  # x + 0 is x itself (Python's value too); any other sum is an exact rational
        assert not (x + y).is_Float and not sympy.Add(x, y).is_Float
    assert value(sympy.Add(x, y)) == exact_a + exact_b


def test_the_fuzzers_float_comparisons():
    assert F.float_number(5e17) > 499999999999999999
    assert not sympy.Le(F.float_number(5e17), 499999999999999999)
    assert not sympy.Eq(F.float_number(1e16), 10**16 + 1)
    x = 62999999999999999997  # x + 0.5 rounds to 63000000000000000000.0 in floats
    assert not sympy.Le(F.FloatAdd(sympy.Integer(x), F.float_number(0.5)), 62999999999999999999)
    assert sympy.Mul(-1, F.float_number(0.5)) == F.float_number(-0.5)  # Python's -0.5, a float


def test_divisions_are_integers_only_on_integers():
    x = int_symbol("x")
    half = F.float_number(0.5)
    assert F.FloorDiv(x, 2).is_integer and F.CeilDiv(x, 2).is_integer and F.Mod(x, 2).is_integer
    assert F.Mod(F.FloatMul(x, half), 2).is_integer is None  # (x*0.5) % 2 is 0.5 at x = 1
    assert F.Mod(x / 2, 3).is_integer is None  # Fraction(1, 2) % 3 is 1/2
    assert F.FloorDiv(x, F.float_number(2.0)).is_integer is None  # a float in Python (or inf)
    assert F.ModularIndexing(x, 2, F.float_number(2.5)).is_integer is None
    assert evaluate(F.Mod(F.FloatMul(x, half), 2), {"x": 1}) == 0.5
    assert F.Max(x, F.float_number(2.5)).is_integer is None  # max(x, 2.5) is 3 at x = 3


@given(a=st.integers(-20, 20), b=st.integers(-20, 20), f=st.sampled_from([2.5, 8.0, -3.0, 0.0]))
def test_max_and_min_with_a_float_operand_are_floats_as_torch_sym_max(a, b, f):
    """Python's max(8, 8.0) is the int 8 and max(9, 8.0) the int 9: its type follows the values
    and, at a tie, the operands' order, which sympy does not keep. Max follows torch instead."""
    import torch

    x, y = int_symbol("x"), int_symbol("y")
    for ours, theirs in [(F.Max, torch.sym_max), (F.Min, torch.sym_min)]:
        got = evaluate(ours(x, y, F.float_number(f)), {"x": a, "y": b})
        expected = theirs(theirs(a, b), f)
        assert type(got) is float and got == expected
        folded = ours(sympy.Integer(a), F.float_number(f))  # numbers fold to a float too
        assert folded.is_Float and float(folded) == theirs(a, f)


@pytest.mark.parametrize("text, value", [("((-1)*(0.0 // (-3)))", 0.0), ("0.0 % 3", 0.0), ("0.0 // 3", 0.0)])
def test_zero_as_a_float_divided_stays_a_float(text, value):
    """Fuzzer case: 0.0 // -3 folded to the int 0 (Python: -0.0), so evaluate_expr answered 0."""
    from shapecore import parse

    got = evaluate(parse(text), {})
    assert type(got) is float and got == value


def test_a_float_constant_is_never_an_integer():
    """Fuzzer case: sympy calls 0.0 an integer, so Min(u0, 0.0) was one and Mod(Min(u0, 0.0), 1)
    folded to the int 0; Python gives the float 0.0 at u0 = -1 and 0 (min promotes to a float)."""
    u0 = int_symbol("u0")
    for value in (0.0, -0.0, 2.0):
        assert F.float_number(value).is_integer is False
    assert F.Min(u0, F.float_number(0.0)).is_integer is not True
    assert isinstance(F.Mod(F.Min(u0, F.float_number(0.0)), 1), F.Mod)
