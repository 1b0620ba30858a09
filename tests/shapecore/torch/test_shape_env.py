"""ShapeEnvs across the bridge: torch's into shapecore's (symbols, ranges, facts, guards, asserts), and back."""

import pytest
import sympy
import torch
import torch.utils._sympy.functions as T
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic
from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

from shapecore import ConstraintError, ShapecoreError, int_symbol
from shapecore import functions as F
from shapecore.torch import from_torch, map_expr, symbol_ranges, to_torch_symbols, torch_guards

from .traced_models import CASES


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


def test_facts_are_added_last_and_checked():
    shape_env, n, _ = _torch_env()
    n_name = n.node.expr.name
    env = from_torch(shape_env, facts=[f"Eq(Mod({n_name}, 3), 0)", sympy.Ge(int_symbol(n_name), 8)])
    assert [str(f) for f in env.facts][-2:] == [f"Eq(Mod({n_name}, 3), 0)", f"{n_name} >= 8"]
    assert env.statically_known_true(f"Eq(Mod({n_name}, 6), 0)") is False, "24 is a hint, not a fact"
    assert env.statically_known_true(f"Eq(Mod({n_name}, 3), 0)")
    with pytest.raises(ConstraintError):
        from_torch(shape_env, facts=[f"Eq(Mod({n_name}, 5), 0)"])  # false at the hint 24


def test_symbol_ranges_are_exact_and_open_at_int_oo():
    shape_env, n, m = _torch_env()
    count = shape_env.create_unbacked_symint()
    torch._check(count >= 3)
    ranges = symbol_ranges(shape_env)
    assert ranges[n.node.expr.name] == (0, None) and ranges[m.node.expr.name] == (0, None)
    assert ranges["u0"] == (3, None)


def test_shapecore_names_become_symbols_of_a_torch_env_and_read_back():
    symbols = to_torch_symbols({"b0": 4, "b1": 3})
    b0, b1 = symbols.symints["b0"], symbols.symints["b1"]
    assert isinstance(b0, torch.SymInt) and b0.node.hint == 4 and b1.node.hint == 3
    assert set(symbols.names.values()) == {"b0", "b1"} and symbols.fake_mode.shape_env is symbols.shape_env
    assert symbols.expr(2 * b0 + b1 // 2) == 2 * int_symbol("b0") + F.FloorDiv(int_symbol("b1"), 2)
    with symbols.fake_mode:
        x = torch.empty(b0, 3 * b1)
    assert [symbols.expr(s) for s in x.shape] == [int_symbol("b0"), 3 * int_symbol("b1")]
