"""quick_proving: text read without sympy means what the parser reads, and every answer is right.

Ground truth is :func:`shapecore.holds` on the parsed text, by brute force over ranges that
bound every name; "no claim less decided" is checked against the reasoner itself.
"""

import copy
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import Reasoner, holds, parse, prove
from shapecore.quick_proving import _holds, _Outside, _read, _Reader, clear_cache, decide

NAMES = ("x", "y", "z")
LO, HI = -4, 6  # every name of a generated query is bounded by a range within this box


def _expressions(names=NAMES) -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(names), st.integers(0, 9).map(str))

    def extend(children):
        divisor = st.integers(1, 6).map(str)
        return st.one_of(
            st.tuples(children, st.sampled_from([" + ", " - ", "*"]), children).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            st.tuples(children, st.sampled_from(["//", " % "]), divisor).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
            st.tuples(st.sampled_from(["Mod", "FloorDiv"]), children, divisor).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            st.tuples(st.sampled_from(["Max", "Min", "max", "min"]), children, children).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"
            ),
            children.map(lambda c: f"-{c}"),
        )

    return st.recursive(leaves, extend, max_leaves=5)


def _relations(names=NAMES) -> st.SearchStrategy[str]:
    sides = _expressions(names)
    infix = st.tuples(sides, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), sides).map(" ".join)
    call = st.tuples(st.sampled_from(["Eq", "Ne"]), sides, sides).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    return st.one_of(infix, call)


def _simple_facts(names=NAMES) -> st.SearchStrategy[str]:
    """The shapes torch records: chains, bounds, congruences, multiples."""
    name = st.sampled_from(names)
    small = st.integers(-3, 3)
    return st.one_of(
        st.tuples(name, st.sampled_from(["<", "<="]), name, small).map(lambda t: f"{t[0]} {t[1]} {t[2]} + {t[3]}"),
        st.tuples(name, st.integers(2, 4), st.integers(0, 3)).map(lambda t: f"Eq(Mod({t[0]}, {t[1]}), {t[2] % t[1]})"),
        st.tuples(name, st.integers(2, 3), name).map(lambda t: f"Eq({t[0]}, {t[1]}*{t[2]})"),
        st.tuples(name, st.sampled_from([">=", "<=", ">", "<"]), small).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    )


@st.composite
def queries(draw) -> tuple[str, list[str], dict[str, tuple[int, int]]]:
    claim = draw(st.one_of(_relations(), _simple_facts()))
    facts = draw(st.lists(st.one_of(_simple_facts(), _relations()), max_size=3))
    ranges = {}
    for name in NAMES:
        lo = draw(st.integers(LO, HI))
        ranges[name] = (lo, draw(st.integers(lo - 1, HI)))  # sometimes empty: contradicting facts
    return claim, facts, ranges


def _scope_points(facts, ranges):
    parsed = [parse(f) for f in facts]
    names = sorted(ranges)
    for values in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        point = dict(zip(names, values))
        if all(holds(f, point) for f in parsed):
            yield point


@settings(max_examples=300, deadline=None)
@given(text=_relations(), values=st.tuples(*(st.integers(-9, 9) for _ in NAMES)))
def test_text_reads_as_the_parser_reads_it(text, values):
    point = dict(zip(NAMES, values))
    relation, difference, _ = _read(text)
    assert _holds(relation, difference, point) == holds(parse(text), point)


def _full_reading(text):
    reader = _Reader(text)
    try:
        relation, difference = reader.relation()
    except _Outside:
        return None
    return relation, difference, frozenset(reader.names)


WORDS = st.sampled_from(["x", "_y", "s0", "Max", "Mod", "zf0", "lambda", "True", "0", "1", "8", "007", "2x"])


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.tuples(WORDS, WORDS, WORDS).map(lambda t: f"Eq(Mod({t[0]}, {t[1]}), {t[2]})"),
        st.tuples(WORDS, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), WORDS).map(" ".join),
    )
)
def test_the_texts_most_facts_are_read_as_the_reader_reads_them(text):
    clear_cache()
    assert _read(text) == _full_reading(text)


@settings(max_examples=300, deadline=None)
@given(query=queries())
def test_every_answer_agrees_with_brute_force(query):
    claim, facts, ranges = query
    answer = decide(claim, facts, ranges)
    if answer is None:
        return
    if answer.status == "proved":
        assert all(holds(parse(claim), point) for point in _scope_points(facts, ranges))
    else:
        point = answer.counterexample
        assert set(point) == set(NAMES)  # every name of the claim, the facts and the ranges
        assert all(lo <= point[n] <= hi for n, (lo, hi) in ranges.items())
        assert all(holds(parse(f), point) for f in facts) and not holds(parse(claim), point)


@settings(max_examples=150, deadline=None)
@given(query=queries())
def test_no_claim_is_less_decided_than_by_the_reasoner(query):
    claim, facts, ranges = query
    reasoner = Reasoner()
    for name, (lo, hi) in ranges.items():
        reasoner.set_range(name, lo, hi)
    for fact in facts:
        reasoner.add_fact(fact)
    before = reasoner.prove(claim).status
    after = prove(claim, facts=facts, ranges=ranges).status
    assert after == before or before == "unknown"


