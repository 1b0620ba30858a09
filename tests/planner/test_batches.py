"""Batch points: the values sizes are costed at, with their weights; a point the trace's guards,
the user's constraints or a symbol's range exclude is refused, naming why."""

from __future__ import annotations

import pytest
import torch

from planner.batches import BatchPoints
from shapecore import parse
from shapecore.torch import trace_make_fx


def _small_batch_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.shape[0] < 16 else x * 3


def test_a_batch_point_outside_the_traced_range_names_the_guard_and_line_that_set_it():
    traced = trace_make_fx(_small_batch_branch, (torch.randn(8, 4),))
    symbol = next(iter(traced.env.hints))
    lower, upper = traced.range_origins[symbol]
    assert f"{symbol} < 16" in upper and "_small_batch_branch" in upper
    with pytest.raises(ValueError) as info:
        BatchPoints.build([8, 64], traced.env, [symbol], {"batch": symbol}, symbol, [parse(f"{symbol} >= 1")],
                          origins=traced.range_origins)
    message = str(info.value)
    assert f"puts batch ({symbol})=64 outside its range [2, 15]" in message
    assert f"guard {symbol} < 16 at" in message and "_small_batch_branch" in message
