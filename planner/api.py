"""The planner's entry points: :func:`plan` for a traced graph, :func:`plan_module` for a module.

``plan`` reads the graph, decides every candidate ``Shard`` with shapecore under the trace's
facts and the user's constraints, builds the decision problem, solves it (python-mip with
HiGHS or CBC, or the greedy baseline) at the expected cost over the batch points, solves
once more per point for the regret report, and assembles the :class:`~planner.plan.Plan`.
Both take how to plan as one :class:`~planner.options.PlanOptions`, or its fields as keywords.

Every way into planning from a module (``plan_module``, :class:`lowering.ParallelModule` and so
``lowering.parallelize``) traces through :func:`trace_module`: the options checked before any
trace, the trace taken with :func:`shapecore.torch.trace_for_planning` (a decomposed
``torch.export`` graph, or with ``training=True`` the joint forward+backward graph) at the
example that covers the batch sizes (:mod:`planner.trace_hint`), the trace's ``Dim`` names and
batch symbol built once (:class:`~planner.dim_names.DimNames`), and :meth:`ModuleTrace.plan`
handing :func:`plan` those names and where torch set each symbol's range.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from planner.assemble import assemble_plan
from planner.batches import BatchPoints
from planner.cost import AlphaBetaCostModel
from planner.dim_names import DimNames
from planner.divisibility import Divisibility
from planner.graph import PlanGraph, read_graph
from planner.greedy import GreedyModel
from planner.ilp import IlpModel, Optimum, solve_mean_regret
from planner.mesh import Mesh, as_mesh
from planner.options import PlanOptions, options_from
from planner.plan import Plan
from planner.problem import Problem, build_problem
from planner.routed_sizes import readable_asserts
from planner.trace_hint import batch_dim, covering_inputs
from planner.strategies import default_providers
from shapecore import ShapeEnv, parse
from shapecore.torch import Traced, trace_for_planning

__all__ = ["plan", "plan_module", "prepare", "Prepared", "trace_module", "ModuleTrace"]

def _constraint_facts(shape_env: ShapeEnv, constraints: Sequence[str], names: DimNames) -> list[sympy.Basic]:
    """The user's constraints translated to trace symbols, each checked to name only known symbols."""
    if not isinstance(shape_env, ShapeEnv):
        raise TypeError(
            f"shape_env must be a shapecore.ShapeEnv (from shapecore.torch.from_torch), got {type(shape_env).__name__}"
        )
    facts = []
    for text in constraints:
        fact = names.to_trace(parse(text) if isinstance(text, str) else text)
        unknown = sorted(s.name for s in fact.free_symbols if s.name not in shape_env.symbols)
        if unknown:
            raise ValueError(
                f"constraint {text!r} mentions {', '.join(unknown)}: not a Dim name ({', '.join(names.exprs) or 'none given'}) "
                f"nor a symbol of the trace ({', '.join(shape_env.symbols) or 'none'})"
            )
        facts.append(fact)
    return facts


def _batch_symbol(graph: PlanGraph, env: ShapeEnv) -> str | None:
    """The batch symbol of a graph given without one: the root symbol of the first dynamic dim of
    the first user input (as :func:`~planner.trace_hint.batch_dim` picks a module's)."""
    for name in graph.inputs:
        if name is None:
            continue
        for size in graph.nodes[name].output.shape:
            root = _root_symbol(size, env)
            if root is not None:
                return root
    return None


def _root_symbol(size: sympy.Basic, env: ShapeEnv) -> str | None:
    """The first root symbol (through the trace's replacements, ``s77 := 4*s26``) ``size`` depends on."""
    free = sorted(s.name for s in size.xreplace(env.replacements).free_symbols)
    return free[0] if free else None


@dataclass
class Prepared:
    """A graph read, its obligations decided and its decision problem built: what a solver needs.

    ``constraints`` are the user's constraints translated to trace symbols (torch syntax);
    ``names`` the ``Dim`` names with the batch symbol; ``seconds`` the wall-clock time it took.
    """

    problem: Problem
    constraints: list[str]
    names: DimNames
    seconds: float
    runtime_asserts: list[str] = field(default_factory=list)
    """The trace's conditions on data-dependent sizes (the running program checks them)."""


