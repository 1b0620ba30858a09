"""simplify: equivalent output (checked by z3 and by sampling), reasons, rewrites, contradictions."""

import glob
import itertools
import os
import random
import subprocess
import sys

import pytest
import sympy
import z3
from hypothesis import example, given, settings
from hypothesis import strategies as st

import shapecore.simplifier as simplify_module
from shapecore import (ArgumentError, ConstraintError, FloorDiv, Max, Mod, ParseError, Progress, holds, int_symbol, parse,
                       simplify)
from shapecore.budget import Budget
from shapecore.guard_input import read_guard_set
from shapecore.testing import claims, fact_sets, relations
from shapecore.z3backend import Translator
from tests.corpus import CORPUS

from . import differential, oracle
from .folding_text import claim_texts
from .oracle import formula

s0, s1, s2 = (int_symbol(n) for n in ("s0", "s1", "s2"))


def texts(guards):
    return [str(g) for g in guards]


def z3_equivalent(inputs, outputs, facts=(), ranges=None, rlimit=50_000_000):
    """z3's verdict on "under facts and ranges, the inputs all hold iff the outputs all hold",
    asked guard by guard (each side must imply every guard of the other): ``unsat`` when
    every implication is proved, else the first other answer."""
    translator = Translator(z3.Context())
    ctx = translator.ctx
    parsed = [[parse(g) if isinstance(g, str) else g for g in side] for side in (inputs, outputs)]
    scope = [translator.holds(parse(f) if isinstance(f, str) else f) for f in facts]
    for name, (lo, hi) in (ranges or {}).items():
        var = translator.symbol(name)
        scope += ([var >= lo] if lo is not None else []) + ([var <= hi] if hi is not None else [])
    for premises, conclusions in (parsed, parsed[::-1]):
        for guard in conclusions:
            if guard in premises:
                continue
            solver = z3.Solver(ctx=ctx)
            solver.add(*scope, *(translator.holds(g) for g in premises), z3.Not(translator.holds(guard)))
            solver.add(*translator.axioms)
            answer = Budget(60_000, units=rlimit).check(solver)  # and a backstop: rlimit alone can hang
            if answer != z3.unsat:
                return answer
    return z3.unsat


def sampled_equivalent(inputs, outputs, names, values, facts=(), ranges=None):
    """The first assignment (from ``values`` per name) inside the scope where the sets disagree."""
    inputs = [parse(g) if isinstance(g, str) else g for g in inputs]
    facts = [parse(f) if isinstance(f, str) else f for f in facts]
    for combination in itertools.product(values, repeat=len(names)):
        point = dict(zip(names, combination))
        if any((lo is not None and point[n] < lo) or (hi is not None and point[n] > hi)
               for n, (lo, hi) in (ranges or {}).items()):
            continue
        if all(holds(f, point) for f in facts):
            if all(holds(g, point) for g in inputs) != all(holds(g, point) for g in outputs):
                return point
    return None


# -- examples ------------------------------------------------------------------------------------


def test_issue_example_rewrites_to_a_range():
    result = simplify(["Ne(Mod(1, FloorDiv(s0, 2)), 0)"], facts=["s0 > 2"])
    assert texts(result.guards) == ["s0 >= 4"]
    (rewrite,) = result.rewritten
    assert str(rewrite.guard) == "Ne(Mod(1, (s0//2)), 0)" and str(rewrite.to) == "s0 >= 4"
    assert "fails only for s0 = 3" in rewrite.why
    assert result.ranges == {"s0": (4, None)}


def test_arange_guards_vanish_on_their_range():
    torch_guards = ["s77 >= ((s77//3))", "Ne(s77 - ((s77//3)), 0)", "s77 - ((s77//3)) >= 2", "Ne(s77 - ((s77//3)), 1)"]
    result = simplify(torch_guards, ranges={"s77": (3, 10000)})
    assert result.guards == ()
    assert {d.kind for d in result.dropped} == {"tautology"}
    assert len(result.dropped) == 4
    # without the range they are not all tautologies (n = 1 breaks the last one)
    assert simplify(torch_guards).guards != ()


