"""The layered prover: required decisions, soundness against brute force, SMT-LIB, caching."""

import itertools

import pytest
import sympy
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

import shapecore.functions as F
from shapecore import ArgumentError, ModularSet, ParseError, Proof, Reasoner, ValueRange, bound, evaluate, holds, parse, prove, residue
from shapecore.modular import tighten
from shapecore.proof import DeferredProof
from shapecore.parsing import named_symbols
from shapecore.testing import claims, fact_sets, int_exprs
from shapecore.z3backend import Translator

from . import oracle
from .folding_text import claim_texts, float_texts
from .oracle import formula

REQUIRED = [
    ("Eq(Mod(s0*s1, 8), 0)", ["Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"], None, "proved"),
    ("Eq(Mod(s0*s1, 16), 0)", ["Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"], None, "refuted"),
    ("Eq(8*FloorDiv(s0, 8), s0)", ["Eq(Mod(s0, 8), 0)"], None, "proved"),
    ("Eq(Mod(8*s0 + 4, 8), 4)", [], None, "proved"),
    ("Eq(Mod(Mod(s0, 16), 8), Mod(s0, 8))", [], None, "proved"),
    ("s0 >= 8", ["Eq(Mod(s0, 8), 0)", "s0 >= 1"], None, "proved"),
    ("Ne(36*u0, 36)", ["u0*u1 > u1", "u1 >= 1"], None, "proved"),
    ("Eq(FloorDiv(-s0, 8), -FloorDiv(s0 + 7, 8))", [], None, "proved"),
    ("n - FloorDiv(n, 3) >= 2", [], {"n": (3, 10000)}, "proved"),
    ("Eq(Mod(u0, 4), 0)", ["Eq(Mod(u0, 8), 0)"], None, "proved"),
    # torch's pair for one view: a symbolic divisor's quotient is shared by // and %
    ("Eq(Mod(s0, s1), 0)", ["Eq(s0, s1*FloorDiv(s0, s1))", "s1 >= 1"], None, "proved"),
    ("Eq(s0*s1, (s1 - 1)*FloorDiv(s0*s1, s1 - 1))", ["Eq(Mod(s0*s1, s1 - 1), 0)", "s1 >= 2"], None, "proved"),
]


@pytest.mark.parametrize("claim, facts, ranges, status", REQUIRED, ids=[c for c, *_ in REQUIRED])
def test_required_decisions(claim, facts, ranges, status):
    proof = prove(claim, facts=facts, ranges=ranges)
    assert proof.status == status, str(proof)
    _check_against_brute_force(proof, facts, ranges)


def test_refutation_has_a_checked_counterexample():
    facts = ["Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"]
    proof = prove("Eq(Mod(s0*s1, 16), 0)", facts=facts)
    values = proof.counterexample
    assert all(holds(parse(f), values) for f in facts)
    assert not holds(parse("Eq(Mod(s0*s1, 16), 0)"), values)


def test_no_sign_is_assumed():
    assert prove("s0 >= 0").status == "refuted"
    assert prove("s0*s0 >= 0").status == "proved"
    assert prove("Eq(Mod(s0, 8), Mod(s0 + 8, 8))").status == "proved"


def test_undefined_claims_never_hold():
    proof = prove("Eq(FloorDiv(s0, s1), FloorDiv(s0, s1))")  # sympy folds it to True, but s1 may be 0
    assert proof.status == "refuted" and proof.counterexample["s1"] == 0
    assert prove("FloorDiv(s0, s1) <= s0", ranges={"s0": (0, None), "s1": (1, None)}).status == "proved"
    proof = prove("FloorDiv(s0, s1) <= s0", ranges={"s0": (0, None)})
    assert proof.status == "refuted" and proof.counterexample["s1"] == 0
    s0, s1, s2 = (sympy.Symbol(n, integer=True) for n in ("s0", "s1", "s2"))
    zero_where_defined = F.ModularIndexing(s1, s2, 1)  # kept as written: s2 may be 0
    assert prove(sympy.Eq(F.FloorDiv(s0, zero_where_defined), 0)).status == "refuted"
    with pytest.raises(ZeroDivisionError):  # a divisor that is 0 as written is refused when built
        F.FloorDiv(s0, F.ModularIndexing(s1, 1, 1))


