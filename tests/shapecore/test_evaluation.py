"""extend_assignment: the values of replaced symbols, the one place every layer computes them."""

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import FloorDiv, extend_assignment, int_symbol

s0, s1, s2, s3, u0 = (int_symbol(n) for n in ("s0", "s1", "s2", "s3", "u0"))
REPLACEMENTS = {s2: 2 * s0 + s1, s3: FloorDiv(s0, s1 + 1), u0: s0 + int_symbol("u1")}


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 50), st.integers(0, 50))
def test_extends_through_bound_replacements_only(a: int, b: int) -> None:
    extended = extend_assignment({"s0": a, "s1": b}, REPLACEMENTS)
    assert extended == {"s0": a, "s1": b, "s2": 2 * a + b, "s3": a // (b + 1)}  # u0 needs u1


def test_keeps_given_values_and_the_input() -> None:
    values = {"s0": 3, "s1": 1, "s2": 99}
    assert extend_assignment(values, REPLACEMENTS)["s2"] == 99
    assert values == {"s0": 3, "s1": 1, "s2": 99}


def test_a_zero_divisor_raises_as_python_does() -> None:
    with pytest.raises(ZeroDivisionError):
        extend_assignment({"s0": 3, "s1": -1}, REPLACEMENTS)


def test_no_replacements_copies() -> None:
    values = {"s0": 1}
    extended = extend_assignment(values, {})
    assert extended == values and extended is not values
    assert extend_assignment({}, {s2: sympy.Integer(4)}) == {"s2": 4}
