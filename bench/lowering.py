"""Benchmark: one dynamic compile against one specialized compile per batch size.

The same plan (a 2-layer LLaMA-style decoder on a (2, 2) mesh of 4 gloo processes, weights split
by a memory budget, batch under ``Eq(Mod(batch, 4), 0)``) runs at 5 batch sizes as

(a) the dynamic program: ``ParallelModule`` compiled once with the batch symbolic;
(b) its peer: ``ParallelModule(dynamic=False)``, compiled again, with static shapes, for each
    batch size.

Reported: total Inductor compile seconds on rank 0 (rank 0 always compiles; the other ranks
load its result from Inductor's cache, in both variants alike; Inductor's one-time start-up is
paid before either), the number of compiles, the seconds from construction to the first
results at every batch size, and
per batch size the median step time (entry check and program, the slowest rank's median) of
each variant and their ratio. Timed steps of (a) and (b) alternate in blocks, so load from
other processes on the machine hits both alike. Inductor's cache starts empty.

Run: ``python bench/lowering.py`` (about two minutes here); ``--steps``/``--batch-sizes``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Any

# this directory holds a file named like the package it benchmarks: keep it off the import path,
# and import its sibling benchmarks through the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(_HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

from bench.inductor_cache import use_fresh_inductor_cache  # noqa: E402

from lowering.demo import decoder, dynamic_shapes, plan_decoder, tokens  # noqa: E402  (the demo's scenario)


def _steps(pm: Any, inputs: tuple[Any, ...], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        pm(*inputs)
        times.append(time.perf_counter() - start)
    return times


def _rank(rank: int, plan_json: str, batch_sizes: list[int], steps: int, blocks: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from lowering.parallel import ParallelModule
    from planner import Plan

    plan = Plan.from_json(plan_json)
    model = decoder()
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))  # Inductor's one-time start-up, paid by neither variant
    example = (tokens(batch_sizes[0]),)
    variants = {}
    first_results = {}
    for name, dynamic in (("dynamic", True), ("specialized", False)):
        dist.barrier()
        start = time.perf_counter()
        pm = ParallelModule(model, example, dynamic_shapes=dynamic_shapes(), mesh=(2, 2), plan=plan,
                            dynamic=dynamic)  # traced where plan_decoder traced (plan.trace_sizes)
        for batch in batch_sizes:  # first call at each size: compiles what the variant needs
            out = pm(*pm.shard_inputs(tokens(batch))).full_tensor()
            with torch.no_grad():
                assert torch.allclose(out, model(tokens(batch)), rtol=1e-4, atol=1e-5), (name, batch)
        first_results[name] = time.perf_counter() - start
        variants[name] = pm
    timings: dict[str, dict[int, list[float]]] = {name: {b: [] for b in batch_sizes} for name in variants}
    for batch in batch_sizes:
        for name, pm in variants.items():
            _steps(pm, pm.shard_inputs(tokens(batch)), 2)  # warm up
        for _ in range(blocks):
            for name, pm in variants.items():
                timings[name][batch] += _steps(pm, pm.shard_inputs(tokens(batch)), steps)
    return {
        "compiles": {name: pm.compile_count for name, pm in variants.items()},
        "compile_seconds": {name: pm.compile_seconds for name, pm in variants.items()},
        "to_first_results": first_results,
        "median_ms": {name: {b: 1000 * statistics.median(t) for b, t in per.items()} for name, per in timings.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="8,16,24,32,40")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per block (default 5)")
    parser.add_argument("--blocks", type=int, default=8, help="alternating blocks per batch size (default 8)")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    use_fresh_inductor_cache("bench-lowering-")

    from lowering.launch import launch

    start = time.monotonic()
    plan_json = plan_decoder(batch_sizes).to_json()
    results = launch(functools.partial(_rank, plan_json=plan_json, batch_sizes=batch_sizes, steps=args.steps,
                                       blocks=args.blocks), 4, timeout=1200)
    zero = results[0]
    print(f"decoder (2 layers) on a (2, 2) mesh of 4 gloo processes, batch sizes {batch_sizes}, "
          f"{args.blocks}x{args.steps} timed steps each")
    print(f"{'':>14} {'compiles':>9} {'compile s':>10} {'first results s':>16}")
    for name in ("dynamic", "specialized"):
        print(f"{name:>14} {zero['compiles'][name]:>9} {zero['compile_seconds'][name]:>10.1f} "
              f"{zero['to_first_results'][name]:>16.1f}")
    print(f"{'batch':>6} {'dynamic ms':>11} {'specialized ms':>15} {'ratio':>7}")
    ratios = []
    for b in batch_sizes:
        dyn = max(r["median_ms"]["dynamic"][b] for r in results)
        spe = max(r["median_ms"]["specialized"][b] for r in results)
        ratios.append(dyn / spe)
        print(f"{b:>6} {dyn:>11.2f} {spe:>15.2f} {dyn / spe:>7.3f}")
    geo = statistics.geometric_mean(ratios)
    compile_ratio = zero["compile_seconds"]["specialized"] / zero["compile_seconds"]["dynamic"]
    print(f"step time dynamic / specialized: geometric mean {geo:.3f}, worst {max(ratios):.3f}; "
          f"compile seconds specialized / dynamic: {compile_ratio:.2f}x; total {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
