"""Benchmark: sharding plans for a LLaMA-3-8B-shaped decoder, built and solved, against peers.

The model (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP; dim 4096, 32 heads, 8 KV
heads, FFN 14336, vocabulary 128256, sequence 2048, bf16) is built on the meta device, so it
costs no memory. The batch is dynamic (``Eq(Mod(batch, 8), 0)``) and costed at batch sizes
{8, 64, 512}. For every case (layers × forward/training × mesh) the script prints:

* graph nodes, one-hot decisions after clustering, ILP variables and constraints;
* build seconds (read graph, decide obligations, build the problem and the ILP; tracing, through
  ``planner.trace_module`` at the largest batch size as ``plan_module`` traces, is excluded and
  reported per trace), the seconds to bound each batch size's optimum (LP
  relaxation, what ``regret="bound"`` does) and to solve it exactly (``regret="exact"``);
* for each objective (``expected``, ``regret``, ``worst-regret``): solve seconds and the
  worst regret across the batch sizes against the exact optima; for ``regret`` also the
  total ``planner.plan`` time (build + bounds + solve) and the worst regret the plan reports;
* peers in the same run: the single-size plan (solved at batch 8 alone, as a planner that
  sees one example size does) and its worst regret; the greedy baseline's cost relative to
  the ILP; optionally (``--peer-unclustered``) the same ILP without clustering and follower
  merging, its build+solve seconds and the speed-up; optionally (``--ranges``) the least worst
  regret that plans one per batch size, the parameters placed alike in all (as a module holds
  them, its optimizer state with them), can reach: no plan per batch range sharing its
  parameters does better (``IlpModel.worst_regret_per_range``).

    python bench/planner.py                                   # every case (minutes)
    python bench/planner.py --layers 2 --meshes 8 2x4         # a quick look
    python bench/planner.py --layers 32 --modes training --meshes 8x8 --peer-unclustered

``--whole`` times whole ``plan_module(training=True, objective="regret")`` calls instead, per
phase (trace, build, bounds, solve), wall and CPU seconds; ``--peer-autoparallel PATH`` adds
meta-pytorch/autoparallel (a checkout at PATH, never a dependency; skipped with a message when
absent; it needs ``pulp``) on its own ``autoparallel._testing.models.llama3`` with the same dims,
on a fake process group, its trace, build and solve seconds beside ours:

    python bench/planner.py --whole --layers 32 --meshes 8x8 2x4x8 --peer-autoparallel ../autoparallel

``plan_module`` traces the decoder's first blocks and copies the rest (its default path; a line
says which blocks were copied); ``--trace-whole`` plans with ``plan_module(share_layers=False)``,
every block traced; ``--model 70b`` takes LLaMA-3-70B's dims; the table gives the peak RSS:

    python bench/planner.py --whole --model 70b --layers 80 --meshes 8x8 4x8x8
    python bench/planner.py --model 70b --layers 80 --modes training --meshes 8x8 --ranges --regret-time-limit 900
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import signal
import sys
import time
import warnings
from multiprocessing.connection import Connection
from typing import Any

# this file is named like the package it benchmarks: keep its directory off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402

import planner  # noqa: E402
from planner import Mesh, PlanOptions  # noqa: E402
from planner.api import prepare  # noqa: E402
from planner.greedy import GreedyModel  # noqa: E402
from planner.ilp import IlpModel, solve_mean_regret  # noqa: E402

SEQ = 2048


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = rope(self.wq(x).view(b, t, self.heads, self.head_dim), cos, sin)
        k = rope(self.wk(x).view(b, t, self.kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim)
        repeat = self.heads // self.kv_heads
        k = k[:, :, :, None, :].expand(b, t, self.kv_heads, repeat, self.head_dim).reshape(b, t, self.heads, self.head_dim)
        v = v[:, :, :, None, :].expand(b, t, self.kv_heads, repeat, self.head_dim).reshape(b, t, self.heads, self.head_dim)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """LLaMA-3-8B shapes with ``layers`` blocks (other dims: :data:`MODELS`)."""

    def __init__(self, layers: int, dim: int = 4096, heads: int = 32, kv_heads: int = 8, hidden: int = 14336,
                 vocab: int = 128256, seq: int = SEQ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, heads, kv_heads, hidden) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inverse = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), inverse)
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], -1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


MODELS = {"8b": {}, "70b": {"dim": 8192, "heads": 64, "kv_heads": 8, "hidden": 28672}}
"""``Llama`` keywords per model: LLaMA-3-8B (the defaults) and LLaMA-3-70B."""

PEER_MODELS = {"8b": {"dim": 4096, "n_heads": 32, "multiple_of": 1024}, "70b": {"dim": 8192, "n_heads": 64, "multiple_of": 4096}}
"""The peer's ``TransformerModelArgs`` per model, the same dims (its FFN: 14336 and 28672)."""


