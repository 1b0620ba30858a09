"""Benchmark: is the plan the planner picks the fastest on the machine, and do its costs rank plans right?

For each model (an MLP, a grouped-query attention block, a one-layer decoder) on 2 and 4 gloo
ranks (a 1-D mesh), the script

1. calibrates the machine on those ranks (:func:`planner.calibrate`) and plans with the measured
   :class:`~planner.Hardware`;
2. builds the contenders on the planner's own decision problem, so each has a predicted cost
   from the same cost model: the planner's plan; the hand-written plans *replicate* (every
   parameter and the input whole), *data parallel* (parameters whole, batch split), *Megatron
   tensor parallel* (column- then row-parallel linears, the input whole) and *fully sharded*
   (every parameter split on dim 0, batch split), each pinning the parameters' and the input's
   placements and letting the solver place the rest at least cost (*replicate* pins every
   node); and the planner's runners-up
   (its plan with the node whose alternative costs least switched to it, re-solved around it);
3. lowers and compiles each contender (``ParallelModule(..., plan=...)``) and times its forward
   step, interleaved (each round times every contender once, starting one further along the
   list each round; a timing is the mean of ``--calls`` calls in a row, the ranks barriered
   before it, the slowest rank's counting), the median over rounds;
4. prints per case each contender's collectives issued, predicted compute and communication,
   predicted and measured seconds, the chosen plan's measured time over the fastest's (goal:
   within 10%; the median over rounds of its time over the fastest plan's in the same round),
   and Spearman's rho between predicted and measured costs.

The machine is shared with other work: measured times are comparable only inside one run.
At the default sizes a step is milliseconds of fixed per-call work (the entry check's
agreement step, Python) that no plan changes and the cost model does not price: ``--scale``
makes the models wider, so the plans' own costs weigh more.

    python bench/plan_quality.py                          # 3 models x {2, 4} ranks (20 minutes on 2 busy cores)
    python bench/plan_quality.py --worlds 2 --models mlp  # a quick look
    python bench/plan_quality.py --rounds 30 --runners-up 5 --scale 2
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from dataclasses import dataclass

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.export import Dim  # noqa: E402

import planner  # noqa: E402
from lowering import launch  # noqa: E402
from planner import Hardware, Mesh, Plan, PlanOptions  # noqa: E402
from planner.api import prepare  # noqa: E402
from planner.assemble import _describe, assemble_plan  # noqa: E402
from planner.graph import input_roles  # noqa: E402
from planner.ilp import IlpModel  # noqa: E402
from planner.placements import Replicate, Shard, decode  # noqa: E402
from tests.planner.models import MLP, Decoder, GroupedQueryAttention  # noqa: E402

R = Replicate()


@dataclass(frozen=True)
class Case:
    """A model (``name`` at width ``scale``) and which linears Megatron splits by columns / rows."""

    name: str
    scale: int
    column: tuple[str, ...]
    row: tuple[str, ...]

    def build(self) -> tuple[torch.nn.Module, torch.Tensor]:
        """The model (seeded: the same weights on every rank) and its example input."""
        torch.manual_seed(0)
        d = 128 * self.scale
        if self.name == "mlp":
            return MLP(d, 4 * d), torch.randn(64, d)
        if self.name == "gqa":
            return GroupedQueryAttention(d, 8, 2), torch.randn(8, 64, d)
        return Decoder(1, dim=d // 2, heads=4, hidden=2 * d, vocab=512), torch.randint(0, 512, (8, 64))

    @property
    def dynamic_shapes(self) -> dict:
        return {"tokens" if self.name == "decoder" else "x": {0: Dim("batch")}}


def _cases(scale: int) -> dict[str, Case]:
    return {
        "mlp": Case("mlp", scale, ("fc1.",), ("fc2.",)),
        "gqa": Case("gqa", scale, ("q.", "k.", "v."), ("out.",)),
        "decoder": Case("decoder", scale, ("qkv.", "fc1.", "head."), ("out.", "fc2.")),
    }


def _hand_placements(case: Case, fqn: str, n: int, shape: tuple[int, ...], kind: str) -> tuple:
    """The placement hand-written plan ``kind`` gives parameter ``fqn`` of ``shape``."""
    if kind in ("replicate", "data parallel"):
        return (R,)
    if kind == "fully sharded":
        return (Shard(0),) if shape[0] % n == 0 else (R,)
    if any(p in fqn for p in case.column):
        return (Shard(0),)
    if any(p in fqn for p in case.row):
        return (Shard(1),) if len(shape) == 2 else (R,)  # a row-parallel bias is added once, whole
    return (R,)


HAND = ("replicate", "data parallel", "megatron", "fully sharded")


def _contenders(case: Case, n: int, hardware: Hardware, runners_up: int) -> list[tuple[str, Plan]]:
    """(name, plan) for the planner's plan, the hand-written plans and the runners-up, distinct plans only."""
    model, x = case.build()
    options = PlanOptions(hardware=hardware, batch_sizes=[x.shape[0]], constraints=[f"Eq(Mod(batch, {n}), 0)"])
    traced = planner.trace_module(model, (x,), dynamic_shapes=case.dynamic_shapes, options=options)
    prepared = prepare(traced.graph, Mesh((n,)), shape_env=traced.traced.env, dims=traced.names,
                       range_origins=traced.traced.range_origins, options=options)
    problem = prepared.problem
    ilp = IlpModel(problem)
    weights = problem.points.weights
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}

    def solve(pins: dict[str, set[int]]) -> Plan | None:
        """The cheapest plan whose node ``name`` takes one of the candidates ``pins[name]``."""
        closed = []
        for name, allowed in pins.items():
            g = problem.group_of[name]
            choices = [c for c, i in enumerate(problem.pick[name]) if i in allowed]
            if not choices:
                return None
            if ilp.x[g] is not None:
                for c, column in enumerate(ilp.x[g]):
                    var = ilp.model.vars[column]
                    if c not in choices and var.ub > 0:
                        var.ub = 0.0
                        closed.append(var)
        try:
            solution = ilp.solve(weights)
        except ValueError:  # the pins leave no plan
            return None
        finally:
            for var in closed:
                var.ub = 1.0
        return assemble_plan(problem, solution, options=options, optima=None, constraints=prepared.constraints,
                             names=prepared.names)

    def where(name: str, placements: tuple) -> set[int]:
        return {i for i, cand in enumerate(problem.candidates[name]) if decode(cand.outputs[0]) == placements}

    chosen = solve({})
    out = [("planner", chosen)]
    roles = input_roles(problem.graph)
    n_axes = problem.mesh.ndim
    for kind in HAND:
        pins = {}
        if kind == "replicate":  # every node whole: nothing is split anywhere
            pins = {name: {i for i, cand in enumerate(cands) if all(o is None or decode(o) == (R,) * n_axes for o in cand.outputs)}
                    for name, cands in problem.candidates.items()}
        for role in roles if kind != "replicate" else ():
            if role.role == "param":
                pins[role.name] = where(role.name, _hand_placements(case, role.fqn, n, shapes[role.fqn], kind))
            elif role.role == "input":
                pins[role.name] = where(role.name, (Shard(0),) if kind in ("data parallel", "fully sharded") else (R,))
        plan = solve(pins)
        if plan is not None:
            out.append((kind, plan))
    switches = sorted((a.delta, name, a.strategy) for name, d in chosen.decisions.items() for a in d.alternatives)
    seen = set()
    for _, name, strategy in switches:
        if len([o for o in out if o[0].startswith("runner-up")]) >= runners_up:
            break
        if name in seen:
            continue
        seen.add(name)
        index = {i for i, cand in enumerate(problem.candidates[name]) if _describe(cand) == strategy}
        plan = solve({name: index})
        if plan is not None:
            out.append((f"runner-up {len(seen)}: {name} {strategy}", plan))
    distinct: dict[tuple, tuple[str, Plan]] = {}
    for name, plan in out:
        key = tuple(sorted(plan.placements.items())) + tuple(str(r) for r in plan.redistributions)
        distinct.setdefault(key, (name, plan))
        if name in HAND and distinct[key][0] != name:
            distinct[key] = (f"{distinct[key][0]} = {name}", distinct[key][1])
    return list(distinct.values())


