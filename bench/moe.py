"""Benchmark: training an 8-expert top-2 MoE decoder expert parallel, against data parallel, FSDP2 and a padded peer.

The model: transformers' Mixtral (random init, seeded: the same weights everywhere; 8 experts,
2 per token; ``--layers`` decoder layers, hidden size 64, experts' intermediate size 128, 4
attention heads, 2 KV heads, vocabulary 256, sequence 16), its experts stacked ``(8, ...)``, which
on the CPU trace to transformers' ``grouped_mm_fallback``. Trained with AdamW
(:data:`bench.training.OPTIMIZER`) and next-token cross-entropy on ``n`` gloo processes, mesh
``(n,)``, by

(a) ``shapecore``: ``lowering.parallelize(..., training=True)`` planned for the ``cpu-gloo``
    hardware at the benchmark's batch sizes (the planner's choice), the loss on the output's
    pieces (as ``bench/training.py`` computes it);
(b) ``shapecore-ep``: the same with expert parallelism forced (``ExpertParallel(0)``: each rank
    holds and computes 8/n experts, its tokens' rows dispatched with data-dependent split sizes);
(c) ``shapecore-dp``: the same with data parallelism forced (``RequireShard("batch", 0)``);
    ``shapecore-dp-ep``: both (the batch split and the experts split on the one axis, as expert
    parallelism usually borrows the data-parallel axis): each rank routes its own tokens
    (transformers' routing chain, which sorts the routed rows, run per token:
    :mod:`planner.problem.per_token`) and, with ``-ep``, dispatches all its rows to their
    expert's rank. Neither runs in the default set (one more compile each); a variant the
    planner refuses is printed as refused;
(d) ``ddp``: ``DistributedDataParallel``, each rank on its 1/n of the batch (eager);
(e) ``fsdp2``: ``fully_shard`` on each decoder layer and on the model, each rank on its 1/n;
(f) ``padded-ep``: expert parallel by hand in eager PyTorch, as a compiler-friendly MoE does it:
    every rank sends each expert a fixed capacity of ``ceil(factor · tokens · 2 / 8)`` rows
    (``--capacity-factor``; rows past it are dropped, their expert's contribution zero; unused
    slots are zeros, computed all the same) with an all_to_all of equal split sizes, each rank
    computing its 8/n experts on ``n · capacity`` rows each and sending the results back; the
    other parameters' gradients all-reduced (one flat all_reduce).

At each batch size the variants' timed steps alternate in rounds (each round: every variant in
turn runs ``--steps`` steps after a barrier), so load from other processes hits them alike.
Reported per ranks, batch size and variant: the median step time (forward, loss, backward,
AdamW step, ``zero_grad``), wall-clock and this thread's CPU time (CPU leaves out waiting for a
core, which on a loaded machine is most of the wall time, and waiting for a peer), the slowest
rank's median of each, and the ratio of the wall time to the fastest peer's (the peers: ddp,
fsdp2, padded-ep); per rank (the fullest): the expert weights it holds (MiB, and the fraction of
all experts), what it holds between steps (parameters and AdamW state, local pieces), and its
peak (that plus the highest net allocation the profiler sees during one step, at op
granularity: gradients and activations; DDP's buckets counted as held); the first step's loss
against one device (padded-ep drops rows, so it differs by its drops; the fraction dropped is
printed). Inductor compiles per shapecore variant are printed too.

``--plan-time`` instead times one ``plan_module(training=True)`` call (``bench/planner.py``'s
:func:`~bench.planner.timed_plan`) on transformers' DeepSeek-V3 on the meta device (bf16,
sequence 2048, its own dims but ``--plan-layers`` layers, the first ``--plan-dense`` dense (3), and
``--plan-experts`` routed experts, 8 per token, one shared) on mesh ``--plan-mesh``, per phase,
wall and CPU seconds.

    nice python bench/moe.py --ranks 2 --batch-sizes 8,32 --rounds 3    # a quick look
    nice python bench/moe.py                                             # 2 and 4 ranks, batches 8, 32, 128
    nice python bench/moe.py --plan-time                                 # 32 layers, 64 experts on (8, 8)

Progress goes to stderr, the table to stdout, the rows as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time
from typing import Any

# this directory holds a file named like the package it benchmarks: keep it off the import path,
# and import its sibling benchmarks through the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(_HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from bench import training  # noqa: E402
from bench.inductor_cache import use_fresh_inductor_cache  # noqa: E402
from bench.training import OPTIMIZER, _loss, _peak_step_bytes, _plan_summary, _Variant  # noqa: E402

VARIANTS = ("shapecore", "shapecore-ep", "shapecore-dp", "shapecore-dp-ep", "ddp", "fsdp2", "padded-ep")
DEFAULT_VARIANTS = ("shapecore", "shapecore-ep", "ddp", "fsdp2", "padded-ep")  # shapecore-dp: one more compile
PEERS = ("ddp", "fsdp2", "padded-ep")
EXPERTS, TOP_K, VOCAB, SEQ = 8, 2, 256, 16


def _progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _model(layers: int) -> Any:
    """The seeded tiny Mixtral, ``ids -> logits``."""
    import transformers

    from tests.models.zoo import FirstOutput

    config = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=SEQ, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
        use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    return FirstOutput(transformers.MixtralForCausalLM(config)).eval()


def _batch(batch: int) -> tuple[Any, Any]:
    tokens = torch.randint(0, VOCAB, (batch, SEQ + 1), generator=torch.Generator().manual_seed(batch))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _local(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def expert_bytes(model: Any) -> int:
    """Bytes of this rank's pieces of the experts' weights (parameters named ``*experts*``)."""
    return sum(_local(p).nbytes for n, p in model.named_parameters() if ".experts." in f".{n}.")


def capacity(tokens: int, factor: float, experts: int = EXPERTS, top_k: int = TOP_K) -> int:
    """Rows each rank sends each expert in the padded peer: ``ceil(factor · tokens · top_k / experts)``."""
    return math.ceil(factor * tokens * top_k / experts)


class _Eager(_Variant):
    """An eager model on this rank's 1/world of the batch (DDP, FSDP2 and the padded peer)."""

    def __init__(self, name: str, model: Any, rank: int, world: int) -> None:
        self.name, self.model, self.rank, self.world = name, model, rank, world
        self.optimizer = torch.optim.AdamW(model.parameters(), **OPTIMIZER)

    def step(self, tokens: Any, labels: Any) -> float:
        loss = _loss(self.model(tokens.chunk(self.world)[self.rank]), labels.chunk(self.world)[self.rank])
        self.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()
        loss = loss.detach()
        dist.all_reduce(loss)
        return loss.item() / self.world

    def backward(self, loss: Any) -> None:
        loss.backward()  # DDP and FSDP2 average the gradients: the global mean's


