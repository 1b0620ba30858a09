"""Knowledge: checkpoints roll the digest back exactly, nested or not."""

import copy

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from shapecore import Reasoner, parse
from shapecore.knowledge import Inequality, Knowledge
from shapecore.testing import fact_sets

NAMES = ("s0", "s1", "s2")


def state(knowledge: Knowledge) -> dict:
    """Everything a Knowledge knows (not its version, journal or open checkpoints), copied."""
    skip = {"version", "_journal", "_open"}
    return copy.deepcopy({k: v for k, v in vars(knowledge).items() if k not in skip})


@given(before=fact_sets(NAMES, max_size=4), during=fact_sets(NAMES, max_size=4), nested=fact_sets(NAMES, max_size=2))
def test_rollback_restores_the_state_exactly(before, during, nested):
    knowledge = Knowledge()
    for fact in before:
        knowledge.add(fact)
    start, version = state(knowledge), knowledge.version
    outer = knowledge.checkpoint()
    for fact in during:
        knowledge.add(fact)
    middle = state(knowledge)
    inner = knowledge.checkpoint()
    for fact in nested:
        knowledge.add(fact)
    knowledge.rollback(inner)
    assert state(knowledge) == middle
    knowledge.rollback(outer)
    assert state(knowledge) == start
    assert knowledge.version > version, "a version is never reused: caches keyed by it stay valid"
    assert knowledge._journal == []


def test_commit_keeps_the_facts_and_closes_the_checkpoint():
    knowledge = Knowledge()
    checkpoint = knowledge.checkpoint()
    knowledge.add(parse("Eq(s1, 8*s0)"))
    knowledge.commit(checkpoint)
    assert knowledge.replacements == {sympy.Symbol("s1", integer=True): 8 * sympy.Symbol("s0", integer=True)}
    with pytest.raises(ValueError, match="not open"):
        knowledge.rollback(checkpoint)


def test_a_reasoner_forgets_a_rolled_back_fact_even_where_z3_saw_it():
    r = Reasoner()
    r.add_fact("u0*u1 > u1")
    checkpoint = r.checkpoint()
    r.add_fact("u1 >= 1")
    assert r.prove("u0 >= 2").proved  # z3 needs both facts
    r.rollback(checkpoint)
    assert r.prove("u0 >= 2").refuted
    assert r.prove("u0*u1 > u1").proved


@given(st.lists(st.sampled_from(["s0 >= 3", "s0 <= 2", "Eq(Mod(s0, 4), 1)", "Eq(s1, 2*s0)", "Ne(s0, 5)"]), max_size=5))
def test_a_transaction_that_raises_leaves_the_reasoner_as_it_was(facts):
    r = Reasoner()
    r.add_fact("s0 >= 0")
    before = state(r.knowledge)
    with pytest.raises(RuntimeError):
        with r.transaction():
            for fact in facts:
                r.add_fact(fact)
            raise RuntimeError("rejected")
    assert state(r.knowledge) == before
    assert r.prove("s0 >= 3").refuted


s0, s1, s2 = (sympy.Symbol(n, integer=True) for n in NAMES)


@pytest.mark.parametrize(
    "fact, inequalities",
    [
        ("s0 < s1", [Inequality(((s0, 1), (s1, -1)), -1)]),
        ("s0 >= s1 + 2", [Inequality(((s0, -1), (s1, 1)), -2)]),
        ("2*s0 - 4*s1 <= 3", [Inequality(((s0, 1), (s1, -2)), 1)]),  # divided by the gcd, rounding down
        ("s0/2 + s1/3 > s2", [Inequality(((s0, -3), (s1, -2), (s2, 6)), -1)]),  # scaled to integers
        ("Eq(2*s0, 3*s1)", [Inequality(((s0, 2), (s1, -3)), 0), Inequality(((s0, -2), (s1, 3)), 0)]),
        ("Eq(s0, s1 + 1)", []),  # a replacement instead
        ("Ne(s0, s1)", []),
        ("s0*s1 < 4", []),
        ("s0 < 4", []),  # a range instead
    ],
)
def test_linear_facts_over_several_symbols_become_inequalities(fact, inequalities):
    knowledge = Knowledge()
    knowledge.add(parse(fact))
    assert sorted(knowledge.inequalities, key=str) == sorted(inequalities, key=str)


_RELATIONS = [sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Ne]


def digest(knowledge: Knowledge) -> dict:
    """The state but the facts as given, and the pending ones up to a constant factor (``2*x >= 0``)."""
    found = {k: v for k, v in state(knowledge).items() if k != "facts"}
    found["_pending"] = [(type(f), sympy.primitive(f.lhs - f.rhs)[1] if f.is_Relational else f, sources)
                         for f, sources in found["_pending"]]
    return found


@given(before=fact_sets(NAMES, max_size=3), relation=st.sampled_from(_RELATIONS), name=st.sampled_from(NAMES),
       value=st.integers(-6, 6), after=fact_sets(NAMES, max_size=2))
def test_a_bound_on_a_symbol_is_digested_as_the_general_path_does(before, relation, name, value, after):
    """``x >= c`` is read at once; ``2*x >= 2*c`` goes through simplifying and solving ``lhs - rhs``."""
    x = sympy.Symbol(name, integer=True)
    direct, general = Knowledge(), Knowledge()
    for knowledge, bound in ((direct, relation(x, value)), (general, relation(2 * x, 2 * value, evaluate=False))):
        for fact in (*before, bound, *after):
            knowledge.add(fact)
    assert digest(direct) == digest(general)
