"""The decision problem: candidate strategies per node, shared decisions, priced edges.

:func:`build_problem` turns a :class:`~planner.graph.PlanGraph` into what every solver reads
(:class:`Problem`, :mod:`planner.problem.model`), in three steps:

1. **candidates** (:mod:`~planner.problem.candidates`) — per node, the strategies its
   provider proposed that survive the divisibility policy (each ``Shard`` of every output
   and operand is an obligation), with their compute seconds and bytes per device at every
   batch point. Placeholders and outputs may take any non-partial placement; a ``getitem``
   takes its element's placement; the nodes of a mixture of experts' routing chain propose, beside
   their own strategies, the per-token placement on each set of mesh axes that splits its tokens
   evenly (only those on the axes a ``RequireShard`` splits its tokens over:
   :mod:`planner.problem.per_token`).
2. **groups** (:mod:`~planner.problem.groups`) — one one-hot decision each. A group's
   *choices* are its root unit's candidates; every node of the group picks one of its own
   candidates per choice (``pick[node][choice]``). Nodes join a group by being identical
   layers (:mod:`planner.clustering`), by being a ``getitem`` of a tuple (it must take its
   element's placement), by *tying* (a parameter's gradient is delivered in the parameter's
   placement; a user output in the placement of its tangent), or by *following* (an
   elementwise or layout op keeps the placement of its first operand's producer, when each
   of the producer's placements leaves it exactly one strategy and its output is no larger
   than that operand: no resharding between them, so any resharding happens after the op,
   on no more bytes than before it). Sharing restricts the plans considered; the objective
   is always the true cost of the plan chosen. Then every choice that breaks one of the
   user's placement constraints is dropped (:mod:`planner.placement_constraints`), and a per-token
   region's nodes are tied: each decides on its own (it follows no one), all of them take one
   set of per-token axes (:attr:`Problem.agreements`, kept by every solver), and a choice none of
   the others can match is dropped.
3. **costs and edges** (:mod:`~planner.problem.edges`) — each group's compute and memory
   per choice, and every (consumer, operand) pair, linked to its producer. An edge inside
   one group is priced into that group's choices. Edges across groups are collected into
   *edge classes*: edges over the same tensor shape whose producer-placement and
   consumer-need indicators are the same expressions share one linearization (identical
   layers share it, and so does an op reading one producer twice with the same needs).

Redistribution costs and the true cost of an assignment are questions the :class:`Problem`
answers (:mod:`planner.problem.model`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import sympy

from planner.batches import BatchPoints
from planner.clustering import node_signature
from planner.cost import CostModel
from planner.dim_names import DimNames
from planner.divisibility import Divisibility
from planner.graph import PlanGraph
from planner.mesh import Mesh
from planner.placement_constraints import ExpertParallel, PlacementConstraint, RequireShard, constrained_nodes, restrict_choices
from planner.problem.candidates import add_candidates
from planner.problem.edges import add_edges, add_group_costs
from planner.problem.groups import add_groups
from planner.problem.liveness import Liveness
from planner.problem.model import MEMORY_PARTS, Candidate, EdgeClass, Evaluation, Group, InnerEdges, PeakMemory, Problem
from planner.problem.per_token import PerToken, find_regions, per_token_choices, tie_regions
from planner.strategies.base import StrategyProvider

__all__ = ["Candidate", "InnerEdges", "Group", "EdgeClass", "Problem", "build_problem", "Evaluation", "Liveness", "PeakMemory", "MEMORY_PARTS"]


def build_problem(
    graph: PlanGraph,
    mesh: Mesh,
    points: BatchPoints,
    cost_model: CostModel,
    divisibility: Divisibility,
    providers: Sequence[StrategyProvider],
    *,
    cluster: bool = True,
    merge_followers: bool = True,
    replicate_outputs: bool = False,
    placement_constraints: Sequence[PlacementConstraint] = (),
    names: DimNames | None = None,
) -> Problem:
    """Candidates, groups and edges for ``graph`` (see the module docstring); ``placement_constraints``
    (their ``Dim`` names resolved through ``names``, a data-dependent size by its own name) remove
    the choices that break them."""
    liveness = Liveness.of(graph)
    names = names or DimNames()
    problem = Problem(graph, mesh, points, cost_model, divisibility, graph.is_training(), liveness, names)
    env = divisibility.env
    data_dependent = frozenset(n for n, s in env.symbols.items() if s.kind == "unbacked") if env is not None else frozenset()
    dims = {**{name: name for name in sorted(data_dependent)}, **names.exprs}
    found = constrained_nodes(list(graph), placement_constraints, mesh, dims, data_dependent)
    problem.constrained = {name for name, ks in found.items()
                           if any(placement_constraints[k].own_decision(graph.nodes[name], graph) for k in ks)}
    signatures = {node.name: node_signature(node, graph, liveness.holds(node.name)) + found.get(node.name, ())
                  for node in graph}
    per_token = _per_token_nodes(graph, mesh, divisibility, placement_constraints)
    for name, (_, place) in per_token.items():
        signatures[name] += (place,)
    weighed = {name: region for name, (region, place) in per_token.items() if len(place.choices) > 1}
    problem.constrained |= set(weighed)  # each its own decision, tied to its region's by tie_regions
    add_candidates(problem, providers, signatures, replicate_outputs=replicate_outputs,
                   per_token={name: place for name, (_, place) in per_token.items()})
    if problem.uncovered:
        ops = sorted(set(problem.uncovered.values()))
        warnings.warn(
            f"no strategy provider covers {', '.join(ops)}; planned replicated "
            f"({len(problem.uncovered)} node(s) such as {', '.join(list(problem.uncovered)[:5])})",
            stacklevel=3,
        )
    add_groups(problem, signatures, cluster=cluster, merge_followers=merge_followers)
    restrict_choices(problem, found, placement_constraints)
    tie_regions(problem, weighed)
    add_group_costs(problem)
    add_edges(problem)
    return problem


def _per_token_nodes(graph: PlanGraph, mesh: Mesh, divisibility: Divisibility,
                     constraints: Sequence[PlacementConstraint]) -> dict[str, tuple[str, PerToken]]:
    """The nodes of every per-token region (:mod:`planner.problem.per_token`) that may run per
    token on some mesh axes (its tokens split evenly there: proved, or a guard of the plan; always
    on those a ``RequireShard`` splits its tokens over), and of every other region its per-expert
    tables' gathers and scatters (which may split the table by the expert dim, ``ExpertParallel``'s
    axes ``table_axes``): each node's region (its sort) and places."""
    split_axes = [(c.symbols, c.mesh_axis) for c in constraints if isinstance(c, RequireShard)]
    table_axes = frozenset(c.mesh_axis for c in constraints
                           if isinstance(c, ExpertParallel) and mesh.shape[c.mesh_axis] > 1)

    def even(size: sympy.Basic, ways: int) -> bool:
        verdict = divisibility.check(size, ways)
        return verdict.allowed and verdict.status != "uneven"

    found: dict[str, tuple[str, PerToken]] = {}
    for region in find_regions(graph):
        forced = {axis for symbols, axis in split_axes if symbols & region.tokens.free_symbols}
        choices = per_token_choices(region, forced, mesh.shape, even)
        if any(choices):
            found.update({name: (region.sort, PerToken(choices, *codes, region.tables.get(name), table_axes))
                          for name, codes in region.placements.items()})
        else:  # the chain runs as one device would: its tables may still split by the expert dim
            found.update({name: (region.sort, PerToken(((),), *region.placements[name], table, table_axes))
                          for name, table in region.tables.items()})
    return found
