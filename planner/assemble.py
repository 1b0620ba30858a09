"""From a solved problem to a :class:`~planner.plan.Plan`: placements, redistributions, proofs.

Everything here reads the graph in order, so the plan (and its JSON) is deterministic.
Redistributions are listed for every operand whose producer's placement differs from what
its consumer's strategy needs, priced exactly as the objective prices them. Proofs cover
every sharded dim of every node output and of every redistributed operand. Pruning logs are
kept once per distinct node signature (nodes with equal signatures have equal candidates):
``Decision.same_candidates_as`` points at the node that carries the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.dim_names import DimNames
from planner.graph import input_roles, output_roles
from planner.ilp import Optimum, Solution
from planner.options import PlanOptions
from planner.placements import Codes, Placements, decode, decode_one, format_codes
from planner.plan import (
    Alternative,
    BatchCost,
    CollectiveStep,
    CostBreakdown,
    Decision,
    Plan,
    PrunedStrategy,
    Redistribution,
    ShardProof,
    SolverStats,
)
from planner.problem import Candidate, Problem
from planner.problem.per_token import per_token_rule_axes

__all__ = ["assemble_plan"]

_ALTERNATIVES = 3


def assemble_plan(
    problem: Problem,
    solution: Solution,
    *,
    options: PlanOptions,
    optima: Sequence[Optimum] | None,
    constraints: Sequence[str],
    names: DimNames,
    timings: dict[str, float] | None = None,
    runtime_asserts: Sequence[str] = (),
) -> Plan:
    """The plan for ``solution`` found under ``options`` (``optima``: each point's own optimum or a
    lower bound, for regret; ``constraints``: the user's, translated to trace symbols; ``names``:
    the trace's ``Dim`` names, which the plan's guards and messages speak)."""
    graph, mesh, points = problem.graph, problem.mesh, problem.points
    choices = solution.choices
    weights = points.weights
    placements: dict[str, Placements] = {}
    tuple_placements: dict[str, tuple[Placements | None, ...]] = {}
    params: dict[str, Placements] = {}
    redistributions: list[Redistribution] = []
    proofs: dict[tuple, ShardProof] = {}
    guards: list[str] = list(constraints)
    incoming: dict[str, float] = {}

    def record_proofs(node: str, operand: int | None, meta: Any, codes: Codes) -> None:
        for d, axes, verdict in problem.verdicts(meta, codes):
            key = (node, operand, d, axes)
            if key in proofs:
                continue
            status = "proved" if verdict.status == "proved" else verdict.status
            proofs[key] = ShardProof(
                node if operand is None else f"{node}[{operand}]", d, str(meta.shape[d]),
                tuple(mesh.axis_names[a] for a in axes), verdict.obligation, status, verdict.method,  # type: ignore[index, arg-type]
            )
            if status == "guard" and verdict.obligation not in guards:
                guards.append(verdict.obligation)

    for node in graph:
        cand = problem.chosen(choices, node.name)
        if node.role != "sink":
            if node.is_tuple:
                tuple_placements[node.name] = tuple(None if p is None else decode(p) for p in cand.outputs)
            else:
                placements[node.name] = decode(cand.outputs[0])  # type: ignore[arg-type]
                record_proofs(node.name, None, node.output, cand.outputs[0])  # type: ignore[arg-type]
            if node.role in ("param", "buffer") or (node.role == "constant" and node.fqn):
                params[node.fqn] = placements[node.name]  # type: ignore[index]
        consumer = "output" if node.role == "sink" else node.name
        total = 0.0
        for k, producer in enumerate(node.operands):
            src = problem.output_codes(choices, producer)
            dst = cand.inputs[k]
            if src == dst:
                continue
            meta = graph.nodes[producer].output
            moves = problem.moves(meta, src, dst, weights)
            operand = node.index if node.role == "sink" else k
            cost = float(sum(float(m[4] @ weights) for m in moves))
            total += cost
            redistributions.append(Redistribution(
                consumer, operand, producer, decode(src), decode(dst),  # type: ignore[arg-type]
                tuple(CollectiveStep(axis, kind, decode_one(old), decode_one(new), float(v @ weights)) for axis, kind, old, new, v in moves),
                cost,
            ))
            record_proofs(consumer, operand, meta, dst)
        incoming[node.name] = total

    evaluation = problem.evaluate(choices, weights)
    memory = problem.peak_breakdown(choices)
    batch_costs = tuple(
        BatchCost(points.labels[k], float(weights[k]), float(evaluation.total[k]),
                  None if optima is None else optima[k].value, optima is not None and optima[k].exact,
                  None if optima is None else optima[k].source)
        for k in range(len(points))
    )
    decisions = _decisions(problem, choices, incoming, options.explain)
    pruned = tuple(
        PrunedStrategy(name, strategy, reason) for name, entries in problem.pruned.items()
        if decisions.get(name) is None or not decisions[name].same_candidates_as for strategy, reason in entries
    )
    stats = SolverStats(
        solver=options.solver,
        objective_kind=options.objective,
        status=solution.status,
        graph_nodes=graph.fx_node_count,
        decision_nodes=len(problem.groups),
        variables=solution.variables,
        constraints=solution.constraints,
        objective=solution.objective,
        bound=solution.bound,
        gap=solution.gap,
        clusters=problem.clusters,
        clustered_nodes=problem.clustered_nodes,
        merged_followers=problem.merged_followers,
        **(timings or {"build_seconds": solution.build_seconds, "solve_seconds": solution.solve_seconds}),
    )
    return Plan(
        mesh=mesh,
        placements=placements,
        tuple_placements=tuple_placements,
        redistributions=tuple(redistributions),
        param_placements=params,
        input_placements=tuple(None if name is None else placements[name] for name in graph.inputs),
        output_placements=tuple(None if name is None else decode(problem.output_codes(choices, name)) for name in graph.outputs),
        trace_guards=tuple(guards),
        runtime_asserts=tuple(names.readable(a) for a in runtime_asserts),
        proofs=tuple(proofs.values()),
        pruned=pruned,
        decisions=decisions,
        cost=CostBreakdown(points.expected(evaluation.compute), points.expected(evaluation.communication), memory, options.memory_budget),
        batch_costs=batch_costs,
        stats=stats,
        names=names,
        trace_sizes={name: graph.hints[symbol] for name, symbol in names.symbols.items() if symbol in graph.hints},
        divisibility=problem.divisibility.policy,
        graph_inputs=input_roles(graph),
        graph_outputs=output_roles(graph),
        options={**options.to_dict(), "unbacked_sizes": dict(points.unbacked or {})},  # the expectations used
    )


def _decisions(problem: Problem, choices: list[int], incoming: dict[str, float], explain: bool) -> dict[str, Decision]:
    graph = problem.graph
    weights = problem.points.weights
    first_with: dict[int, str] = {}
    out: dict[str, Decision] = {}
    getitems: dict[str, list[Any]] = {}
    for node in graph:
        if node.role == "getitem":
            getitems.setdefault(node.source, []).append(node)  # type: ignore[arg-type]
    for node in graph:
        if node.role == "sink":
            continue
        cands = problem.candidates[node.name]
        current = problem.pick[node.name][choices[problem.group_of[node.name]]]
        cand = cands[current]
        same = first_with.setdefault(id(cands), node.name)
        root = problem.groups[problem.group_of[node.name]].root
        shared = problem.shared.get(node.name) or (root if root != node.name else "")
        alternatives: tuple[Alternative, ...] = ()
        if explain and len(cands) > 1 and node.name not in problem.shared:
            allowed = problem.allowed_candidates.get(node.name, range(len(cands)))  # placement constraints rule the others out
            own = per_token_rule_axes(cand.strategy.rule, problem.mesh.ndim)  # a region's nodes run per token alike
            allowed = [i for i in allowed if per_token_rule_axes(cands[i].strategy.rule, problem.mesh.ndim) == own]
            delta = _SwitchDelta(problem, choices, node.name, current, getitems)
            deltas = [(i, delta(i)) for i in allowed if i != current]
            deltas.sort(key=lambda t: (t[1], t[0]))
            alternatives = tuple(Alternative(_describe(cands[i]), d) for i, d in deltas[:_ALTERNATIVES])
        out[node.name] = Decision(
            node=node.name,
            op=node.target,
            strategy=_describe(cand),
            rule=cand.strategy.rule,
            provider=cand.provider,
            compute=float(cand.compute @ weights),
            incoming=incoming.get(node.name, 0.0),
            alternatives=alternatives,
            shared_with=shared,
            same_candidates_as="" if same == node.name else same,
        )
    return out


def _describe(cand: Candidate) -> str:
    outs = " | ".join(format_codes(p) for p in cand.outputs)
    return f"{outs} <- {'; '.join(format_codes(p) for p in cand.inputs)}" if cand.inputs else outs


class _SwitchDelta:
    """Change in expected total cost if only node ``name`` switched from candidate ``current`` to
    another: what does not depend on the other candidate (its operands' producers, its readers'
    needs, the current candidate's costs) is found once, each move's cost once."""

    def __init__(self, problem: Problem, choices: list[int], name: str, current: int, getitems: dict[str, list[Any]]) -> None:
        graph = problem.graph
        node = graph.nodes[name]
        self.problem, self.weights = problem, problem.points.weights
        self.cands, self.old = problem.candidates[name], problem.candidates[name][current]
        self.operands = [(graph.nodes[producer].output, problem.output_codes(choices, producer)) for producer in node.operands]
        outputs = [(user.name, user.index) for user in getitems.get(name, ())] if node.is_tuple else [(name, 0)]
        self.readers = [(index, graph.nodes[producer].output,
                         [problem.chosen(choices, user).inputs[k] for user, k in graph.users[producer]])
                        for producer, index in outputs]
        self._moves: dict[tuple[int, Codes, Codes], float] = {}

    def _move(self, meta: Any, src: Codes, dst: Codes) -> float:
        if src == dst:
            return 0.0
        key = (id(meta), src, dst)
        found = self._moves.get(key)
        if found is None:
            found = self._moves[key] = float(self.problem.move_cost(meta, src, dst, self.weights) @ self.weights)
        return found

    def _move_to(self, meta: Any, src: Codes, dst: Codes) -> float:
        """:meth:`_move` read from the cheapest costs into ``dst`` (one search per reader's need,
        where :meth:`_move` would search from every candidate's output)."""
        if src == dst:
            return 0.0
        graph = self.problem.state_graph(meta)
        return graph.distances_to(dst, self.weights)[graph.index[src]]

    def __call__(self, new: int) -> float:
        old_c, new_c = self.old, self.cands[new]
        delta = float((new_c.compute - old_c.compute) @ self.weights)
        for k, (meta, src) in enumerate(self.operands):
            delta += self._move(meta, src, new_c.inputs[k]) - self._move(meta, src, old_c.inputs[k])
        for index, meta, needs in self.readers:
            old_out, new_out = old_c.outputs[index], new_c.outputs[index]
            for need in needs:
                delta += self._move_to(meta, new_out, need) - self._move_to(meta, old_out, need)  # type: ignore[arg-type]
        return delta
