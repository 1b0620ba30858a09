"""Fixtures the planner's test modules share: small traced models and their decision problems."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from planner import Mesh
from shapecore.torch import trace_for_planning
from tests.planner.models import MLP, Decoder, on_meta
from tests.planner.problems import problem_of


@pytest.fixture(scope="module")
def tiny_mlp():
    """A 32-64-32 MLP's forward on a 2-way mesh, costed at batches 16 and 4096."""
    model = on_meta(MLP, 32, 64)
    return problem_of(model, torch.randn(16, 32, device="meta"), Mesh((2,)), batch_sizes=[16, 4096])


@pytest.fixture(scope="module")
def training_mlp():
    """The same MLP's joint forward+backward graph on a (2, 2) mesh, costed at batches 16 and 4096."""
    return problem_of(on_meta(MLP, 32, 64), torch.randn(16, 32, device="meta"), Mesh((2, 2)), training=True,
                      batch_sizes=[16, 4096])


@pytest.fixture(scope="session")
def decoder_trace():
    """A 3-layer decoder's joint forward+backward graph (dynamic batch), traced once per session."""
    model = on_meta(Decoder, 3)
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    return trace_for_planning(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=True)