def test_facts_that_contradict_prove_everything_and_say_so():
    proof = prove("Eq(s0, 12345)", facts=["Eq(Mod(s0, 8), 0)", "Eq(Mod(s0, 4), 1)"])
    assert proof.status == "proved" and proof.method == "facts"
    assert "contradict" in proof.reason


def test_float_functions_parse_and_may_be_unknown():
    proof = prove("TruncToInt(IntTrueDiv(s0, 2)) <= s0", ranges={"s0": (0, 100)})
    assert proof.status in ("proved", "unknown")
    assert prove("ToFloat(s0) >= 0", ranges={"s0": (0, 100)}).status in ("proved", "unknown")


def test_methods_name_the_layer_that_decided():
    assert prove("Eq(Mod(s0*s1, 8), 0)", facts=["Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"]).method == "modular"
    assert Reasoner().prove("Eq(Mod(8*s0 + 4, 8), 4)").method == "modular"
    assert prove("Eq(Mod(8*s0 + 4, 8), 4)").method == "rewrite"  # quick_proving reads Mod(8*s0 + 4, 8) as 4
    assert prove("s0 + 1 > s0").method == "rewrite"
    assert prove("s0 >= 3", ranges={"s0": (4, None)}).method == "ranges"
    assert prove("Ne(36*u0, 36)", facts=["u0*u1 > u1", "u1 >= 1"]).method == "z3"


@pytest.mark.parametrize("claim", ["s0 < s2", "s0 + 2 <= s2", "Ne(s0, s2)"])
def test_a_query_answered_before_sympy_is_the_proof_the_scope_gives(claim):
    ranges, facts = {"s0": (2, None), "s1": (2, None), "s2": (2, None)}, ["s0 < s1", "s1 < s2"]
    proof = prove(claim, facts=facts, ranges=ranges)
    assert isinstance(proof, DeferredProof)  # quick_proving answered: its sympy parts are the scope's
    reasoner = Reasoner()
    for name, (lo, hi) in ranges.items():
        reasoner.set_range(name, lo, hi)
    for fact in facts:
        reasoner.add_fact(fact)
    assert proof == reasoner.prove(claim) and proof.facts == reasoner.facts


def test_a_claim_false_along_a_chain_of_facts_is_refuted_by_search():
    ranges = {"s0": (2, None), "s1": (2, None), "s2": (2, None)}
    for claim in ("s0 + 3 <= s2", "s0 >= s2"):  # s1 at its first value (2) broke the chain: z3 answered
        proof = prove(claim, facts=["s0 < s1", "s1 < s2"], ranges=ranges)
        assert (proof.status, proof.method, proof.counterexample) == ("refuted", "search", {"s0": 2, "s1": 3, "s2": 4})


def test_facts_used():
    proof = prove("s0 >= 8", facts=["Eq(Mod(s0, 8), 0)", "s0 >= 1", "s1 >= 5"])
    assert set(map(str, proof.facts_used)) == {"Eq(Mod(s0, 8), 0)", "s0 >= 1"}


def test_cache_makes_repeats_a_lookup_and_new_facts_invalidate_it():
    r = Reasoner()
    r.add_fact("s0 >= 1")
    first = r.prove("s0 >= 0")
    assert r.prove("s0 >= 0") is first
    r.add_fact("Eq(Mod(s0, 8), 0)")
    again = r.prove("s0 >= 0")
    assert again is not first and again.proved
    assert r.prove("s0 >= 8").proved


