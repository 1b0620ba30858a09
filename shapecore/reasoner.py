"""The reasoner: one fact scope, the analyzers asked cheapest first, and a cache.

``Reasoner.prove(claim)`` runs, in order, and stops at the first layer that decides:

1. **rewrite** — canonical form (:func:`shapecore.rewrite.canonicalize`), the scope's
   replacements, and knowledge-driven simplification (:class:`shapecore.rewrite.Simplifier`);
2. **ranges** — interval bounds of ``lhs - rhs`` for each relation (:mod:`shapecore.ranges`);
3. **modular** — residue classes of ``lhs - rhs``, which also tighten the bounds
   (``d ≡ 1 mod 2`` rules out ``d == 0``; ``d ≡ 0 mod 8`` and ``d >= 1`` give ``d >= 8``);
4. **differences** — bounds of ``lhs - rhs`` from chains of facts ``x - y <= c`` and the
   ranges, ``Max``/``Min`` split by cases (:mod:`shapecore.differences`), which the residue
   classes tighten in turn (``2*(x//2) - x`` in ``[-1, 0]`` and even is 0);
5. **z3** — the integer encoding of :mod:`shapecore.z3backend` on a persistent solver,
   within one :class:`~shapecore.budget.Budget` per query made from the scope's
   ``timeout_ms`` (a deterministic resource count, so the answer does not depend on the
   machine's load, with a wall-clock backstop). **Search** for a counterexample runs before
   z3 with a small budget (most false claims fail at the first points tried), and with a
   larger one when the cheap layers showed the claim false or z3 gave up.

The cheap layers only ever *prove*; they run only when every divisor in the claim is known to
be nonzero (so the claim is defined wherever the facts hold). When they show the claim false
everywhere, the counterexample still comes from search or z3 and is checked by exact
evaluation. Answers are cached per claim; any new fact, or another ``timeout_ms``, starts a
new cache. :func:`prove` also keeps answers by its arguments as given, before any parsing, and
asks :mod:`shapecore.quick_proving` about a query all in plain text before any sympy work: its
answer's claim and facts are built by the scope when first read.

Facts can be taken back: :meth:`Reasoner.checkpoint` and :meth:`Reasoner.rollback` restore
the scope exactly (a fact rejected by a caller leaves no trace), :meth:`Reasoner.transaction`
keeps the facts of a block only if it ends normally.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import sympy
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from shapecore.budget import Budget, validate_timeout
from shapecore.decide import LAYERS, CheapLayers
from shapecore.differences import DifferenceBounds
from shapecore.errors import ArgumentError, UnboundSymbolError
from shapecore.evaluation import evaluate, extend_assignment, holds
from shapecore.functions import int_symbol
from shapecore.knowledge import Checkpoint as KnowledgeCheckpoint
from shapecore.knowledge import Knowledge
from shapecore.parsing import named_symbols, parse
from shapecore.proof import DeferredProof, Proof
from shapecore.modular import ModularSet, tighten
from shapecore.ranges import ValueRange
from shapecore.rewrite import Simplifier, canonicalize, divisors, fold, needs_rewriting, substitute, symbols_of
from shapecore.search import bind_all, find_counterexample, satisfies
from shapecore.validation import check_bound, check_ranges, guard_list
from shapecore import quick_proving, z3_threads
from shapecore.z3backend import Z3Session

__all__ = ["Reasoner", "ReasonerCheckpoint", "prove", "bound", "residue", "as_expr", "as_claim", "is_claim"]

ExprLike = str | sympy.Basic | int | bool
_PROBE_BUDGET = 2  # points tried before any analysis
_QUICK_SEARCH_BUDGET = 48  # points tried before z3
_SEARCH_BUDGET = 512  # points tried when the claim is known false, or z3 gave up


def as_expr(value: ExprLike) -> sympy.Basic:
    """``value`` as a sympy expression: text is parsed, numbers and booleans sympified."""
    if isinstance(value, str):
        return parse(value)
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, sympy.Basic):
        return value
    raise ArgumentError(f"expected guard text or a sympy expression, got {type(value).__name__}: {value!r}")


def is_claim(expr: sympy.Basic) -> bool:
    """Whether ``expr`` is a relation or boolean combination (not an integer expression)."""
    return expr.is_Relational or isinstance(expr, (BooleanFunction, BooleanAtom))


def as_claim(value: ExprLike) -> sympy.Basic:
    """``value`` as a relation or boolean combination; integer expressions are rejected."""
    expr = as_expr(value)
    if not is_claim(expr):
        raise ArgumentError(
            f"expected a claim such as Eq(Mod(s0, 8), 0) or s0 >= 2, got the integer expression {expr}"
        )
    return expr


@dataclass(frozen=True)
class ReasonerCheckpoint:
    """A state of a :class:`Reasoner` to roll back to (see :meth:`Reasoner.checkpoint`)."""

    knowledge: KnowledgeCheckpoint
    hints_state: tuple[object, ...]


class Reasoner:
    """A fact scope with the layered prover of this module.

    ``timeout_ms`` is each query's z3 budget: ``timeout_ms * RLIMIT_PER_MS`` resource units
    (deterministic) and a wall-clock backstop of ``timeout_ms`` (see :mod:`shapecore.budget`).

    >>> r = Reasoner()
    >>> r.add_fact("Eq(Mod(s0, 4), 0)"); r.add_fact("Eq(Mod(s1, 2), 0)")
    >>> r.prove("Eq(Mod(s0*s1, 8), 0)").status
    'proved'
    """

    def __init__(self, *, timeout_ms: int = 1000) -> None:
        self.hints: dict[str, int] = {}
        self.knowledge = Knowledge(keep=lambda symbol: symbol.name in self.hints)  # never replace a hint
        self.timeout_ms = validate_timeout(timeout_ms)
        self._hints_key: tuple[int, int] | None = None  # (hints, replacements) the point was built from
        self._hints_checked = 0  # facts verified at the point so far
        self._hints_point: dict[str, int] | None = None
        self._cache: dict[object, Proof] = {}
        self._cache_version: tuple[int, int] | None = None  # (facts' version, timeout_ms) of the cache
        self._differences: DifferenceBounds | None = None
        self._differences_version = -1
        self._z3: Z3Session | None = None
        self._z3_facts = 0
        self._facts_snapshot: tuple[sympy.Basic, ...] = ()
        self._snapshot_version = -1

    @property
    def version(self) -> int:
        """Changes whenever the facts change."""
        return self.knowledge.version

    @property
    def facts(self) -> tuple[sympy.Basic, ...]:
        if self._snapshot_version != self.knowledge.version:
            self._facts_snapshot = tuple(self.knowledge.facts)
            self._snapshot_version = self.knowledge.version
        return self._facts_snapshot

    def add_fact(self, fact: ExprLike) -> sympy.Basic:
        """Assume ``fact`` from now on; returns it as parsed and canonicalized."""
        claim = as_claim(fact)
        index = self.knowledge.add(claim, named_symbols(fact) if isinstance(fact, str) else ())
        if self.hints:
            self._hint_point()  # check the facts at the hints now, as torch does when recording a guard
        return self.knowledge.facts[index]

    def checkpoint(self) -> ReasonerCheckpoint:
        """The current fact scope, to :meth:`rollback` to; :meth:`commit` it to keep what follows.

        Checkpoints nest (innermost first), so they can also delimit scopes of temporary facts.
        """
        hints_state = (self._hints_key, self._hints_checked, self._hints_point)
        return ReasonerCheckpoint(self.knowledge.checkpoint(), hints_state)

    def rollback(self, checkpoint: ReasonerCheckpoint) -> None:
        """Forget every fact added since ``checkpoint``: later answers are as if never added."""
        self.knowledge.rollback(checkpoint.knowledge)
        self._hints_key, self._hints_checked, self._hints_point = checkpoint.hints_state
        if self._z3_facts > len(self.knowledge.facts):  # z3 saw a forgotten fact: start afresh
            self.release_z3()

    def commit(self, checkpoint: ReasonerCheckpoint) -> None:
        """Keep the facts added since ``checkpoint`` and close it."""
        self.knowledge.commit(checkpoint.knowledge)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Facts added in the block are kept if it ends normally, forgotten if it raises."""
        checkpoint = self.checkpoint()
        try:
            yield
        except BaseException:
            self.rollback(checkpoint)
            raise
        self.commit(checkpoint)

    def set_range(self, symbol: str | sympy.Symbol, lo: int | None, hi: int | None) -> None:
        """Assume ``lo <= symbol <= hi`` (``None`` leaves that side open)."""
        sym = int_symbol(symbol) if isinstance(symbol, str) else symbol
        lo, hi = check_bound(lo, "lo"), check_bound(hi, "hi")
        if lo is not None:
            self.add_fact(_bound_fact(sympy.Ge, sym, lo))
        if hi is not None:
            self.add_fact(_bound_fact(sympy.Le, sym, hi))

    def bound(self, expr: ExprLike) -> ValueRange:
        """A range holding every value of the integer expression ``expr`` wherever the facts hold
        (and ``expr`` is defined): the ranges layer's interval, narrowed to :meth:`residue`.

        Sound but not always tight; empty when the facts contradict each other or ``expr`` is
        defined nowhere they hold (``s0 // s0`` where ``Eq(s0, 0)``).
        """
        try:
            analyzers, resolved = self._analyzed(expr)
            bounds = analyzers.bounds.bound(resolved)
            residues = analyzers.residues.analyze(resolved)
        except ZeroDivisionError:  # a divisor is 0 wherever the facts hold: no value at all
            return ValueRange(1, 0)
        return bounds if residues is None else tighten(bounds, residues)

    def residue(self, expr: ExprLike) -> ModularSet | None:
        """The residue class the integer expression ``expr`` lies in wherever the facts hold (and
        ``expr`` is defined); ``ModularSet(1, 0)`` when nothing is known, None when ``expr`` is
        not known to be an integer.
        """
        try:
            analyzers, resolved = self._analyzed(expr)
            return analyzers.residues.analyze(resolved)
        except ZeroDivisionError:  # a divisor is 0 wherever the facts hold: no value to know
            return ModularSet(1, 0)

    def _analyzed(self, expr: ExprLike) -> tuple[Simplifier, sympy.Basic]:
        """``expr`` through the replacements and rewritten, with the analyzers over the facts."""
        value = as_expr(expr)
        if is_claim(value):
            raise ArgumentError(f"bound and residue take an integer expression, got the claim {value}; use prove")
        knowledge = self.knowledge
        resolved = substitute(value, knowledge.replacements)
        analyzers = Simplifier(knowledge.ranges, knowledge.congruences)
        return analyzers, analyzers(resolved) if needs_rewriting(resolved) else resolved

    def prove(self, claim: ExprLike) -> Proof:
        """Decide ``claim`` under the facts: proved, refuted (with counterexample) or unknown."""
        if not isinstance(claim, (str, int, sympy.Basic)):  # before the cache, which needs a hashable key
            as_expr(claim)
        version = (self.knowledge.version, self.timeout_ms)  # a longer timeout may decide what timed out
        if self._cache_version != version:
            self._cache = {}
            self._cache_version = version
        found = self._cache.get(claim)
        if found is None:
            found = self._prove(claim)
            if found.counterexample is not None:  # it binds every symbol of the claim and the facts
                named = named_symbols(claim) if isinstance(claim, str) else ()
                symbols = self.knowledge.symbols | symbols_of(found.claim) | frozenset(named)
                found = replace(found, counterexample=bind_all(found.counterexample, symbols, self.knowledge, self.hints))
            self._cache[claim] = found
        return found

    # -- layers -----------------------------------------------------------------------------

    def _used(self, indices: Iterable[int]) -> tuple[sympy.Basic, ...]:
        facts = self.knowledge.facts
        return tuple(facts[i] for i in sorted(set(indices)))

    def _proof(self, claim: sympy.Basic, status: str, method: str, **extra: object) -> Proof:
        return Proof(claim=claim, status=status, method=method, facts=self.facts, **extra)  # type: ignore[arg-type]

    def _prove(self, raw: ExprLike) -> Proof:
        claim = as_claim(raw)
        knowledge = self.knowledge
        if knowledge.contradiction is not None:
            return self._proof(
                claim, "proved", "facts", facts_used=self._used(knowledge.contradiction),
                reason="the facts contradict each other, so every claim follows",
            )
        at_hints = self._hint_point()
        if at_hints is not None and all(s.name in at_hints for s in symbols_of(claim)) and not holds(claim, at_hints):
            return self._proof(claim, "refuted", "search", counterexample=dict(at_hints))
        try:
            prepared = self._prepare(claim)
        except ZeroDivisionError:  # a divisor is zero wherever the facts hold: the claim never holds
            prepared = sympy.false
        verdict = None
        if prepared is not None:
            differences = self._difference_bounds()
            for rewrite in (False, True):
                cheap = CheapLayers(knowledge, rewrite=rewrite, differences=differences)
                try:
                    verdict = cheap.decide(prepared)
                except ZeroDivisionError:
                    verdict = False
                if verdict is True:
                    symbols = symbols_of(claim) | symbols_of(prepared)
                    if LAYERS[cheap.layer] == "differences":  # a chain of facts through other symbols
                        symbols = differences.connected(symbols)
                    used = self._used(knowledge.provenance(symbols))
                    return self._proof(claim, "proved", LAYERS[cheap.layer], facts_used=used)
                if verdict is False or rewrite or not needs_rewriting(prepared):
                    break
                # Before rewriting (which builds expressions): most false claims fail at once.
                witness = self._search(claim, _PROBE_BUDGET)
                if witness is not None:
                    return self._proof(claim, "refuted", "search", counterexample=witness)
        # A few well-chosen points refute most false claims faster than z3 can.
        budget = _SEARCH_BUDGET if verdict is False else _QUICK_SEARCH_BUDGET
        witness = self._search(claim, budget)
        if witness is not None:
            return self._proof(claim, "refuted", "search", counterexample=witness)
        # z3 gets the claim with the facts' replacements applied when that is sound (prepared
        # is defined wherever the facts hold): substitution spares it nonlinear reasoning.
        return self._prove_z3(claim, searched=budget, encoded=claim if prepared is None else prepared)

    def _search(self, claim: sympy.Basic, budget: int) -> dict[str, int] | None:
        """A counterexample to ``claim`` among ``budget`` points, varying the symbols a chain of
        inequalities links to its own (at their first value, ``s1`` breaks ``s0 < s1, s1 < s2``)."""
        linked = self._difference_bounds().connected(symbols_of(claim))
        return find_counterexample(claim, self.knowledge, self.hints, budget=budget, linked=linked)

    def _difference_bounds(self) -> DifferenceBounds:
        """The difference graph of the current facts, built once per version of them."""
        if self._differences_version != self.knowledge.version:
            self._differences = DifferenceBounds(self.knowledge)
            self._differences_version = self.knowledge.version
        return self._differences  # type: ignore[return-value]

    def _hint_point(self) -> dict[str, int] | None:
        """The hints, extended through the replacements, if they satisfy every fact.

        A claim false there is refuted at once, with the hints as counterexample: the
        cheapest answer there is, and the common one for an env, whose guards hold at its
        hints by construction. Facts are checked once each, as they arrive.
        """
        knowledge = self.knowledge
        key = (len(self.hints), len(knowledge.replacements))
        if self._hints_key != key:
            self._hints_key, self._hints_checked = key, 0
            try:
                point = extend_assignment(self.hints, knowledge.replacements) if self.hints else None
            except ArithmeticError:
                point = None
            if point is not None and any(s.name not in point for e in knowledge.replacements.values() for s in symbols_of(e)):
                point = None  # a replacement over a symbol without a hint: no full point
            self._hints_point = point  # type: ignore[assignment]
        point = self._hints_point
        if point is not None and self._hints_checked < len(knowledge.facts):
            try:
                if not satisfies(knowledge.facts[self._hints_checked :], point):
                    self._hints_point = None
            except UnboundSymbolError:  # a fact on a symbol without a hint: no full point
                self._hints_point = None
            self._hints_checked = len(knowledge.facts)
        return self._hints_point

    def _prepare(self, claim: sympy.Basic) -> sympy.Basic | None:
        """``claim`` canonicalized and substituted, or None if it may be undefined.

        The cheap layers may only read a claim that is defined wherever the facts hold, i.e.
        every divisor is nonzero there: rebuilding it (which lets sympy simplify ``A | ~A`` to
        True) then cannot hide a division by zero.
        """
        replacements = self.knowledge.replacements
        claim_divisors = divisors(claim)
        if claim_divisors:
            nonzero = CheapLayers(self.knowledge)
            for divisor in claim_divisors:
                if nonzero.decide(sympy.Ne(substitute(fold(canonicalize(divisor)), replacements), 0)) is not True:
                    return None
        return substitute(fold(canonicalize(claim)), replacements)  # defined wherever the facts hold: may fold

    def release_z3(self) -> None:
        """Free this reasoner's z3 session (its context holds about 16 MB); a later query that
        needs z3 starts a fresh one with the same facts, and gets the answers a first query would."""
        self._z3, self._z3_facts = None, 0  # the session frees its z3 objects inside z3_threads.exclusive()

    def _session(self) -> Z3Session:
        if self._z3 is None:
            self._z3 = Z3Session()
        facts = self.knowledge.facts
        for fact in facts[self._z3_facts :]:
            self._z3.add_fact(fact)
        self._z3_facts = len(facts)
        return self._z3

    def _prove_z3(self, claim: sympy.Basic, *, searched: int, encoded: sympy.Basic) -> Proof:
        """Ask z3 about ``encoded`` (``claim`` or an equivalent form wherever the facts hold).

        A model is reported only if exact evaluation confirms it against ``claim``. ``searched``
        is the search budget already spent on ``claim``; if z3 gives up, a larger search runs.
        """
        with z3_threads.exclusive():
            answer = self._session().check(encoded, Budget(self.timeout_ms))
        if answer.status == "unsat":
            return self._proof(claim, "proved", "z3", facts_used=self._used(answer.core or ()))
        if answer.status == "sat":
            model = dict(answer.model or {})
            if self._is_counterexample(claim, model):
                return self._proof(claim, "refuted", "z3", counterexample=model)
            reason = "z3's model is not a counterexample under exact evaluation (float functions are opaque to z3)"
        else:
            reason = answer.reason
        witness = None
        if searched < _SEARCH_BUDGET:
            witness = self._search(claim, _SEARCH_BUDGET)
        if witness is not None:
            return self._proof(claim, "refuted", "search", counterexample=witness)
        return self._proof(claim, "unknown", "none", reason=reason)

    def _is_counterexample(self, claim: sympy.Basic, values: dict[str, int]) -> bool:
        try:
            return satisfies(self.knowledge.facts, values) and not holds(claim, values)
        except UnboundSymbolError:
            return False


