"""Batch norm: in eval mode a conv/BatchNorm2d network is planned batch-split end to end."""

import torch
from torch.export import Dim

import planner
from planner import Mesh
from planner.placements import Shard
from tests.planner.models import SmallCNN


def test_eval_batch_norm_keeps_the_batch_split_with_no_collective():
    plan = planner.plan_module(SmallCNN().eval(), (torch.randn(8, 3, 8, 8),), dynamic_shapes={"x": {0: 4 * Dim("batch", max=256)}},
                               mesh=Mesh((4,)), batch_sizes=[2, 16, 128])
    norms = [name for name, d in plan.decisions.items() if "batch_norm" in d.op]
    assert len(norms) == 2
    assert all(plan.tuple_placements[name][0] == (Shard(0),) for name in norms)
    assert not [r for r in plan.redistributions if r.consumer in norms]
    assert plan.redistributions == ()  # the batch stays split from the input to the output
