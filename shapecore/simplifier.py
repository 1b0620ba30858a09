"""Guard simplification: a smaller *equivalent* guard set, and the reason for every change.

Contract. Let ``context`` be the facts and ranges passed to :func:`simplify`. For every integer
assignment that satisfies ``context``, the input guards all hold (:func:`shapecore.holds`: true
with no zero divisor) exactly when the output guards ``Simplified.guards`` all hold. No output
guard is implied by the others plus ``context`` as far as the analyzers below can tell (the
problem is undecidable in general: when z3 gives up, a guard is kept, never dropped).

Algorithm, cheapest first; each step keeps the set equivalent:

1. **Normalize** — each guard is split into its conjuncts (``And``, and Python's ``and``, hold
   iff every part does, zero divisors included) and canonicalized; conjuncts equal up to the
   side they are written on (``s0 >= 2`` and ``2 <= s0``) are duplicates. A conjunct with
   Python's ``and``/``or`` still in it (``x == 0 or 10 // x > 2``) may hold where one of its
   divisors is zero: steps 2–4 leave it as it is, and only z3 (step 5) reads it.
2. **Digest** — every conjunct goes into one :class:`~shapecore.knowledge.Knowledge` with the
   context. Its digest (replacements ``x := e``, one range and one congruence per symbol) is
   implied by the input, so its *summary guards* may be added to the set: ``Eq(x, e)``, one
   range guard per symbol (``x >= 16`` or ``(x >= 2) & (x <= 10)``: only the sides the context
   does not already give) and the strongest divisibility ``Eq(Mod(x, m), r)``.
3. **Decide cheaply** — a conjunct is dropped when rewriting, interval bounds and residue
   classes show it holds wherever the summary guards (and the context) do. The cheap layers see
   nothing of the digest but its replacements, ranges and congruences, all of which are in the
   summary guards, so this never relies on the dropped conjunct itself. The summary guards are
   the *final* digest's, which need not know all an earlier one did: a replacement ``x := e``
   turns what was known of ``x`` into facts about ``e``, kept aside when they are not of a
   digestible shape (``Eq(Mod(s2, 2), 0)`` with ``s2 := CeilDiv(s0, 16)``). So a conjunct is
   settled again whenever the digest's knowledge of the symbols its verdict read changes (by
   z3 in step 5 after the last round). One that holds nowhere is a contradiction.
4. **Rewrite single-symbol guards** — a conjunct in one symbol ``x`` (after replacements) that
   the cheap layers cannot settle is evaluated on ``x``'s admissible values: all of them when
   there are at most ``2**12``, else a window at the finite end, with z3 proving the guard
   beyond it. If it holds exactly on a sub-range (or everywhere except a few values) it becomes
   that range (or those ``Ne``), which feeds back into the digest:
   ``Ne(Mod(1, FloorDiv(s0, 2)), 0)`` under ``s0 > 2`` becomes ``s0 >= 4``. The rewrite is
   equivalent on ``x``'s admissible values only, so it is undone if ``x`` later gets a
   replacement (as in step 3). Steps 2–4 repeat until the digest stops changing.
5. **z3 on groups, locally** — the remaining conjuncts and summary guards are grouped by the
   symbols they share (a guard can only be implied by guards connected to it through shared
   symbols, context facts or replacements). One model of each group (z3's nonlinear tactic,
   checked by exact evaluation) makes most answers local; see :class:`GroupSolver`. Members
   are visited most complex first; each is kept as soon as a counterexample is found (an
   assignment where all the other kept members hold and it does not, checked exactly), and
   dropped when z3 proves it from a neighbourhood of members (the unsat core names which).
   z3 never sees more than a neighbourhood, and its work per member is bounded. Dropping one
   member at a time, each implied by what is still kept, keeps the set equivalent and leaves no
   member that z3 shows implied by the rest. A group that cannot hold is a contradiction.

z3 works within one :class:`~shapecore.budget.Budget` for the whole run, made from
``timeout_ms``: a resource count (deterministic) with a wall-clock backstop. Each single-symbol
proof (step 4) may use an eighth of what is left; each group (step 5) an equal share of what
is left for the groups still to come, of which its model gets half and each member it decides
an equal share of the rest. Everything that reaches z3 is in a fixed order, so the same input
gives the same output on any machine load and any hash seed, unless the backstop fires.

A contradiction is reported as a minimal unsatisfiable subset of the input conjuncts, which is
then also the output (it accepts nothing, like the input).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import sympy
import z3

from shapecore.budget import Budget
from shapecore.errors import ConstraintError
from shapecore.guard_code import compile_predicate
from shapecore.functions import FloorDiv, Mod, PythonAnd, int_symbol
from shapecore.knowledge import Knowledge
from shapecore.modular import ModularSet, tighten
from shapecore.progress import Progress
from shapecore.ranges import UNBOUNDED, ValueRange, bound, is_infinite
from shapecore.decide import CheapLayers
from shapecore.reasoner import ExprLike, as_claim
from shapecore.rewrite import canonicalize, divisors, keep_definedness, short_circuit, substitute, symbols_of
from shapecore.validation import check_ranges, guard_list
from shapecore.group_solver import GroupSolver, minimal_unsat, ordered, unsatisfiable
from shapecore.z3backend import Translator
from shapecore import z3_threads

__all__ = ["simplify", "Simplified", "Dropped", "Rewrite", "Fate"]

Ranges = Mapping[str, tuple[int | None, int | None]]
DropKind = Literal["duplicate", "tautology", "merged", "implied", "contradiction"]

_ENUMERATE = 1 << 12  # a single-symbol guard is evaluated at every value when there are at most this many
_WINDOW = 64  # else at this many values from the finite end of the range
_FEW = 3  # at most this many failing values become Ne guards
_ROUNDS = 6  # digest / decide / rewrite rounds at most
_SINGLE_SHARE = 1 / 8  # of the budget left, for one single-symbol proof
@dataclass(frozen=True)
class Dropped:
    """An input guard (conjunct) left out of the result, and why.

    ``kind``: ``duplicate`` (of ``by[0]``), ``tautology`` (holds wherever the facts and ranges
    do), ``merged`` (into the summary guards ``by``, which it helped build), ``implied`` (by the
    guards ``by``, all in the result or themselves implied), ``contradiction`` (the set can never
    hold; see :attr:`Simplified.contradiction`).
    """

    guard: sympy.Basic
    kind: DropKind
    by: tuple[sympy.Basic, ...] = ()

    @property
    def reason(self) -> str:
        listed = ", ".join(str(g) for g in self.by)
        return {
            "duplicate": f"duplicate of {listed}",
            "tautology": "tautology: holds wherever the facts and ranges do",
            "merged": f"merged into {listed}",
            "implied": f"implied by {listed}" if listed else "implied by the facts and ranges",
            "contradiction": "the guards can never hold together (see the contradiction)",
        }[self.kind]


@dataclass(frozen=True)
class Rewrite:
    """An input guard replaced by an equivalent one (under the context and the other guards)."""

    guard: sympy.Basic
    to: sympy.Basic
    why: str = ""


@dataclass(frozen=True)
class Fate:
    """What became of one input guard (conjunct): ``kept``, ``rewritten`` or ``dropped``.

    ``source`` is the index of the input guard the conjunct comes from; ``detail`` says why.
    """

    guard: sympy.Basic
    outcome: Literal["kept", "rewritten", "dropped"]
    source: int = 0
    dropped: Dropped | None = None
    rewrite: Rewrite | None = None
    merged_into: tuple[sympy.Basic, ...] = ()
    note: str = ""

    @property
    def detail(self) -> str:
        if self.dropped is not None:
            return self.dropped.reason
        if self.rewrite is not None:
            merged = f"; merged into {', '.join(str(g) for g in self.merged_into)}" if self.merged_into else ""
            return f"as {self.rewrite.to}: {self.rewrite.why}{merged}"
        return self.note or "not implied by the others"


@dataclass(frozen=True)
class Simplified:
    """The result of :func:`simplify`.

    ``guards``: the equivalent set; ``dropped`` and ``rewritten``: what changed and why;
    ``contradiction``: a minimal set of input guards that can never hold together (then also
    ``guards``), or None; ``ranges``: the tightest range found per symbol (``None`` = open);
    ``fates``: every input conjunct in order with what became of it; ``backstop_fired``: z3's
    wall-clock backstop stopped a query (then, and only then, the result may differ on a less
    busy machine; it is equivalent to the input either way).
    """

    guards: tuple[sympy.Basic, ...]
    dropped: tuple[Dropped, ...]
    rewritten: tuple[Rewrite, ...]
    contradiction: tuple[sympy.Basic, ...] | None
    ranges: dict[str, tuple[int | None, int | None]]
    fates: tuple[Fate, ...] = field(repr=False)
    backstop_fired: bool = False

    def to_json(self) -> dict[str, object]:
        """``{"guards", "dropped", "rewritten", "contradiction", "ranges", "backstop_fired"}``, guards in torch
        syntax."""
        text, reason = functools.cache(str), functools.cache(lambda d: d.reason)  # a long input repeats its guards
        return {
            "guards": [str(g) for g in self.guards],
            "dropped": [{"guard": text(d.guard), "reason": reason(d)} for d in self.dropped],
            "rewritten": [{"guard": str(r.guard), "as": str(r.to)} for r in self.rewritten],
            "contradiction": None if self.contradiction is None else [str(g) for g in self.contradiction],
            "ranges": {name: [lo, hi] for name, (lo, hi) in self.ranges.items()},
            "backstop_fired": self.backstop_fired,
        }


# -- normalized guards --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 14)
def _relation_key(claim: sympy.Basic) -> object:
    """A key equal for conjuncts that differ only in the side they are written on."""
    if not claim.is_Relational:
        return claim
    lhs, rhs = claim.args
    if isinstance(claim, (sympy.Le, sympy.Lt)):
        difference, kind = rhs - lhs, "ge" if isinstance(claim, sympy.Le) else "gt"
    elif isinstance(claim, (sympy.Ge, sympy.Gt)):
        difference, kind = lhs - rhs, "ge" if isinstance(claim, sympy.Ge) else "gt"
    else:
        difference, kind = lhs - rhs, type(claim).__name__
        if difference.could_extract_minus_sign():
            difference = -difference
    return (kind, difference)


@functools.lru_cache(maxsize=1 << 14)
def _fold_remainders(claim: sympy.Basic) -> sympy.Basic:
    """``claim`` with ``k*(a - d*FloorDiv(a, d))`` in a relation's difference written ``k*Mod(a, d)``.

    ``a - d*(a // d) == a % d`` wherever ``d != 0`` (Python's division identity), and both
    sides divide by ``d``, so value and definedness are kept. torch records the pair
    ``Eq(Mod(a, d), 0)`` and ``Eq(a, d*(a//d))`` for one ``view``; this makes them one guard.
    """
    if not claim.is_Relational:
        return claim
    difference = claim.lhs - claim.rhs
    floors = [f for f in sympy.preorder_traversal(difference) if isinstance(f, FloorDiv) and not f.args[1].is_Number]
    changed = False
    for floor in floors:
        a, d = floor.args
        expanded = sympy.expand(difference)
        k = sympy.cancel(-expanded.coeff(floor) / d)
        if k == 0 or not k.is_polynomial() or floor in k.atoms(FloorDiv):
            continue
        rest = sympy.expand(expanded - k * a + k * d * floor)
        if floor in rest.atoms(FloorDiv):
            continue
        difference, changed = rest + k * Mod(a, d), True
    return type(claim)(difference, 0) if changed else claim


@dataclass
class _Atom:
    """One input conjunct and what the simplification has made of it so far."""

    index: int
    source: int  # index of the input guard
    expr: sympy.Basic  # as given
    canonical: sympy.Basic
    divisors: frozenset[sympy.Basic]  # non-constant divisors of ``expr``: where it is undefined
    current: sympy.Basic  # ``expr`` or its rewritten form
    fate: tuple | None = None  # ("duplicate", first), ("summary", symbols, what the digest knew of them), ("open", candidate)
    rewrite: Rewrite | None = None
    learned: tuple | None = None  # what the digest knew of its symbols when it last learned it
    assumed: frozenset[sympy.Symbol] = frozenset()  # symbols whose summary guards its rewrite assumes

    @property
    def opaque(self) -> bool:
        """Python's ``and``/``or`` in it: it may hold where a divisor in it is zero, so it has no
        ``divisors``, and only z3 (step 5), which encodes the short circuit, reads it."""
        return short_circuit(self.expr)


@dataclass
class _Candidate:
    """A member of the output being assembled: an atom still open, or a summary guard."""

    expr: sympy.Basic
    formula: sympy.Basic  # what z3 encodes (replacements substituted for atoms)
    extra_divisors: frozenset[sympy.Basic]
    symbols: frozenset[sympy.Symbol]
    atom: _Atom | None
    droppable: bool
    order: float
    sources: list[_Atom] | None = None  # a summary guard's: the conjuncts it was derived from
    kept: bool = True
    implied_by: list[_Candidate] = field(default_factory=list)


def _range_guard(x: sympy.Symbol, lo: int | None, hi: int | None) -> sympy.Basic:
    if lo is not None and hi is not None:  # unevaluated: sympy's And would try to simplify it
        return sympy.And(sympy.Ge(x, lo), sympy.Le(x, hi), evaluate=False)
    return sympy.Ge(x, lo) if lo is not None else sympy.Le(x, hi)


def _finite(value: object) -> int | None:
    return None if is_infinite(value) else int(value)  # type: ignore[arg-type]


def _complexity(expr: sympy.Basic) -> int:
    return sympy.count_ops(expr)


def _admissible(knowledge: Knowledge, x: sympy.Symbol) -> tuple[ValueRange, int]:
    """``x``'s admissible range (ends moved into its residue class) and the class's step."""
    residues = knowledge.congruences.get(x, ModularSet(1, 0))
    return tighten(knowledge.range_of(x), residues), residues.coeff or 1


def _dedupe(atoms: list[_Atom]) -> list[_Atom]:
    """Step 1's duplicates: an atom equal to an earlier one up to sides, dividing by no more,
    is marked a duplicate; returns the others."""
    first: dict[object, _Atom] = {}
    unique = []
    for atom in atoms:
        key = _relation_key(atom.canonical)
        seen = first.get(key)
        if seen is not None and seen.divisors >= atom.divisors:
            atom.fate = ("duplicate", seen)
            continue
        first.setdefault(key, atom)
        unique.append(atom)
    return unique


# -- step 3: cheap decisions -----------------------------------------------------------------


def _substituted(atom: _Atom, replacements: Mapping[sympy.Symbol, sympy.Basic]) -> tuple[sympy.Basic, frozenset[sympy.Basic]]:
    """``atom.current`` and its divisors with the digest's replacements substituted.

    Under the replacements (which are summary guards, so in the output) the substituted
    conjunct holds exactly where the original does. A divisor that becomes 0 makes it
    hold nowhere: returned as ``false``.
    """
    expr = atom.canonical if atom.current is atom.expr else canonicalize(atom.current)
    found = atom.divisors if atom.current is atom.expr else frozenset(divisors(atom.current))
    try:
        if expr.is_Relational and symbols_of(expr) & replacements.keys():
            # unevaluated: sympy would otherwise consult its assumption system on every one
            lhs, rhs = (substitute(side, replacements) for side in expr.args)
            expr = expr.func(lhs, rhs, evaluate=False)
        else:
            expr = substitute(expr, replacements)
        subs = set()
        for d in found:
            d = substitute(d, replacements)
            if d.is_Number:
                if d == 0:
                    return sympy.false, frozenset()
                continue
            subs.add(d)
    except ZeroDivisionError:
        return sympy.false, frozenset()
    return expr, frozenset(subs)

def _cheap(layers: CheapLayers, expr: sympy.Basic, found: frozenset[sympy.Basic]) -> bool | None:
    """True: holds wherever the digest does; False: nowhere; None: not settled."""
    try:
        undefined_somewhere = False
        for d in found:
            nonzero = layers.decide(sympy.Ne(d, 0))
            if nonzero is False:
                return False
            undefined_somewhere |= nonzero is not True
        verdict = layers.decide(expr)
    except ZeroDivisionError:  # a divisor simplified to 0: undefined wherever the digest holds
        return False
    if verdict is True and undefined_somewhere:
        return None
    return verdict


# -- step 5: groups -------------------------------------------------------------------------


def _connected_groups(
    candidates: list[_Candidate], context_facts: list[sympy.Basic]
) -> list[tuple[list[_Candidate], list[sympy.Basic]]]:
    """Step 5's groups: candidates connected through shared symbols (and context facts), with
    those facts; only groups where something could be implied (an open atom, or a link
    between symbols)."""
    parent: dict[sympy.Symbol, sympy.Symbol] = {}

    def find(s: sympy.Symbol) -> sympy.Symbol:
        while parent.setdefault(s, s) is not s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for symbols in [c.symbols for c in candidates] + [symbols_of(f) for f in context_facts]:
        ordered = sorted(symbols, key=str)
        for s in ordered[1:]:
            parent[find(s)] = find(ordered[0])
    members: dict[sympy.Symbol, list[_Candidate]] = {}
    for cand in candidates:
        if cand.symbols:
            members.setdefault(find(min(cand.symbols, key=str)), []).append(cand)
    facts: dict[sympy.Symbol, list[sympy.Basic]] = {}
    for fact in context_facts:
        if symbols_of(fact):
            facts.setdefault(find(min(symbols_of(fact), key=str)), []).append(fact)
    groups = []
    for root, group in members.items():
        related = facts.get(root, [])
        has_atoms = any(c.sources is None for c in group)
        linked = any(len(c.symbols) > 1 for c in group) or any(len(symbols_of(f)) > 1 for f in related)
        if len(group) > 1 and (has_atoms or linked) or has_atoms and related:
            groups.append((group, related))
    return groups


# -- step 4: single-symbol rewriting -----------------------------------------------------------


class _SingleSymbol:
    """Step 4 of the module docstring: a conjunct in one symbol, settled or rewritten from its
    values, with z3 proving it beyond a window (its own solver: one symbol, no groups)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.translator: Translator | None = None  # made when first needed
        self.solver: z3.Solver | None = None

    def settle(self, knowledge: Knowledge, expr: sympy.Basic, found: frozenset[sympy.Basic]) -> str | Rewrite | None:
        """Settle or rewrite ``expr`` (a conjunct with the replacements substituted; ``found``:
        its divisors) if it is in one symbol: ``"summary"`` (holds on every admissible value),
        ``"never"`` (on none), the :class:`Rewrite` to apply (its ``guard`` is ``expr``), or None."""
        symbols = symbols_of(expr).union(*(symbols_of(d) for d in found))
        if len(symbols) != 1:
            return None
        (x,) = symbols
        if not x.is_integer:
            return None
        scope, step = _admissible(knowledge, x)
        if scope.is_empty:
            return None
        claim = sympy.And(expr, *(sympy.Ne(d, 0) for d in found)) if found else expr
        lo, hi = _finite(scope.lo), _finite(scope.hi)
        if lo is not None and hi is not None and (hi - lo) // step < _ENUMERATE:
            points, side = range(lo, hi + 1, step), None
        elif lo is not None:
            points, side = range(lo, lo + step * _WINDOW, step), "lo"
        elif hi is not None:
            points, side = range(hi - step * (_WINDOW - 1), hi + 1, step), "hi"
        else:
            return None
        accepts = compile_predicate([claim])
        name = x.name
        accepted = [accepts({name: v}) for v in points]
        failing = [v for v, ok in zip(points, accepted) if not ok]
        if side is not None:
            # the window is evidence only: the claim must be proved past its last failure
            far = accepted[len(accepted) // 2 :] if side == "lo" else accepted[: len(accepted) // 2]
            if not all(far):
                return None
            past = sympy.true if not failing else (sympy.Gt(x, max(failing)) if side == "lo" else sympy.Lt(x, min(failing)))
            if not self._proves(knowledge, x, past, claim):
                return None
        if not failing:
            return "summary"
        if len(failing) == len(points):
            return "never"
        ok = [v for v, good in zip(points, accepted) if good]
        if not any(ok[0] < v < ok[-1] for v in failing):  # holds exactly on a sub-range
            lower = ok[0] if ok[0] != points[0] else None
            upper = ok[-1] if ok[-1] != points[-1] and side != "lo" else None
            to = _range_guard(x, lower, upper)
        elif len(failing) <= _FEW:
            to = sympy.And(*(sympy.Ne(x, v) for v in failing))
        else:
            return None
        where = f"every {x} in [{points[0]}, {points[-1]}]" if side is None else f"{x} in [{points[0]}, {points[-1]}] and proved beyond"
        shown = ", ".join(str(v) for v in failing[:4]) + (", ..." if len(failing) > 4 else "")
        if _relation_key(canonicalize(to)) == _relation_key(expr):  # already in that form
            return None
        return Rewrite(expr, to, f"evaluated at {where}: fails only for {x} = {shown}")

    def _proves(self, knowledge: Knowledge, x: sympy.Symbol, assumption: sympy.Basic, claim: sympy.Basic) -> bool:
        """Whether ``claim`` holds wherever ``assumption`` and what is known of ``x`` do.

        One translator and solver serve every such proof of a run (a z3 context costs
        milliseconds); each proof is a scope, given all division axioms so far (they only
        define fresh quotients, so extra ones change nothing).
        """
        if self.translator is None:
            self.translator = Translator(z3.Context())
            self.solver = z3.Solver(ctx=self.translator.ctx)
        translator, solver = self.translator, self.solver
        scope = knowledge.range_of(x)
        residues = knowledge.congruences.get(x)
        var = translator.symbol(x.name)
        negated = z3.Not(translator.holds(claim))
        solver.push()
        try:
            if not is_infinite(scope.lo):
                solver.add(var >= int(scope.lo))
            if not is_infinite(scope.hi):
                solver.add(var <= int(scope.hi))
            if residues is not None and residues.coeff > 1:
                solver.add(var % residues.coeff == residues.base)
            solver.add(translator.holds(assumption), negated, *translator.axioms)
            return self.budget.part(_SINGLE_SHARE).check(solver) == z3.unsat
        finally:
            solver.pop()


# -- step 2: the digest --------------------------------------------------------------------------


class _Digest:
    """Step 2 of the module docstring: one :class:`Knowledge` of the context and the conjuncts,
    with the input conjunct behind every fact it learned (``None`` for the context's)."""

    def __init__(self, context_facts: Sequence[sympy.Basic]) -> None:
        self.knowledge = Knowledge()
        self.owner: list[_Atom | None] = []
        for fact in context_facts:
            self.learn(fact, None)

    def learn(self, fact: sympy.Basic, atom: _Atom | None) -> None:
        self.knowledge.add(fact)
        self.owner.append(atom)

    def owners(self, indices: Iterable[int]) -> list[_Atom]:
        """The input conjuncts behind the facts at ``indices``, in input order."""
        found = {self.owner[i].index: self.owner[i] for i in indices if self.owner[i] is not None}
        return [found[k] for k in sorted(found)]

    def culprits(self) -> list[_Atom] | None:
        """The conjuncts behind the knowledge's contradiction, if it has one."""
        k = self.knowledge
        return None if k.contradiction is None else self.owners(k.contradiction)

    def behind(self, atom: _Atom, symbols: Iterable[sympy.Symbol]) -> list[_Atom]:
        """``atom`` and the conjuncts behind what is known of ``symbols``: a contradiction's culprits."""
        return [atom] + self.owners(self.knowledge.provenance(symbols))

    def state(self) -> tuple:
        k = self.knowledge
        return (dict(k.replacements), dict(k.ranges), dict(k.congruences))

    def known_about(self, symbols: Iterable[sympy.Symbol]) -> tuple:
        k = self.knowledge
        return tuple((k.replacements.get(x), k.ranges.get(x), k.congruences.get(x)) for x in sorted(symbols, key=str))

    def summary(self, atoms: Sequence[_Atom], context: Knowledge) -> dict[object, tuple[sympy.Basic, list[_Atom]]]:
        """The summary guards by key (``("=", x)``, ``("range", x)``, ``("mod", x)``), with the
        input conjuncts they were derived from: what the digest knows beyond the ``context``."""
        k, c = self.knowledge, context
        mentioned = set().union(*(symbols_of(a.canonical) for a in atoms)) if atoms else set()
        # and what the context replaces them by: under s1 := s0, s1 <= 0 fixes s0 (s0 := 0)
        mentioned |= set().union(*(symbols_of(c.replacements[x]) for x in mentioned if x in c.replacements))
        summary: dict[object, tuple[sympy.Basic, list[_Atom]]] = {}
        for x, e in k.replacements.items():
            if x in c.replacements or (x not in mentioned and not (symbols_of(e) & mentioned)):
                continue
            summary[("=", x)] = (sympy.Eq(x, e), self.owners(k.provenance([x])))
        for x, r in k.ranges.items():
            if x in k.replacements or x in c.replacements:
                continue
            residues = k.congruences.get(x, ModularSet(1, 0))
            given = tighten(c.range_of(x), residues)
            lo = _finite(r.lo) if r.lo > given.lo else None
            hi = _finite(r.hi) if r.hi < given.hi else None
            if lo is not None or hi is not None:
                summary[("range", x)] = (_range_guard(x, lo, hi), self.owners(k.provenance([x])))
            if residues.coeff > 1:
                known = c.congruences.get(x)
                if known is None or known.coeff % residues.coeff or known.base % residues.coeff != residues.base:
                    summary[("mod", x)] = (sympy.Eq(Mod(x, residues.coeff), residues.base), self.owners(k.provenance([x])))
        return summary


# -- step 3 (and 4): one round of cheap decisions ---------------------------------------------------


def _decide_round(digest: _Digest, single: _SingleSymbol, unique: list[_Atom], progress: Progress,
                  stage: str) -> list[_Atom] | None:
    """Step 3 of the module docstring, with step 4 on what it cannot settle: settle what the
    cheap layers and single-symbol evaluation can; learn the rest again (the digest may take it
    now that it knows more). Returns a contradiction's culprits if one is found."""
    layers = CheapLayers(digest.knowledge)
    for k, atom in enumerate(unique):
        if atom.fate is not None or atom.opaque:
            continue
        if not progress.step(stage, k, len(unique)):
            return None
        expr, found = _substituted(atom, digest.knowledge.replacements)
        verdict = False if expr is sympy.false else _cheap(layers, expr, found)
        if verdict is None and isinstance(expr, sympy.Or):
            _prune_alternatives(atom, expr, found, layers)
        elif verdict is None:
            verdict = {"summary": True, "never": False}.get(_try_rewrite(single, digest.knowledge, atom, expr, found))  # type: ignore[arg-type]
        if verdict is True:
            read = frozenset(symbols_of(atom.canonical) | symbols_of(atom.current) | symbols_of(expr)).union(
                *(symbols_of(d) for d in found))
            atom.fate = ("summary", read, digest.known_about(read))
        elif verdict is False:
            return digest.behind(atom, symbols_of(atom.canonical) | symbols_of(expr))
    for atom in unique:
        if atom.fate is None and not atom.opaque:
            state = (atom.current, digest.known_about(symbols_of(atom.canonical) | symbols_of(atom.current)))
            if state != atom.learned:  # the digest may take it now
                digest.learn(canonicalize(atom.current), atom)
                atom.learned = state
    return None


def _reopen(digest: _Digest, unique: list[_Atom]) -> None:
    """Unsettle what rests on something the digest no longer knows: a verdict of steps 3-4 that
    read what the digest now knows otherwise, a single-symbol rewrite whose symbol has since
    been replaced.

    Only the final digest is in the summary guards, and it does not always know more: when a
    symbol ``x`` gets a replacement ``x := e``, its range and congruence become facts about
    ``e``, which the digest keeps aside when it cannot digest them (``x ≡ 0 mod 2`` with
    ``x := CeilDiv(s0, 16)``). A verdict or rewrite that read them would rest on nothing in
    the output.
    """
    replaced = digest.knowledge.replacements.keys()
    for atom in unique:
        if atom.assumed & replaced:  # the rewrite holds on the symbol's admissible values only
            atom.rewrite, atom.current, atom.assumed, atom.fate = None, atom.expr, frozenset(), None
        elif atom.fate is not None and atom.fate[0] == "summary" and digest.known_about(atom.fate[1]) != atom.fate[2]:
            atom.fate = None


def _prune_alternatives(atom: _Atom, expr: sympy.Basic, found: frozenset[sympy.Basic], layers: CheapLayers) -> None:
    """Drop the alternatives of an ``Or`` that never hold where the summary does.

    ``A | B`` is ``B`` wherever ``A`` is false, as long as ``A`` is defined there (strict
    evaluation: a zero divisor in ``A`` makes the whole guard fail), so only alternatives
    without a symbolic divisor go. ``(s0 < 2) | (s1 > 5)`` under ``s0 >= 2`` is ``s1 > 5``.
    ``expr`` is the conjunct with the replacements substituted, which may have folded
    away divisions of the conjunct as written; ``found`` (its divisors, substituted) come
    back as conditions.
    """
    if atom.rewrite is not None:
        return
    kept = []
    for alternative in expr.args:
        try:
            never = not divisors(alternative) and layers.decide(alternative) is False
        except ZeroDivisionError:
            never = False
        if not never:
            kept.append(alternative)
    if kept and len(kept) < len(expr.args):
        to = keep_definedness(sympy.Or(*kept), found)
        atom.rewrite = Rewrite(atom.expr, to, "the other alternatives never hold where the other guards do")
        atom.current = to


def _try_rewrite(single: _SingleSymbol, knowledge: Knowledge, atom: _Atom, expr: sympy.Basic,
                 found: frozenset[sympy.Basic]) -> str | None:
    """Step 4 on one conjunct (:class:`_SingleSymbol`): ``"summary"`` (holds on every
    admissible value), ``"never"`` (on none) or None (rewritten, then recorded, or left)."""
    if atom.rewrite is not None:
        return None
    verdict = single.settle(knowledge, expr, found)
    if isinstance(verdict, Rewrite):
        atom.rewrite = Rewrite(atom.expr, verdict.to, verdict.why)
        atom.current = verdict.to
        atom.assumed = symbols_of(verdict.to)  # equivalent on the symbol's admissible values only
        return None
    return verdict


# -- step 5: z3 on groups ----------------------------------------------------------------------------


class _GroupSettling:
    """Step 5 of the module docstring: the remaining conjuncts and summary guards as candidates,
    grouped by shared symbols, each group settled by its own :class:`GroupSolver`.

    Afterwards ``candidates`` (each kept or not), ``summary_candidates`` (by summary key) and
    ``bounds`` (the ranges the groups' models show for open sides) are what :class:`_Report` reads.
    """

    def __init__(self, digest: _Digest, atoms: list[_Atom], context_facts: list[sympy.Basic], budget: Budget,
                 progress: Progress) -> None:
        self.digest, self.atoms, self.context_facts, self.budget = digest, atoms, context_facts, budget
        self.progress = progress
        self.stage = ""
        self.candidates: list[_Candidate] = []
        self.summary_candidates: dict[object, _Candidate] = {}
        self.bounds: dict[sympy.Symbol, tuple[int | None, int | None]] = {}

    def settle(self, unique: list[_Atom], summary: dict) -> list[_Atom] | None:
        """Drop the members each group's others imply; returns a contradiction if one is found."""
        knowledge = self.digest.knowledge
        by_key = {}
        for key, (guard, sources) in summary.items():
            cand = _Candidate(guard, guard, frozenset(), symbols_of(guard), None, droppable=key[0] != "=",
                              order=min((a.index for a in sources), default=math.inf), sources=sources)
            self.candidates.append(cand)
            self.summary_candidates[key] = cand
            by_key[_relation_key(canonicalize(guard))] = cand
        self._match_conjunctions()
        for atom in unique:
            if atom.fate is not None and atom.fate[0] != "summary":
                continue
            try:
                cand = by_key.get(_relation_key(canonicalize(atom.current)))
            except ZeroDivisionError:  # a divisor folds to 0: no summary guard is this atom as written
                cand = None
            if cand is not None and cand.atom is None:  # the atom is a summary guard as written
                cand.expr, cand.atom, cand.order = atom.current, atom, min(cand.order, atom.index)
                atom.fate = ("open", cand)
                continue
            if atom.fate is not None:
                continue
            expr, found = (atom.canonical, atom.divisors) if atom.opaque else _substituted(atom, knowledge.replacements)
            if expr is sympy.false:
                return self.digest.behind(atom, symbols_of(atom.canonical))
            cand = _Candidate(atom.current, expr, found, symbols_of(expr).union(*(symbols_of(d) for d in found)),
                              atom, droppable=True, order=atom.index)
            self.candidates.append(cand)
            atom.fate = ("open", cand)
        groups = _connected_groups(self.candidates, self.context_facts)
        for k, (group, related) in enumerate(groups):
            self.stage = f"z3 on group {k + 1} of {len(groups)}"
            if not self.progress.step(self.stage, 0):
                return None
            contradiction = self._settle_group(group, related, self.budget.part(1 / (len(groups) - k)))
            if contradiction is not None:
                return contradiction
        return None

    def _match_conjunctions(self) -> None:
        """An input guard whose conjuncts are exactly a two-sided range guard's is that guard."""
        ranges = {
            frozenset(_relation_key(a) for a in cand.expr.args): cand
            for cand in self.summary_candidates.values() if isinstance(cand.expr, sympy.And)
        }
        by_source: dict[int, list[_Atom]] = {}
        for atom in self.atoms:
            by_source.setdefault(atom.source, []).append(atom)
        for atoms in by_source.values():
            if len(atoms) < 2 or any(a.fate is not None and a.fate[0] != "summary" for a in atoms):
                continue
            cand = ranges.get(frozenset(_relation_key(canonicalize(a.current)) for a in atoms))
            if cand is not None and cand.atom is None:
                cand.expr, cand.atom = sympy.And(*(a.current for a in atoms)), atoms[0]
                cand.order = min(cand.order, atoms[0].index)
                for atom in atoms:
                    atom.fate = ("open", cand)

    def _settle_group(self, group: list[_Candidate], related: list[sympy.Basic], budget: Budget) -> list[_Atom] | None:
        """Drop, most complex first, each member of the group that the others imply."""
        knowledge = self.digest.knowledge
        solver = GroupSolver(group, related, knowledge.replacements, budget)
        status, core = solver.model_of_all()
        if status == "unsat":
            return _atoms_behind(group[j] for j in core)
        order = sorted(
            (i for i, c in enumerate(group) if c.droppable),
            key=lambda i: (group[i].sources is not None, -_complexity(group[i].expr), -group[i].order),
        )
        for k, i in enumerate(order):
            if not self.progress.step(self.stage, k, len(order)):
                return None
            implied_by = solver.implied_by(i, budget.part(1 / (len(order) - k)))
            if implied_by is not None:
                group[i].kept = False
                group[i].implied_by = [group[j] for j in implied_by]
        open_sides = {x: (_admissible(knowledge, x)[0].lo, _admissible(knowledge, x)[0].hi) for x in solver.touching if x.is_integer}
        self.bounds.update(solver.bounds({x: sides for x, sides in open_sides.items() if math.inf in map(abs, sides)}))
        return None


def _atoms_behind(candidates: Iterable[_Candidate]) -> list[_Atom]:
    """The input conjuncts behind some candidates (a summary guard's are its sources)."""
    found: dict[int, _Atom] = {}
    for cand in candidates:
        for atom in ([cand.atom] if cand.atom is not None else []) + list(cand.sources or ()):
            found[atom.index] = atom
    return [found[k] for k in sorted(found)]


# -- the simplification ------------------------------------------------------------------------


class _Simplification:
    """One run of :func:`simplify`: step 1 of the module docstring here, the others in order in
    :meth:`run` (:class:`_Digest`, :func:`_decide_round` with :class:`_SingleSymbol`,
    :class:`_GroupSettling`), and :class:`_Report` writes the result."""

    def __init__(self, guards: Iterable[ExprLike], facts: Iterable[ExprLike], ranges: Ranges | None, timeout_ms: int,
                 progress: Progress):
        self.budget = Budget(timeout_ms)
        self.progress = progress
        self.context_facts: list[sympy.Basic] = []
        self.given: dict[sympy.Symbol, ValueRange] = {}
        for name, (lo, hi) in sorted((ranges or {}).items()):
            x = int_symbol(name)
            self.given[x] = ValueRange(-math.inf if lo is None else lo, math.inf if hi is None else hi)
            if lo is not None:
                self.context_facts.append(sympy.Ge(x, lo))
            if hi is not None:
                self.context_facts.append(sympy.Le(x, hi))
        self.context_facts += [as_claim(f) for f in facts]
        self.context = Knowledge()
        for fact in self.context_facts:
            self.context.add(fact)
        if self.context.contradiction is not None:
            culprits = ", ".join(str(self.context.facts[i]) for i in self.context.contradiction)
            raise ConstraintError(f"the facts and ranges contradict each other ({culprits}); nothing to simplify under them")
        self.atoms: list[_Atom] = []
        for source, guard in enumerate(guards):
            progress.step("normalizing", source, len(guards))  # every guard is needed: never stops here
            claim = as_claim(guard)
            for conjunct in claim.args if isinstance(claim, (sympy.And, PythonAnd)) else (claim,):  # make_args is a set
                self.atoms.append(self._atom(conjunct, source))

    def _atom(self, conjunct: sympy.Basic, source: int) -> _Atom:
        """Step 1 on one conjunct: canonical form and divisors."""
        try:
            canonical = _fold_remainders(canonicalize(conjunct))
        except ZeroDivisionError:
            canonical = sympy.false
        found = set() if short_circuit(conjunct) else set(divisors(conjunct))  # see _Atom.opaque
        for d in list(found):
            try:
                found.add(canonicalize(d))
            except ZeroDivisionError:
                found.add(sympy.S.Zero)
        return _Atom(len(self.atoms), source, conjunct, canonical, frozenset(found), conjunct)

    def run(self) -> Simplified:
        unique = _dedupe(self.atoms)
        digest = _Digest(self.context_facts)
        progress = self.progress
        for k, atom in enumerate(unique):
            if not progress.step("digesting", k, len(unique)):
                break
            digest.learn(atom.canonical, atom)
            atom.learned = (atom.current, digest.known_about(symbols_of(atom.canonical)))
        single = _SingleSymbol(self.budget)
        for round_ in range(1, _ROUNDS + 1):
            culprits = digest.culprits()
            if culprits is not None:
                return self._contradiction(culprits)
            if progress.timed_out:
                break
            before = digest.state()
            _reopen(digest, unique)
            culprits = _decide_round(digest, single, unique, progress, f"deciding (round {round_})")
            if culprits is not None:
                return self._contradiction(culprits)
            if digest.state() == before:
                break
        _reopen(digest, unique)  # out of rounds, the last one changed the digest: z3 settles what that moved
        culprits = digest.culprits()
        if culprits is not None:
            return self._contradiction(culprits)
        groups = _GroupSettling(digest, self.atoms, self.context_facts, self.budget, progress)
        culprits = groups.settle(unique, digest.summary(self.atoms, self.context))
        if culprits is not None:
            return self._contradiction(culprits)
        return _Report(self.atoms, groups.candidates, groups.summary_candidates, digest.knowledge, self.context,
                       self.context_facts, self.given, groups.bounds, self.budget).result()

    def _contradiction(self, culprits: Sequence[_Atom]) -> Simplified:
        return _contradiction_result(self.atoms, culprits, self.context_facts, self.budget)


# -- results ------------------------------------------------------------------------------------


@dataclass
class _Report:
    """The result once the steps are done: what became of every input conjunct, and the ranges."""

    atoms: list[_Atom]
    candidates: list[_Candidate]  # step 5's, each kept or not
    summary_candidates: dict[object, _Candidate]
    knowledge: Knowledge  # the digest of the context and the guards
    context: Knowledge  # of the context alone
    context_facts: list[sympy.Basic]
    given: dict[sympy.Symbol, ValueRange]  # the ranges argument
    bounds: dict[sympy.Symbol, tuple[int | None, int | None]]  # step 5's bounds of open sides
    budget: Budget

    def _ranges(self) -> dict[str, tuple[int | None, int | None]]:
        k = self.knowledge
        symbols = set().union(*(symbols_of(a.expr) for a in self.atoms), *(symbols_of(f) for f in self.context_facts))
        result = {}
        for x in sorted(symbols, key=lambda s: s.name):
            if not x.is_integer:
                continue
            if x in k.replacements:  # what was known of x is now facts about its replacement; the given ranges still hold
                r = bound(k.replacements[x], k.ranges) & _admissible(self.context, x)[0] & self.given.get(x, UNBOUNDED)
            else:
                r = _admissible(self.knowledge, x)[0]
            lo, hi = self.bounds.get(x, (None, None))
            lo = lo if is_infinite(r.lo) else math.ceil(r.lo) if lo is None else max(lo, math.ceil(r.lo))
            hi = hi if is_infinite(r.hi) else math.floor(r.hi) if hi is None else min(hi, math.floor(r.hi))
            result[x.name] = (lo, hi)
        return result

    def _behind(self, candidates: Iterable[_Candidate], mentioned: set[sympy.Symbol]) -> list[_Candidate]:
        """The kept candidates behind ``candidates`` (each, or what implies it when dropped);
        adds the symbols of every candidate on the way to ``mentioned``."""
        result: dict[int, _Candidate] = {}
        for cand in candidates:
            mentioned |= symbols_of(cand.expr)
            for c in ([cand] if cand.kept else self._behind(cand.implied_by, mentioned)):
                result[id(c)] = c
        return list(result.values())

    def _by(self, mentioned: set[sympy.Symbol], implying: Iterable[_Candidate]) -> list[_Candidate]:
        """The kept guards behind ``implying`` and the replacement guard of every symbol they
        or ``mentioned`` name, in output order.

        A candidate's formula has the replacements substituted (``y >= 5`` is read as
        ``CeilDiv(x, 8) >= 5`` under ``y := CeilDiv(x, 8)``), so what it implies needs them;
        a symbol the context replaces stands for the symbols of its replacement.
        """
        found = {id(c): c for c in self._behind(implying, mentioned)}
        for x in ordered(self._through_context(mentioned)):
            cand = self.summary_candidates.get(("=", x))
            if cand is not None:  # never dropped
                found[id(cand)] = cand
        return sorted(found.values(), key=lambda c: c.order)

    def _through_context(self, symbols: Iterable[sympy.Symbol]) -> set[sympy.Symbol]:
        """``symbols`` and those of the context's replacements of them."""
        replacements = self.context.replacements
        return set(symbols).union(*(symbols_of(replacements[x]) for x in symbols if x in replacements))

    def _fate(self, atom: _Atom, context_layers: CheapLayers) -> Dropped | None:
        """Why ``atom`` is not in the result as written, or None when it is."""
        kind, *rest = atom.fate
        if kind == "duplicate":
            return Dropped(atom.expr, "duplicate", (rest[0].expr,))
        if kind == "open":
            cand = rest[0]
            if cand.kept:
                return None
            assumed = self._through_context(atom.assumed)
            by = self._by(set(symbols_of(atom.canonical)),
                          [*cand.implied_by, *(c for key, c in self.summary_candidates.items() if key[1] in assumed)])
            return Dropped(atom.expr, "implied" if by else "tautology", tuple(dict.fromkeys(c.expr for c in by)))
        expr, found = _substituted(atom, self.context.replacements)
        if _cheap(context_layers, expr, found) is True:
            return Dropped(atom.expr, "tautology")
        # settled by steps 3-4 from the summary guards of the symbols the verdict read (its
        # divisors' included: ``Mod(7 // (s0 - 2), -1)`` is 0 where defined)
        read = self._through_context(atom.fate[1])
        by = self._by(read, (c for key, c in self.summary_candidates.items() if key[1] in read))
        merged = any(atom in (c.sources or ()) for c in by)
        return Dropped(atom.expr, "merged" if merged else "implied", tuple(c.expr for c in by))

    def result(self) -> Simplified:
        kept = sorted((c for c in self.candidates if c.kept), key=lambda c: c.order)
        unique = [a for a in self.atoms if not (a.fate and a.fate[0] == "duplicate")]
        if len(kept) > len(unique):  # the summary guards outnumber the input: the input, deduplicated, is smaller
            return self._deduplicated(unique)
        dropped: list[Dropped] = []
        rewritten: list[Rewrite] = []
        fates: list[Fate] = []
        context_layers = CheapLayers(self.context)
        for atom in self.atoms:
            record = self._fate(atom, context_layers)
            if atom.rewrite is not None and (record is None or record.kind == "merged"):
                rewritten.append(atom.rewrite)
                into = tuple(g for g in record.by if g != atom.rewrite.to) if record is not None else ()
                fates.append(Fate(atom.expr, "rewritten", atom.source, rewrite=atom.rewrite, merged_into=into))
            elif record is None:
                fates.append(Fate(atom.expr, "kept", atom.source))
            else:
                dropped.append(record)
                fates.append(Fate(atom.expr, "dropped", atom.source, dropped=record))
        return Simplified(tuple(c.expr for c in kept), tuple(dropped), tuple(rewritten), None, self._ranges(), tuple(fates),
                          self.budget.backstop_fired)


    def _deduplicated(self, unique: list[_Atom]) -> Simplified:
        """The input's distinct conjuncts, as the result: equivalent, and never larger."""
        dropped, fates = [], []
        distinct = {id(a) for a in unique}
        for atom in self.atoms:
            if id(atom) in distinct:
                fates.append(Fate(atom.expr, "kept", atom.source, note="what the guards imply takes more guards to say"))
            else:
                record = Dropped(atom.expr, "duplicate", (atom.fate[1].expr,))
                dropped.append(record)
                fates.append(Fate(atom.expr, "dropped", atom.source, dropped=record))
        return Simplified(tuple(a.expr for a in unique), tuple(dropped), (), None, self._ranges(), tuple(fates),
                          self.budget.backstop_fired)


def _contradiction_result(atoms: list[_Atom], culprits: Sequence[_Atom], context_facts: list[sympy.Basic], budget: Budget) -> Simplified:
    """The result for a guard set that can never hold: a small unsatisfiable subset.

    ``culprits`` are the conjuncts the analyzers blame (possibly none, when the context's
    facts carry the contradiction); if z3 cannot confirm that they alone are unsatisfiable,
    every distinct conjunct is (the digest showed the whole set is).
    """
    unique = [a for a in atoms if not (a.fate and a.fate[0] == "duplicate")]
    confirmed = culprits and unsatisfiable(list(culprits), context_facts, budget.part(1 / 2))
    core = minimal_unsat(list(culprits) if confirmed else unique, context_facts, budget)
    in_core = {a.index for a in core}
    dropped, fates = [], []
    for atom in atoms:
        if atom.index in in_core:
            fates.append(Fate(atom.expr, "kept", atom.source, note="part of the contradiction"))
        else:
            record = Dropped(atom.expr, "contradiction")
            dropped.append(record)
            fates.append(Fate(atom.expr, "dropped", atom.source, dropped=record))
    guards = tuple(a.expr for a in core)
    return Simplified(guards, tuple(dropped), (), guards, {}, tuple(fates), budget.backstop_fired)


def simplify(
    guards: Iterable[ExprLike],
    *,
    facts: Iterable[ExprLike] = (),
    ranges: Ranges | None = None,
    timeout_ms: int = 2000,
    progress: Progress | None = None,
) -> Simplified:
    """An equivalent, smaller guard set under ``facts`` and ``ranges`` (name → ``(lo, hi)``).

    Guards and facts are guard text (torch or Python syntax) or sympy claims. ``timeout_ms``
    bounds z3's work in the whole call, all its queries together: a deterministic budget of
    ``timeout_ms * RLIMIT_PER_MS`` z3 resource units, so the result does not depend on the
    machine's load, and a wall-clock backstop of ``timeout_ms`` (:mod:`shapecore.budget`). A
    guard z3 cannot settle within its share is kept.

    ``progress`` (:class:`~shapecore.progress.Progress`) hears how far the steps got; once its
    wall-clock time limit has passed, the run stops where it is and returns every guard it has
    not yet shown redundant (``progress.timed_out`` says so): still equivalent to the input.
    A guard repeated verbatim is read once (its repeats are duplicates of its first occurrence).

    >>> s = simplify(["Ne(Mod(1, FloorDiv(s0, 2)), 0)"], facts=["s0 > 2"])
    >>> [str(g) for g in s.guards]
    ['s0 >= 4']
    """
    guard_exprs, fact_exprs, checked = guard_list(guards, "guards"), guard_list(facts, "facts"), check_ranges(ranges)
    distinct = list(dict.fromkeys(guard_exprs))
    with z3_threads.exclusive():  # every z3 object of the run is made and freed inside (see shapecore.z3_threads)
        result = _Simplification(distinct, fact_exprs, checked, timeout_ms, progress or Progress()).run()
    return result if len(distinct) == len(guard_exprs) else _with_repeats(result, guard_exprs, distinct)


def _with_repeats(result: Simplified, guards: list[ExprLike], distinct: list[ExprLike]) -> Simplified:
    """``result``, of the ``distinct`` guards, as the result for ``guards``: each conjunct of a
    repeated guard is dropped as a duplicate of the conjunct's first occurrence (as step 1
    would), or as part of a contradiction."""
    position = {guard: i for i, guard in enumerate(distinct)}
    fates_of: list[list[Fate]] = [[] for _ in distinct]
    for fate in result.fates:
        fates_of[fate.source].append(fate)
    repeats: dict[int, list[Fate]] = {}
    fates: list[Fate] = []
    for source, guard in enumerate(guards):
        i = position[guard]
        if i not in repeats:
            fates += [_at(f, source) for f in fates_of[i]]
            repeats[i] = [_repeat(f, result.contradiction is not None) for f in fates_of[i]]
        else:
            fates += [_at(f, source) for f in repeats[i]]
    return dataclasses.replace(
        result, dropped=tuple(f.dropped for f in fates if f.dropped is not None),
        rewritten=tuple(f.rewrite for f in fates if f.outcome == "rewritten"), fates=tuple(fates))


def _at(fate: Fate, source: int) -> Fate:
    """``fate`` for the input guard ``source``."""
    return Fate(fate.guard, fate.outcome, source, fate.dropped, fate.rewrite, fate.merged_into, fate.note)


def _repeat(first: Fate, contradiction: bool) -> Fate:
    """The fate of a repeat of the conjunct whose first occurrence met ``first``."""
    if contradiction:
        dropped = Dropped(first.guard, "contradiction")
    elif first.dropped is not None and first.dropped.kind == "duplicate":
        dropped = first.dropped
    else:
        dropped = Dropped(first.guard, "duplicate", (first.guard,))
    return Fate(first.guard, "dropped", first.source, dropped=dropped)