def prepare(
    gm: Any,
    mesh: Mesh | Any,
    *,
    shape_env: ShapeEnv,
    dims: DimNames | Mapping[str, str | sympy.Basic] | None = None,
    range_origins: Mapping[str, tuple[str, str]] | None = None,
    options: PlanOptions | None = None,
    **keywords: Any,
) -> Prepared:
    """Everything :func:`plan` does before solving (same arguments; the solver's options are not read)."""
    options = options_from(options, keywords, caller="prepare")
    start = time.perf_counter()
    mesh = as_mesh(mesh)
    exported = None
    if hasattr(gm, "graph_signature") and hasattr(gm, "graph_module"):
        exported, gm = gm, gm.graph_module
    graph = read_graph(gm, exported=exported)
    names = DimNames.of(dims)
    facts = _constraint_facts(shape_env, options.constraints, names)
    if names.batch is None:
        names = DimNames.of(names, batch=_batch_symbol(graph, shape_env))
    with shape_env.assuming(facts):  # the caller's env is left exactly as it was
        graph.hints = shape_env.hints
        checker = Divisibility(shape_env, options.divisibility)
        symbols = sorted({s.name for node in graph for m in node.outputs if m is not None for size in m.shape
                          for s in size.free_symbols})
        points = BatchPoints.build(options.batch_sizes, shape_env, symbols, names, facts,
                                   origins=range_origins or {}, unbacked_sizes=options.unbacked_sizes)
        model_costs = options.cost_model or AlphaBetaCostModel(options.hardware, mesh)
        unbacked = {name for name, info in shape_env.symbols.items() if info.kind == "unbacked"}
        problem = build_problem(graph, mesh, points, model_costs, checker, list(options.strategies or default_providers()),
                                cluster=options.cluster, merge_followers=options.merge_followers,
                                replicate_outputs=options.replicate_outputs,
                                placement_constraints=options.placement_constraints,
                                names=names)
        checker.detach()
        runtime_asserts = readable_asserts(shape_env, unbacked)
    return Prepared(problem, [str(f) for f in facts], names, time.perf_counter() - start, runtime_asserts)


def plan(
    gm: Any,
    mesh: Mesh | Any,
    *,
    shape_env: ShapeEnv,
    dims: DimNames | Mapping[str, str | sympy.Basic] | None = None,
    range_origins: Mapping[str, tuple[str, str]] | None = None,
    options: PlanOptions | None = None,
    progress: Callable[[str], None] | None = None,
    **keywords: Any,
) -> Plan:
    """Pick placements for every node of ``gm`` on ``mesh``.

    ``gm``: an FX ``GraphModule`` of aten ops with symbolic ``meta["val"]`` (forward, or joint
    forward+backward with AOT descriptors), or an ``ExportedProgram`` (its signature names the
    parameters). ``shape_env``: shapecore's env for the trace (symbols named as in the graph).
    ``dims``: ``Dim`` name → trace symbol, the names ``constraints`` and ``batch_sizes`` may use
    and the plan's guards and messages speak (a :class:`~planner.dim_names.DimNames`, or a
    mapping whose batch symbol is then the graph's first dynamic input dim's).
    ``range_origins``: symbol → where torch set the (lower, upper) end of its range
    (``Traced.range_origins``), named when a batch point falls outside it.
    ``options``: a :class:`~planner.options.PlanOptions` (constraints, batch sizes, memory
    budget, divisibility, solver, objective, regret, …); ``keywords`` are its fields, and
    replace those of ``options`` (``plan(gm, mesh, shape_env=env, constraints=[...])``).
    ``progress``: called with a line as each phase starts (on a large graph the whole call can
    take a minute).
    """
    options = options_from(options, keywords, caller="plan")
    say = progress or (lambda line: None)
    solver, objective, regret, time_limit = options.solver, options.objective, options.regret, options.time_limit
    say("reading the graph, choosing strategies, deciding divisibility")
    prepared = prepare(gm, mesh, shape_env=shape_env, dims=dims, range_origins=range_origins, options=options)
    problem, points = prepared.problem, prepared.problem.points
    start = time.perf_counter()
    say(f"building the ILP over {len(problem.groups)} decisions")
    ilp = None if solver == "greedy" and regret == "off" else IlpModel(
        problem, solver="highs" if solver == "greedy" else solver, memory_budget=options.memory_budget,
        mip_gap=options.mip_gap)
    solver_model = GreedyModel(problem, memory_budget=options.memory_budget) if solver == "greedy" else ilp
    build_seconds = prepared.seconds + time.perf_counter() - start
    start = time.perf_counter()
    optima = None if regret == "off" or len(points) == 1 else _point_optima(
        ilp, points.labels, exact=regret == "exact", time_limit=time_limit, say=say)
    regret_seconds = time.perf_counter() - start
    say(f"solving for the {objective} objective" + (" (greedy)" if solver == "greedy" else f" ({solver})"))
    if objective == "expected" or optima is None:  # one batch point: every objective ranks plans alike
        solution = solver_model.solve(points.weights, time_limit=time_limit)
    elif objective == "regret":
        solution = solve_mean_regret(solver_model, points.weights, np.array([o.value for o in optima]), time_limit=time_limit)
    else:
        solution = ilp.solve_worst_regret(points.weights, np.array([o.value for o in optima]), time_limit=time_limit)
    timings = {"build_seconds": build_seconds, "solve_seconds": solution.solve_seconds, "regret_seconds": regret_seconds}
    say("assembling the plan")
    return assemble_plan(problem, solution, options=options, optima=optima, constraints=prepared.constraints,
                         names=prepared.names, timings=timings,
                         runtime_asserts=prepared.runtime_asserts)


