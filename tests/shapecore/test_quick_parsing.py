"""The quick reader builds what the general reader builds, node for node, or leaves the text to it.

Differential: :func:`shapecore.parse` (the quick reader first) against the general reader alone
(Python's parser), on text in and around the common grammar: the same expression (``srepr``),
or the same error. And the prover's answers on the bench's queries and on generated claims are
the same whichever reader read their text.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from unittest import mock

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import shapecore.reasoner as reasoner_module
from shapecore import Reasoner, parsing
from shapecore.parsing import _Builder, _python_and, _python_or, _read_in_full
from shapecore.quick_parsing import MOST_TOKENS, read_common

from .folding_text import claim_texts, int_texts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench_queries() -> list:
    spec = importlib.util.spec_from_file_location("bench_reasoner", os.path.join(ROOT, "bench", "reasoner.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.REQUIRED + module.CLAIMS + module.sharding_queries()


BENCH = _bench_queries()


def _quick(text: str) -> sympy.Basic | None:
    return read_common(text, _Builder()._build, _python_and, _python_or)


def _outcome(read, text: str) -> tuple:
    """What ``read(text)`` gives: the expression's ``srepr``, or the error's type and message."""
    try:
        return ("expression", sympy.srepr(read(text)))
    except Exception as error:  # the general reader's errors, whichever they are
        return ("error", type(error).__name__, str(error))


def _same_as_the_general_reader(text: str) -> None:
    assert _outcome(parsing.parse.__wrapped__, text) == _outcome(_read_in_full, text), text


# -- text in and around the common grammar ---------------------------------------------------------

_NAMES = ["x", "y", "s0", "u12", "_", "match"]
_NOT_NAMES = ["Eq", "Max", "True", "False", "None", "zf0", "lambda", "if", "not"]  # outside, or not a name
_INTEGERS = ["0", "1", "2", "7", "12", "64", "9" * 30, "1" + "0" * 29]
_NOT_INTEGERS = ["00", "007", "9" * 31, "1e3", "0x1f", "1_000", "2.", "3.5"]
_CALLS = ["Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Mod", "FloorDiv", "CleanDiv", "CeilDiv", "PythonMod", "Max", "Min",
          "max", "min", "ModularIndexing", "And", "Or", "Not", "PowByNatural", "ToFloat", "foo"]
_BINARY = ["+", "-", "*", "//", "%", "==", "!=", "<", "<=", ">", ">=", "&", "|", "and", "or", "/", "**"]
_UNARY = ["-", "+", "~", "not "]


def _spaced(parts: list[str]) -> st.SearchStrategy[str]:
    """``parts`` joined with zero, one or two spaces between them (and around them)."""
    return st.lists(st.sampled_from(["", " ", "  "]), min_size=len(parts) + 1, max_size=len(parts) + 1).map(
        lambda gaps: "".join(g + p for g, p in zip(gaps, parts)) + gaps[-1]
    )


def _leaves(outside: bool) -> st.SearchStrategy[str]:
    inside = st.sampled_from(_NAMES + _INTEGERS)
    return st.one_of(inside, st.sampled_from(_NOT_NAMES + _NOT_INTEGERS)) if outside else inside


def _extend(children: st.SearchStrategy[str], binary: list[str]) -> st.SearchStrategy[str]:
    args = st.lists(children, min_size=0, max_size=3)
    return st.one_of(
        st.tuples(children, st.sampled_from(binary), children).flatmap(lambda t: _spaced(list(t))),
        st.tuples(st.sampled_from(_UNARY), children).map("".join),
        children.flatmap(lambda a: _spaced(["(", a, ")"])),
        st.tuples(st.sampled_from(_CALLS), args).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(children, st.sampled_from(binary[:6]), children, st.sampled_from(binary[5:11]), children).map(
            lambda t: " ".join(t)),  # a chain: a < b < c, a + b == c
    )


def common_texts(*, outside: bool = False) -> st.SearchStrategy[str]:
    """Text in the common grammar (integer expressions and claims, kinds mixed at random, so
    many are errors), and with ``outside`` tokens and operators beyond it."""
    binary = _BINARY if outside else _BINARY[:-2]
    return st.recursive(_leaves(outside), lambda children: _extend(children, binary), max_leaves=8)


def _token_soup() -> st.SearchStrategy[str]:
    tokens = _NAMES + _INTEGERS[:5] + _CALLS[:4] + _BINARY + ["(", ")", ",", "~", "not", "=", "!", "\t", "\n", "#", "é"]
    return st.lists(st.sampled_from(tokens), max_size=12).flatmap(lambda parts: _spaced(parts) if parts else st.just(""))


@settings(max_examples=1500)
@given(common_texts())
def test_common_text_reads_the_same_or_fails_the_same(text):
    _same_as_the_general_reader(text)


@settings(max_examples=800)
@given(st.one_of(common_texts(outside=True), _token_soup()))
def test_text_beyond_the_common_grammar_reads_the_same_or_fails_the_same(text):
    _same_as_the_general_reader(text)


@settings(max_examples=300)
@given(st.one_of(claim_texts(("x", "y")), int_texts(("x", "y"))))
def test_folding_text_reads_the_same(text):
    _same_as_the_general_reader(text)


@pytest.mark.parametrize(
    "text",
    [
        "(a + b) + c > 0",  # one sum in Python's tree: left to the general reader
        "(a*b)*c >= 2",
        "((x > 1) & (y > 1)) & (x > y)",
        "(a + b)*c + d - (e - f) > 0",
        "(a*b)//c*d % e == 0",
        "+(a + b) + c > 0",
        "x > 1 and False or y > 2",
        "x//y - x//y >= 0",  # folding drops a division: read again, keeping it
        "x != 0 and 10 // x > 2",
        "Eq(Mod(x, 0), 0)",  # a division by zero, located by the general reader
        "(x > 1) & not y > 2",  # a syntax error: not after &, |, ~ or a comparison
        "(x > 1) | not (y > 1)",
        "~not x > 1",
        "x > 1 and not y > 2",
        "x == not y",
        "-not x",
        "x < y < z",
        "Max()",
        "Max(x,)",
        "(x, y)",
        "x + 1\n",
        "\tx > 1",
        " x >= 2 ",
        "",
        "Mod(x)",
        "Eq(x > 1, y)",
        "And(x > 1)",
        "ModularIndexing(x, 2, 4) < 4",
        "x * " * 100 + "x > 0",  # more tokens than read quickly
        "(" * 20 + "x" + ")" * 20 + " > 1",  # nested deeper than read quickly
    ],
)
def test_edges_of_the_grammar_read_the_same(text):
    _same_as_the_general_reader(text)


@pytest.mark.parametrize("text", sorted({t for q in BENCH for t in (q.claim, *q.facts)}))
def test_the_bench_guards_are_read_quickly_and_the_same(text):
    quick = _quick(text)
    assert quick is not None, "a common guard the quick reader left to the general one"
    assert sympy.srepr(quick) == sympy.srepr(_read_in_full(text))


def test_the_quick_reader_stops_where_the_size_limits_begin():
    long = " + ".join(["x"] * (MOST_TOKENS // 2)) + " > 0"
    assert _quick(long) is None
    assert sympy.srepr(parsing.parse.__wrapped__(long)) == sympy.srepr(_read_in_full(long))
    assert _quick(" + ".join(["x"] * 20) + " > 0") is not None


# -- answers ---------------------------------------------------------------------------------------


def _answer(read, claim: str, facts: tuple[str, ...], ranges) -> tuple:
    """The prover's answer on text read by ``read`` (the general reader, or parse as it is), or its error."""
    with mock.patch.object(parsing, "parse", read), mock.patch.object(reasoner_module, "parse", read):
        prover = Reasoner(timeout_ms=300)
        try:
            for name, lo, hi in ranges:
                prover.set_range(name, lo, hi)
            for fact in facts:
                prover.add_fact(fact)
            proof = prover.prove(claim)
        except Exception as error:  # the same error, read either way
            return type(error).__name__, str(error)
    return proof.status, proof.method, proof.counterexample, tuple(map(sympy.srepr, proof.facts_used or ()))


@pytest.mark.parametrize("query", BENCH[:55] + BENCH[55::8], ids=lambda q: f"{q.claim} | {', '.join(q.facts)}")
def test_the_bench_queries_get_the_same_answers(query):
    quick = _answer(parsing.parse.__wrapped__, query.claim, query.facts, query.ranges)
    assert quick == _answer(_read_in_full, query.claim, query.facts, query.ranges)


_CLAIMS = common_texts().filter(lambda text: any(word in text for word in ("and", "or", "<", ">", "=", "Eq", "Ne")))


@settings(max_examples=60, deadline=None)
@given(claim=st.one_of(_CLAIMS, claim_texts(("x", "y"))), fact=_CLAIMS)
def test_generated_claims_get_the_same_answers(claim, fact):
    quick = _answer(parsing.parse.__wrapped__, claim, (fact,), (("x", 2, None),))
    assert quick == _answer(_read_in_full, claim, (fact,), (("x", 2, None),))
