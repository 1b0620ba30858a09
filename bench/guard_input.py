"""Benchmark: reading a guard file takes time linear in its size (10 MB in seconds).

Run from the repository root (about a minute; ``--quick`` for 1 MB files only)::

    python bench/guard_input.py

For each form ``shapecore.guard_input`` reads (guard lines, a ``TORCH_LOGS=dynamic`` log, a
ShapeEnv JSON document) a file of torch-like guards is generated at 1 MB and 10 MB: 5,000
distinct guards over 50 symbols, repeated, as a long trace repeats its guards. Every distinct
guard is parsed once beforehand, so that what is timed is reading, not sympy building each
guard the first time (about 0.4 ms each: a file of distinct guards is bound by that). The peer,
in the same run, is ``shapecore.parse`` called on the same guard texts (cache lookups), with
nothing located. Reported (best of 3): seconds to read, seconds for the peer, and seconds per
MB read, which stay flat from 1 MB to 10 MB when reading is linear (locating each guard by
counting lines from the start of the file, as before, made the 10 MB text file take about 16
minutes: per MB, ten times the 1 MB figure).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable

from shapecore import parse
from shapecore.env import JSON_FORMAT, JSON_VERSION
from shapecore.guard_input import read_guard_set

_SYMBOLS = 50
_DISTINCT = 5000
_LOG_PREFIX = "I1122 20:36:51.474000 26737 torch/fx/experimental/symbolic_shapes.py:8081] "


def distinct_guards(rng: random.Random) -> list[str]:
    """Guards shaped like torch's: divisibility, bounds, sums, inequalities."""
    guards = set()
    while len(guards) < _DISTINCT:
        a, b, k = rng.randrange(_SYMBOLS), rng.randrange(_SYMBOLS), rng.randrange(2, 4096)
        guards.add(rng.choice([
            f"Eq(Mod(s{a}, {k}), 0)", f"s{a} >= {k}", f"s{a} + s{b} <= {k * 8}", f"Ne(s{a}, {k})",
            f"s{a} >= ((s{b}//{k % 16 + 2}))", f"Eq(s{a}*s{b}, {k}*s{b})",
        ]))
    return sorted(guards)


def guard_texts(pool: list[str], size: int, rng: random.Random, overhead: int) -> list[str]:
    """Guards drawn from ``pool`` until their lines (each ``overhead`` more bytes) fill ``size``."""
    texts, total = [], 0
    while total < size:
        text = rng.choice(pool)
        texts.append(text)
        total += len(text) + overhead
    return texts


def as_lines(texts: list[str]) -> str:
    return "\n".join(texts) + "\n"


def as_log(texts: list[str]) -> str:
    return "".join(f"{_LOG_PREFIX}eval {t} [guard added] (model.py:12 in forward)\n" for t in texts)


def as_shape_env(texts: list[str]) -> str:
    symbols = [{"name": f"s{i}", "kind": "backed", "hint": 4096 * (i + 1), "source": None, "size_like": False}
               for i in range(_SYMBOLS)]
    log = [{"kind": "fact", "expr": t} for t in texts]
    return json.dumps({"format": JSON_FORMAT, "version": JSON_VERSION, "symbols": symbols, "log": log}, indent=2)


FORMS = {"guard lines": (as_lines, 1), "TORCH_LOGS log": (as_log, len(_LOG_PREFIX) + 45), "ShapeEnv JSON": (as_shape_env, 50)}


def best_of_3(run: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 MB files only")
    args = parser.parse_args()
    rng = random.Random(0)
    pool = distinct_guards(rng)
    sizes = [1] if args.quick else [1, 10]
    print(f"{'form':16s} {'MB':>5s} {'guards':>8s} {'read s':>8s} {'parse s':>8s} {'read s/MB':>10s}")
    for guard in pool:
        parse(guard)
    for form, (render, overhead) in FORMS.items():
        for megabytes in sizes:
            texts = guard_texts(pool, megabytes * 1_000_000, rng, overhead)
            text = render(texts)
            found = read_guard_set(text, "bench")
            assert len(found.guards) + len(found.assumptions) == len(texts)
            read = best_of_3(lambda: read_guard_set(text, "bench"))
            peer = best_of_3(lambda: [parse(t) for t in texts])
            size = len(text.encode()) / 1e6
            print(f"{form:16s} {size:5.1f} {len(texts):8d} {read:8.2f} {peer:8.2f} {read / size:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