@functools.lru_cache(maxsize=1 << 12)
def _bound_fact(relation: type, symbol: sympy.Symbol, value: int) -> sympy.Basic:
    """``relation(symbol, value)``, one object per bound (cached: sympy's constructor costs more
    than the digest of the fact, and the caches keyed by expression then match it by identity)."""
    evaluate = symbol != int_symbol(symbol.name)  # sympy cannot decide an integer symbol's bound: need not try
    return relation(symbol, value, evaluate=evaluate)


_SCOPES: OrderedDict[tuple, Reasoner] = OrderedDict()
_SCOPES_KEPT = 64
_SESSIONS_KEPT = 4  # the most recently used kept scopes keep their z3 session: 64 sessions held 1.1 GB


def _scope_key(
    facts: Iterable[ExprLike], ranges: Mapping[str, tuple[int | None, int | None]] | None, timeout_ms: int
) -> tuple:
    """Facts with their types: ``True == 1``, but only ``True`` is a fact."""
    return (tuple((type(f), f) for f in facts), tuple(sorted((ranges or {}).items())), timeout_ms)


def prove(
    claim: ExprLike,
    *,
    facts: Iterable[ExprLike] = (),
    ranges: Mapping[str, tuple[int | None, int | None]] | None = None,
    timeout_ms: int = 1000,
) -> Proof:
    """Prove ``claim`` from ``facts`` and ``ranges`` (symbol name → ``(lo, hi)``, None = open).

    Free symbols are integers with no sign assumed unless a fact or range says so. Scopes are
    kept (the last 64), and so are answers by the arguments as given (the last 4096): repeating
    a query is one dictionary lookup, before any parsing. A query all in plain text (chains of
    inequalities, bounds, divisibility by constants) is first decided without sympy, where it
    can be (:mod:`shapecore.quick_proving`). ``timeout_ms`` bounds the whole
    call's z3 work: a deterministic budget of ``timeout_ms * RLIMIT_PER_MS`` z3 resource units,
    and a wall-clock backstop of ``timeout_ms`` that answers ``unknown`` if it fires
    (:mod:`shapecore.budget`); a call with another ``timeout_ms`` is a query of its own.

    >>> prove("Eq(Mod(s0*s1, 8), 0)", facts=["Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"]).status
    'proved'
    """
    # The answer cache's key: the arguments as given, by value, copied (a list or dict mutated
    # since cannot reach a stale answer). None (no caching) unless facts is a list or tuple,
    # ranges a dict (or None) of pairs of exact ints or None, and timeout_ms an exact int:
    # True == 1 and 1.0 == 1 would otherwise share the answer of arguments that prove accepts,
    # where it refuses theirs; for the same reason only answers to text or sympy are kept.
    # Every repeated query passes here, so it is written for speed (no call).
    key = None
    if type(timeout_ms) is int and (type(facts) is list or type(facts) is tuple):
        if ranges is None:
            key = (claim, tuple(facts), None, timeout_ms)
        elif type(ranges) is dict:
            spans = tuple(ranges.items())
            key = (claim, tuple(facts), spans, timeout_ms)
            try:
                for _, (lo, hi) in spans:  # a list (unhashable) or a tuple of other values never equals a valid span
                    if (lo is not None and type(lo) is not int) or (hi is not None and type(hi) is not int):
                        key = None
                        break
            except (TypeError, ValueError):  # not a pair
                key = None
    if key is None:
        return _scope(facts, ranges, timeout_ms).prove(claim)
    try:
        return _ANSWERS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable claim or fact: the scope validates it
        return _scope(facts, ranges, timeout_ms).prove(claim)
    found = _quick_proof(claim, key[1], key[2], timeout_ms)
    if found is None:
        found = _scope(key[1], ranges, timeout_ms).prove(claim)
    if all(isinstance(value, (str, sympy.Basic)) for value in (claim, *key[1])):  # not True, equal to 1
        _ANSWERS[key] = found
        if len(_ANSWERS) > _ANSWERS_KEPT:
            del _ANSWERS[next(iter(_ANSWERS))]
    return found


