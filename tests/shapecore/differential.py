"""Random shape queries, asked of shapecore and checked against the oracle's brute force.

Shared by ``tests/shapecore/test_differential.py`` (hypothesis makes the choices) and
``bench/fuzz.py`` (a seeded ``random.Random`` does); the text comes from
:mod:`tests.shapecore.guard_text`, the ground truth from :mod:`tests.shapecore.oracle`.

Three kinds of query, each over a :class:`~tests.shapecore.oracle.Box` of small intervals
(:data:`KINDS` names their generators: ``simplify_divisions`` writes simplify queries of
issue 19's shape, :func:`division_simplify_query`):

* :class:`ProveQuery` — ``shapecore.prove(claim, facts=..., ranges=...)``. Wrong: ``proved``
  while the claim does not hold at a box point satisfying the facts; ``refuted`` with a
  counterexample that leaves a symbol unbound, breaks a fact, or at which the claim holds.
* :class:`SimplifyQuery` — ``shapecore.simplify``. Wrong: at a box point satisfying the
  context, the input guards all hold and the output guards do not, or the reverse; a guard
  dropped as implied (a duplicate, a tautology, merged) that fails at such a point where the
  guards it names hold; ``ranges`` that leave out a value of a point the input accepts, or
  are looser than the ranges given.
* :class:`EnvQuery` — a ShapeEnv, its symbols and a sequence of ``evaluate_expr``,
  ``add_fact``, ``defer_runtime_assert``, ``statically_known_true`` and
  ``to_json``/``from_json`` round trips, run against a model of what the env has been told.
  Wrong: a value that differs from Python's at the hints (for every value of the unbacked
  symbols the facts allow there), a value where Python raises there, a guard false at the
  hints, an answer given without a guard that is not the claim's value wherever the facts
  allow, a fact accepted for which no value of the unbacked symbols (in their ranges) meets
  everything told with the backed ones at their hints, or one rejected for which some value
  does (unless the env says it could not show it in time), an assert found implied that is
  not, a claim false at the hints proved after a rejected fact, a round trip that changes the
  document. Wrong answers after a ``ConstraintError`` (which promises that nothing was
  recorded) say so. :func:`unbacked_env_query` draws envs with both kinds of symbol, told
  facts relating them that the unbacked ranges often leave no room for at the hints.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import shapecore
from tests.shapecore.guard_text import (
    Chooser,
    GuardWriter,
    chance,
    divisibility,
    extra_fact,
    pick,
    random_box,
    random_style,
    range_texts,
)
from tests.shapecore.oracle import Box, Formula, OracleError, formula, holds, satisfying, value_at, zero_divisor

__all__ = [
    "KINDS",
    "Outcome",
    "ProveQuery",
    "SimplifyQuery",
    "EnvQuery",
    "prove_query",
    "simplify_query",
    "division_simplify_query",
    "env_query",
    "unbacked_env_query",
    "generate",
    "run",
]


# -- outcomes ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One query's answer and what the oracle says of it.

    ``problem`` is None for a correct (or honestly unknown) answer; else ``"wrong: …"`` for a
    wrong answer or ``"exception: Type"`` for an exception raised where none should be.
    """

    query: str  # prove, simplify, or env.<verb>
    status: str  # proved / refuted / unknown, or what the env verb returned
    seconds: float
    problem: str | None = None
    detail: str = ""
    reproduction: str = ""

    @property
    def wrong(self) -> bool:
        return self.problem is not None and self.problem.startswith("wrong")

    def report(self) -> str:
        return f"{self.problem}: {self.detail}\nreproduce with:\n{self.reproduction}"


def _exception_outcome(query: str, exc: BaseException, seconds: float, reproduction: str) -> Outcome:
    return Outcome(query, "raised", seconds, f"exception: {type(exc).__name__}", f"{type(exc).__name__}: {exc}"[:500],
                   reproduction)


def _timed(call: Callable[[], object]) -> tuple[object, BaseException | None, float]:
    start = time.perf_counter()
    try:
        result, error = call(), None
    except Exception as exc:  # noqa: BLE001 - every exception is data here
        result, error = None, exc
    return result, error, time.perf_counter() - start


def _fair_refusal(error: BaseException, texts: Sequence[str]) -> bool:
    """A ShapecoreError is a fair answer to text with a divisor that is zero for every value."""
    return isinstance(error, shapecore.ShapecoreError) and any(zero_divisor(t) is not None for t in texts)


