"""ShapeEnv: PyTorch's verbs, guards in and out, unbacked symbols, JSON."""

import json
import re
import subprocess
import sys

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import (
    ArgumentError,
    ConstraintError,
    DataDependentError,
    GuardInputError,
    ModularSet,
    ParseError,
    ShapeEnv,
    ValueRange,
    holds,
    int_symbol,
    parse,
)
from shapecore.testing import claims, fact_sets, relations, shape_envs

from .folding_text import claim_texts, int_texts
from .oracle import formula


def test_import_does_not_import_torch():
    code = "import sys, shapecore, shapecore.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_symbols_are_named_like_torch():
    env = ShapeEnv()
    assert [env.create_symbol(8), env.create_symbol(4)] == [int_symbol("s0"), int_symbol("s1")]
    assert env.create_unbacked_symbol() == int_symbol("u0")
    assert env.create_symbol(3, name="batch") == int_symbol("batch")
    assert env.create_unbacked_symbol(name="u7") == int_symbol("u7")
    assert env.symbols["u7"].kind == "unbacked"
    assert env.hints == {"s0": 8, "s1": 4, "batch": 3}
    assert env.var_to_range[int_symbol("s0")] == ValueRange(2, float("inf"))


def test_bad_symbols_are_explained():
    env = ShapeEnv()
    with pytest.raises(ConstraintError, match="hint 1 for s0 is outside its range"):
        env.create_symbol(1)
    env.create_symbol(1, min=0)
    with pytest.raises(ConstraintError, match="already exists"):
        env.create_symbol(5, name="s0")
    with pytest.raises(TypeError, match="hint must be an int"):
        env.create_symbol(2.5)


def test_evaluate_expr_decides_statically_or_records_a_guard():
    env = ShapeEnv()
    env.create_symbol(16)
    env.add_fact("Eq(Mod(s0, 4), 0)")
    assert env.evaluate_expr("s0 >= 4") is True and env.guards == []
    assert env.evaluate_expr("Eq(Mod(s0, 8), 0)") is True
    assert env.guards == [parse("Eq(Mod(s0, 8), 0)")]
    assert env.evaluate_expr("s0 > 100") is False
    assert env.guards[-1] == parse("s0 <= 100")
    assert env.evaluate_expr("s0 // 4") == 4
    assert env.statically_known_true("Eq(s0, 16)")


def test_size_hint_records_nothing():
    env = ShapeEnv()
    env.create_symbol(6)
    assert env.size_hint("s0*s0 + 1") == 37
    assert env.guards == []


def test_data_dependent_error_names_expression_symbol_source_and_fix():
    env = ShapeEnv()
    env.create_symbol(8)
    env.create_unbacked_symbol(size_like=True, source="x.nonzero().size(0)")
    with pytest.raises(DataDependentError) as info:
        env.evaluate_expr("u0 > 5")
    error = info.value
    assert (error.expr, error.symbol, error.source) == ("u0 > 5", "u0", "x.nonzero().size(0)")
    assert "env.add_fact('u0 > 5')" in str(error) and "u0 <= 5" in str(error)
    with pytest.raises(DataDependentError):
        env.size_hint("u0 + 1")
    assert env.guard_or_false("u0 > 5") is False
    assert env.guard_or_true("u0 > 5") is True
    assert env.evaluate_expr("u0 >= 0") is True, "size-like unbacked symbols are nonnegative"
    env.add_fact("u0 >= 6")
    assert env.evaluate_expr("u0 > 5") is True


def test_runtime_asserts_are_assumed():
    env = ShapeEnv()
    env.create_symbol(8)
    u0 = env.create_unbacked_symbol()
    assert env.defer_runtime_assert("u0 <= s0", "nonzero count")
    assert env.runtime_asserts[0].expr == sympy.Le(u0, int_symbol("s0"))
    assert env.statically_known_true("u0 < s0 + 1")
    assert env.defer_runtime_assert("u0 <= s0 + 5") and len(env.runtime_asserts) == 1, "implied: not recorded"
    with pytest.raises(ConstraintError, match="can never hold"):
        env.defer_runtime_assert("u0 > s0 + 5")


def test_constraints_are_checked_against_hints_and_each_other():
    env = ShapeEnv()
    env.create_symbol(6, name="batch")
    with pytest.raises(ConstraintError, match="false for the example values"):
        env.add_fact("Eq(Mod(batch, 4), 0)")
    with pytest.raises(ConstraintError, match="excludes its hint"):
        env.constrain_range("batch", max=5)
    env.constrain_range("batch", min=3, max=64)
    assert env.var_to_range[int_symbol("batch")] == ValueRange(3, 64)
    with pytest.raises(KeyError, match="did not create"):
        env.add_fact("s9 > 1")


