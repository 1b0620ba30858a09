"""decide: the cheap layers' verdicts agree with exact evaluation wherever the facts hold."""

import itertools

import pytest
import sympy
from hypothesis import given, settings

from shapecore import functions as F
from shapecore.decide import LAYERS, CheapLayers
from shapecore.differences import DifferenceBounds
from shapecore.evaluation import evaluate, holds
from shapecore.testing import claims, fact_sets

from .digests import knowledge_of

NAMES = ("s0", "s1")
BOX = [dict(zip(NAMES, point)) for point in itertools.product(range(-12, 41), repeat=len(NAMES))]
SMALL = {"max_leaves": 3, "constants": (-8, 8), "divisors": (-4, 8)}
x, y = F.int_symbol("x"), F.int_symbol("y")


@pytest.mark.parametrize("rewrite, paths", [(True, False), (False, False), (False, True)])
@settings(max_examples=40, deadline=None)
@given(facts=fact_sets(NAMES, max_size=3, **SMALL), claim=claims(NAMES, **SMALL))
def test_a_verdict_is_the_claims_value_at_every_point_where_the_facts_hold(rewrite, paths, facts, claim):
    knowledge = knowledge_of(facts)
    differences = DifferenceBounds(knowledge) if paths else None
    verdict = CheapLayers(knowledge, rewrite=rewrite, differences=differences).decide(claim)
    if verdict is None:
        return
    for point in BOX:
        if all(holds(f, point) for f in facts):
            try:
                value = evaluate(claim, point)
            except ZeroDivisionError:  # decide speaks of values, not of definedness
                continue
            assert value == verdict, point


@pytest.mark.parametrize(
    "facts, claim, verdict, layer",
    [
        ([sympy.Ge(x, 10)], sympy.Gt(x, 3), True, "ranges"),
        ([sympy.Ge(x, 10)], sympy.Lt(x, 3), False, "ranges"),
        ([sympy.Eq(F.Mod(x, 8), 0)], sympy.Eq(F.Mod(x, 4), 0), True, "modular"),
        ([sympy.Eq(F.Mod(x, 8), 0)], sympy.Ne(x, 3), True, "modular"),
        ([sympy.Ge(x, 0)], sympy.Or(sympy.Lt(x, 0), sympy.Ge(y, 0)), None, "ranges"),
    ],
)
def test_verdict_and_the_layer_it_needed(facts, claim, verdict, layer):
    layers = CheapLayers(knowledge_of(facts))
    assert layers.decide(claim) is verdict
    assert LAYERS[layers.layer] == layer


def test_the_residues_tighten_the_bounds_of_the_paths_before_any_rewriting():
    """2*(x//2) - x lies in [-1, 0] (differences) and is even where x is (modular): it is 0."""
    knowledge = knowledge_of([sympy.Eq(F.Mod(x, 2), 0), sympy.Ge(x, 2)])
    layers = CheapLayers(knowledge, rewrite=False, differences=DifferenceBounds(knowledge))
    assert layers.decide(sympy.Eq(2 * F.FloorDiv(x, 2), x)) is True
    assert LAYERS[layers.layer] == "differences"
    assert CheapLayers(knowledge, rewrite=False).decide(sympy.Eq(2 * F.FloorDiv(x, 2), x)) is None