# -- prove ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProveQuery:
    """``prove(claim, facts=facts, ranges=...)``: ranges for the box's ``declared`` symbols
    go in ``ranges=`` or, when ``ranges_in_facts``, in ``facts`` as text; an undeclared
    symbol is unconstrained for shapecore (brute force still walks its interval)."""

    claim: str
    facts: tuple[str, ...]
    box: Box
    declared: tuple[str, ...]
    ranges_in_facts: bool

    def arguments(self) -> tuple[str, tuple[str, ...], dict[str, tuple[int, int]]]:
        ranges = {n: (lo, hi) for n, lo, hi in self.box.intervals if n in self.declared}
        return self.claim, self.facts, ({} if self.ranges_in_facts else ranges)

    def reproduction(self, timeout_ms: int) -> str:
        claim, facts, ranges = self.arguments()
        return f"shapecore.prove({claim!r}, facts={list(facts)!r}, ranges={ranges!r}, timeout_ms={timeout_ms})"


def prove_query(choose: Chooser) -> ProveQuery:
    names = pick(choose, (("x", "y", "z"), ("s0", "s1", "s2"), ("a", "b", "c")))[: choose.integer(1, 3)]
    box = random_box(choose, names)
    writer = GuardWriter(choose, box, random_style(choose))
    claim = writer.any_claim()
    declared = tuple(n for n in names if not chance(choose, 15))
    ranges_in_facts = chance(choose, 50)
    facts: list[str] = []
    if ranges_in_facts:
        for name, lo, hi in box.intervals:
            if name in declared:
                facts += range_texts(choose, name, lo, hi)
    facts += [extra_fact(writer) for _ in range(choose.integer(0, 2))]
    return ProveQuery(claim, tuple(facts), box, declared, ranges_in_facts)


def check_prove(query: ProveQuery, *, timeout_ms: int) -> Outcome:
    claim_text, facts, ranges = query.arguments()
    reproduction = query.reproduction(timeout_ms)
    proof, error, seconds = _timed(lambda: shapecore.prove(claim_text, facts=facts, ranges=ranges, timeout_ms=timeout_ms))
    range_facts = [f for n, lo, hi in query.box.intervals if n in query.declared
                   for f in (f"{n} >= {lo}", f"{n} <= {hi}")]
    if error is not None:
        if _fair_refusal(error, [claim_text, *facts]):
            return Outcome("prove", "refused", seconds)
        return _exception_outcome("prove", error, seconds, reproduction)
    outcome = Outcome("prove", proof.status, seconds, reproduction=reproduction)

    given = [formula(f) for f in (*facts, *range_facts)]
    claim = formula(claim_text)
    if proof.status == "proved":
        problem = _first_disagreement(claim, True, satisfying(given, query.box))
        if problem is not None:
            point, got = problem
            how = "is undefined (zero divisor)" if got is ZeroDivisionError else "is False"
            outcome.problem = f"wrong: proved, but the claim {how} at a point satisfying the facts"
            outcome.detail = f"{claim_text} at {point}: {got!r}"
    elif proof.status == "refuted":
        outcome.problem, outcome.detail = _bad_counterexample(proof.counterexample, claim, given)
    return outcome


def _bad_counterexample(counterexample, claim: Formula, facts: Sequence[Formula]) -> tuple[str | None, str]:
    needed = claim.symbols.union(*(f.symbols for f in facts))
    if counterexample is None:
        return "wrong: refuted without a counterexample", ""
    missing = sorted(needed - counterexample.keys())
    if missing:
        return "wrong: refuted, the counterexample leaves symbols unbound", f"{dict(counterexample)} lacks {missing}"
    try:
        point = {name: operator.index(value) for name, value in counterexample.items()}
    except TypeError:
        return "wrong: refuted, the counterexample is not integers", repr(dict(counterexample))
    broken = [f.text for f in facts if not holds(f, point)]
    if broken:
        return "wrong: refuted, the counterexample breaks a fact", f"{point} breaks {broken}"
    if holds(claim, point):
        return "wrong: refuted, but the claim holds at the counterexample", f"{claim.text} holds at {point}"
    return None, ""


# -- simplify ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimplifyQuery:
    """``simplify(guards, facts=facts, ranges=...)``: ``ranges`` as ``(name, lo, hi)`` with
    ``None`` for an open end, or the box's intervals when None. Brute force walks the box: with
    open ranges, it checks the part of the scope inside it."""

    guards: tuple[str, ...]
    facts: tuple[str, ...]
    box: Box
    ranges: tuple[tuple[str, int | None, int | None], ...] | None = None

    def scope(self) -> dict[str, tuple[int | None, int | None]]:
        """The ``ranges=`` argument."""
        return {n: (lo, hi) for n, lo, hi in (self.box.intervals if self.ranges is None else self.ranges)}

    def reproduction(self, timeout_ms: int) -> str:
        return (f"shapecore.simplify({list(self.guards)!r}, facts={list(self.facts)!r}, ranges={self.scope()!r}, "
                f"timeout_ms={timeout_ms}).guards")


