"""Clustering: the j-th nodes of identical layers share one decision (found from module paths and
signatures), a restriction of the plans considered whose plan is priced at its true cost."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim

from planner import Mesh
from planner.api import prepare
from planner.clustering import find_units, layer_instance, node_signature
from planner.graph import GraphNode, read_graph
from planner.ilp import IlpModel
from shapecore.torch import trace_for_planning


@pytest.mark.slow  # a 3-layer decoder's training graph (traced once), prepared and solved twice
def test_clustering_prices_the_plan_it_picks_and_costs_little(decoder_trace):
    gm, env, dims = decoder_trace.graph_module, decoder_trace.env, decoder_trace.dim_exprs
    objectives = []
    for cluster in (True, False):
        problem = prepare(gm, Mesh((2, 2)), shape_env=env, dims=dims, constraints=["Eq(Mod(batch, 4), 0)"],
                          batch_sizes=[8, 64], cluster=cluster, merge_followers=cluster).problem
        solution = IlpModel(problem).solve(problem.points.weights)
        assert solution.objective == pytest.approx(float(problem.evaluate(solution.choices).total @ problem.points.weights), rel=1e-9)
        objectives.append((solution.objective, len(problem.groups), problem.clusters))
    (clustered, groups_c, clusters), (flat, groups_f, _) = objectives
    assert clusters > 0 and groups_c < groups_f
    assert flat * (1 - 1e-9) <= clustered <= flat * 1.01  # a restriction, and a mild one


class _Stack(nn.Module):
    """Identical layers (Linear, ReLU) in a ModuleList, then a head of another width."""

    def __init__(self, layers: int = 3, dim: int = 64) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


@pytest.fixture(scope="module")
def stack_trace():
    """``_Stack``'s joint forward+backward graph with a dynamic batch."""
    return trace_for_planning(_Stack(), (torch.randn(8, 64),), dynamic_shapes=({0: Dim("batch")},), training=True)


def _problem(traced, mesh, batch_sizes, *, cluster):
    return prepare(traced.graph_module, mesh, shape_env=traced.env, dims=traced.dim_exprs, constraints=["Eq(Mod(batch, 4), 0)"],
                   batch_sizes=batch_sizes, cluster=cluster, merge_followers=False).problem


@pytest.mark.parametrize("node, instance", [
    (GraphNode("mm", "op", "aten.mm.default", (), module_path="layers.3.attn.wq"), ("layers.", "forward", 3)),
    (GraphNode("w", "param", "placeholder", (), fqn="blocks.2.layers.5.w", module_path="blocks"), ("blocks.", "forward", 2)),
    (GraphNode("g", "sink", "output", (), grad_of="h.10.mlp.w", phase="backward"), ("h.", "backward", 10)),
    (GraphNode("mm", "op", "aten.mm.default", (), module_path="layer3.fc"), None),
    (GraphNode("mm", "op", "aten.mm.default", ()), None),
])
def test_layer_instance_is_the_first_numbered_component_of_the_nodes_module_path(node, instance):
    assert layer_instance(node) == instance


def test_identical_layers_share_one_unit_per_position_and_nothing_else_does(stack_trace):
    graph = read_graph(stack_trace.graph_module)
    signatures = {node.name: node_signature(node, graph, False) for node in graph}
    units = find_units(graph, signatures)
    order = list(graph.nodes)
    assert sorted(name for u in units for name in u.members) == sorted(order)  # each node in one unit
    assert [order.index(u.representative) for u in units] == sorted(order.index(u.representative) for u in units)
    clusters = [u for u in units if len(u.members) > 1]
    for unit in clusters:  # at most one member per layer, in layer order (layer 0's backward has no input gradient)
        assert len({signatures[name] for name in unit.members}) == 1
        instances = [layer_instance(graph[name]) for name in unit.members]
        if instances[0] is not None:  # (an op outside any module, such as a gradient sum, takes its users' layer)
            indices = [i[2] for i in instances]
            assert indices == sorted(set(indices)) and len({i[:2] for i in instances}) == 1
    parameters = [u for u in clusters if graph[u.representative].role == "param"]
    assert sorted(graph[u.representative].fqn for u in parameters) == ["layers.0.bias", "layers.0.weight"]
    assert all([graph[m].fqn.split(".")[1] for m in u.members] == ["0", "1", "2"] for u in parameters)
    assert not [name for u in clusters for name in u.members if "head" in (graph[name].fqn or graph[name].grad_of or "")]
    assert all(len(u.members) == 1 for u in find_units(graph, signatures, enabled=False))


@settings(max_examples=8)
@given(mesh=st.sampled_from([(2,), (4,)]), batch_sizes=st.lists(st.sampled_from([8, 64, 4096]), min_size=1, max_size=2, unique=True),
       budget=st.sampled_from([None, 0.8, 0.5]))
def test_sharing_a_decision_is_a_restriction_whose_plan_is_priced_at_its_true_cost(stack_trace, mesh, batch_sizes, budget):
    problems = {cluster: _problem(stack_trace, Mesh(mesh), batch_sizes, cluster=cluster) for cluster in (True, False)}
    clustered, flat = problems[True], problems[False]
    assert clustered.clusters > 0 and len(clustered.groups) < len(flat.groups)
    weights = flat.points.weights
    if budget is not None:
        free = IlpModel(flat).solve(weights)
        budget *= float(sum(flat.evaluate(free.choices, weights).memory.values()).max())
    solutions = {}
    for cluster, problem in problems.items():
        try:
            solutions[cluster] = IlpModel(problem, memory_budget=budget).solve(weights)
        except ValueError as error:  # no plan fits the budget
            assert "memory budget" in str(error)
    if True not in solutions:
        return
    assert False in solutions, "a plan of the clustered problem is a plan of the flat one"
    plan, best = solutions[True], solutions[False]
    # the flat problem's bound, not its plan: the solver stops within its gap tolerance, or at its
    # wall-clock limit on a busy machine, with a plan above its optimum; the bound is below it always
    assert best.bound <= plan.objective * (1 + 1e-9)
    assert plan.objective == pytest.approx(float(clustered.evaluate(plan.choices, weights).total @ weights), rel=1e-9)
    for name, representative in clustered.shared.items():
        assert clustered.chosen(plan.choices, name).strategy == clustered.chosen(plan.choices, representative).strategy


@pytest.mark.parametrize("mesh", [(4,), (2, 2)])
def test_without_memory_pressure_identical_layers_lose_nothing_to_sharing_a_decision(stack_trace, mesh):
    objectives = []
    for cluster in (True, False):
        problem = _problem(stack_trace, Mesh(mesh), [8, 4096], cluster=cluster)
        objectives.append(IlpModel(problem).solve(problem.points.weights).objective)
    assert objectives[0] == pytest.approx(objectives[1], rel=1e-9)
