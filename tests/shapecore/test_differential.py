"""Differential tests: prove, simplify and ShapeEnv against brute force over small boxes.

The ground truth is ``tests/shapecore/oracle.py`` (Python evaluating the guard text on ints,
no shapecore code); the queries and the checks are ``tests/shapecore/differential.py``, which
``bench/fuzz.py`` runs for hundreds of thousands of queries. z3 gets 50 ms a query here.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.shapecore import differential as diff
from tests.shapecore.guard_text import GuardWriter
from tests.shapecore.oracle import Box, OracleError, formula, holds, value_at, zero_divisor

TIMEOUT_MS = 50  # per z3 call: small, so a slow solver costs an unknown, not the suite's time


class _Drawn:
    """A :class:`differential.Chooser` whose choices hypothesis makes (and shrinks)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))


def _queries(make):
    return st.composite(lambda draw: make(_Drawn(draw)))()


def _assert_right(query) -> None:
    problems = [o for o in diff.run(query, timeout_ms=TIMEOUT_MS) if o.problem is not None]
    assert not problems, "\n\n".join(o.report() for o in problems)


# -- the oracle itself ----------------------------------------------------------------------------


@settings(max_examples=max(10, settings.default.max_examples // 3))
@given(data=st.data())
def test_oracle_is_python_on_python_text(data):
    box = Box((("x", -3, 3), ("y", 0, 4)))
    writer = GuardWriter(_Drawn(data.draw), box, "python")
    text = writer.claim(3) if data.draw(st.booleans()) else writer.expr(3)
    f = formula(text)
    for point in box.points():
        try:
            expected = eval(text, {"__builtins__": {}, "max": max, "min": min}, dict(point))  # noqa: S307
        except ZeroDivisionError:
            expected = ZeroDivisionError
        assert value_at(f, point) == expected, (text, point)


@pytest.mark.parametrize(
    "text, point, value",
    [
        ("FloorDiv(-7, 2)", {}, -4),
        ("CleanDiv(x, 4)", {"x": 8}, 2),
        ("CeilDiv(-7, 2)", {}, -3),
        ("CeilDiv(x, y)", {"x": 7, "y": -2}, -3),
        ("Mod(-7, 3)", {}, 2),
        ("PythonMod(7, -3)", {}, -2),
        ("ModularIndexing(x, 4, 3)", {"x": -5}, 1),
        ("Max(x, 2, y)", {"x": 1, "y": -4}, 2),
        ("Min(x, 2, y)", {"x": 1, "y": -4}, -4),
        ("PowByNatural(x, 3)", {"x": -2}, -8),
        ("3*x/4", {"x": 2}, __import__("fractions").Fraction(3, 2)),
        ("~(x > 1) & Eq(Mod(x, 3), 1)", {"x": 1}, True),
        ("Ne(x, 2) | (x >= 5)", {"x": 2}, False),
        ("x == 0 or 10 // x > 2", {"x": 0}, True),  # Python's or: a short circuit
        ("Or(Eq(x, 0), 10 // x > 2)", {"x": 0}, ZeroDivisionError),  # Or: strict
        ("(x == 0) | (10 // x > 2)", {"x": 0}, ZeroDivisionError),
        ("x < 0 < 10 // x", {"x": 0}, False),
        ("Mod(x, y - y)", {"x": 1, "y": 3}, ZeroDivisionError),
    ],
)
def test_oracle_vocabulary(text, point, value):
    assert value_at(formula(text), point) == value


def test_oracle_strict_reading_and_helpers():
    assert value_at(formula("x == 0 or 10 // x > 2", strict=True), {"x": 0}) is ZeroDivisionError
    assert formula("x == 0 or 10 // x > 2").short_circuits and not formula("Or(Eq(x, 0), x > 2)").short_circuits
    assert not holds(formula("x // y - x // y >= 0"), {"x": 1, "y": 0})
    assert zero_divisor("Mod(x, y - y) >= 0") == "y - y" and zero_divisor("Mod(x, y - 3) >= 0") is None
    with pytest.raises(OracleError):
        formula("foo(x) > 0")
    with pytest.raises(OracleError):
        value_at(formula("Eq(x, y > 1)"), {"x": 1, "y": 2})  # a condition where a number belongs


# -- shapecore against it -------------------------------------------------------------------------

_SMALL = Box((("x", -6, 6), ("y", -6, 6)))


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(_queries(diff.prove_query))
@example(diff.ProveQuery("x//y - x//y >= 0", (), _SMALL, ("x", "y"), False))
@example(diff.ProveQuery("Eq(Mod(x//y, -1), 0)", (), _SMALL, ("x", "y"), False))
@example(diff.ProveQuery("Or(Ne(2*x, 5), x//y > 0)", (), _SMALL, ("x", "y"), True))
@example(diff.ProveQuery("Lt(s1, s1)", (), Box((("s0", 1, 42), ("s1", 0, 3))), ("s0",), False))
def test_prove_agrees_with_brute_force(query):
    _assert_right(query)


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(_queries(diff.simplify_query))
@example(diff.SimplifyQuery(("Or(Ne(2*x, 5), x//y > 0)", "y >= 0"), (), _SMALL))
def test_simplify_keeps_the_guards_equivalent(query):
    _assert_right(query)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(_queries(diff.env_query))
@example(diff.EnvQuery((diff.EnvSymbol("s0", 2, 12, 8),),
                       (("evaluate_expr", "Mod(s0, s0 - 8) < s0 + 100"), ("evaluate_expr", "Eq(s0, 3)"),
                        ("evaluate_expr", "s0 < 0"))))
@example(diff.EnvQuery((diff.EnvSymbol("s0", 2, 12, 8), diff.EnvSymbol("u0", 0, 10, None)),
                       (("add_fact", "u0 >= 20"), ("evaluate_expr", "Eq(s0, 3)"), ("round_trip", ""),
                        ("evaluate_expr", "s0 < 0"))))
def test_shape_env_agrees_with_python_at_the_hints(query):
    _assert_right(query)