def simplify_query(choose: Chooser) -> SimplifyQuery:
    """Guards as torch records them, true at an example point, now and then with a trap."""
    names = pick(choose, (("x", "y"), ("s0", "s1", "s2")))[: choose.integer(1, 3)]
    box = random_box(choose, names)
    writer = GuardWriter(choose, box, random_style(choose))
    example = {name: choose.integer(lo, hi) for name, lo, hi in box.intervals}
    guards = []
    for _ in range(choose.integer(1, 3)):
        guard = writer.any_claim() if chance(choose, 50) else writer.claim(1)
        if value_at(formula(guard), example) is False:
            guard = f"Not({guard})" if chance(choose, 50) else f"(not {guard})"
        guards.append(guard)
    facts = tuple(extra_fact(writer) for _ in range(choose.integer(0, 1)))
    return SimplifyQuery(tuple(guards), facts, box)


def division_simplify_query(choose: Chooser) -> SimplifyQuery:
    """Guard sets of issue 19's shape: disjunctions that define a symbol by a division,
    remainder, ``Max`` or ``Min`` of another (an alternative that never holds under the ranges
    is pruned first, so the definition reaches the digest late), beside divisibility, range and
    ``Ne`` guards on both, under ranges (or facts) that may leave a side open.

    The first symbol ranges wide (up to about 100) so that ``CeilDiv(s0, 16)`` takes several
    values; the box covers the ranges' finite part and cuts off the open sides. The guards hold
    at an example point, but now and then one that does not is left as it is.
    """
    names = pick(choose, (("s0", "s2"), ("s0", "s1", "s2"), ("x", "y")))
    intervals = {}
    for k, name in enumerate(names):
        lo = choose.integer(-3, 2)
        intervals[name] = (lo, lo + (choose.integer(20, 100) if k == 0 else choose.integer(2, 12)))
    writer = GuardWriter(choose, Box(tuple((n, *intervals[n]) for n in names)), random_style(choose))
    example = {name: choose.integer(lo, hi) for name, (lo, hi) in intervals.items()}
    guards = []
    for target in names[1 : 1 + choose.integer(1, len(names) - 1)]:  # the definitions, of the others by the first
        source, term = names[0], writer.division(names[0])
        value = value_at(formula(term), example)
        lo, hi = intervals[target]
        if isinstance(value, int) and lo - 12 <= value <= hi + 12:  # the box takes the example in
            example[target], intervals[target] = value, (min(lo, value), max(hi, value))
        never = pick(choose, (f"Gt(-{target} - {choose.integer(0, 4)}, {source} + {choose.integer(0, 6)})",
                              f"({source} < {intervals[source][0] - choose.integer(1, 4)})", writer.relation(1)))
        definition = pick(choose, (f"Eq({term}, {target})", f"Eq({target}, {term})", f"({term} == {target})"))
        guards.append(pick(choose, (f"({never}) | ({definition})", f"Or({definition}, {never})", f"({definition})")))
    for _ in range(choose.integer(1, 3)):  # what else is known of the symbols
        name = pick(choose, names)
        kind = choose.integer(0, 4)
        if kind <= 1:
            guards.append(divisibility(choose, name))
        elif kind == 2:
            guards.append(f"{pick(choose, ('Ge', 'Le', 'Ne'))}({name}, {choose.integer(-2, 10)})")
        elif kind == 3:
            guards.append(f"{pick(choose, ('Le', 'Ge', 'Ne', 'Eq'))}({writer.division(names[0])}, {name})")
        else:
            guards.append(writer.claim(1))
    guards = [g if value_at(formula(g), example) is True or chance(choose, 20) else f"Not({g})" for g in guards]
    box = Box(tuple((n, *intervals[n]) for n in names))
    ranges, facts = [], []
    for name, lo, hi in box.intervals:
        form = choose.integer(0, 4)  # the range as given, open above, as facts, or not at all
        if form <= 1:
            ranges.append((name, lo, hi if form == 0 else None))
        elif form <= 3:
            facts += range_texts(choose, name, lo, hi) if form == 2 else [f"{name} >= {lo}"]
    facts += [extra_fact(writer) for _ in range(choose.integer(0, 1))]
    return SimplifyQuery(tuple(guards), tuple(facts), box, tuple(ranges))


