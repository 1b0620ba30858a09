"""compile_guards: one generated function that agrees with holds() guard by guard."""

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from shapecore import ArgumentError, compile_guards, holds, parse
from shapecore.guard_code import compile_predicate
from shapecore.testing import assignments, claims

NAMES = ("s0", "s1", "s2")


def first_violated(guards, values):
    return next((g for g in guards if not holds(g, values)), None)


@given(st.lists(claims(NAMES, max_leaves=4), max_size=4), assignments(NAMES, lo=-6, hi=12))
def test_agrees_with_holds_guard_by_guard(guards, values):
    check = compile_guards(guards)
    assert check(**{p: values[p] for p in check.parameters}) == first_violated(check.guards, values)
    assert compile_predicate(guards)(values) == all(holds(g, values) for g in guards)


class FakeTensor:
    def __init__(self, *shape):
        self.shape = shape

    def size(self):
        return self.shape


def test_sources_name_the_arguments():
    guards = ["Eq(Mod(s0, 8), 0)", "s1 <= s0", "Ne(s2, 1)"]
    check = compile_guards(guards, {"s0": "x.size()[0]", "s1": "x.size()[1]", "s2": "len(ys)"})
    assert check.parameters == ("x", "ys")
    assert check(x=FakeTensor(16, 4), ys=[1, 2]) is None
    assert str(check(x=FakeTensor(12, 4), ys=[1, 2])) == "Eq(Mod(s0, 8), 0)"
    assert str(check(x=FakeTensor(16, 32), ys=[1, 2])) == "s1 <= s0"
    assert str(check(x=FakeTensor(16, 4), ys=[1])) == "Ne(s2, 1)"
    with pytest.raises(TypeError):
        check(FakeTensor(16, 4), [1, 2])  # keyword-only: sources, not positions, name the inputs


def test_without_sources_symbols_are_the_keywords():
    check = compile_guards(["s0 >= 2", "s0*s1 <= 64"])
    assert check.parameters == ("s0", "s1")
    assert check(s0=4, s1=16) is None and str(check(s0=4, s1=17)) == "s0*s1 <= 64"
    assert compile_guards([])() is None


def test_zero_divisor_violates_even_inside_or():
    guard = parse("Eq(s1, 0) | Eq(Mod(s0, s1), 0)")
    check = compile_guards([guard, "s0 >= 0"])
    assert not holds(guard, {"s0": 4, "s1": 0})
    assert check(s0=4, s1=0) is guard
    assert check(s0=4, s1=2) is None
    assert " or " not in check.source and " and " not in check.source  # strict & and |


def test_generated_code_is_straight_line():
    guards = [f"s0 >= {i}" for i in range(50)] + ["Eq((s0//s1), 3)"]
    check = compile_guards(guards)
    assert check.source.count("if not") == len(guards)
    assert " for " not in check.source and "while" not in check.source
    assert check.source.count("try:") == 1  # only the guard with a symbolic divisor


def test_missing_or_malformed_sources_are_errors():
    with pytest.raises(ValueError, match="s1, which has no source"):
        compile_guards(["s0 <= s1"], {"s0": "x.size()[0]"})
    with pytest.raises(ValueError, match="not a Python expression"):
        compile_guards(["s0 >= 2"], {"s0": "x.size()["})


def test_float_guards_follow_python():
    check = compile_guards(["TruncToInt(IntTrueDiv(s0, 3)) >= 1"])
    assert check(s0=3) is None and check(s0=2) is not None
    assert check.guards[0] == parse("TruncToInt(IntTrueDiv(s0, 3)) >= 1")
    assert isinstance(check.guards[0], sympy.Basic)


def test_guard_text_must_come_in_a_list():
    with pytest.raises(ArgumentError, match=r"guards must be a list of guards .*guards=\['s0 > 2'\]"):
        compile_guards("s0 > 2")


def test_takes_every_symbol_the_guard_text_names():
    check = compile_guards(["s0 >= 2", "Eq(s1, s1)"])  # the second folds to True
    assert check.parameters == ("s0", "s1")
    assert check(s0=3, s1=4) is None and str(check(s0=1, s1=4)) == "s0 >= 2"
    sized = compile_guards(["Eq(Mod(s1, 1), 0)"], {"s1": "x.shape[1]"})
    assert sized.parameters == ("x",) and sized(x=FakeTensor(2, 3)) is None


def test_a_strict_or_does_not_skip_a_division_by_zero():
    check = compile_guards(["Or(Eq(x, 0), 10 // x > 2)"])
    assert check(x=3) is None and check(x=0) is not None  # holds() says undefined at x = 0


def test_pythons_or_skips_a_division_it_never_reaches():
    check = compile_guards(["x == 0 or 10 // x > 2", "x != 0 and 10 // x > 2 or x == 0"])
    assert check(x=0) is None and check(x=3) is None and check(x=5) is check.guards[0]
    assert " or " in check.source and " and " in check.source  # Python's own and/or: exactly their meaning
