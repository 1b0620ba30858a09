"""Long differential fuzz run: shapecore's answers against brute force, wrong answers counted.

Random ``prove``, ``simplify`` and ShapeEnv queries (``evaluate_expr`` / ``add_fact`` /
``statically_known_true`` / JSON round trips) over small boxes, each answer checked against an
independent oracle (``tests/shapecore/oracle.py``: Python evaluating the guard text on ints).
The queries and the checks are those of ``tests/shapecore/test_differential.py``; see
``tests/shapecore/differential.py`` for what counts as wrong.

Case ``i`` is generated from ``(seed, i)`` alone, so a run is reproducible and any case can be
replayed (``--replay i``). Cases run in worker processes under a watchdog: a query that takes
longer than ``--hang-seconds`` is reported as an exception (``Hang``) and its worker replaced.

Run from the repository root (about 15 minutes for the default 100,000 queries on one core)::

    nice python bench/fuzz.py --queries 100000
    python bench/fuzz.py --seed 0 --replay 1234      # one case: its calls, answers and verdicts
    nice python bench/fuzz.py --mix simplify=1,simplify_divisions=1 --queries 20000   # simplify alone

``simplify_divisions`` (not in the default mix, which keeps the case numbers of earlier runs)
asks simplify about disjunctions that define a symbol by a division, remainder, Max or Min,
with divisibility and range guards, under ranges that may be open-ended.

Prints wrong answers (grouped, with a reproduction each), unknowns, exceptions by type, and the
median and p95 milliseconds per query; exits 1 if anything was wrong or raised.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package holds the oracle

from tests.shapecore import differential as diff  # noqa: E402
from tests.shapecore.guard_text import RandomChooser  # noqa: E402


def _kind(seed: int, index: int, mix: dict[str, int]) -> str:
    chooser = RandomChooser(f"{seed}:{index}:kind")
    ticket = chooser.integer(1, sum(mix.values()))
    for kind, weight in mix.items():
        ticket -= weight
        if ticket <= 0:
            return kind
    raise AssertionError("unreachable")


def _query(seed: int, index: int, mix: dict[str, int]):
    return diff.generate(_kind(seed, index, mix), RandomChooser(f"{seed}:{index}"))


def _record(outcome: diff.Outcome) -> tuple:
    return (outcome.query, outcome.status, outcome.seconds, outcome.problem, outcome.detail, outcome.reproduction)


def _worker(conn: Connection, seed: int, mix: dict[str, int], timeout_ms: int) -> None:
    """Answer case indices from ``conn`` with the records of their outcomes, until None."""
    while (index := conn.recv()) is not None:
        query = _query(seed, index, mix)
        try:
            records = [_record(o) for o in diff.run(query, timeout_ms=timeout_ms)]
        except Exception as exc:  # noqa: BLE001 - a crash outside the checked calls is a finding too
            records = [("case", "raised", 0.0, f"exception: {type(exc).__name__}", f"{exc}"[:500],
                        query.reproduction(timeout_ms))]
        conn.send((index, records))


class _Pool:
    """Worker processes, each with at most one case in flight, replaced when one hangs."""

    def __init__(self, jobs: int, seed: int, mix: dict[str, int], timeout_ms: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._args = (seed, mix, timeout_ms)
        self._workers: list[tuple[multiprocessing.Process, Connection]] = [self._start() for _ in range(jobs)]
        self.busy: dict[int, tuple[int, float]] = {}  # worker slot -> (case index, start time)

    def _start(self) -> tuple[multiprocessing.Process, Connection]:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker, args=(child, *self._args), daemon=True)
        process.start()
        child.close()
        return process, parent

    def idle(self) -> list[int]:
        return [slot for slot in range(len(self._workers)) if slot not in self.busy]

    def submit(self, slot: int, index: int) -> None:
        self._workers[slot][1].send(index)
        self.busy[slot] = (index, time.monotonic())

    def collect(self, hang_seconds: float) -> tuple[list[tuple[int, list[tuple]]], list[tuple[int, str]]]:
        """Finished cases, and ``(index, what happened)`` of cases whose worker hung or died (replaced)."""
        conns = {self._workers[slot][1]: slot for slot in self.busy}
        done = []
        for conn in wait(list(conns), timeout=0.5):
            slot = conns[conn]
            try:
                done.append(conn.recv())
            except EOFError:  # the worker died: report it like a hang
                continue
            del self.busy[slot]
        hung = []
        now = time.monotonic()
        for slot, (index, started) in list(self.busy.items()):
            process = self._workers[slot][0]
            alive = process.is_alive()
            if now - started > hang_seconds or not alive:
                process.kill()
                process.join()
                self._workers[slot] = self._start()
                del self.busy[slot]
                hung.append((index, "Hang" if alive else f"WorkerDied (exit code {process.exitcode})"))
        return done, hung

    def close(self) -> None:
        for process, conn in self._workers:
            conn.send(None)
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class _Tally:
    """Counts and examples of everything the run saw."""

    def __init__(self, examples: int) -> None:
        self.examples = examples
        self.queries = 0
        self.cases = 0
        self.seconds: dict[str, list[float]] = collections.defaultdict(list)
        self.statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.problems: collections.Counter = collections.Counter()
        self.shown: dict[tuple[str, str], list[tuple[int, str, str]]] = collections.defaultdict(list)
        self.unknowns = 0
        self.wrong = 0
        self.exceptions = 0
        self.slowest: list[tuple[float, int, str, str]] = []  # (seconds, case, query, reproduction), longest first

    def add(self, index: int, records: list[tuple]) -> None:
        self.cases += 1
        for query, status, seconds, problem, detail, reproduction in records:
            self.queries += 1
            kind = query.split(".")[0]
            self.seconds[kind].append(seconds)
            if len(self.slowest) < self.examples or seconds > self.slowest[-1][0]:
                self.slowest = sorted([*self.slowest, (seconds, index, query, reproduction)], reverse=True)[: self.examples]
            self.statuses[query][status if query != "env.evaluate_expr" or status in ("True", "False", "unknown", "raised", "refused") else "an int"] += 1
            if status == "unknown":
                self.unknowns += 1
            if problem is not None:
                key = (query, problem)
                self.problems[key] += 1
                if problem.startswith("wrong"):
                    self.wrong += 1
                else:
                    self.exceptions += 1
                if len(self.shown[key]) < self.examples:
                    self.shown[key].append((index, detail, reproduction))

    def hang(self, index: int, what: str, reproduction: str, hang_seconds: float) -> None:
        detail = f"no answer within {hang_seconds:g} s" if what == "Hang" else "the worker process died"
        self.add(index, [("case", "hung", hang_seconds, f"exception: {what}", detail, reproduction)])

    def progress(self, elapsed: float, target: int) -> str:
        rate = self.queries / elapsed if elapsed else 0.0
        eta = (target - self.queries) / rate if rate else float("inf")
        return (f"[{_minutes(elapsed)}] {self.queries:,}/{target:,} queries ({self.cases:,} cases): "
                f"wrong {self.wrong:,}, unknown {self.unknowns:,}, exceptions {self.exceptions:,}; "
                f"{rate:.0f} queries/s, about {_minutes(max(eta, 0))} to go")

    def report(self, header: str) -> str:
        lines = [header, "", "queries and answers:"]
        for query in sorted(self.statuses):
            counts = self.statuses[query]
            answers = ", ".join(f"{status} {n:,}" for status, n in counts.most_common())
            lines.append(f"  {query:<28} {sum(counts.values()):>8,}   {answers}")
        lines += ["", "milliseconds per query (the shapecore call alone):"]
        every = [s for values in self.seconds.values() for s in values]
        for kind, values in sorted(self.seconds.items()) + [("all", every)]:
            lines.append(f"  {kind:<10} median {1000 * statistics.median(values):8.2f}   p95 {1000 * _percentile(values, 0.95):8.2f}"
                         f"   max {1000 * max(values):9.1f}   ({len(values):,} queries)")
        lines.append("  slowest:")
        for seconds, index, query, reproduction in self.slowest:
            lines.append(f"    {1000 * seconds:9.1f} ms  case {index}, {query}")
            lines += [f"               {line}" for line in reproduction.splitlines()]
        lines += ["", f"wrong answers: {self.wrong:,}"]
        lines += self._problems("wrong")
        lines += ["", f"unknowns: {self.unknowns:,} (prove: unknown; env.evaluate_expr: DataDependentError)"]
        for query, counts in sorted(self.statuses.items()):
            if counts["unknown"]:
                lines.append(f"  {query:<28} {counts['unknown']:>8,}")
        lines += ["", f"exceptions: {self.exceptions:,}"]
        lines += self._problems("exception")
        return "\n".join(lines)

    def _problems(self, prefix: str) -> list[str]:
        lines = []
        for (query, problem), count in self.problems.most_common():
            if not problem.startswith(prefix):
                continue
            lines.append(f"  {count:>7,}  {query}: {problem}")
            for index, detail, reproduction in self.shown[(query, problem)]:
                lines.append(f"           case {index}: {detail}")
                lines += [f"               {line}" for line in reproduction.splitlines()]
        return lines


def _mix(text: str) -> dict[str, int]:
    mix = {}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind not in diff.KINDS or not weight.isdigit():
            raise argparse.ArgumentTypeError(f"--mix wants kind=weight pairs with kinds {', '.join(diff.KINDS)}, got {part!r}")
        mix[kind] = int(weight)
    if not any(mix.values()):
        raise argparse.ArgumentTypeError("--mix needs a positive weight")
    return mix


def _replay(args: argparse.Namespace) -> int:
    query = _query(args.seed, args.replay, args.mix)
    print(f"case {args.replay} (seed {args.seed}): {type(query).__name__}")
    print(query.reproduction(args.timeout_ms))
    bad = False
    for outcome in diff.run(query, timeout_ms=args.timeout_ms):
        print(f"  {outcome.query}: {outcome.status} in {1000 * outcome.seconds:.1f} ms"
              + (f"\n    {outcome.problem}: {outcome.detail}" if outcome.problem else ""))
        bad |= outcome.problem is not None
    return int(bad)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=100_000, help="stop after this many queries (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    parser.add_argument("--timeout-ms", type=int, default=100, help="z3 budget per query, passed as timeout_ms (default 100)")
    parser.add_argument("--mix", type=_mix, default=_mix("prove=6,env=3,simplify=1"),
                        help="relative weights of the case kinds (default prove=6,env=3,simplify=1)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--hang-seconds", type=float, default=60.0, help="a case still running after this is a Hang (default 60)")
    parser.add_argument("--progress-seconds", type=float, default=30.0, help="progress line to stderr this often (default 30)")
    parser.add_argument("--examples", type=int, default=3, help="reproductions shown per kind of problem (default 3)")
    parser.add_argument("--json", type=Path, help="also write every count and example here")
    parser.add_argument("--replay", type=int, metavar="CASE", help="run case CASE alone and show its calls and verdicts")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return _replay(args)

    tally = _Tally(args.examples)
    pool = _Pool(max(1, args.jobs), args.seed, args.mix, args.timeout_ms)
    start = last_progress = time.monotonic()
    next_index = 0
    try:
        while tally.queries < args.queries or pool.busy:
            if tally.queries < args.queries:
                for slot in pool.idle():
                    pool.submit(slot, next_index)
                    next_index += 1
            done, hung = pool.collect(args.hang_seconds)
            for index, records in done:
                tally.add(index, records)
            for index, what in hung:
                tally.hang(index, what, _query(args.seed, index, args.mix).reproduction(args.timeout_ms), args.hang_seconds)
            if time.monotonic() - last_progress >= args.progress_seconds:
                last_progress = time.monotonic()
                print(tally.progress(last_progress - start, args.queries), file=sys.stderr, flush=True)
    finally:
        pool.close()
    elapsed = time.monotonic() - start
    mix = ",".join(f"{k}={w}" for k, w in args.mix.items())
    header = (f"shapecore differential fuzz: {tally.queries:,} queries in {tally.cases:,} cases (0..{next_index - 1}), "
              f"seed {args.seed}, --timeout-ms {args.timeout_ms}, --mix {mix}, {args.jobs} job(s), {_minutes(elapsed)}\n"
              f"replay a case: python bench/fuzz.py --seed {args.seed} --mix {mix} --replay CASE")
    print(tally.report(header))
    if args.json:
        args.json.write_text(json.dumps({
            "header": header,
            "statuses": {q: dict(c) for q, c in tally.statuses.items()},
            "problems": [{"query": q, "problem": p, "count": n, "examples": tally.shown[(q, p)]}
                         for (q, p), n in tally.problems.most_common()],
            "ms": {k: {"median": 1000 * statistics.median(v), "p95": 1000 * _percentile(v, 0.95)} for k, v in tally.seconds.items()},
        }, indent=2))
    return int(tally.wrong > 0 or tally.exceptions > 0)


if __name__ == "__main__":
    sys.exit(main())