def check_simplify(query: SimplifyQuery, *, timeout_ms: int) -> Outcome:
    ranges = query.scope()
    reproduction = query.reproduction(timeout_ms)
    result, error, seconds = _timed(
        lambda: shapecore.simplify(list(query.guards), facts=list(query.facts), ranges=ranges, timeout_ms=timeout_ms)
    )
    context = [formula(f) for f in query.facts]
    context += [formula(f"{n} {op} {end}") for n, sides in ranges.items() for op, end in zip((">=", "<="), sides) if end is not None]
    if isinstance(error, shapecore.ConstraintError):  # documented for a context that cannot hold
        if next(satisfying(context, query.box), None) is None:
            return Outcome("simplify", "refused", seconds)
        point = next(satisfying(context, query.box))
        return Outcome("simplify", "raised", seconds, "wrong: simplify says the facts and ranges contradict each other",
                       f"{point} satisfies them: {error}", reproduction)
    if error is not None:
        if _fair_refusal(error, [*query.guards, *query.facts]):
            return Outcome("simplify", "refused", seconds)
        return _exception_outcome("simplify", error, seconds, reproduction)
    outputs = [str(g) for g in result.guards]
    outcome = Outcome("simplify", "contradiction" if result.contradiction else "simplified", seconds,
                      reproduction=reproduction)

    inputs = [formula(g) for g in query.guards]
    points = list(satisfying(context, query.box))
    try:
        simplified = [formula(g) for g in outputs]
        for point in points:
            before, after = all(holds(g, point) for g in inputs), all(holds(g, point) for g in simplified)
            if before != after:
                undefined = any(value_at(g, point) is ZeroDivisionError for g in (*inputs, *simplified))
                outcome.problem = (f"wrong: simplify's guards are not equivalent to its input"
                                   f"{' (a guard is undefined at the point)' if undefined else ''}")
                outcome.detail = (f"at {point} the input {'holds' if before else 'fails'} "
                                  f"but {outputs} {'hold' if after else 'fail'}")
                return outcome
        outcome.problem, outcome.detail = _bad_drop(result.dropped, points)
    except (OracleError, NameError) as exc:
        outcome.problem = "wrong: simplify's output is not a guard over the input's symbols"
        outcome.detail = f"{outputs}: {exc}"
    if outcome.problem is None and result.contradiction is None:
        accepted = [p for p in points if all(holds(g, p) for g in inputs)]
        outcome.problem, outcome.detail = _bad_ranges(result.ranges, ranges, accepted)
    return outcome


def _bad_drop(dropped, points: Sequence[dict[str, int]]) -> tuple[str | None, str]:
    """A guard dropped as implied (or a duplicate, a tautology, merged) that fails at a point
    where what it names holds."""
    for drop in dropped:
        if drop.kind == "contradiction":
            continue
        guard, by = formula(str(drop.guard)), [formula(str(g)) for g in drop.by]
        for point in points:
            if all(holds(g, point) for g in by) and not holds(guard, point):
                return (f"wrong: simplify dropped a guard as {drop.kind} that is not",
                        f"{drop.guard} fails at {point}, where {[str(g) for g in drop.by]} hold")
    return None, ""


def _bad_ranges(found: dict[str, tuple[int | None, int | None]], given: dict[str, tuple[int | None, int | None]],
                accepted: Sequence[dict[str, int]]) -> tuple[str | None, str]:
    """Ranges that leave out a value the input accepts, or are looser than the given ones."""
    for name, (lo, hi) in found.items():
        given_lo, given_hi = given.get(name, (None, None))
        if given_lo is not None and (lo is None or lo < given_lo) or given_hi is not None and (hi is None or hi > given_hi):
            return "wrong: simplify's ranges are looser than the given ranges", f"{name}: {(lo, hi)}, given {(given_lo, given_hi)}"
        outside = next((p for p in accepted if name in p and (lo is not None and p[name] < lo or hi is not None and p[name] > hi)),
                       None)
        if outside is not None:
            return "wrong: simplify's ranges leave out a point the input accepts", f"{name}: {(lo, hi)}, accepted {outside}"
    return None, ""


# -- ShapeEnv ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvSymbol:
    """A symbol to create: backed (with ``hint``) or unbacked, ranging over ``[lo, hi]``."""

    name: str
    lo: int
    hi: int
    hint: int | None

    def create(self) -> str:
        if self.hint is None:
            return f"env.create_unbacked_symbol(min={self.lo}, max={self.hi})"
        return f"env.create_symbol({self.hint}, min={self.lo}, max={self.hi})"


