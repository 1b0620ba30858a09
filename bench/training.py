"""Benchmark: training the same decoder on 2 gloo ranks with shapecore and with what a user would pick instead.

One decoder (:class:`lowering.examples.Decoder`, seeded: the same weights everywhere), AdamW
(:data:`OPTIMIZER`), cross-entropy on next-token labels, trained on 2 gloo processes by

(a) ``shapecore``: ``lowering.parallelize(..., training=True)`` planned for the ``cpu-gloo``
    hardware (one forward and one backward program, compiled once with the batch dynamic), the
    loss computed by DTensor on the output's pieces, with the labels placed like the output (on the
    whole output when it is split on the vocabulary or partial);
    ``shapecore-dp``: the same with a data-parallel plan forced (``RequireShard("batch", 0)``:
    every tensor of the batch split on the mesh), which tells the runtime's cost apart from the
    plan's choice;
(b) ``ddp``: ``DistributedDataParallel``, each rank on its half of the batch (eager);
(c) ``fsdp2``: ``fully_shard`` on each block and on the model, each rank on its half (eager);
(d) ``tp``: ``parallelize_module`` with the attention's q/k/v and the MLP's gate/up
    ``ColwiseParallel``, o and down ``RowwiseParallel``, each rank on the whole batch (eager).

At each batch size the variants' timed steps alternate in blocks, so load from other processes
hits them alike. Reported per batch size and variant: the median step time (forward, loss,
backward, optimizer step; the slowest rank's median), the peak tensor memory of a step on the
fullest rank (what lives between steps, parameters and optimizer state, plus the highest net
allocation the profiler sees during a step, at op granularity; DDP's gradient buckets are
counted as held), and Inductor compiles; every variant's first losses are checked against one
device.

Run: ``python bench/training.py`` (``--decoder`` ``small``, the default, or ``tiny``, whose steps
are mostly per-call overhead; ``--batch-sizes``, ``--steps``, ``--blocks``, ``--memory-budget``,
``--variants``; a few minutes here). Each shapecore variant's plan is printed: where it puts the
batch and how many parameters it splits.
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

VARIANTS = ("shapecore", "shapecore-dp", "ddp", "fsdp2", "tp")
OURS = ("shapecore", "shapecore-dp")  # the peers are the others
DECODERS = {
    "tiny": dict(vocab=256, dim=64, heads=4, hidden=128, layers=2, seq=16),  # per-call overhead dominates
    "small": dict(vocab=1024, dim=256, heads=8, hidden=768, layers=2, seq=64),
}
OPTIMIZER = dict(lr=1e-3, foreach=True)
"""Every variant's AdamW: the foreach implementation (one op over all parameters, the default on
GPUs), since DTensor parameters (shapecore, FSDP2) pay DTensor's dispatch once per op and
parameter with the per-parameter one, CPU's default. TP's parameters mix DTensors and plain
tensors, which foreach ops refuse: it runs the per-parameter implementation."""


def _decoder(config: dict[str, int]) -> Any:
    import torch

    from lowering.examples import Decoder

    torch.manual_seed(0)
    return Decoder(**config)


def _batch(config: dict[str, int], batch: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(batch)
    tokens = torch.randint(0, config["vocab"], (batch, config["seq"] + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _loss(logits: Any, labels: Any) -> Any:
    from torch.nn import functional as F

    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _half(x: Any, rank: int) -> Any:
    return x.chunk(2)[rank]


class _Variant:
    """A model, its optimizer, and one training step on the global batch."""

    name: str
    compiles = 0

    def step(self, tokens: Any, labels: Any) -> float:
        raise NotImplementedError

    def held_bytes(self) -> int:
        """Bytes this rank keeps between steps: parameters and optimizer state (local pieces)."""
        from torch.distributed.tensor import DTensor

        def local(t: Any) -> Any:
            return t.to_local() if isinstance(t, DTensor) else t

        tensors = [local(p) for p in self.model.parameters()]
        tensors += [local(v) for state in self.optimizer.state.values() for v in state.values() if hasattr(v, "nbytes")]
        return sum(t.nbytes for t in tensors)


class _Eager(_Variant):
    def __init__(self, name: str, model: Any, rank: int, *, split_batch: bool) -> None:
        import torch

        from torch.distributed.tensor import DTensor

        self.name, self.model, self.rank, self.split_batch = name, model, rank, split_batch
        mixed = len({isinstance(p, DTensor) for p in model.parameters()}) > 1
        self.optimizer = torch.optim.AdamW(model.parameters(), **{**OPTIMIZER, "foreach": not mixed})

    def step(self, tokens: Any, labels: Any) -> float:
        if self.split_batch:  # each rank's mean loss; DDP and FSDP average the gradients: the global mean's
            tokens, labels = _half(tokens, self.rank), _half(labels, self.rank)
        loss = _loss(self.model(tokens), labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return self._global(loss.detach())

    def _global(self, loss: Any) -> float:
        import torch.distributed as dist

        if self.split_batch:
            dist.all_reduce(loss)
            return loss.item() / 2
        return loss.item()


class _DDP(_Eager):
    def __init__(self, config: dict[str, int], rank: int) -> None:
        from torch.nn.parallel import DistributedDataParallel

        super().__init__("ddp", DistributedDataParallel(_decoder(config), gradient_as_bucket_view=True), rank,
                         split_batch=True)

    def held_bytes(self) -> int:
        return super().held_bytes() + sum(p.nbytes for p in self.model.parameters())  # the gradient buckets


def _fsdp2(config: dict[str, int], rank: int, mesh: Any) -> _Eager:
    from torch.distributed.fsdp import fully_shard

    model = _decoder(config)
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _Eager("fsdp2", model, rank, split_batch=True)


def _tp(config: dict[str, int], rank: int, mesh: Any) -> _Eager:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model = _decoder(config)
    plan = {}
    for i, block in enumerate(model.layers):
        block.attention.heads //= mesh.size()  # each rank computes its heads
        plan.update({f"layers.{i}.attention.{p}": ColwiseParallel() for p in "qkv"})
        plan[f"layers.{i}.attention.o"] = RowwiseParallel()
        plan.update({f"layers.{i}.{p}": ColwiseParallel() for p in ("gate", "up")})
        plan[f"layers.{i}.down"] = RowwiseParallel()
    return _Eager("tp", parallelize_module(model, mesh, plan), rank, split_batch=False)


class _Shapecore(_Variant):
    def __init__(self, name: str, config: dict[str, int], mesh: Any, memory_budget: int | None,
                 batch_sizes: list[int], placement_constraints: tuple[Any, ...] = ()) -> None:
        import torch
        from torch.export import Dim

        import lowering

        self.name = name
        self.model = lowering.parallelize(
            _decoder(config), (_batch(config, batch_sizes[0])[0],), dynamic_shapes=({0: Dim("batch")},), mesh=mesh,
            training=True, constraints=["Eq(Mod(batch, 2), 0)"], hardware="cpu-gloo", batch_sizes=batch_sizes,
            memory_budget=memory_budget, placement_constraints=placement_constraints)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), **OPTIMIZER)

    @property
    def compiles(self) -> int:  # type: ignore[override]
        return self.model.compile_count

    def step(self, tokens: Any, labels: Any) -> float:
        from torch.distributed.tensor import DTensor, distribute_tensor

        logits = self.model(tokens)  # a DTensor: the labels placed alike (each rank keeps its piece, no communication)
        if all(p.is_replicate() or (p.is_shard() and p.dim < labels.dim()) for p in logits.placements):
            loss = _loss(logits, distribute_tensor(labels, logits.device_mesh, logits.placements, src_data_rank=None))
        else:  # split on the vocabulary, or partial: the loss on the whole logits
            loss = _loss(logits.full_tensor(), labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()


def _plan_summary(plan: Any) -> str:
    """Where a plan puts the batch (the tokens' placements) and how many parameters it splits."""
    from planner import format_placements

    split = sum(any(p.is_shard() for p in placements) for placements in plan.param_placements.values())
    return (f"tokens {format_placements(plan.input_placements[0])}, {split} of {len(plan.param_placements)} "
            "parameters split")


def _peak_step_bytes(variant: _Variant, tokens: Any, labels: Any) -> int:
    """What ``variant`` holds between steps plus the highest net allocation during one step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        variant.step(tokens, labels)
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return variant.held_bytes() + peak


def _timed(variant: _Variant, tokens: Any, labels: Any, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        variant.step(tokens, labels)
        times.append(time.perf_counter() - start)
    return times


def _rank(rank: int, config: dict[str, int], batch_sizes: list[int], steps: int, blocks: int,
          memory_budget: int | None, variants: tuple[str, ...]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from planner import RequireShard

    mesh = init_device_mesh("cpu", (2,))
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))  # Inductor's one-time start-up, paid by no variant
    makers = {"shapecore": lambda: _Shapecore("shapecore", config, mesh, memory_budget, batch_sizes),
              "shapecore-dp": lambda: _Shapecore("shapecore-dp", config, mesh, memory_budget, batch_sizes,
                                                 (RequireShard("batch", 0),)),
              "ddp": lambda: _DDP(config, rank), "fsdp2": lambda: _fsdp2(config, rank, mesh),
              "tp": lambda: _tp(config, rank, mesh)}
    built = {name: makers[name]() for name in variants}
    plans = {name: _plan_summary(v.model.plan) for name, v in built.items() if name in OURS}
    reference = _Eager("one device", _decoder(config), rank, split_batch=False)
    first_losses = {name: [] for name in built}
    expected = []
    for batch in batch_sizes:  # first steps: every variant from the same weights, compared with one device
        tokens, labels = _batch(config, batch)
        expected.append(reference.step(tokens, labels))
        for name, variant in built.items():
            first_losses[name].append(variant.step(tokens, labels))
    timings = {name: {b: [] for b in batch_sizes} for name in built}
    memory = {name: {} for name in built}
    for batch in batch_sizes:
        tokens, labels = _batch(config, batch)
        for name, variant in built.items():
            memory[name][batch] = _peak_step_bytes(variant, tokens, labels)
        for _ in range(blocks):
            for name, variant in built.items():
                dist.barrier()
                timings[name][batch] += _timed(variant, tokens, labels, steps)
    return {"median_ms": {n: {b: 1000 * statistics.median(t) for b, t in per.items()} for n, per in timings.items()},
            "memory": memory, "compiles": {n: v.compiles for n, v in built.items()},
            "loss_error": {n: max(abs(a - e) / abs(e) for a, e in zip(losses, expected)) for n, losses in first_losses.items()},
            "losses": first_losses, "expected": expected, "plans": plans}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decoder", choices=sorted(DECODERS), default="small",
                        help="the decoder's size: " + "; ".join(f"{k} {v}" for k, v in DECODERS.items()))
    parser.add_argument("--batch-sizes", default="8,16,32")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per block (default 3)")
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks per batch size (default 5)")
    parser.add_argument("--memory-budget", type=int, default=None, help="bytes per device for shapecore's plan")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"a subset of {','.join(VARIANTS)}")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    variants = tuple(v for v in args.variants.split(",") if v)
    use_fresh_inductor_cache("bench-training-")

    from lowering.launch import launch

    start = time.monotonic()
    config = DECODERS[args.decoder]
    results = launch(functools.partial(_rank, config=config, batch_sizes=batch_sizes, steps=args.steps, blocks=args.blocks,
                                       memory_budget=args.memory_budget, variants=variants), 2, timeout=3000)
    print(f"decoder {args.decoder} {config} trained with AdamW {OPTIMIZER} on 2 gloo processes, "
          f"batch sizes {batch_sizes}, "
          f"{args.blocks}x{args.steps} timed steps each (a loaded machine: compare ratios, not times)")
    print("first-step losses vs one device, worst relative error: "
          + ", ".join(f"{n} {max(r['loss_error'][n] for r in results):.1e}" for n in variants))
    for name, summary in results[0]["plans"].items():
        print(f"{name} plan: {summary}")
    print(f"{'batch':>6} {'variant':>12} {'ms/step':>9} {'/ fastest peer':>15} {'peak MiB/rank':>14} {'compiles':>9}")
    for b in batch_sizes:
        ms = {n: max(r["median_ms"][n][b] for r in results) for n in variants}
        peers = [ms[n] for n in variants if n not in OURS]
        fastest = min(peers) if peers else None
        for n in variants:
            mib = max(r["memory"][n][b] for r in results) / 2**20
            ratio = f"{ms[n] / fastest:.3f}" if fastest else "-"
            print(f"{b:>6} {n:>12} {ms[n]:>9.2f} {ratio:>15} {mib:>14.2f} {results[0]['compiles'][n]:>9}")
    print(f"total {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
