"""Benchmark: shapecore's reasoner against PyTorch's ShapeEnv on one query set, same run.

Each query is a claim with facts and ranges. shapecore answers with ``Reasoner.prove``;
PyTorch with ``statically_known_true`` on a ShapeEnv whose symbols carry the same ranges and
whose facts are installed as guards (``evaluate_expr`` at hints that satisfy them) or, for
unbacked symbols, as runtime asserts. Both engines get the same hints (torch's ShapeEnv needs
them; shapecore's reasoner uses them as torch does, to dismiss a claim false there at once). Ground truth is brute force over a box inside the
ranges: a ``proved`` (torch: True) is wrong if some point satisfying the facts falsifies the
claim; a ``refuted`` is wrong if its counterexample does not check.

Per engine: decided, wrong, and median / p95 over the queries of the microseconds of the
first query (fresh scope, cold caches of that query; per query the median of ``--trials``
fresh scopes) and of a repeated query (the best trial's mean over ``--repeat`` calls).
``shapecore`` and ``torch`` get the claim as an expression, their scope built beforehand;
``shapecore.prove`` is the module function on the query's text as a user writes it
(``prove(claim, facts=[...], ranges={...})``), its first call reading every text: without
sympy where :mod:`shapecore.quick_proving` decides, else building the scope and parsing (the
parser's and quick_proving's caches of texts read are cleared before it).

The queries: :data:`REQUIRED`, :data:`CLAIMS` (45 claims in the style compilers ask:
divisibility, chains of inequalities, min/max, floor division, with the ``>= 2`` ranges torch
gives sizes) and :func:`sharding_queries`.

    python bench/reasoner.py [--repeat N] [--trials N] [--clock wall|cpu] [--kinds KIND,...] [--slowest N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import statistics
import sys
import time
from dataclasses import dataclass

import sympy

import shapecore
from shapecore import holds, parse, quick_proving
from shapecore.parsing import named_symbols

BOX = range(-6, 41)
"""The values brute force tries per symbol, fewer with more symbols (about 50,000 points at most)."""


@dataclass(frozen=True)
class Query:
    claim: str
    facts: tuple[str, ...] = ()
    ranges: tuple[tuple[str, int | None, int | None], ...] = ()
    kind: str = "required"


REQUIRED = [
    Query("Eq(Mod(s0*s1, 8), 0)", ("Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)")),
    Query("Eq(Mod(s0*s1, 16), 0)", ("Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)")),
    Query("Eq(8*FloorDiv(s0, 8), s0)", ("Eq(Mod(s0, 8), 0)",)),
    Query("Eq(Mod(8*s0 + 4, 8), 4)"),
    Query("Eq(Mod(Mod(s0, 16), 8), Mod(s0, 8))"),
    Query("s0 >= 8", ("Eq(Mod(s0, 8), 0)", "s0 >= 1")),
    Query("Ne(36*u0, 36)", ("u0*u1 > u1", "u1 >= 1")),
    Query("Eq(FloorDiv(-s0, 8), -FloorDiv(s0 + 7, 8))"),
    Query("n - FloorDiv(n, 3) >= 2", (), (("n", 3, 10000),)),
    Query("Eq(Mod(u0, 4), 0)", ("Eq(Mod(u0, 8), 0)",)),
]


def _sizes(*names: str) -> tuple[tuple[str, int | None, int | None], ...]:
    """torch's ranges for backed sizes: each at least 2."""
    return tuple((name, 2, None) for name in names)


