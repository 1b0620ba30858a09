"""Counterexample search: try a few well-chosen assignments and check them exactly.

Candidates per symbol come from what is known about it: its hint, the ends of its range and
values next to them, and small values, all moved into its residue class and off excluded
values. Replaced symbols take the value of their replacement. An assignment is returned only
if every fact holds there and the claim does not (:func:`shapecore.evaluation.holds`), so a
search result is always a genuine counterexample. :func:`find_model` searches the same way
for an assignment satisfying the facts alone, near a given one.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Iterable, Mapping, Sequence

import sympy

from shapecore.errors import UnboundSymbolError
from shapecore.evaluation import evaluate, holds
from shapecore.knowledge import Knowledge
from shapecore.rewrite import symbols_of

__all__ = ["find_counterexample", "find_model", "satisfies", "bind_all"]

_SMALL = (0, 1, 2, 3, 4, 8, -1, -2, 16, 64)


def _candidates(knowledge: Knowledge, symbol: sympy.Symbol, hint: int | None) -> list[int]:
    """Values to try for ``symbol``, best first; memoized per fact-set version."""
    memo = _MEMO.get(knowledge)
    if memo is None or memo[0] != knowledge.version:
        memo = _MEMO[knowledge] = (knowledge.version, {})
    key = (symbol, hint)
    found = memo[1].get(key)
    if found is None:
        found = memo[1][key] = _fresh_candidates(knowledge, symbol, hint)
    return found


_MEMO: weakref.WeakKeyDictionary[Knowledge, tuple[int, dict]] = weakref.WeakKeyDictionary()


def _fresh_candidates(knowledge: Knowledge, symbol: sympy.Symbol, hint: int | None) -> list[int]:
    r = knowledge.range_of(symbol)
    lo, hi = r.lo, r.hi
    congruence = knowledge.congruences.get(symbol)
    step = congruence.coeff if congruence and congruence.coeff else 1
    base = congruence.base if congruence else 0
    raw: list[int] = [] if hint is None else [hint]
    if lo != -math.inf:
        lo = int(lo)
        raw += (lo, lo + step, lo + 2 * step)
    if hi != math.inf:
        hi = int(hi)
        raw += (hi, hi - step)
    raw += [v + (base - v) % step for v in _SMALL] if step > 1 else _SMALL
    return [v for v in dict.fromkeys(raw) if lo <= v <= hi and (v - base) % step == 0]


def satisfies(facts: Sequence[sympy.Basic], values: Mapping[str, int]) -> bool:
    """Whether every fact holds under ``values``."""
    return all(holds(f, values) for f in facts)


def find_counterexample(
    claim: sympy.Basic,
    knowledge: Knowledge,
    hints: Mapping[str, int] | None = None,
    *,
    budget: int = 256,
    linked: Iterable[sympy.Symbol] = (),
) -> dict[str, int] | None:
    """An assignment satisfying ``knowledge.facts`` under which ``claim`` does not hold.

    The claim's symbols (and their replacements') take each combination of their candidates;
    the others their first candidate, except those of ``linked`` (symbols a chain of facts ties
    to the claim's, such as ``s1`` in ``s0 < s1, s1 < s2`` for a claim on ``s0`` and ``s2``),
    which vary slowest: the first combinations are those without them.
    """
    hints = hints or {}
    # A fact on one symbol holds at each of its candidates (they lie in its range and residue
    # class): checked last, a point that fails another fact fails sooner.
    facts = sorted(knowledge.facts, key=lambda fact: len(symbols_of(fact)) == 1)
    budget = max(1, min(budget, 50_000 // (len(facts) + 1)))
    replaced = knowledge.replacements
    claim_symbols = symbols_of(claim)
    relevant = set(claim_symbols)
    for r in claim_symbols & replaced.keys():
        relevant |= symbols_of(replaced[r])
    mentioned = knowledge.symbols | claim_symbols
    free = sorted((s for s in mentioned if s not in replaced), key=lambda s: s.name)
    linked = set(linked) - relevant
    varied = [s for s in free if s in linked] + [s for s in free if s in relevant]
    fixed: dict[str, int] = {}
    for symbol in free:
        if symbol not in relevant and symbol not in linked:
            options = _candidates(knowledge, symbol, hints.get(symbol.name))
            if not options:
                return None
            fixed[symbol.name] = options[0]
    choices = [_candidates(knowledge, s, hints.get(s.name)) for s in varied]
    for values in _assignments(fixed, varied, choices, replaced, budget):
        if not holds(claim, values) and satisfies(facts, values):
            return values
    return None


def find_model(
    knowledge: Knowledge,
    start: Mapping[str, int],
    vary: Iterable[sympy.Symbol],
    pinned: Mapping[str, int],
    *,
    budget: int = 32,
) -> dict[str, int] | None:
    """An assignment satisfying ``knowledge.facts`` near ``start``, or None if none is found.

    ``start`` must satisfy every fact that does not mention a symbol of ``vary``; those
    symbols are moved to candidate values, the replaced symbols recomputed, and the facts
    that mention a symbol of ``vary`` or one whose value changed are checked. Each symbol of
    ``pinned`` must keep its value there (a replaced one, recomputed, may not).
    """
    facts = knowledge.facts
    replaced = knowledge.replacements
    vary = set(vary)
    free = sorted((s for s in vary if s not in replaced), key=lambda s: s.name)
    mentions: dict[str, list[int]] = {}
    for index, fact in enumerate(facts):
        for symbol in symbols_of(fact):
            mentions.setdefault(symbol.name, []).append(index)
    varied = {i for s in vary for i in mentions.get(s.name, ())}
    budget = max(1, min(budget, 50_000 // (len(facts) + 1)))
    choices = [_candidates(knowledge, s, None) for s in free]
    for values in _assignments(dict(start), free, choices, replaced, budget):
        if any(values.get(n) != v for n, v in pinned.items()):
            continue
        changed = (n for n, v in values.items() if start.get(n) != v)
        touched = varied.union(*(mentions.get(n, ()) for n in changed))
        try:
            if satisfies([facts[i] for i in sorted(touched)], values):
                return values
        except UnboundSymbolError:  # a fact on a symbol start does not bind
            return None
    return None


def _assignments(
    fixed: dict[str, int],
    varied: Sequence[sympy.Symbol],
    choices: Sequence[Sequence[int]],
    replaced: Mapping[sympy.Symbol, sympy.Basic],
    budget: int,
) -> Iterable[dict[str, int]]:
    """``fixed`` with ``varied`` set to each combination of ``choices`` (the first ``budget``),
    and every replaced symbol to its replacement's value (skipped where that is undefined)."""
    for combination in itertools.islice(itertools.product(*choices), budget):
        values = dict(fixed)
        values.update((s.name, v) for s, v in zip(varied, combination))
        try:
            values.update((s.name, evaluate(e, values)) for s, e in replaced.items())
        except (ArithmeticError, UnboundSymbolError):
            continue
        yield values


def bind_all(
    values: Mapping[str, int],
    symbols: Iterable[sympy.Symbol],
    knowledge: Knowledge,
    hints: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """``values`` extended to bind every one of ``symbols`` (under a ``knowledge`` with no
    contradiction: one that has leaves no range to bind in).

    An unbound symbol that is not replaced takes its first candidate value (its hint when it
    has one, else a value in its range and residue class); a replaced one, its replacement's
    value. Symbols a counterexample leaves unbound are those no fact or claim depends on (they
    were folded away, as in ``Eq(s1, s1)``), so any such value keeps it a counterexample.
    """
    result = dict(values)
    hints = hints or {}
    missing = sorted((s for s in symbols if s.name not in result), key=lambda s: s.name)
    replaced = knowledge.replacements
    for symbol in missing:
        if symbol not in replaced:
            options = _candidates(knowledge, symbol, hints.get(symbol.name)) if symbol.is_integer else [0]
            result[symbol.name] = options[0] if options else 0
    for symbol in missing:
        if symbol in replaced:
            try:
                result[symbol.name] = evaluate(replaced[symbol], result)
            except (UnboundSymbolError, ArithmeticError):
                pass
    return result
