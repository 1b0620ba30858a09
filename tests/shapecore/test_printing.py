"""printing: torch_str and python_str print text with the value of the expression printed."""

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import ParseError, evaluate, parse, python_str, torch_str
from shapecore import functions as F
from shapecore.printing import PYTHON_NAMESPACE
from shapecore.testing import assignments, claims, int_exprs

x = F.int_symbol("x")


def _value(expr, values):
    try:
        return evaluate(expr, values)
    except ZeroDivisionError:
        return ZeroDivisionError


def _python_value(source, values):
    try:
        return eval(source, dict(PYTHON_NAMESPACE), dict(values))  # noqa: S307
    except ZeroDivisionError:
        return ZeroDivisionError


def test_python_source_keeps_and_or_strict():
    source = python_str(parse("Or(Eq(x, 0), 10 // x > 2)"))
    assert source == "(x == 0) | (10 // x > 2)"
    with pytest.raises(ZeroDivisionError):  # as holds() has it: the division is evaluated
        eval(source, {}, {"x": 0})  # noqa: S307


@settings(max_examples=60)
@given(expr=st.one_of(int_exprs(), claims()), values=assignments())
def test_python_source_computes_the_same_value(expr, values):  # a division by zero included
    assert _python_value(python_str(expr), values) == _value(expr, values)


@settings(max_examples=60)
@given(expr=st.one_of(int_exprs(), claims()), values=assignments())
def test_python_source_reads_back_with_the_same_value(expr, values):
    try:
        back = parse(python_str(expr))
    except ParseError as error:  # a divisor that folds to 0 as written: undefined at every value
        assert "division by zero" in str(error) and _value(expr, values) is ZeroDivisionError
        return
    assert _value(back, values) == _value(expr, values)


def test_modular_indexing_by_one_is_zero_as_its_python_source_reads():
    s0 = F.int_symbol("s0")
    assert F.ModularIndexing(s0, 1, 1) == 0 == parse(python_str(F.ModularIndexing(s0 + 3, 2, 1)))
    assert F.ModularIndexing(s0, s0, 1) != 0, "a symbolic divisor may be 0: kept"


@settings(max_examples=60)
@given(claim=claims(), values=assignments())
def test_torch_text_of_a_claim_reads_back_with_the_same_value(claim, values):
    assert _value(parse(torch_str(claim)), values) == _value(claim, values)


@given(a=st.integers(-40, 40), b=st.integers(-9, 9).filter(bool), n=st.integers(1, 6).map(lambda k: 2**k))
def test_rationals_and_float_functions_print_as_python_does_them(a, b, n):
    expr = sympy.Rational(1, n) * x + F.FloorToInt(F.IntTrueDiv(x, b)) + F.CeilToInt(F.ToFloat(x))
    assert _python_value(python_str(expr), {"x": a}) == _value(expr, {"x": a})


def test_names_replace_symbols_by_their_source():
    source = python_str(parse("Eq(Mod(s0, 8), 0) & (s1 >= 2)"), {"s0": "x.size()[0]", "s1": "n"})
    assert "s0" not in source and "s1" not in source

    class Tensor:
        def size(self):
            return [16]

    for n in (1, 2):
        assert eval(source, {}, {"x": Tensor(), "n": n}) == (n >= 2)  # noqa: S307
