"""Every layer covers every registered operation, and names none the registry lacks.

One sample node per operation (:data:`SAMPLES`) goes through each layer: evaluation, both
printers (read back), z3 (interpreted exactly, or opaque where the registry says so), ranges,
modular analysis and canonicalization. A new operation fails here until it is registered in
:mod:`shapecore.operations` and each layer has a rule for it.
"""

import functools

import pytest
import sympy
import z3
from hypothesis import given, settings

import shapecore.testing as strategies

import shapecore.functions as F
from shapecore import evaluate, parse, python_str
from shapecore.modular import ANY, ModularSet, modular_set
from shapecore.operations import (
    BY_CLASS,
    CALL_NAMES,
    FLOAT_FUNCTIONS,
    NONCANONICAL,
    OPERATIONS,
    SHORT_CIRCUITS,
    Kind,
    Operation,
)
from shapecore.printing import PYTHON_NAMESPACE, _PythonPrinter
from shapecore.ranges import UNBOUNDED, ValueRange, bound, decide, is_infinite
from shapecore.rewrite import _REWRITABLE, canonicalize, divisors, needs_rewriting
from shapecore.z3backend import Translator

s0, s1 = F.int_symbol("s0"), F.int_symbol("s1")
zf0 = F.float_symbol("zf0")
VALUES = {"s0": 12, "s1": 5, "zf0": 2.5}

SAMPLES: dict[type, sympy.Basic] = {
    sympy.Add: s0 + 2 * s1,
    sympy.Mul: 3 * s0 * s1,
    sympy.Pow: s0**2,
    F.FloorDiv: F.FloorDiv(s0, s1),
    F.CleanDiv: F.CleanDiv(s0, 4),
    F.CeilDiv: F.CeilDiv(s0, s1),
    F.Mod: F.Mod(s0, s1),
    F.PythonMod: F.PythonMod(s0, s1),
    F.ModularIndexing: F.ModularIndexing(s0, 2, s1),
    F.Max: F.Max(s0, s1),
    F.Min: F.Min(s0, s1),
    sympy.Eq: sympy.Eq(s0, s1 + 7),
    sympy.Ne: sympy.Ne(s0, s1),
    sympy.Lt: sympy.Lt(s0, s1),
    sympy.Le: sympy.Le(s0, s1),
    sympy.Gt: sympy.Gt(s0, s1),
    sympy.Ge: sympy.Ge(s0, s1),
    sympy.And: sympy.And(s0 > 2, s1 < 7),
    sympy.Or: sympy.Or(s0 < 2, s1 < 7),
    sympy.Not: sympy.Not(sympy.And(s0 > 2, s1 < 7)),  # Not of a relation flips it
    # at s1 = 5 the first part decides, and the second, which divides by zero there, is never evaluated
    F.PythonAnd: F.PythonAnd(sympy.Ne(s1, 5), F.FloorDiv(s0, s1 - 5) > 1),
    F.PythonOr: F.PythonOr(sympy.Eq(s1, 5), F.FloorDiv(s0, s1 - 5) > 1),
    F.ToFloat: F.ToFloat(s0),
    F.IntTrueDiv: F.IntTrueDiv(s0, s1),
    F.FloatTrueDiv: F.FloatTrueDiv(zf0, s1),
    F.TruncToInt: F.TruncToInt(zf0),
    F.FloorToInt: F.FloorToInt(zf0),
    F.CeilToInt: F.CeilToInt(zf0),
    F.RoundToInt: F.RoundToInt(zf0),
    F.TruncToFloat: F.TruncToFloat(zf0),
    F.FloatAdd: F.FloatAdd(zf0, s0),
    F.FloatMul: F.FloatMul(zf0, s0),
    F.FloatPow: F.FloatPow(zf0, s1),
}
"""One node of each operation over ``s0``, ``s1`` (integers) and ``zf0`` (a float)."""

RANGES = {s0: ValueRange(10, 14), s1: ValueRange(3, 6)}
POINT = {s0: ValueRange.point(12), s1: ValueRange.point(5)}
CONSTANTS = {s0: ModularSet(0, 12), s1: ModularSet(0, 5)}

ids = [op.cls.__name__ for op in OPERATIONS]


def of_kind(*kinds: Kind) -> list[Operation]:
    return [op for op in OPERATIONS if op.kind in kinds]


def test_every_operation_is_registered_once_and_has_a_sample():
    assert len(BY_CLASS) == len(OPERATIONS)
    assert {type(sample) for sample in SAMPLES.values()} == set(SAMPLES) == set(BY_CLASS)