def test_view8_guards_become_a_range_and_a_divisibility():
    guards = ["Eq(Mod(16*s77, 128), 0)", "Eq(16*s77, 128*((s77//8)))", "Ne(s77, 8)", "Eq(Mod(s77, 8), 0)",
              "128*((s77//8)) >= 2", "Ne((s77//8), 1)"]
    result = simplify(guards, ranges={"s77": (2, None)})
    assert texts(result.guards) == ["s77 >= 16", "Eq(Mod(s77, 8), 0)"]
    fates = {str(f.guard): f for f in result.fates}
    assert fates["Eq(Mod(s77, 8), 0)"].outcome == "kept"
    assert fates["Ne(s77, 8)"].outcome == "dropped" and "s77 >= 16" in fates["Ne(s77, 8)"].detail
    assert result.ranges == {"s77": (16, None)}


def test_alternatives_that_never_hold_are_pruned():
    result = simplify(["(s0 < 2) | (s1 > 5)", "s0 >= 2"])
    assert texts(result.guards) == ["s1 >= 6", "s0 >= 2"]
    assert [(str(r.guard), str(r.to)) for r in result.rewritten] == [("(s1 > 5) | (s0 < 2)", "s1 > 5")]
    # an alternative that may divide by zero stays: where s2 == 0 the whole guard fails
    kept = simplify(["(s0 < 2) | (s1 > 5) | Eq(Mod(s1, s2), 0)", "s0 >= 2"])
    assert sampled_equivalent(["(s0 < 2) | (s1 > 5) | Eq(Mod(s1, s2), 0)", "s0 >= 2"], kept.guards,
                              ("s0", "s1", "s2"), range(-3, 9)) is None


def test_ranges_merge_into_one_guard_per_symbol():
    result = simplify(["s0 >= 2", "s0 > 4", "s0 <= 100", "Ne(s0, 5)", "s0 < 200"])
    assert texts(result.guards) == ["(s0 >= 6) & (s0 <= 100)"]
    assert all(d.kind == "merged" for d in result.dropped)


def test_a_range_guard_given_as_written_is_kept():
    result = simplify(["(s0 >= 2) & (s0 <= 10)", "s0 >= 1"])
    assert texts(result.guards) == ["(s0 >= 2) & (s0 <= 10)"]
    assert [f.outcome for f in result.fates] == ["kept", "kept", "dropped"]


def test_strongest_divisibility_is_kept():
    result = simplify(["Eq(Mod(s0, 2), 0)", "Eq(Mod(s0, 8), 0)", "Eq(Mod(s0, 4), 0)", "Eq(Mod(3*s0, 6), 0)"])
    assert texts(result.guards) == ["Eq(Mod(s0, 8), 0)"]


def test_divisibility_pairs_with_a_symbolic_divisor_are_one_guard():
    result = simplify(["Eq(Mod(s0*s1, s1 - 1), 0)", "Eq(s0*s1, (s1 - 1)*((s0*s1)//(s1 - 1)))"])
    assert len(result.guards) == 1


def test_duplicates_and_tautologies_have_their_reason():
    result = simplify(["s0 >= s1", "s1 <= s0", "s0 + s1 >= 0"], ranges={"s0": (0, None), "s1": (0, None)})
    assert texts(result.guards) == ["s0 >= s1"]
    kinds = {str(d.guard): d.kind for d in result.dropped}
    assert kinds == {"s1 <= s0": "duplicate", "s0 + s1 >= 0": "tautology"}
    assert result.dropped[0].reason == "duplicate of s0 >= s1"


def test_implied_guard_names_what_implies_it():
    result = simplify(["s0 <= s1", "s1 <= s2", "s0 <= s2"])
    assert texts(result.guards) == ["s0 <= s1", "s1 <= s2"]
    (dropped,) = result.dropped
    assert dropped.kind == "implied" and set(texts(dropped.by)) == {"s0 <= s1", "s1 <= s2"}


