"""Fixtures the tests of the decision problem share: problems built from small traced models, once
per session (the tests only read them)."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from planner import Mesh
from planner.api import prepare
from shapecore.torch import trace_for_planning
from tests.planner.models import Decoder, on_meta


class PlusTranspose(torch.nn.Module):
    """``y + y.transpose(1, 2)``: the add follows ``y``, and so reads its transpose inside one group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.relu()
        return y + y.transpose(1, 2)


@pytest.fixture(scope="session")
def two_layer_decoder_trace():
    """A 2-layer decoder's joint forward+backward graph (dynamic batch), traced once per session."""
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    return trace_for_planning(on_meta(Decoder, 2), (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=True)


def _prepare(traced, mesh, *, cluster=True):
    return prepare(traced.graph_module, mesh, shape_env=traced.env, dims=traced.dim_exprs, constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[8, 512],
                   cluster=cluster, merge_followers=cluster).problem


@pytest.fixture(scope="session", params=["clustered", "flat", "inner-edge"])
def problem(request, two_layer_decoder_trace):
    """The decision problem of the 2-layer decoder on a (2, 2) mesh, clustered or flat, and of a
    graph with an edge inside a group (a transpose read by the op that follows its producer)."""
    if request.param == "inner-edge":
        traced = trace_for_planning(PlusTranspose(), (torch.randn(4, 8, 8),), dynamic_shapes={"x": {0: Dim("batch")}})
        found = _prepare(traced, Mesh((2,)))
        assert any(g.inner for g in found.groups)
        return found
    return _prepare(two_layer_decoder_trace, Mesh((2, 2)), cluster=request.param == "clustered")


@pytest.fixture(scope="session")
def problem_with_a_size_one_axis():
    """The decision problem of :class:`PlusTranspose` on a (2, 1) mesh."""
    traced = trace_for_planning(PlusTranspose(), (torch.randn(4, 8, 8),), dynamic_shapes={"x": {0: Dim("batch")}})
    return _prepare(traced, Mesh((2, 1)))