def test_derived_dims_become_replacements_and_divisibility():
    env = ShapeEnv()
    k = env.create_symbol(8, source="k", max=512)
    env.create_symbol(64, source="x.size()[0]", max=4096)
    env.add_fact("Eq(s1, 8*s0)")
    assert env.replacements == {int_symbol("s1"): 8 * k}
    assert env.var_to_range[int_symbol("s1")] == ValueRange(16, 4096)
    env.evaluate_expr("Eq(Mod(16*s1, 128), 0)")
    assert env.guards == [], "16*8*k is always a multiple of 128"
    env2 = ShapeEnv()
    env2.create_symbol(64)
    env2.add_fact("Eq(16*s0, 128*((s0//8)))")
    assert env2.divisible == {parse("Mod(s0, 8)")}


def test_a_symbol_replaced_by_a_looser_expression_keeps_its_own_range():
    """Routed counts summing to a total: the last is replaced by the total less the others, which
    ranges alone leave unbounded, yet the count's own range (``torch._check(c >= 0)``) still holds."""
    env = ShapeEnv()
    env.create_symbol(6, name="s0", min=2)
    for k in range(4):
        env.create_unbacked_symbol(name=f"u{k}", min=0, max=100 if k == 3 else None)
    env.defer_runtime_assert("Eq(u0 + u1 + u2 + u3, 12*s0)")
    u3 = int_symbol("u3")
    assert env.replacements[u3] == parse("12*s0 - u0 - u1 - u2")
    assert env.var_to_range[u3] == ValueRange(0, 100)
    assert json.loads(env.to_json())["ranges"]["u3"] == [0, 100]


def test_produce_and_check_guards():
    env = ShapeEnv()
    env.create_symbol(16, source="x.size()[0]", max=1024)
    env.create_symbol(6, source="x.size()[1]")
    env.add_fact("Eq(Mod(s0, 4), 0)")
    env.evaluate_expr("s0*s1 > 50")
    sources = {"s0": "x.size()[0]", "s1": "x.size()[1]"}
    assert env.produce_guards(sources) == [
        "x.size()[0] >= 4", "x.size()[0] <= 1024", "x.size()[1] >= 2",
        "x.size()[0] % 4 == 0", "x.size()[0]*x.size()[1] > 50",
    ]
    assert env.check_guards({"s0": 16, "s1": 6}) == []
    violated = env.check_guards({"s0": 6, "s1": 2})
    assert parse("Eq(Mod(s0, 4), 0)") in violated and parse("s0*s1 > 50") in violated
    with pytest.raises(KeyError, match="has no source"):
        env.produce_guards({"s0": "x.size()[0]"})


def test_json_round_trip_is_exact():
    env = ShapeEnv()
    env.create_symbol(8, source="k", max=512)
    env.create_symbol(64, source="x.size()[0]")
    env.create_unbacked_symbol(size_like=True, source="nz")
    env.add_fact("Eq(s1, 8*s0)")
    env.evaluate_expr("s0 > 4")
    env.defer_runtime_assert("u0 <= s1", "count")
    text = env.to_json()
    document = json.loads(text)
    assert document["format"] == "shapecore.ShapeEnv" and document["version"] == 1
    assert document["replacements"] == {"s1": "8*s0"}
    assert document["guards"] == ["s0 > 4"]
    clone = ShapeEnv.from_json(text)
    assert clone.to_json() == text
    assert clone.replacements == env.replacements and clone.var_to_range == env.var_to_range
    assert clone.guards == env.guards and clone.runtime_asserts == env.runtime_asserts


def test_json_version_is_checked():
    document = json.loads(ShapeEnv().to_json())
    document["version"] = 99
    with pytest.raises(ValueError, match="version 99 is not supported"):
        ShapeEnv.from_json(json.dumps(document))


@given(env=shape_envs())
def test_hints_satisfy_every_guard_and_json_round_trips(env):
    assert env.check_guards(env.hints) == []
    assert ShapeEnv.from_json(env.to_json()).to_json() == env.to_json()


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a b", "Max", "Eq", "zf0", "True", "lambda", "ﬁ", "", "s0.x", "1x"])
def test_symbol_names_must_read_back_as_the_symbol(name):
    # 'a b' used to be accepted, and its env's JSON could not be read back.
    env = ShapeEnv()
    with pytest.raises(ArgumentError, match="cannot name a symbol"):
        env.create_symbol(4, name=name)
    with pytest.raises(ArgumentError, match="cannot name a symbol"):
        env.create_unbacked_symbol(name=name)
    assert env.symbols == {}