def _trace(layers: int, training: bool, options: PlanOptions, dims: dict | None = None) -> tuple[planner.ModuleTrace, float]:
    """The decoder (``Llama(layers, **dims)``) traced as ``plan_module`` traces it (:func:`planner.trace_module`,
    at the largest batch size costed), and the seconds that took."""
    with torch.device("meta"):
        model = Llama(layers, **(dims or {})).to(torch.bfloat16)
        tokens = torch.randint(0, 128256, (16, SEQ))
    start = time.perf_counter()
    traced = planner.trace_module(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=training,
                                  options=options)
    return traced, time.perf_counter() - start


def _solve(traced: planner.ModuleTrace, mesh: Mesh, options: PlanOptions) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare(traced.graph, mesh, shape_env=traced.traced.env, dims=traced.names,
                           range_origins=traced.traced.range_origins, options=options)
    problem = prepared.problem
    model = IlpModel(problem)
    build = time.perf_counter() - start
    solution = model.solve(problem.points.weights, time_limit=options.time_limit)
    return {"problem": problem, "model": model, "build": build, "solution": solution}


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def run_case(traced: planner.ModuleTrace, mesh: Mesh, options: PlanOptions, args) -> dict:
    ours = _solve(traced, mesh, options)
    problem, model, expected = ours["problem"], ours["model"], ours["solution"]
    weights = problem.points.weights
    eye = np.eye(len(weights))
    bounds, bounds_s = _timed(lambda: np.array([model.lower_bound(eye[k]).value for k in range(len(weights))]))
    mean, mean_s = _timed(lambda: solve_mean_regret(model, weights, bounds, time_limit=options.time_limit))
    singles, exact_s = _timed(lambda: [model.solve(eye[k], time_limit=options.time_limit) for k in range(len(weights))])
    optima = np.array([s.objective for s in singles])
    minimax, minimax_s = _timed(lambda: model.solve_worst_regret(weights, bounds, time_limit=args.regret_time_limit))

    def regret(solution) -> np.ndarray:
        return problem.evaluate(solution.choices, weights).total / optima

    greedy = GreedyModel(problem).solve(weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for_regret = dataclasses.replace(traced, options=dataclasses.replace(options, objective="regret"))
        plan, plan_s = _timed(lambda: for_regret.plan(mesh))
    row = {
        "nodes": problem.graph.fx_node_count,
        "decisions": len(problem.groups),
        "variables": expected.variables,
        "constraints": expected.constraints,
        "build_s": ours["build"],
        "bounds_s": bounds_s,
        "bounds_over_optima": (bounds / optima).tolist(),
        "expected_solve_s": expected.solve_seconds,
        "expected_objective_s": expected.objective,
        "expected_gap": expected.gap,
        "expected_regret": regret(expected).tolist(),
        "regret_solve_s": mean_s,
        "regret_plan_s": ours["build"] + bounds_s + mean_s,
        "regret_regret": regret(mean).tolist(),
        "regret_reported_worst": float((problem.evaluate(mean.choices, weights).total / bounds).max()),
        "regret_gap": mean.gap,
        "plan_call_s": plan_s,
        "plan_call_reported_worst": plan.worst_regret,
        "worst_regret_solve_s": minimax_s,
        "worst_regret_regret": regret(minimax).tolist(),
        "worst_regret_gap": minimax.gap,
        "exact_optima_s": exact_s,
        "single_size_regret": regret(singles[0]).tolist(),  # solved at the first (smallest) size alone
        "greedy_over_ilp": greedy.objective / expected.objective,
    }
    if args.ranges:
        ranges = model.worst_regret_per_range(weights, optima, [(k,) for k in range(len(weights))],
                                              time_limit=args.regret_time_limit)
        row["ranges_worst_regret"] = max(float(problem.evaluate(plan, eye[k]).total[k] / optima[k])
                                         for k, plan in enumerate(ranges.choices))
        row["ranges_bound"], row["ranges_optimal"], row["ranges_s"] = ranges.bound, ranges.optimal, ranges.solve_seconds
    if args.peer_unclustered:
        flat = _solve(traced, mesh, dataclasses.replace(options, cluster=False, merge_followers=False))
        row["unclustered_build_s"] = flat["build"]
        row["unclustered_solve_s"] = flat["solution"].solve_seconds
        row["unclustered_variables"] = flat["solution"].variables
        row["unclustered_objective_s"] = flat["solution"].objective
        row["speedup"] = (flat["build"] + flat["solution"].solve_seconds) / (ours["build"] + expected.solve_seconds)
    return row


# -- the peer: meta-pytorch/autoparallel on its own LLaMA-3 definition ---------------------------------


def _cpu() -> float:
    """CPU seconds of this process and of the child processes it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _peer_seconds(path: str, layers: int, shape: tuple[int, ...], model: str = "8b") -> dict:
    """autoparallel (a checkout at ``path``) on its ``_testing.models.llama3`` with ``model``'s dims, traced,
    built and solved on a fake process group of ``shape``: wall and CPU seconds per phase, and its peak resident memory.

    CPU seconds include waited child processes (PuLP runs its CBC solver as one).
    Runs in a child process (:func:`_run_peer`): the fake process group, the patched CUDA queries
    (as autoparallel's own tests patch them: an H100 node of 8; the mesh and tensors are on the
    CPU, where this torch has no CUDA) and its config stay there.
    """
    sys.path.insert(0, path)
    from unittest import mock

    import torch.distributed as dist
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs
    from autoparallel.api import AutoParallel
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor.placement_types import Replicate, Shard

    props = type("Props", (), {"major": 9, "minor": 0, "name": "H100", "total_memory": 80 * 2**30,
                               "multi_processor_count": 132})()
    patches = [mock.patch("torch.cuda.device_count", lambda: 8),
               mock.patch("torch.cuda.get_device_name", lambda *a, **k: "H100"),
               mock.patch("torch.cuda.get_device_capability", lambda *a, **k: (9, 0)),
               mock.patch("torch.cuda.get_device_properties", lambda *a, **k: props),
               mock.patch("torch.cpu.get_device_name", lambda *a, **k: "H100", create=True)]  # its cost model's device
    for patch in patches:
        patch.start()
    world = int(np.prod(shape))
    dist.init_process_group("fake", store=dist.HashStore(), rank=0, world_size=world)
    names = {1: ("dp",), 2: ("dp", "tp"), 3: ("pp", "dp", "tp")}[len(shape)]
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", shape, mesh_dim_names=names)
    args = TransformerModelArgs(**PEER_MODELS[model], n_layers=layers, n_kv_heads=8, ffn_dim_multiplier=1.3,
                                rope_theta=500000, vocab_size=128256, max_seq_len=SEQ)
    with torch.device("meta"):
        model = Transformer(args)

    def input_fn():
        return torch.randint(0, 128256, (64, SEQ), device="cpu")  # batch 64, as ours is costed at (among others)

    clock: dict[str, float] = {}
    original = AutoParallel.build_model_graph

    def build_model_graph(self):  # the trace, timed apart from the rest of __enter__ (the build)
        start = (time.perf_counter(), _cpu())
        original(self)
        clock["trace_s"], clock["trace_cpu_s"] = time.perf_counter() - start[0], _cpu() - start[1]

    AutoParallel.build_model_graph = build_model_graph
    start = (time.perf_counter(), _cpu())
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with AutoParallel(model, input_fn, mesh, policy, repeated_subgraphs=True) as autop:
        autop.add_parameter_memory_constraint(low=None, high=None)
        placement = (Shard(0),) + (Replicate(),) * (len(shape) - 1)
        autop.add_input_constraints([placement])
        autop.add_output_constraints([placement])
        built = (time.perf_counter(), _cpu())
        autop.optimize_placement()
        solved = (time.perf_counter(), _cpu())
    clock["build_s"] = built[0] - start[0] - clock["trace_s"]
    clock["build_cpu_s"] = built[1] - start[1] - clock["trace_cpu_s"]
    clock["solve_s"], clock["solve_cpu_s"] = solved[0] - built[0], solved[1] - built[1]
    clock["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # its process's own: PuLP's CBC apart
    return clock


def _run_peer(path: str, layers: int, shape: tuple[int, ...], model: str = "8b") -> dict | str:
    """:func:`_peer_seconds` in a fresh process, or why it could not run: its error, or how its process
    ended when it died without one (the system's out-of-memory killer ends it by SIGKILL, as it did
    autoparallel's on the 32-layer graph on (2, 4, 8) on a 24 GiB machine)."""
    import multiprocessing

    if not os.path.isdir(os.path.join(path, "autoparallel")):
        return f"no autoparallel checkout at {path} (git clone meta-pytorch/autoparallel there)"
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_peer_child, args=(sending, path, layers, shape, model))
    start = (time.perf_counter(), _cpu())
    child.start()
    sending.close()  # the child holds the only sending end: its death ends recv
    try:
        outcome = receiving.recv()
    except EOFError:
        outcome = None
    child.join()
    if outcome is not None:
        return outcome
    how = "killed: out of memory?" if child.exitcode == -signal.SIGKILL else f"exit code {child.exitcode}"
    return (f"autoparallel's process died ({how}) "
            f"after {time.perf_counter() - start[0]:.0f} s wall, {_cpu() - start[1]:.0f} CPU s")


def _peer_child(sending: Connection, *arguments: Any) -> None:
    """The peer's process: :func:`_peer_seconds`, or the error that stopped it, sent back."""
    try:
        outcome: dict | str = _peer_seconds(*arguments)
    except Exception as exc:  # the peer is not ours to fix: report what stopped it
        outcome = f"autoparallel failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    sending.send(outcome)


# -- the whole call, per phase, beside the peer ---------------------------------------------------------


def whole_call(layers: int, mesh: Mesh, options: PlanOptions, share_layers: bool | None = None,
               dims: dict | None = None) -> dict:
    """:func:`timed_plan` on ``Llama(layers, **dims)`` (on the meta device)."""
    with torch.device("meta"):
        model = Llama(layers, **(dims or {})).to(torch.bfloat16)
        tokens = torch.randint(0, 128256, (16, SEQ))
    return timed_plan(model, tokens, mesh, options, share_layers)


def timed_plan(model: nn.Module, tokens: torch.Tensor, mesh: Mesh, options: PlanOptions,
               share_layers: bool | None = None) -> dict:
    """One ``plan_module(training=True, objective="regret", share_layers=...)`` call on ``model(tokens)``, its
    batch (dim 0 of ``tokens``) dynamic: wall and CPU seconds per phase (trace, build, bounds, solve, assemble,
    whole), the worst regret it reports, its objective, which blocks it shared, and the peak resident memory
    of the process so far."""
    marks: list[tuple[float, float, str]] = []

    def progress(line: str) -> None:
        marks.append((time.perf_counter(), _cpu(), line))

    start = (time.perf_counter(), _cpu())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = planner.plan_module(model, (tokens,), dynamic_shapes=({0: Dim("batch")},), mesh=mesh,
                                   training=True, options=dataclasses.replace(options, objective="regret"),
                                   progress=progress, share_layers=share_layers)
    marks.append((time.perf_counter(), _cpu(), "end"))
    phases = {"tracing": "trace", "reading": "build", "building": "build", "bounding": "bounds", "solving": "solve",
              "assembling": "assemble"}
    row = {f"{p}{suffix}": 0.0 for p in set(phases.values()) for suffix in ("_s", "_cpu_s")}
    for (wall, cpu, line), (wall2, cpu2, _) in zip(marks, marks[1:]):
        phase = phases[line.split()[0]]
        row[f"{phase}_s"] += wall2 - wall
        row[f"{phase}_cpu_s"] += cpu2 - cpu
    row.update(whole_s=marks[-1][0] - start[0], whole_cpu_s=marks[-1][1] - start[1],
               reported_worst=plan.worst_regret, objective_s=plan.stats.objective, shared_layers=plan.shared_layers,
               peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return row


def _mesh(text: str) -> Mesh:
    shape = tuple(int(p) for p in text.split("x"))
    names = {1: ("tp",), 2: ("dp", "tp"), 3: ("pp", "dp", "tp")}[len(shape)] if len(shape) <= 3 else None
    return Mesh(shape, names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--modes", nargs="+", default=["forward", "training"], choices=["forward", "training"])
    parser.add_argument("--meshes", nargs="+", default=["8", "2x4", "8x8", "2x4x8"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per expected-cost solve")
    parser.add_argument("--regret-time-limit", type=float, default=60.0, help="seconds for the worst-regret solve")
    parser.add_argument("--peer-unclustered", action="store_true", help="also solve without clustering and follower merging")
    parser.add_argument("--ranges", action="store_true",
                        help="also solve for the least worst regret of a plan per batch size sharing the parameters' "
                             "placements (IlpModel.worst_regret_per_range; minutes on deep models)")
    parser.add_argument("--whole", action="store_true",
                        help="time whole plan_module(training=True, objective='regret') calls per phase instead")
    parser.add_argument("--trace-whole", action="store_true",
                        help="with --whole: plan_module(share_layers=False), every block traced")
    parser.add_argument("--model", choices=sorted(MODELS), default="8b",
                        help="LLaMA-3-8B's dims or LLaMA-3-70B's (dim 8192, 64 heads, FFN 28672)")
    parser.add_argument("--peer-autoparallel", metavar="PATH",
                        help="with --whole: also run meta-pytorch/autoparallel (a checkout at PATH) on its LLaMA-3")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    options = PlanOptions(constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=args.batch_sizes, time_limit=args.time_limit)
    if args.whole or args.peer_autoparallel:
        return _main_whole(args, options)
    rows = []
    header = (f"{'mode':8} {'L':>2} {'mesh':6} {'nodes':>6} {'dec':>4} {'vars':>7} {'cons':>6} {'build':>6} {'bounds':>6} "
              f"{'exp s':>6} {'exp worst':>9} {'reg s':>6} {'plan s':>6} {'plan()':>6} {'reg worst':>9} {'≤ rep':>6} {'mm s':>6} {'mm worst':>8} "
              f"{'exact s':>7} {'1-size':>6} {'greedy':>6}" + (f" {'flat s':>7} {'speedup':>7}" if args.peer_unclustered else "")
              + (f" {'ranges':>6} {'≥':>6} {'rng s':>6}" if args.ranges else ""))
    print(header, flush=True)
    for mode in args.modes:
        for layers in args.layers:
            traced, trace_s = _trace(layers, mode == "training", options, MODELS[args.model])
            print(f"# traced {mode} L={layers} in {trace_s:.1f} s (not included below)", flush=True)
            for text in args.meshes:
                row = run_case(traced, _mesh(text), options, args)
                row.update(mode=mode, layers=layers, mesh=text, trace_s=trace_s)
                rows.append(row)
                line = (f"{mode:8} {layers:>2} {text:6} {row['nodes']:>6} {row['decisions']:>4} {row['variables']:>7} "
                        f"{row['constraints']:>6} {row['build_s']:>6.2f} {row['bounds_s']:>6.2f} {row['expected_solve_s']:>6.2f} "
                        f"{max(row['expected_regret']):>9.3f} {row['regret_solve_s']:>6.2f} {row['regret_plan_s']:>6.2f} {row['plan_call_s']:>6.2f} "
                        f"{max(row['regret_regret']):>9.3f} {row['regret_reported_worst']:>6.3f} {row['worst_regret_solve_s']:>6.1f} "
                        f"{max(row['worst_regret_regret']):>8.3f} {row['exact_optima_s']:>7.1f} {max(row['single_size_regret']):>6.2f} "
                        f"{row['greedy_over_ilp']:>6.2f}")
                if args.peer_unclustered:
                    line += f" {row['unclustered_build_s'] + row['unclustered_solve_s']:>7.2f} {row['speedup']:>7.1f}"
                if args.ranges:
                    line += (f" {row['ranges_worst_regret']:>6.3f} {row['ranges_bound']:>6.3f}"
                             f"{'' if row['ranges_optimal'] else '*'} {row['ranges_s']:>6.1f}")
                print(line, flush=True)
    print("columns (seconds unless said): build = read graph, decide obligations, build problem and ILP; bounds = each batch "
          "size's optimum bounded below by its LP relaxation; exp = objective='expected' (its solve, its worst regret); "
          "reg = objective='regret' (mean regret over the bounds): its solve, plan s = build + bounds + solve, plan() = "
          "a whole planner.plan(objective='regret') call (tracing excluded), its worst regret against the exact optima and '≤ rep' as the plan reports it (against the bounds); "
          "mm = objective='worst-regret'; exact s = the exact per-size optima (regret='exact'); 1-size = worst regret of the "
          "plan solved at the smallest batch size alone, as a planner that sees one example size; greedy = greedy cost / "
          "ILP cost; flat s = build+solve without clustering or merging; ranges = worst regret (against the exact "
          "optima) of the best plans found one per batch size with the parameters placed alike in all (a plan per batch "
          "range with its parameters shared reaches no less), ≥ = the MIP's lower bound on it (against the same optima; "
          "* = stopped at --regret-time-limit), rng s = its solve")
    _write_json(args.json, rows)
    return 0


def _write_json(path: str | None, rows: list[dict]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def _main_whole(args, options: PlanOptions) -> int:
    """The whole-call table (``--whole``): ours per phase, then the peer's, each wall (CPU) seconds."""
    print(f"# load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; seconds as wall (CPU of this process)", flush=True)
    print(f"{'who':12} {'L':>2} {'mesh':6} {'trace':>13} {'build':>13} {'bounds':>13} {'solve':>13} {'whole':>13} "
          f"{'worst':>6} {'objective':>10} {'RSS GiB':>7}", flush=True)
    rows = []
    for layers in args.layers:
        for text in args.meshes:
            row = whole_call(layers, _mesh(text), options, share_layers=False if args.trace_whole else None,
                             dims=MODELS[args.model])
            row.update(who="shapecore", layers=layers, mesh=text)
            rows.append(row)
            cells = [f"{row[f'{p}_s']:6.1f} ({row[f'{p}_cpu_s']:4.1f})" for p in ("trace", "build", "bounds", "solve", "whole")]
            print(f"{'shapecore':12} {layers:>2} {text:6} {' '.join(cells)} {row['reported_worst']:6.3f} "
                  f"{row['objective_s']:10.6f} {row['peak_rss_gib']:7.2f}", flush=True)
            print(f"# shared layers: {row['shared_layers']}", flush=True)
            if not args.peer_autoparallel:
                continue
            peer = _run_peer(args.peer_autoparallel, layers, _mesh(text).shape, args.model)
            if isinstance(peer, str):
                print(f"# peer: no figures: {peer}", flush=True)
                continue
            peer.update(who="autoparallel", layers=layers, mesh=text)
            rows.append(peer)
            whole = sum(peer[f"{p}_s"] for p in ("trace", "build", "solve"))
            whole_cpu = sum(peer[f"{p}_cpu_s"] for p in ("trace", "build", "solve"))
            cells = [f"{peer[f'{p}_s']:6.1f} ({peer[f'{p}_cpu_s']:4.1f})" for p in ("trace", "build")]
            cells += [f"{'-':>13}", f"{peer['solve_s']:6.1f} ({peer['solve_cpu_s']:4.1f})", f"{whole:6.1f} ({whole_cpu:4.1f})"]
            print(f"{'autoparallel':12} {layers:>2} {text:6} {' '.join(cells)} {'':>6} {'':>10} {peer['peak_rss_gib']:7.2f}",
                  flush=True)
            print(f"# whole call, autoparallel / shapecore: {whole / row['whole_s']:.1f}x wall, "
                  f"{whole_cpu / row['whole_cpu_s']:.1f}x CPU", flush=True)
    print("columns: trace = the model to an FX graph; build = read it, decide divisibility, build the ILP (the peer: "
          "its sharding optimizer and constraints); bounds = each batch size's optimum bounded below (the regret "
          "objective's denominators); solve = the regret ILP (the peer: its ILP at its one batch size); whole = the "
          "call. CPU = this process's CPU seconds, steadier than wall time on a loaded machine. worst = the worst "
          "regret the plan reports; RSS GiB = the process's peak resident memory so far (the peer's: its own process's)")
    _write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
