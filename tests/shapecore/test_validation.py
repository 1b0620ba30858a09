"""validation: each check returns what it was given, normalized, or names the argument it refuses."""

import re

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore.errors import ArgumentError
from shapecore.parsing import MAX_INTEGER_DIGITS
from shapecore.validation import check_bound, check_integer, check_ranges, check_symbol_name, check_values, guard_list


@given(n=st.integers(-(10**30), 10**30))
def test_check_integer_keeps_any_integral_value(n):
    assert check_integer(n, "n") == n
    assert check_integer(sympy.Integer(n), "n") == n
    assert type(check_integer(sympy.Integer(n), "n")) is int


@pytest.mark.parametrize("value", [True, 2.0, "2", None, [2]])
def test_check_integer_refuses_what_is_not_an_integer_naming_it(value):
    with pytest.raises(ArgumentError, match=rf"^hint must be an int, got {re.escape(repr(value))}$"):
        check_integer(value, "hint")


def test_check_integer_refuses_more_digits_than_guard_text_reads():
    with pytest.raises(ArgumentError, match=rf"hint is too large: an integer of {MAX_INTEGER_DIGITS + 1} digits"):
        check_integer(10**MAX_INTEGER_DIGITS, "hint")


def test_check_bound_allows_an_open_side():
    assert check_bound(None, "lo") is None
    with pytest.raises(ArgumentError, match="lo must be an int or None"):
        check_bound(1.5, "lo")


@pytest.mark.parametrize("name", ["s0", "batch", "_x1"])
def test_a_symbol_name_is_one_guard_text_reads_back(name):
    assert check_symbol_name(name, "name") == name


@pytest.mark.parametrize("name", ["a b", "1x", "Max", "if", "zf0", ""])
def test_a_name_guard_text_would_misread_is_refused(name):
    with pytest.raises(ArgumentError, match="cannot name a symbol"):
        check_symbol_name(name, "name")


def test_guard_list_refuses_a_single_guard_with_the_fix():
    with pytest.raises(ArgumentError, match=r"for one guard pass a list: facts=\['x > 2'\]"):
        guard_list("x > 2", "facts")
    with pytest.raises(ArgumentError, match=r"facts\[1\] must be guard text"):
        guard_list(["x > 2", 2.5], "facts")
    assert guard_list(("x > 2", sympy.Gt(F.int_symbol("y"), 1)), "facts") == ["x > 2", sympy.Gt(F.int_symbol("y"), 1)]


def test_check_ranges_by_name_with_open_sides():
    assert check_ranges(None) == {}
    assert check_ranges({F.int_symbol("s0"): (2, None), "s1": [None, 8]}) == {"s0": (2, None), "s1": (None, 8)}
    with pytest.raises(ArgumentError, match=r"ranges\['s0'\] must be a pair"):
        check_ranges({"s0": 2})
    with pytest.raises(ArgumentError, match=r"ranges\['s0'\] upper bound must be an int or None"):
        check_ranges({"s0": (1, "8")})


def test_check_values_names_the_culprit():
    assert check_values({"s0": sympy.Integer(64)}) == {"s0": 64}
    with pytest.raises(ArgumentError, match=r"values\['s0'\] must be an int, got 6.4"):
        check_values({"s0": 6.4})
    with pytest.raises(ArgumentError, match="values must map symbol names to ints"):
        check_values([("s0", 64)])
