"""assemble_plan: a solved problem becomes a Plan that says exactly what the solution chose —
placements, every redistribution with its steps, a proof per split dim, the guards it relies
on, its cost and regret per batch point, and each decision's cheapest alternatives."""

from __future__ import annotations

import pytest

from planner import PlanOptions
from planner.assemble import assemble_plan
from planner.dim_names import DimNames
from planner.ilp import IlpModel, Optimum
from planner.placements import decode, decode_one, encode
from planner.problem import MEMORY_PARTS


def _assembled(problem, *, optima=None, constraints=("Eq(Mod(s0, 4), 0)",), **options):
    solution = IlpModel(problem, memory_budget=options.get("memory_budget")).solve(problem.points.weights)
    plan = assemble_plan(problem, solution, options=PlanOptions(**options), optima=optima, constraints=list(constraints),
                         names=DimNames.of({"batch": "s0"}, batch="s0"))
    return solution, plan


def test_placements_are_the_ones_the_solution_chose(tiny_mlp):
    solution, plan = _assembled(tiny_mlp)
    graph = tiny_mlp.graph
    for node in graph:
        if node.role != "sink" and not node.is_tuple:
            assert plan.placements[node.name] == decode(tiny_mlp.output_codes(solution.choices, node.name))
    assert plan.param_placements == {n.fqn: plan.placements[n.name] for n in graph if n.role in ("param", "buffer")}
    assert plan.input_placements == tuple(plan.placements[name] for name in graph.inputs)
    assert plan.output_placements == tuple(decode(tiny_mlp.output_codes(solution.choices, name)) for name in graph.outputs)


def _budget(problem):
    """A memory budget that makes the problem's plan split the weights."""
    free = IlpModel(problem).solve(problem.points.weights)
    return 0.6 * float(sum(problem.evaluate(free.choices).memory.values()).max())


def test_every_operand_placed_otherwise_than_its_consumer_needs_is_redistributed_step_by_step(training_mlp):
    problem = training_mlp
    solution, plan = _assembled(problem, memory_budget=_budget(problem))
    graph, weights = problem.graph, problem.points.weights
    assert any(p.is_shard() for ps in plan.param_placements.values() for p in ps)
    assert len({s.kind for r in plan.redistributions for s in r.steps}) > 1
    expected = set()
    for node in graph:
        for k, producer in enumerate(node.operands):
            if problem.output_codes(solution.choices, producer) != problem.chosen(solution.choices, node.name).inputs[k]:
                expected.add(("output", node.index, producer) if node.role == "sink" else (node.name, k, producer))
    assert {(r.consumer, r.operand, r.producer) for r in plan.redistributions} == expected
    for r in plan.redistributions:
        state = list(r.src)
        for step in r.steps:
            assert state[step.axis] == step.src
            state[step.axis] = step.dst
        assert tuple(state) == r.dst and r.cost == pytest.approx(sum(s.cost for s in r.steps), rel=1e-12)
        moved = problem.moves(graph[r.producer].output, encode(r.src), encode(r.dst), weights)
        assert [(s.axis, s.kind, s.src, s.dst) for s in r.steps] == [(a, k, decode_one(o), decode_one(n)) for a, k, o, n, _ in moved]


def test_the_plans_cost_is_the_objective_and_the_true_cost_at_each_point(tiny_mlp):
    optima = [Optimum(value, exact=True, source="mip") for value in (1e-9, 2e-7)]
    solution, plan = _assembled(tiny_mlp, optima=optima)
    truth = tiny_mlp.evaluate(solution.choices)
    assert plan.cost.total == pytest.approx(solution.objective, rel=1e-9)
    assert plan.cost.total == pytest.approx(float(truth.total @ tiny_mlp.points.weights), rel=1e-9)
    assert [b.cost for b in plan.batch_costs] == pytest.approx(truth.total.tolist(), rel=1e-12)
    assert [b.values for b in plan.batch_costs] == [{"batch": 16}, {"batch": 4096}]
    assert [b.optimum for b in plan.batch_costs] == [1e-9, 2e-7] and all(b.optimum_exact for b in plan.batch_costs)
    assert [b.optimum_source for b in plan.batch_costs] == ["mip", "mip"]
    peak = sum(truth.memory.values()).max()
    assert sum(getattr(plan.cost.memory, part) for part in MEMORY_PARTS) == pytest.approx(peak, rel=1e-12)


def test_every_split_dim_has_a_proof_and_the_guards_are_the_constraints(training_mlp):
    problem = training_mlp
    _, plan = _assembled(problem, memory_budget=_budget(problem))
    proved = {(p.node, p.dim) for p in plan.proofs}
    for name, placements in plan.placements.items():
        for placement in placements:
            if placement.is_shard():
                assert (name, placement.dim) in proved, (name, placement)
    for r in plan.redistributions:
        for placement in r.dst:
            if placement.is_shard():
                assert (f"{r.consumer}[{r.operand}]", placement.dim) in proved
    assert all(p.status == "proved" for p in plan.proofs) and plan.trace_guards == ("Eq(Mod(s0, 4), 0)",)
    assert plan.guards == ("Eq(Mod(batch, 4), 0)",)  # the same guard, over the Dim name


def test_alternatives_are_the_cheapest_switches_of_that_decision_alone_at_their_true_cost(tiny_mlp):
    solution, plan = _assembled(tiny_mlp)
    weights = tiny_mlp.points.weights
    base = float(tiny_mlp.evaluate(solution.choices).total @ weights)
    checked = 0
    for g, group in enumerate(tiny_mlp.groups):
        if group.nodes != [group.root] or tiny_mlp.pick[group.root] != list(range(group.choices)) \
                or tiny_mlp.graph[group.root].role == "sink":
            continue  # only for a node alone in its group is switching its candidate an assignment
        deltas = []
        for choice in range(group.choices):
            if choice != solution.choices[g]:
                switched = list(solution.choices)
                switched[g] = choice
                deltas.append(float(tiny_mlp.evaluate(switched).total @ weights) - base)
        alternatives = plan.decisions[group.root].alternatives
        assert [a.delta for a in alternatives] == pytest.approx(sorted(deltas)[:len(alternatives)], rel=1e-9, abs=1e-18)
        assert len(alternatives) == min(3, len(deltas)) and all(a.delta >= -1e-18 for a in alternatives)  # an optimum
        checked += 1
    assert checked


def test_the_same_solution_assembles_to_the_same_json(tiny_mlp):
    assert _assembled(tiny_mlp)[1].to_json() == _assembled(tiny_mlp)[1].to_json()
