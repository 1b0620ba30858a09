"""A data-dependent size (mixture-of-experts routing): planned, lowered and run on 2 gloo ranks,
the routed tokens kept whole or split into torch.chunk's uneven pieces."""

import pytest
import torch
from torch.export import Dim

from lowering import launch
from lowering.parallel import ParallelModule
from planner import RequireShard
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


def _routing_by_sign() -> Routed:
    """A Routed model whose gate sends exactly the tokens with a positive first feature to the expert."""
    torch.manual_seed(0)
    model = Routed()
    with torch.no_grad():
        model.gate.weight.zero_()
        model.gate.weight[0, 0], model.gate.weight[1, 0] = 1.0, -1.0
        model.gate.bias.zero_()
    return model


def _tokens(batch: int, routed: int) -> torch.Tensor:
    x = torch.randn(batch, 16, generator=torch.Generator().manual_seed(batch))
    x[:, 0] = -(x[:, 0].abs() + 0.1)
    x[torch.randperm(batch, generator=torch.Generator().manual_seed(routed))[:routed], 0] *= -1
    return x


def _uneven_forward(rank):
    model = _routing_by_sign()
    pm = ParallelModule(model, (torch.randn(8, 16),), dynamic_shapes=({0: 2 * Dim("batch", max=512)},), mesh=(2,),
                        batch_sizes=[4, 32, 256], placement_constraints=[RequireShard("u0", 0)])
    errors = []
    for batch, routed in ((6, 1), (24, 0), (50, 25), (24, 24)):  # rank 1's piece empty; nothing routed; odd; all
        x = _tokens(batch, routed)
        assert int((model.gate(x).argmax(-1) == 0).sum()) == routed
        out = pm(*pm.shard_inputs(x)).full_tensor()
        errors.append(float((out - model(x)).abs().max()))
    split = {p.node: (p.status, p.method) for p in pm.plan.proofs if p.size == "u0"}
    return errors, pm.compile_count, split


@pytest.mark.slow  # gloo ranks
def test_the_routed_tokens_split_unevenly_run_equal_to_one_device_from_one_compile():
    for errors, compiles, split in launch(_uneven_forward, 2, timeout=300):
        assert {"index_select", "addmm_1"} <= split.keys()  # the expert runs on this rank's piece of the u0 tokens
        assert set(split.values()) == {("uneven", "data-dependent")}
        assert max(errors) <= 1e-5, errors
        assert compiles == 1
