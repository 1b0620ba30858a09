"""Knowledge: what a set of facts implies, in the forms the cheap analyzers use.

Every fact is kept verbatim: z3 and counterexample checks use it as given, since rebuilding
a formula lets sympy simplify away undefined parts (``A | ~A`` becomes ``True`` even where
``A`` divides by zero). Facts of the simple shapes torch records are also *digested*, each
conjunct after canonicalizing, substituting earlier replacements and simplifying (sound, as
the digest only needs to be *implied* by the facts):

* ``Eq(x, e)`` with ``x`` a symbol of coefficient ±1 not occurring in ``e`` → replacement
  ``x := e`` (the later-created symbol is replaced, as in torch: ``s77 := 8*s6``, but never one
  the owner keeps, such as a symbol with a hint, in favour of one it does not); what was known
  about ``x`` is re-stated as facts about ``e``;
* ``a*x + b <rel> 0`` in one symbol → a bound on ``x`` (``Ne`` excludes one value);
* ``a*Mod(p*x + q, m) + b == 0`` → the congruence ``p*x + q ≡ -b/a (mod m)`` solved for ``x``;
* any other linear relation over two or more symbols (``s0 < s1``, ``s0 <= 4*s1 - 1``, an
  ``Eq`` no symbol can be isolated from) → inequalities ``c1*x1 + ... <= b`` (:class:`Inequality`) with
  integer coefficients, read by :mod:`shapecore.differences`. The fact also stays pending, so
  that a later replacement re-digests it in the new symbols.

Python's ``and``/``or`` (:data:`~shapecore.operations.SHORT_CIRCUITS`) are not digested, only
the conjuncts of an ``and`` that have none: a short circuit may hold where a divisor in it is
zero, so neither substituting into it nor folding it may read a zero divisor as a contradiction.

Ranges are then tightened by congruences and excluded values at their ends
(``x ≡ 0 mod 8`` and ``x >= 1`` give ``x >= 8``); a range narrowed to one value becomes a
replacement. Everything digested is implied by the facts, so analyzers that use it are sound.
An empty range or an unsolvable congruence records :attr:`Knowledge.contradiction`: the facts
that cannot hold together.

:meth:`Knowledge.checkpoint` and :meth:`Knowledge.rollback` make adding facts undoable: while
a checkpoint is open every change is journaled, and rolling back restores the state exactly
(a rejected fact leaves no trace; a scope of temporary facts ends where it began).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy

from shapecore import functions as F
from shapecore.modular import ModularSet, combine_congruences, solve_linear_congruence, tighten
from shapecore.ranges import UNBOUNDED, ValueRange, is_infinite
from shapecore.rewrite import Simplifier, canonicalize, fold, needs_rewriting, short_circuit, substitute, symbols_of

__all__ = ["Knowledge", "Checkpoint", "Inequality", "creation_order"]

_FLIP = {sympy.Lt: sympy.Gt, sympy.Le: sympy.Ge, sympy.Gt: sympy.Lt, sympy.Ge: sympy.Le}
_SYMBOL_BOUNDS = frozenset({sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Ne})
"""The relations ``x <rel> c`` of an integer symbol and an integer digests as a bound (or an excluded value)."""


def _symbol_bound(fact: sympy.Basic) -> tuple[type, sympy.Symbol, int] | None:
    """``(relation, x, c)`` when ``fact`` is ``x <relation> c`` for an integer symbol ``x``, an
    integer ``c`` and a relation of :data:`_SYMBOL_BOUNDS`; else None."""
    if type(fact) in _SYMBOL_BOUNDS:
        x, c = fact.args
        if x.is_Symbol and x.is_integer and c.is_Integer:
            return type(fact), x, int(c)
    return None


def creation_order(name: str) -> tuple[int, str]:
    """Sort key putting torch-style symbol names in creation order (``s2`` before ``s10``).

    The knowledge replaces the latest-created of the symbols a fact allows; lowering numbers
    local symbols in this order.
    """
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz_")
    return (int(digits) if digits.isdigit() else -1, name)


def _linear(
    expr: sympy.Basic, terms: Mapping[sympy.Basic, sympy.Basic] | None = None
) -> tuple[sympy.Symbol, Fraction, Fraction] | None:
    """``(x, a, b)`` when ``expr == a*x + b`` with one symbol and rational ``a != 0, b``
    (``terms``: ``expr.as_coefficients_dict()`` if the caller has it)."""
    symbols = symbols_of(expr)
    if len(symbols) != 1:
        return None
    (x,) = symbols
    if not x.is_integer:
        return None
    a = Fraction(0)
    b = Fraction(0)
    for term, coeff in (expr.as_coefficients_dict() if terms is None else terms).items():
        if not coeff.is_Rational:
            return None
        c = Fraction(int(coeff.p), int(coeff.q))
        if term is sympy.S.One:  # the constant's key
            b += c
        elif term == x:
            a += c
        else:
            return None
    return (x, a, b) if a else None


@dataclass(frozen=True)
class Inequality:
    """``sum(c * x for x, c in terms) <= bound`` over integer symbols (by name), coefficients coprime."""

    terms: tuple[tuple[sympy.Symbol, int], ...]
    bound: int


_SENSES = {sympy.Le: [(1, 0)], sympy.Lt: [(1, 1)], sympy.Ge: [(-1, 0)], sympy.Gt: [(-1, 1)], sympy.Eq: [(1, 0), (-1, 0)]}
"""Per relation of ``d`` to 0, each ``(sign, strict)`` with ``sign*d <= -strict`` for an integer ``d``."""


def _inequalities(relation: type, terms: Mapping[sympy.Basic, sympy.Basic]) -> list[Inequality]:
    """``difference <relation> 0`` as inequalities, if ``difference`` (as its ``terms``, from
    ``as_coefficients_dict``) is linear in 2+ integer symbols.

    Scaled to integer coefficients, a strict relation loses one (``d < 0`` is ``d <= -1`` for
    an integer ``d``) and the bound is divided by the coefficients' gcd, rounding down.
    """
    if relation is sympy.Ne:
        return []
    coefficients: dict[sympy.Symbol, tuple[int, int]] = {}  # as numerator, denominator
    constant = (0, 1)
    for term, coeff in terms.items():
        if not coeff.is_Rational:
            return []
        if term is sympy.S.One:  # the key of the constant (== 1 would sympify every other term)
            constant = (int(coeff.p), int(coeff.q))
        elif term.is_Symbol and term.is_integer:
            coefficients[term] = (int(coeff.p), int(coeff.q))
        else:
            return []
    if len(coefficients) < 2:
        return []
    scale = math.lcm(*(q for _, q in coefficients.values()), constant[1])
    terms = [(x, p * (scale // q)) for x, (p, q) in sorted(coefficients.items(), key=lambda item: item[0].name)]
    k = constant[0] * (scale // constant[1])  # scale*difference = sum(terms) + k, an integer
    senses = _SENSES[relation]
    found = []
    for sign, strict in senses:  # sign*(sum + k) <= -strict
        signed = tuple((x, sign * c) for x, c in terms)
        divisor = math.gcd(*(c for _, c in signed))
        bound = -strict - sign * k
        found.append(Inequality(tuple((x, c // divisor) for x, c in signed), bound // divisor))
    return found


def _strict_conjuncts(fact: sympy.Basic) -> list[sympy.Basic]:
    """Parts of ``fact`` that hold wherever it does, each without Python's ``and``/``or``.

    ``fact`` itself when it has none; else its conjuncts (``A and B`` holds exactly where ``A``
    and ``B`` both do, like ``A & B``), those that have one left out: a short circuit may be
    defined, and hold, where some of its divisors are zero, which the digest cannot express.
    """
    if not short_circuit(fact):
        return [fact]
    parts, stack = [], [fact]
    while stack:
        part = stack.pop()
        if isinstance(part, (sympy.And, F.PythonAnd)):
            stack.extend(reversed(part.args))
        elif not short_circuit(part):
            parts.append(part)
    return parts


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def _floor(value: Fraction) -> int:
    return math.floor(value)


@dataclass(frozen=True)
class Checkpoint:
    """A state of a :class:`Knowledge` to roll back to (see :meth:`Knowledge.checkpoint`)."""

    owner: Knowledge
    depth: int  # how many checkpoints were open when this one was taken
    journal: int  # length of the undo journal then
    facts: int
    symbols: frozenset[sympy.Symbol]
    contradiction: tuple[int, ...] | None


_ABSENT = object()


class Knowledge:
    """The facts of one scope and their digest: replacements, ranges, congruences.

    ``version`` increases with every change (a rollback included), so caches keyed by it stay
    valid.
    """

    def __init__(self, keep: Callable[[sympy.Symbol], bool] = lambda symbol: False) -> None:
        """``keep``: symbols to keep rather than replace when a fact allows either."""
        self.keep = keep
        self.facts: list[sympy.Basic] = []
        self.symbols: frozenset[sympy.Symbol] = frozenset()  # every symbol the facts mention
        self.replacements: dict[sympy.Symbol, sympy.Basic] = {}
        self.ranges: dict[sympy.Symbol, ValueRange] = {}
        # what each replaced symbol's range was when it was replaced: re-stated as facts about its
        # replacement, and still true of it where ranges alone bound the replacement more loosely
        self.replaced_ranges: dict[sympy.Symbol, ValueRange] = {}
        self.congruences: dict[sympy.Symbol, ModularSet] = {}
        self.contradiction: tuple[int, ...] | None = None
        self.version = 0
        self._declared: dict[sympy.Symbol, ValueRange] = {}
        self._excluded: dict[sympy.Symbol, set[int]] = {}
        self._provenance: dict[sympy.Symbol, set[int]] = {}
        self.inequalities: list[Inequality] = []
        self._pending: list[tuple[sympy.Basic, set[int]]] = []  # not digestible (yet)
        self._open: list[Checkpoint] = []  # checkpoints not yet rolled back or committed
        self._journal: list[Callable[[], None]] = []  # undoes each change made since the first of them

    # -- undo -----------------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """The current state, to :meth:`rollback` to; :meth:`commit` it to keep what follows.

        Checkpoints nest: each must be rolled back or committed, innermost first. While one
        is open, every change is journaled (a few closures per fact).
        """
        checkpoint = Checkpoint(self, len(self._open), len(self._journal), len(self.facts), self.symbols,
                                self.contradiction)
        self._open.append(checkpoint)
        return checkpoint

    def rollback(self, checkpoint: Checkpoint) -> None:
        """Undo every change since ``checkpoint`` and close it (and any opened after it)."""
        self._close(checkpoint)
        journal = self._journal
        while len(journal) > checkpoint.journal:
            journal.pop()()
        del self.facts[checkpoint.facts :]
        self.symbols = checkpoint.symbols
        self.contradiction = checkpoint.contradiction
        self.version += 1  # never reuse a version: caches keyed by it would see stale answers
        if not self._open:
            journal.clear()

    def commit(self, checkpoint: Checkpoint) -> None:
        """Keep every change since ``checkpoint`` and close it (and any opened after it)."""
        self._close(checkpoint)
        if not self._open:
            self._journal.clear()

    def _close(self, checkpoint: Checkpoint) -> None:
        if checkpoint.owner is not self or checkpoint.depth >= len(self._open) or self._open[checkpoint.depth] is not checkpoint:
            raise ValueError("this checkpoint is not open on this Knowledge (already rolled back or committed?)")
        del self._open[checkpoint.depth :]

    def _set(self, mapping: dict, key: object, value: object) -> None:
        """``mapping[key] = value``, undoably."""
        if self._open:
            old = mapping.get(key, _ABSENT)
            self._journal.append(lambda: mapping.pop(key) if old is _ABSENT else mapping.__setitem__(key, old))
        mapping[key] = value

    def _pop(self, mapping: dict, key: object, default: object = None) -> object:
        """``mapping.pop(key, default)``, undoably."""
        old = mapping.pop(key, _ABSENT)
        if old is _ABSENT:
            return default
        if self._open:
            self._journal.append(lambda: mapping.__setitem__(key, old))
        return old

    def _grow(self, mapping: dict[sympy.Symbol, set], key: sympy.Symbol, items: Iterable) -> None:
        """``mapping[key] |= items`` (a new set if there is none), undoably."""
        current = mapping.get(key)
        if current is None:
            self._set(mapping, key, set(items))
            return
        new = set(items) - current
        if new:
            current |= new
            if self._open:
                self._journal.append(lambda: current.difference_update(new))

    def _assign(self, name: str, value: object) -> None:
        """``self.<name> = value``, undoably."""
        if self._open:
            old = getattr(self, name)
            self._journal.append(lambda: setattr(self, name, old))
        setattr(self, name, value)

    def _append(self, items: list, item: object) -> None:
        """``items.append(item)``, undoably."""
        items.append(item)
        if self._open:
            self._journal.append(items.pop)

    # -- public ---------------------------------------------------------------------------

    def add(self, fact: sympy.Basic, mentions: Iterable[sympy.Symbol] = ()) -> int:
        """Record ``fact`` (a relation or boolean combination); returns its index.

        ``mentions``: symbols the fact was written with that folding removed (``Eq(s1, s1)``),
        counted in :attr:`symbols` all the same. A fact with a divisor that is identically zero
        can never hold: it is kept as given and recorded as a contradiction.
        """
        index = len(self.facts)
        self.facts.append(fact)
        self.symbols |= symbols_of(fact) | frozenset(mentions)
        self.version += 1
        bound = _symbol_bound(fact)
        if bound is not None and bound[1] not in self.replacements:
            # What a range becomes (s0 >= 2): canonical, folded and unreplaced as it is, so the
            # path below would only rebuild it to reach _bound_symbol; skip that.
            self._bound_symbol(*bound, {index})
            return index
        for part in _strict_conjuncts(fact):
            try:
                canonical = fold(canonicalize(part))  # folding may drop divisions: fine for what the fact implies
            except ZeroDivisionError:
                self._contradict({index})
                return index
            for conjunct in sympy.And.make_args(canonical):
                self._digest(conjunct, {index})
        return index

    def provenance(self, symbols: Iterable[sympy.Symbol]) -> set[int]:
        """Indices of the facts behind what is known about ``symbols``."""
        found: set[int] = set()
        for symbol in symbols:
            found |= self._provenance.get(symbol, set())
        return found

    def range_of(self, symbol: sympy.Symbol) -> ValueRange:
        """The tightest known range of ``symbol`` (unbounded when nothing is known)."""
        return self.ranges.get(symbol, UNBOUNDED)

    # -- digestion ------------------------------------------------------------------------

    def _contradict(self, sources: set[int]) -> None:
        if self.contradiction is None:
            self.contradiction = tuple(sorted(sources))  # restored by rollback from the checkpoint

    def _digest(self, fact: sympy.Basic, sources: set[int]) -> None:
        """Fold ``fact`` into the digest, or keep it pending until a replacement simplifies it."""
        try:
            substituted = substitute(fact, self.replacements)
        except ZeroDivisionError:  # a divisor is zero wherever the facts so far hold
            substituted = sympy.false
        if substituted is sympy.false:
            self._contradict(sources | self.provenance(fact.free_symbols))
        elif not self._fold(substituted, sources):
            self._append(self._pending, (fact, sources))

    def _fold(self, fact: sympy.Basic, sources: set[int]) -> bool:
        if fact is sympy.true:
            return True
        if fact is sympy.false:
            self._contradict(sources)
            return True
        if not fact.is_Relational:
            return False
        bound = _symbol_bound(fact)
        if bound is not None:
            # The general path below would simplify lhs - rhs to itself and read it as
            # 1*x - rhs; skip building it.
            self._bound_symbol(*bound, sources)
            return True
        lhs, rhs = fact.args
        relation = type(fact)
        try:
            difference = lhs - rhs
            if needs_rewriting(difference):  # else the Simplifier returns it as it is
                difference = Simplifier(self.ranges, self.congruences)(difference)
        except ZeroDivisionError:  # a divisor is zero wherever the facts so far hold
            self._contradict(sources | self.provenance(fact.free_symbols))
            return True
        if difference.is_Number:
            holds = {sympy.Eq: difference == 0, sympy.Ne: difference != 0, sympy.Lt: difference < 0,
                     sympy.Le: difference <= 0, sympy.Gt: difference > 0, sympy.Ge: difference >= 0}[relation]
            if not holds:
                self._contradict(sources | self.provenance(fact.free_symbols))
            return True
        terms = difference.as_coefficients_dict()
        if relation is sympy.Eq and (self._replace(difference, terms, sources) or self._congruence(terms, sources)):
            return True
        linear = _linear(difference, terms)
        if linear is None:
            for inequality in _inequalities(relation, terms):
                self._append(self.inequalities, inequality)
                for x, _ in inequality.terms:
                    self._grow(self._provenance, x, sources)
            return False
        self._bound(relation, *linear, sources)
        return True

    def _replace(self, difference: sympy.Basic, terms: Mapping[sympy.Basic, sympy.Basic], sources: set[int]) -> bool:
        """Digest ``difference == 0`` (``terms``: its ``as_coefficients_dict()``) as ``x := e`` when
        some symbol ``x`` can be isolated."""
        candidates = [
            t for t, c in terms.items()
            if t.is_Symbol and t.is_integer and c in (1, -1) and not any(t in symbols_of(other) for other in terms if other != t)
        ]
        if not candidates:
            linear = _linear(difference, terms)
            if linear is None:
                return False
            x, a, b = linear
            value = -b / a
            if value.denominator != 1:
                self._contradict(sources | self.provenance([x]))
                return True
            candidates, terms = [x], {x: sympy.Integer(1)}
            difference = x - int(value)
        x = max(candidates, key=lambda s: (not self.keep(s), creation_order(s.name)))
        expression = -(difference - terms[x] * x) / terms[x]
        if not expression.is_integer:
            return False
        self._add_replacement(x, expression, sources)
        return True

    def _add_replacement(self, x: sympy.Symbol, expression: sympy.Basic, sources: set[int]) -> None:
        sources = sources | self._pop(self._provenance, x, set())
        for symbol in expression.free_symbols:
            self._grow(self._provenance, symbol, sources)
        try:
            replacements = {y: substitute(e, {x: expression}) for y, e in self.replacements.items()}
        except ZeroDivisionError:  # another replacement divides by x, which is now zero
            self._contradict(sources)
            return
        replacements[x] = expression
        self._assign("replacements", replacements)
        self.version += 1
        known = self._pop(self._declared, x, UNBOUNDED)
        congruence = self._pop(self.congruences, x)
        excluded = self._pop(self._excluded, x, set())
        self._set(self.replaced_ranges, x, self._pop(self.ranges, x, UNBOUNDED))
        if not is_infinite(known.lo):
            self._digest(sympy.Ge(expression, known.lo), sources)
        if not is_infinite(known.hi):
            self._digest(sympy.Le(expression, known.hi), sources)
        if congruence is not None:
            self._digest(sympy.Eq(F.Mod(expression - congruence.base, congruence.coeff), 0), sources)
        for value in excluded:
            self._digest(sympy.Ne(expression, value), sources)
        waiting = [(f, src) for f, src in self._pending if x in f.free_symbols]
        if waiting:
            self._assign("_pending", [(f, src) for f, src in self._pending if x not in f.free_symbols])
            for fact, fact_sources in waiting:
                self._digest(fact, fact_sources)

    def _congruence(self, terms: Mapping[sympy.Basic, sympy.Basic], sources: set[int]) -> bool:
        """Digest ``a*Mod(p*x + q, m) + b == 0`` (as its ``terms``) as a congruence on ``x``."""
        constant = terms.get(sympy.S.One, sympy.S.Zero)
        others = [(t, c) for t, c in terms.items() if t is not sympy.S.One]
        if len(others) != 1:
            return False
        mod, a = others[0]
        if not (isinstance(mod, F.Mod) and mod.args[1].is_Integer and mod.is_integer):
            return False  # not a congruence (a remainder of a float or a fraction is no integer)
        residue = -constant / a
        if not residue.is_Integer:  # an integer-valued Mod cannot equal a fraction
            self._contradict(sources | self.provenance(mod.free_symbols))
            return True
        inner = _linear(mod.args[0])
        if inner is None:
            return False
        x, p, q = inner
        m, r = int(mod.args[1]), int(residue)
        if not (0 <= r < m if m > 0 else m < r <= 0):
            self._contradict(sources | self.provenance([x]))
            return True
        if p.denominator != 1 or q.denominator != 1:
            return False
        solution = solve_linear_congruence(int(p), r - int(q), m)
        if solution is None:
            self._contradict(sources | self.provenance([x]))
            return True
        self._restrict(x, sources, congruence=solution)
        return True

    def _bound_symbol(self, relation: type, x: sympy.Symbol, c: int, sources: set[int]) -> None:
        """Digest ``x <relation> c`` (a relation of :data:`_SYMBOL_BOUNDS`), in integers."""
        if relation is sympy.Ge:
            self._restrict(x, sources, lo=c)
        elif relation is sympy.Gt:
            self._restrict(x, sources, lo=c + 1)
        elif relation is sympy.Le:
            self._restrict(x, sources, hi=c)
        elif relation is sympy.Lt:
            self._restrict(x, sources, hi=c - 1)
        else:
            self._restrict(x, sources, exclude=c)

    def _bound(self, relation: type, x: sympy.Symbol, a: Fraction, b: Fraction, sources: set[int]) -> None:
        """Digest ``a*x + b <relation> 0``."""
        value = -b / a
        if relation is sympy.Eq:
            if value.denominator != 1:
                self._contradict(sources | self.provenance([x]))
            else:
                self._restrict(x, sources, lo=int(value), hi=int(value))
            return
        if relation is sympy.Ne:
            if value.denominator == 1:
                self._restrict(x, sources, exclude=int(value))
            return
        if a < 0:
            relation = _FLIP[relation]
        if relation is sympy.Ge:
            self._restrict(x, sources, lo=_ceil(value))
        elif relation is sympy.Gt:
            self._restrict(x, sources, lo=_floor(value) + 1)
        elif relation is sympy.Le:
            self._restrict(x, sources, hi=_floor(value))
        elif relation is sympy.Lt:
            self._restrict(x, sources, hi=_ceil(value) - 1)

    def _restrict(
        self,
        x: sympy.Symbol,
        sources: set[int],
        *,
        lo: int | None = None,
        hi: int | None = None,
        exclude: int | None = None,
        congruence: ModularSet | None = None,
    ) -> None:
        """Narrow what is known about ``x`` and re-tighten its range."""
        self._grow(self._provenance, x, sources)
        declared = self._declared.get(x, UNBOUNDED)
        if lo is not None or hi is not None:
            declared = declared & ValueRange(-math.inf if lo is None else lo, math.inf if hi is None else hi)
            self._set(self._declared, x, declared)
        if exclude is not None:
            self._grow(self._excluded, x, (exclude,))
        if congruence is not None:
            old = self.congruences.get(x)
            merged = congruence if old is None else combine_congruences(old, congruence)
            if merged is None:
                self._contradict(self._provenance[x])
                return
            self._set(self.congruences, x, merged)
        self.version += 1
        tightened = self._tighten(x, declared)
        if tightened.is_empty:
            self._contradict(self._provenance[x])
            return
        self._set(self.ranges, x, tightened)
        if tightened.is_point:
            self._add_replacement(x, sympy.Integer(int(tightened.lo)), set(self._provenance.get(x, ())))

    def _tighten(self, x: sympy.Symbol, declared: ValueRange) -> ValueRange:
        """``declared`` shrunk to ``x``'s residue class, then off excluded values at both ends."""
        congruence = self.congruences.get(x)
        if congruence is None:  # declared's ends are ints (or infinite): nothing to round
            lo, hi, step = declared.lo, declared.hi, 1
        else:
            r = tighten(declared, congruence)
            lo, hi, step = r.lo, r.hi, congruence.coeff or 1
        excluded = self._excluded.get(x, set())
        while lo in excluded and lo <= hi:
            lo += step
        while hi in excluded and lo <= hi:
            hi -= step
        return ValueRange(lo, hi)
