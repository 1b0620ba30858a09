"""plan_module traces at a size covering the batch sizes it costs."""

from __future__ import annotations

import torch
from torch.export import Dim

import planner
from planner.trace_hint import batch_dim, covering_inputs, largest_sizes
from tests.planner.models import SmallCNN


def test_largest_sizes_per_dim_from_every_form_of_batch_sizes():
    assert largest_sizes([8, 512, 64], "batch") == {"batch": 512}
    assert largest_sizes({8: 0.9, 32: 0.1}, "batch") == {"batch": 32}
    assert largest_sizes([{"b": 4, "s": 128}, ({"b": 16, "s": 64}, 2.0)], None) == {"b": 16, "s": 128}
    assert largest_sizes(None, "batch") == {}


def test_covering_inputs_repeat_the_example_rows_along_each_dim():
    x = torch.arange(6).reshape(3, 2)
    (grown, other), changed = covering_inputs(torch.nn.Identity(), (x, torch.ones(3)),
                                              ({0: Dim("batch")}, None), [2, 7])
    assert changed == {"batch": 7}
    assert torch.equal(grown, x[[0, 1, 2, 0, 1, 2, 0]])
    assert torch.equal(other, torch.ones(3))
    bounded, changed = covering_inputs(torch.nn.Identity(), (x,), {"input": {0: Dim("batch", max=5)}}, [7])
    assert changed == {} and bounded[0] is x  # a size the Dim does not allow is left to the batch-point check


def test_plain_ints_bind_the_first_inputs_first_dim_even_a_derived_one_as_the_plan_does():
    batch, seq, x, y = Dim("batch"), Dim("seq"), torch.ones(16, 2), torch.ones(3, 2)
    assert batch_dim(torch.nn.Identity(), (x, y), ({0: 8 * batch}, {0: seq})) == "batch"  # was seq, unlike the plan
    assert batch_dim(torch.nn.Identity(), (x, y), (None, {1: seq, 0: batch})) == "batch"
    assert batch_dim(torch.nn.Identity(), (x,), None) is None
    (kept, grown), changed = covering_inputs(torch.nn.Identity(), (x, y), ({0: 8 * batch}, {0: seq}), [2, 4])
    assert changed == {} and kept is x and grown is y  # 4 is a batch, not a seq


def test_training_a_conv_net_traced_at_batch_8_plans_batch_sizes_past_16():
    # The joint trace's fake convolution backward used to ask which CPU backend (NNPACK wants
    # a batch of 16) the batch size picks, adding the guard batch < 16: planning batch 64 failed.
    plan = planner.plan_module(SmallCNN(), (torch.randn(8, 3, 16, 16),), dynamic_shapes={"x": {0: Dim("batch")}},
                               mesh=(2,), training=True, batch_sizes=[8, 64, 512])
    assert [b.values for b in plan.batch_costs] == [{"batch": 8}, {"batch": 64}, {"batch": 512}]
    assert plan.guards == ()
