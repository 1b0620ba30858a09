"""The torch bridge: expressions both ways, torch's ShapeEnv into shapecore's, the guard corpus."""

import glob
import inspect
import json
import os
import random
import subprocess
import sys

import pytest
import sympy
import torch
import torch.utils._sympy.functions as T
from hypothesis import assume, given
from hypothesis import strategies as st
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic
from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity, int_oo

from shapecore import ConstraintError, ShapecoreError, evaluate, int_symbol, prove
from shapecore import functions as F
from shapecore.testing import claims
from shapecore.torch_bridge import UnmappableExpressionError, from_torch, map_expr, to_torch, torch_guards
from tests.corpus import CORPUS

from .traced_models import CASES


def test_importing_the_bridge_does_not_import_torch():
    code = "import sys, shapecore.torch_bridge; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- expressions ----------------------------------------------------------------------------------

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
    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3)]:
        torch_value = to_torch(F.CeilDiv(s0, s1)).xreplace({sympy.Symbol("s0", integer=True, positive=True): a,
                                                             sympy.Symbol("s1", integer=True, positive=True): b})
        assert torch_value == evaluate(F.CeilDiv(s0, s1), {"s0": a, "s1": b}) == -(-a // b)


def test_float_arithmetic_maps_to_pythons_and_back():
    torch_expr = T.TruncToInt(sympy.Float(0.5) * T.ToFloat(S0) + sympy.Float(0.25))
    ours = map_expr(torch_expr)
    assert isinstance(ours.args[0], F.FloatAdd) and str(ours) == str(torch_expr)
    assert evaluate(ours, {"s0": 7}) == int(torch_expr.subs(S0, 7))
    assert to_torch(ours) == torch_expr
    assert map_expr(S0 * 2 + 1) == 2 * int_symbol("s0") + 1, "exact arithmetic stays sympy's"


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


@given(claim=claims(max_leaves=4, constants=(0, 12), divisors=(1, 16)),
       values=st.fixed_dictionaries({n: st.integers(1, 40) for n in ("s0", "s1", "s2")}))
def test_to_torch_then_back_keeps_the_value(claim, values):
    """Differential: torch's functions evaluate the converted claim like shapecore, where torch defines them."""
    try:
        torch_claim = to_torch(claim)
    except ZeroDivisionError:  # torch folds a divisor such as 0 // s0 to 0 (its s0 is positive)
        torch_claim = None
    assume(torch_claim is not None)
    try:
        torch_value = torch_claim.xreplace({s: sympy.Integer(values[s.name]) for s in torch_claim.free_symbols})
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


UNMAPPABLE = [
    (sympy.Eq(T.Where(sympy.Gt(S0, 2), S0, S1) + 1, S1), "Where"),
    (sympy.Eq(T.RoundDecimal(T.ToFloat(S0), 2), 1), "RoundDecimal"),
    (sympy.Lt(T.OpaqueUnaryFn_sqrt(S0), 4), "OpaqueUnaryFn_sqrt"),
    (sympy.Lt(T.FloatPow(T.ToFloat(S0), T.ToFloat(S1)), 4), "FloatPow"),
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


# -- from_torch -----------------------------------------------------------------------------------


def _torch_env() -> tuple[TorchShapeEnv, torch.SymInt, torch.SymInt]:
    shape_env = TorchShapeEnv(specialize_zero_one=False)
    ones = shape_env.create_symbol(1, source=ConstantSource("ones"), dynamic_dim=DimDynamic.DYNAMIC)
    size = shape_env.create_symbol(24, source=ConstantSource("n"), dynamic_dim=DimDynamic.DYNAMIC)
    n = shape_env.create_symintnode(size, hint=24)
    m = shape_env.create_symintnode(ones, hint=1)
    return shape_env, n, m


def test_from_torch_copies_symbols_ranges_facts_guards_and_asserts():
    shape_env, n, m = _torch_env()
    assert bool(n % 8 == 0) and bool(m < 4)
    count = shape_env.create_unbacked_symint()
    torch._check(count >= 3)
    torch._check(count <= n)
    env = from_torch(shape_env)
    names = {s.name: s for s in shape_env.var_to_range}
    n_name, ones_name = n.node.expr.name, m.node.expr.name
    assert env.hints == {ones_name: 1, n_name: 24}, "a hint of 1 is kept with torch's range [0, oo]"
    assert env.symbols[n_name].source == "n" and env.symbols["u0"].kind == "unbacked"
    assert env.var_to_range[int_symbol(ones_name)].lo == 0
    assert env.var_to_range[int_symbol("u0")].lo == 3
    assert [str(a.expr) for a in env.runtime_asserts] == [f"u0 <= {n_name}"], "u0 >= 3 is in its range already"
    assert env.statically_known_true(f"Eq(Mod({n_name}, 8), 0)") and env.statically_known_true(f"{ones_name} <= 3")
    assert env.statically_known_true(f"u0 <= {n_name}")
    assert env.check_guards(env.hints) == []
    assert torch_guards(shape_env) == [map_expr(g.expr) for g in shape_env.guards]
    assert set(names) == set(env.symbols)


def test_replacements_become_facts():
    shape_env, n, m = _torch_env()
    other = shape_env.create_symintnode(
        shape_env.create_symbol(24, source=ConstantSource("other"), dynamic_dim=DimDynamic.DUCK), hint=24)
    assert bool(other == n)
    env = from_torch(shape_env)
    (symbol, replacement), = shape_env.replacements.items()
    assert sympy.Eq(map_expr(symbol), map_expr(replacement)) in env.facts
    assert env.statically_known_true(f"Eq({other.node.expr.name}, {n.node.expr.name})")


def test_contradictory_torch_state_is_an_error_naming_the_entry():
    shape_env, n, _ = _torch_env()
    shape_env.divisible.add(T.Mod(n.node.expr, 5))  # 24 is not a multiple of 5
    with pytest.raises(ConstraintError, match=r"divisibility Mod\(s\d+, 5\)"):
        from_torch(shape_env)


def _guard(expr: sympy.Basic):
    from torch.fx.experimental.symbolic_shapes import ShapeGuard, SLoc

    return ShapeGuard(expr, SLoc("test", None), size_oblivious=False)


def test_a_guard_false_at_the_hints_is_an_error():
    shape_env, n, _ = _torch_env()
    shape_env.guards.append(_guard(sympy.Gt(n.node.expr, 40)))  # the hint is 24
    with pytest.raises(ConstraintError, match=r"guard s\d+ > 40 is false"):
        from_torch(shape_env)


def test_a_guard_on_an_unbacked_symbol_becomes_a_runtime_assert():
    shape_env, n, _ = _torch_env()
    count = shape_env.create_unbacked_symint()
    shape_env.guards.append(_guard(sympy.Ge(count.node.expr, 0)))
    env = from_torch(shape_env)
    assert [str(a.expr) for a in env.runtime_asserts] == ["u0 >= 0"]
    assert env.statically_known_true("u0 >= 0")


def test_float_symbols_in_guards_are_rejected_and_specialized_ones_substituted():
    shape_env, _, _ = _torch_env()
    eps = shape_env.create_unbacked_symfloat()
    shape_env.guards.append(_guard(sympy.Gt(eps.node.expr, 0)))
    with pytest.raises(ShapecoreError, match="float symbol zuf0"):
        from_torch(shape_env)
    traced = CASES["compile_transformer_block"].trace()
    assert any(not s.is_integer for s in traced.torch_env.var_to_range), "LayerNorm eps is a float symbol"
    assert all(s.is_integer for g in traced.torch_guards for s in g.free_symbols)
    assert set(traced.env.symbols) == {s.name for s in traced.torch_env.var_to_range if s.is_integer}


# -- trace helpers ----------------------------------------------------------------------------------


def test_export_names_user_dims_and_derived_dims():
    traced = CASES["export_view8_derived"].trace()
    k = int_symbol(traced.dims["k"])
    assert traced.dim_exprs == {"k": k, "8*k": 8 * k}
    (rows,) = [name for name, source in traced.sources.items() if source == "L['x'].size()[0]"]
    assert traced.env.statically_known_true(sympy.Eq(int_symbol(rows), 8 * k))
    both = CASES["export_derived_dims"].trace()
    batch = int_symbol(both.dims["batch"])
    assert both.dim_exprs["2*batch + 1"] == 2 * batch + 1


def test_export_constraint_violation_can_be_raised_or_returned():
    from tests.shapecore.traced_models import ArangeThird
    from torch.export import Dim

    from shapecore.torch_bridge import trace_export

    spec = {"x": {0: Dim("n", min=3, max=10000)}}
    with pytest.raises(Exception, match="Constraints violated"):
        trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec)
    strict = trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec, strict=True,
                          on_constraint_violation="return")
    assert "Constraints violated" in strict.error and strict.torch_guards and list(strict.dims) == ["n"]
    with pytest.raises(ValueError, match="on_constraint_violation"):
        trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec, on_constraint_violation="ignore")


