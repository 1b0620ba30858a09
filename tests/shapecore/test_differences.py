"""differences: bounds from chains of facts agree with brute force wherever the facts hold."""

import itertools

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore import prove
from shapecore.decide import CheapLayers
from shapecore.differences import DifferenceBounds, _Inconsistent, _reads_graph, _terms
from shapecore.evaluation import evaluate, holds
from shapecore.parsing import parse
from shapecore.ranges import UNBOUNDED
from shapecore.rewrite import Simplifier
from shapecore.testing import relations

from .digests import knowledge_of

NAMES = ("x", "y", "z")
SYMBOLS = [F.int_symbol(n) for n in NAMES]
LO, HI = -4, 8
CLAIM_OPTIONS = {"max_leaves": 4, "constants": (-6, 6), "divisors": (1, 5)}


@st.composite
def difference_facts(draw: st.DrawFn) -> sympy.Basic:
    """``a*x - b*y + c <rel> 0`` over two distinct names, mostly with ``a = b = 1``."""
    x, y = draw(st.permutations(SYMBOLS))[:2]
    a, b = (draw(st.sampled_from([1, 1, 1, 2, 3])) for _ in range(2))
    relation = draw(st.sampled_from([sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge, sympy.Eq]))
    return relation(a * x - b * y + draw(st.integers(-4, 4)), 0)


def _verdict(facts, claim):
    knowledge = knowledge_of(facts)
    analyzers = Simplifier(knowledge.ranges, knowledge.congruences)
    return DifferenceBounds(knowledge).decide(type(claim), claim.lhs - claim.rhs, analyzers.bounds, UNBOUNDED)


def _agrees(verdict, facts, claim, points):
    for point in points:
        if all(holds(f, point) for f in facts):
            try:
                value = evaluate(claim, point)
            except ZeroDivisionError:  # the layer speaks of values, not of definedness
                continue
            assert value == verdict, point


@settings(max_examples=150, deadline=None)
@given(facts=st.lists(difference_facts(), max_size=4), claim=relations(NAMES, **CLAIM_OPTIONS))
def test_a_verdict_is_the_claims_value_wherever_the_facts_hold_in_a_closed_box(facts, claim):
    ranges = [f(s, v) for s in SYMBOLS for f, v in ((sympy.Ge, LO), (sympy.Le, HI))]
    if not claim.is_Relational:
        return
    verdict = _verdict(ranges + facts, claim)
    if verdict is not None:  # the box is every point the ranges allow: the check is exhaustive
        _agrees(verdict, facts, claim, [dict(zip(NAMES, p)) for p in itertools.product(range(LO, HI + 1), repeat=3)])


@settings(max_examples=150, deadline=None)
@given(facts=st.lists(difference_facts(), max_size=4), claim=relations(NAMES, **CLAIM_OPTIONS))
def test_a_verdict_is_the_claims_value_where_symbols_are_unbounded_above(facts, claim):
    if not claim.is_Relational:
        return
    verdict = _verdict([sympy.Ge(s, LO) for s in SYMBOLS] + facts, claim)
    if verdict is not None:
        _agrees(verdict, facts, claim, [dict(zip(NAMES, p)) for p in itertools.product(range(LO, 3 * HI), repeat=3)])


@pytest.mark.parametrize(
    "facts, claim, verdict",
    [
        (["s0 < s1", "s1 < s2"], "s0 < s2", True),
        (["s0 < s1", "s1 < s2"], "s0 + 2 <= s2", True),
        (["s0 < s1", "s1 < s2"], "s0 >= s2", False),
        (["s0 < s1", "s1 < s2"], "s0 + 3 <= s2", None),
        (["s0 <= s1", "s1 <= s2", "s2 <= s0"], "Eq(s0, s2)", True),
        (["s0 < s2", "s1 < s3"], "s0 + s1 < s2 + s3", True),
        (["s0 < s1", "s2 >= 2"], "s0 < s1 + s2", True),
        (["s0 <= s1", "s1 >= 0"], "s0 <= 2*s1", True),
        ([], "Max(s0, s1) >= s0", True),
        ([], "Min(s0, s1) <= s1", True),
        (["s0 <= s2", "s1 <= s2"], "Max(s0, s1) <= s2", True),
        (["s0 < s2"], "Max(s0, s1) < s2", None),
        (["s1 <= s0"], "Eq(Max(s0, s1), s0)", True),
        (["s0 <= s1"], "FloorDiv(s0, 4) <= FloorDiv(s1, 4)", True),
        (["s0 < 4*s1"], "FloorDiv(s0, 4) < s1", True),
        (["s0 >= 0", "s1 >= 1"], "FloorDiv(s0, s1) <= s0", True),
        (["s0 >= 0", "s1 >= 0"], "FloorDiv(s0, s1) <= s0", None),  # s1 may be 0: no bound from the ranges
        (["s0 < s1", "s1 < s0"], "s0 < s1", None),  # a negative cycle: the facts contradict each other
    ],
)
def test_examples(facts, claim, verdict):
    assert _verdict([parse(f) for f in facts], parse(claim)) is verdict


def test_integers_beyond_a_floats_range_stay_exact():
    big = 10**400
    assert _verdict([parse(f"s0 >= {big}"), parse("s0 < s1")], parse(f"s1 > {big}")) is True


def test_the_reasoner_names_the_layer_and_the_facts_it_used():
    proof = prove("s0 < s3", facts=["s0 < s1", "s1 <= s2", "s2 < s3", "s4 > 7"])
    assert proof.proved and proof.method == "differences"
    assert set(map(str, proof.facts_used)) == {"s0 < s1", "s1 <= s2", "s2 < s3"}


def test_cheap_layers_use_the_graph_only_when_given_one():
    knowledge = knowledge_of([parse("s0 < s1"), parse("s1 < s2")])
    claim = parse("s0 < s2")
    assert CheapLayers(knowledge).decide(claim) is None
    assert CheapLayers(knowledge, differences=DifferenceBounds(knowledge)).decide(claim) is True


@given(facts=st.lists(difference_facts(), max_size=3), shape=st.sampled_from(["Mod(x*y, 4)", "3*Mod(x, 4) - x*y", "x*y + 2"]))
def test_what_the_graph_cannot_read_it_bounds_by_the_interval(facts, shape):
    """bound() skips the sums of a difference without a symbol, floor division, Max or Min among
    its terms: they would bound it by its interval, no tighter."""
    knowledge = knowledge_of([*facts, parse("x >= -3"), parse("y <= 5")])
    bounder = Simplifier(knowledge.ranges, knowledge.congruences).bounds
    difference = parse(shape)
    known = bounder.bound(difference)
    graph = DifferenceBounds(knowledge)
    graph._build()
    try:
        upper, lower = graph._upper(_terms(difference, 1), bounder, 4), -graph._upper(_terms(difference, -1), bounder, 4)
    except _Inconsistent:
        return
    assert upper >= known.hi and lower <= known.lo
    assert not any(map(_reads_graph, _terms(difference, 1)))
