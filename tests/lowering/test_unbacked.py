"""A data-dependent size (mixture-of-experts routing): planned, lowered and run on 2 gloo ranks."""

import pytest
import torch
from torch.export import Dim

from lowering import launch
from lowering.parallel import ParallelModule
from tests.planner.models import Routed


def _forward(rank):
    torch.manual_seed(0)
    model = Routed()
    pm = ParallelModule(model, (torch.randn(8, 16),), dynamic_shapes=({0: 2 * Dim("batch", max=512)},), mesh=(2,),
                        batch_sizes=[4, 32, 256])  # the batch may split; the routed tokens' count u0 stays whole
    same = []
    for batch in (6, 24, 50):
        x = torch.randn(batch, 16, generator=torch.Generator().manual_seed(batch))
        out = pm(*pm.shard_inputs(x)).full_tensor()
        same.append(bool(torch.allclose(out, model(x), rtol=1e-5, atol=1e-6)))
    return same, pm.compile_count, pm.plan.options["unbacked_sizes"]


@pytest.mark.slow  # gloo ranks
def test_a_routed_expert_runs_equal_to_one_device_from_one_compile():
    for same, compiles, unbacked in launch(_forward, 2, timeout=300):
        assert same == [True, True, True]
        assert compiles == 1
        assert unbacked  # the plan states what the data-dependent sizes were costed at
