"""Benchmark: planning under a memory budget, the ILP against the greedy baseline (issue 22).

The model tests' cases (:mod:`tests.models.zoo`: transformers models in tiny configs, traced
for training at batch 8) on a (2, 2) mesh under each case's budget, with the ``cpu-gloo``
costs the model tests plan with. For each case the decision problem is built once; then the
greedy baseline (memory priced at the steps over the budget) and the ILP (HiGHS, warm-started
from the greedy plan when it fits) each plan under the budget. Printed per solver: the plan's
cost (ms), the solver's lower bound and relative gap (ILP), the peak memory per device against
the budget (computed by :meth:`planner.problem.Problem.peak_memory`, independently of the
solver), memory constraints added, CPU and wall seconds, and the load average.

    python bench/memory_budget.py                             # llama, 10 s limit
    python bench/memory_budget.py --cases llama gpt2 --time-limit 60
    python bench/memory_budget.py --cases gpt2 phi3 cnn --time-limit 600 --mip-gap 0.05   # as the model tests plan
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

# this directory holds a module named like the package it benchmarks: keep it off the import path,
# and import the model tests' cases through the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(_HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

from torch.export import Dim  # noqa: E402

from planner.api import prepare, trace_module  # noqa: E402
from planner.greedy import GreedyModel  # noqa: E402
from planner.ilp import IlpModel  # noqa: E402
from tests.models.test_training import CONSTRAINT  # noqa: E402
from tests.models.zoo import CASES  # noqa: E402


def problem_of(name: str, mesh: tuple[int, ...]):
    """The case's decision problem on ``mesh``, as the model tests plan it."""
    case = CASES[name]
    inputs, _ = case.batch(8)
    traced = trace_module(case.model(), (inputs,), dynamic_shapes=({0: Dim("batch")},), training=True,
                          constraints=[CONSTRAINT], hardware="cpu-gloo", regret="off", memory_budget=case.memory_budget)
    return prepare(traced.graph, mesh, shape_env=traced.traced.env,
                   dims=traced.names, range_origins=traced.traced.range_origins, options=traced.options).problem


def timed(solve):
    cpu, wall = time.process_time(), time.perf_counter()
    solution, model = solve()
    return solution, model, time.process_time() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["llama"], choices=sorted(CASES))
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for the ILP's solve")
    parser.add_argument("--mip-gap", type=float, default=1e-4, help="the relative gap the ILP stops at")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print(f"{'case':<11}{'solver':<8}{'cost ms':>9}{'bound ms':>10}{'gap':>8}{'peak/budget':>13}{'cuts':>6}"
          f"{'cpu s':>8}{'wall s':>8}  status, load")
    for name in args.cases:
        problem = problem_of(name, (2, 2))
        budget, weights = CASES[name].memory_budget, problem.points.weights

        def greedy():
            model = GreedyModel(problem, memory_budget=budget)
            return model.solve(weights), model

        def ilp():
            model = IlpModel(problem, memory_budget=budget, mip_gap=args.mip_gap)
            return model.solve(weights, time_limit=args.time_limit), model

        for label, solve in (("greedy", greedy), ("ilp", ilp)):
            solution, model, cpu, wall = timed(solve)
            peak = float(problem.peak_memory(solution.choices).total.max())
            bound = "" if solution.bound is None else f"{solution.bound * 1e3:.4f}"
            gap = "" if solution.gap is None else f"{solution.gap:.2%}"
            cuts = len(getattr(model, "memory_steps", ()))
            print(f"{name:<11}{label:<8}{solution.objective * 1e3:>9.4f}{bound:>10}{gap:>8}{peak / budget:>13.3f}{cuts:>6}"
                  f"{cpu:>8.1f}{wall:>8.1f}  {solution.status}, {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
