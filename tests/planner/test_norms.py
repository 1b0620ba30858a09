"""Batch norm: in eval mode a conv/BatchNorm2d network is planned batch-split end to end; in
training mode its running statistics are the new values of its buffers."""

import pytest
import torch
from torch.export import Dim

import planner
from planner import Mesh, Plan
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


_BUFFERS = {f"bn{k}.{name}" for k in (1, 2) for name in ("running_mean", "running_var", "num_batches_tracked")}


@pytest.mark.parametrize("training", [False, True], ids=["forward", "joint"])
def test_a_batch_norm_in_training_mode_outputs_its_buffers_new_values_in_the_buffers_placements(training):
    """The running statistics a train-mode BatchNorm updates are outputs of the traced graph; the plan
    says which buffer each one is (so the lowering writes it back, not hands it to the user),
    delivers it in that buffer's placement, and counts the user outputs (and their tangents) apart."""
    plan = planner.plan_module(SmallCNN().train(), (torch.randn(8, 3, 8, 8),),
                               dynamic_shapes={"x": {0: 2 * Dim("batch", max=64)}}, mesh=Mesh((2,)),
                               batch_sizes=[4, 16], training=training)
    roles = [(o, p) for o, p in zip(plan.graph_outputs, plan.output_placements) if o is not None]
    updates = {o.fqn: p for o, p in roles if o.role == "buffer_mutation"}
    assert updates.keys() == _BUFFERS
    assert all(p == plan.param_placements[fqn] for fqn, p in updates.items())
    assert [o.index for o, _ in roles if o.role == "output"] == [0]
    assert [i.index for i in plan.graph_inputs if i.role == "tangent"] == ([0] if training else [])
    assert Plan.from_json(plan.to_json()).graph_outputs == plan.graph_outputs


class _ScalesItsInput(torch.nn.Module):
    def forward(self, x):
        return x.mul_(2).sum(0)


def test_a_model_that_updates_its_input_in_place_is_refused_by_name():
    with pytest.raises(ValueError, match=r"updates its input .*x.* in place.*buffers only"):
        planner.plan_module(_ScalesItsInput(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("batch")}},
                            mesh=Mesh((2,)))
