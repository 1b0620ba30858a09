"""search: every assignment it returns is checked; at a counterexample given as hints it finds one."""

import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore.evaluation import evaluate, holds
from shapecore.rewrite import symbols_of
from shapecore.search import bind_all, find_counterexample, find_model, satisfies
from shapecore.testing import assignments, claims, fact_sets

from .digests import knowledge_of

NAMES = ("s0", "s1", "s2")
SMALL = {"max_leaves": 3, "constants": (-8, 8), "divisors": (-4, 8)}
x, y = F.int_symbol("x"), F.int_symbol("y")


@settings(max_examples=60, deadline=None)
@given(facts=fact_sets(NAMES, max_size=3, **SMALL), claim=claims(NAMES, **SMALL), hints=assignments(NAMES),
       linked=st.sets(st.sampled_from(NAMES)))
def test_a_returned_point_satisfies_the_facts_and_refutes_the_claim(facts, claim, hints, linked):
    point = find_counterexample(claim, knowledge_of(facts), hints, budget=64, linked=map(F.int_symbol, linked))
    if point is not None:
        assert satisfies(facts, point), point
        assert not holds(claim, point), point


@settings(max_examples=60, deadline=None)
@given(facts=fact_sets(NAMES, max_size=3, **SMALL), claim=claims(NAMES, **SMALL), hints=assignments(NAMES))
def test_hints_at_a_counterexample_are_found(facts, claim, hints):
    facts = [f for f in facts if holds(f, hints)]
    if holds(claim, hints):
        claim = sympy.Not(claim)
    assume(not holds(claim, hints))  # rare: the claim divides by zero at the hints
    assert find_counterexample(claim, knowledge_of(facts), hints, budget=1) is not None


def test_no_point_is_returned_for_a_claim_the_facts_imply():
    knowledge = knowledge_of([sympy.Eq(F.Mod(x, 8), 0), sympy.Ge(x, 8)])
    assert find_counterexample(sympy.Eq(F.Mod(x, 4), 0), knowledge) is None
    assert find_counterexample(sympy.Gt(x, 7), knowledge) is None


def test_candidates_respect_range_and_residue():
    knowledge = knowledge_of([sympy.Eq(F.Mod(x, 8), 3), sympy.Ge(x, 100), sympy.Le(x, 200)])
    point = find_counterexample(sympy.Ne(x, 107), knowledge)
    assert point == {"x": 107}


def test_linked_symbols_vary_so_a_chain_of_facts_can_hold():
    s0, s1, s2 = (F.int_symbol(n) for n in NAMES)
    facts = [sympy.Lt(s0, s1), sympy.Lt(s1, s2), *(sympy.Ge(s, 2) for s in (s0, s1, s2))]
    claim = sympy.Le(s0 + 3, s2)  # false only at s0 + 2 == s2, which needs s1 == s0 + 1
    assert find_counterexample(claim, knowledge_of(facts), budget=48) is None  # s1 stays at 2
    point = find_counterexample(claim, knowledge_of(facts), budget=48, linked=[s1])
    assert point == {"s0": 2, "s1": 3, "s2": 4}
    assert satisfies(facts, point) and not holds(claim, point)


def test_linked_symbols_vary_after_the_claims_own_combinations():
    s0, s1, s2 = (F.int_symbol(n) for n in NAMES)
    knowledge = knowledge_of([sympy.Le(s0, s1), sympy.Ge(s0, 0), sympy.Ge(s1, 0)])
    claim = sympy.Ne(s0, 0)
    assert find_counterexample(claim, knowledge, linked=[s1]) == find_counterexample(claim, knowledge)


def test_satisfies_is_false_where_a_fact_divides_by_zero():
    fact = sympy.Ge(F.FloorDiv(x, y), 0)
    assert satisfies([fact], {"x": 1, "y": 1})
    assert not satisfies([fact], {"x": 1, "y": 0})


@settings(max_examples=40, deadline=None)
@given(facts=fact_sets(NAMES, max_size=3, **SMALL), given_values=st.dictionaries(st.sampled_from(NAMES), st.integers(-5, 5)))
def test_bind_all_binds_every_symbol_and_keeps_the_given_values(facts, given_values):
    knowledge = knowledge_of(facts)
    assume(knowledge.contradiction is None)  # facts that cannot hold together leave no range to bind in
    symbols = knowledge.symbols | {F.int_symbol(n) for n in NAMES}
    bound = bind_all(given_values, symbols, knowledge)
    assert bound.items() >= given_values.items()
    for symbol in symbols:
        replacement = knowledge.replacements.get(symbol)
        if symbol.name in given_values:
            continue
        if replacement is None:
            assert bound[symbol.name] in knowledge.range_of(symbol), symbol
        elif symbol.name in bound and all(s.name in bound for s in symbols_of(replacement)):
            try:
                assert bound[symbol.name] == evaluate(replacement, bound)
            except ArithmeticError:
                pass


@settings(max_examples=60, deadline=None)
@given(facts=fact_sets(NAMES, max_size=3, **SMALL), extra=fact_sets(NAMES, max_size=2, **SMALL),
       start=assignments(NAMES), vary=st.sets(st.sampled_from(NAMES)), pinned=st.sets(st.sampled_from(NAMES)))
def test_find_model_returns_a_point_satisfying_every_fact_with_the_pinned_values(facts, extra, start, vary, pinned):
    facts = [f for f in facts if holds(f, start)]  # start satisfies every fact off the varied symbols
    extra = [f for f in extra if symbols_of(f) or holds(f, start)]
    vary = {F.int_symbol(n) for n in vary} | {s for f in extra for s in symbols_of(f)}
    knowledge = knowledge_of(facts + extra)
    point = find_model(knowledge, start, vary, {n: start[n] for n in pinned})
    if point is not None:
        assert satisfies(knowledge.facts, point), point
        assert all(point[n] == start[n] for n in pinned), point


def test_find_model_moves_the_varied_symbols_only():
    u = F.int_symbol("u")
    knowledge = knowledge_of([sympy.Ge(u, 0), sympy.Le(u, 14), sympy.Le(x, u)])  # x <= u: u = 0 fails at x = 3
    point = find_model(knowledge, {"x": 3, "u": 0}, [u], {"x": 3})
    assert point is not None and point["x"] == 3 and 3 <= point["u"] <= 14
    assert find_model(knowledge, {"x": 30, "u": 0}, [u], {"x": 30}) is None
    knowledge = knowledge_of([sympy.Ge(u, 0), sympy.Eq(x, 2 * u + 1)])  # x := 2*u + 1 keeps x = 27 at u = 13 only
    assert find_model(knowledge, {"x": 27, "u": 0}, [u], {"x": 27}) is None
    assert find_model(knowledge, {"x": 27, "u": 0}, [u], {}) is not None
