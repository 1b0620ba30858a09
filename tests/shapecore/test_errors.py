"""The errors shapecore raises: each is a ShapecoreError and the built-in error callers already
catch, its message names the culprit and the fix (the fix a DataDependentError suggests works),
and it survives pickling with its fields (errors cross process boundaries: multiprocessing,
a rank's failure re-raised by ``lowering.launch``), as every public error of shapecore, planner
and lowering does, found by walking their modules."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re

import pytest

from shapecore import (
    ArgumentError,
    ConstraintError,
    DataDependentError,
    GuardInputError,
    ParseError,
    ShapecoreError,
    ShapeEnv,
    UnboundSymbolError,
    evaluate,
    parse,
    prove,
)
from shapecore.guard_input import read_guard_set


def _raised(call):
    with pytest.raises(ShapecoreError) as caught:
        call()
    return caught.value


def _data_dependent():
    env = ShapeEnv()
    env.create_unbacked_symbol(source="x.item()")
    return _raised(lambda: env.evaluate_expr("u0 >= 0"))


RAISED = {
    "parse": lambda: _raised(lambda: parse("s0 +* 2")),
    "unbound": lambda: _raised(lambda: evaluate(parse("s0 + 1"), {})),
    "data dependent": _data_dependent,
    "constraint": lambda: _raised(lambda: ShapeEnv().create_symbol(1)),
    "guard input": lambda: _raised(lambda: read_guard_set("s0 >= 2\ns0 +\n", where="g.txt")),
    "argument": lambda: _raised(lambda: prove("x > 1", facts="x > 2")),
}


@pytest.mark.parametrize("case, kind, builtins", [
    ("parse", ParseError, (ValueError,)),
    ("unbound", UnboundSymbolError, (KeyError,)),
    ("data dependent", DataDependentError, (RuntimeError,)),
    ("constraint", ConstraintError, (ValueError,)),
    ("guard input", GuardInputError, (ValueError,)),
    ("argument", ArgumentError, (TypeError, ValueError)),
])
def test_each_error_is_the_builtin_error_callers_catch(case, kind, builtins):
    error = RAISED[case]()
    assert type(error) is kind and isinstance(error, builtins)


@pytest.mark.parametrize("case, message", [
    ("parse", r"^1:5: syntax error"),
    ("unbound", r"^no value for symbol 's0': pass it in the assignment$"),
    ("data dependent", r"^cannot decide u0 >= 0: it depends on unbacked symbol u0 \(from x\.item\(\)\), which has no hint.*"
                       r"env\.add_fact\('u0 >= 0'\) or env\.add_fact\('u0 < 0'\).*env\.constrain_range\(u0, min=\.\.\., max=\.\.\.\)"),
    ("constraint", r"^hint 1 for s0 is outside its range \[2, inf\]; pass min=/max= that include it"),
    ("guard input", r"^g\.txt:2:\d+: "),
    ("argument", r"^facts must be a list of guards .* got 'x > 2'; for one guard pass a list: facts=\['x > 2'\]$"),
])
def test_each_message_names_the_culprit_and_what_to_do(case, message):
    assert re.search(message, str(RAISED[case]())), str(RAISED[case]())


def test_the_fields_locate_the_culprit():
    error = RAISED["parse"]()
    assert (error.line, error.column, error.token, error.text) == (1, 5, "*", "s0 +* 2")
    error = RAISED["guard input"]()
    assert (error.where, error.line) == ("g.txt", 2) and str(error) == f"g.txt:2:{error.column}: {error.message}"
    assert RAISED["unbound"]().name == "s0"


def test_each_fix_a_data_dependent_error_suggests_settles_the_decision():
    error = _data_dependent()
    assert (error.expr, error.symbol, error.source) == ("u0 >= 0", "u0", "x.item()")
    for suggestion, answer in zip(error.suggestions, (True, False)):
        env = ShapeEnv()
        env.create_unbacked_symbol(source="x.item()")
        env.add_fact(suggestion)
        assert env.evaluate_expr("u0 >= 0") is answer


@pytest.mark.parametrize("case", list(RAISED))
def test_each_error_survives_pickling_with_its_message_and_fields(case):
    error = RAISED[case]()
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)


def _public_errors() -> set[type[BaseException]]:
    """Every exception class a public module of shapecore, planner or lowering defines under a public name."""
    found = set()
    for package in ("shapecore", "planner", "lowering"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if any(part.startswith("_") for part in module.name.split(".")):
                continue
            for name, value in vars(importlib.import_module(module.name)).items():
                if (isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
                        and value.__module__ == module.name):
                    found.add(value)
    return found


def _examples() -> dict[type[BaseException], BaseException]:
    """One instance of every public error, made as the code that raises it makes it."""
    import sympy

    from lowering import GuardViolation, InputError, LaunchTimeout, LoweringError, RankFailure, RankMismatch
    from planner import MemoryBreakdown, MemoryBudgetError
    from planner.placement_constraints import MinShards, Pin, PlacementConflict
    from shapecore.cli import UsageError
    from shapecore.torch.expressions import UnmappableExpressionError
    from shapecore.torch.tracing import DataDependentBranchError

    x = sympy.Symbol("x", integer=True)
    made = [RAISED[case]() for case in RAISED] + [
        ShapecoreError("a message"),
        UsageError("g.txt:1:2: unexpected token"),
        UnmappableExpressionError(sympy.Function("f")(x), sympy.Function("f")(x) + 1, "to torch"),
        PlacementConflict("they conflict on fc1.weight", (Pin("fc1.weight", "R"), MinShards(2)), "fc1.weight"),
        MemoryBudgetError(1e6, MemoryBreakdown(parameters=2e6, activations=5e5, point={"batch": 8}, node="mm_1"), True),
        LoweringError("node relu: the local result has shape [4*b0, 8] but placement R"),
        GuardViolation("batch 6 breaks Eq(Mod(s0, 4), 0)", guard="Eq(Mod(s0, 4), 0)", values={"s0": 6}),
        RankMismatch("rank 1 passed a batch of 8, rank 0 of 16"),
        InputError("input 0 (x): expected float32, got float64"),
        LaunchTimeout("rank(s) 1 of 2 did not finish in time"),
        RankFailure("rank 1 exited with code -9"),
        DataDependentBranchError("model.py:12: `if counts[0] == 0:` branches on Eq(u0, 0), which only the data decides"),
    ]
    return {type(error): error for error in made}


def test_every_public_error_of_the_packages_survives_pickling_with_its_message_and_fields():
    examples = _examples()
    assert _public_errors() <= examples.keys(), "an error class with no example here: add one"
    for kind, error in examples.items():
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is kind and str(copy) == str(error) and copy.args == error.args, kind
        assert _plain(vars(copy)) == _plain(vars(error)), kind


def _plain(value):
    """``value`` comparable by content: an object equal only to itself as its type and fields."""
    if isinstance(value, (list, tuple)):
        return type(value), [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if type(value).__eq__ is object.__eq__ and hasattr(value, "__dict__"):
        return type(value), _plain(vars(value))
    return value