@pytest.mark.parametrize(
    "claim, facts, ranges, status",
    [
        ("s0 < s2", ["s0 < s1", "s1 < s2"], {"s0": (2, None), "s1": (2, None), "s2": (2, None)}, "proved"),
        ("s0 + s1 < s2 + s3", ["s0 < s2", "s1 < s3"], {}, "proved"),
        ("s0 >= s2", ["s0 < s1", "s1 < s2"], {"s0": (2, None), "s1": (2, None), "s2": (2, None)}, "refuted"),
        ("Eq(Mod(b*s + 8*b, 8), 0)", ["Eq(Mod(b, 4), 0)", "Eq(Mod(s, 2), 0)"], {"b": (1, 4096)}, "proved"),
        ("Eq(Mod(b*s, 16), 0)", ["Eq(Mod(b, 4), 0)"], {"b": (1, 4096), "s": (1, 8192)}, "refuted"),
        ("Eq(Mod(s1, 4), 0)", ["Eq(s1, 4*s0)"], {}, "proved"),
        ("FloorDiv(s0, 4) <= FloorDiv(s1, 4)", ["s0 <= s1"], {}, "proved"),
        ("s0 - 4*FloorDiv(s0, 4) < 4", [], {}, "proved"),
        ("FloorDiv(s0, 8) >= 1", ["s0 >= 8"], {}, "proved"),
        ("s0 >= 8", ["Eq(Mod(s0, 8), 0)", "s0 >= 1"], {}, "proved"),
        ("x % 8 == 0", ["x % 16 == 0"], {}, "proved"),
        ("Max(s0, s1) <= s2", ["s0 <= s2", "s1 <= s2"], {}, "proved"),
        ("Eq(Min(s0, s1), s1)", ["s1 < s0"], {}, "proved"),
        ("Min(s0, s1) >= 2", [], {"s0": (2, None), "s1": (2, None)}, "proved"),
        ("Eq(FloorDiv(x + 8, 8), FloorDiv(x, 8) + 1)", [], {}, "proved"),
        ("Eq(FloorDiv(FloorDiv(x, 2), 8), FloorDiv(x, 16))", [], {"x": (2, None)}, "proved"),
        ("Eq(Mod(Mod(s0, 16), 8), Mod(s0, 8))", [], {}, "proved"),
    ],
)
def test_the_common_queries_are_decided_here_as_the_reasoner_decides_them(claim, facts, ranges, status):
    answer = decide(claim, facts, ranges)
    assert answer is not None and answer.status == status
    reasoner = Reasoner()
    for name, (lo, hi) in ranges.items():
        reasoner.set_range(name, lo, hi)
    for fact in facts:
        reasoner.add_fact(fact)
    assert reasoner.prove(claim).status == status


@pytest.mark.parametrize(
    "claim",
    [
        "s0 < s1 < s2",  # a chained comparison
        "x / 2 > 0",
        "x ** 2 >= 0",
        "CleanDiv(x, 2) >= 0",  # another function
        "Max(x, y, 1) >= x",  # Max of three
        "Max >= 0",  # a function name alone
        "zf0 >= 0",  # a float symbol
        "007 > x",  # not Python's integer
        "2x > 1",
        "1_000 > x",
        "x >= 1.5",
        "x\n>= 1",
        "Mod(x, 0) >= 0",  # a zero divisor: the parser reports it
        "Mod(x, -2) <= 0",
        "Mod(x, y) >= 0",  # a symbolic divisor
        "x >= 0 and y >= 0",
        "True",
        "(x < 1)",
        "Eq(x, 1) == 1",
        "x >= ",
        "x >= \u0663",  # a digit, but not an ASCII one
        "\u00e9 >= 0",  # a letter, but not an ASCII one
        "x >= 2\u00b2",
        "x = 1",
        "x === 1",
        "x / / 2 >= 1",
        "x >= 1234567890123456789012345678901",  # longer than quick_parsing's integers
    ],
)
def test_text_outside_the_grammar_is_left_to_the_reasoner(claim):
    assert decide(claim, [], {"x": (0, 9), "y": (1, 9)}) is None
    assert decide("x >= 0", [claim], {"x": (0, 9), "y": (1, 9)}) is None


@pytest.mark.parametrize("ranges", [{"zf0": (0, 1)}, {"Max": (0, 1)}, {"x": (0, 10**4001)}, {"x": (2, 1)}])
def test_ranges_it_does_not_read_or_that_contradict_are_left_to_the_reasoner(ranges):
    assert decide("x >= 0", [], ranges) is None


def test_contradicting_facts_are_left_to_the_reasoner():
    assert decide("x >= 5", ["x < y", "y < x"], {}) is None
    assert decide("x >= 5", ["Eq(Mod(x, 4), 1)", "Eq(Mod(x, 2), 0)"], {}) is None
    assert prove("x >= 5", facts=["x < y", "y < x"]).proved


@settings(max_examples=150, deadline=None)
@given(query=queries())
def test_a_text_read_before_answers_as_a_fresh_read(query):
    claim, facts, ranges = query
    clear_cache()
    kept = {text: copy.deepcopy(_read(text)) for text in (claim, *facts)}
    first = decide(claim, facts, ranges)  # from the readings kept
    assert all(_read(text) == reading for text, reading in kept.items())  # deciding never changes one
    again = decide(claim, facts, ranges)
    clear_cache()
    assert first == again == decide(claim, facts, ranges)


def test_the_texts_kept_are_bounded():
    clear_cache()
    most = _read.cache_info().maxsize
    for i in range(most + 10):
        decide("x >= 0", [f"x >= {i}"], {})
    assert _read.cache_info().currsize == most
