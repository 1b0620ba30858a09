"""A lowered training step (joint forward+backward graph): parameter gradients of ``sum(outputs)``
equal the single-device ones for a 2-layer MLP on a (2, 2) mesh, at three batch sizes, one compile;
on a one-device mesh, with no collective in the program and plain parameters and gradients."""

import functools

import pytest
import torch
from torch.distributed.tensor import DTensor
from torch.export import Dim

from lowering import launch
from lowering.examples import MLP
from lowering.parallel import ParallelModule
from tests.lowering.budgets import sharding_budget

pytestmark = pytest.mark.slow  # gloo ranks


ARGUMENTS = {"dynamic_shapes": ({0: Dim("batch")},), "training": True, "constraints": ["Eq(Mod(batch, 4), 0)"]}


def _model():
    torch.manual_seed(0)
    return MLP()


def _training_step(mesh, budget, rank):
    model = _model()
    pm = ParallelModule(model, (torch.randn(8, 32),), mesh=mesh, memory_budget=budget, **ARGUMENTS)
    errors, outputs = [], []
    for batch in (8, 16, 24):
        x = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        out = pm(*pm.shard_inputs(x))
        out.full_tensor().sum().backward()
        grads = {name: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for name, p in pm.named_parameters()}
        plain = all(type(p) is torch.nn.Parameter and type(p.grad) is torch.Tensor for p in pm.parameters())
        pm.zero_grad()
        model.zero_grad()
        expected_out = model(x)
        expected_out.sum().backward()
        outputs.append(bool(torch.allclose(out.full_tensor(), expected_out, rtol=1e-4, atol=1e-6)))
        expected = dict(model.named_parameters())
        errors.append({name: float((g - expected[name].grad).abs().max() / expected[name].grad.abs().max())
                       for name, g in grads.items()})
    sharded = sorted(name for name, ps in pm.plan.param_placements.items() if any(p.is_shard() for p in ps))
    collectives = [str(n.target) for n in pm.program.graph_module.graph.nodes if "c10d" in str(n.target)]
    return errors, outputs, pm.compile_count, sharded, collectives, plain


def test_parameter_gradients_equal_the_single_device_gradients():
    budget = sharding_budget(_model(), (torch.randn(8, 32),), mesh=(2, 2), targets=("fc1.weight", "fc2.weight"),
                             **ARGUMENTS)
    for errors, outputs, compiles, sharded, _, plain in launch(functools.partial(_training_step, (2, 2), budget), 4,
                                                       timeout=300):
        assert all(set(e) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} for e in errors)
        assert max(max(e.values()) for e in errors) < 1e-4
        assert outputs == [True, True, True]
        assert compiles == 1
        assert "fc1.weight" in sharded and "fc2.weight" in sharded and not plain


def test_on_one_device_the_training_program_has_no_collective_and_the_same_gradients_on_plain_parameters():
    # a one-device plan used to redistribute over its one rank (all-gathers, to_partial masks); its parameters
    # and their gradients were DTensors, which only add DTensor's dispatch there
    [(errors, outputs, compiles, sharded, collectives, plain)] = launch(functools.partial(_training_step, (1,), None), 1,
                                                                 timeout=300)
    assert collectives == []
    assert max(max(e.values()) for e in errors) < 1e-4
    assert outputs == [True, True, True] and compiles == 1 and sharded == [] and plain
