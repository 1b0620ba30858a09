"""The vocabulary evaluates like Python's ints, and like torch's sympy functions where defined."""

import math

import pytest
import sympy
from hypothesis import given
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