def _calibrate(rank: int, n: int) -> Hardware:
    return planner.calibrate((n,), message_bytes=(1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20), matmul_size=256,
                             repeats=10, name=f"gloo-{n}")


def _time(rank: int, case: Case, n: int, plans: list[str], rounds: int, calls: int) -> list[list[float]]:
    """Seconds per round per plan of one forward step (the mean of ``calls`` calls in a row), on
    this rank (the caller takes the slowest rank). Round ``r`` starts at contender ``r`` and goes
    round the list, so no plan always runs first, or always after the same one."""
    import torch.distributed as dist

    from lowering.parallel import ParallelModule

    model, x = case.build()
    modules = [ParallelModule(model, (x,), dynamic_shapes=case.dynamic_shapes, mesh=(n,), plan=Plan.from_json(p))
               for p in plans]
    with torch.no_grad():
        for pm in modules:
            for _ in range(calls):
                pm(x)  # warm-up
        times = []
        for r in range(rounds):
            row = [0.0] * len(modules)
            for k in [(r + j) % len(modules) for j in range(len(modules))]:
                dist.barrier()
                start = time.perf_counter()
                for _ in range(calls):
                    modules[k](x)
                row[k] = (time.perf_counter() - start) / calls
            times.append(row)
    return times


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties averaged."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (nan with fewer than 3 values or a constant side)."""
    if len(a) < 3:
        return float("nan")
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def chosen_over_fastest(rounds: np.ndarray) -> float:
    """How much slower contender 0 is than the fastest, from ``rounds[r, k]`` (seconds of contender
    ``k`` in round ``r``): the median over rounds of contender 0's time over the time, in the same
    round, of the contender with the least median (paired, so load that changes between rounds
    cancels out; 1.0 when contender 0 has the least median)."""
    fastest = int(np.argmin(np.median(rounds, axis=0)))
    return float(np.median(rounds[:, 0] / rounds[:, fastest]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "gqa", "decoder"], choices=["mlp", "gqa", "decoder"])
    parser.add_argument("--worlds", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds (every contender timed once each)")
    parser.add_argument("--calls", type=int, default=5, help="calls in a row per timing (their mean counts)")
    parser.add_argument("--runners-up", type=int, default=2, help="planner runners-up per case")
    parser.add_argument("--scale", type=int, default=1, help="multiplies the models' widths")
    args = parser.parse_args()
    cases = _cases(args.scale)
    print(f"# plan quality on gloo ranks of this machine (shared with other work: times compare within a run); "
          f"{args.rounds} rounds of {args.calls} calls, median; scale {args.scale}")
    summary = []
    for n in args.worlds:
        hardware = launch(functools.partial(_calibrate, n=n), n)[0]
        links = ", ".join(f"{link.kind} {link.latency * 1e6:.0f} us + {link.bandwidth / 1e9:.2f} GB/s" for link in hardware.links)
        print(f"\n## {n} ranks: calibrated {hardware.flops_fp32 / 1e9:.1f} GFLOP/s fp32, "
              f"{hardware.memory_bandwidth / 1e9:.1f} GB/s elementwise; {links}")
        for key in args.models:
            case = cases[key]
            contenders = _contenders(case, n, hardware, args.runners_up)
            per_rank = launch(functools.partial(_time, case=case, n=n, plans=[p.to_json() for _, p in contenders],
                                                rounds=args.rounds, calls=args.calls), n, timeout=1800)
            rounds = np.max(np.array(per_rank), axis=0)  # (round, contender): the slowest rank's seconds
            measured = np.median(rounds, axis=0)
            predicted = [p.cost.total for _, p in contenders]
            print(f"\n{case.name} on {n} ranks:")
            print(f"  {'plan':50s} {'collectives':>11s} {'compute ms':>10s} {'comm ms':>9s} {'predicted ms':>12s} "
                  f"{'measured ms':>11s}")
            for (name, p), m in zip(contenders, measured):
                issued = sum(s.kind not in ("chunk", "to_partial") for r in p.redistributions for s in r.steps)
                print(f"  {name[:50]:50s} {issued:11d} {p.cost.compute * 1e3:10.3f} {p.cost.communication * 1e3:9.3f} "
                      f"{p.cost.total * 1e3:12.3f} {m * 1e3:11.3f}")
            ratio = chosen_over_fastest(rounds)
            rho = spearman(predicted, list(measured))
            print(f"  chosen / fastest measured: {ratio:.3f} ({'within' if ratio <= 1.10 else 'NOT within'} 10%; "
                  f"{measured[0] / measured.min():.3f} as a ratio of the medians); "
                  f"Spearman rho {rho:.2f} over {len(contenders)} plans")
            summary.append((case.name, n, ratio, rho, len(contenders)))
    print("\n| model | ranks | plans | chosen / fastest | Spearman rho |\n|---|---|---|---|---|")
    for name, n, ratio, rho, count in summary:
        print(f"| {name} | {n} | {count} | {ratio:.3f} | {rho:.2f} |")
    if any(math.isnan(r[3]) for r in summary):
        print("(rho is nan where fewer than 3 distinct plans were timed)")


if __name__ == "__main__":
    main()
