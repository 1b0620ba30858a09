"""Placement constraints: pins, Dim sharding rules and MinShards are obeyed by the ILP and the
greedy baseline; unsatisfiable ones are a PlacementConflict naming the constraints at odds."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.export import Dim

import planner
from planner import ExpertParallel, ForbidShard, Mesh, MinShards, Pin, PlacementConflict, RequireShard
from shapecore.torch import trace_for_planning
from tests.planner.models import MLP, GroupedExperts, on_meta

R, S0, S1 = Replicate(), Shard(0), Shard(1)


@pytest.fixture(scope="module")
def forward():
    return trace_for_planning(on_meta(MLP, 64, 256), (torch.randn(16, 64, device="meta"),),
                              dynamic_shapes={"x": {0: Dim("batch")}})


@pytest.fixture(scope="module")
def training():
    return trace_for_planning(on_meta(MLP, 64, 256), (torch.randn(16, 64, device="meta"),),
                              dynamic_shapes={"x": {0: Dim("batch")}}, training=True)


def _plan(trace, mesh=(4,), **options):
    graph = trace.exported if trace.exported is not None else trace.graph_module
    options.setdefault("constraints", ["Eq(Mod(batch, 8), 0)"])
    options.setdefault("batch_sizes", [64, 1024])
    return planner.plan(graph, Mesh(mesh, ("dp", "tp")[: len(mesh)]), shape_env=trace.env, dims=trace.dim_exprs, **options)


def _pieces(mesh: Mesh, placements) -> int:
    return math.prod(size for size, p in zip(mesh.shape, placements) if isinstance(p, Shard))


def test_pinned_inputs_and_parameters_take_their_placements(forward):
    free = _plan(forward)
    assert free.param_placements["fc1.weight"] == (R,)  # what the planner picks alone: the pin changes the plan
    pinned = _plan(forward, placement_constraints=[Pin("inputs", "S(0)"), Pin("fc1.weight", "S(0)")])
    assert pinned.input_placements[0] == (S0,)
    assert pinned.param_placements["fc1.weight"] == (S0,)
    assert pinned.options["placement_constraints"] == ["Pin('inputs', 'S(0)')", "Pin('fc1.weight', 'S(0)')"]
    weight = next(i.name for i in pinned.graph_inputs if i.fqn == "fc1.weight")
    assert not pinned.decisions[weight].alternatives  # a pinned node has no runner-up to offer


def test_a_pin_on_one_axis_by_pattern_or_predicate_leaves_the_other_axis_free(forward):
    plan = _plan(forward, mesh=(2, 2), placement_constraints=[
        Pin("fc*.weight", "S(0)", axis="tp"),
        Pin(lambda n: n.role == "output", "R,R"),
    ])
    assert plan.param_placements["fc1.weight"][1] == S0 and plan.param_placements["fc2.weight"][1] == S0
    assert plan.output_placements[0] == (R, R)


@pytest.mark.parametrize("solver", ["highs", "greedy"])
def test_forbid_and_require_sharding_a_dim_on_an_axis(forward, solver):
    forbidden = _plan(forward, mesh=(2, 2), solver=solver, placement_constraints=[ForbidShard("batch", axis="dp")])
    batch = forbidden.names.symbols["batch"]
    assert not [p for p in forbidden.proofs if batch in p.size and "dp" in p.mesh_axes]
    required = _plan(forward, mesh=(2, 2), solver=solver, placement_constraints=[RequireShard("batch", axis="tp"),
                                                                                 Pin("inputs", "R,S(0)")])
    assert required.input_placements[0] == (R, S0)
    assert required.output_placements[0][1] == S0
    assert any(batch in p.size and p.mesh_axes == ("tp",) for p in required.proofs)


@pytest.mark.parametrize("solver", ["highs", "greedy"])
def test_parameters_sharded_at_least_n_way(training, solver):
    plan = _plan(training, mesh=(2, 2), solver=solver, placement_constraints=[MinShards(4)])
    assert plan.param_placements and all(_pieces(plan.mesh, p) >= 4 for p in plan.param_placements.values())
    for out, role in zip(plan.output_placements, plan.graph_outputs):  # each gradient as its parameter
        if role is not None and role.role == "grad":
            assert out == plan.param_placements[role.grad_of]


def test_two_constraints_at_odds_are_named_as_a_pair(forward):
    pin, fsdp = Pin("fc1.weight", "R"), MinShards(2)
    with pytest.raises(PlacementConflict) as info:
        _plan(forward, placement_constraints=[pin, fsdp])
    assert info.value.constraints == (pin, fsdp)
    assert "Pin('fc1.weight', 'R') and MinShards(2, 'parameters') conflict on parameter fc1.weight" in str(info.value)


def test_a_conflict_pickles_with_its_fields_so_it_crosses_launch_intact(forward):
    pin, fsdp = Pin("fc1.weight", "R"), MinShards(2)
    with pytest.raises(PlacementConflict) as info:
        _plan(forward, placement_constraints=[pin, fsdp])
    copy = pickle.loads(pickle.dumps(info.value))  # what lowering.launch does with a rank's error
    assert type(copy) is PlacementConflict and isinstance(copy, ValueError)
    assert (str(copy), copy.node) == (str(info.value), info.value.node) and copy.node
    assert [(type(c), str(c)) for c in copy.constraints] == [(Pin, str(pin)), (MinShards, str(fsdp))]


def test_a_gradient_pinned_against_its_parameter_is_a_conflict_naming_both(training):
    weight = Pin("fc2.weight", "S(1)")
    grad = Pin(lambda n: n.role == "grad" and n.fqn == "fc2.weight", "R")
    with pytest.raises(PlacementConflict, match="share one decision") as info:
        _plan(training, placement_constraints=[weight, grad])
    assert info.value.constraints == (weight, grad)


def test_a_pin_the_divisibility_check_forbids_names_the_pruned_strategy(forward):
    with pytest.raises(PlacementConflict, match=r"Pin\('fc1.bias', 'S\(0\)'\) conflicts with the strategies of parameter "
                                                r"fc1.bias .*pruned: S\(0\)") as info:
        _plan(forward, mesh=(3,), constraints=[], batch_sizes=None, placement_constraints=[Pin("fc1.bias", "S(0)")])
    assert "256" in str(info.value)


def test_a_pin_on_a_batch_that_may_not_divide_names_the_dim_not_the_trace_symbol(forward):
    with pytest.raises(PlacementConflict) as info:
        _plan(forward, constraints=[], batch_sizes=None, placement_constraints=[Pin("inputs", "S(0)")])
    symbol = forward.dims["batch"]
    assert "dim 0 (size batch) over dp: Eq(Mod(batch, 4), 0) is refuted (counterexample batch=2)" in str(info.value)
    assert symbol not in str(info.value).replace("(", " ").replace("=", " ").split()


@pytest.mark.parametrize("constraint, message", [
    (Pin("fc3.weight", "R"), r"Pin\('fc3.weight', 'R'\) matches no node; .* fc1.bias"),
    (Pin("inputs", "R,R"), r"2 placements for the 1-axis mesh"),
    (Pin("inputs", "R", axis="tp"), r"no mesh axis named 'tp'"),
    (ForbidShard("seq", axis=0), r"'seq' is not a Dim name \(batch\)"),
    (MinShards(8), r"has 4 devices, fewer than 8"),
    (ExpertParallel("ep"), r"no mesh axis named 'ep'"),
    (ExpertParallel("dp"), r"ExpertParallel\(axis='dp'\): the graph has no grouped product of experts"),
])
def test_bad_constraints_are_errors_naming_them(forward, constraint, message):
    with pytest.raises(ValueError, match=message):
        _plan(forward, placement_constraints=[constraint])


def test_placement_constraints_must_be_constraints():
    with pytest.raises(TypeError, match=r"placement_constraints\[0\] must be a planner.Pin"):
        planner.PlanOptions(placement_constraints=["S(0)"])
    with pytest.raises(ValueError, match="ways must be a positive int"):
        MinShards(0)


def test_on_an_axis_of_size_one_a_pin_asks_for_replicate_and_requiring_a_split_holds_for_all(forward):
    # one rank's piece is the whole tensor: S(0) there is R, and "split 1 way" is no requirement
    plan = _plan(forward, mesh=(1, 4), placement_constraints=[Pin("inputs", "S(0),S(0)"), Pin("fc1.weight", "S(0)", axis="dp"),
                                                             RequireShard("batch", axis="dp")])
    assert plan.input_placements[0] == (R, S0)
    assert plan.param_placements["fc1.weight"][0] == R
    assert all(p[0] == R for p in plan.placements.values())


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_expert_parallel_splits_the_experts_by_the_expert_dim_where_the_planner_would_not(training):
    """Small experts: replicating them is cheaper, and the constraint splits them all the same,
    forward and backward products alike (a mesh axis named, on a (2, 2) mesh: the other axis free)."""
    traced = trace_for_planning(GroupedExperts(), (torch.randn(4, 6, 8),), dynamic_shapes={"x": {0: Dim("batch")}},
                                training=training)
    graph = traced.exported if traced.exported is not None else traced.graph_module
    mesh = Mesh((2, 2), ("dp", "ep"))
    free = planner.plan(graph, mesh, shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[4, 32])
    forced = planner.plan(graph, mesh, shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[4, 32],
                          placement_constraints=[ExpertParallel("ep")])
    experts = {d.node: d.rule for d in forced.decisions.values() if "grouped_mm_fallback" in d.op}
    assert len(experts) == 1 + training and all(rule.split("/")[1] == "experts" for rule in experts.values())
    assert forced.param_placements["w"][1] == S0 and free.param_placements["w"][1] != S0


def test_experts_that_do_not_split_over_the_axis_are_a_conflict_naming_the_divisibility():
    with pytest.raises(PlacementConflict, match=r"ExpertParallel\(axis=0\) conflicts with the strategies of node "
                                                r"grouped_mm_fallback .*operand 1 dim 0 \(size 3\).*3 is not a multiple of 2"):
        planner.plan_module(GroupedExperts(experts=3), (torch.randn(4, 6, 8),), dynamic_shapes={"x": {0: Dim("batch")}},
                            mesh=(2,), placement_constraints=[ExpertParallel(0)])
