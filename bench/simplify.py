"""Benchmark: guard simplification against what torch keeps, at scale, and compiled guard checks.

Run from the repository root (about two minutes; ``--quick`` for smaller cases, ``--cli`` for
part 4 alone)::

    python bench/simplify.py

Every figure is compared with a peer measured in the same run:

1. **Corpus** (``tests/data/corpus``, 26 guard sets captured from torch 2.13). Like is compared
   with like, symbolic guards only:

   * *torch keeps* the lines of ``produce_guards.final`` that constrain symbols: ``relational``
     and ``other`` lines, one ``range`` line per bounded symbol, and the ``src == expr``
     lines that state a symbolic replacement (``L['z'].size()[0] == 2*L['x'].size()[0]``).
     Not counted: the other ``source_equality`` lines (strides, storage offsets, static sizes,
     duck-sizing ``x == y`` of one symbol, float constants), which are tensor-metadata checks
     no symbolic simplifier sees. Where torch produced no ``final`` (an export error), its
     nontrivial guards plus those range and replacement lines are counted instead.
   * *shapecore keeps* ``simplify(...).guards`` for the same information: the ShapeEnv's raw
     guards (``guards[]``, including those torch found trivial), its replacements as
     ``Eq(symbol, expr)`` and each backed symbol's final range as a range guard, read by
     ``shapecore.guard_input``; constant replacements (static specializations) are excluded
     from the count as on torch's side. Deferred runtime asserts are in-graph checks, not
     entry guards, on both sides.
   * Each result is checked equivalent to its input by z3, guard by guard (each side implies
     every guard of the other).
   * The table shows ``relational + range`` on each side. Range lines are one per bounded
     symbol on both sides (shapecore's are often tighter, as they absorb guards), so the
     reduction is given over all lines and over the lines beyond them.

2. **Scale**: a generated set of 4,000 guards over 50 symbols (torch-like shapes, true at
   example values, ~1/3 distinct), each symbol declared ``>= 2``. The peer is the naive
   method, one z3 query per guard against all the others on one incremental solver, run on a
   smaller generated set (it does not finish on the large one in minutes); shapecore runs
   on both. Results are checked by sampling points around the example values.

3. **compile_guards**: per-call cost of the generated function against evaluating the guards
   one by one with ``shapecore.holds`` and against ``ShapeEnv.check_guards``, at values where
   every guard holds (the common case: all of them are evaluated).

4. **The command line on a 10 MB guard file**: ``shapecore explain`` and ``shapecore simplify``
   (default options) on a file shaped like a long trace's guard log (:func:`guard_file`: about
   940,000 guards, 1,781 distinct, over 200 symbols), each in a fresh process: wall seconds,
   CPU seconds and peak RSS. The peer, in the same run, is the same command on the file of the
   distinct guards, each once: what the size of the file costs beyond its content.
   ``--guard-file PATH`` keeps the file (and the peer's, ``PATH.distinct``) for other runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

import sympy
import z3

from shapecore import FloorDiv, Max, Mod, ShapeEnv, compile_guards, holds, int_symbol, simplify
from shapecore.budget import Budget
from shapecore.guard_input import read_guard_set
from shapecore.z3backend import Translator

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "tests", "data", "corpus")


# -- corpus ---------------------------------------------------------------------------------------


def _is_static(guard: sympy.Basic) -> bool:
    """``Eq(s, constant)``: a specialized symbol (torch prints it as a static size)."""
    return isinstance(guard, sympy.Eq) and any(a.is_Symbol for a in guard.args) and any(a.is_Number for a in guard.args)


def _is_range(guard: sympy.Basic) -> bool:
    """A bound (or two) on one symbol by constants: torch's one range line per symbol."""
    parts = sympy.And.make_args(guard)
    return all(
        p.is_Relational and not isinstance(p, (sympy.Eq, sympy.Ne)) and len(p.free_symbols) == 1
        and any(a.is_Symbol for a in p.args) and any(a.is_Number for a in p.args)
        for p in parts
    )


