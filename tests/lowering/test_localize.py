"""Localization: multipliers from proofs, local extents as integer polynomials, exact values."""

import sympy
from hypothesis import assume, given
from hypothesis import strategies as st

from lowering.localize import LocalSymbol, Localizer, choose_multipliers, divisors, make_symbols
from shapecore import FloorDiv, ShapeEnv, evaluate, int_symbol, parse
from shapecore.knowledge import Knowledge


def _env(*facts, hint=24):
    env = ShapeEnv()
    env.create_symbol(hint, name="s0", source="x.size()[0]")
    env.create_symbol(16, name="s1", source="x.size()[1]")
    for fact in facts:
        env.add_fact(fact)
    return env


def test_the_multiplier_is_the_largest_mesh_divisor_shapecore_proves():
    assert choose_multipliers(_env(), ["s0"], 4) == {"s0": 1}
    assert choose_multipliers(_env("Eq(Mod(s0, 2), 0)"), ["s0"], 4) == {"s0": 2}
    assert choose_multipliers(_env("Eq(Mod(s0, 8), 0)"), ["s0"], 4) == {"s0": 4}
    # 6 | s0 gives 2 | s0 but not 4 | s0 (s0 = 6 is a counterexample).
    assert choose_multipliers(_env("Eq(Mod(s0, 6), 0)"), ["s0", "s1"], 4) == {"s0": 2, "s1": 1}


def test_local_extents_are_integer_polynomials_without_floordiv():
    loc = Localizer(make_symbols({"s0": 4, "s1": 1}, {"s0": 24, "s1": 16}))
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    assert str(loc.extent(s0, 2)) == "2*b0"
    assert str(loc.extent(s0 * s1, 4)) == "b0*b1"
    assert str(loc.extent(16 * s0, 8)) == "8*b0"
    assert loc.extent(sympy.Integer(64), 4) == 16
    assert not loc.inexact
    assert not any(isinstance(a, FloorDiv) for a in sympy.preorder_traversal(loc.extent(s0 * s1, 4)))


def test_an_extent_the_proofs_do_not_cover_falls_back_to_floordiv_and_is_reported():
    loc = Localizer(make_symbols({"s0": 1, "s1": 1}, {"s0": 24, "s1": 16}))
    extent = loc.extent(parse("s0*s1"), 4)
    assert isinstance(extent, FloorDiv)
    assert "s0*s1" in next(iter(loc.inexact))


@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 50), st.integers(1, 6), st.sampled_from([1, 2, 4, 8]))
def test_extents_evaluate_to_the_global_size_over_the_pieces(multiplier, b, c, pieces):
    # global size c*s0 with s0 = multiplier*b, split into pieces that divide it
    size = parse(f"{c}*s0")
    loc = Localizer([LocalSymbol("b0", "s0", multiplier, 2)])
    s0 = multiplier * b
    assume((c * s0) % pieces == 0)
    extent = loc.extent(size, pieces)
    assert evaluate(extent, {"b0": b}) == c * s0 // pieces
    assert loc.local_values({"s0": s0}) == {"b0": b}


def test_local_symbols_are_numbered_in_symbol_order():
    symbols = make_symbols({"s10": 2, "s2": 1}, {"s10": 8, "s2": 3})
    assert [(s.name, s.of, s.multiplier, s.hint) for s in symbols] == [("b0", "s2", 1, 3), ("b1", "s10", 2, 4)]
    assert divisors(12) == [12, 6, 4, 3, 2, 1]


def test_local_symbols_follow_the_order_the_knowledge_replaces_by():
    # one creation order (shapecore.creation_order): u0 precedes s1, and the knowledge replaces s1
    knowledge = Knowledge()
    knowledge.add(sympy.Eq(int_symbol("s1"), int_symbol("u0")))
    assert list(knowledge.replacements) == [int_symbol("s1")]
    symbols = make_symbols({"s1": 1, "u0": 1}, {})
    assert [s.of for s in symbols] == ["u0", "s1"]
