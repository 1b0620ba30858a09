"""Benchmark: shapecore's reasoner against PyTorch's ShapeEnv on one query set, same run.

Each query is a claim with facts and ranges. shapecore answers with ``Reasoner.prove``;
PyTorch with ``statically_known_true`` on a ShapeEnv whose symbols carry the same ranges and
whose facts are installed as guards (``evaluate_expr`` at hints that satisfy them) or, for
unbacked symbols, as runtime asserts. Both engines get the same hints (torch's ShapeEnv needs
them; shapecore's reasoner uses them as torch does, to dismiss a claim false there at once). Ground truth is brute force over a box inside the
ranges: a ``proved`` (torch: True) is wrong if some point satisfying the facts falsifies the
claim; a ``refuted`` is wrong if its counterexample does not check.

Per engine: decided, wrong, and median / p95 microseconds of the first query (fresh scope,
cold caches of that query) and of a repeated query.

    python bench/reasoner.py [--repeat N]
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
from shapecore import holds, parse

BOX = range(-6, 41)


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


def brute_force_counterexample(query: Query) -> dict[str, int] | None:
    claim, facts = _scope(query)
    names = _names(claim, facts)
    for point in itertools.product(BOX, repeat=len(names)):
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


def run_shapecore(query: Query, violation: dict[str, int] | None, repeat: int) -> Answer:
    claim, facts = _scope(query)
    reasoner = shapecore.Reasoner(timeout_ms=1000)
    reasoner.hints = _hints(_names(claim, facts), facts)  # the example values torch's env holds too
    for fact in facts:
        reasoner.add_fact(fact)
    with _timing():
        start = time.perf_counter()
        proof = reasoner.prove(claim)
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(repeat):
            reasoner.prove(claim)
        again = (time.perf_counter() - start) / repeat
    if proof.status == "proved":
        wrong = violation is not None
    elif proof.status == "refuted":
        values = proof.counterexample or {}
        wrong = not (all(holds(f, values) for f in facts) and not holds(claim, values))
    else:
        wrong = False
    return Answer(proof.status != "unknown", wrong, first * 1e6, again * 1e6)


def _torch_setup(query: Query):
    """A torch ShapeEnv with the query's symbols, ranges and facts; returns it and the claim."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from shapecore.torch import to_torch
    from shapecore.torch.private import LocalSource

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
        env.constrain_symbol_range(symbols[name], compiler_min=lo, compiler_max=hi)
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


def run_torch(query: Query, violation: dict[str, int] | None, repeat: int) -> Answer:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    env, claim = _torch_setup(query)
    symbool = bool(claim) if isinstance(claim, sympy.logic.boolalg.BooleanAtom) else env.create_symboolnode(claim)
    with _timing():
        start = time.perf_counter()
        known = statically_known_true(symbool)
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(repeat):
            statically_known_true(symbool)
        again = (time.perf_counter() - start) / repeat
    return Answer(bool(known), bool(known) and violation is not None, first * 1e6, again * 1e6)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="repeats per query for the repeated-query time")
    args = parser.parse_args(argv)
    queries = REQUIRED + sharding_queries()
    print(f"{len(queries)} queries; brute force over {BOX.start}..{BOX.stop - 1} per symbol", file=sys.stderr)
    truths = [brute_force_counterexample(q) for q in queries]
    results: dict[str, list[Answer]] = {"shapecore": [], "torch": []}
    for i, (query, violation) in enumerate(zip(queries, truths)):
        results["shapecore"].append(run_shapecore(query, violation, args.repeat))
        results["torch"].append(run_torch(query, violation, args.repeat))
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(queries)} queries", file=sys.stderr)
    torch_decided = [a.decided for a in results["torch"]]
    print(f"{'engine':<10} {'decided':>8} {'wrong':>6} {'first med µs':>13} {'first p95 µs':>13} "
          f"{'repeat med µs':>14} {'repeat p95 µs':>14}")
    for engine, answers in results.items():
        first = [a.first_us for a in answers]
        repeat = [a.repeat_us for a in answers]
        print(f"{engine:<10} {sum(a.decided for a in answers):>8} {sum(a.wrong for a in answers):>6} "
              f"{statistics.median(first):>13.1f} {_percentile(first, 0.95):>13.1f} "
              f"{statistics.median(repeat):>14.2f} {_percentile(repeat, 0.95):>14.2f}")
    ours = results["shapecore"]
    missed = [q.claim for q, t, o in zip(queries, torch_decided, ours) if t and not o.decided]
    extra = sum(o.decided and not t for t, o in zip(torch_decided, ours))
    ratio = statistics.median(a.first_us for a in ours) / statistics.median(a.first_us for a in results["torch"])
    print(f"queries torch decides that shapecore does not: {len(missed)} {missed[:5]}")
    print(f"queries shapecore decides that torch does not: {extra}")
    print(f"first-query median ratio shapecore/torch: {ratio:.2f}")
    by_kind: dict[str, list[int]] = {}
    for q, o, t in zip(queries, ours, torch_decided):
        counts = by_kind.setdefault(q.kind, [0, 0, 0])
        counts[0] += 1
        counts[1] += o.decided
        counts[2] += t
    for kind, (n, o, t) in by_kind.items():
        print(f"  {kind:<13} {n:>4} queries: shapecore decides {o:>4}, torch {t:>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
