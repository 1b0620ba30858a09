"""A mesh axis of size 1 places nothing and moves nothing: a (1,) plan has no redistribution, and
a (2, 1) or (1, 2) plan has exactly the (2,) plan's collectives (on a (2, 1) mesh the demo's decoder
had 36 redistributions for inference and 114 for training where the (2,) plan had 1 and 0)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import Replicate
from torch.export import Dim

import planner
from lowering.demo import decoder, dynamic_shapes, tokens
from shapecore.torch import trace_for_planning
from tests.lowering.budgets import sharding_budget
from tests.planner.models import MLP

OPTIONS = {"constraints": ["Eq(Mod(batch, 4), 0)"], "hardware": "cpu-gloo", "batch_sizes": [8, 16, 24]}
CASES = {  # model, training, whether a memory budget forces the weights to be split on 2 devices
    "mlp": (lambda: MLP(32, 64), lambda: torch.randn(8, 32), False, True),
    "mlp-training": (lambda: MLP(32, 64), lambda: torch.randn(8, 32), True, True),
    "decoder": (decoder, lambda: tokens(8), False, True),
    "decoder-training": (decoder, lambda: tokens(8), True, False),  # split weights: minutes to plan
}


@pytest.fixture(scope="module", params=list(CASES))
def plans(request):
    """The case's plans on (2,), (2, 1), (1, 2) (the same memory budget) and (1,) (none)."""
    make, example, training, split = CASES[request.param]
    torch.manual_seed(0)
    model, inputs = make(), (example(),)
    shapes = dynamic_shapes() if make is decoder else ({0: Dim("batch")},)
    budget = sharding_budget(model, inputs, dynamic_shapes=shapes, mesh=(2,), training=training, **OPTIONS) if split else None
    traced = trace_for_planning(model, inputs, dynamic_shapes=shapes, training=training)
    graph = traced.exported if traced.exported is not None else traced.graph_module
    return {mesh: planner.plan(graph, planner.Mesh(mesh), shape_env=traced.env, dims=traced.dim_exprs,
                               memory_budget=None if mesh == (1,) else budget, **OPTIONS)
            for mesh in [(2,), (2, 1), (1, 2), (1,)]}


def _steps(plan: planner.Plan, axis: int) -> list[tuple]:
    """Every collective step of ``plan`` with its mesh axis given as an axis of the (2,) mesh (``axis``: the size-2 one)."""
    assert all(s.axis == axis for r in plan.redistributions for s in r.steps)
    return sorted((r.consumer, r.operand, r.producer, s.kind, str(s.src), str(s.dst))
                  for r in plan.redistributions for s in r.steps)


def test_a_one_device_plan_has_no_redistribution(plans):
    assert plans[(1,)].redistributions == ()
    assert all(p == (Replicate(),) for p in plans[(1,)].placements.values())


@pytest.mark.parametrize("mesh, axis", [((2, 1), 0), ((1, 2), 1)])
def test_a_size_one_axis_adds_no_collective_to_the_plan_without_it(plans, mesh, axis):
    plan = plans[mesh]
    assert _steps(plan, axis) == _steps(plans[(2,)], 0)
    one = 1 - axis
    assert all(p[one] == Replicate() for p in plan.placements.values())
    assert plan.cost.communication == pytest.approx(plans[(2,)].cost.communication)
