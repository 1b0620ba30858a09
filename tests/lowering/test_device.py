"""A lowered program lives on its rank's device: traced there (here on fake CUDA tensors, which
need no GPU), so Inductor compiles it for the device its inputs are on. Traced on the CPU, a CUDA
rank's program was compiled to C++ loops that read the GPU's memory as the host's: a crash
(SIGSEGV) at the first call on an H200. (A model whose trace holds ``scaled_dot_product_attention``
cannot be lowered for fake CUDA tensors on a CPU build: torch asks CUDA which kernel to use.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import planner
from lowering.compile import _at
from lowering.lower import lower
from planner import Mesh, RequireShard
from shapecore.torch import trace_for_planning
from tests.lowering.handmade import rank_view, sized_groups

CUDA = torch.device("cuda", 1)  # not the first device: the rank's own index is kept


def _lowered(model: torch.nn.Module, example: torch.Tensor, mesh: Mesh, coordinate: tuple[int, ...], *,
             training: bool):
    """``model`` (on the meta device, as a model too large for one device is traced) planned with
    its batch split over ``dp`` and lowered for the rank at ``coordinate``, whose device is CUDA."""
    traced = trace_for_planning(model.to("meta"), (example.to("meta"),), dynamic_shapes=({0: 2 * Dim("batch")},),
                                training=training)
    plan = planner.plan(traced.graph_module, mesh, shape_env=traced.env, dims=traced.dim_exprs,
                        placement_constraints=[RequireShard("batch", axis="dp")])
    with sized_groups(mesh):
        return lower(traced.graph_module, plan, groups=rank_view(mesh, coordinate, CUDA))


def _devices(program) -> set[torch.device]:
    return {n.meta["val"].device for n in program.graph_module.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}


class _Made(nn.Module):
    """Tensors made where the input is (``new_ones``, ``full``, the row numbers by ``arange``),
    added to a layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ones = x.new_ones(x.shape)
        rows = torch.arange(x.shape[0], dtype=x.dtype, device=x.device)[:, None]
        return self.fc(x) + torch.full(x.shape, 2.0, device=x.device) + ones + rows


@pytest.mark.parametrize("training", [False, True])
def test_a_cuda_ranks_program_is_traced_on_its_device_inputs_factories_and_collectives_alike(training):
    program = _lowered(_Made(), torch.randn(4, 8), Mesh((2, 2), ("dp", "tp")), (1, 0), training=training)
    assert _devices(program) == {CUDA}
    assert {x.device for x in program.example_inputs if isinstance(x, torch.Tensor)} == {CUDA}
    factories = [n for n in program.graph_module.graph.nodes if n.kwargs.get("device") is not None]
    assert factories and {n.kwargs["device"] for n in factories} == {CUDA}  # traced on meta, made on the rank's device
    assert program.collectives  # their results are on the device too
    values = program.localizer.local_values({program.symbols[0].of: 6})
    specialized = _at(program, {s.name: values[s.name] for s in program.symbols}, program.example_inputs)
    assert {x.device for x in specialized if isinstance(x, torch.Tensor)} == {CUDA}  # a batch compiled on its own
