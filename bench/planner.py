"""Benchmark: sharding plans for a LLaMA-3-8B-shaped decoder, built and solved, against peers.

The model (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP; dim 4096, 32 heads, 8 KV
heads, FFN 14336, vocabulary 128256, sequence 2048, bf16) is built on the meta device, so it
costs no memory. The batch is dynamic (``Eq(Mod(batch, 8), 0)``) and costed at batch sizes
{8, 64, 512}. For every case (layers × forward/training × mesh) the script prints:

* graph nodes, one-hot decisions after clustering, ILP variables and constraints;
* build seconds (read graph, decide obligations, build the problem and the ILP; tracing is
  excluded and reported per trace) and solve seconds of the expected-cost plan, its
  objective (expected seconds per step) and gap;
* regret at each batch size (cost over the optimum solved for that size alone) for the
  expected-cost plan and for ``objective="regret"``;
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

from planner import Mesh  # noqa: E402
from planner.api import prepare, trace_for_planning  # noqa: E402
from planner.greedy import GreedyModel  # noqa: E402
from planner.ilp import IlpModel  # noqa: E402

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
    gm, exported, env, dims = trace_for_planning(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=training)
    return (exported if exported is not None else gm), env, dims, time.perf_counter() - start


def _solve(graph, env, dims, mesh: Mesh, batch_sizes, *, cluster: bool = True, time_limit: float) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare(graph, mesh, shape_env=env, dims=dims, constraints=["Eq(Mod(batch, 8), 0)"],
                           batch_sizes=batch_sizes, cluster=cluster, merge_followers=cluster)
    problem = prepared.problem
    model = IlpModel(problem)
    build = time.perf_counter() - start
    weights = problem.points.weights
    solution = model.solve(weights, time_limit=time_limit)
    return {"problem": problem, "model": model, "build": build, "solution": solution}


def run_case(graph, env, dims, mesh: Mesh, batch_sizes, args) -> dict:
    ours = _solve(graph, env, dims, mesh, batch_sizes, time_limit=args.time_limit)
    problem, model, solution = ours["problem"], ours["model"], ours["solution"]
    weights = problem.points.weights
    k = len(weights)
    start = time.perf_counter()
    singles = [model.solve(np.eye(k)[i], time_limit=args.time_limit) for i in range(k)]
    regret_solve = time.perf_counter() - start
    optima = np.array([s.objective for s in singles])
    evaluation = problem.evaluate(solution.choices, weights)
    regret = evaluation.total / optima
    start = time.perf_counter()
    minimax = model.solve_worst_regret(weights, optima, time_limit=args.regret_time_limit)
    minimax_solve = time.perf_counter() - start
    minimax_regret = problem.evaluate(minimax.choices, weights).total / optima
    single_regret = problem.evaluate(singles[0].choices, weights).total / optima  # solved at the first (smallest) size
    greedy = GreedyModel(problem).solve(weights)
    row = {
        "nodes": problem.graph.fx_node_count,
        "decisions": len(problem.groups),
        "variables": solution.variables,
        "constraints": solution.constraints,
        "build_s": ours["build"],
        "solve_s": solution.solve_seconds,
        "objective_s": solution.objective,
        "gap": solution.gap,
        "regret": regret.tolist(),
        "worst_regret": float(regret.max()),
        "regret_objective_worst": float(minimax_regret.max()),
        "regret_objective_regret": minimax_regret.tolist(),
        "optima_solve_s": regret_solve,
        "regret_objective_solve_s": minimax_solve,
        "regret_objective_gap": minimax.gap,
        "single_size_worst_regret": float(single_regret.max()),
        "single_size_regret": single_regret.tolist(),
        "greedy_over_ilp": greedy.objective / solution.objective,
    }
    if args.peer_unclustered:
        flat = _solve(graph, env, dims, mesh, batch_sizes, cluster=False, time_limit=args.time_limit)
        row["unclustered_build_s"] = flat["build"]
        row["unclustered_solve_s"] = flat["solution"].solve_seconds
        row["unclustered_variables"] = flat["solution"].variables
        row["unclustered_objective_s"] = flat["solution"].objective
        row["speedup"] = (flat["build"] + flat["solution"].solve_seconds) / (ours["build"] + solution.solve_seconds)
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
    rows = []
    header = (f"{'mode':8} {'L':>2} {'mesh':6} {'nodes':>6} {'dec':>4} {'vars':>7} {'cons':>6} {'build s':>7} {'solve s':>7} "
              f"{'obj s':>8} {'gap':>7} {'regret @' + '/'.join(map(str, args.batch_sizes)):>22} {'worst':>6} {'minimax':>7} "
              f"{'mm gap':>6} {'mm s':>6} {'1-size':>6} {'greedy':>6}" + (f" {'flat s':>7} {'speedup':>7}" if args.peer_unclustered else ""))
    print(header, flush=True)
    for mode in args.modes:
        for layers in args.layers:
            graph, env, dims, trace_s = _trace(layers, mode == "training")
            print(f"# traced {mode} L={layers} in {trace_s:.1f} s (not included below)", flush=True)
            for text in args.meshes:
                row = run_case(graph, env, dims, _mesh(text), args.batch_sizes, args)
                row.update(mode=mode, layers=layers, mesh=text, trace_s=trace_s)
                rows.append(row)
                regrets = "/".join(f"{r:.3f}" for r in row["regret"])
                line = (f"{mode:8} {layers:>2} {text:6} {row['nodes']:>6} {row['decisions']:>4} {row['variables']:>7} "
                        f"{row['constraints']:>6} {row['build_s']:>7.2f} {row['solve_s']:>7.2f} {row['objective_s']:>8.4f} "
                        f"{row['gap']:>7.1e} {regrets:>22} {row['worst_regret']:>6.3f} {row['regret_objective_worst']:>7.3f} "
                        f"{row['regret_objective_gap']:>6.3f} {row['regret_objective_solve_s']:>6.1f} "
                        f"{row['single_size_worst_regret']:>6.2f} {row['greedy_over_ilp']:>6.2f}")
                if args.peer_unclustered:
                    line += f" {row['unclustered_build_s'] + row['unclustered_solve_s']:>7.2f} {row['speedup']:>7.1f}"
                print(line, flush=True)
    print("columns: dec = one-hot decisions after clustering; worst = worst regret of the expected-cost plan; minimax = worst "
          "regret under objective='regret' (mm gap: its relative gap, mm s: its solve seconds); 1-size = worst regret of the plan solved at the smallest batch size alone; "
          "greedy = greedy cost / ILP cost; flat s = build+solve without clustering or merging")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