@given(name=st.text(min_size=1, max_size=6))
def test_every_accepted_name_round_trips_through_json(name):
    env = ShapeEnv()
    try:
        symbol = env.create_symbol(4, name=name)
    except ArgumentError:
        return
    env.evaluate_expr(symbol > 3)
    assert ShapeEnv.from_json(env.to_json()).to_json() == env.to_json()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda env: env.create_symbol(4, source=0), "source must be a str"),
        (lambda env: env.create_symbol(4, max=9.5), "max must be an int or None, got 9.5"),
        (lambda env: env.create_symbol(10**5000), "hint is too large: an integer of 5001 digits"),
        (lambda env: env.constrain_range(0, min=2), "expected a symbol or its name"),
        (lambda env: env.check_guards({"s0": "4"}), r"values\['s0'\] must be an int"),
        (lambda env: env.produce_guards("x.size()[0]"), "sources must map symbols"),
        (lambda env: ShapeEnv(timeout_ms=0), "timeout_ms must be a positive int"),
    ],
)
def test_arguments_that_cannot_work_are_refused(call, message):
    env = ShapeEnv()
    env.create_symbol(4)
    with pytest.raises(ArgumentError, match=message):
        call(env)


def test_big_hints_round_trip():
    env = ShapeEnv()
    env.create_symbol(10**400, max=10**401)
    env.evaluate_expr(f"s0 > {10**400 - 5}")
    assert ShapeEnv.from_json(env.to_json()).to_json() == env.to_json()


def _env_document():
    env = ShapeEnv()
    env.create_symbol(8, source="x.size()[0]")
    env.create_unbacked_symbol()
    env.evaluate_expr("s0 > 4")
    return json.loads(env.to_json())


def _with(change):
    document = _env_document()
    change(document)
    return json.dumps(document, indent=2)


def _at(text, line, column):
    return text.split("\n")[line - 1][column - 1 :]


@pytest.mark.parametrize(
    "text, message, culprit",
    [
        (_with(lambda d: d.update(version=99)), "version: ShapeEnv JSON version 99 is not supported", "99"),
        (_with(lambda d: d.update(symbols={"s0": 8})), "symbols: expected a list, got {", "{"),
        (_with(lambda d: d["symbols"].__setitem__(0, ["s0"])), r"symbols\[0\]: expected an object", "["),
        (_with(lambda d: d["symbols"][0].pop("name")), r"symbols\[0\]: missing field 'name'", "{"),
        (_with(lambda d: d["symbols"][0].update(hint="seven")), r'symbols\[0\].hint: expected an integer, got "seven"', '"seven"'),
        (_with(lambda d: d["symbols"][0].update(hnt=8)), r"symbols\[0\]: unknown field 'hnt'", "{"),
        (_with(lambda d: d["symbols"][0].update(name="a b")), r"symbols\[0\].name: .*cannot name a symbol", '"a b"'),
        (_with(lambda d: d["symbols"][1].update(name="s0")), r"symbols\[1\].name: symbol s0 is listed twice", '"s0"'),
        (_with(lambda d: d["symbols"][1].update(kind="float")), r"symbols\[1\].kind: expected 'backed' or 'unbacked'", '"float"'),
        (_with(lambda d: d["log"][0].update(kind="bogus")), r"log\[0\].kind: expected one of range, fact, guard", '"bogus"'),
        (_with(lambda d: d["log"][1].update(expr=5)), r"log\[1\].expr: expected a string, got 5", "5"),
        (_with(lambda d: d["log"][1].update(expr="s0 >")), r"log\[1\].expr: syntax error", ""),
        (_with(lambda d: d["log"][1].update(expr="s9 > 4")), r"log\[1\].expr: mentions s9, which is not in symbols", '"s9'),
        (_with(lambda d: d["log"].append("s0 > 5")), r"log\[2\]: expected an object", '"s0 > 5"'),
        (_with(lambda d: d.pop("log")), "the document: missing field 'log'", "{"),
        (json.dumps(_env_document(), indent=2).replace('"hint": 8', '"hint": NaN'), "invalid JSON: NaN", "NaN"),
        ("[1, 2]", "the document: expected an object", "["),
    ],
)
def test_malformed_json_is_refused_with_its_place(text, message, culprit):
    # Each used to be accepted silently or to raise AttributeError, KeyError or TypeError.
    with pytest.raises(GuardInputError, match=message) as info:
        ShapeEnv.from_json(text)
    error = info.value
    assert error.where == "<ShapeEnv JSON>" and _at(text, error.line, error.column).startswith(culprit)


