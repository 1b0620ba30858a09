"""Expressions across the bridge: torch's classes to shapecore's and back, the guard corpus, traced sizes."""

import glob
import inspect
import itertools
import json
import os
import random
import re

import pytest
import sympy
import torch
import torch.utils._sympy.functions as T
from hypothesis import assume, example, given
from hypothesis import strategies as st
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic
from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity, int_oo

from shapecore import evaluate, int_symbol, parse
from shapecore import functions as F
from shapecore.testing import claims
from shapecore.torch import UnmappableExpressionError, map_expr, size_expr, to_symint, to_torch
from tests.corpus import CORPUS

S0, S1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
U0 = sympy.Symbol("u0", integer=True)

MAPPED = [
    (T.FloorDiv(S0, S1), F.FloorDiv),
    (T.CleanDiv(S0, S1), F.CleanDiv),
    (T.Mod(S0, S1), F.Mod),
    (T.PythonMod(U0, S1), F.PythonMod),
    (T.ModularIndexing(S0, S1, 8), F.ModularIndexing),
    (T.Max(S0, S1), F.Max),
    (T.Min(S0, U0), F.Min),
    (T.ToFloat(S0), F.ToFloat),
    (T.IntTrueDiv(S0, S1), F.IntTrueDiv),
    (T.FloatTrueDiv(T.ToFloat(S0), T.ToFloat(S1)), F.FloatTrueDiv),
    (T.TruncToInt(T.IntTrueDiv(S0, S1)), F.TruncToInt),
    (T.FloorToInt(T.IntTrueDiv(S0, S1)), F.FloorToInt),
    (T.CeilToInt(T.IntTrueDiv(S0, S1)), F.CeilToInt),
    (T.RoundToInt(T.IntTrueDiv(S0, S1)), F.RoundToInt),
    (T.TruncToFloat(T.IntTrueDiv(S0, S1)), F.TruncToFloat),
]


@pytest.mark.parametrize("torch_expr, cls", MAPPED, ids=lambda x: getattr(x, "__name__", ""))
def test_torch_functions_map_to_shapecore_classes_and_back(torch_expr, cls):
    mapped = map_expr(torch_expr)
    assert type(mapped) is cls
    assert str(mapped) == str(torch_expr)
    assert all(s.is_integer and not s.is_positive for s in mapped.free_symbols), "shapecore symbols are integer only"
    assert to_torch(mapped) == torch_expr