@dataclass(frozen=True)
class EnvQuery:
    """A ShapeEnv with ``symbols`` and the calls ``steps``: ``(verb, text)`` pairs, verbs
    ``evaluate_expr``, ``add_fact``, ``defer_runtime_assert``, ``statically_known_true`` and
    ``round_trip``."""

    symbols: tuple[EnvSymbol, ...]
    steps: tuple[tuple[str, str], ...]

    def reproduction(self, timeout_ms: int, upto: int | None = None) -> str:
        """The calls up to step ``upto`` (all of them by default), as Python."""
        lines = [f"env = shapecore.ShapeEnv(timeout_ms={timeout_ms})"]
        lines += [s.create() for s in self.symbols]
        for verb, text in self.steps[: None if upto is None else upto + 1]:
            if verb == "round_trip":
                lines.append(f"env = shapecore.ShapeEnv.from_json(env.to_json(), timeout_ms={timeout_ms})")
            else:
                lines.append(f"env.{verb}({text!r})")
        return "\n".join(lines)

    @property
    def box(self) -> Box:
        return Box(tuple((s.name, s.lo, s.hi) for s in self.symbols))

    @property
    def hints(self) -> dict[str, int]:
        return {s.name: s.hint for s in self.symbols if s.hint is not None}


_TELLING = ("add_fact", "defer_runtime_assert")


def env_query(choose: Chooser) -> EnvQuery:
    kinds = [chance(choose, 70) for _ in range(choose.integer(1, 3))]  # True: backed
    return _env_steps(choose, _env_symbols(choose, kinds), trap_percent=25)


def unbacked_env_query(choose: Chooser) -> EnvQuery:
    """Backed and unbacked symbols, and mostly facts relating them (:func:`_unbacked_trap`)."""
    kinds = [True] * choose.integer(1, 2) + [False] * choose.integer(1, 2)
    return _env_steps(choose, _env_symbols(choose, kinds), trap_percent=70)


def _env_symbols(choose: Chooser, kinds: Sequence[bool]) -> tuple[EnvSymbol, ...]:
    """A symbol over a small interval per entry of ``kinds`` (True: backed, with a hint in it)."""
    symbols = []
    for is_backed in kinds:
        lo = choose.integer(-4, 4)
        hi = lo + choose.integer(0, 10)
        count = sum(1 for s in symbols if (s.hint is not None) == is_backed)
        if is_backed:
            symbols.append(EnvSymbol(f"s{count}", lo, hi, choose.integer(lo, hi)))
        else:
            symbols.append(EnvSymbol(f"u{count}", lo, hi, None))
    return tuple(symbols)


def _env_steps(choose: Chooser, symbols: tuple[EnvSymbol, ...], *, trap_percent: int) -> EnvQuery:
    """1 to 8 calls on an env with ``symbols``; a fact or claim is a trap ``trap_percent`` of the time."""
    query = EnvQuery(symbols, ())
    writer = GuardWriter(choose, query.box, random_style(choose))
    steps = []
    for _ in range(choose.integer(1, 8)):
        verb = pick(choose, ("evaluate_expr", "evaluate_expr", *_TELLING, "statically_known_true", "round_trip"))
        if verb == "round_trip":
            text = ""
        elif verb == "evaluate_expr" and chance(choose, 20):
            text = writer.expr(2)  # an integer expression: evaluate_expr returns its value
        elif chance(choose, trap_percent):
            text = _hint_trap(choose, query)
        else:
            text = writer.any_claim() if verb not in _TELLING or chance(choose, 30) else extra_fact(writer)
        steps.append((verb, text))
    return EnvQuery(query.symbols, tuple(steps))


def _hint_trap(choose: Chooser, query: EnvQuery) -> str:
    """A claim aimed at the hints: a divisor zero there, a bound that excludes them, or (with
    both kinds of symbol, half the time) a relation the unbacked ranges may leave no room for."""
    if any(s.hint is None for s in query.symbols) and any(s.hint is not None for s in query.symbols):
        if chance(choose, 50):
            return _unbacked_trap(choose, query)
    symbol = pick(choose, query.symbols)
    value = symbol.hint if symbol.hint is not None else choose.integer(symbol.lo, symbol.hi)
    name = symbol.name
    shapes = (
        f"Mod({name}, {name} - {value}) < {name} + 100",
        f"{name} // ({name} - {value}) >= 0",
        f"Eq({name}, {value + choose.integer(1, 3)})",
        f"{name} >= {symbol.hi + choose.integer(1, 10)}",
        f"{name} < {symbol.lo}",
        f"Ne({name}, {value})",
    )
    return pick(choose, shapes)


