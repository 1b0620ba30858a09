"""Benchmark: what one call of a ParallelModule costs, against eager, torch.compile and DDP.

The tiny and small decoders of ``bench/training.py`` (seeded, the same weights everywhere), on 1
and 2 gloo processes, in three modes:

* ``forward``: one forward under ``torch.no_grad()`` (a ``ParallelModule`` built without
  ``training``);
* ``backward``: forward, next-token cross-entropy, backward and ``zero_grad`` (a training
  ``ParallelModule``): what the module's call and its backward cost;
* ``step``: the same and AdamW's step (:data:`bench.training.OPTIMIZER`) between them: a
  training step, where DTensor parameters (shapecore on more than one device; on one its
  parameters are plain tensors) pay DTensor's dispatch in every optimizer op.

Variants, each rank calling its own (and the peers each on its part of the batch, as a data
parallel program does):

(a) ``shapecore``: ``lowering.parallelize`` planned for the ``cpu-gloo`` hardware, called on
    the global batch cut ahead (``shard_inputs``), the loss on the output's pieces with the
    labels placed alike (as ``bench/training.py`` computes it; on the whole output when it is
    split on the vocabulary or partial); ``entry check``: its
    :class:`~lowering.entry.EntryCheck` alone on the same inputs, the part of a call that is
    neither the program nor the model's tensors;
(b) ``eager``: the model itself;
(c) ``compiled``: ``torch.compile(model, dynamic=True)``;
(d) ``ddp``: ``DistributedDataParallel`` around the eager model (``backward`` and ``step``).

Every variant is warmed up first (compiles, DDP's first bucketing). Then rounds: in each, every
variant in turn runs ``--calls`` calls, each timed alone, after a barrier, so load from other
processes hits them alike. Reported per decoder, mode and number of ranks: each variant's
median µs per call in wall-clock time and in the calling thread's CPU time (the slowest rank's
median of each; CPU time leaves out the time the process waited for a core, which on a loaded
machine is most of the wall-clock time, and the time a collective waited for its peer), and
shapecore's ratios to the compiled model (the goal on one rank: at most 1.2) and to DDP (the
goal for the tiny decoder's step on 2 ranks: at most 1.1). The spread (half the interquartile
range of the wall-clock times, over their median) and the load average at the start and the
end say how noisy the machine was.

Run: ``python bench/overhead.py`` (``--decoders tiny,small``, ``--ranks 1,2``, ``--modes
forward,backward,step``, ``--batch``, ``--rounds``, ``--calls``, ``--threads``); each module
compiles once per launch, so a full run takes many minutes here. On a machine whose cores
other processes keep busy, more than one intra-op thread per rank makes every variant wait on
its own OpenMP threads (the tiny decoder's eager forward took 134 ms with 2 threads against
6 ms with 1 at a load of 7 on 2 cores): measure there with ``--threads 1``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# this directory holds a file named like the package it benchmarks: keep it off the import path,
# and import its sibling benchmarks through the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(_HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

from bench.inductor_cache import use_fresh_inductor_cache  # noqa: E402
from bench.training import DECODERS, OPTIMIZER  # noqa: E402  (the same decoders and optimizer)

MODES = ("forward", "backward", "step")


def _decoder(config: dict[str, int]) -> Any:
    import torch

    from lowering.examples import Decoder

    torch.manual_seed(0)
    return Decoder(**config)


def _batch(config: dict[str, int], batch: int) -> tuple[Any, Any]:
    import torch

    tokens = torch.randint(0, config["vocab"], (batch, config["seq"] + 1), generator=torch.Generator().manual_seed(batch))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _loss(logits: Any, labels: Any) -> Any:
    from torch.nn import functional as F

    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _peer(model: Any, mode: str, tokens: Any, labels: Any) -> Callable[[], Any]:
    """One call of a plain module (eager, compiled or DDP) on this rank's part of the batch."""
    import torch

    if mode == "forward":
        def forward() -> Any:
            with torch.no_grad():
                return model(tokens)
        return forward
    return _training(model, lambda: model(tokens), labels, mode)


def _training(model: Any, call: Callable[[], Any], labels: Any, mode: str) -> Callable[[], Any]:
    """One ``backward`` or ``step`` of ``model`` (``call()``: its output)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), **OPTIMIZER)

    def step() -> Any:
        loss = _loss(call(), labels)
        loss.backward()
        if mode == "step":
            optimizer.step()
        optimizer.zero_grad()
        return loss
    return step


def _module(config: dict[str, int], training: bool, world: int, tokens: Any, batch: int) -> Any:
    """A ParallelModule of the decoder on a ``(world,)`` mesh, planned for the ``cpu-gloo`` hardware."""
    from torch.export import Dim

    import lowering

    return lowering.parallelize(_decoder(config), (tokens,), dynamic_shapes=({0: Dim("batch")},), mesh=(world,),
                                training=training, constraints=[f"Eq(Mod(batch, {world}), 0)"], hardware="cpu-gloo",
                                batch_sizes=[batch])


def _shapecore(pm: Any, mode: str, tokens: Any, labels: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(one call of ``pm`` on the global batch cut ahead, its entry check alone)."""
    import torch
    from torch.distributed.tensor import distribute_tensor

    inputs = pm.shard_inputs(tokens)
    if mode == "forward":
        def forward() -> Any:
            with torch.no_grad():
                return pm(*inputs)
        return forward, lambda: pm.entry.check(inputs)
    with torch.no_grad():
        placements = pm(*inputs).placements
    if all(p.is_replicate() or (p.is_shard() and p.dim < labels.dim()) for p in placements):
        labels = distribute_tensor(labels, pm.groups.device_mesh, placements, src_data_rank=None)  # no communication
        return _training(pm, lambda: pm(*inputs), labels, mode), lambda: pm.entry.check(inputs)
    # logits split on the vocabulary, or partial: the loss on the whole logits
    return _training(pm, lambda: pm(*inputs).full_tensor(), labels, mode), lambda: pm.entry.check(inputs)


