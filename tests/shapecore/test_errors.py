"""The errors shapecore raises: each is a ShapecoreError and the built-in error callers already
catch, its message names the culprit and the fix (the fix a DataDependentError suggests works),
and it survives pickling with its fields (errors cross process boundaries: multiprocessing,
a rank's failure re-raised by ``lowering.launch``)."""

from __future__ import annotations

import pickle
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