@pytest.mark.parametrize("claim, facts, ranges, status", REQUIRED, ids=[c for c, *_ in REQUIRED])
def test_smtlib_rechecks_the_answer(claim, facts, ranges, status):
    proof = prove(claim, facts=facts, ranges=ranges)
    solver = z3.Solver()
    solver.from_string(proof.to_smtlib())
    assert str(solver.check()) == ("unsat" if status == "proved" else "sat")


def test_reasoner_rejects_integer_expressions_as_claims():
    with pytest.raises(TypeError, match="expected a claim"):
        prove("s0 + 1")


# -- soundness: property tests against brute force ------------------------------------------------

NAMES = ("s0", "s1")
BOX = range(-12, 25)


def _check_against_brute_force(proof: Proof, facts, ranges=None, names=None):
    facts = [parse(f) if isinstance(f, str) else f for f in facts]
    for name, (lo, hi) in (ranges or {}).items():
        if lo is not None:
            facts.append(sympy.Ge(sympy.Symbol(name, integer=True), lo))
        if hi is not None:
            facts.append(sympy.Le(sympy.Symbol(name, integer=True), hi))
    claim = proof.claim
    if proof.status == "refuted":
        values = proof.counterexample
        assert all(holds(f, values) for f in facts), f"counterexample {values} breaks a fact"
        assert not holds(claim, values), f"{claim} holds at the counterexample {values}"
    if proof.status == "proved":
        names = sorted({s.name for s in claim.free_symbols.union(*(f.free_symbols for f in facts))})
        if len(names) > 3:
            return
        for point in itertools.product(range(-12, 25), repeat=len(names)):
            values = dict(zip(names, point))
            if all(holds(f, values) for f in facts):
                assert holds(claim, values), f"proved {claim} fails at {values}"


@given(claim=claims(NAMES, max_leaves=4), facts=fact_sets(NAMES, max_size=3, max_leaves=3))
def test_soundness_on_random_claims(claim, facts):
    if claim in (sympy.true, sympy.false):
        return
    proof = prove(claim, facts=facts, timeout_ms=200)
    _check_against_brute_force(proof, facts)


@given(
    claim=claims(NAMES, max_leaves=4, variable_divisors=False),
    congruence=st.tuples(st.sampled_from([2, 4, 8]), st.integers(0, 7)),
    lo=st.integers(-5, 10),
)
def test_soundness_with_sharding_style_facts(claim, congruence, lo):
    if claim in (sympy.true, sympy.false):
        return
    m, r = congruence
    facts = [f"Eq(Mod(s0, {m}), {r % m})", f"s0 >= {lo}", "s1 >= 1"]
    proof = prove(claim, facts=facts, timeout_ms=200)
    _check_against_brute_force(proof, facts)


def test_z3_sees_the_claim_with_replacements_applied():
    sizes = {"s7": (2, None), "s75": (2, None), "s96": (2, None)}
    proof = prove("Eq(Mod(s7*s75*s96, s75 - 1), 0)", facts=["Eq(s75 - 1, s7)"], ranges=sizes, timeout_ms=2000)
    assert proof.status == "proved"
    assert prove("Eq(Mod(s7*s75*s96, s75 - 1), 0)", facts=["Eq(s75 - 1, s7)"]).status == "refuted", "s7 = 0 divides by 0"


def test_hints_refute_at_once_but_only_when_they_satisfy_the_facts():
    r = Reasoner()
    r.hints = {"b": 4, "s": 2}
    r.add_fact("Eq(Mod(b, 4), 0)")
    proof = r.prove("Eq(Mod(b*s, 16), 0)")
    assert proof.refuted and proof.counterexample == {"b": 4, "s": 2}
    r.add_fact("s >= 3")  # the hints no longer satisfy the facts: they must not be reported
    proof = r.prove("Eq(Mod(b*s, 16), 0)")
    assert proof.refuted and proof.counterexample["s"] >= 3
    assert holds(parse("Eq(Mod(b, 4), 0)"), proof.counterexample)


