"""The planner's peak memory per device against the bytes the lowered program keeps live on each
of 2 gloo ranks (run eagerly: the program as lowered, before Inductor fuses it), for a forward
and a training graph with the batch and the weights sharded."""

import functools

import pytest
import torch
from torch.export import Dim

import planner
from lowering.collectives import local_shard
from lowering.launch import launch
from lowering.lower import lower
from planner import AlphaBetaCostModel, Mesh, Pin
from shapecore.torch import trace_for_planning
from tests.planner.live_bytes import LiveBytes
from tests.planner.models import MLP

pytestmark = pytest.mark.slow  # gloo ranks

DIM, HIDDEN, BATCH = 128, 512, 1024


def _estimate_and_measure(rank, training):
    torch.manual_seed(0)
    model = MLP(DIM, HIDDEN)
    x = torch.randn(BATCH, DIM)
    traced = trace_for_planning(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, training=training)
    mesh = Mesh((2,), ("dp",))
    plan = planner.plan(traced.exported if traced.exported is not None else traced.graph_module, mesh,
                        shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[BATCH], constraints=["Eq(Mod(batch, 2), 0)"],
                        placement_constraints=[Pin("inputs", "S(0)"), Pin("parameters", "S(0)")],
                        cost_model=AlphaBetaCostModel("cpu-gloo", mesh, optimizer_states=0))  # no optimizer runs here
    program = lower(traced.graph_module, plan)
    params = dict(model.named_parameters())
    roles = {i.name: i for i in plan.graph_inputs}
    tensors = []
    for local_input in program.inputs:
        role = roles[local_input.name]
        full = params[role.fqn].detach() if role.role == "param" else x if role.role == "input" else torch.ones(BATCH, DIM)
        tensors.append(local_shard(full, local_input.placements, program.groups).clone())  # a piece, not a view of all
    values = program.localizer.local_values({s.of: BATCH for s in program.symbols})
    with torch.no_grad(), LiveBytes(tensors) as live:
        program([values[s.name] for s in program.symbols], tensors)
    sharded = sorted(fqn for fqn, ps in plan.param_placements.items() if ps[0].is_shard())
    return plan.cost.memory.total, live.peak, plan.input_placements[0], sharded


@pytest.mark.parametrize("training", [False, True], ids=["forward", "training"])
def test_estimated_peak_is_within_15_percent_of_the_measured_peak_per_rank(training):
    for estimate, measured, input_placements, sharded in launch(
            functools.partial(_estimate_and_measure, training=training), 2, timeout=300):
        assert input_placements[0].is_shard(0) and sharded == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
        print(f"{'training' if training else 'forward'}: estimate {estimate / 1e6:.3f} MB, "
              f"measured {measured / 1e6:.3f} MB per rank ({estimate / measured - 1:+.1%})")
        assert abs(estimate - measured) <= 0.15 * measured, (estimate, measured)
