"""Benchmark: sharding plans for a LLaMA-3-8B-shaped decoder, built and solved, against peers.

The model (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP; dim 4096, 32 heads, 8 KV
heads, FFN 14336, vocabulary 128256, sequence 2048, bf16) is built on the meta device, so it
costs no memory. The batch is dynamic (``Eq(Mod(batch, 8), 0)``) and costed at batch sizes
{8, 64, 512}. For every case (layers × forward/training × mesh) the script prints:

* graph nodes, one-hot decisions after clustering, ILP variables and constraints;
* build seconds (read graph, decide obligations, build the problem and the ILP; tracing is
  excluded and reported per trace), the seconds to bound each batch size's optimum (LP
  relaxation, what ``regret="bound"`` does) and to solve it exactly (``regret="exact"``);
* for each objective (``expected``, ``regret``, ``worst-regret``): solve seconds and the
  worst regret across the batch sizes against the exact optima; for ``regret`` also the
  total ``planner.plan`` time (build + bounds + solve) and the worst regret the plan reports;
* peers in the same run: the single-size plan (solved at batch 8 alone, as a planner that
  sees one example size does) and its worst regret; the greedy baseline's cost relative to
  the ILP; optionally (``--peer-unclustered``) the same ILP without clustering and follower
  merging, its build+solve seconds and the speed-up.

    python bench/planner.py                                   # every case (minutes)
    python bench/planner.py --layers 2 --meshes 8 2x4         # a quick look
    python bench/planner.py --layers 32 --modes training --meshes 8x8 --peer-unclustered
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings

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
from shapecore.torch import trace_for_planning  # noqa: E402

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
    """LLaMA-3-8B shapes with ``layers`` blocks."""

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


def _trace(layers: int, training: bool):
    with torch.device("meta"):
        model = Llama(layers).to(torch.bfloat16)
        tokens = torch.randint(0, 128256, (16, SEQ))
    start = time.perf_counter()
    traced = trace_for_planning(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=training)
    graph = traced.exported if traced.exported is not None else traced.graph_module
    return graph, traced.env, traced.dim_exprs, time.perf_counter() - start


def _solve(graph, env, dims, mesh: Mesh, options: PlanOptions) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare(graph, mesh, shape_env=env, dims=dims, options=options)
    problem = prepared.problem
    model = IlpModel(problem)
    build = time.perf_counter() - start
    solution = model.solve(problem.points.weights, time_limit=options.time_limit)
    return {"problem": problem, "model": model, "build": build, "solution": solution}


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def run_case(graph, env, dims, mesh: Mesh, options: PlanOptions, args) -> dict:
    ours = _solve(graph, env, dims, mesh, options)
    problem, model, expected = ours["problem"], ours["model"], ours["solution"]
    weights = problem.points.weights
    eye = np.eye(len(weights))
    bounds, bounds_s = _timed(lambda: np.array([model.lower_bound(eye[k]) for k in range(len(weights))]))
    mean, mean_s = _timed(lambda: solve_mean_regret(model, weights, bounds, time_limit=options.time_limit))
    singles, exact_s = _timed(lambda: [model.solve(eye[k], time_limit=options.time_limit) for k in range(len(weights))])
    optima = np.array([s.objective for s in singles])
    minimax, minimax_s = _timed(lambda: model.solve_worst_regret(weights, bounds, time_limit=args.regret_time_limit))

    def regret(solution) -> np.ndarray:
        return problem.evaluate(solution.choices, weights).total / optima

    greedy = GreedyModel(problem).solve(weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, plan_s = _timed(lambda: planner.plan(graph, mesh, shape_env=env, dims=dims, options=options, objective="regret"))
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
    if args.peer_unclustered:
        flat = _solve(graph, env, dims, mesh, dataclasses.replace(options, cluster=False, merge_followers=False))
        row["unclustered_build_s"] = flat["build"]
        row["unclustered_solve_s"] = flat["solution"].solve_seconds
        row["unclustered_variables"] = flat["solution"].variables
        row["unclustered_objective_s"] = flat["solution"].objective
        row["speedup"] = (flat["build"] + flat["solution"].solve_seconds) / (ours["build"] + expected.solve_seconds)
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
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    options = PlanOptions(constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=args.batch_sizes, time_limit=args.time_limit)
    rows = []
    header = (f"{'mode':8} {'L':>2} {'mesh':6} {'nodes':>6} {'dec':>4} {'vars':>7} {'cons':>6} {'build':>6} {'bounds':>6} "
              f"{'exp s':>6} {'exp worst':>9} {'reg s':>6} {'plan s':>6} {'plan()':>6} {'reg worst':>9} {'≤ rep':>6} {'mm s':>6} {'mm worst':>8} "
              f"{'exact s':>7} {'1-size':>6} {'greedy':>6}" + (f" {'flat s':>7} {'speedup':>7}" if args.peer_unclustered else ""))
    print(header, flush=True)
    for mode in args.modes:
        for layers in args.layers:
            graph, env, dims, trace_s = _trace(layers, mode == "training")
            print(f"# traced {mode} L={layers} in {trace_s:.1f} s (not included below)", flush=True)
            for text in args.meshes:
                row = run_case(graph, env, dims, _mesh(text), options, args)
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
                print(line, flush=True)
    print("columns (seconds unless said): build = read graph, decide obligations, build problem and ILP; bounds = each batch "
          "size's optimum bounded below by its LP relaxation; exp = objective='expected' (its solve, its worst regret); "
          "reg = objective='regret' (mean regret over the bounds): its solve, plan s = build + bounds + solve, plan() = "
          "a whole planner.plan(objective='regret') call (tracing excluded), its worst regret against the exact optima and '≤ rep' as the plan reports it (against the bounds); "
          "mm = objective='worst-regret'; exact s = the exact per-size optima (regret='exact'); 1-size = worst regret of the "
          "plan solved at the smallest batch size alone, as a planner that sees one example size; greedy = greedy cost / "
          "ILP cost; flat s = build+solve without clustering or merging")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