def test_pow_by_natural_identity_and_ceil_div_keep_their_value():
    assert map_expr(T.PowByNatural(S0, 3)) == int_symbol("s0") ** 3
    assert map_expr(T.Identity(S0 + 1)) == int_symbol("s0") + 1
    s0, s1 = int_symbol("s0"), int_symbol("s1")
    assert map_expr(sympy.Eq(T.Mod(S0 + 2 * S1, 8), 0)) == sympy.Eq(F.Mod(s0 + 2 * s1, 8), 0)
    # exact wherever torch's symbols are what it assumes: a backed size (s1) is positive, an unbacked
    # one (u1) of either sign; the numerator of either sign
    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3)]:
        divisor = s1 if b > 0 else int_symbol("u1")
        torch_expr = to_torch(F.CeilDiv(s0, divisor))
        torch_value = torch_expr.xreplace(dict(zip(sorted(torch_expr.free_symbols, key=str), (a, b))))
        assert torch_value == evaluate(F.CeilDiv(s0, divisor), {"s0": a, divisor.name: b}) == -(-a // b)


def test_float_arithmetic_maps_to_pythons_and_back():
    torch_expr = T.TruncToInt(sympy.Float(0.5) * T.ToFloat(S0) + sympy.Float(0.25))
    ours = map_expr(torch_expr)
    assert isinstance(ours.args[0], F.FloatAdd) and str(ours) == str(torch_expr)
    assert evaluate(ours, {"s0": 7}) == int(torch_expr.subs(S0, 7))
    assert to_torch(ours) == torch_expr
    assert map_expr(S0 * 2 + 1) == 2 * int_symbol("s0") + 1, "exact arithmetic stays sympy's"


def test_float_pow_maps_to_pythons_and_back_with_torchs_values():
    torch_expr = T.FloatPow(T.ToFloat(S0), T.FloatTrueDiv(T.ToFloat(S1), sympy.Float(-2.0)))
    ours = map_expr(torch_expr)
    assert isinstance(ours, F.FloatPow), "printed as Python's a**b, which guard code evaluates"
    for a, b in [(2, 1), (3, 4), (9, 3), (1, 40)]:
        torch_value = float(torch_expr.xreplace({S0: a, S1: b}))
        assert evaluate(ours, {"s0": a, "s1": b}) == torch_value
    assert to_torch(ours) == torch_expr


def test_mod_goes_back_as_torch_mod_only_for_a_positive_divisor():
    u0, u1 = int_symbol("u0"), int_symbol("u1")
    assert type(to_torch(F.Mod(u0, 8))) is T.Mod
    assert type(to_torch(F.Mod(u0, u1))) is T.PythonMod, "torch's Mod claims a nonnegative result"
    assert type(to_torch(F.PythonMod(u0, 8))) is T.PythonMod


def test_to_torch_uses_torch_symbols_from_a_shape_env():
    shape_env = TorchShapeEnv()
    size = shape_env.create_symbol(24, source=ConstantSource("n"), dynamic_dim=DimDynamic.DYNAMIC)
    converted = to_torch(sympy.Eq(F.Mod(int_symbol(size.name), 8), 0), shape_env)
    assert converted == sympy.Eq(T.Mod(size, 8), 0)
    with pytest.raises(KeyError, match="s_missing is not in the torch ShapeEnv"):
        to_torch(int_symbol("s_missing"), shape_env)
    assert to_torch(int_symbol("s3")).assumptions0["positive"] is True
    assert "positive" not in to_torch(int_symbol("u3")).assumptions0
    assert to_torch(F.float_symbol("zf0")).is_real


@given(claim=claims(max_leaves=4, constants=(0, 12), divisors=(1, 16), short_circuits=False),  # torch has no and/or
       values=st.fixed_dictionaries({n: st.integers(1, 40) for n in ("s0", "s1", "s2")}))
@example(claim=parse("Eq(s0, CeilDiv(s0, 2) // CeilDiv(s0, 3))"), values={"s0": 1, "s1": 1, "s2": 1})
def test_to_torch_then_back_keeps_the_value(claim, values):
    """Differential: torch's functions evaluate the converted claim like shapecore, where torch defines them."""
    try:
        torch_claim = to_torch(claim)
    except ZeroDivisionError:  # torch folds a divisor such as 0 // s0 to 0 (its s0 is positive)
        torch_claim = None
    except UnmappableExpressionError as refused:  # a // of a // by a divisor that may be negative
        assert "may be negative" in str(refused)
        torch_claim = None
    assume(torch_claim is not None)
    try:
        torch_value = torch_claim.xreplace({s: sympy.Integer(values[s.name]) for s in torch_claim.free_symbols})
        # torch's Min/Max rewriting can leave a constant part unevaluated (Max(s0, Min(5, 6)))
        torch_value = torch_value.doit()
    except (AssertionError, ZeroDivisionError):  # torch's Mod of a negative number; a zero divisor
        torch_value = None
    assume(torch_value is not None)
    try:
        ours = evaluate(claim, values)
    except ZeroDivisionError:  # torch folds 0 // d to 0 even where d is 0: compare where ours is defined
        ours = None
    assume(ours is not None)
    assert bool(torch_value) == ours
    back = map_expr(torch_claim)
    assert evaluate(back, values) == ours


@pytest.mark.parametrize("division", [F.FloorDiv, F.CleanDiv])
def test_a_floor_division_of_one_by_a_divisor_that_may_be_negative_is_refused_not_merged(division):
    """torch's rules merge ``(x // y) // b`` into ``x // (y*b)``, exact only for ``b >= 0``: where
    ``b`` may be negative the conversion is refused (it read -2 for -1 at s0 = 2, s1 = 7, where
    s0 - 5 divides s1 // 2: a CleanDiv too)."""
    s0, s1, u0 = int_symbol("s0"), int_symbol("s1"), int_symbol("u0")
    for divisor in (s0 - 5, u0, -s0):
        with pytest.raises(UnmappableExpressionError, match=f"{re.escape(str(divisor))} may be negative"):
            to_torch(division(F.FloorDiv(s1, 2), divisor))
    for expr in (division(F.FloorDiv(s1, 2), s0), division(s1, s0 - 5), division(F.FloorDiv(s1, 2), s0 + 3)):
        converted = to_torch(expr)
        for a, b in itertools.product(range(1, 9), range(1, 9)):
            if a == 5 and expr.args[1] == s0 - 5:
                continue  # a zero divisor
            values = {"s0": a, "s1": b}
            torch_value = converted.xreplace({s: sympy.Integer(values[s.name]) for s in converted.free_symbols})
            assert torch_value == evaluate(expr, values), (expr, values)


UNMAPPABLE = [
    (sympy.Eq(T.Where(sympy.Gt(S0, 2), S0, S1) + 1, S1), "Where"),
    (sympy.Eq(T.RoundDecimal(T.ToFloat(S0), 2), 1), "RoundDecimal"),
    (sympy.Lt(T.OpaqueUnaryFn_sqrt(S0), 4), "OpaqueUnaryFn_sqrt"),
    (sympy.Eq(T.BitwiseFn_bitwise_and(S0, S1), 0), "BitwiseFn_bitwise_and"),
    (sympy.Le(S0 + 1, int_oo, evaluate=False), "IntInfinity"),
]


@pytest.mark.parametrize("expr, name", UNMAPPABLE, ids=[name for _, name in UNMAPPABLE])
def test_an_unmappable_class_is_rejected_by_name(expr, name):
    with pytest.raises(UnmappableExpressionError, match=name) as info:
        map_expr(expr)
    assert info.value.node_class == name and str(expr) in str(info.value)


def test_to_torch_rejects_what_torch_has_no_class_for():
    with pytest.raises(UnmappableExpressionError, match="floor"):
        to_torch(sympy.floor(int_symbol("s0") / 3))


# -- the corpus -----------------------------------------------------------------------------------


def _corpus_namespace() -> dict:
    namespace = dict(vars(sympy))
    namespace.update({n: c for n, c in vars(T).items() if inspect.isclass(c)})
    namespace.update(IntInfinity=IntInfinity, NegativeIntInfinity=NegativeIntInfinity)
    return namespace


CORPUS_FILES = sorted(glob.glob(os.path.join(CORPUS, "*.json")))


def _corpus_points(case: dict, count: int, rng: random.Random) -> list[dict]:
    """The recorded hints, then random values inside every symbol's recorded range."""
    ranges = {}
    for symbol in case["symbols"]:
        lo, hi = symbol["range"]
        if symbol["kind"] in ("float", "unbacked_float"):
            ranges[symbol["name"]] = float(lo)
            continue
        lo = -32 if "oo" in lo else int(lo)
        hi = lo + 96 if "oo" in hi else int(hi)
        ranges[symbol["name"]] = (lo, hi)
    hints = {s["name"]: s["hint"] if s["kind"] == "backed" else None for s in case["symbols"]}
    points = []
    for i in range(count):
        point = {}
        for name, r in ranges.items():
            if isinstance(r, float):
                point[name] = r
            elif i == 0 and hints[name] is not None:
                point[name] = hints[name]
            else:
                point[name] = rng.randint(*r)
        points.append(point)
    return points


def _torch_value(expr: sympy.Basic, values: dict) -> object:
    result = expr.xreplace({s: sympy.sympify(values[s.name]) for s in expr.free_symbols})
    assert not result.free_symbols, f"torch left {result} unevaluated"
    return bool(result) if isinstance(result, sympy.logic.boolalg.BooleanAtom) else result


def test_the_corpus_is_all_there():
    assert len(CORPUS_FILES) == 26


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: os.path.basename(p)[:-5])
def test_corpus_expressions_map_with_the_same_text_and_values(path):
    case = json.load(open(path))
    namespace = _corpus_namespace()
    entries = case["guards"] + case["nontrivial_guards"] + case["runtime_asserts"] + case["divisible"]
    entries += case["replacements"]
    points = _corpus_points(case, 12, random.Random(path))
    compared = 0
    for entry in entries:
        torch_expr = eval(entry["srepr"], namespace)  # noqa: S307  (the corpus's documented format)
        mapped = map_expr(torch_expr)
        assert str(mapped) == str(torch_expr) == entry["str"]
        for point in points:
            try:
                expected = _torch_value(torch_expr, point)
            except (AssertionError, ZeroDivisionError):  # outside torch's domain (Mod of a negative)
                continue
            assert evaluate(mapped, point) == expected, (entry["str"], point)
            compared += 1
    assert compared >= len(entries), "most points must be inside torch's domain"


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: os.path.basename(p)[:-5])
def test_corpus_expressions_go_back_to_torch_unchanged(path):
    case = json.load(open(path))
    namespace = _corpus_namespace()
    for entry in case["guards"] + case["nontrivial_guards"] + case["divisible"]:
        torch_expr = eval(entry["srepr"], namespace)  # noqa: S307
        if any(not s.is_integer for s in torch_expr.free_symbols):
            continue
        symbols = {s.name: s for s in torch_expr.free_symbols}  # item-backed s* are not positive in torch
        assert to_torch(map_expr(torch_expr), symbols=symbols) == torch_expr



