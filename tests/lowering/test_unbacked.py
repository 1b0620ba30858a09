"""A data-dependent size (mixture-of-experts routing): planned, lowered and run on 2 gloo ranks."""

import pytest
import torch
from torch import nn
from torch.export import Dim

from lowering import launch
from lowering.parallel import ParallelModule


class Routed(nn.Module):
    """A gate picks tokens; an expert runs on them; ``index_add`` scatters its output back."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, 2)
        self.expert = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sel = (self.gate(x).argmax(-1) == 0).nonzero().squeeze(-1)
        return x.index_add(0, sel, self.expert(x.index_select(0, sel)))


def _forward(rank):
    torch.manual_seed(0)
    model = Routed()
    pm = ParallelModule(model, (torch.randn(8, 16),), dynamic_shapes=({0: Dim("batch", max=1024)},), mesh=(2,),
                        batch_sizes=[8, 64, 512])
    same = []
    for batch in (6, 24, 50):
        x = torch.randn(batch, 16, generator=torch.Generator().manual_seed(batch))
        out = pm.gather_outputs(pm(*pm.shard_inputs(x)))
        same.append(bool(torch.allclose(out, model(x), rtol=1e-5, atol=1e-6)))
    return same, pm.compile_count, pm.plan.options["unbacked_sizes"]


@pytest.mark.slow  # gloo ranks
def test_a_routed_expert_runs_equal_to_one_device_from_one_compile():
    for same, compiles, unbacked in launch(_forward, 2, timeout=300):
        assert same == [True, True, True]
        assert compiles == 1
        assert unbacked  # the plan states what the data-dependent sizes were costed at