class _DDP(_Eager):
    def held_bytes(self) -> int:
        return super().held_bytes() + sum(p.nbytes for p in self.model.parameters())  # the gradient buckets


class PaddedExperts(nn.Module):
    """Stand-in for a Mixtral layer's ``experts``: this rank's ``E/world`` of them (a copy of their
    weights), tokens dispatched to them and combined back with all_to_alls padded to a fixed
    capacity per expert (:func:`capacity`); ``dropped`` counts [rows dropped, rows routed]."""

    def __init__(self, experts: nn.Module, rank: int, world: int, factor: float, dropped: list[int]) -> None:
        super().__init__()
        self.world, self.factor, self.dropped, self.experts = world, factor, dropped, experts.num_experts
        self.local = experts.num_experts // world
        mine = slice(rank * self.local, (rank + 1) * self.local)
        self.gate_up_proj = nn.Parameter(experts.gate_up_proj.detach()[mine].clone())
        self.down_proj = nn.Parameter(experts.down_proj.detach()[mine].clone())
        self.act_fn = experts.act_fn

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        from shapecore.torch.private import functional_collectives as funcol

        tokens, width = hidden.shape
        k, world, local = top_k_index.shape[1], self.world, self.local
        cap = capacity(tokens, self.factor, self.experts, k)
        expert = top_k_index.reshape(-1)
        order = torch.argsort(expert, stable=True)
        sorted_expert = expert[order]
        counts = torch.bincount(expert, minlength=self.experts)
        position = torch.arange(expert.numel()) - (torch.cumsum(counts, 0) - counts)[sorted_expert]
        keep = position < cap
        self.dropped[0] += int((~keep).sum())
        self.dropped[1] += expert.numel()
        slot = (sorted_expert * cap + position)[keep]
        row = (order // k)[keep]
        send = hidden.new_zeros(self.experts * cap, width).index_add(0, slot, hidden[row])
        # [source rank, local expert, cap]
        received = funcol.all_to_all_single_autograd(send, None, None, dist.group.WORLD)
        x = received.view(world, local, cap, width).transpose(0, 1).reshape(local, world * cap, width)
        gate, up = torch.bmm(x, self.gate_up_proj.transpose(1, 2)).chunk(2, dim=-1)
        y = torch.bmm(self.act_fn(gate) * up, self.down_proj.transpose(1, 2))
        y = y.view(local, world, cap, width).transpose(0, 1).reshape(self.experts * cap, width)
        back = funcol.all_to_all_single_autograd(y, None, None, dist.group.WORLD)
        weight = top_k_weights.reshape(-1)[order][keep, None]
        return hidden.new_zeros(tokens, width).index_add(0, row, back[slot] * weight)


class _PaddedEP(_Eager):
    """The hand-written expert-parallel peer: the loss scaled by ``1/world`` (each expert's gradient
    then sums every rank's share), the other gradients summed with one flat all_reduce."""

    def __init__(self, layers: int, rank: int, world: int, factor: float) -> None:
        self.dropped = [0, 0]
        model = _model(layers)
        for layer in model.m.model.layers:
            layer.mlp.experts = PaddedExperts(layer.mlp.experts, rank, world, factor, self.dropped)
        super().__init__("padded-ep", model, rank, world)
        self.shared = [p for n, p in model.named_parameters() if ".experts." not in f".{n}."]

    def backward(self, loss: Any) -> None:
        (loss / self.world).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in self.shared])
        dist.all_reduce(flat)
        for p, g in zip(self.shared, flat.split([p.numel() for p in self.shared])):
            p.grad.copy_(g.view_as(p))