def test_replacements_stay_and_restate_ranges():
    result = simplify(["Eq(s1, 2*s0)", "s1 >= 10", "s0 >= 1"])
    assert set(texts(result.guards)) == {"Eq(s1, 2*s0)", "s0 >= 5"}
    assert result.ranges == {"s0": (5, None), "s1": (10, None)}


def assert_right_on_box(guards, box, facts=(), ranges=None):
    """simplify against brute force over ``box`` (name -> (lo, hi)), :func:`differential.check_simplify`:
    the same points accepted, every dropped guard implied by what it names, sound ranges."""
    query = differential.SimplifyQuery(tuple(guards), tuple(facts), oracle.Box(tuple((n, *box[n]) for n in sorted(box))),
                                       tuple((n, *ranges[n]) for n in sorted(ranges or {})))
    outcome = differential.check_simplify(query, timeout_ms=2000)
    assert outcome.problem is None, outcome.report()


def test_a_guard_settled_on_what_a_replacement_moves_is_settled_again():
    """Issue 19 C: round 1 settled Eq(Mod(s2, 2), 0) from s2's congruence (its own); the pruned
    disjunction then made s2 := CeilDiv(s0, 16), which moved the congruence into a fact the
    summary guards do not carry, and the guard was dropped as implied by the replacement."""
    guards = ["(Gt(-s2 - 3, s0 + 4)) | (Eq(CeilDiv(s0, 16), s2))", "Eq(Mod(s2, 2), 0)"]
    ranges = {"s0": (0, None), "s2": (2, 8)}
    result = simplify(guards, ranges=ranges)
    assert not all(holds(g, {"s0": 33, "s2": 3}) for g in result.guards)
    assert result.ranges["s2"] == (2, 8)  # the given range of a replaced symbol still holds
    assert_right_on_box(guards, _REPLACED, ranges=ranges)


_REPLACED = {"s0": (-3, 150), "s1": (-3, 3), "s2": (-2, 10)}


@pytest.mark.parametrize("definition", ["CeilDiv(s0, 16)", "FloorDiv(s0, 16)", "Mod(s0, 16)", "ModularIndexing(s0, 4, 8)",
                                        "Max(s0, 3)", "Min(s0, 5)", "2*FloorDiv(s0, 3) + 1", "s0*s0"])
@pytest.mark.parametrize("known, facts, ranges", [
    (["Eq(Mod(s2, 2), 0)"], [], {"s0": (0, None), "s2": (2, 8)}),
    (["Eq(Mod(s2, 2), 0)"], ["s0 >= 0", "s2 >= 2", "s2 <= 8"], {}),
    (["s2 >= 2", "s2 <= 8"], [], {"s0": (0, None)}),
    (["Ne(s2, 3)"], [], {"s0": (0, None), "s2": (2, 8)}),
])
def test_what_was_known_of_a_symbol_outlives_its_replacement(definition, known, facts, ranges):
    """Siblings of issue 19 C: the same replacement made late, of other shapes, with what was
    known of the replaced symbol from guards, facts or ranges."""
    assert_right_on_box([f"(s0 < -1) | Eq({definition}, s2)", *known], _REPLACED, facts, ranges)


@pytest.mark.parametrize("known", ["Eq(Mod(s2, 2), 0)", "s2 >= 2"])
def test_a_replacement_found_when_a_guard_is_learned_again(known):
    """The same without a disjunction: s2*Mod(s1, 2) is s2 only once s1 is known odd, so the
    digest makes s2 := s0 // 16 in round 1, after settling the guards on s2."""
    guards = ["Eq(s2*Mod(s1, 2), FloorDiv(s0, 16))", "Eq(Mod(s1, 2), 1)", known]
    assert_right_on_box(guards, _REPLACED, ranges={"s0": (0, None)})


