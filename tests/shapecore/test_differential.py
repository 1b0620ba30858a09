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


def test_oracle_helpers():
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
# Python's and/or and chained comparisons short-circuit (bench/fuzz.py --seed 0, cases 679, 12470, 27873, 32847)
@example(diff.ProveQuery(
    "(not ((min(s0, s0) < (s0 % (-3))) & (min(s0, s0) > (-((-0) // (s0 - (-2)))) < (-((-6) // s0)))))",
    ("-5 <= s0 <= 1",), Box((("s0", -5, 1),)), ("s0",), True))
@example(diff.ProveQuery(
    "And(Ne(FloorDiv(b, c), (-3)), (b >= max(b, (-5), 6)), (ModularIndexing(c, (-7), b) <= (7*a)))",
    ("(Eq(((b)//(8)), CeilDiv(4, b)) or (ModularIndexing((-1), c, (a - 5)) >= PythonMod(7, a)))",),
    Box((("a", -3, 9), ("b", 1, 8), ("c", 0, 0))), ("a", "b", "c"), False))
@example(diff.ProveQuery(
    "Not(And(Mod(min(y, 4), (y - 3)) > 0, Mod(min(y, 4), (y - 3)) <= 0))",
    ("Ge(x, -3)", "Le(x, 3)", "And(y >= 2, y <= 3)", "Or(((8*x) < 8 == FloorDiv(2, (y - 3))), (CleanDiv(x, x) > (y % y)))"),
    Box((("x", -3, 3), ("y", 2, 3))), ("x", "y"), True))
@example(diff.ProveQuery(
    "(Ne(max(s2, (-1)), (s0 // s0)) | Or(((-5) != ((-6))**0), (CleanDiv(((s1 - s0)*(-7)), (s1 - s0)) == (s2 % 1))))",
    ("Ne(s0, s2)", "((s2 < (0*s1)) or (((4)//(s0)) <= (s2 % s2)))"),
    Box((("s0", -3, 3), ("s1", 5, 5), ("s2", -3, 3))), ("s0", "s1"), False))
def test_prove_agrees_with_brute_force(query):
    _assert_right(query)


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(_queries(diff.simplify_query))
@example(diff.SimplifyQuery(("Or(Ne(2*x, 5), x//y > 0)", "y >= 0"), (), _SMALL))
# Python's and/or and chained comparisons short-circuit (bench/fuzz.py --seed 0, cases 207, 8316)
@example(diff.SimplifyQuery(
    ("(not ((((0*(-8)) % 2))**1 == (((((x - 5)*x) // (x - 5)))**0)**2 > (-((-(x % x)) // (x - 6)))))",),
    ("Eq(x, x)",), Box((("x", -6, 6),))))
@example(diff.SimplifyQuery(
    ("Not(((x == (7*x)) and ((7 % y) == (y // (x - y)))))", "(not ((y - x) == (x // x)))"),
    ("Ne(y, 4)",), Box((("x", 3, 11), ("y", 5, 5)))))
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
@example(diff.EnvQuery((diff.EnvSymbol("s0", 0, 6, 0),),
                       (("evaluate_expr", "s0 == 0 or 10 // s0 > 2"), ("evaluate_expr", "s0 != 0 and 10 // s0 > 2"),
                        ("add_fact", "s0 < 3 or 6 // s0 > 0"), ("round_trip", ""), ("evaluate_expr", "s0 < 1 < 6 // s0"))))
def test_shape_env_agrees_with_python_at_the_hints(query):
    _assert_right(query)


# Issue 19 B: facts on unbacked symbols that no value in their ranges allows at the hints
_S27 = diff.EnvSymbol("s0", 2, 30, 27)
_U14 = diff.EnvSymbol("u0", 0, 14, None)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(_queries(diff.unbacked_env_query))
@example(diff.EnvQuery((_S27, _U14), (("add_fact", "s0 <= u0"), ("evaluate_expr", "s0 <= 14"),
                                      ("evaluate_expr", "s0 * 2"))))
@example(diff.EnvQuery((_S27, _U14), (("add_fact", "s0 < u0 - 20"), ("evaluate_expr", "Lt(s0, s0)"))))
@example(diff.EnvQuery((_S27, _U14), (("defer_runtime_assert", "s0 <= u0 + 13"), ("round_trip", ""),
                                      ("add_fact", "u0 < 14"), ("evaluate_expr", "s0 <= 14"))))
def test_shape_env_facts_on_unbacked_symbols_keep_the_hints_possible(query):
    _assert_right(query)


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(_queries(diff.division_simplify_query))
# issue 19 C: s2 := CeilDiv(s0, 16) reached the digest after Eq(Mod(s2, 2), 0) was settled on s2's congruence
@example(diff.SimplifyQuery(("(Gt(-s2 - 3, s0 + 4)) | (Eq(CeilDiv(s0, 16), s2))", "Eq(Mod(s2, 2), 0)"), (),
                            Box((("s0", 0, 100), ("s2", 2, 8))), (("s0", 0, None), ("s2", 2, 8))))
def test_simplify_keeps_disjunctions_with_divisions_equivalent(query):
    _assert_right(query)