_ANSWERS: dict[tuple, Proof] = {}
_ANSWERS_KEPT = 4096


def _quick_proof(claim: ExprLike, facts: tuple, spans: tuple | None, timeout_ms: int) -> Proof | None:
    """:mod:`shapecore.quick_proving`'s answer to a query all in text (``spans``: the ranges'
    items, pairs of ints or None), its sympy parts built by the scope when first read; None where
    the scope must decide (or report an error)."""
    if type(claim) is not str or timeout_ms <= 0 or not all(type(fact) is str for fact in facts):
        return None
    ranges = dict(spans or ())
    answer = quick_proving.decide(claim, list(facts), ranges)
    if answer is None:
        return None

    def build() -> tuple:
        reasoner = _scope(facts, ranges, timeout_ms)
        parsed = as_claim(claim)
        used = None
        if answer.status == "proved":  # the facts the scope's own proof uses, else all of them
            proof = reasoner.prove(claim)
            used = proof.facts_used if proof.proved else reasoner.facts
        return parsed, reasoner.facts, used

    return DeferredProof(answer.status, answer.method, build, answer.counterexample)


def bound(
    expr: ExprLike, *, facts: Iterable[ExprLike] = (), ranges: Mapping[str, tuple[int | None, int | None]] | None = None
) -> ValueRange:
    """A range holding every value of ``expr`` under ``facts`` and ``ranges`` (as for :func:`prove`);
    see :meth:`Reasoner.bound`.

    >>> bound("s0 // 4", facts=["Eq(Mod(s0, 4), 0)"], ranges={"s0": (1, 64)})
    ValueRange(lo=1, hi=16)
    """
    return _scope(facts, ranges).bound(expr)