def test_every_vocabulary_class_is_registered():
    classes = {getattr(F, name) for name in F.__all__}
    operations = {c for c in classes if isinstance(c, type) and issubclass(c, sympy.Basic) and not issubclass(c, sympy.Atom)}
    assert operations - set(BY_CLASS) == set()
    assert set(F._FLOAT_RESULTS) | set(F._INTEGER_RESULTS) == set(FLOAT_FUNCTIONS)


def test_registry_is_consistent():
    for op in OPERATIONS:
        sample = SAMPLES[op.cls]
        if op.arity is not None:
            assert len(sample.args) == op.arity, op
        if op.divisors is not None:
            assert {a for a in sample.args[op.divisors] if not a.is_Number} <= divisors(sample)
    assert all(name.isidentifier() for name in CALL_NAMES)


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_evaluation_computes_the_registered_semantics(op):
    sample = SAMPLES[op.cls]
    if op.kind is Kind.SHORT_CIRCUIT:  # its parts, unevaluated: it evaluates those it reaches
        arguments = [functools.partial(evaluate, a, VALUES) for a in sample.args]
    else:
        arguments = [evaluate(a, VALUES) for a in sample.args]
    assert evaluate(sample, VALUES) == op.python(*arguments)


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_torch_text_reads_back_with_the_same_value(op):
    sample = SAMPLES[op.cls]
    again = parse(str(sample))
    assert evaluate(again, VALUES) == evaluate(sample, VALUES)
    assert str(parse(str(again))) == str(again)


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_python_source_computes_the_same_value(op):
    sample = SAMPLES[op.cls]
    assert eval(python_str(sample), {**PYTHON_NAMESPACE, **VALUES}) == evaluate(sample, VALUES)


def test_python_printer_prints_only_registered_operations():
    atoms = {"Symbol", "Integer", "Rational", "Float", "BooleanTrue", "BooleanFalse"}
    printed = {name.removeprefix("_print_") for name in vars(_PythonPrinter) if name.startswith("_print_")}
    assert printed - atoms <= {op.cls.__name__ for op in OPERATIONS}


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_call_names_read_as_the_operation(op):
    for name in op.names:
        arguments = ", ".join(str(a) for a in SAMPLES[op.cls].args)
        assert parse(f"{name}({arguments})") == SAMPLES[op.cls]


def _z3_value(expr: sympy.Basic) -> tuple[str, object]:
    """``("opaque", None)`` when z3 gets a fresh variable for ``expr``, else its forced value."""
    translator = Translator(z3.Context())
    value, _ = translator.term(expr)
    if "!opaque" in value.sexpr():
        return "opaque", None
    solver = z3.Solver(ctx=translator.ctx)
    solver.add(*translator.axioms)
    solver.add(*(translator.symbols[s.name] == VALUES[s.name] for s in expr.free_symbols))
    assert solver.check() == z3.sat
    result = solver.model().eval(value, model_completion=True)
    solver.add(value != result)
    assert solver.check() == z3.unsat, f"z3 does not force the value of {expr}"
    return "exact", result


REASONED = (Kind.INTEGER, Kind.RELATION, Kind.CONNECTIVE, Kind.SHORT_CIRCUIT)


@pytest.mark.parametrize("op", of_kind(*REASONED), ids=lambda op: op.cls.__name__)
def test_z3_encodes_every_reasoned_operation_exactly(op):
    sample = SAMPLES[op.cls]
    kind, value = _z3_value(sample)
    assert kind == "exact"
    expected = evaluate(sample, VALUES)
    assert (z3.is_true(value) if isinstance(expected, bool) else value.as_long()) == expected


@pytest.mark.parametrize("op", of_kind(Kind.FLOAT), ids=lambda op: op.cls.__name__)
def test_z3_keeps_every_float_operation_opaque(op):
    assert _z3_value(SAMPLES[op.cls])[0] == "opaque"


def test_z3_keeps_an_unregistered_function_opaque():
    assert _z3_value(sympy.Function("Unknown", integer=True)(s0))[0] == "opaque"


def test_evaluation_refuses_an_unregistered_function():
    with pytest.raises(TypeError, match="not in shapecore's vocabulary"):
        evaluate(sympy.Function("Unknown", integer=True)(s0), VALUES)


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_canonicalize_keeps_canonical_operations_and_rewrites_the_others(op):
    sample = SAMPLES[op.cls]
    canonical = canonicalize(sample)
    assert (canonical == sample) is op.canonical
    assert not any(type(node) in NONCANONICAL for node in sympy.preorder_traversal(canonical))
    assert evaluate(canonical, VALUES) == evaluate(sample, VALUES)