def _unbacked_trap(choose: Chooser, query: EnvQuery) -> str:
    """A fact relating an unbacked symbol to a backed one (or to an unbacked one) with a
    constant chosen so that, at the hints, ``slack > 0`` leaves no value in the unbacked
    ranges and ``slack <= 0`` leaves some (issue 19: ``s0 <= u0`` with ``s0 = 27``,
    ``u0 <= 14``)."""
    s = pick(choose, [x for x in query.symbols if x.hint is not None])
    u, v = (pick(choose, [x for x in query.symbols if x.hint is None]) for _ in range(2))
    slack, k = choose.integer(-2, 2), pick(choose, (1, 2, 3, -1))
    m = choose.integer(2, 5)
    shapes = (
        f"{s.name} <= {u.name} + ({s.hint - u.hi - slack})",  # u >= u.hi + slack at the hints
        f"{s.name} > {u.name} + ({s.hint - u.lo + slack - 1})",  # u <= u.lo - slack
        f"Eq({s.name}, {k}*{u.name} + ({s.hint - k * choose.integer(u.lo - 2, u.hi + 2)}))",
        f"{u.name} + {v.name} >= {s.name} + ({u.hi + v.hi - s.hint + slack})",
        f"{u.name} > {v.name} + ({u.hi - v.lo + slack - 1})",  # ranges alone: none when slack > 0
        f"Eq(Mod({s.name} + {u.name}, {m}), {choose.integer(0, m - 1)})",
    )
    return pick(choose, shapes)


class _Model:
    """What an env has been told: its box, hints, and every accepted constraint.

    A constraint is ``(formula, value)``: the point must give ``formula`` that exact value
    (a fact or a True guard: True; a False guard: False; ``evaluate_expr`` of an integer
    expression: the integer).
    """

    def __init__(self, query: EnvQuery) -> None:
        self.box = query.box
        self.hints = query.hints
        self.constraints: list[tuple[Formula, object]] = []

    def _meets(self, point: dict[str, int], extra: Sequence[tuple[Formula, object]] = ()) -> bool:
        for f, expected in (*self.constraints, *extra):
            got = value_at(f, point)
            if type(got) is not type(expected) or got != expected:
                return False
        return True

    def points(self, extra: Sequence[tuple[Formula, object]] = ()) -> list[dict[str, int]]:
        return [p for p in self.box.points() if self._meets(p, extra)]

    def at_hints(self, extra: Sequence[tuple[Formula, object]] = ()) -> list[dict[str, int]]:
        """Points with every backed symbol at its hint that meet the constraints."""
        return [p for p in self.points(extra) if all(p[n] == v for n, v in self.hints.items())]

    def backed_only(self, f: Formula) -> bool:
        return f.symbols <= self.hints.keys()


@dataclass
class _EnvRun:
    env: shapecore.ShapeEnv
    model: _Model
    alive: bool = True  # False once the env and the model disagree: later answers would only repeat it
    rejected: bool = False  # a call raised ConstraintError ("nothing was recorded"): later answers may show it was

    def mark(self, outcomes: list[Outcome]) -> list[Outcome]:
        """``outcomes``, their wrong answers labelled if they follow a ConstraintError."""
        if self.rejected:
            for o in outcomes:
                if o.wrong:
                    o.problem += " (after a ConstraintError)"
        return outcomes


def check_env(query: EnvQuery, *, timeout_ms: int) -> list[Outcome]:
    """Run the query's calls on a fresh env; one outcome per call (and per probe after a rejected fact)."""
    env = shapecore.ShapeEnv(timeout_ms=timeout_ms)
    created = []
    for symbol in query.symbols:
        if symbol.hint is None:
            created.append(str(env.create_unbacked_symbol(min=symbol.lo, max=symbol.hi)))
        else:
            created.append(str(env.create_symbol(symbol.hint, min=symbol.lo, max=symbol.hi)))
    if created != [s.name for s in query.symbols]:
        raise AssertionError(f"the env named its symbols {created}, expected {[s.name for s in query.symbols]}")
    run = _EnvRun(env, _Model(query))
    outcomes: list[Outcome] = []
    for index, (verb, text) in enumerate(query.steps):
        if not run.alive:
            break
        reproduction = query.reproduction(timeout_ms, index)
        if verb == "round_trip":  # from here on the env read back from JSON answers
            outcome, restored = _round_trip(run, timeout_ms, reproduction)
            outcomes += run.mark([outcome])
            run.env = restored if restored is not None else run.env
            continue
        if verb in _TELLING:
            told = _tell(run, verb, text, reproduction)
        else:
            told = {"evaluate_expr": _evaluate, "statically_known_true": _known}[verb](run, text, reproduction)
        outcomes += run.mark(told + _check_guards(run, reproduction))
    return outcomes


