"""Benchmark: a routed expert with its data-dependent tokens split unevenly against kept whole.

A mixture-of-experts layer (``tests.planner.models.Routed``: a gate picks a data-dependent
number ``u0`` of tokens, an expert ``Linear`` runs on them, ``index_add`` scatters them back)
on 2 gloo ranks, planned for the ``cpu-gloo`` hardware twice:

(a) ``planner``: the planner's own choice (it splits ``u0`` into ``torch.chunk``'s uneven
    pieces when that is cheaper, which it says it is for a wide expert);
(b) ``whole``: the same with ``ForbidShard("u0", axis=0)``: every rank runs the expert on all
    routed tokens.

The timed forward calls of (a) and (b) alternate in blocks, so load from other processes hits
them alike; reported per batch size: the slowest rank's median seconds per call of each, their
ratio, and the ratio the planner predicted. Both outputs are checked against one device.

Run: ``python bench/uneven_split.py`` (``--dim``, ``--batch-sizes``, ``--calls``, ``--blocks``;
about a minute here).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# this directory holds a file named like a package it benchmarks: keep it off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package holds the model


def _rank(rank: int, dim: int, batch_sizes: list[int], calls: int, blocks: int) -> dict[str, Any]:
    import torch
    from torch.export import Dim

    from lowering.parallel import ParallelModule
    from planner import ForbidShard
    from tests.planner.models import Routed

    torch.manual_seed(0)
    model = Routed(dim)
    common = dict(dynamic_shapes=({0: 2 * Dim("batch", max=4096)},), mesh=(2,), batch_sizes=batch_sizes,
                  hardware="cpu-gloo")
    variants = {"planner": ParallelModule(model, (torch.randn(8, dim),), **common),
                "whole": ParallelModule(model, (torch.randn(8, dim),), placement_constraints=[ForbidShard("u0", 0)],
                                        **common)}
    out: dict[str, Any] = {"split": {name: any(p.size == "u0" for p in pm.plan.proofs) for name, pm in variants.items()},
                           "predicted": {}, "seconds": {}}
    for batch in batch_sizes:
        x = torch.randn(batch, dim, generator=torch.Generator().manual_seed(batch))
        expected = model(x)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for name, pm in variants.items():
            inputs = pm.shard_inputs(x)
            assert torch.allclose(pm(*inputs).full_tensor(), expected, rtol=1e-4, atol=1e-5), name
            cost = next(b.cost for b in pm.plan.batch_costs if b.values.get("batch") == batch)
            out["predicted"].setdefault(batch, {})[name] = cost
        for _ in range(blocks):
            for name, pm in variants.items():
                inputs = pm.shard_inputs(x)
                for _ in range(calls):
                    torch.distributed.barrier()
                    start = time.perf_counter()
                    pm(*inputs).to_local()
                    times[name].append(time.perf_counter() - start)
        out["seconds"][batch] = {name: statistics.median(t) for name, t in times.items()}
    return out


def main() -> None:
    from lowering import launch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    results = launch(functools.partial(_rank, dim=args.dim, batch_sizes=args.batch_sizes, calls=args.calls,
                                       blocks=args.blocks), 2, timeout=900)
    print(f"routed expert, dim {args.dim}, 2 gloo ranks, cpu-gloo preset; u0 split unevenly: "
          + ", ".join(f"{name} {split}" for name, split in results[0]["split"].items()))
    print("batch  planner s   whole s     measured planner/whole  predicted planner/whole")
    for batch in args.batch_sizes:
        seconds = {name: max(r["seconds"][batch][name] for r in results) for name in ("planner", "whole")}
        predicted = results[0]["predicted"][batch]
        print(f"{batch:5d}  {seconds['planner']:.3e}  {seconds['whole']:.3e}  "
              f"{seconds['planner'] / seconds['whole']:22.3f}  {predicted['planner'] / predicted['whole']:23.3f}")


if __name__ == "__main__":
    main()