S01, S012, S0123 = _sizes("s0", "s1"), _sizes("s0", "s1", "s2"), _sizes("s0", "s1", "s2", "s3")
CHAIN = ("s0 < s1", "s1 < s2")
CLAIMS = [
    # divisibility
    Query("Eq(Mod(s0*s1, 8), 0)", ("Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 2), 0)"), S01, "divides"),
    Query("Eq(Mod(s0, 4), 0)", ("Eq(Mod(s0, 8), 0)",), S01[:1], "divides"),
    Query("Eq(Mod(s0, 16), 0)", ("Eq(Mod(s0, 8), 0)",), S01[:1], "divides"),
    Query("Eq(Mod(s1, 4), 0)", ("Eq(s1, 4*s0)",), S01, "divides"),
    Query("Eq(Mod(s0 + s1, 4), 0)", ("Eq(Mod(s0, 4), 0)", "Eq(Mod(s1, 4), 0)"), S01, "divides"),
    Query("Ne(Mod(2*s0 + 1, 2), 0)", (), S01[:1], "divides"),
    Query("Eq(Mod(s0*s1, 6), 0)", ("Eq(Mod(s0, 2), 0)", "Eq(Mod(s1, 3), 0)"), S01, "divides"),
    Query("Eq(Mod(12*s0, 8), 0)", ("Eq(Mod(s0, 2), 0)",), S01[:1], "divides"),
    Query("Eq(Mod(s0*s1*s2, 8), 0)", ("Eq(Mod(s0, 2), 0)", "Eq(Mod(s1, 2), 0)", "Eq(Mod(s2, 2), 0)"), S012,
          "divides"),
    Query("Eq(Mod(s0, 3), 0)", ("Eq(Mod(s0, 6), 0)",), S01[:1], "divides"),
    Query("Eq(Mod(s0*s1, 4), 0)", ("Eq(Mod(s0, 2), 0)",), S01, "divides"),
    Query("Eq(Mod(64*s0, 32), 0)", (), S01[:1], "divides"),
    # chains of inequalities
    Query("s0 < s2", CHAIN, S012, "chain"),
    Query("s0 <= s2", ("s0 <= s1", "s1 <= s2"), S012, "chain"),
    Query("s0 + 2 <= s2", CHAIN, S012, "chain"),
    Query("s0 < s3", ("s0 < s1", "s1 <= s2", "s2 < s3"), S0123, "chain"),
    Query("s0 < s2 + 5", ("s0 <= s1 + 3", "s1 <= s2 + 1"), S012, "chain"),
    Query("s0 >= s2", CHAIN, S012, "chain"),
    Query("Ne(s0, s2)", CHAIN, S012, "chain"),
    Query("s0 < s1 + s2", ("s0 < s1",), S012, "chain"),
    Query("s0 + s1 < s2 + s3", ("s0 < s2", "s1 < s3"), S0123, "chain"),
    Query("s0 <= 2*s1", ("s0 <= s1",), S01, "chain"),
    Query("s0 + 1 < s2", CHAIN, S012, "chain"),
    Query("s0 + 3 <= s2", CHAIN, S012, "chain"),
    Query("Eq(s0, s2)", ("s0 <= s1", "s1 <= s2", "s2 <= s0"), S012, "chain"),
    # min / max
    Query("Max(s0, s1) >= s0", (), S01, "min/max"),
    Query("Min(s0, s1) <= s1", (), S01, "min/max"),
    Query("Max(s0, s1) <= s2", ("s0 <= s2", "s1 <= s2"), S012, "min/max"),
    Query("Min(s0, s1) < s2", ("s0 < s2",), S012, "min/max"),
    Query("Eq(Max(s0, s1), s0)", ("s1 <= s0",), S01, "min/max"),
    Query("Eq(Min(s0, s1), s1)", ("s1 < s0",), S01, "min/max"),
    Query("Max(s0 + 1, s1) > s0", (), S01, "min/max"),
    Query("Min(s0, s1) >= 2", (), S01, "min/max"),
    Query("Eq(Max(s0, 1), s0)", (), S01[:1], "min/max"),
    Query("Max(s0, s1) < s2", ("s0 < s2",), S012, "min/max"),
    # floor division
    Query("FloorDiv(s0, 2) <= s0", (), S01[:1], "floordiv"),
    Query("2*FloorDiv(s0, 2) <= s0", (), S01[:1], "floordiv"),
    Query("FloorDiv(s0, 8) >= 1", ("s0 >= 8",), S01[:1], "floordiv"),
    Query("FloorDiv(s0 + 7, 8) >= 1", (), S01[:1], "floordiv"),
    Query("Eq(4*FloorDiv(s0, 4), s0)", ("Eq(Mod(s0, 4), 0)",), S01[:1], "floordiv"),
    Query("FloorDiv(s0, 4) < s1", ("s0 < 4*s1",), S01, "floordiv"),
    Query("FloorDiv(s0, s1) <= s0", (), S01, "floordiv"),
    Query("s0 - 4*FloorDiv(s0, 4) < 4", (), S01[:1], "floordiv"),
    Query("FloorDiv(s0, 4) <= FloorDiv(s1, 4)", ("s0 <= s1",), S01, "floordiv"),
    Query("Eq(FloorDiv(s0, 2), FloorDiv(s1, 2))", ("Eq(s0, s1)",), S01, "floordiv"),
]