@pytest.mark.parametrize("op", of_kind(Kind.INTEGER), ids=lambda op: op.cls.__name__)
def test_ranges_bound_every_integer_operation(op):
    canonical = canonicalize(SAMPLES[op.cls])
    found = bound(canonical, RANGES)
    assert not (is_infinite(found.lo) or is_infinite(found.hi)), found
    assert evaluate(canonical, VALUES) in found


@pytest.mark.parametrize("op", of_kind(Kind.SHORT_CIRCUIT), ids=lambda op: op.cls.__name__)
def test_z3_states_where_each_short_circuit_is_defined(op):
    translator = Translator(z3.Context())
    holds, negation_holds = translator.holds(SAMPLES[op.cls]), translator.holds(sympy.Not(SAMPLES[op.cls]))
    solver = z3.Solver(ctx=translator.ctx)
    solver.add(*translator.axioms, *(translator.symbol(n) == v for n, v in VALUES.items() if n != "zf0"))
    solver.add(z3.Or(holds, negation_holds))  # defined at VALUES, where the second part divides by zero
    assert solver.check() == z3.sat


@pytest.mark.parametrize("op", of_kind(Kind.RELATION, Kind.CONNECTIVE, Kind.SHORT_CIRCUIT), ids=lambda op: op.cls.__name__)
def test_ranges_decide_every_relation_and_connective(op):
    sample = SAMPLES[op.cls]
    assert decide(sample, POINT) is evaluate(sample, VALUES)


@pytest.mark.parametrize("op", of_kind(Kind.FLOAT), ids=lambda op: op.cls.__name__)
def test_ranges_and_modular_keep_every_float_operation_opaque(op):
    sample = SAMPLES[op.cls]
    assert bound(sample, POINT) == UNBOUNDED
    assert modular_set(sample, CONSTANTS) in (None, ANY)


@pytest.mark.parametrize("op", of_kind(Kind.INTEGER), ids=lambda op: op.cls.__name__)
def test_modular_analysis_reads_every_integer_operation(op):
    canonical = canonicalize(SAMPLES[op.cls]).xreplace({s1: sympy.Integer(5)})  # it reads constant divisors
    found = modular_set(canonical, CONSTANTS)
    assert found is not None and found.coeff != 1, found  # says more than "some integer"
    value = evaluate(canonical, VALUES)
    assert found.coeff == 0 and found.base == value or found.coeff and (value - found.base) % found.coeff == 0


def test_simplifier_rewrites_exactly_the_integer_functions():
    functions = {op.cls for op in of_kind(Kind.INTEGER)} - {sympy.Add, sympy.Mul, sympy.Pow}
    assert _REWRITABLE == functions
    assert all(needs_rewriting(SAMPLES[cls]) for cls in functions)


def test_hypothesis_strategies_reach_every_reasoned_operation():
    seen: set[type] = set()

    @settings(max_examples=200, database=None, derandomize=True)
    @given(strategies.int_exprs(), strategies.claims())
    def collect(expr, claim):
        for tree in (expr, claim):
            seen.update(type(node) for node in sympy.preorder_traversal(tree))

    collect()
    assert {op.cls for op in OPERATIONS if op.kind is not Kind.FLOAT} <= seen  # floats: opaque to the reasoner


def test_torch_tables_translate_only_registered_operations():
    from shapecore.torch import expressions

    constructors = set(BY_CLASS) | {F.add, F.mul, F.power, expressions._identity}
    assert set(expressions._to_torch_table()) == set(BY_CLASS) - set(SHORT_CIRCUITS)  # torch has no and/or
    assert set(expressions._from_torch_table().values()) <= constructors


@pytest.mark.parametrize("op", OPERATIONS, ids=ids)
def test_torch_round_trip_keeps_the_value(op):
    from shapecore.torch.expressions import map_expr, to_torch

    sample = SAMPLES[op.cls]
    if op.kind is Kind.SHORT_CIRCUIT:  # torch's sympy has no short circuit: refused, not made strict
        with pytest.raises(TypeError, match=f"torch's vocabulary has no {op.cls.__name__}"):
            to_torch(sample)
        return
    assert evaluate(map_expr(to_torch(sample)), VALUES) == evaluate(sample, VALUES)
