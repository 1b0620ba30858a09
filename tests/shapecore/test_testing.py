"""testing: the public strategies draw what their docstrings promise."""

import sympy
from hypothesis import given, settings
from sympy.logic.boolalg import Boolean

from shapecore import functions as F
from shapecore.evaluation import holds
from shapecore.rewrite import symbols_of
from shapecore.testing import assignments, claims, fact_sets, int_exprs, relations, shape_envs

NAMES = ("a", "b")


def _divisors(expr):
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (F.FloorDiv, F.Mod, F.CeilDiv)):
            yield node.args[1]


@given(expr=int_exprs(NAMES, variable_divisors=False))
def test_int_exprs_use_only_the_given_names_and_constant_divisors(expr):
    assert {s.name for s in symbols_of(expr)} <= set(NAMES)
    assert all(d.is_Integer and d != 0 for d in _divisors(expr))


@given(claim=claims(NAMES), relation=relations(NAMES))
def test_claims_and_relations_are_boolean_over_the_names(claim, relation):
    assert isinstance(claim, Boolean)
    assert relation.is_Relational or relation in (sympy.true, sympy.false)
    assert {s.name for s in symbols_of(claim) | symbols_of(relation)} <= set(NAMES)


@given(facts=fact_sets(NAMES, max_size=3))
def test_fact_sets_hold_no_trivially_true_fact(facts):
    assert len(facts) <= 3 and sympy.true not in facts


@given(values=assignments(NAMES, lo=-3, hi=5))
def test_assignments_bind_every_name_in_range(values):
    assert set(values) == set(NAMES) and all(-3 <= v <= 5 for v in values.values())


@settings(max_examples=30, deadline=None)
@given(env=shape_envs(NAMES))
def test_shape_envs_have_backed_symbols_whose_hints_satisfy_every_fact(env):
    assert set(env.hints) == set(NAMES) and all(2 <= v <= 64 for v in env.hints.values())
    assert all(holds(f, env.hints) for f in env.facts)