def _fsdp2(layers: int, rank: int, world: int, mesh: Any) -> _Eager:
    from torch.distributed.fsdp import fully_shard

    model = _model(layers)
    for layer in model.m.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _Eager("fsdp2", model, rank, world)


class _Shapecore(training._Shapecore):
    """``lowering.parallelize`` of the Mixtral (``bench/training.py``'s step: the loss on the output's pieces)."""

    def __init__(self, name: str, layers: int, mesh: Any, batch_sizes: list[int], constraints: tuple[Any, ...]) -> None:
        from torch.export import Dim

        import lowering

        self.name = name
        self.model = lowering.parallelize(
            _model(layers), (_batch(batch_sizes[0])[0],), dynamic_shapes=({0: Dim("batch")},), mesh=mesh,
            training=True, constraints=[f"Eq(Mod(batch, {mesh.size()}), 0)"], hardware="cpu-gloo",
            batch_sizes=batch_sizes, placement_constraints=constraints)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), **OPTIMIZER)


def _one_device(layers: int, batch_sizes: list[int]) -> dict[int, float]:
    """The losses of training steps on one device at ``batch_sizes`` in turn (the variants' first steps)."""
    model = _model(layers)
    optimizer = torch.optim.AdamW(model.parameters(), **OPTIMIZER)
    losses = {}
    for batch in batch_sizes:
        tokens, labels = _batch(batch)
        loss = _loss(model(tokens), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses[batch] = loss.item()
    return losses


def _rank(rank: int, world: int, layers: int, batch_sizes: list[int], steps: int, rounds: int,
          variants: tuple[str, ...], factor: float) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel

    from planner import ExpertParallel, PlacementConflict, RequireShard

    say = _progress if rank == 0 else (lambda line: None)
    mesh = init_device_mesh("cpu", (world,))
    torch.compile(lambda x: (x * 2).sum())(torch.ones(4))  # Inductor's one-time start-up, paid by no variant
    makers = {
        "shapecore": lambda: _Shapecore("shapecore", layers, mesh, batch_sizes, ()),
        "shapecore-ep": lambda: _Shapecore("shapecore-ep", layers, mesh, batch_sizes, (ExpertParallel(0),)),
        "shapecore-dp": lambda: _Shapecore("shapecore-dp", layers, mesh, batch_sizes, (RequireShard("batch", 0),)),
        "shapecore-dp-ep": lambda: _Shapecore("shapecore-dp-ep", layers, mesh, batch_sizes,
                                              (RequireShard("batch", 0), ExpertParallel(0))),
        "ddp": lambda: _DDP("ddp", DistributedDataParallel(_model(layers), gradient_as_bucket_view=True), rank, world),
        "fsdp2": lambda: _fsdp2(layers, rank, world, mesh),
        "padded-ep": lambda: _PaddedEP(layers, rank, world, factor),
    }
    built, refused = {}, {}
    for name in variants:
        say(f"{world} ranks: building {name}")
        try:
            built[name] = makers[name]()
        except PlacementConflict as refusal:  # every rank plans alike: refused on all of them
            refused[name] = str(refusal)
    rules = {name: sorted({d.rule for d in v.model.plan.decisions.values() if "grouped_mm" in d.node})
             for name, v in built.items() if name.startswith("shapecore")}
    plans = {name: f"{_plan_summary(v.model.plan)}; experts' rules {rules[name]}"
             for name, v in built.items() if name.startswith("shapecore")}
    losses = {name: {} for name in built}
    expected = _one_device(layers, batch_sizes)
    for batch in batch_sizes:  # first steps (compiles): every variant from the same weights, against one device
        tokens, labels = _batch(batch)
        for name, variant in built.items():
            say(f"{world} ranks: first step of {name} at batch {batch}")
            losses[name][batch] = variant.step(tokens, labels)
    if "padded-ep" in built:
        built["padded-ep"].dropped[:] = [0, 0]
    times = {name: {b: [] for b in batch_sizes} for name in built}
    memory = {name: {} for name in built}
    for batch in batch_sizes:
        tokens, labels = _batch(batch)
        for name, variant in built.items():
            memory[name][batch] = _peak_step_bytes(variant, tokens, labels)
        for r in range(rounds):
            say(f"{world} ranks: batch {batch}, round {r + 1} of {rounds}")
            for name, variant in built.items():
                dist.barrier()
                for _ in range(steps):
                    wall, cpu = time.perf_counter(), time.thread_time()
                    variant.step(tokens, labels)
                    times[name][batch].append((time.perf_counter() - wall, time.thread_time() - cpu))
    total_experts = expert_bytes(_model(layers))
    return {"times": times, "memory": memory, "held": {n: v.held_bytes() for n, v in built.items()},
            "experts": {n: expert_bytes(v.model) for n, v in built.items()}, "total_experts": total_experts,
            "losses": losses, "expected": expected, "compiles": {n: v.compiles for n, v in built.items()},
            "plans": plans, "refused": refused, "dropped": built["padded-ep"].dropped if "padded-ep" in built else None}


def rows(world: int, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per batch size and variant from every rank's results: the slowest rank's medians,
    the fullest rank's bytes, the ratio of the wall time to the fastest peer's."""
    first = results[0]
    out = []
    for batch in next(iter(first["times"].values())):
        wall = {n: max(statistics.median(t[0] for t in r["times"][n][batch]) for r in results) for n in first["times"]}
        cpu = {n: max(statistics.median(t[1] for t in r["times"][n][batch]) for r in results) for n in first["times"]}
        peers = [wall[n] for n in wall if n in PEERS]
        for name in wall:
            out.append({
                "ranks": world, "batch": batch, "variant": name, "wall_ms": 1e3 * wall[name], "cpu_ms": 1e3 * cpu[name],
                "over_fastest_peer": wall[name] / min(peers) if peers else None,
                "expert_mib": max(r["experts"][name] for r in results) / 2**20,
                "expert_fraction": max(r["experts"][name] for r in results) / first["total_experts"],
                "held_mib": max(r["held"][name] for r in results) / 2**20,
                "peak_mib": max(r["memory"][name][batch] for r in results) / 2**20,
                "loss_error": abs(first["losses"][name][batch] - first["expected"][batch]) / first["expected"][batch],
                "compiles": first["compiles"][name]})
    return out


def _print_table(world: int, results: list[dict[str, Any]], table: list[dict[str, Any]]) -> None:
    first = results[0]
    for name, summary in first["plans"].items():
        print(f"{world} ranks, {name} plan: {summary}")
    for name, refusal in first["refused"].items():
        print(f"{world} ranks, {name} refused (not measured): {refusal}")
    if first["dropped"]:
        dropped, routed = (sum(r["dropped"][i] for r in results) for i in (0, 1))
        print(f"{world} ranks, padded-ep dropped {dropped} of {routed} routed rows in the timed steps ({dropped / routed:.1%})")
    for row in table:
        ratio = f"{row['over_fastest_peer']:.2f}" if row["over_fastest_peer"] else "-"
        print(f"{row['ranks']:>5} {row['batch']:>5} {row['variant']:>12} {row['wall_ms']:>8.1f} {row['cpu_ms']:>8.1f} "
              f"{ratio:>7} {row['expert_mib']:>7.3f} {row['expert_fraction']:>5.2f} {row['held_mib']:>7.2f} "
              f"{row['peak_mib']:>7.2f} {row['loss_error']:>8.1e} {row['compiles']:>4}", flush=True)


def _train(args: argparse.Namespace) -> int:
    from lowering.launch import launch

    if args.inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.inductor_cache
    else:
        use_fresh_inductor_cache("bench-moe-")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    variants = tuple(v for v in args.variants.split(",") if v)
    start, load = time.monotonic(), os.getloadavg()
    print(f"Mixtral, {args.layers} layers, {EXPERTS} experts, top-{TOP_K}, hidden 64, sequence {SEQ}; AdamW {OPTIMIZER}; "
          f"batch sizes {batch_sizes}; {args.rounds} interleaved rounds of {args.steps} steps; "
          f"{args.threads} thread(s) per rank; padded-ep capacity factor {args.capacity_factor}")
    print("ms per step: wall-clock and CPU (the slowest rank's medians); / peer: wall over the fastest peer's "
          f"({', '.join(PEERS)}); experts MiB and fraction of all experts, held (params + AdamW state) and peak "
          "(held + the step's highest net allocation) MiB on the fullest rank; first-step loss vs one device")
    print(f"{'ranks':>5} {'batch':>5} {'variant':>12} {'wall':>8} {'cpu':>8} {'/ peer':>7} {'expMiB':>7} {'frac':>5} "
          f"{'held':>7} {'peak':>7} {'loss err':>8} {'comp':>4}", flush=True)
    table = []
    for world in (int(r) for r in args.ranks.split(",") if r):
        results = launch(functools.partial(_rank, world=world, layers=args.layers, batch_sizes=batch_sizes,
                                           steps=args.steps, rounds=args.rounds, variants=variants,
                                           factor=args.capacity_factor), world, timeout=3000)
        rows_here = rows(world, results)
        _print_table(world, results, rows_here)
        table += rows_here
    print(f"load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores; "
          f"total {time.monotonic() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


def _plan_time(args: argparse.Namespace) -> int:
    import transformers

    from bench.planner import _mesh, timed_plan
    from planner import PlanOptions
    from tests.models.zoo import FirstOutput

    config = transformers.DeepseekV3Config(num_hidden_layers=args.plan_layers, n_routed_experts=args.plan_experts,
                                           first_k_dense_replace=args.plan_dense, max_position_embeddings=2048,
                                           use_cache=False)
    with torch.device("meta"):
        model = FirstOutput(transformers.DeepseekV3ForCausalLM(config)).to(torch.bfloat16)
        tokens = torch.randint(0, config.vocab_size, (16, 2048))
    options = PlanOptions(constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=[8, 64, 512], time_limit=args.time_limit)
    load = os.getloadavg()[0]
    _progress(f"planning DeepSeek-V3, {args.plan_layers} layers, {args.plan_experts} experts on {args.plan_mesh}")
    row = timed_plan(model, tokens, _mesh(args.plan_mesh), options)
    row.update(layers=args.plan_layers, experts=args.plan_experts, dense=args.plan_dense, mesh=args.plan_mesh)
    print(f"DeepSeek-V3 ({args.plan_layers} layers, the first {args.plan_dense} dense, {args.plan_experts} routed experts, bf16, sequence 2048) planned "
          f"for training on {args.plan_mesh}, batch costed at {options.batch_sizes}; load {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores")
    for phase in ("trace", "build", "bounds", "solve", "assemble", "whole"):
        print(f"{phase:>9} {row[f'{phase}_s']:8.1f} s wall {row[f'{phase}_cpu_s']:8.1f} s CPU")
    print(f"worst regret {row['reported_worst']:.3f}; shared layers {row['shared_layers']}; peak RSS "
          f"{row['peak_rss_gib']:.2f} GiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1, default=str)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,4", help="numbers of gloo processes, each on a mesh (n,) (default 2,4)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    parser.add_argument("--batch-sizes", default="8,32,128", help="global batch sizes (default 8,32,128)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per variant and round (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size (default 5)")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"a subset of {','.join(VARIANTS)} (default {','.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--inductor-cache", help="Inductor's cache directory (default: a fresh one; a kept one "
                        "spares a rerun the C++ compiles, not the counted compiles)")
    parser.add_argument("--capacity-factor", type=float, default=1.25,
                        help="padded-ep's rows per expert and rank over the even share tokens·2/8 (default 1.25)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (default 1: a loaded machine)")
    parser.add_argument("--plan-time", action="store_true", help="time planning DeepSeek-V3 instead of training")
    parser.add_argument("--plan-layers", type=int, default=32, help="with --plan-time: layers (default 32)")
    parser.add_argument("--plan-experts", type=int, default=64, help="with --plan-time: routed experts (default 64)")
    parser.add_argument("--plan-dense", type=int, default=3,
                        help="with --plan-time: leading dense layers (default 3, DeepSeek-V3's; 0: every layer MoE)")
    parser.add_argument("--plan-mesh", default="8x8", help="with --plan-time: the mesh (default 8x8)")
    parser.add_argument("--time-limit", type=float, default=600.0, help="with --plan-time: seconds per ILP solve")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    return _plan_time(args) if args.plan_time else _train(args)


if __name__ == "__main__":
    sys.exit(main())