def _point_optima(model: IlpModel, labels: Sequence[Mapping[str, int]], *, exact: bool, time_limit: float,
                  say: Callable[[str], None]) -> list[Optimum]:
    """Each batch point's own optimum (``exact``: its MIP; else the LP relaxation's lower bound),
    found in :func:`_costliest_first` order."""
    optima: list[Optimum | None] = [None] * len(labels)
    for done, k in enumerate(_costliest_first(model.problem)):
        point = ", ".join(f"{name}={value}" for name, value in sorted(labels[k].items()))
        say(f"{'solving' if exact else 'bounding'} the optimum at {point} alone ({done + 1}/{len(labels)})")
        weights = np.eye(len(labels))[k]
        if not exact:
            optimum = model.lower_bound(weights, time_limit=time_limit)
            if optimum.source == "partial lp relaxation":
                say(f"bounding: the LP relaxation at {point} stopped early (time limit {time_limit:g} s); its optimum is "
                    f"at least {optimum.value:.4g} s (a weaker bound: the regret reported there is a looser upper bound)")
            optima[k] = optimum
            continue
        solution = model.solve(weights, time_limit=time_limit)
        proved = solution.status == "optimal"
        optima[k] = Optimum(solution.objective if proved else solution.bound, exact=proved, source="mip")  # type: ignore[arg-type]
    return optima  # type: ignore[return-value]


def _costliest_first(problem: Problem) -> list[int]:
    """The batch points from the costliest to the cheapest, as the least compute of every decision
    ranks them (ties: the given order).

    Each relaxation starts from an earlier one's basis (:mod:`planner.relaxation`), the first from
    none: measured on the 32-layer LLaMA training graph on (2, 4, 8), the relaxation at batch 512
    solved from none in 1.2 CPU s and 8.2k iterations, the one at batch 8 in 6.6 s and 15.8k, and
    the three bounds took 5.1 CPU s in this order rather than 9.6 (``bench/planner.py --whole``).
    """
    least = sum((group.compute.min(axis=0) for group in problem.groups if group.compute is not None),
                np.zeros(len(problem.points)))
    return sorted(range(len(problem.points)), key=lambda k: (-float(least[k]), k))


@dataclass
class ModuleTrace:
    """A module traced for planning by :func:`trace_module`: what :meth:`plan` and the lowering read."""

    traced: Traced
    """The trace (:func:`shapecore.torch.trace_for_planning`): the graph planned, and the graph lowered."""
    options: PlanOptions
    """The options, checked before the trace."""
    traced_at: dict[str, int]
    """``Dim`` name → the size traced at, where it differs from the example's (:func:`~planner.trace_hint.covering_inputs`)."""
    names: DimNames
    """The trace's ``Dim`` names and batch symbol: what the plan's guards and messages speak."""

    @property
    def graph(self) -> Any:
        """What :func:`plan` reads: the ``ExportedProgram``, or a training trace's joint graph."""
        return self.traced.exported if self.traced.exported is not None else self.traced.graph_module

    def plan(self, mesh: Mesh | Any, *, dims: Mapping[str, str | sympy.Basic] | None = None,
             progress: Callable[[str], None] | None = None) -> Plan:
        """:func:`plan` the trace on ``mesh`` with its options, its ``Dim`` names (``dims`` adds to
        them) and where torch set each symbol's range (named when a batch size falls outside it)."""
        made = plan(self.graph, mesh, shape_env=self.traced.env, dims=self.names.extended(dims),
                    range_origins=self.traced.range_origins, options=self.options, progress=progress)
        return dataclasses.replace(made, shared_layers=self.traced.shared_layers)