# -- bad input -------------------------------------------------------------------------------------

BIG = 10**400  # beyond a float's range (~1.8e308)


def test_integers_beyond_a_floats_range_are_exact():
    assert prove(f"s0 + 1 > {BIG}", ranges={"s0": (BIG, None)}).status == "proved"
    refuted = prove(f"s0 <= {BIG}", ranges={"s0": (0, None)})
    assert refuted.status == "refuted" and refuted.counterexample["s0"] > BIG
    assert prove(f"Eq(Mod(s0, {BIG}), 0)", facts=[f"Eq(Mod(s0, {2 * BIG}), 0)"]).status == "proved"
    assert prove(f"s0 >= {BIG + 8}", facts=[f"Eq(Mod(s0, 8), 0)", f"s0 > {BIG}"]).status == "proved"


BEYOND_A_DOUBLE = 62999999999999999997  # x + 0.5 is 63000000000000000000.0 in floats


@pytest.mark.parametrize(
    "claim, ranges, status",
    [
        ("5e17 <= 499999999999999999", {}, "refuted"),  # Python compares an int with a float exactly
        ("1e16 == 10**16 + 1", {}, "refuted"),
        ("5e17 <= x + 1", {"x": (499999999999999999, 499999999999999999)}, "proved"),
        ("5e17 <= x", {"x": (499999999999999999, 499999999999999999)}, "refuted"),
        ("x + 0.5 <= 62999999999999999999", {"x": (BEYOND_A_DOUBLE, BEYOND_A_DOUBLE)}, "refuted"),
        ("Ne(Mod(x*0.5, 2), 0.5)", {"x": (1, 3)}, "refuted"),  # 0.5 % 2 is 0.5: not an integer
        ("Ne(Mod(x/2, 3), 1/2)", {"x": (1, 3)}, "refuted"),
        ("Ne(Max(x, 2.5), 3)", {"x": (3, 3)}, "refuted"),
    ],
)
def test_floats_compare_with_big_ints_exactly(claim, ranges, status):
    proof = prove(claim, ranges=ranges)
    assert proof.status == status
    if status == "refuted":
        assert not holds(parse(claim), proof.counterexample)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: prove("x > 1", facts="x > 2"), r"facts must be a list of guards .*facts=\['x > 2'\]"),
        (lambda: prove("x > 1", facts=[2.5]), r"facts\[0\] must be guard text"),
        (lambda: prove("x > 1", ranges={"x": (1.5, 3)}), r"ranges\['x'\] lower bound must be an int or None, got 1.5"),
        (lambda: prove("x > 1", ranges={"x": (0, "9")}), r"ranges\['x'\] upper bound must be an int or None"),
        (lambda: prove("x > 1", ranges={"x": 3}), r"ranges\['x'\] must be a pair \(lo, hi\)"),
        (lambda: prove("x > 1", ranges={"a b": (1, 3)}), "cannot name a symbol"),
        (lambda: prove("x > 1", ranges=[("x", (1, 2))]), "ranges must map symbol names"),
        (lambda: prove("x > 1", timeout_ms=0), "timeout_ms must be a positive int"),
        (lambda: prove(["x > 1"]), "expected guard text or a sympy expression"),
        (lambda: Reasoner(timeout_ms="1000"), "timeout_ms must be a positive int .*got .1000."),
        (lambda: Reasoner().set_range("x", 1.5, None), "lo must be an int or None"),
        (lambda: holds("s0 > 1", {"s0": 2}), "expected a sympy expression"),
    ],
)
def test_arguments_that_cannot_work_are_refused(call, message):
    with pytest.raises(ArgumentError, match=message):
        call()


# -- undefined terms, and every symbol bound -------------------------------------------------------


