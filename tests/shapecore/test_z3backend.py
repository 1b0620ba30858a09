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


def _answer(facts, claim, budget=None):
    session = Z3Session()
    for fact in facts:
        session.add_fact(fact)
    return session.check(claim, budget or Budget(200))


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


def test_a_session_sees_none_of_an_earlier_sessions_facts_axioms_or_names():
    """Each session names its tracking literals (``!fact0``) and quotients (``!q1``) from the
    start: if two sessions shared a solver or a context's assertions, the earlier one's fact
    ``x >= 5`` and its axiom ``!q1 = x // y`` would decide the later one's claims."""
    earlier = Z3Session()
    earlier.add_fact(sympy.Ge(x, 5))
    earlier.add_fact(sympy.Ge(y, 1))
    assert earlier.check(sympy.Ge(F.FloorDiv(x, y), 0), Budget(500)).status == "unsat"
    later = Z3Session()
    later.add_fact(sympy.Ge(y, 0))  # tracked by !fact0, as the earlier x >= 5 was
    later.add_fact(sympy.Ge(x, 1))
    answer = later.check(sympy.Gt(x, 4), Budget(500))
    assert answer.status == "sat" and answer.model["x"] <= 4
    answer = later.check(sympy.Ne(F.FloorDiv(y, x), 3), Budget(500))  # !q1 = y // x here
    assert answer.status == "sat" and answer.model["y"] // answer.model["x"] == 3


def test_a_session_gets_its_whole_budget_after_one_that_ran_out():
    """A check stopped by its units or by the wall-clock backstop leaves nothing behind (no
    spent units, no cancellation) for the next session's check."""
    cubes = sympy.Ne(x**3 + y**3, F.int_symbol("z") ** 3) | (x < 1) | (y < 1) | (F.int_symbol("z") < 1)
    for budget in (Budget(600_000, units=2000), Budget(30, units=10**12)):
        assert Z3Session().check(cubes, budget).status == "unknown" and budget.outcome in ("resources", "backstop")
        assert _answer([sympy.Ge(x, 5)], sympy.Gt(x, 4)).status == "unsat"


def test_a_sessions_work_does_not_depend_on_the_sessions_before_it():
    """Every session has a z3 context of its own. Measured: z3 orders terms by the ids its
    context gives them, and a context reused after other queries (freed terms, recycled ids)
    took other paths, 672 units for the factoring claim fresh, over 10**8 after six others."""
    queries = [([], sympy.Ne(x * y, 1022117) | (x <= 1) | (y <= 1) | (x > y)),
               ([sympy.Eq(F.Mod(x, 4), 0), sympy.Eq(F.Mod(y, 2), 0)], sympy.Eq(F.Mod(x * y, 8), 0)),
               ([sympy.Gt(x * y, 5)], sympy.Gt(x + y, 4)),
               ([], sympy.Eq(y * F.FloorDiv(x, y), x) | sympy.Ne(F.Mod(x, y), 0))]

    def work(facts, claim):
        budget = Budget(600_000, units=10**6)
        return _answer(facts, claim, budget).status, budget.used

    alone = [work(*query) for query in queries]
    after_others = [work(*query) for query in queries[::-1] + queries][len(queries):]
    assert after_others == alone and all(status != "unknown" for status, _ in alone)
