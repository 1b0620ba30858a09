"""Step 2 of the decision problem: nodes that must (or may) decide together share one group, and
each picks, per choice, the candidate its link demands: a getitem its element's placement, a
gradient its parameter's, a user output its tangent's, a follower its first operand as produced."""

from __future__ import annotations

import torch

from planner import Mesh, Pin
from tests.planner.models import MLP, on_meta
from tests.planner.problems import problem_of


def _given(problem, name, choice, index=0):
    """The placement node ``name``'s output ``index`` has at its group's ``choice``."""
    return problem.candidates[name][problem.pick[name][choice]].outputs[index]


def _same_group_choices(problem, a, b):
    group = problem.group_of[a]
    assert problem.group_of[b] == group, (a, b)
    return range(problem.groups[group].choices)


def test_a_getitem_decides_with_its_tuple_and_takes_its_elements_placement(problem):
    for node in problem.graph:
        if node.role == "getitem":
            for c in _same_group_choices(problem, node.name, node.source):
                assert _given(problem, node.name, c) == _given(problem, node.source, c, node.index)


def test_gradients_and_user_outputs_are_delivered_in_the_placement_of_what_they_are_tied_to(problem):
    graph = problem.graph
    parameters = {n.fqn: n.name for n in graph if n.role in ("param", "buffer")}
    tangents = {n.output_index: n.name for n in graph if n.role == "tangent"}
    tied = 0
    for node in graph:
        if node.role != "sink":
            continue
        leader = parameters.get(node.grad_of) if node.grad_of else tangents.get(node.output_index)
        if leader is None:
            continue
        tied += 1
        for c in _same_group_choices(problem, node.name, leader):
            assert _given(problem, node.name, c) == _given(problem, leader, c)
    assert tied == (sum(n.grad_of is not None for n in graph) + len(tangents) if graph.is_training() else 0)


def test_a_follower_keeps_its_first_operand_as_produced(problem):
    followers = 0
    for node in problem.graph:
        group = problem.groups[problem.group_of[node.name]]
        if node.role != "op" or node.name == group.root or not node.operands:
            continue
        producer = node.operands[0]
        if problem.group_of[producer] != problem.group_of[node.name]:
            continue
        followers += 1
        for c in range(group.choices):
            assert problem.candidates[node.name][problem.pick[node.name][c]].inputs[0] == _given(problem, producer, c)
    assert (followers > 0) == (problem.merged_followers > 0)


def test_groups_share_decisions_only_as_asked():
    model = on_meta(MLP, 32, 64)
    x = torch.randn(16, 32, device="meta")
    flat = problem_of(model, x, Mesh((2,)), training=True, cluster=False, merge_followers=False)
    assert not flat.clusters and not flat.shared and not flat.merged_followers
    merged = problem_of(model, x, Mesh((2,)), training=True)
    assert merged.merged_followers and len(merged.groups) < len(flat.groups)


def test_a_node_a_placement_constraint_names_does_not_follow(tiny_mlp):
    permute = next(n.name for n in tiny_mlp.graph if n.target == "aten.permute.default")
    weight = tiny_mlp.graph[permute].operands[0]
    assert tiny_mlp.group_of[permute] == tiny_mlp.group_of[weight]  # the transpose follows its weight
    pinned = problem_of(on_meta(MLP, 32, 64), torch.randn(16, 32, device="meta"), Mesh((2,)), batch_sizes=[16, 4096],
                        placement_constraints=[Pin(permute, "S(0)")])
    assert pinned.group_of[permute] != pinned.group_of[weight] and pinned.groups[pinned.group_of[permute]].root == permute