@pytest.mark.parametrize("claim", ["x//y - x//y >= 0", "Eq(Mod(x//y, -1), 0)", "Or(Ne(2*x, 5), x//y > 0)"])
def test_a_claim_undefined_somewhere_the_facts_allow_is_not_proved(claim):
    proof = prove(claim)
    assert proof.refuted and proof.counterexample["y"] == 0
    assert prove(claim, facts=["y >= 1"]).proved


SHORT_CIRCUITS = [
    # Python's and/or stop at the part that decides: x == 0 decides before 10 // x divides by it
    ("x == 0 or 10 // x > 2", [], {"x": (0, 3)}, "proved", None),  # was refuted at x = 0
    ("x != 0 and 10 // x > 2", [], {"x": (0, 3)}, "refuted", {"x": 0}),  # False there, not undefined
    ("not (x != 0 and 10 // x > 2)", [], {"x": (0, 0)}, "proved", None),
    ("-3 <= x // y <= 3 or y == 0", [], {"y": (0, 4)}, "refuted", None),  # Python evaluates x // y first
    # a fact with or holds where its second part would divide by zero
    ("10 // x > 0", ["x == 0 or 10 // x > 2"], {"x": (0, 3)}, "refuted", {"x": 0}),  # was proved
    ("x > 5", ["Eq(y, 0)", "y == 0 or x // y > 0"], {}, "refuted", None),  # was a contradiction: proved
    ("x >= 1", ["x != 0 and 10 // x > 2"], {}, "proved", None),  # and: both parts hold
    # the cheap layers read it where every divisor is nonzero
    ("x > 0 and 12 // x >= 1", [], {"x": (1, 12)}, "proved", None),
]


@pytest.mark.parametrize("claim, facts, ranges, status, counterexample", SHORT_CIRCUITS,
                         ids=[f"{c} | {f}" for c, f, *_ in SHORT_CIRCUITS])
def test_pythons_and_or_short_circuit(claim, facts, ranges, status, counterexample):
    proof = prove(claim, facts=facts, ranges=ranges)
    assert proof.status == status, str(proof)
    if counterexample is not None:
        assert dict(proof.counterexample) == counterexample


def test_z3_encodes_where_a_short_circuit_is_defined():
    tr = Translator(z3.Context())
    solver = z3.Solver(ctx=tr.ctx)
    x = tr.symbol("x")
    solver.add(*tr.axioms, x == 0, tr.holds(parse("x == 0 or 10 // x > 2")), z3.Not(tr.holds(parse("x != 0 and 10 // x > 2"))))
    assert solver.check() == z3.sat  # holds at x = 0, and the and is defined (False) there
    solver.add(tr.holds(parse("Not(x != 0 and 10 // x > 2)")))
    assert solver.check() == z3.sat


def test_a_counterexample_binds_every_symbol_the_claim_names():
    proof = prove("Lt(s1, s1)", ranges={"s0": (1, 42)})
    assert proof.refuted and set(proof.counterexample) == {"s0", "s1"}
    proof = prove("Eq(s1, s1) & (s0 > 5)", facts=["Eq(Mod(s2, 1), 0)"], ranges={"s0": (1, 42)})
    assert proof.refuted and set(proof.counterexample) == {"s0", "s1", "s2"}


TEXT_BOX = range(-5, 9)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(claim=claim_texts(("x", "y"), max_leaves=3), facts=st.lists(claim_texts(("x", "y"), max_leaves=2), max_size=2))
def test_soundness_on_guard_text(claim, facts):
    """Text as written (so sympy's folding is under test), Python's eval as the oracle."""
    try:
        proof = prove(claim, facts=facts, timeout_ms=200)
    except ParseError:  # a divisor that is zero as written (test_parsing checks the message)
        return
    points = [{"x": x, "y": y} for x in TEXT_BOX for y in TEXT_BOX]
    admissible = [p for p in points if all(oracle.holds(formula(f), p) for f in facts)]
    if proof.proved:
        assert all(oracle.holds(formula(claim), p) for p in admissible), "proved, yet false inside the box"
    if proof.refuted:
        values = proof.counterexample
        named = named_symbols(claim).union(*(named_symbols(f) for f in facts))
        assert {s.name for s in named} <= set(values), "the counterexample leaves a symbol unbound"
        assert all(oracle.holds(formula(f), values) for f in facts) and not oracle.holds(formula(claim), values)


