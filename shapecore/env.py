"""ShapeEnv: PyTorch's verbs over shapecore's reasoner.

The env owns symbols (backed ``s0, s1, …`` with a hint; unbacked ``u0, …`` without one) and
one :class:`~shapecore.reasoner.Reasoner` whose facts are, in the order they arrive: symbol
ranges, user facts (:meth:`ShapeEnv.add_fact`), guards recorded by
:meth:`ShapeEnv.evaluate_expr`, and deferred runtime asserts. Deciding delegates to the
reasoner; the env adds only bookkeeping: hints, sources, the guard list, and the error for a
decision that would need an unbacked value.

Invariants: every entry holds at the *example point* (the hints, extended through the
replacements) whenever the point binds its symbols, so a decision read off the hints agrees
with the facts; a condition that is false there, or undefined there (a zero divisor, where
Python would raise ``ZeroDivisionError``), is never recorded. Entries on unbacked symbols
cannot be checked at the hints, so the env keeps a *witness*: values of the unbacked symbols
(within their ranges) at which every entry holds with the backed symbols at their hints. An
entry the witness does not satisfy sends the reasoner looking for another; one for which no
values exist, or none could be found within ``timeout_ms``, is refused, since the facts would
then imply claims false at the hints. Recording is atomic: an entry rejected with
:class:`~shapecore.errors.ConstraintError` leaves the env, its reasoner included, exactly as
it was.

Differences from torch, on purpose: hints of 0 and 1 are not specialized (create the symbol
with ``min=0`` to allow them); facts are proofs rather than syntax, so ``Mod`` and
``PythonMod`` or ``FloorDiv`` and ``CleanDiv`` can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

import sympy

from shapecore import functions as F
from shapecore.errors import ArgumentError, ConstraintError, DataDependentError, UnboundSymbolError
from shapecore.evaluation import evaluate, extend_assignment, holds
from shapecore.modular import ModularSet
from shapecore.parsing import parse
from shapecore.printing import python_str
from shapecore.proof import Proof
from shapecore.ranges import UNBOUNDED, ValueRange, bound, is_infinite
from shapecore.reasoner import ExprLike, Reasoner, as_claim, as_expr, is_claim
from shapecore.rewrite import build_keeping_divisions, divisors, substitute, symbols_of
from shapecore.search import bind_all, find_model
from shapecore.validation import check_bound, check_integer, check_symbol_name, check_values

__all__ = ["ShapeEnv", "SymbolInfo", "RuntimeAssert", "JSON_FORMAT", "JSON_VERSION"]

JSON_FORMAT = "shapecore.ShapeEnv"
JSON_VERSION = 1

FactKind = Literal["range", "fact", "guard", "runtime_assert"]


@dataclass(frozen=True)
class SymbolInfo:
    """What the env knows about a symbol apart from the facts."""

    name: str
    kind: Literal["backed", "unbacked"]
    hint: int | None
    source: str | None
    size_like: bool = False


@dataclass(frozen=True)
class RuntimeAssert:
    """A condition checked when the program runs (usually on unbacked symbols)."""

    expr: sympy.Basic
    msg: str


@dataclass(frozen=True)
class _Entry:
    kind: FactKind
    expr: sympy.Basic
    msg: str = ""


def _checked_source(source: str | None) -> str | None:
    if source is not None and not isinstance(source, str):
        raise ArgumentError(f"source must be a str (the expression that reads the value) or None, got {source!r}")
    return source


def _as_read_back(claim: sympy.Basic) -> sympy.Basic:
    """``claim`` in the form its printed text reads back as, where that differs (a division kept
    unevaluated prints in another order, ``CleanDiv`` prints as ``//``): what the env records
    then survives :meth:`ShapeEnv.to_json` and :meth:`ShapeEnv.from_json` exactly."""
    text = str(claim)
    back = parse(text)
    return claim if str(back) == text else back


class ShapeEnv:
    """Symbols, their ranges, guards and runtime asserts, with a layered prover behind them.

    >>> env = ShapeEnv()
    >>> b = env.create_symbol(16, source="x.size()[0]")
    >>> env.add_fact("Eq(Mod(s0, 4), 0)")
    >>> env.statically_known_true("s0 >= 4")
    True
    """

    def __init__(self, *, timeout_ms: int = 1000) -> None:
        self._reasoner = Reasoner(timeout_ms=timeout_ms)
        self._symbols: dict[str, SymbolInfo] = {}
        self._log: list[_Entry] = []
        self._witness: dict[str, int] = {}  # unbacked values satisfying every entry with the hints
        self._backed = 0
        self._unbacked = 0

    # -- symbols ----------------------------------------------------------------------------

    def _register(self, info: SymbolInfo, lo: int | None, hi: int | None) -> sympy.Symbol:
        if info.name in self._symbols:
            raise ConstraintError(f"symbol {info.name} already exists in this ShapeEnv; pick another name")
        lo, hi = check_bound(lo, "min"), check_bound(hi, "max")
        if lo is not None and hi is not None and lo > hi:
            raise ConstraintError(f"empty range [{lo}, {hi}] for {info.name}: min must not exceed max")
        if info.hint is not None and not ((lo is None or lo <= info.hint) and (hi is None or info.hint <= hi)):
            raise ConstraintError(
                f"hint {info.hint} for {info.name} is outside its range "
                f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]; "
                f"pass min=/max= that include it (sizes 0 and 1 need min=0)"
            )
        self._symbols[info.name] = info
        symbol = F.int_symbol(info.name)
        if info.hint is not None:
            self._reasoner.hints[info.name] = info.hint
        self._constrain(symbol, lo, hi)
        return symbol

    def create_symbol(
        self,
        hint: int,
        *,
        name: str | None = None,
        source: str | None = None,
        min: int | None = 2,
        max: int | None = None,
    ) -> sympy.Symbol:
        """A backed symbol (``s0``, ``s1``, … unless ``name`` is given) whose example value is ``hint``."""
        if hint is None:
            raise ArgumentError("create_symbol needs an int hint; use create_unbacked_symbol for a value without one")
        hint = check_integer(hint, "hint")
        if name is None:
            while f"s{self._backed}" in self._symbols:
                self._backed += 1
            name = f"s{self._backed}"
        info = SymbolInfo(check_symbol_name(name, "name"), "backed", hint, _checked_source(source))
        return self._register(info, min, max)

    def create_unbacked_symbol(
        self,
        *,
        name: str | None = None,
        min: int | None = None,
        max: int | None = None,
        size_like: bool = False,
        source: str | None = None,
    ) -> sympy.Symbol:
        """An unbacked symbol (``u0, u1, …`` unless ``name`` is given): a value with no hint.

        ``size_like`` marks a size (its ``min`` defaults to 0).
        """
        if name is None:
            while f"u{self._unbacked}" in self._symbols:
                self._unbacked += 1
            name = f"u{self._unbacked}"
        if size_like and min is None:
            min = 0
        info = SymbolInfo(check_symbol_name(name, "name"), "unbacked", None, _checked_source(source), size_like)
        return self._register(info, min, max)

    @property
    def symbols(self) -> dict[str, SymbolInfo]:
        """Every symbol of the env by name, in creation order."""
        return dict(self._symbols)

    @property
    def hints(self) -> dict[str, int]:
        """Hint of every backed symbol (torch's ``var_to_val``)."""
        return {n: s.hint for n, s in self._symbols.items() if s.hint is not None}

    # -- facts ------------------------------------------------------------------------------

    @contextmanager
    def _atomically(self) -> Iterator[None]:
        """Entries recorded in the block are all kept, or, if it raises, none: the env is as before."""
        logged, witness = len(self._log), self._witness
        try:
            with self._reasoner.transaction():
                yield
        except BaseException:
            del self._log[logged:]
            self._witness = witness
            raise

    def _record(self, kind: FactKind, expr: sympy.Basic, msg: str = "") -> None:
        """Record one entry; it must hold at the example point and not contradict the others."""
        knowledge = self._reasoner.knowledge
        expr = _as_read_back(expr)
        with self._atomically():
            self._check_at_example(kind, expr)
            before, bound = knowledge.contradiction, set(self._example())
            stored = self._reasoner.add_fact(expr)
            self._log.append(_Entry(kind, stored, msg))
            if before is None and knowledge.contradiction is not None:
                culprits = ", ".join(str(knowledge.facts[i]) for i in knowledge.contradiction)
                raise ConstraintError(
                    f"{kind} {stored} contradicts what is already known ({culprits}); "
                    f"nothing was recorded — check the constraint or the example inputs"
                )
            self._check_example_still_holds(kind, stored, bound)
            self._keep_a_witness(kind, stored)

    def _check_example_still_holds(self, kind: str, stored: sympy.Basic, bound: set[str]) -> None:
        """Raise :class:`ConstraintError` if what the env now knows excludes the hints.

        An entry on unbacked symbols cannot be checked at the hints itself, but what follows
        from it can: a replacement or range of a backed symbol, or an unbacked symbol that a
        replacement now gives a value, which completes earlier entries.
        """
        knowledge = self._reasoner.knowledge
        point = self._example()
        wrong = []
        for x, expression in knowledge.replacements.items():
            if symbols_of(expression) <= {F.int_symbol(n) for n in point}:
                try:
                    value = evaluate(expression, point)
                except ArithmeticError:
                    wrong.append(f"{x} = {expression} is undefined")
                    continue
                if x.name in self.hints and value != self.hints[x.name]:
                    wrong.append(f"{x} = {expression}")
        for name, hint in self.hints.items():
            x = F.int_symbol(name)
            if x in knowledge.replacements:
                continue
            if hint not in knowledge.range_of(x) or not self._in_residue_class(x, hint):
                congruence = knowledge.congruences.get(x)
                modulo = f" and {name} % {congruence.coeff} == {congruence.base}" if congruence is not None else ""
                wrong.append(f"{name} in {knowledge.range_of(x)}{modulo}")
        completed = set(point) - bound
        for entry in self._log if completed else ():
            names = {s.name for s in symbols_of(entry.expr)}
            if names & completed and names <= set(point) and not holds(entry.expr, point):
                wrong.append(f"{entry.expr} fails")
        if wrong:
            values = ", ".join(f"{n}={v}" for n, v in sorted(point.items()))
            raise ConstraintError(
                f"{kind} {stored} is inconsistent with the example values ({values}): with it, {'; '.join(wrong)}; "
                f"nothing was recorded"
            )

    def _keep_a_witness(self, kind: str, stored: sympy.Basic) -> None:
        """Keep ``_witness`` a witness with ``stored`` recorded, or raise :class:`ConstraintError`.

        Most entries hold at the witness as it is, their new unbacked symbols taking a first
        value in range (:func:`~shapecore.search.bind_all`), or once their unbacked symbols
        move to other values in range (:func:`~shapecore.search.find_model`). Otherwise the
        reasoner decides whether the backed symbols can all take their hints; its
        counterexample, checked exactly against every fact, is the new witness.
        """
        hints, knowledge = self.hints, self._reasoner.knowledge
        names = {s.name for s in symbols_of(stored)}
        if names <= hints.keys():
            return  # it holds at the hints (_check_at_example), so at the witness too
        point = {**self._witness, **hints}
        missing = [F.int_symbol(n) for n in sorted(names - point.keys())]
        if missing:
            point = bind_all(point, missing, knowledge, hints)
        try:
            found = holds(stored, point)
        except UnboundSymbolError:
            found = False
        if not found:
            model = find_model(knowledge, point, [F.int_symbol(n) for n in names - hints.keys()], hints)
            point = model if model is not None else self._find_witness(kind, stored)
        self._witness = {n: v for n, v in point.items() if n in self._symbols and n not in hints}

    def _find_witness(self, kind: str, stored: sympy.Basic) -> dict[str, int]:
        """Values satisfying every fact with each backed symbol at its hint, from the reasoner.

        Refuting "some backed symbol differs from its hint" gives them; proving it, or giving up,
        refuses ``stored`` (no facts are added to ask, so the z3 session keeps its state).
        """
        hints = self.hints
        backed = sorted((s for s in self._reasoner.knowledge.symbols if s.name in hints), key=lambda s: s.name)
        proof = self.prove(sympy.Or(*(sympy.Ne(s, hints[s.name]) for s in backed)))
        if proof.status == "refuted":
            return dict(proof.counterexample)  # type: ignore[arg-type]
        unbacked = ", ".join(sorted({s.name for s in symbols_of(stored)} - hints.keys()))
        used = proof.facts_used or ()
        involved = set().union(*(symbols_of(f) for f in (stored, *used)))
        values = ", ".join(f"{s.name}={hints[s.name]}" for s in backed if s in involved) or "no backed symbols"
        if proof.status == "proved":
            culprits = ", ".join(str(f) for f in used if f != stored)
            raise ConstraintError(
                f"{kind} {stored} holds for no values of {unbacked} at the example values ({values})"
                f"{f' together with {culprits}' if culprits else ''}; nothing was recorded — check the constraint, "
                f"the example inputs or the unbacked symbols' ranges"
            )
        raise ConstraintError(
            f"{kind} {stored}: could not show within timeout_ms={self._reasoner.timeout_ms} that some values of "
            f"{unbacked} satisfy it with the example values ({values}) ({proof.reason}); nothing was recorded — "
            f"create the env with a larger timeout_ms, or state the constraint more simply"
        )

    def _in_residue_class(self, x: sympy.Symbol, value: int) -> bool:
        congruence = self._reasoner.knowledge.congruences.get(x)
        return congruence is None or not congruence.coeff or (value - congruence.base) % congruence.coeff == 0

    def _constrain(self, symbol: sympy.Symbol, lo: int | None, hi: int | None) -> None:
        with self._atomically():
            for fact in ([sympy.Ge(symbol, lo)] if lo is not None else []) + ([sympy.Le(symbol, hi)] if hi is not None else []):
                self._record("range", fact)

    def _symbol(self, sym: str | sympy.Symbol) -> sympy.Symbol:
        if not isinstance(sym, (str, sympy.Symbol)):
            raise ArgumentError(f"expected a symbol or its name, got {sym!r}")
        name = sym if isinstance(sym, str) else sym.name
        if name not in self._symbols:
            raise KeyError(f"unknown symbol {name!r}; this env has: {', '.join(self._symbols) or 'none'}")
        return F.int_symbol(name)

    def constrain_range(self, sym: str | sympy.Symbol, *, min: int | None = None, max: int | None = None) -> None:
        """Narrow ``sym`` to ``[min, max]`` (either may be None); its hint must stay inside."""
        symbol = self._symbol(sym)
        min, max = check_bound(min, "min"), check_bound(max, "max")
        hint = self._symbols[symbol.name].hint
        if hint is not None and ((min is not None and hint < min) or (max is not None and hint > max)):
            raise ConstraintError(f"range [{min}, {max}] for {symbol} excludes its hint {hint}")
        self._constrain(symbol, min, max)

    def _example(self) -> dict[str, int]:
        """The hints, extended through the replacements where they bind every symbol."""
        try:
            return extend_assignment(self.hints, self._reasoner.knowledge.replacements)  # type: ignore[return-value]
        except ArithmeticError:  # cannot happen while the invariant holds; the hints alone then
            return self.hints

    def _check_at_example(self, kind: str, claim: sympy.Basic) -> None:
        """Raise :class:`ConstraintError` if ``claim`` does not hold at the example point."""
        point = self._example()
        names = sorted(s.name for s in symbols_of(claim))
        if not all(n in point for n in names):
            return  # depends on an unbacked value: nothing to check it against
        try:
            problem = None if evaluate(claim, point) is True else "false"
        except ArithmeticError as error:  # as Python would raise there
            problem = f"undefined ({type(error).__name__}: {error})"
        if problem is not None:
            values = ", ".join(f"{n}={point[n]}" for n in names) or "no symbols"
            raise ConstraintError(
                f"{kind} {claim} is {problem} for the example values ({values}); nothing was recorded"
            )

    def add_fact(self, expr: ExprLike) -> None:
        """Assume ``expr`` (a user constraint such as ``Eq(Mod(batch, 4), 0)``) from now on.

        Raises :class:`ConstraintError` (recording nothing) when it is false or undefined at
        the hints, or contradicts what is already known.
        """
        claim = as_claim(expr)
        self._check_known(claim)
        self._record("fact", claim)

    @contextmanager
    def assuming(self, facts: ExprLike | Iterable[ExprLike]) -> Iterator[None]:
        """Within the block, ``facts`` hold as if given to :meth:`add_fact`; at its exit, also by
        an exception, the env is exactly as before (its :meth:`to_json` included): whatever the
        block recorded, symbols and guards too, is forgotten.

        >>> env = ShapeEnv()
        >>> s0 = env.create_symbol(8)
        >>> with env.assuming(["Eq(Mod(s0, 4), 0)"]):
        ...     env.statically_known_true("Eq(Mod(s0, 2), 0)")
        True
        >>> env.statically_known_true("Eq(Mod(s0, 2), 0)")
        False

        Raises :class:`ConstraintError` as :meth:`add_fact` does, the env unchanged.
        """
        claims = [facts] if isinstance(facts, (str, sympy.Basic, bool, int)) else list(facts)
        symbols, counters, logged = dict(self._symbols), (self._backed, self._unbacked), len(self._log)
        hints, witness = dict(self._reasoner.hints), self._witness
        checkpoint = self._reasoner.checkpoint()
        try:
            for claim in claims:
                self.add_fact(claim)
            yield
        finally:
            self._reasoner.rollback(checkpoint)
            self._reasoner.hints.clear()
            self._reasoner.hints.update(hints)
            del self._log[logged:]
            self._symbols, (self._backed, self._unbacked), self._witness = symbols, counters, witness

    def defer_runtime_assert(self, expr: ExprLike, msg: str = "") -> bool:
        """Record a condition to check at run time; it is assumed from now on.

        Returns True. Raises :class:`ConstraintError` when the facts already refute it, or it
        is false or undefined at the hints.
        """
        claim = as_claim(expr)
        self._check_known(claim)
        proof = self.prove(claim)
        if proof.proved:
            return True
        if self.prove(self._negation(claim)).proved:
            raise ConstraintError(f"runtime assert {claim} can never hold under the known facts: {msg}")
        self._record("runtime_assert", claim, msg)
        return True

    @staticmethod
    def _negation(claim: sympy.Basic) -> sympy.Basic:
        """``Not(claim)``, defined exactly where ``claim`` is (sympy's folding may not drop a divisor)."""
        return build_keeping_divisions(sympy.Not, claim)

    def _check_known(self, claim: sympy.Basic) -> None:
        for symbol in claim.free_symbols:
            if symbol.name not in self._symbols:
                raise KeyError(
                    f"{claim} mentions {symbol.name}, which this env did not create; "
                    f"known symbols: {', '.join(self._symbols) or 'none'}"
                )

    # -- deciding ---------------------------------------------------------------------------

    def prove(self, claim: ExprLike) -> Proof:
        """Decide ``claim`` under every range, fact, guard and runtime assert so far."""
        return self._reasoner.prove(claim)

    def bound(self, expr: ExprLike) -> ValueRange:
        """A range holding every value of ``expr`` under what the env knows (:meth:`Reasoner.bound`)."""
        return self._reasoner.bound(expr)

    def residue(self, expr: ExprLike) -> ModularSet | None:
        """The residue class of ``expr`` under what the env knows (:meth:`Reasoner.residue`)."""
        return self._reasoner.residue(expr)

    def statically_known_true(self, expr: ExprLike) -> bool:
        """True when ``expr`` is proved without recording anything; False otherwise."""
        return self.prove(expr).proved

    def _unbacked_in(self, expr: sympy.Basic) -> list[sympy.Symbol]:
        """The symbols without a hint that ``expr`` depends on, through the replacements too (read
        off them, not substituted: substituting may fold a divisor to zero, ``s0 + 1`` at ``s0 := -1``)."""
        replacements = self._reasoner.knowledge.replacements
        found = set().union(*((symbols_of(replacements[s]) if s in replacements else {s}) for s in symbols_of(expr)))
        return sorted(
            (s for s in found if self._symbols.get(s.name, None) is None or self._symbols[s.name].hint is None),
            key=lambda s: s.name,
        )

    def _data_dependent(self, expr: sympy.Basic, suggestions: list[str], unbound: str | None = None) -> DataDependentError:
        """The error for deciding ``expr``, naming its first unbacked symbol (or ``unbound``)."""
        unbacked = self._unbacked_in(expr)
        name = unbacked[0].name if unbacked else unbound
        info = self._symbols.get(name)
        return DataDependentError(str(expr), name, info.source if info else None, suggestions)

    def size_hint(self, expr: ExprLike) -> int | float | bool:
        """The value of ``expr`` at the hints, as Python computes it; records nothing.

        Raises :class:`DataDependentError` if it depends on an unbacked symbol, and
        ``ZeroDivisionError`` if a divisor is zero at the hints.
        """
        value = as_expr(expr)
        try:
            return evaluate(value, self._example())
        except UnboundSymbolError as error:
            raise self._data_dependent(value, [], error.name) from None

    def evaluate_expr(self, expr: ExprLike) -> int | float | bool:
        """Decide ``expr``: statically when possible, else from the hints, recording a guard.

        A condition returns a bool and records it (or its negation) as a guard when the facts
        alone do not settle it; an integer (or float-valued) expression returns its value and
        records ``Eq(expr, value)`` unless the facts already fix it. Like Python, it raises
        ``ZeroDivisionError`` (recording nothing) when ``expr`` divides by zero at the hints;
        a float that is not finite there (``inf``) cannot be a guard's value: ConstraintError.
        """
        value = as_expr(expr)
        self._check_known(value)
        if is_claim(value):
            return self._evaluate_condition(value)
        if not divisors(value):
            resolved = substitute(value, self._reasoner.knowledge.replacements)
            if resolved.is_Integer:
                return int(resolved)
        number = self.size_hint(value)
        constant = F.as_number(number)
        if constant is None:
            raise ConstraintError(f"{value} is {number} at the hints, which no guard can record; nothing was recorded")
        claim = build_keeping_divisions(sympy.Eq, value, constant)
        if not self.prove(claim).proved:
            self._record("guard", claim)
        return number

    def _evaluate_condition(self, claim: sympy.Basic) -> bool:
        if self.prove(claim).proved:
            return True
        negation = self._negation(claim)
        if self.prove(negation).proved:
            return False
        try:
            result = evaluate(claim, self._example()) is True  # like Python: a zero divisor raises
        except UnboundSymbolError as error:
            raise self._data_dependent(claim, [str(claim), str(negation)], error.name) from None
        self._record("guard", claim if result else negation)
        return result

    def guard_or_false(self, expr: ExprLike) -> bool:
        """``evaluate_expr(expr)``, but False instead of a :class:`DataDependentError`."""
        try:
            return bool(self.evaluate_expr(expr))
        except DataDependentError:
            return False

    def guard_or_true(self, expr: ExprLike) -> bool:
        """``evaluate_expr(expr)``, but True instead of a :class:`DataDependentError`."""
        try:
            return bool(self.evaluate_expr(expr))
        except DataDependentError:
            return True

    # -- state ------------------------------------------------------------------------------

    def _entries(self, *kinds: FactKind) -> list[_Entry]:
        return [e for e in self._log if e.kind in kinds]

    @property
    def guards(self) -> list[sympy.Basic]:
        """Guards recorded by :meth:`evaluate_expr`, in order."""
        return [e.expr for e in self._entries("guard")]

    @property
    def facts(self) -> list[sympy.Basic]:
        """User facts (:meth:`add_fact`), in order."""
        return [e.expr for e in self._entries("fact")]

    @property
    def runtime_asserts(self) -> list[RuntimeAssert]:
        return [RuntimeAssert(e.expr, e.msg) for e in self._entries("runtime_assert")]

    @property
    def replacements(self) -> dict[sympy.Symbol, sympy.Basic]:
        """Symbols known equal to an expression of other symbols (``s77 := 8*s6``)."""
        return dict(self._reasoner.knowledge.replacements)

    @property
    def divisible(self) -> set[sympy.Basic]:
        """``Mod(x - r, m)`` terms known to be 0 (torch's ``divisible``), one per congruence."""
        return {
            F.Mod(symbol - c.base, c.coeff)
            for symbol, c in self._reasoner.knowledge.congruences.items()
            if c.coeff > 1
        }

    @property
    def var_to_range(self) -> dict[sympy.Symbol, ValueRange]:
        """The tightest known range of every symbol (replaced ones through their replacement, within
        the range they had when replaced: ``u3 := 12*s0 - u0 - u1 - u2`` keeps ``u3 >= 0``)."""
        knowledge = self._reasoner.knowledge
        result = {}
        for name in self._symbols:
            symbol = F.int_symbol(name)
            if symbol in knowledge.replacements:
                own = knowledge.replaced_ranges.get(symbol, UNBOUNDED)
                result[symbol] = bound(knowledge.replacements[symbol], knowledge.ranges) & own
            else:
                result[symbol] = knowledge.range_of(symbol)
        return result

    # -- guards out -------------------------------------------------------------------------

    def _contract(self) -> list[sympy.Basic]:
        """Everything inputs must satisfy: ranges, replacements, facts and guards (backed only).

        An unbacked symbol replaced by an expression of inputs is no input itself: entries
        state it through its replacement (``u0 > 3`` under ``u0 := s1`` is ``s1 > 3``).
        """
        exprs: list[sympy.Basic] = []
        hints = self.hints
        defined = {x: e for x, e in self.replacements.items() if x.name not in hints}
        for symbol, expression in self.replacements.items():
            if symbol not in defined:
                exprs.append(sympy.Eq(symbol, expression))
        for symbol, r in self.var_to_range.items():
            if symbol in self.replacements:
                if not symbols_of(self.replacements[symbol]) <= {F.int_symbol(n) for n in hints}:
                    # replaced by an expression of unbacked values: its own ranges still bind the input
                    exprs += [e.expr for e in self._entries("range") if symbols_of(e.expr) == {symbol}]
                continue  # else the replacement, over inputs, says it all
            if not is_infinite(r.lo):
                exprs.append(sympy.Ge(symbol, int(r.lo)))
            if not is_infinite(r.hi):
                exprs.append(sympy.Le(symbol, int(r.hi)))
        exprs += [substitute(e.expr, defined, keep_divisions=True) for e in self._entries("fact", "guard")]
        unique = list(dict.fromkeys(e for e in exprs if e is not sympy.true))
        return [e for e in unique if all(s.name in hints for s in symbols_of(e))]

    def produce_guards(self, sources: Mapping[str | sympy.Symbol, str]) -> list[str]:
        """Python source of every condition inputs must meet, symbols printed as ``sources``.

        ``sources`` maps a symbol (or its name) to the expression that reads it, e.g.
        ``{"s0": "x.size()[0]"}``.
        """
        if not isinstance(sources, Mapping):
            raise ArgumentError(f"sources must map symbols to the expressions that read them, got {sources!r}")
        names = {(k if isinstance(k, str) else k.name): v for k, v in sources.items()}
        lines = []
        for expr in self._contract():
            missing = sorted(s.name for s in expr.free_symbols if s.name not in names)
            if missing:
                raise KeyError(
                    f"guard {expr} mentions {', '.join(missing)}, which has no source; "
                    f"pass sources={{{missing[0]!r}: 'x.size()[0]', ...}}"
                )
            lines.append(python_str(expr, names))
        return lines

    def check_guards(self, values: Mapping[str, int]) -> list[sympy.Basic]:
        """The conditions of :meth:`produce_guards` that ``values`` (name → int) violates."""
        assignment: dict[str, int] = check_values(values)
        undefined = set()  # replaced symbols whose replacement divides by zero there
        for symbol, expression in self.replacements.items():
            if symbol.name not in assignment and all(s.name in assignment for s in expression.free_symbols):
                try:
                    assignment[symbol.name] = evaluate(expression, assignment)
                except ArithmeticError:
                    undefined.add(symbol)
        return [expr for expr in self._contract() if symbols_of(expr) & undefined or not holds(expr, assignment)]

    # -- JSON -------------------------------------------------------------------------------

    def to_json(self) -> str:
        """A versioned JSON document from which :meth:`from_json` rebuilds this env exactly.

        ``symbols`` and ``log`` (every range, fact, guard and runtime assert in order) are the
        content; ``replacements``, ``divisible``, ``ranges``, ``guards`` and
        ``runtime_asserts`` are derived, for readers.
        """
        ranges = {
            s.name: [None if is_infinite(r.lo) else int(r.lo), None if is_infinite(r.hi) else int(r.hi)]
            for s, r in self.var_to_range.items()
        }
        document: dict[str, Any] = {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "symbols": [asdict(s) for s in self._symbols.values()],
            "log": [{"kind": e.kind, "expr": str(e.expr), **({"msg": e.msg} if e.msg else {})} for e in self._log],
            "replacements": {s.name: str(e) for s, e in self.replacements.items()},
            "divisible": sorted(str(d) for d in self.divisible),
            "ranges": ranges,
            "guards": [str(g) for g in self.guards],
            "runtime_asserts": [{"expr": str(a.expr), "msg": a.msg} for a in self.runtime_asserts],
        }
        return json.dumps(document, indent=2)

    @classmethod
    def from_json(cls, text: str, *, timeout_ms: int = 1000) -> ShapeEnv:
        """Rebuild the env written by :meth:`to_json`.

        The document is checked first (:mod:`shapecore.env_json`); a malformed one raises
        :class:`~shapecore.errors.GuardInputError` naming the field, its line and its column.
        """
        from shapecore.env_json import read_env_json  # which reads this module's SymbolInfo
        from shapecore.input_text import JsonInput

        if not isinstance(text, str):
            raise ArgumentError(f"from_json takes the JSON text, got {type(text).__name__}")
        document = read_env_json(JsonInput(text, "<ShapeEnv JSON>"))
        env = cls(timeout_ms=timeout_ms)
        for info in document.symbols:
            env._symbols[info.name] = info
            if info.hint is not None:
                env._reasoner.hints[info.name] = info.hint
        env._backed = sum(1 for s in env._symbols.values() if s.kind == "backed")
        env._unbacked = sum(1 for s in env._symbols.values() if s.kind == "unbacked")
        for entry in document.log:
            try:
                env._record(entry.kind, entry.expr, entry.msg)
            except ConstraintError as error:
                raise ConstraintError(f"{entry.where}: {error}") from None
        return env

    def __repr__(self) -> str:
        return (
            f"ShapeEnv({len(self._symbols)} symbols, {len(self.guards)} guards, "
            f"{len(self.runtime_asserts)} runtime asserts)"
        )