# -- traced sizes ------------------------------------------------------------------------------------


def test_a_traced_size_reads_as_an_expression_through_the_replacements():
    shape_env = TorchShapeEnv()
    n = shape_env.create_symintnode(shape_env.create_symbol(24, ConstantSource("n"), dynamic_dim=DimDynamic.DYNAMIC), hint=24)
    m = shape_env.create_symintnode(shape_env.create_symbol(3, ConstantSource("m"), dynamic_dim=DimDynamic.DYNAMIC), hint=3)
    n_name, m_name = n.node.expr.name, m.node.expr.name
    assert size_expr(7) == 7 and size_expr(n // 4 + 1) == F.FloorDiv(int_symbol(n_name), 4) + 1
    assert bool(n == 8 * m)  # torch replaces n by 8*m
    assert size_expr(n) == 8 * int_symbol(m_name)
    assert size_expr(n // 4 + 1) == 2 * int_symbol(m_name) + 1


def test_to_symint_evaluates_with_python_semantics_on_ints_and_symints():
    b = int_symbol("b")
    expr = F.FloorDiv(-3 * b, 4) + F.Mod(b, 3)
    for value in (-5, 1, 7):
        assert to_symint(expr, {"b": value}) == evaluate(expr, {"b": value})
    assert to_symint(sympy.Integer(6), {}) == 6 and type(to_symint(sympy.Integer(6), {})) is int
    shape_env = TorchShapeEnv()
    symint = shape_env.create_symintnode(shape_env.create_symbol(10, ConstantSource("b"), dynamic_dim=DimDynamic.DYNAMIC),
                                         hint=10)
    traced = to_symint(expr, {"b": symint})
    assert isinstance(traced, torch.SymInt) and traced.node.hint == evaluate(expr, {"b": 10})
