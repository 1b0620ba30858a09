"""Residue classes contain every value; congruence solving and combining are exact."""

from hypothesis import given
from hypothesis import strategies as st

import shapecore.functions as F
from shapecore import ModularSet, evaluate, int_symbol
from shapecore.modular import combine_congruences, modular_set, solve_linear_congruence
from shapecore.testing import int_exprs

NAMES = ("s0", "s1", "s2")
classes = st.tuples(st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16]), st.integers(-20, 20)).map(lambda t: ModularSet.of(*t))


@given(
    expr=int_exprs(NAMES, max_leaves=8),
    congruences=st.fixed_dictionaries({n: classes for n in NAMES}),
    ks=st.fixed_dictionaries({n: st.integers(-6, 6) for n in NAMES}),
)
def test_residue_class_contains_every_value(expr, congruences, ks):
    point = {n: c.coeff * ks[n] + c.base for n, c in congruences.items()}
    known = {int_symbol(n): c for n, c in congruences.items()}
    residues = modular_set(expr, known)
    try:
        value = evaluate(expr, point)
    except ZeroDivisionError:
        return
    if residues is None:
        return
    if residues.coeff == 0:
        assert value == residues.base
    else:
        assert (value - residues.base) % residues.coeff == 0


@given(a=st.integers(-50, 50), r=st.integers(-50, 50), m=st.integers(1, 64))
def test_linear_congruence_solutions_are_exactly_the_solutions(a, r, m):
    solution = solve_linear_congruence(a, r, m)
    for x in range(-70, 70):
        solves = (a * x - r) % m == 0
        if solution is None:
            assert not solves
        else:
            member = x == solution.base if solution.coeff == 0 else (x - solution.base) % solution.coeff == 0
            assert member == solves


@given(x=classes, y=classes)
def test_combined_congruence_is_the_intersection(x, y):
    both = combine_congruences(x, y)

    def member(c, v):
        return v == c.base if c.coeff == 0 else (v - c.base) % c.coeff == 0

    for v in range(-60, 60):
        expected = member(x, v) and member(y, v)
        assert (both is not None and member(both, v)) == expected


def test_examples():
    s0, s1 = int_symbol("s0"), int_symbol("s1")
    known = {s0: ModularSet(4, 0), s1: ModularSet(2, 0)}
    assert modular_set(s0 * s1, known) == ModularSet(8, 0)
    assert modular_set(8 * s0 + 4, {}) == ModularSet(8, 4)
    assert modular_set(F.Mod(8 * s0 + 4, 8), {}) == ModularSet(0, 4)
    assert modular_set(F.FloorDiv(s0, 2), known) == ModularSet(2, 0)
    assert modular_set(s0 / 4, known) == ModularSet(1, 0)
    assert modular_set(s0 / 8, known) is None
    assert modular_set(F.Max(s0, 4 * s1 + 2), known) == ModularSet(2, 0)


def test_a_division_or_remainder_of_a_float_has_no_residue_class():
    """Fuzzer case: Mod(Mod(0.1, 2), -1) is -0.9 in Python, but an operand with no residue class
    made the remainder ANY (an int), so Mod(x, -1) was 0 and Eq(..., 0) was proved."""
    x = int_symbol("x")
    remainder = F.Mod(F.Mod(F.float_number(0.1), 2), x + 1)
    assert modular_set(F.Mod(remainder, -1), {}) is None
    assert modular_set(F.FloorDiv(x, F.float_number(2.5)), {}) is None
    assert evaluate(F.Mod(remainder, -1), {"x": 0}) == 0.1 % 1 % -1 != 0
