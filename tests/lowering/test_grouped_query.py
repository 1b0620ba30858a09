"""Grouped-query attention split on the batch: repeat_kv's whole slices stay split and compute what one device does."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import Shard
from torch.export import Dim

from lowering import launch


def _run(rank: int) -> tuple[list[str], float, float, int]:
    from lowering.parallel import ParallelModule
    from tests.planner.models import GroupedQueryAttention

    torch.manual_seed(0)
    model, x, y = GroupedQueryAttention(64, 8, 2), torch.randn(8, 16, 64), torch.randn(12, 16, 64)
    pm = ParallelModule(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=(2,), hardware="cpu-gloo",
                        constraints=["Eq(Mod(batch, 2), 0)"], batch_sizes=[8])
    slices = [str(pm.plan.placements[n]) for n, d in pm.plan.decisions.items() if d.op.startswith("aten.slice")]
    errors = [float((pm(t).full_tensor() - model(t)).abs().max()) for t in (x, y)]
    return slices, errors[0], errors[1], pm.compile_count


@pytest.mark.slow
def test_batch_split_repeat_kv_matches_one_device_at_two_batch_sizes_from_one_compile():
    for slices, error_8, error_12, compiles in launch(_run, 2, timeout=240):
        assert slices and all(s == str((Shard(0),)) for s in slices)
        assert error_8 < 1e-5 and error_12 < 1e-5 and compiles == 1