def test_a_log_that_contradicts_itself_is_refused_at_its_entry():
    document = _env_document()
    document["log"].append({"kind": "fact", "expr": "s0 <= 1"})
    text = json.dumps(document, indent=2)
    reason = "(contradicts|is false for the example values)"  # the hints are checked first
    with pytest.raises(ConstraintError, match=rf"^<ShapeEnv JSON>:(\d+):(\d+): fact s0 <= 1 {reason}") as info:
        ShapeEnv.from_json(text)
    line, column = (int(n) for n in str(info.value).split(":")[1:3])
    assert _at(text, line, column).startswith("s0 <= 1")


# -- undefined at the hints: raise like Python, record nothing -------------------------------------


def test_a_condition_undefined_at_the_hints_raises_and_records_nothing():
    env = ShapeEnv()
    env.create_symbol(8)
    with pytest.raises(ZeroDivisionError):
        env.evaluate_expr("Mod(s0, s0 - 8) < s0 + 100")
    with pytest.raises(ZeroDivisionError):
        env.evaluate_expr("s0 // (s0 - 8)")
    with pytest.raises(ZeroDivisionError):
        env.size_hint("s0 // (s0 - 8)")
    assert env.guards == []
    assert env.evaluate_expr("Eq(s0, 3)") is False
    assert env.evaluate_expr("s0 < 0") is False
    assert env.evaluate_expr("s0 // (s0 - 6)") == 4


def test_a_division_folded_away_is_still_guarded():
    env = ShapeEnv()
    env.create_symbol(8)
    env.create_symbol(0, min=0)
    with pytest.raises(ZeroDivisionError):
        env.evaluate_expr("s0//s1 - s0//s1")  # Python raises at s1 = 0; sympy would fold it to 0
    with pytest.raises(ZeroDivisionError):
        env.evaluate_expr("s0//s1 - s0//s1 >= 0")
    assert env.guards == []
    env2 = ShapeEnv()
    env2.create_symbol(8)
    env2.create_symbol(3, min=-5)
    assert env2.evaluate_expr("s0//s1 - s0//s1") == 0
    assert env2.check_guards({"s0": 8, "s1": 0}) != [], "the guard must keep s1 != 0"


def test_runtime_asserts_false_at_the_hints_are_rejected():
    env = ShapeEnv()
    env.create_symbol(8)
    env.create_unbacked_symbol(name="u0")
    env.add_fact("Eq(u0, s0)")  # u0 := s0: the example point gives u0 the value 8
    with pytest.raises(ConstraintError, match="false for the example values"):
        env.defer_runtime_assert("Eq(s0, 3)")
    assert env.evaluate_expr("u0 > 5") is True and env.runtime_asserts == []


# -- rejection is atomic ----------------------------------------------------------------------------


def test_a_rejected_fact_leaves_no_trace():
    env = ShapeEnv()
    env.create_symbol(8)
    env.create_unbacked_symbol(min=0, max=10)
    before = env.to_json()
    with pytest.raises(ConstraintError, match="nothing was recorded"):
        env.add_fact("u0 >= 20")
    assert env.to_json() == before
    assert env.evaluate_expr("Eq(s0, 3)") is False and env.prove("u0 <= 10").proved
    with pytest.raises(ConstraintError):
        env.constrain_range("u0", min=4, max=2)  # the first half holds alone; neither is kept
    assert env.var_to_range[int_symbol("u0")] == ValueRange(0, 10)


def test_a_fact_that_can_never_hold_is_rejected_even_when_its_division_is_kept():
    env = ShapeEnv()
    env.create_symbol(0, min=-1)
    env.create_unbacked_symbol(min=-2, max=10)
    with pytest.raises(ConstraintError, match="contradicts"):
        env.add_fact("Ne(0*(s0 // u0), 0)")  # 0 != 0 wherever it is defined
    assert env.evaluate_expr("Eq(s0, 1)") is False