@pytest.mark.parametrize("guards, facts, ranges", [
    # the divisor's symbol: Mod(7 // (s0 - 2), -1) folds to 0 as written, defined where s0 != 2
    (["Ne(5, ModularIndexing(7, s0 - 2, -1))", "Eq(s0, 1)"], [], {"s0": (0, 4)}),
    # the replacement an implying guard was read with: y >= 5 is CeilDiv(x, 8) >= 5
    (["Eq(CeilDiv(x, 8), y)", "Ne(x, 7)", "y >= 5"], [], {"y": (-1, None)}),
    (["(x % 3) == y", "Not(x % 4 == 0)", "Not(Eq(Mod(y, 4), 0))", "Not(x % 3 == 0)"], ["x >= 2", "x <= 59"], {}),
    # a symbol the context replaces: s2 is s1, which the guards make s0 % 8
    (["(s0 < -2) | Eq(Min(s0, 3), s1)", "Eq(s2, s0 % 8)", "Ne(Mod(s2, 2), 1)"], ["s0 >= 1", "s2 >= 2", "Eq(s1, s2)"],
     {"s1": (-3, 7)}),
    # a single-symbol rewrite holds on the admissible values: Ne(Mod(s2, 4), 0) is Ne(s2, 0) where s2 % 3 == 0
    (["(s0 // s2 % (s0 - s2) >= 2 // s0) | (s0 // 16 == s2)", "Ne(Mod(s2, 4), 0)", "Eq(Mod(s2, 3), 0)"],
     ["s2 >= -3", "s2 <= 9"], {"s0": (-3, 57)}),
    # ... and is undone when its symbol gets a replacement: y <= 0 made Ne(Mod(y, 2), 1) Ne(y, -3) & Ne(y, -1)
    (["(-y > x + 6) | Eq(ModularIndexing(x, 4, 2), y)", "y < 1", "Ne(Mod(y, 2), 1)", "Ne(Min(x, 2), x)"],
     ["x >= 0", "y >= -3"], {}),
])
def test_a_dropped_guard_names_all_that_implies_it(guards, facts, ranges):
    assert simplify(guards, facts=facts, ranges=ranges).dropped
    box = {"s0": (-3, 60), "s1": (-3, 8), "s2": (-3, 10), "x": (-3, 70), "y": (-3, 10)}
    names = set().union(*(oracle.formula(g).symbols for g in [*guards, *facts]))
    assert_right_on_box(guards, {n: box[n] for n in names}, facts, ranges)


def test_a_guard_on_a_symbol_the_context_replaces_keeps_what_it_fixes():
    """Fuzz seed 2026, case 14800: the context replaces s1 := s0, and s1 <= 0 with s0 >= 0 fixes
    s0 := 0, a replacement of a symbol no guard names as written; it was left out of the summary
    guards, and s1 <= 0 was dropped as implied by them (nothing kept, s0 = 1 accepted)."""
    result = simplify(["s1 <= 0"], facts=["Eq(s0, s1)"], ranges={"s0": (0, 12)})
    assert texts(result.guards) == ["Eq(s0, 0)"]
    assert_right_on_box(["s1 <= 0"], {"s0": (-3, 14), "s1": (-3, 14)}, ["Eq(s0, s1)"], {"s0": (0, 12), "s1": (-3, 3)})


def test_ranges_are_tightened_through_relations():
    result = simplify(["s0 <= s1", "s1 <= 10", "s1 >= s2", "s2 >= 3", "Ne(s0, s2)"])
    assert result.ranges == {"s0": (None, 10), "s1": (3, 10), "s2": (3, 10)}
    assert len(result.guards) == 5  # all needed, none implied


def test_contradiction_is_a_minimal_unsatisfiable_subset():
    result = simplify(["s2 >= 0", "s0 >= 5", "s1 >= 1", "s0 <= 3"])
    assert texts(result.contradiction) == ["s0 >= 5", "s0 <= 3"]
    assert result.guards == result.contradiction
    cyclic = simplify(["s0 < s1", "s1 < s2", "s2 < s0", "s0 >= 0"])
    assert set(texts(cyclic.contradiction)) == {"s0 < s1", "s1 < s2", "s2 < s0"}


def test_a_zero_divisor_means_the_guard_never_holds():
    result = simplify(["Eq(Mod(s0, s1), 0)"], facts=["Eq(s1, 0)"])
    assert texts(result.contradiction) == ["Eq(Mod(s0, s1), 0)"]
    # the divisions cancel in the difference, but the guard still fails where s1 == 0
    guards = ["Eq((s0//s1) + s2, (s0//s1))"]
    result = simplify(guards)
    assert sampled_equivalent(guards, result.guards, ("s0", "s1", "s2"), range(-3, 4)) is None