def torch_kept(case: dict) -> tuple[int, int]:
    """``(relational lines, range lines)`` torch keeps, per the protocol in the docstring."""
    backed = {s["name"] for s in case["symbols"] if s["kind"] == "backed"}
    symbolic = [r for r in case["replacements"] if r["symbol"] in backed and not sympy.sympify(r["str"]).is_Number]
    final = case["produce_guards"]["final"]
    if final and not any(line.startswith("<error") for line in final):
        kinds = case["counts"]["produce_guards_final_kinds"]
        return kinds["relational"] + kinds["other"] + len(symbolic), kinds["range"]
    nontrivial = {g["str"] if isinstance(g, dict) else g for g in case["nontrivial_guards"]}
    replaced = {r["symbol"] for r in case["replacements"]}
    return len(nontrivial) + len(symbolic), len(backed - replaced)


def z3_equivalent(inputs: list[sympy.Basic], outputs: list[sympy.Basic], rlimit: int = 50_000_000) -> str:
    """``yes`` when z3 shows each side implies every guard of the other, else z3's answer."""
    translator = Translator(z3.Context())
    for premises, conclusions in ((inputs, outputs), (outputs, inputs)):
        for guard in conclusions:
            if guard in premises:
                continue
            solver = z3.Solver(ctx=translator.ctx)
            solver.add(*(translator.holds(g) for g in premises), z3.Not(translator.holds(guard)), *translator.axioms)
            answer = Budget(60_000, units=rlimit).check(solver)  # and a backstop: rlimit alone can hang
            if answer != z3.unsat:
                return str(answer)
    return "yes"


def bench_corpus() -> None:
    print("1. corpus: symbolic guards torch keeps vs shapecore keeps (relational + range lines)")
    print(f"   {'case':40s} {'torch':>8s} {'shapecore':>10s} {'time':>9s}  equivalent")
    totals = [0, 0, 0, 0]
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.json"))):
        with open(path) as handle:
            text = handle.read()
        case = json.loads(text)
        t_rel, t_range = torch_kept(case)
        guards = [g.expr for g in read_guard_set(text, path).guards if g.kind != "runtime_assert"]
        start = time.perf_counter()
        result = simplify(guards)
        elapsed = time.perf_counter() - start
        kept = [g for g in result.guards if not _is_static(g)]
        s_range = sum(map(_is_range, kept))
        s_rel = len(kept) - s_range
        for i, n in enumerate((t_rel, t_range, s_rel, s_range)):
            totals[i] += n
        verdict = z3_equivalent(guards, list(result.guards))
        print(f"   {case['case']:40s} {t_rel:4d}+{t_range:<3d} {s_rel:6d}+{s_range:<3d} {elapsed * 1000:7.1f}ms  {verdict}")
    t_rel, t_range, s_rel, s_range = totals
    print(f"   {'total':40s} {t_rel:4d}+{t_range:<3d} {s_rel:6d}+{s_range:<3d}")
    print(f"   reduction, all symbolic lines: {t_rel + t_range} -> {s_rel + s_range} "
          f"({100 * (1 - (s_rel + s_range) / (t_rel + t_range)):.0f}% fewer)")
    print(f"   reduction, lines beyond one range line per symbol: {t_rel} -> {s_rel} ({100 * (1 - s_rel / t_rel):.0f}% fewer)")


# -- scale ----------------------------------------------------------------------------------------


