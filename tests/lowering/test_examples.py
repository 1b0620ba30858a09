"""The reference models: only the batch is dynamic, and any batch size from 2 up is served by one
trace; rows are computed independently (so a split batch computes the same rows), attention is
causal, rotary tables are not state."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from lowering.examples import MLP, Attention, Decoder
from shapecore.torch import trace_for_planning


def _model(name):
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), lambda b, g: torch.randn(b, 32, generator=g)
    if name == "attention":
        return Attention(), lambda b, g: torch.randn(b, 8, 32, generator=g)
    if name == "rotary attention":
        return Attention(seq=8), lambda b, g: torch.randn(b, 8, 32, generator=g)
    return Decoder(), lambda b, g: torch.randint(0, 64, (b, 8), generator=g)


MODELS = ["mlp", "attention", "rotary attention", "decoder"]


@pytest.mark.parametrize("name", ["mlp", "rotary attention", "decoder"])
def test_only_the_batch_is_dynamic_and_the_trace_serves_every_batch_from_two(name):
    model, make = _model(name)
    traced = trace_for_planning(model, (make(4, torch.Generator().manual_seed(0)),), dynamic_shapes=({0: Dim("batch")},))
    (symbol,) = traced.env.symbols
    assert str(traced.dim_exprs["batch"]) == symbol
    assert traced.env.guards == [] and traced.env.facts == []
    bounds = traced.env.bound(symbol)
    assert (bounds.lo, bounds.hi) == (2, float("inf"))


@pytest.mark.parametrize("name", MODELS)
def test_rows_are_computed_independently(name):
    model, make = _model(name)
    x = make(6, torch.Generator().manual_seed(1))
    whole = model(x)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    torch.testing.assert_close(model(x[order]), whole[order])
    torch.testing.assert_close(model(x[2:4]), whole[2:4])


@pytest.mark.parametrize("name", ["attention", "rotary attention", "decoder"])
def test_a_position_sees_only_the_positions_before_it(name):
    model, make = _model(name)
    generator = torch.Generator().manual_seed(2)
    x, other = make(2, generator), make(2, generator)
    for t in range(8):
        changed = torch.cat([x[:, : t + 1], other[:, t + 1:]], dim=1)
        torch.testing.assert_close(model(changed)[:, : t + 1], model(x)[:, : t + 1])


def test_rotary_tables_are_buffers_but_not_state():
    assert not list(Attention().buffers())
    rotary = Attention(dim=32, heads=4, seq=8)
    assert {name for name, _ in rotary.named_buffers()} == {"cos", "sin"} and not any(
        name in rotary.state_dict() for name in ("cos", "sin"))
    assert rotary.cos.shape == (8, 8)
    decoder = Decoder(layers=2)
    assert not [key for key in decoder.state_dict() if key.endswith((".cos", ".sin"))]
    assert len([name for name, _ in decoder.named_buffers()]) == 4