def test_a_division_folded_away_is_not_dropped():
    result = simplify(["Or(Ne(2*x, 5), x//y > 0)", "y >= 0"])
    assert [y for y in range(-3, 4) if all(holds(g, {"x": 1, "y": y}) for g in result.guards)] == [1, 2, 3]
    # under s2 := s1 the product vanishes, but y - z is still a divisor of the guard as written
    guards = ["Or(s0 < 2, (x//(y - z))*(s1 - s2) + s3 > 0)", "Eq(s2, s1)", "s0 >= 2"]
    result = simplify(guards)
    point = {"s0": 3, "s1": 1, "s2": 1, "s3": 1, "x": 1, "y": 2, "z": 2}
    assert not all(holds(g, point) for g in result.guards)
    names = ("s0", "s1", "s2", "s3", "y", "z")
    for values in itertools.product(range(-2, 4), repeat=len(names)):
        point = {"x": 1, **dict(zip(names, values))}
        assert all(holds(parse(g), point) for g in guards) == all(holds(g, point) for g in result.guards), point


@pytest.mark.parametrize("guards", [
    ["x == 0 or 10 // x > 2"],
    ["x != 0 and 10 // x > 2", "x >= -3"],  # and: its parts are conjuncts
    ["(s0 > (-8))", "(((s1*3) != s1) or (3 < ((s0*(-5)) // s0)))"],  # bench/fuzz.py case 1563
    ["not (y == 0 or x // y > 1)", "x == 0 or y // x > 0"],
    ["Eq(y, 0)", "y == 0 or x // y > 0"],  # a replacement that zeroes a divisor the or never reaches
])
def test_pythons_and_or_keep_the_guards_equivalent(guards):
    box = {"x": (-4, 4), "y": (-3, 3), "s0": (-7, 3), "s1": (2, 9)}
    names = sorted(set().union(*(oracle.formula(g).symbols for g in guards)))
    result = simplify(guards, ranges={n: box[n] for n in names})
    for values in itertools.product(*(range(box[n][0], box[n][1] + 1) for n in names)):
        point = dict(zip(names, values))
        expected = all(oracle.holds(formula(g), point) for g in guards)
        assert all(holds(g, point) for g in result.guards) == expected, (point, result.guards)


def test_contradictory_facts_are_an_error():
    with pytest.raises(ConstraintError, match="contradict"):
        simplify(["s0 >= 1"], facts=["s0 > 3"], ranges={"s0": (0, 2)})


def test_every_input_conjunct_has_a_fate_in_order():
    guards = ["(s0 >= 1) & (s1 >= 1)", "s0 >= 1", "Eq(Mod(s0, 4), 0)"]
    result = simplify(guards)
    assert [(str(f.guard), f.source) for f in result.fates] == [
        ("s0 >= 1", 0), ("s1 >= 1", 0), ("s0 >= 1", 1), ("Eq(Mod(s0, 4), 0)", 2)]
    assert all(f.detail for f in result.fates)
    document = result.to_json()
    assert list(document) == ["guards", "dropped", "rewritten", "contradiction", "ranges", "backstop_fired"]
    assert all(set(d) == {"guard", "reason"} for d in document["dropped"])


def test_fold_remainders_keeps_value_and_definedness():
    a, d = s0 * s1 + 2, s1 - 3
    claims_ = [sympy.Eq(a, d * FloorDiv(a, d)), sympy.Ge(2 * a + 1, 2 * d * FloorDiv(a, d)),
               sympy.Ne(s2 - d * FloorDiv(s2, d), 1)]
    for claim in claims_:
        folded = simplify_module._fold_remainders(claim)
        assert Mod(*FloorDiv(a if claim is not claims_[2] else s2, d).args) in folded.atoms(Mod)
        for v0, v1, v2 in itertools.product(range(-4, 5), repeat=3):
            point = {"s0": v0, "s1": v1, "s2": v2}
            assert holds(claim, point) == holds(folded, point)


