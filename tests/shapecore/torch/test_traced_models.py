"""Real traces handed to shapecore: guards hold at the hints, evaluate like torch, decide like torch."""

import random

import pytest
import sympy
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from shapecore import Reasoner, evaluate, holds, int_symbol, prove, simplify
from shapecore import functions as F
from shapecore.torch import map_expr, to_torch

from .traced_models import CASES

NAMES = sorted(CASES)


def test_the_zoo_covers_the_three_front_ends():
    front_ends = [case.front_end for case in CASES.values()]
    assert len(CASES) >= 15
    assert {f: front_ends.count(f) >= 4 for f in ("export", "compile", "make_fx")} == {
        "export": True, "compile": True, "make_fx": True}


def _integer_only(expr: sympy.Basic) -> bool:
    return all(s.is_integer for s in expr.free_symbols)


def _torch_facts(shape_env) -> list[sympy.Basic]:
    """Every claim torch holds about the symbols: guards, replacements, divisibility, runtime asserts."""
    facts = [g.expr for g in shape_env.guards]
    facts += [sympy.Eq(s, e, evaluate=False) for s, e in shape_env.replacements.items()]
    facts += [sympy.Eq(term, 0, evaluate=False) for term in shape_env.divisible]
    facts += [ra.expr for asserts in shape_env.deferred_runtime_asserts.values() for ra in asserts]
    return [f for f in facts if _integer_only(f)]


def _sample(shape_env, rng: random.Random) -> dict[str, int]:
    """Values inside every integer symbol's range (open ends cut at 100 past the other end)."""
    from torch.utils._sympy.numbers import int_oo

    point = {}
    for symbol, r in shape_env.var_to_range.items():
        if not symbol.is_integer:
            continue
        lo = -50 if r.lower == -int_oo else int(r.lower)
        hi = lo + 100 if r.upper == int_oo else int(r.upper)
        point[symbol.name] = rng.randint(lo, hi)
    return point


def _torch_value(expr: sympy.Basic, point: dict[str, int]) -> object:
    result = expr.xreplace({s: sympy.Integer(point[s.name]) for s in expr.free_symbols})
    assert not result.free_symbols, f"torch left {result} unevaluated"
    return bool(result) if isinstance(result, sympy.logic.boolalg.BooleanAtom) else int(result)


def _value(evaluate_it):
    try:
        return evaluate_it()
    except ZeroDivisionError:
        return ZeroDivisionError


@pytest.mark.parametrize("name", NAMES)
def test_hints_satisfy_every_guard(name):
    traced = CASES[name].trace()
    env = traced.env
    assert env.check_guards(env.hints) == []
    assert all(holds(g, env.hints) for g in traced.torch_guards)
    assert set(traced.sources) <= set(env.symbols) | {s.name for s in traced.torch_env.var_to_range if not s.is_integer}


@pytest.mark.parametrize("name", NAMES)
def test_every_torch_fact_evaluates_like_torch_inside_the_ranges(name):
    traced = CASES[name].trace()
    facts = _torch_facts(traced.torch_env)
    rng = random.Random(name)
    compared = 0
    for _ in range(25):
        point = _sample(traced.torch_env, rng)
        for fact in facts:
            theirs = _value(lambda: _torch_value(fact, point))
            ours = _value(lambda: evaluate(map_expr(fact), point))
            assert ours == theirs, (name, str(fact), point)
            compared += 1
    assert compared == 25 * len(facts)


@pytest.mark.parametrize("name", NAMES)
def test_guards_go_back_to_torch_unchanged(name):
    traced = CASES[name].trace()
    for guard in traced.torch_env.guards:
        if _integer_only(guard.expr):
            assert to_torch(map_expr(guard.expr), traced.torch_env) == guard.expr


def _candidate_claims(traced) -> list[sympy.Basic]:
    claims = []
    for name in traced.env.symbols:
        s = int_symbol(name)
        claims += [sympy.Eq(F.Mod(s, 2), 0), sympy.Eq(F.Mod(s, 8), 0), sympy.Ge(s, 2), sympy.Ge(s, 16),
                   sympy.Ne(s, 1), sympy.Le(s, 1024)]
    for guard in traced.torch_guards:
        claims += [guard, sympy.Not(guard)]
    return claims


@pytest.mark.parametrize("name", NAMES)
def test_prove_agrees_with_torch_where_torch_decides(name):
    traced = CASES[name].trace()
    decided = 0
    for claim in _candidate_claims(traced):
        torch_claim = to_torch(claim, traced.torch_env)
        if isinstance(torch_claim, sympy.logic.boolalg.BooleanAtom):
            torch_true, torch_false = bool(torch_claim), not bool(torch_claim)
        else:
            torch_true = statically_known_true(traced.torch_env.create_symboolnode(torch_claim))
            torch_false = statically_known_true(traced.torch_env.create_symboolnode(sympy.Not(torch_claim)))
        status = traced.env.prove(claim).status
        if torch_true:
            assert status == "proved", (name, str(claim))
        if torch_false:
            assert status == "refuted", (name, str(claim))
        decided += torch_true or torch_false
    assert decided > 0


@pytest.mark.parametrize("name", NAMES)
def test_graph_sizes_are_expressions_over_the_env_symbols(name):
    traced = CASES[name].trace()
    if traced.graph_module is None:
        assert traced.error and "Constraints violated" in traced.error
        return
    sizes = []
    for node in traced.graph_module.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and isinstance(value, torch.Tensor):
            sizes += [d for d in value.shape if isinstance(d, torch.SymInt)]
        elif node.op == "placeholder" and isinstance(value, torch.SymInt):
            sizes.append(value)
    for size in sizes:
        expr = map_expr(size.node.expr)
        assert {s.name for s in expr.free_symbols} <= set(traced.env.symbols)
        if all(s.name in traced.env.hints for s in expr.free_symbols):
            assert evaluate(expr, traced.env.hints) == size.node.hint  # torch 2.15 deprecates ShapeEnv.size_hint


def _ranges(shape_env) -> dict[str, tuple[int | None, int | None]]:
    from torch.utils._sympy.numbers import int_oo

    return {
        s.name: (None if r.lower == -int_oo else int(r.lower), None if r.upper == int_oo else int(r.upper))
        for s, r in shape_env.var_to_range.items()
        if s.is_integer
    }


@pytest.mark.parametrize("name", NAMES)
def test_simplified_guards_are_equivalent_and_never_more(name):
    traced = CASES[name].trace()
    ranges = _ranges(traced.torch_env)
    given, result = traced.torch_guards, simplify(traced.torch_guards, ranges=ranges)
    assert result.contradiction is None
    assert len(result.guards) <= len(given)
    for guard in given:
        assert _implied(guard, result.guards, ranges), (name, str(guard))
    for guard in result.guards:
        assert _implied(guard, given, ranges), (name, str(guard))


def _implied(claim: sympy.Basic, facts, ranges) -> bool:
    """``prove``, and if z3 gives up, ``prove`` again with the facts' replacements substituted.

    The reasoner hands z3 the claim as written; z3 settles ``Eq(Mod(s7*s75*s96, s75 - 1), 0)``
    under ``Eq(s75 - 1, s7)`` only once ``s75`` is replaced by ``s7 + 1``. Substituting what
    the facts entail keeps the question the same.
    """
    if prove(claim, facts=facts, ranges=ranges).proved:
        return True
    scope = Reasoner()
    for fact in facts:
        scope.add_fact(fact)
    for symbol, (lo, hi) in ranges.items():
        scope.set_range(symbol, lo, hi)
    return scope.prove(claim.xreplace(scope.knowledge.replacements)).proved
