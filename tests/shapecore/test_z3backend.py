"""z3backend: the integer encoding agrees with exact evaluation (``shapecore.evaluation.holds``)."""

import itertools

import sympy
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore.budget import Budget
from shapecore.evaluation import holds
from shapecore.testing import claims, fact_sets
from shapecore.z3backend import Translator, Z3Session, smtlib_script

NAMES = ("s0", "s1")
BOX = [dict(zip(NAMES, point)) for point in itertools.product(range(-6, 7), repeat=len(NAMES))]
SMALL = {"max_leaves": 3, "constants": (-6, 6), "divisors": (-4, 6)}
x, y = F.int_symbol("x"), F.int_symbol("y")


def _answer(facts, claim):
    session = Z3Session()
    for fact in facts:
        session.add_fact(fact)
    return session.check(claim, Budget(200))


@settings(max_examples=40, deadline=None)
@given(facts=fact_sets(NAMES, max_size=2, **SMALL), claim=claims(NAMES, **SMALL))
def test_answers_agree_with_evaluation_on_a_box(facts, claim):
    answer = _answer(facts, claim)
    if answer.status == "unsat":  # proved: the claim holds wherever the facts of the core hold
        core = [facts[i] for i in answer.core]
        for point in BOX:
            if all(holds(f, point) for f in core):
                assert holds(claim, point), (point, core)
    elif answer.status == "sat":  # refuted: the model is a genuine counterexample
        point = {name: answer.model.get(name, 0) for name in NAMES}
        assert all(holds(f, point) for f in facts), point
        assert not holds(claim, point), point


@settings(max_examples=25, deadline=None)
@given(facts=fact_sets(NAMES, max_size=2, **SMALL), claim=claims(NAMES, **SMALL))
def test_smtlib_script_is_unsat_exactly_when_the_session_proves(facts, claim):
    answer = _answer(facts, claim)
    if answer.status == "unknown":
        return
    solver = z3.Solver()
    solver.from_string(smtlib_script(facts, claim))
    solver.set("timeout", 2000)
    result = solver.check()
    if result != z3.unknown:
        assert (result == z3.unsat) == (answer.status == "unsat")


def test_a_division_by_a_symbol_is_defined_only_where_it_is_nonzero():
    translator = Translator(z3.Context())
    _, defined = translator.term(F.FloorDiv(x, y))
    assert len(defined) == 1
    solver = z3.Solver(ctx=translator.ctx)
    solver.add(translator.symbol("y") == 0, *defined)
    assert solver.check() == z3.unsat


def test_floor_division_and_modulo_share_one_quotient():
    translator = Translator(z3.Context())
    quotient, _ = translator.term(F.FloorDiv(x, y))
    remainder, _ = translator.term(F.Mod(x, y))
    solver = z3.Solver(ctx=translator.ctx)
    xs, ys = translator.symbol("x"), translator.symbol("y")
    solver.add(*translator.axioms, ys != 0, xs != ys * quotient + remainder)
    assert solver.check() == z3.unsat


@settings(max_examples=30, deadline=None)
@given(a=st.integers(-30, 30), d=st.integers(-9, 9).filter(bool))
def test_constant_divisor_rounds_as_python(a, d):
    translator = Translator(z3.Context())
    quotient, _ = translator.term(F.FloorDiv(x, d))
    remainder, _ = translator.term(F.Mod(x, d))
    solver = z3.Solver(ctx=translator.ctx)
    solver.add(*translator.axioms, translator.symbol("x") == a)
    assert solver.check() == z3.sat
    model = solver.model()
    assert model.eval(quotient).as_long() == a // d
    assert model.eval(remainder).as_long() == a % d


def test_core_names_only_the_facts_the_proof_used():
    session = Z3Session()
    session.add_fact(sympy.Ge(y, 0))  # irrelevant to the claim
    session.add_fact(sympy.Eq(F.Mod(x, 8), 0))
    answer = session.check(sympy.Eq(F.Mod(x, 4), 0), Budget(500))
    assert answer.status == "unsat"
    assert answer.core == (1,)


def test_an_opaque_term_is_unconstrained_so_a_false_claim_about_it_is_not_proved():
    claim = sympy.Eq(F.FloorToInt(F.ToFloat(x)), x + 1)  # false everywhere; outside the integer encoding
    assert not any(holds(claim, {"x": v}) for v in range(-5, 6))
    assert Z3Session().check(claim, Budget(200)).status != "unsat"


def test_a_division_with_a_float_operand_is_not_proved_at_exact_values():
    """Fuzzer case: Python divides -1152921504606846977.0 by x = -(2**60 + 3) in floats (x is
    rounded to -2**60 first: quotient 1.0); the exact quotient's floor is 0, which z3 proved."""
    big = F.float_number(-1152921504606846977.0)
    answer = _answer([sympy.Le(x, -(2**60) - 3)], sympy.Le(F.FloorDiv(big, x), 0))
    assert answer.status != "unsat"


def test_an_opaque_division_is_defined_only_where_its_divisor_is_nonzero():
    """Fuzzer case: Not(A > 0 and A <= 0) with A = Mod(x + 4.0, x + 4) (opaque: a float operand)
    was proved, though at x = -4 it divides by zero."""
    translator = Translator(z3.Context())
    for expr in (F.Mod(F.add(x, F.float_number(4.0)), x + 4), F.IntTrueDiv(1, y)):
        _, defined = translator.term(expr)
        assert defined, expr
    claim = "Not(And(Mod((x - (-4.0)), (x - (-4))) > 0, Mod((x - (-4.0)), (x - (-4))) <= 0))"
    from shapecore import prove

    assert prove(claim, ranges={"x": (-7, 2)}).status == "refuted"