@pytest.mark.parametrize(
    "entry, words",
    [
        ("Eq(s0, s1 + u0)", "s0 = 3"),  # with s0 + s1 == 2 and u0 > 3, s0 must be 3: its hint is 0
        ("Eq(u0, s0)", "u0 > 3 fails"),  # gives u0 the value 0
        ("Eq(u0, s0 // s0)", "undefined"),  # at s0 = 0
    ],
)
def test_an_entry_whose_consequences_exclude_the_hints_is_rejected(entry, words):
    env = ShapeEnv()
    env.create_symbol(0, min=-1)
    env.create_symbol(2, min=-1)
    env.create_unbacked_symbol(min=-2, max=10)
    if entry.startswith("Eq(s0"):
        env.evaluate_expr("s0 + s1")
    env.add_fact("u0 > 3")
    before = env.to_json()
    with pytest.raises(ConstraintError, match=f"inconsistent with the example values.*{re.escape(words)}"):
        env.defer_runtime_assert(entry)
    assert env.to_json() == before and env.check_guards(env.hints) == []


# -- unbacked symbols: some of their values must allow the hints ------------------------------------


def _s27_u14():
    env = ShapeEnv()
    env.create_symbol(27)
    env.create_unbacked_symbol(min=0, max=14)
    return env


@pytest.mark.parametrize("fact", ["s0 <= u0", "s0 < u0 - 20"])
def test_a_fact_no_unbacked_value_allows_at_the_hints_is_refused(fact):
    # Issue 19 B: both were accepted; then s0 <= 14 was True, s0 * 2 raised, Lt(s0, s0) was True.
    env = _s27_u14()
    before = env.to_json()
    with pytest.raises(ConstraintError, match=rf"fact {re.escape(fact)} holds for no values of u0 .*s0=27.*u0 <= 14"):
        env.add_fact(fact)
    assert env.to_json() == before
    assert env.evaluate_expr("s0 <= 14") is False
    assert env.evaluate_expr("s0 * 2") == 54
    assert env.evaluate_expr("Lt(s0, s0)") is False


def test_every_way_of_recording_keeps_some_unbacked_values_allowing_the_hints():
    env = ShapeEnv()
    env.create_symbol(27)
    env.create_unbacked_symbol(min=0, max=14)
    env.create_unbacked_symbol(min=0, max=14)
    env.add_fact("s0 <= u0 + u1")  # u0 + u1 >= 27: (13, 14), (14, 13) or (14, 14)
    before = env.to_json()
    with pytest.raises(ConstraintError, match="holds for no values"):
        env.defer_runtime_assert("u0 + u1 < 27", "sum")
    with pytest.raises(ConstraintError, match="holds for no values"):
        env.constrain_range("u1", max=12)
    with pytest.raises(ConstraintError, match="holds for no values"), env.assuming(["Eq(u0, u1)", "u1 < 14"]):
        raise AssertionError("the block must not run")
    assert env.to_json() == before
    env.constrain_range("u1", max=13)  # u0 = 14, u1 = 13 remain
    with env.assuming("Eq(u1, 13)"):
        with pytest.raises(ConstraintError, match="holds for no values"):
            env.add_fact("u0 < 14")
    env.defer_runtime_assert("u0 + u1 <= 27")
    document = json.loads(env.to_json())
    document["log"].append({"kind": "runtime_assert", "expr": "Eq(u1, u0)"})
    text = json.dumps(document, indent=2)
    with pytest.raises(ConstraintError, match=r"^<ShapeEnv JSON>:\d+:\d+: runtime_assert Eq\(u1, u0\) holds for no values"):
        ShapeEnv.from_json(text)


def test_a_fact_the_first_unbacked_values_miss_is_kept_with_others():
    env = _s27_u14()
    env.add_fact("Eq(s0, 2*u0 + 1)")  # u0 = 13 only, not the first value tried (0)
    with pytest.raises(ConstraintError, match="holds for no values"):
        env.add_fact("u0 < 13")
    env.add_fact("u0 <= 13")
    assert ShapeEnv.from_json(env.to_json()).to_json() == env.to_json()


def test_a_fact_whose_unbacked_values_cannot_be_found_in_time_is_refused():
    env = ShapeEnv(timeout_ms=100)
    env.create_symbol(33)
    for _ in range(3):
        env.create_unbacked_symbol()
    before = env.to_json()
    # 33 is a sum of three cubes, of 16-digit numbers: no search or z3 finds them in 100 ms
    with pytest.raises(ConstraintError, match="could not show within timeout_ms=100 .* larger timeout_ms"):
        env.add_fact("Eq(u0**3 + u1**3 + u2**3, s0)")
    assert env.to_json() == before