def sharding_queries() -> list[Query]:
    """Divisibility of batch×sequence products and sums by mesh sizes, identities, ranges."""
    queries = []
    size = (("b", 1, 4096), ("s", 1, 8192))
    for bm, sm in itertools.product((1, 2, 4, 8), (1, 2, 4)):
        facts = tuple(f"Eq(Mod({v}, {m}), 0)" for v, m in (("b", bm), ("s", sm)) if m > 1)
        for mesh in (2, 4, 8, 16, 32):
            queries.append(Query(f"Eq(Mod(b*s, {mesh}), 0)", facts, size, "divisibility"))
            queries.append(Query(f"Eq(Mod(b*s + 8*b, {mesh}), 0)", facts, size, "divisibility"))
        queries.append(Query(f"Eq(Mod(b, {bm * 2}), 0)", facts, size, "divisibility"))
    for m in (2, 4, 8, 16):
        x = (("x", 2, 1 << 20),)
        queries += [
            Query(f"Eq({m}*FloorDiv(x, {m}), x)", (f"Eq(Mod(x, {m}), 0)",), x, "identity"),
            Query(f"Eq(FloorDiv(x + {m}, {m}), FloorDiv(x, {m}) + 1)", (), x, "identity"),
            Query(f"Eq(FloorDiv(FloorDiv(x, 2), {m}), FloorDiv(x, {2 * m}))", (), x, "identity"),
            Query(f"Eq(Mod(x + {m}, {m}), Mod(x, {m}))", (), x, "identity"),
            Query(f"Eq(CleanDiv(x, {m})*{m}, x)", (f"Eq(Mod(x, {m}), 0)",), x, "identity"),
            Query(f"Eq(Mod(x*x, {m}), 0)", (f"Eq(Mod(x, {m}), 0)",), x, "identity"),
        ]
    for lo in (2, 3, 8, 64):
        r = (("x", lo, 4096), ("y", lo, 4096))
        queries += [
            Query(f"x >= {lo}", (), r, "range"),
            Query(f"x*y >= {lo * lo}", (), r, "range"),
            Query(f"x + y > {2 * lo}", (), r, "range"),
            Query(f"Max(x, y) >= {lo}", (), r, "range"),
            Query(f"x - FloorDiv(x, 2) >= {lo // 2}", (), r, "range"),
            Query(f"FloorDiv(x, {lo}) >= 1", (), r, "range"),
            Query(f"Ne(x, {lo - 1})", (), r, "range"),
            Query(f"x <= {lo}", (), r, "range"),
        ]
    return queries


# -- ground truth ---------------------------------------------------------------------------------


def _scope(query: Query) -> tuple[sympy.Basic, list[sympy.Basic]]:
    claim = parse(query.claim)
    facts = [parse(f) for f in query.facts]
    for name, lo, hi in query.ranges:
        symbol = shapecore.int_symbol(name)
        if lo is not None:
            facts.append(sympy.Ge(symbol, lo))
        if hi is not None:
            facts.append(sympy.Le(symbol, hi))
    return claim, facts


def _box(symbols: int) -> range:
    return BOX if symbols <= 2 else range(-3, 22) if symbols == 3 else range(-2, 13)


def brute_force_counterexample(query: Query) -> dict[str, int] | None:
    claim, facts = _scope(query)
    names = _names(claim, facts)
    for point in itertools.product(_box(len(names)), repeat=len(names)):
        values = dict(zip(names, point))
        if all(holds(f, values) for f in facts) and not holds(claim, values):
            return values
    return None