def generated_guards(n_symbols: int, n_guards: int, seed: int = 0) -> tuple[list[sympy.Basic], dict[str, int]]:
    """Torch-like guards over ``s0..s{n-1}`` that hold at the returned example values.

    Symbols come in groups of five (one tensor's dims); most guards are about one symbol
    (bounds, exclusions, divisibility, floor divisions), the rest relate two symbols of a group
    (products, orderings, divisibility of products), a few two symbols anywhere; every third
    group has a derived dim (``Eq(s_k, 2*s_i)``). Half are repeats, as torch repeats guards.
    """
    rng = random.Random(seed)
    xs = [int_symbol(f"s{i}") for i in range(n_symbols)]
    align = {x: rng.choice([1, 2, 8, 8, 16]) for x in xs}
    hints = {x.name: align[x] * rng.randint(2, 64) for x in xs}
    groups = [xs[i : i + 5] for i in range(0, n_symbols, 5)]
    unique: list[sympy.Basic] = []
    for group in groups[::3]:
        hints[group[-1].name] = 2 * hints[group[0].name]
        unique.append(sympy.Eq(group[-1], 2 * group[0]))

    def single(x: sympy.Symbol) -> sympy.Basic:
        k, c = align[x], rng.randint(1, 9)
        return rng.choice([
            lambda: x >= rng.randint(1, 8), lambda: x > rng.randint(0, 3), lambda: sympy.Ne(x, rng.randint(0, 3)),
            lambda: x <= rng.choice([4096, 8192, 65536]) * k, lambda: sympy.Eq(Mod(x, k), 0),
            lambda: sympy.Eq(Mod(c * x, c * k), 0), lambda: sympy.Eq(k * FloorDiv(x, k), x),
            lambda: sympy.Ne(FloorDiv(x, 8 * k), 0), lambda: x >= FloorDiv(x, 3),
            lambda: sympy.Ne(x - FloorDiv(x, 3), 1), lambda: x - FloorDiv(x, 3) >= 2,
            lambda: Max(x, 2) >= 2, lambda: sympy.Ne(Mod(1, FloorDiv(x, 2)), 0),
        ])()

    def pair(x: sympy.Symbol, y: sympy.Symbol) -> sympy.Basic:
        return rng.choice([
            lambda: x * y >= 4, lambda: x + y >= 4, lambda: sympy.Eq(Mod(x * y, align[x] * align[y]), 0),
            lambda: x <= y, lambda: sympy.Ne(x, y), lambda: x * y <= 2**31, lambda: FloorDiv(x * y, 4) <= x * y,
            lambda: Max(x, y) >= 2, lambda: sympy.Ne(x * y, 1), lambda: x + 2 * y >= rng.randint(4, 12),
        ])()

    while len(unique) < n_guards // 2:
        group = rng.choice(groups)
        roll = rng.random()
        guard = single(rng.choice(group)) if roll < 0.6 else pair(*rng.sample(group if roll < 0.96 else xs, 2))
        if guard not in (sympy.true, sympy.false):
            unique.append(guard if holds(guard, hints) else sympy.Not(guard))
    guards = unique + [rng.choice(unique) for _ in range(n_guards - len(unique))]
    rng.shuffle(guards)
    return guards, hints


def naive_irredundant(guards: list[sympy.Basic], ranges: dict[str, tuple[int, None]], timeout_ms: int) -> int:
    """The peer: drop each guard that all the others imply, one z3 query per guard."""
    translator = Translator(z3.Context())
    solver = z3.Solver(ctx=translator.ctx)
    for name, (lo, _) in ranges.items():
        solver.add(translator.symbol(name) >= lo)
    tracks = []
    for i, guard in enumerate(guards):
        tracks.append(z3.Bool(f"!t{i}", translator.ctx))
        solver.add(z3.Implies(tracks[-1], translator.holds(guard)))
    solver.add(*translator.axioms)
    kept = set(range(len(guards)))
    for i, guard in enumerate(guards):
        query = z3.Bool(f"!q{i}", translator.ctx)
        solver.add(z3.Implies(query, z3.Not(translator.holds(guard))), *translator.axioms)
        if Budget(timeout_ms).check(solver, *[tracks[j] for j in kept if j != i], query) == z3.unsat:
            kept.discard(i)
    return len(kept)