# -- properties ------------------------------------------------------------------------------------

NAMES = ("s0", "s1")
guard_sets = st.lists(st.one_of(fact_sets(NAMES, max_size=3), st.lists(claims(NAMES, max_leaves=4), max_size=2)),
                      max_size=3).map(lambda parts: [g for part in parts for g in part if g is not sympy.true])
scopes = st.fixed_dictionaries({n: st.tuples(st.one_of(st.none(), st.integers(-4, 4)),
                                             st.one_of(st.none(), st.integers(5, 24))) for n in NAMES})


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(guard_sets, scopes, st.lists(relations(NAMES, max_leaves=3), max_size=1))
def test_output_accepts_exactly_what_input_accepts(guards, ranges, facts):
    facts = [f for f in facts if f not in (sympy.true, sympy.false)]
    try:
        result = simplify(guards, facts=facts, ranges=ranges, timeout_ms=100)
    except ConstraintError:
        return
    assert sampled_equivalent(guards, result.guards, NAMES, range(-9, 28), facts, ranges) is None
    assert z3_equivalent(guards, result.guards, facts, ranges, rlimit=2_000_000) != z3.sat
    if result.contradiction is None:
        assert len(result.guards) <= len(result.fates)


@settings(max_examples=max(10, settings.default.max_examples // 3))
@given(st.lists(st.one_of(fact_sets(("s0",), max_size=4), st.lists(claims(("s0",), max_leaves=5), max_size=2)),
                min_size=1, max_size=3).map(lambda parts: [g for part in parts for g in part if g is not sympy.true]),
       st.tuples(st.integers(-20, 3), st.one_of(st.none(), st.integers(4, 300))))
def test_single_symbol_rewrites_are_exact(guards, scope):
    ranges = {"s0": scope}
    result = simplify(guards, ranges=ranges, timeout_ms=100)
    assert sampled_equivalent(guards, result.guards, ("s0",), range(-25, 340), ranges=ranges) is None


def test_corpus_results_are_equivalent_and_never_larger():
    cases = sorted(glob.glob(os.path.join(CORPUS, "*.json")))
    assert len(cases) >= 20
    for path in cases:
        with open(path) as handle:
            guard_set = read_guard_set(handle.read(), path)
        guards = [g.expr for g in guard_set.guards if g.kind != "runtime_assert"]
        result = simplify(guards)
        assert result.contradiction is None, path
        assert len(result.guards) <= len(guards), path
        assert z3_equivalent(guards, result.guards) == z3.unsat, path
        assert all(holds(g, guard_set.hints) for g in result.guards if g.free_symbols <= {int_symbol(h) for h in guard_set.hints})


def torch_like_guards(rng, names):
    """Guards of the shapes torch records, true at the hints (torch records what held)."""
    xs = [int_symbol(n) for n in names]
    hints = {n: rng.choice([1, 2, 8]) * rng.randint(2, 40) for n in names}
    templates = [
        lambda x, y: x >= rng.randint(0, 6), lambda x, y: sympy.Ne(x, rng.randint(0, 9)),
        lambda x, y: sympy.Eq(Mod(x, rng.choice([2, 4, 8])), 0), lambda x, y: x <= rng.randint(50, 400),
        lambda x, y: sympy.Ne(FloorDiv(x, 8), 1), lambda x, y: x - FloorDiv(x, 3) >= 2,
        lambda x, y: x <= y, lambda x, y: sympy.Ne(x, y), lambda x, y: x * y >= 4,
        lambda x, y: sympy.Eq(Mod(x * y, 8), 0), lambda x, y: x + y <= 3 * Max(x, y),
    ]
    guards = []
    while len(guards) < 80:
        x, y = rng.sample(xs, 2)
        g = rng.choice(templates)(x, y)
        if g not in (sympy.true, sympy.false):
            guards.append(g if holds(g, hints) else sympy.Not(g))
    return guards + rng.sample(guards, 30), hints


def test_larger_torch_like_sets_stay_equivalent():
    rng = random.Random(7)
    names = [f"s{i}" for i in range(6)]
    guards, hints = torch_like_guards(rng, names)
    ranges = {n: (2, None) for n in names}
    result = simplify(guards, ranges=ranges)
    assert result.contradiction is None and len(result.guards) < len(guards) // 2
    assert all(holds(g, hints) for g in result.guards)
    for _ in range(3000):  # points near the hints, where guards flip
        point = {n: max(2, hints[n] + rng.choice([0, 0, -1, 1, -8, 8, -hints[n] // 2])) for n in names}
        assert all(holds(g, point) for g in guards) == all(holds(g, point) for g in result.guards), point


def test_same_input_same_output_whatever_the_hash_seed(tmp_path):
    """Sets of symbols iterate in a different order each run; the result must not follow it.

    The run is bound by z3's units (which run out where the order matters most), at a rate
    low enough that the wall-clock backstop stays far away even on a very busy machine."""
    rng = random.Random(3)
    guards, _ = torch_like_guards(rng, [f"s{i}" for i in range(6)])
    path = tmp_path / "guards.txt"
    path.write_text("".join(f"{g}\n" for g in guards))
    cli = "import sys, shapecore.budget as b; b.RLIMIT_PER_MS = 100; from shapecore.cli import main; sys.exit(main())"
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([sys.executable, "-c", cli, "simplify", str(path), "--explain"],
                                capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_arguments_that_cannot_work_are_refused():
    with pytest.raises(ArgumentError, match=r"guards must be a list of guards .*guards=\['s0 > 2'\]"):
        simplify("s0 > 2")
    with pytest.raises(ArgumentError, match="facts must be a list of guards"):
        simplify(["s0 > 2"], facts="s0 > 3")
    with pytest.raises(ArgumentError, match=r"ranges\['s0'\] upper bound must be an int or None, got 9.5"):
        simplify(["s0 > 2"], ranges={"s0": (0, 9.5)})
    with pytest.raises(ArgumentError, match="timeout_ms must be a positive int"):
        simplify(["s0 > 2"], timeout_ms=-1)


def test_integers_beyond_a_floats_range_are_exact():
    big = 10**400
    kept = simplify([f"s0 >= {big}", f"s0 >= {big + 1}", f"Ne(s0, {big + 2})"]).guards
    assert set(kept) == {parse(f"s0 >= {big + 1}"), parse(f"Ne(s0, {big + 2})")}


@settings(max_examples=max(10, settings.default.max_examples // 3))
@given(st.lists(st.one_of(claim_texts(("x", "y"), max_leaves=3), st.sampled_from(["Eq(x, y)", "Eq(x, y + 1)", "x >= 1"])),
                min_size=1, max_size=3))
def test_guard_text_simplifies_to_what_python_accepts(guards):
    """Text as written (sympy folds while parsing, the digest substitutes): Python is the oracle."""
    try:
        result = simplify(guards, timeout_ms=100)
    except ParseError:  # a divisor that is zero as written
        return
    for x, y in itertools.product(range(-6, 9), repeat=2):
        point = {"x": x, "y": y}
        assert all(oracle.holds(formula(g), point) for g in guards) == all(holds(g, point) for g in result.guards), point


def test_a_float_compared_with_a_big_int_is_not_dropped_as_a_tautology():
    x = 62999999999999999997  # x + 0.5 is 63000000000000000000.0 in floats: the guard is False
    result = simplify(["x + 0.5 <= 62999999999999999999"], ranges={"x": (x, x)})
    assert result.contradiction is not None and result.guards


# -- long inputs: repeats and a time limit -----------------------------------------------------------


def test_a_repeated_guard_is_a_duplicate_of_its_first_occurrence():
    guards = ["(s0 >= 1) & (s1 >= 1)", "s0 >= 1", "Eq(Mod(s0, 4), 0)"]
    once = simplify(guards)
    result = simplify(guards + [guards[2], guards[0], guards[1]])
    assert result.guards == once.guards and result.ranges == once.ranges
    fates = [(str(f.guard), f.source, f.outcome, f.detail) for f in result.fates]
    assert fates[:4] == [(str(f.guard), f.source, f.outcome, f.detail) for f in once.fates]
    assert fates[4:] == [
        ("Eq(Mod(s0, 4), 0)", 3, "dropped", "duplicate of Eq(Mod(s0, 4), 0)"),
        ("s0 >= 1", 4, "dropped", "duplicate of s0 >= 1"), ("s1 >= 1", 4, "dropped", "duplicate of s1 >= 1"),
        ("s0 >= 1", 5, "dropped", "duplicate of s0 >= 1"),
    ]
    assert [d.guard for d in result.dropped] == [f.guard for f in result.fates if f.outcome == "dropped"]
    contradiction = simplify(["s0 >= 5", "s0 <= 3", "s0 >= 5"])
    assert texts(contradiction.guards) == ["s0 >= 5", "s0 <= 3"]
    assert contradiction.dropped[0].reason == "the guards can never hold together (see the contradiction)"


def ticking():
    """A clock that reads 0, 1, 2, ... seconds: each step of the work takes one."""
    return itertools.count().__next__


def test_a_time_limit_at_the_start_keeps_every_distinct_guard():
    guards = ["Eq(Mod(16*s77, 128), 0)", "Ne(s77, 8)", "Eq(Mod(s77, 8), 0)", "s77 >= 2", "Ne(s77, 8)"]
    progress = Progress(time_limit_s=1, clock=ticking())
    result = simplify(guards, progress=progress)
    assert progress.timed_out and set(texts(result.guards)) == set(guards)
    assert simplify(guards).guards != result.guards  # given the time, it drops some


def test_stopped_at_any_step_the_answer_is_equivalent():
    guards = ["s0 <= s1", "s1 <= s2", "s0 <= s2", "Ne(s0, s2)", "s0*s1 >= 4", "Eq(Mod(s0, 4), 0)", "s0 >= 1", "s1 <= 64"]
    clock = itertools.count()
    simplify(guards, progress=Progress(clock=clock.__next__))
    steps = next(clock)  # the clock is read once per step, and once at the start
    stages = set()
    for limit in range(steps):
        progress = Progress(time_limit_s=limit, clock=ticking())
        result = simplify(guards, progress=progress)
        assert progress.timed_out
        stages.add(progress.stage.split()[0])
        assert sampled_equivalent(guards, result.guards, ("s0", "s1", "s2"), range(-2, 70, 5)) is None, limit
    assert stages == {"normalizing", "digesting", "deciding", "z3"}


_ZERO = "ModularIndexing(s0, 1, -1)"  # s0 % -1: 0 wherever defined, so a divisor that folds to 0


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(guard_sets, scopes, st.integers(0, 25))
@example([parse(f"Eq(s0, CeilDiv(s0, {_ZERO})**2)")], {"s0": (None, None)}, 0)  # the early stop raised
@example([parse(f"Eq(s0, Mod(s0, {_ZERO})**2)")], {"s0": (None, None)}, 1)  # ZeroDivisionError (torch 2.11's run)
@example([parse(f"Eq(s0, FloorDiv(s0, {_ZERO})**2)")], {"s0": (None, None)}, 2)
def test_however_far_a_run_got_its_answer_is_equivalent(guards, ranges, steps):
    """Stopped by its time limit after any number of steps, the run's answer accepts exactly what the input does."""
    progress = Progress(time_limit_s=steps, clock=ticking())
    try:
        result = simplify(guards, ranges=ranges, timeout_ms=100, progress=progress)
    except ConstraintError:
        return
    assert sampled_equivalent(guards, result.guards, NAMES, range(-9, 28), ranges=ranges) is None


def test_a_result_never_has_more_guards_than_the_input():
    # s0 = 6*s1 <= 5 with s1 >= 0 means s0 = s1 = 0: two summary guards for one input guard
    result = simplify(["Eq(s0, 6*s1)"], ranges={"s0": (None, 5), "s1": (0, None)})
    assert [str(g) for g in result.guards] == ["Eq(s0, 6*s1)"] and result.fates[0].outcome == "kept"