def test_floats_are_pythons_not_sympys():
    proof = prove("s0*0.1*10 <= s0", ranges={"s0": (1, 10)})
    assert proof.refuted and not 0.1 * proof.counterexample["s0"] * 10 <= proof.counterexample["s0"]
    assert not prove("ToFloat(s0) + 1.0 > ToFloat(s0)", ranges={"s0": (0, None)}).proved  # not at 2**53


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(claim=float_texts(("x", "y"), max_leaves=3), fact=st.sampled_from(["x >= 0", "y > 2", "Eq(x, 2*y)", "x + 0.5 <= y"]))
def test_soundness_on_float_text(claim, fact):
    proof = prove(claim, facts=[fact], timeout_ms=200)
    points = [{"x": x, "y": y} for x in TEXT_BOX for y in TEXT_BOX]
    if proof.proved:
        assert all(oracle.holds(formula(claim), p) for p in points if oracle.holds(formula(fact), p))
    if proof.refuted:
        assert oracle.holds(formula(fact), proof.counterexample) and not oracle.holds(formula(claim), proof.counterexample)


# -- bound and residue -----------------------------------------------------------------------------

BOX = {"s0": (-4, 9), "s1": (-3, 8)}


@settings(max_examples=60, deadline=None)
@given(expr=int_exprs(("s0", "s1"), max_leaves=4), facts=fact_sets(("s0", "s1"), max_size=2))
def test_bound_and_residue_hold_at_every_point_of_a_small_box(expr, facts):
    found, residues = bound(expr, facts=facts, ranges=BOX), residue(expr, facts=facts, ranges=BOX)
    for s0, s1 in itertools.product(range(-4, 10), range(-3, 9)):
        point = {"s0": s0, "s1": s1}
        if not all(holds(f, point) for f in facts):
            continue
        try:
            value = evaluate(expr, point)
        except ArithmeticError:
            continue
        assert value in found, (point, value)
        if residues is not None:
            assert value == int(value) and value in tighten(ValueRange(value, value), residues), (point, value)


def test_bound_and_residue_read_the_facts_and_replacements():
    r = Reasoner()
    r.set_range("s0", 1, 64)
    r.add_fact("Eq(Mod(s0, 8), 0)")
    r.add_fact("Eq(s1, 2*s0 + 1)")
    assert r.bound("s0") == ValueRange(8, 64)
    assert r.bound("s1 // 2") == ValueRange(8, 64)
    assert r.residue("s1") == ModularSet(16, 1)
    assert r.residue("s0 / 3") is None  # not known to be an integer
    assert bound("s2") == ValueRange(-sympy.oo, sympy.oo) and residue("s2") == ModularSet(1, 0)
    with pytest.raises(ArgumentError, match="use prove"):
        r.bound("s0 > 2")


def test_an_expression_defined_nowhere_the_facts_hold_has_no_values():
    # found by brute force: the facts made s0 := 0, and substituting it raised ZeroDivisionError
    assert bound("Mod(s0, s0)**2", facts=["Eq(Mod(s0, 16), 0)"], ranges={"s0": (-4, 9)}).is_empty
    assert residue("s0 // s0", facts=["Eq(s0, 0)"]) == ModularSet(1, 0)


def test_a_longer_timeout_asks_again_rather_than_reading_the_cache():
    r = Reasoner(timeout_ms=1)
    first = r.prove("s0*s1 >= 0")
    r.timeout_ms = 2000
    assert r.prove("s0*s1 >= 0") is not first