def _sampled_disagreement(guards, result, hints, rng, points=3000):
    names = sorted(hints)
    for _ in range(points):
        point = {n: max(2, hints[n] + rng.choice([0, 0, 0, -1, 1, -8, 8, -hints[n] // 2, hints[n]])) for n in names}
        if all(holds(g, point) for g in guards) != all(holds(g, point) for g in result):
            return point
    return None


def _timed_simplify(guards, ranges, **options):
    """``(result, wall seconds, CPU seconds)``: on a shared machine the CPU time is the steadier."""
    start, cpu = time.perf_counter(), time.process_time()
    result = simplify(guards, ranges=ranges, **options)
    return result, time.perf_counter() - start, time.process_time() - cpu


def bench_scale(n_symbols: int, n_guards: int, peer_symbols: int, peer_guards: int) -> tuple[list, dict]:
    print(f"\n2. scale: {n_guards} generated guards over {n_symbols} symbols")
    rng = random.Random(1)
    small, small_hints = generated_guards(peer_symbols, peer_guards, seed=1)
    small_ranges = {n: (2, None) for n in small_hints}
    result, elapsed, cpu = _timed_simplify(small, small_ranges)
    start, naive_cpu = time.perf_counter(), time.process_time()
    naive_kept = naive_irredundant(list(dict.fromkeys(small)), small_ranges, timeout_ms=2000)
    naive, naive_cpu = time.perf_counter() - start, time.process_time() - naive_cpu
    print(f"   peer set ({peer_guards} guards, {peer_symbols} symbols): shapecore {elapsed:.2f} s ({cpu:.2f} s CPU), "
          f"keeps {len(result.guards)}; naive one-z3-query-per-guard {naive:.2f} s ({naive_cpu:.2f} s CPU), "
          f"keeps {naive_kept}; ratio {naive_cpu / cpu:.1f}x (CPU)")
    guards, hints = generated_guards(n_symbols, n_guards, seed=0)
    ranges = {n: (2, None) for n in hints}
    timeout_ms = 10_000  # z3's budget for the whole call; the default (2 s) is for sets of ~100 guards
    result, elapsed, cpu = _timed_simplify(guards, ranges, timeout_ms=timeout_ms)
    disagreement = _sampled_disagreement(guards, result.guards, hints, rng)
    print(f"   shapecore: {len(guards)} guards ({len(set(guards))} distinct) -> {len(result.guards)} "
          f"in {elapsed:.2f} s ({cpu:.2f} s CPU, timeout_ms={timeout_ms}); "
          f"{len(result.dropped)} dropped, {len(result.rewritten)} rewritten; "
          f"sampled equivalence around the example values: {'ok' if disagreement is None else disagreement}")
    return [guards, list(result.guards)], hints


# -- compile_guards -------------------------------------------------------------------------------


def _per_call_us(function, repeat: int = 7) -> float:
    number = max(1, int(0.05 / max(timeit.timeit(function, number=1), 1e-7)))
    return statistics.median(timeit.repeat(function, number=number, repeat=repeat)) / number * 1e6


def bench_compile_guards(sets: list[list[sympy.Basic]], hints: dict[str, int]) -> None:
    print("\n3. compile_guards: per-call cost at values where every guard holds")
    for guards in sets:
        start = time.perf_counter()
        check = compile_guards(guards)
        compile_ms = (time.perf_counter() - start) * 1000
        values = {p: hints[p] for p in check.parameters}
        assert check(**values) is None
        compiled = _per_call_us(lambda: check(**values))
        one_by_one = _per_call_us(lambda: all(holds(g, values) for g in guards), repeat=3)
        line = (f"   {len(guards):5d} guards: compiled {compiled:8.1f} us/call (compiled once in {compile_ms:.0f} ms); "
                f"holds() one by one {one_by_one:9.1f} us ({one_by_one / compiled:.0f}x)")
        if len(guards) <= 500:
            env = ShapeEnv()
            for name in sorted({s.name for g in guards for s in g.free_symbols}):
                env.create_symbol(hints[name], name=name)
            for guard in guards:
                env.add_fact(guard)
            env_values = {n: hints[n] for n in env.symbols}
            assert env.check_guards(env_values) == []
            per_env = _per_call_us(lambda: env.check_guards(env_values), repeat=3)
            line += f"; ShapeEnv.check_guards {per_env:9.1f} us ({per_env / compiled:.0f}x)"
        print(line)


# -- the command line on a large guard file -------------------------------------------------------


def guard_file(n_symbols: int, n_guards: int, size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """The lines of a guard file of about ``size`` bytes shaped like a long trace's guard log,
    and its distinct guards in order of first appearance.

    The distinct guards are :func:`generated_guards` ``(n_symbols, n_guards)``, deduplicated:
    torch-like (divisibility, ``FloorDiv``, ``Eq``/``Ne``/``<=``/``<`` on one symbol or two of a
    tensor's), all true at the example values. The file has each once, then repeats them as a long
    trace records the same guards again and again, the short single-symbol ones (``s3 > 2``,
    ``Ne(s7, 1)``) most: drawn with weight ``len(text) ** -4``, which gives about 940,000 guards
    in 10 MB.
    """
    guards, _ = generated_guards(n_symbols, n_guards, seed=seed)
    distinct = list(dict.fromkeys(str(g) for g in guards))
    rng = random.Random(seed)
    weights = [len(text) ** -4 for text in distinct]
    lines, total = list(distinct), sum(len(text) + 1 for text in distinct)
    while total < size:
        for text in rng.choices(distinct, weights, k=10_000):
            lines.append(text)
            total += len(text) + 1
    rng.shuffle(lines)
    return lines, list(dict.fromkeys(lines))


def _run_cli(argv: list[str]) -> tuple[float, float, float, int]:
    """``(wall s, CPU s, peak RSS MB, exit code)`` of ``shapecore ARGV`` (this checkout's) in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "shapecore.cli", *argv], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def bench_cli(megabytes: float, keep: str | None) -> None:
    n_symbols, n_guards = 200, 4000
    lines, distinct = guard_file(n_symbols, n_guards, int(megabytes * 1_000_000))
    with tempfile.TemporaryDirectory() as folder:
        path = keep or os.path.join(folder, "guards.txt")
        for name, content in ((path, lines), (path + ".distinct", distinct)):
            with open(name, "w") as handle:
                handle.write("\n".join(content) + "\n")
        size = os.path.getsize(path) / 1e6
        print(f"\n4. the command line on a {size:.1f} MB guard file: {len(lines):,} guards, {len(distinct):,} distinct, "
              f"over {n_symbols} symbols ({path})")
        print(f"   {'command':10s} {'input':28s} {'wall s':>7s} {'CPU s':>7s} {'peak MB':>8s} {'exit':>5s}")
        inputs = [(f"{size:.1f} MB, {len(lines):,} guards", path), (f"distinct, {len(distinct):,} guards", path + ".distinct")]
        for command in ("explain", "simplify"):
            for label, name in inputs:
                wall, cpu, rss, code = _run_cli([command, name])
                print(f"   {command:10s} {label:28s} {wall:7.1f} {cpu:7.1f} {rss:8.0f} {code:5d}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="1,000 guards over 25 symbols instead of 4,000 over 50; a 1 MB guard file instead of 10 MB")
    parser.add_argument("--cli", action="store_true", help="part 4 alone: the command line on a large guard file")
    parser.add_argument("--guard-file", metavar="PATH", help="write part 4's guard file to PATH (and PATH.distinct) and keep it")
    args = parser.parse_args(argv)
    if not args.cli:
        bench_corpus()
        n_symbols, n_guards = (25, 1000) if args.quick else (50, 4000)
        sets, hints = bench_scale(n_symbols, n_guards, peer_symbols=10, peer_guards=300)
        bench_compile_guards(sets[::-1], hints)
    bench_cli(1 if args.quick else 10, args.guard_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