# -- engines --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _timing():
    """No garbage collection inside timed sections (as timeit does), for either engine."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass
class Answer:
    decided: bool
    wrong: bool
    first_us: float
    repeat_us: float


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


@dataclass(frozen=True)
class Timing:
    """How to time: ``trials`` fresh scopes per query (first: their median), ``repeat`` calls per
    trial (repeated: the best trial's mean, as timeit does), on the ``clock`` named in :data:`CLOCKS`."""

    trials: int
    repeat: int
    clock: str


def _measure(fresh, timing: Timing):
    """``(answer of the first call, first µs, repeated µs)``; ``fresh(trial)`` is a call on a new scope."""
    clock = CLOCKS[timing.clock]
    firsts, agains, answer = [], [], None
    for trial in range(timing.trials):
        ask = fresh(trial)
        with _timing():
            start = clock()
            answer = ask()
            firsts.append(clock() - start)
            start = clock()
            for _ in range(timing.repeat):
                ask()
            agains.append((clock() - start) / timing.repeat)
    return answer, statistics.median(firsts) * 1e6, min(agains) * 1e6


def run_shapecore(query: Query, violation: dict[str, int] | None, timing: Timing) -> Answer:
    claim, facts = _scope(query)

    def fresh(trial: int):
        reasoner = shapecore.Reasoner(timeout_ms=1000)
        reasoner.hints = _hints(_names(claim, facts), facts)  # the example values torch's env holds too
        for fact in facts:
            reasoner.add_fact(fact)
        return lambda: reasoner.prove(claim)

    proof, first, again = _measure(fresh, timing)
    return Answer(proof.status != "unknown", _wrong(proof, query, violation), first, again)


def _wrong(proof: shapecore.Proof, query: Query, violation: dict[str, int] | None) -> bool:
    """A proof with a violation in the box, or a counterexample that does not check."""
    if proof.status == "proved":
        return violation is not None
    if proof.status == "refuted":
        claim, facts = _scope(query)
        values = proof.counterexample or {}
        return not (all(holds(f, values) for f in facts) and not holds(claim, values))
    return False


def run_prove(query: Query, violation: dict[str, int] | None, timing: Timing) -> Answer:
    """``shapecore.prove`` on the query's text. Each trial's first call parses it all (the parser's
    caches cleared) in a scope of its own (its ``timeout_ms``, 1000 + the trial, is new)."""
    facts = list(query.facts)
    ranges = {name: (lo, hi) for name, lo, hi in query.ranges} or None

    def fresh(trial: int):
        parse.cache_clear()
        named_symbols.cache_clear()
        quick_proving.clear_cache()
        return lambda: shapecore.prove(query.claim, facts=facts, ranges=ranges, timeout_ms=1000 + trial)

    proof, first, again = _measure(fresh, timing)
    return Answer(proof.status != "unknown", _wrong(proof, query, violation), first, again)


def _torch_setup(query: Query):
    """A torch ShapeEnv with the query's symbols, ranges and facts; returns it and the claim."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from shapecore.torch import to_torch
    from shapecore.torch.private import LocalSource, int_oo

    claim, facts = _scope(query)
    names = _names(claim, facts)
    hints = _hints(names, facts)
    env = ShapeEnv(duck_shape=False)  # duck sizing would unify symbols whose hints happen to match
    symbols = {}
    for name in names:
        if name.startswith("u"):
            symbols[name] = env.create_unbacked_symint().node.expr
        else:
            symbols[name] = env.create_symbol(hints[name], LocalSource(name), positive=None)
    for name, lo, hi in query.ranges:
        env.constrain_symbol_range(symbols[name], compiler_min=-int_oo if lo is None else lo,
                                   compiler_max=int_oo if hi is None else hi)
    rename = {shapecore.int_symbol(n): shapecore.int_symbol(str(s)) for n, s in symbols.items()}
    for fact in facts:
        torch_fact = to_torch(fact.xreplace(rename), env)
        if any(n.startswith("u") for n in map(str, fact.free_symbols)):
            env.guard_or_defer_runtime_assert(torch_fact, "bench fact")
        else:
            env.evaluate_expr(torch_fact)
    return env, to_torch(claim.xreplace(rename), env)


def _names(claim: sympy.Basic, facts: list[sympy.Basic]) -> list[str]:
    return sorted({s.name for s in claim.free_symbols.union(*(f.free_symbols for f in facts))})


def _hints(names: list[str], facts: list[sympy.Basic]) -> dict[str, int]:
    """Example values for the backed symbols (not ``u*``) at which every fact on them holds."""
    backed = [n for n in names if not n.startswith("u")]
    relevant = [f for f in facts if all(s.name in backed for s in f.free_symbols)]
    for point in itertools.product(range(2, 130), repeat=len(backed)):
        values = dict(zip(backed, point))
        if all(holds(f, values) for f in relevant):
            return values
    raise RuntimeError(f"no hints satisfy {facts}")


def run_torch(query: Query, violation: dict[str, int] | None, timing: Timing) -> Answer:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    def fresh(trial: int):
        env, claim = _torch_setup(query)
        symbool = bool(claim) if isinstance(claim, sympy.logic.boolalg.BooleanAtom) else env.create_symboolnode(claim)
        return lambda: statically_known_true(symbool)

    known, first, again = _measure(fresh, timing)
    return Answer(bool(known), bool(known) and violation is not None, first, again)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="repeats per trial for the repeated-query time")
    parser.add_argument("--trials", type=int, default=5, help="fresh scopes per query and engine")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this thread's CPU time (steadier on a loaded machine)")
    parser.add_argument("--kinds", help="only the queries of these kinds (comma-separated), e.g. chain,min/max")
    parser.add_argument("--slowest", type=int, default=0, help="list the N slowest first queries of each engine")
    args = parser.parse_args(argv)
    queries = REQUIRED + CLAIMS + sharding_queries()
    if args.kinds:
        queries = [q for q in queries if q.kind in args.kinds.split(",")]
    print(f"{len(queries)} queries; brute force over {BOX.start}..{BOX.stop - 1} per symbol (fewer values for "
          "3 or more symbols)", file=sys.stderr)
    truths = [brute_force_counterexample(q) for q in queries]
    timing = Timing(args.trials, args.repeat, args.clock)
    engines = {"shapecore": run_shapecore, "shapecore.prove": run_prove, "torch": run_torch}
    results: dict[str, list[Answer]] = {engine: [] for engine in engines}
    for i, (query, violation) in enumerate(zip(queries, truths)):
        for engine, run in engines.items():
            results[engine].append(run(query, violation, timing))
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(queries)} queries", file=sys.stderr)
    print(f"{'engine':<16} {'decided':>8} {'wrong':>6} {'first med µs':>13} {'first p95 µs':>13} "
          f"{'repeat med µs':>14} {'repeat p95 µs':>14}")
    for engine, answers in results.items():
        first = [a.first_us for a in answers]
        repeat = [a.repeat_us for a in answers]
        print(f"{engine:<16} {sum(a.decided for a in answers):>8} {sum(a.wrong for a in answers):>6} "
              f"{statistics.median(first):>13.1f} {_percentile(first, 0.95):>13.1f} "
              f"{statistics.median(repeat):>14.2f} {_percentile(repeat, 0.95):>14.2f}")
    ours = results["shapecore"]
    torch_decided = [a.decided for a in results["torch"]]
    missed = [q.claim for q, t, o in zip(queries, torch_decided, ours) if t and not o.decided]
    extra = sum(o.decided and not t for t, o in zip(torch_decided, ours))
    ratio = statistics.median(a.first_us for a in ours) / statistics.median(a.first_us for a in results["torch"])
    print(f"queries torch decides that shapecore does not: {len(missed)} {missed[:5]}")
    print(f"queries shapecore decides that torch does not: {extra}")
    print(f"first-query median ratio shapecore/torch: {ratio:.2f}")
    by_kind: dict[str, list[list[float]]] = {}
    for q, o, t in zip(queries, ours, results["torch"]):
        rows = by_kind.setdefault(q.kind, [[], [], []])
        rows[0].append(o.decided)
        rows[1].append(t.decided)
        rows[2].append(o.first_us)
    for kind, (o, t, first) in by_kind.items():
        print(f"  {kind:<13} {len(o):>4} queries: shapecore decides {sum(o):>4}, torch {sum(t):>4}; "
              f"shapecore first med {statistics.median(first):.1f} µs, p95 {_percentile(first, 0.95):.1f} µs")
    for engine, answers in results.items():
        slowest = sorted(zip(answers, queries), key=lambda pair: -pair[0].first_us)[: args.slowest]
        for answer, query in slowest:
            print(f"  slow {engine}: {answer.first_us:9.1f} µs {query.claim} | {', '.join(query.facts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