def _env_outcome(run: _EnvRun, verb: str, status: str, seconds: float, reproduction: str) -> Outcome:
    return Outcome(f"env.{verb}", status, seconds, reproduction=reproduction)


def _refusal(error: BaseException) -> bool:
    return isinstance(error, (shapecore.ShapecoreError, ZeroDivisionError))


def _fair_env_refusal(error: BaseException, f: Formula, model: _Model) -> bool:
    """Raising is fair for text that Python cannot evaluate at the hints (or that divides by a zero)."""
    if not _refusal(error):
        return False
    return zero_divisor(f.text) is not None or all(value_at(f, p) is ZeroDivisionError for p in model.at_hints())


def _evaluate(run: _EnvRun, text: str, reproduction: str) -> list[Outcome]:
    """``evaluate_expr``: Python's value at the hints (at every value of the unbacked symbols
    the facts allow there), and with no guard recorded, the value wherever the facts allow."""
    model, f = run.model, formula(text)
    guards_before = len(run.env.guards)
    result, error, seconds = _timed(lambda: run.env.evaluate_expr(text))
    outcome = _env_outcome(run, "evaluate_expr", "raised" if error else repr(result), seconds, reproduction)
    if isinstance(error, shapecore.ConstraintError):
        run.rejected = True
    if isinstance(error, shapecore.DataDependentError):
        outcome.status = "unknown"
        return [outcome]
    if error is not None:
        if _fair_env_refusal(error, f, model):
            outcome.status = "refused"
            return [outcome]
        return [_exception_outcome("env.evaluate_expr", error, seconds, reproduction)]
    disagreement = _first_disagreement(f, result, model.at_hints())
    if disagreement is not None:
        point, python = disagreement
        outcome.problem = ("wrong: evaluate_expr returned a value where Python raises at the hints" if python is ZeroDivisionError
                           else "wrong: evaluate_expr contradicts Python at the hints")
        outcome.detail = f"{text} at {point} is {python!r}, env said {result!r}"
        run.alive = False
        return [outcome]
    if len(run.env.guards) == guards_before:  # decided statically: so it is wherever the facts allow
        _static_check(outcome, run, f, result, "evaluate_expr answered without a guard")
    model.constraints.append((f, result))
    return [outcome]


def _static_check(outcome: Outcome, run: _EnvRun, f: Formula, value: object, what: str) -> None:
    """``value`` must be ``f``'s value at every point the facts allow."""
    problem = _first_disagreement(f, value, run.model.points())
    if problem is not None:
        point, got = problem
        how = "is undefined (zero divisor)" if got is ZeroDivisionError else "has another value"
        outcome.problem = f"wrong: {what}, but the claim {how} at a point the facts allow"
        outcome.detail = f"{f.text} is {value!r} per the env, {got!r} at {point}"
        run.alive = False


def _first_disagreement(f: Formula, value: object, points) -> tuple[dict[str, int], object] | None:
    """A point where ``f`` is not ``value``: one where it is defined if any, else one where it raises."""
    undefined = None
    for point in points:
        got = value_at(f, point)
        if got is ZeroDivisionError:
            undefined = undefined or (point, got)
        elif type(got) is not type(value) or got != value:
            return point, got
    return undefined


def _known(run: _EnvRun, text: str, reproduction: str) -> list[Outcome]:
    f = formula(text)
    result, error, seconds = _timed(lambda: run.env.statically_known_true(text))
    if error is not None and isinstance(error, shapecore.ShapecoreError) and zero_divisor(text) is not None:
        return [_env_outcome(run, "statically_known_true", "refused", seconds, reproduction)]
    if error is not None:
        return [_exception_outcome("env.statically_known_true", error, seconds, reproduction)]
    outcome = _env_outcome(run, "statically_known_true", repr(result), seconds, reproduction)
    if result is True:
        _static_check(outcome, run, f, True, "statically_known_true")
    return [outcome]


_UNDECIDED = "could not show"  # how the env words a refusal for want of time (ShapeEnv._find_witness)