def test_prove_repeats_from_its_arguments_as_given_not_from_mutated_ones():
    ranges, facts = {"s0": (0, None)}, ["s1 >= 0"]
    first = prove("s0 + s1 >= 1", facts=facts, ranges=ranges)
    assert first.refuted and prove("s0 + s1 >= 1", facts=facts, ranges=ranges) is first
    ranges["s0"] = (1, None)
    assert prove("s0 + s1 >= 1", facts=facts, ranges=ranges).proved
    facts[0] = "s1 >= -1"
    assert prove("s0 + s1 >= 1", facts=facts, ranges=ranges).refuted
    assert prove("s0 + s1 >= 1", facts=facts, ranges=ranges, timeout_ms=999) is not first


@pytest.mark.parametrize(
    "arguments",
    [
        {"ranges": {"s0": (True, None)}},  # equal to (1, None), and refused where that is accepted
        {"ranges": {"s0": (1.0, None)}},
        {"timeout_ms": True},
        {"facts": [1]},  # equal to [True], a claim
    ],
)
def test_arguments_equal_to_accepted_ones_are_still_refused(arguments):
    accepted = {"facts": [True], "ranges": {"s0": (1, None)}, "timeout_ms": 1}
    prove("s0 >= 1", **accepted)
    with pytest.raises(ArgumentError):
        prove("s0 >= 1", **{**accepted, **arguments})


@pytest.mark.parametrize("span", [(1, None, None), (1,), "ab", 1])
def test_a_span_that_is_no_pair_is_refused_after_a_kept_answer(span):
    prove("s0 >= 1", ranges={"s0": (1, None)})
    with pytest.raises(ArgumentError):
        prove("s0 >= 1", ranges={"s0": span})


def test_prove_takes_unhashable_and_one_shot_arguments():
    assert prove("s0 >= 1", facts=(f for f in ["s0 >= 1"]), ranges={"s0": [0, None]}).proved
    assert prove("s0 >= 1", facts=["s0 >= 1"], ranges={"s0": [0, None]}).proved


@given(assumptions=st.sampled_from([{"integer": True}, {"integer": True, "positive": True}, {"integer": True, "negative": True},
                                    {"real": True}, {}]),
       lo=st.one_of(st.none(), st.integers(-3, 3)), hi=st.one_of(st.none(), st.integers(-3, 3)))
def test_a_range_states_the_facts_sympy_evaluates(assumptions, lo, hi):
    """set_range builds an integer symbol's bounds unevaluated (sympy could not decide them), others as sympy does."""
    symbol = sympy.Symbol("s0", **assumptions)
    r = Reasoner()
    r.set_range(symbol, lo, hi)
    expected = [relation(symbol, value) for relation, value in ((sympy.Ge, lo), (sympy.Le, hi)) if value is not None]
    assert [(type(f), f.args) if f.is_Relational else f for f in r.facts] == [
        (type(f), f.args) if f.is_Relational else f for f in expected]


def test_only_the_most_recently_used_kept_scopes_hold_a_z3_session():
    """Each session's context holds about 16 MB (64 scopes that reached z3 held 1.1 GB): a scope
    pushed out of the most recent few frees its session, and asked again it starts a fresh one."""
    from shapecore import reasoner

    scopes = [[f"u0*u1 > u1 + {k}", "u1 >= 1"] for k in range(reasoner._SESSIONS_KEPT + 3)]
    assert all(prove("Ne(36*u0, 36)", facts=facts).method == "z3" for facts in scopes)
    assert sum(r._z3 is not None for r in reasoner._SCOPES.values()) <= reasoner._SESSIONS_KEPT
    fresh = Reasoner()
    for fact in scopes[0]:
        fresh.add_fact(parse(fact))
    again = prove("Ne(12*u0, 12)", facts=scopes[0])
    assert (again.status, again.method) == ("proved", "z3") == (fresh.prove(parse("Ne(12*u0, 12)")).status, "z3")