def test_the_known_export_failure_has_only_guards_shapecore_proves():
    """``torch.arange(n // 3, n)`` with n in [3, 10000]: torch says "Constraints violated"; every guard holds."""
    traced = CASES["export_arange_third"].trace()
    assert traced.graph_module is None and "Constraints violated" in traced.error
    n = traced.dims["n"]
    assert traced.torch_guards, "torch recorded the guards it could not prove"
    for guard in traced.torch_guards:
        assert prove(guard, ranges={n: (3, 10000)}).proved, guard
    assert traced.env.guards == [], "under the user's range shapecore records none of them"


def test_the_cli_keeps_no_guard_of_the_known_export_failure(tmp_path, capsys):
    from shapecore.cli import main

    traced = CASES["export_arange_third"].trace()
    as_n = {int_symbol(traced.dims["n"]): int_symbol("n")}
    path = tmp_path / "guards.txt"
    path.write_text("".join(f"{g.xreplace(as_n)}\n" for g in traced.torch_guards))
    assert main(["simplify", str(path), "--range", "n=3..10000"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert printed and all(line.startswith("#") for line in printed), printed
    assert main(["simplify", str(path), "--range", "n=3..10000", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["guards"] == [] and len(result["dropped"]) == len(traced.torch_guards)


def test_a_real_export_violation_gets_a_counterexample_torch_agrees_with():
    traced = CASES["export_conv_net_too_small"].trace()
    assert "Constraints violated" in traced.error
    ranges = {traced.dims["height"]: (8, 256), traced.dims["width"]: (8, 256), traced.dims["batch"]: (2, 64)}
    refuted = [(g, prove(g, ranges=ranges)) for g in traced.torch_guards]
    refuted = [(g, p) for g, p in refuted if p.status == "refuted"]
    assert refuted, "a width or height of 8 or 9 breaks the second conv"
    for guard, proof in refuted:
        torch_guard = to_torch(guard, traced.torch_env)
        assert _torch_value(torch_guard, proof.counterexample) is False