def _tell(run: _EnvRun, verb: str, text: str, reproduction: str) -> list[Outcome]:
    """``add_fact`` or ``defer_runtime_assert``: accepted exactly when some point of the box
    with the hints meets everything told and ``text``; an assert found implied (not recorded)
    must hold wherever the facts allow."""
    model, f = run.model, formula(text)
    asserts_before = len(run.env.runtime_asserts)
    _, error, seconds = _timed(lambda: getattr(run.env, verb)(text))
    outcome = _env_outcome(run, verb, "rejected" if error else "accepted", seconds, reproduction)
    if error is not None and not isinstance(error, shapecore.ConstraintError):
        if _fair_env_refusal(error, f, model):
            outcome.status = "refused"
            return [outcome]
        return [_exception_outcome(f"env.{verb}", error, seconds, reproduction)]
    allowed = model.at_hints([(f, True)])  # the points with the hints that meet it all
    if error is None:
        if model.backed_only(f) and not holds(f, model.hints):
            outcome.problem = f"wrong: {verb} accepted a fact that does not hold at the hints"
            outcome.detail = f"{text} at {model.hints}"
            run.alive = False
        elif not allowed:
            outcome.problem = f"wrong: {verb} accepted a fact that no value of the unbacked symbols allows at the hints"
            unbacked = [i for i in model.box.intervals if i[0] not in model.hints]
            outcome.detail = f"{text} at the hints {model.hints}, the unbacked symbols in {unbacked}"
            run.alive = False
        else:
            if verb == "defer_runtime_assert" and len(run.env.runtime_asserts) == asserts_before:
                _static_check(outcome, run, f, True, "defer_runtime_assert found the assert implied")
            model.constraints.append((f, True))
        return [outcome]
    if allowed and _UNDECIDED in str(error):
        outcome.status = "unknown"  # an honest refusal: the env could not decide in time
        return [outcome]
    if allowed:
        outcome.problem = f"wrong: {verb} rejected a fact that holds at the hints"
        outcome.detail = f"{text} holds at {allowed[0]}: {error}"
        return [outcome]
    # Rejected: nothing may have been recorded. A claim false at the hints must stay unproved.
    outcomes = [outcome]
    run.rejected = True
    for name, hint in model.hints.items():
        probe = f"Eq({name}, {hint + 1})"
        outcomes += _known(run, probe, f"{reproduction}\nenv.statically_known_true({probe!r})")
    return outcomes


def _round_trip(run: _EnvRun, timeout_ms: int, reproduction: str) -> tuple[Outcome, shapecore.ShapeEnv | None]:
    def trip():
        document = run.env.to_json()
        return document, shapecore.ShapeEnv.from_json(document, timeout_ms=timeout_ms)

    result, error, seconds = _timed(trip)
    if error is not None:
        return _exception_outcome("env.round_trip", error, seconds, reproduction), None
    document, restored = result
    outcome = _env_outcome(run, "round_trip", "ok", seconds, reproduction)
    before, after = json.loads(document), json.loads(restored.to_json())
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        outcome.problem = "wrong: from_json(to_json()) changed the document"
        outcome.detail = f"fields {changed}: {[before.get(k) for k in changed]} became {[after.get(k) for k in changed]}"
    return outcome, restored


def _check_guards(run: _EnvRun, reproduction: str) -> list[Outcome]:
    """Every recorded guard over backed symbols holds at the hints."""
    if not run.alive:
        return []
    hints = run.model.hints
    for guard in run.env.guards:
        text = str(guard)
        try:
            g = formula(text)
        except OracleError as exc:
            return [Outcome("env.guards", "unreadable", 0.0, "wrong: a guard the oracle cannot read", f"{text}: {exc}",
                            reproduction + "\nenv.guards")]
        if g.symbols <= hints.keys() and not holds(g, hints):
            run.alive = False
            return [Outcome("env.guards", "false at hints", 0.0, "wrong: env recorded a guard false at its hints",
                            f"{text} at {hints}: {value_at(g, hints)!r}", reproduction + "\nenv.guards")]
    return []


# -- any query --------------------------------------------------------------------------------

KINDS = ("prove", "env", "unbacked_env", "simplify", "simplify_divisions")


def generate(kind: str, choose: Chooser) -> ProveQuery | EnvQuery | SimplifyQuery:
    makers = {"prove": prove_query, "env": env_query, "unbacked_env": unbacked_env_query, "simplify": simplify_query,
              "simplify_divisions": division_simplify_query}
    return makers[kind](choose)


def run(query: ProveQuery | EnvQuery | SimplifyQuery, *, timeout_ms: int) -> list[Outcome]:
    """Ask shapecore ``query`` and check every answer against the oracle."""
    if isinstance(query, ProveQuery):
        return [check_prove(query, timeout_ms=timeout_ms)]
    if isinstance(query, SimplifyQuery):
        return [check_simplify(query, timeout_ms=timeout_ms)]
    return check_env(query, timeout_ms=timeout_ms)