def test_an_input_is_never_replaced_by_an_unbacked_value():
    env = ShapeEnv()
    env.create_symbol(8)
    env.create_symbol(5, max=100)
    env.create_unbacked_symbol()
    env.add_fact("Eq(s1, u0)")
    env.add_fact("u0 > 3")
    assert env.replacements == {int_symbol("u0"): int_symbol("s1")}
    assert env.produce_guards({"s0": "a", "s1": "b"}) == ["a >= 2", "b >= 4", "b <= 100", "b > 3"]
    assert env.check_guards({"s0": 8, "s1": 2}) == [parse("s1 >= 4"), parse("s1 > 3")]
    env2 = ShapeEnv()
    env2.create_symbol(0, min=-1)
    env2.create_symbol(0, min=-1)
    env2.create_unbacked_symbol(min=-2, max=10)
    env2.defer_runtime_assert("Eq(s0, s1*u0)")  # only s0 can be isolated: its range stays a guard
    assert env2.produce_guards({"s0": "a", "s1": "b"}) == ["a >= -1", "b >= -1"]


def test_check_guards_reports_a_replacement_undefined_at_the_values():
    env = ShapeEnv()
    env.create_symbol(4)
    env.create_symbol(2)
    env.create_unbacked_symbol()
    env.add_fact("Eq(u0, s0 // s1)")
    assert env.check_guards({"s0": 4, "s1": 2}) == []
    assert env.check_guards({"s0": 4, "s1": 0}) != []


def test_json_round_trip_is_exact_for_guards_that_print_ambiguously():
    env = ShapeEnv()
    env.create_unbacked_symbol(min=0, max=1)
    env.create_symbol(6)
    env.add_fact("Eq(0, (CleanDiv(u0, u0)*(0 // u0)) // CleanDiv(u0, u0))")  # CleanDiv prints as //
    env.evaluate_expr("s0 // s0 - s0 // s0 >= 0")  # kept unevaluated, as written
    text = env.to_json()
    assert ShapeEnv.from_json(text).to_json() == text


def test_pythons_and_or_decide_where_python_does_and_round_trip():
    env = ShapeEnv()
    env.create_symbol(0, min=0)
    assert env.evaluate_expr("s0 == 0 or 10 // s0 > 2") is True  # raised ZeroDivisionError
    assert env.evaluate_expr("s0 != 0 and 10 // s0 > 2") is False
    assert all(holds(guard, {"s0": 0}) for guard in env.guards)
    assert [str(g) for g in env.guards] == ["Eq(s0, 0) or ((10//s0)) > 2", "~(Ne(s0, 0) and ((10//s0)) > 2)"]
    assert env.produce_guards({"s0": "n"})[1:] == ["(n == 0) or (10 // n > 2)", "not ((n != 0) and (10 // n > 2))"]
    text = env.to_json()
    assert ShapeEnv.from_json(text).to_json() == text
    assert env.check_guards({"s0": 0}) == [] and env.check_guards({"s0": 5}) != []


def test_a_data_dependent_decision_names_its_symbol_even_when_folding_hides_it():
    env = ShapeEnv()
    env.create_symbol(1, min=1, max=1)
    env.create_unbacked_symbol(min=-4, max=1)
    with pytest.raises(DataDependentError, match="u0"):
        env.evaluate_expr("Or(((8*s0) // u0) >= 1, ((8*s0) // u0) < 1)")


def _answers(env, queries):
    return [env.prove(q).status for q in queries]


def _agree(first, second):
    return all("unknown" in (a, b) or a == b for a, b in zip(first, second))