def residue(
    expr: ExprLike, *, facts: Iterable[ExprLike] = (), ranges: Mapping[str, tuple[int | None, int | None]] | None = None
) -> ModularSet | None:
    """The residue class of ``expr`` under ``facts`` and ``ranges`` (as for :func:`prove`); see
    :meth:`Reasoner.residue`.

    >>> residue("3*s0 + 1", facts=["Eq(Mod(s0, 4), 2)"])
    ModularSet(coeff=12, base=7)
    """
    return _scope(facts, ranges).residue(expr)


def _scope(
    facts: Iterable[ExprLike], ranges: Mapping[str, tuple[int | None, int | None]] | None, timeout_ms: int = 1000
) -> Reasoner:
    """The reasoner of these facts and ranges, from the kept scopes or new."""
    key = _scope_key(guard_list(facts, "facts"), check_ranges(ranges), validate_timeout(timeout_ms))  # True == 1
    reasoner = _SCOPES.get(key)
    if reasoner is None:
        reasoner = Reasoner(timeout_ms=timeout_ms)
        for name, (lo, hi) in key[1]:
            reasoner.set_range(name, lo, hi)
        for _, fact in key[0]:
            reasoner.add_fact(fact)
        _SCOPES[key] = reasoner
        if len(_SCOPES) > _SCOPES_KEPT:
            _SCOPES.popitem(last=False)
    else:
        _SCOPES.move_to_end(key)
    # using a scope pushes at most one other out of the most recent few: only that one may hold a session
    pushed_out = next(itertools.islice(reversed(_SCOPES.values()), _SESSIONS_KEPT, None), None)
    if pushed_out is not None:
        pushed_out.release_z3()
    return reasoner
