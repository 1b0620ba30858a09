"""Batch norm with its batch split: the lowered op all-reduces its statistics, so a training
step equals one device's (``lowering.sync_norm``, the planner's ``batch_sync`` strategy)."""

import pytest
import torch
from torch.export import Dim

from lowering import launch
from lowering.parallel import ParallelModule
from lowering.sync_norm import synced_batch_norm
from planner.strategies import BuiltinProvider, DTensorProvider
from tests.planner.models import SmallCNN

_aten = torch.ops.aten


def _close(got, expected):
    return all(g is None and e is None or torch.allclose(g, e, rtol=1e-5, atol=1e-6) for g, e in zip(got, expected))


def test_synced_batch_norm_on_one_rank_is_the_aten_op():
    x, weight, bias = torch.randn(6, 4, 5, 5), torch.randn(4), torch.randn(4)
    running_mean, running_var = torch.randn(4), torch.rand(4) + 0.5
    forward = (x, weight, bias, running_mean, running_var, True, 0.1, 1e-5)
    expected = _aten._native_batch_norm_legit_functional.default(*forward)
    assert _close(synced_batch_norm(_aten._native_batch_norm_legit_functional.default, forward, {}, lambda t: t), expected)
    for mask in ([True, True, True], [True, False, False]):
        backward = (torch.randn_like(x), x, weight, running_mean, running_var, expected[1], expected[2], True, 1e-5, mask)
        assert _close(synced_batch_norm(_aten.native_batch_norm_backward.default, backward, {}, lambda t: t),
                      _aten.native_batch_norm_backward.default(*backward))


class _BatchSyncedNorms:
    """Builtin strategies, with batch norms offered only ``batch_sync``: the plan under test uses it."""

    name = "batch-synced-norms"

    def __init__(self):
        self.builtin = BuiltinProvider()

    def strategies(self, node, graph, mesh):
        if "batch_norm" not in node.target:
            return None
        return [s for s in self.builtin.strategies(node, graph, mesh) if s.rule == "batch_sync"]


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected.double()).abs().max() / expected.double().abs().max().clamp_min(1e-12))


def _training_step(rank):
    torch.manual_seed(0)
    model = SmallCNN()
    pm = ParallelModule(model, (torch.randn(32, 3, 6, 6),), dynamic_shapes=({0: 2 * Dim("batch", max=64)},), mesh=(2,),
                        training=True, batch_sizes=[16, 18, 20],
                        strategies=[_BatchSyncedNorms(), BuiltinProvider(), DTensorProvider()])
    errors = []
    for batch in (32, 36, 40):
        x = torch.randn(batch, 3, 6, 6, generator=torch.Generator().manual_seed(batch))
        loss = pm(*pm.shard_inputs(x)).full_tensor().square().mean()
        loss.backward()
        expected = model(x).square().mean()
        expected.backward()
        got = {"loss": loss.detach()} | {name: p.grad.full_tensor() for name, p in pm.named_parameters()} | {
            name: b.full_tensor() for name, b in pm.named_buffers()}
        want = {"loss": expected.detach()} | {name: p.grad for name, p in model.named_parameters()} | dict(
            model.named_buffers())
        errors.append({name: _relative_error(got[name], want[name]) for name in want})
        pm.zero_grad()
        model.zero_grad()
    rules = {d.rule for d in pm.plan.decisions.values() if "batch_norm" in d.op}
    split = pm.plan.placements["convolution"][0]
    return errors, pm.compile_count, rules, split


@pytest.mark.slow  # gloo ranks
def test_training_with_the_batch_split_across_batch_norms_equals_one_device():
    """Three steps at three batch sizes from one compile: the loss, every parameter's gradient and the
    running statistics (updated in place, as the model's own forward updates them) equal one
    device's within a relative error of 1e-5 (float32 sums in another order)."""
    for errors, compiles, rules, split in launch(_training_step, 2, timeout=300):
        assert rules == {"batch_sync"} and split.is_shard(0)
        assert {"bn1.running_mean", "bn2.running_var", "bn2.num_batches_tracked"} <= errors[0].keys()
        for step in errors:
            assert max(step.values()) < 1e-5, step
        assert compiles == 1