def trace_module(
    model: Any,
    example_inputs: Sequence[Any],
    *,
    dynamic_shapes: Any,
    training: bool = False,
    share_layers: bool | None = None,
    options: PlanOptions | None = None,
    progress: Callable[[str], None] | None = None,
    caller: str = "trace_module",
    trace_sizes: Mapping[str, int] | None = None,
    **keywords: Any,
) -> ModuleTrace:
    """Check the plan options, then trace ``model`` for planning: the one way into planning from a module.

    ``options`` and ``keywords`` are :func:`plan`'s, checked before anything is traced (an
    unknown keyword is a TypeError naming it as an argument of ``caller``). The trace is taken
    at the largest ``batch_sizes`` value of each ``Dim`` (:mod:`planner.trace_hint`), so the
    guards torch records there hold at the sizes the plan is costed for; its hints are those
    sizes. ``trace_sizes`` (``Dim`` name → size; a plan's :attr:`~planner.plan.Plan.trace_sizes`)
    traces at those sizes instead, so the graph is the one that plan was made from. Dynamic dims
    come only from ``dynamic_shapes``; ``training`` and ``share_layers`` are
    :func:`shapecore.torch.trace_for_planning`'s. ``progress`` hears one line before the trace.
    """
    options = options_from(options, keywords, caller=caller)
    covered = [dict(trace_sizes)] if trace_sizes else options.batch_sizes
    inputs, traced_at = covering_inputs(model, example_inputs, dynamic_shapes, covered)
    if progress:
        at = ", ".join(f"{name}={size}" for name, size in traced_at.items())
        progress("tracing" + (" forward and backward" if training else "") + (f" at {at}" if at else ""))
    traced = trace_for_planning(model, inputs, dynamic_shapes=dynamic_shapes, training=training,
                                share_layers=share_layers)
    batch = batch_dim(model, example_inputs, dynamic_shapes)
    root = _root_symbol(traced.dim_exprs[batch], traced.env) if batch in traced.dim_exprs else None
    return ModuleTrace(traced, options, traced_at, DimNames.of(traced.dim_exprs, batch=root))


def plan_module(
    model: Any,
    example_inputs: Sequence[Any],
    *,
    dynamic_shapes: Any,
    mesh: Mesh | Any,
    training: bool = False,
    dims: Mapping[str, str | sympy.Basic] | None = None,
    options: PlanOptions | None = None,
    progress: Callable[[str], None] | None = None,
    share_layers: bool | None = None,
    **keywords: Any,
) -> Plan:
    """Trace ``model`` (forward, or forward+backward with ``training=True``) and :func:`plan` it.

    Dynamic dims come only from ``dynamic_shapes`` (``torch.export.Dim``, derived dims such as
    ``8*Dim("b")``); parameters and buffers are static. The trace (:func:`trace_module`) is
    taken at the largest ``batch_sizes`` value of each ``Dim`` (:mod:`planner.trace_hint`), so
    the guards torch records there hold at the sizes the plan is costed for. ``constraints``
    are written over the Dim names. ``options`` and ``keywords`` are :func:`plan`'s, checked
    before tracing.
    A training trace takes a run of repeated blocks (a decoder's layers) for its first few and
    copies the rest when the model is checked to compute them alike (:mod:`shapecore.torch.repeated`):
    the same graph and plan, one block's trace instead of each's. ``plan.shared_layers`` says which
    blocks were copied, or why none were; ``share_layers=False`` traces every block, ``True`` warns
    when none could be shared.
    """
    traced = trace_module(model, example_inputs, dynamic_shapes=dynamic_shapes, training=training,
                          share_layers=share_layers, options=options, progress=progress, caller="plan_module",
                          **keywords)
    return traced.plan(mesh, dims=dims, progress=progress)