def _variants(config: dict[str, int], mode: str, world: int, batch: int, rank: int, built: dict[bool, dict[str, Any]]
              ) -> dict[str, Callable[[], Any]]:
    """Each variant's call in ``mode``; the modules are made once per decoder and kind (``built``)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    tokens, labels = _batch(config, batch)
    part = slice(rank * batch // world, (rank + 1) * batch // world)
    mine, my_labels = tokens[part].contiguous(), labels[part].contiguous()
    training = mode != "forward"
    if training not in built:
        built[training] = {"shapecore": _module(config, training, world, tokens, batch), "eager": _decoder(config),
                           "compiled": torch.compile(_decoder(config), dynamic=True)}
        if training:
            built[training]["ddp"] = DistributedDataParallel(_decoder(config))
    models = built[training]
    ours, entry = _shapecore(models["shapecore"], mode, tokens, labels)
    calls = {"shapecore": ours, "entry check": entry}
    calls.update((name, _peer(model, mode, mine, my_labels)) for name, model in models.items() if name != "shapecore")
    return calls


def _rank(rank: int, world: int, decoders: list[str], modes: list[str], batch: int, rounds: int, calls: int
          ) -> dict[tuple[str, str], dict[str, list[tuple[float, float]]]]:
    import torch
    import torch.distributed as dist

    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))  # Inductor's one-time start-up, paid by no variant
    results = {}
    for name in decoders:
        built: dict[bool, dict[str, Any]] = {}
        for mode in modes:
            variants = _variants(DECODERS[name], mode, world, batch, rank, built)
            for call in variants.values():  # warm-up: compiles, first buckets
                for _ in range(3):
                    call()
            times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
            for _ in range(rounds):
                for variant, call in variants.items():
                    dist.barrier()
                    for _ in range(calls):
                        wall, cpu = time.perf_counter(), time.thread_time()
                        call()
                        times[variant].append((time.perf_counter() - wall, time.thread_time() - cpu))
            results[name, mode] = times
    return results


def _spread(samples: list[float]) -> float:
    """Half the interquartile range over the median."""
    q1, q2, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / 2 / q2


def _report(world: int, results: list[dict[tuple[str, str], dict[str, list[tuple[float, float]]]]]) -> None:
    """One line per decoder, mode and variant: wall and CPU medians (the slowest rank's), spread, ratios."""
    for key in results[0]:
        medians = {v: [max(statistics.median(t[i] for t in r[key][v]) for r in results) for i in (0, 1)]
                   for v in results[0][key]}
        for variant, (wall, cpu) in medians.items():
            spread = max(_spread([t[0] for t in r[key][variant]]) for r in results)
            ratios = [f"{wall / medians[peer][0]:.2f} {cpu / medians[peer][1]:.2f}"
                      if variant == "shapecore" and peer in medians else "" for peer in ("compiled", "ddp")]
            print(f"{key[0]:>8} {key[1]:>8} {world:>5} {variant:>12} {1e6 * wall:>8.0f} {spread:>6.2f} {1e6 * cpu:>8.0f} "
                  f"{ratios[0]:>14} {ratios[1]:>14}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decoders", default="tiny,small", help=f"a subset of {','.join(DECODERS)} (default tiny,small)")
    parser.add_argument("--ranks", default="1,2", help="numbers of gloo processes (default 1,2)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"a subset of {','.join(MODES)}")
    parser.add_argument("--batch", type=int, default=8, help="global batch size (default 8)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per variant and round (default 10)")
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads per rank (OMP_NUM_THREADS; default: launch's, cores // ranks)")
    args = parser.parse_args(argv)
    decoders = [d for d in args.decoders.split(",") if d]
    modes = [m for m in args.modes.split(",") if m]
    use_fresh_inductor_cache("bench-overhead-")
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from lowering.launch import launch

    start, load = time.monotonic(), os.getloadavg()
    print(f"decoders {', '.join(f'{d} {DECODERS[d]}' for d in decoders)}; global batch {args.batch}; "
          f"{args.rounds} interleaved rounds of {args.calls} calls per variant; AdamW {OPTIMIZER}; "
          f"threads per rank {os.environ.get('OMP_NUM_THREADS', 'cores // ranks')}")
    print("µs per call: wall-clock (its spread) and this thread's CPU time; shapecore / peer: wall, CPU")
    print(f"{'decoder':>8} {'mode':>8} {'ranks':>5} {'variant':>12} {'wall':>8} {'spread':>6} {'cpu':>8} "
          f"{'/ compiled':>14} {'/ ddp':>14}")
    for world in (int(r) for r in args.ranks.split(",") if r):
        _report(world, launch(functools.partial(_rank, world=world, decoders=decoders, modes=modes, batch=args.batch,
                                                rounds=args.rounds, calls=args.calls), world, timeout=3000))
    print(f"load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"total {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
