"""What the trace proves about data-dependent (routed) sizes: the share of a total each one is
costed at, and the runtime asserts on them, simplified for the reader.

A router's counts (``counts = one_hot(idx, E).sum(0).tolist()``) are unbacked symbols
``u0 … u{E-1}``; cutting the tokens sorted by expert into pieces of those sizes records that
the pieces cover the routed total ``T`` (``tokens·k``): ``Eq(u0 + u1 + u2 + u3, T)`` from
``split``, or, from slices at running offsets, ``Eq(Max(0, Min(T, u0 + u1) - Min(T, u0)) + … +
Min(T, u0), T)``. :func:`shares` costs each symbol of such a fact at ``T // n`` (``n`` the
fact's data-dependent symbols) when shapecore proves that the fact holds whenever all ``n`` of
them equal ``T / n``: the even routing, the expectation of a router with no preference.

:func:`readable_asserts` states the trace's conditions on data-dependent sizes the way a reader
wants them: no infinite range ends, a ``Max``/``Min`` that the ranges decide resolved (the
slices' telescoping sum above reads ``u0 + u1 + u2 + u3 >= T``), implied conditions dropped
(``shapecore.simplify``: equivalent under the backed symbols' ranges).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import sympy

from shapecore import FloorDiv, Max, Min, ShapeEnv, creation_order, prove, simplify

__all__ = ["readable_asserts", "shares"]

_TIMEOUT_MS = 200


def shares(env: ShapeEnv, unbacked: Iterable[str]) -> dict[str, sympy.Basic]:
    """Each data-dependent symbol that a fact of the trace shares a total among, with its share
    ``T // n`` over the backed root symbols (see the module docstring); others are left out."""
    wanted = set(unbacked)
    symbols = {sympy.Symbol(name, integer=True) for name, info in env.symbols.items() if info.kind == "unbacked"}
    backed = _backed_facts(env, symbols)
    out: dict[str, sympy.Basic] = {}
    for fact in _conditions(env):
        if not isinstance(fact, sympy.Eq):
            continue
        for side, total in ((fact.lhs, fact.rhs), (fact.rhs, fact.lhs)):
            routed = sorted(side.free_symbols & symbols, key=lambda s: s.name)
            if not routed or total.free_symbols & symbols or any(s.name in out for s in routed):
                continue
            even = sympy.Symbol("_share", integer=True)
            claim = fact.xreplace({s: even for s in routed})
            given = [sympy.Eq(len(routed) * even, total), sympy.Ge(even, 0), *backed]
            if prove(claim, facts=given, ranges=_ranges(env, symbols), timeout_ms=_TIMEOUT_MS).status == "proved":
                out.update({s.name: _share(total.xreplace(env.replacements), len(routed)) for s in routed})
    return {name: share for name, share in out.items() if name in wanted}


def _share(total: sympy.Basic, n: int) -> sympy.Basic:
    """``total // n``, written ``total / n`` when every coefficient divides (``24*b // 4`` is ``6*b``)."""
    exact = sympy.expand(total / n)
    return exact if all(c.is_Integer for c in exact.as_coefficients_dict().values()) else FloorDiv(total, n)


def readable_asserts(env: ShapeEnv, unbacked: Iterable[str]) -> list[str]:
    """The trace's conditions on the ``unbacked`` symbols, simplified (see the module docstring),
    in shapecore's syntax over the trace's root symbols."""
    symbols = {sympy.Symbol(name, integer=True) for name in unbacked}
    backed = {s: e for s, e in env.replacements.items() if not ({s} | e.free_symbols) & symbols}  # s77 := 2*s26
    # in creation order (u2 before u10), so that of equal symbols' ranges the count's is the one kept
    ranges = [c for s in sorted(symbols, key=lambda s: creation_order(s.name)) for c in _range_claims(env, s)]
    others = [c.xreplace(backed) for c in dict.fromkeys(_conditions(env)) if c.free_symbols & symbols]
    ranges_given = ranges + _backed_facts(env, symbols)
    resolved = [_resolve_extrema(c, ranges_given, _ranges(env, symbols)) for c in others]
    claims = [c for c in ranges + resolved if c is not sympy.true]
    if not claims:
        return []
    return [str(g) for g in simplify(claims, ranges=_ranges(env, symbols), timeout_ms=2000).guards]


def _conditions(env: ShapeEnv) -> list[sympy.Basic]:
    return [a.expr for a in env.runtime_asserts] + list(env.facts)


def _range_claims(env: ShapeEnv, symbol: sympy.Symbol) -> list[sympy.Basic]:
    bounds = env.var_to_range[symbol]
    out = []
    if math.isfinite(bounds.lo):
        out.append(sympy.Le(sympy.Integer(bounds.lo), symbol))
    if math.isfinite(bounds.hi):
        out.append(sympy.Le(symbol, sympy.Integer(bounds.hi)))
    return out


def _ranges(env: ShapeEnv, unbacked: set[sympy.Symbol]) -> dict[str, tuple[int | None, int | None]]:
    """The backed symbols' value ranges, as ``prove``/``simplify`` take them."""
    return {s.name: (int(r.lo) if math.isfinite(r.lo) else None, int(r.hi) if math.isfinite(r.hi) else None)
            for s, r in env.var_to_range.items() if s not in unbacked}


def _backed_facts(env: ShapeEnv, unbacked: set[sympy.Symbol]) -> list[sympy.Basic]:
    """The trace's replacements and facts on backed symbols only (``s77 := 2*s3``)."""
    replaced = [sympy.Eq(s, e) for s, e in env.replacements.items() if not ({s} | e.free_symbols) & unbacked]
    return replaced + [f for f in list(env.facts) + list(env.guards) if not f.free_symbols & unbacked]


def _resolve_extrema(claim: sympy.Basic, facts: Sequence[sympy.Basic], ranges: dict) -> sympy.Basic:
    """``claim`` with each two-argument ``Max``/``Min`` whose larger argument ``facts`` prove
    replaced by that argument (inner ones first), then ``Eq(Min(a, b), a)`` read as ``a <= b``
    (and ``Max`` alike): equivalent wherever ``facts`` hold."""

    def pick(e: sympy.Basic) -> sympy.Basic:
        if len(e.args) != 2:
            return e
        a, b = e.args
        for first, second in ((a, b), (b, a)):
            larger = sympy.Ge(first, second) if isinstance(e, Max) else sympy.Le(first, second)
            if prove(larger, facts=facts, ranges=ranges, timeout_ms=_TIMEOUT_MS).status == "proved":
                return first
        return e

    resolved = claim.replace(lambda e: isinstance(e, (Max, Min)), pick)
    if isinstance(resolved, sympy.Eq):
        for extremum, other in ((resolved.lhs, resolved.rhs), (resolved.rhs, resolved.lhs)):
            if isinstance(extremum, (Max, Min)) and len(extremum.args) == 2 and other in extremum.args:
                rest = next(a for a in extremum.args if a != other)
                return sympy.Le(other, rest) if isinstance(extremum, Min) else sympy.Ge(other, rest)
    return resolved