@settings(max_examples=max(10, settings.default.max_examples // 3))
@given(
    env=shape_envs(("s0", "s1"), max_facts=2),
    unbacked=st.lists(relations(("s0", "u0"), max_leaves=3, variable_divisors=False), max_size=2),
    fact=relations(("s0", "s1", "u0"), max_leaves=3),
    queries=st.lists(claims(("s0", "s1", "u0"), max_leaves=3), min_size=1, max_size=3),
)
def test_a_rejected_fact_leaves_the_env_answering_as_before(env, unbacked, fact, queries):
    env.create_unbacked_symbol(name="u0", min=-10, max=10)
    for extra in unbacked:
        try:
            env.add_fact(extra)
        except ConstraintError:
            pass
    before, answers = env.to_json(), _answers(env, queries)
    try:
        env.add_fact(fact)
    except ConstraintError:
        assert env.to_json() == before
        assert _agree(_answers(env, queries), answers)
        assert _agree(_answers(ShapeEnv.from_json(before, timeout_ms=200), queries), answers)


@st.composite
def small_hint_envs(draw):
    """Envs whose hints are small (0 included), so that divisors often vanish at the hints."""
    env = ShapeEnv(timeout_ms=200)
    for name in ("s0", "s1"):
        env.create_symbol(draw(st.integers(0, 3)), name=name, min=-1)
    for fact in draw(fact_sets(("s0", "s1"), max_size=2, variable_divisors=False)):
        if holds(fact, env.hints):
            env.add_fact(fact)
    return env


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(env=small_hint_envs(), text=st.one_of(claim_texts(("s0", "s1"), max_leaves=3), int_texts(("s0", "s1"), max_leaves=3)))
def test_evaluate_expr_answers_like_python_and_records_only_what_holds_at_the_hints(env, text):
    hints = env.hints
    try:
        parse(text)
    except ParseError:  # a divisor that is zero as written
        return
    guards = list(env.guards)
    try:
        expected = formula(text)(hints)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            env.evaluate_expr(text)
        assert env.guards == guards, "nothing may be recorded"
        return
    assert env.evaluate_expr(text) == expected
    assert all(holds(g, hints) for g in env.guards)


_STEP = st.one_of(
    st.tuples(st.just("evaluate"), st.one_of(claim_texts(("s0", "s1", "u0"), max_leaves=3), int_texts(("s0", "s1", "u0"), max_leaves=3))),
    st.tuples(st.just("fact"), st.one_of(claim_texts(("s0", "s1", "u0"), max_leaves=2),
                                         st.sampled_from(["u0 >= 20", "Eq(u0, s0)", "u0 <= s1", "Eq(s1, 2*s0)", "u0 > 3",
                                                                          "s0 + s1 + 8 <= u0", "Eq(u0, 4*s1 - 2)"]))),
    st.tuples(st.just("runtime_assert"), claim_texts(("s0", "s1", "u0"), max_leaves=2)),
)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(hints=st.tuples(st.integers(0, 3), st.integers(0, 3)), steps=st.lists(_STEP, max_size=5))
def test_any_sequence_keeps_the_hints_satisfying_every_entry(hints, steps):
    """Whatever is asked, accepted or rejected, the env stays consistent with its example: some
    value of u0 in its range meets every entry with s0 and s1 at their hints."""
    env = ShapeEnv(timeout_ms=100)
    env.create_symbol(hints[0], name="s0", min=-1)
    env.create_symbol(hints[1], name="s1", min=-1)
    env.create_unbacked_symbol(name="u0", min=-2, max=10)
    for kind, text in steps:
        before = env.to_json()
        try:
            if kind == "evaluate":
                env.evaluate_expr(text)
            elif kind == "fact":
                env.add_fact(text)
            else:
                env.defer_runtime_assert(text)
        except (ConstraintError, ParseError, ArithmeticError, DataDependentError):
            assert env.to_json() == before, "a rejection records nothing"
        assert env.check_guards(env.hints) == []
        point = env._example()
        assert all(holds(g, point) for g in env.guards + env.facts if {s.name for s in g.free_symbols} <= set(point))
        entries = env.guards + env.facts + [a.expr for a in env.runtime_asserts]
        assert any(all(holds(e, {**env.hints, "u0": u0}) for e in entries) for u0 in range(-2, 11))
        assert ShapeEnv.from_json(env.to_json(), timeout_ms=100).to_json() == env.to_json()


# -- scoped facts ----------------------------------------------------------------------------------


class _LeaveTheBlock(Exception):
    pass


@settings(max_examples=max(10, settings.default.max_examples // 4))
@given(
    env=shape_envs(("s0", "s1"), max_facts=2),
    facts=fact_sets(("s0", "s1"), max_size=2, variable_divisors=False),
    queries=st.lists(claims(("s0", "s1"), max_leaves=3, variable_divisors=False), min_size=1, max_size=3),
    by_exception=st.booleans(),
)
def test_assumed_facts_hold_inside_the_block_only(env, facts, queries, by_exception):
    facts = [f for f in facts if f is not sympy.false and holds(f, env.hints)]
    before, answers = env.to_json(), _answers(env, queries)
    told = ShapeEnv.from_json(before, timeout_ms=200)
    for fact in facts:
        told.add_fact(fact)
    try:
        with env.assuming(facts):
            assert _agree(_answers(env, queries), _answers(told, queries))
            assert all(env.prove(f).status != "refuted" for f in facts)
            env.create_unbacked_symbol(name="u0", min=0)
            env.evaluate_expr(queries[0])  # a guard recorded inside is forgotten too
            if by_exception:
                raise _LeaveTheBlock
    except _LeaveTheBlock:
        pass
    assert env.to_json() == before
    assert _agree(_answers(env, queries), answers)


def test_assuming_scopes_a_fact():
    env = ShapeEnv()
    env.create_symbol(8)
    with env.assuming("Eq(Mod(s0, 4), 0)"):
        assert env.statically_known_true("Eq(Mod(s0, 2), 0)")
        with env.assuming(["s0 >= 8"]):
            assert env.statically_known_true("s0 > 4")
        assert not env.statically_known_true("s0 > 4")
    assert not env.statically_known_true("Eq(Mod(s0, 2), 0)")


def test_assuming_a_fact_false_at_the_hints_raises_and_changes_nothing():
    env = ShapeEnv()
    env.create_symbol(8)
    before = env.to_json()
    with pytest.raises(ConstraintError, match="s0 < 4 is false"), env.assuming(["s0 >= 4", "s0 < 4"]):
        raise AssertionError("the block must not run")
    assert env.to_json() == before
    assert not env.statically_known_true("s0 >= 4")


def test_bound_and_residue_of_an_env_read_its_ranges_facts_and_guards():
    env = ShapeEnv()
    s0 = env.create_symbol(16)
    env.add_fact("Eq(Mod(s0, 8), 0)")
    assert env.evaluate_expr(s0 <= 64) is True  # a guard, known from now on
    assert env.bound(2 * s0 + 1) == ValueRange(17, 129)
    assert env.residue(2 * s0 + 1) == ModularSet(16, 1)


def test_a_float_valued_expression_evaluates_to_its_float_and_guards_it():
    env = ShapeEnv()
    env.create_symbol(3)
    assert env.evaluate_expr("1.5") == 1.5 and env.guards == []
    assert env.evaluate_expr("s0 + 0.5") == 3.5
    assert [str(g) for g in env.guards] == ["Eq(s0 + 0.5, 3.5)"]
    with pytest.raises(ConstraintError, match="inf at the hints"):
        env.evaluate_expr("s0 * 1e308 * 10")


def test_a_data_dependent_claim_whose_replacements_zero_a_divisor_names_its_unbacked_symbol():
    env = ShapeEnv()
    env.create_unbacked_symbol(min=2, max=12)
    env.create_symbol(-1, min=-1, max=-1)  # s0 := -1, so s0 // (s0 + 1) divides by 0 once substituted
    with pytest.raises(DataDependentError, match="unbacked symbol u0"):
        env.evaluate_expr("(s0 % (u0 - 5) >= s0) or (s0 // (s0 + 1) >= u0 % s0)")


def test_a_data_dependent_size_suggests_a_fact_that_fixes_it():
    env = ShapeEnv()
    env.create_unbacked_symbol(min=0, max=12)
    with pytest.raises(DataDependentError) as caught:
        env.size_hint("u0 * 2")
    assert "e.g. ," not in str(caught.value) and "env.add_fact('Eq(u0, ...)')" in str(caught.value)


def test_max_with_a_float_operand_is_a_float_wherever_the_facts_allow():
    """Fuzzer cases: Max(s2, 4, 8.0) at s2 = 8 is a tie, which sympy's order broke to an int's
    type, and FloorDiv(Max(s1, 6.0, s0), -18) was an int at the hints, a float elsewhere."""
    env = ShapeEnv()
    env.create_symbol(1, min=-1, max=2)
    env.create_symbol(5, min=3, max=10)
    env.create_symbol(8, min=-1, max=8)
    assert repr(env.evaluate_expr("((8 - s1)*Max(s2, 4, 8.0))")) == "24.0"
    assert repr(env.evaluate_expr("FloorDiv(Max(s1, 6.0, s0), ((-3)*6))")) == "-1.0"


def test_a_remainder_of_a_float_is_python_s_rounded_one():
    """Fuzzer case: 0.1 % -1 is -0.9 in Python (rounded); the exact remainder, a different
    fraction, was taken as the value and as a congruence, so its own guard contradicted itself."""
    env = ShapeEnv()
    assert env.evaluate_expr("(-((0.1) % (-1)))") == -(0.1 % -1)
    assert env.evaluate_expr("Eq(Mod(0.1, -1), -0.9)") is (0.1 % -1 == -0.9)
