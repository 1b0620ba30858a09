"""Batch points: the values sizes are costed at, with their weights; a point the trace's guards,
the user's constraints or a symbol's range exclude is refused, naming why."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.batches import BatchPoints
from planner.dim_names import DimNames
from shapecore import ShapeEnv, parse
from shapecore.torch import trace_make_fx


def _small_batch_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.shape[0] < 16 else x * 3


def test_a_batch_point_outside_the_traced_range_names_the_guard_and_line_that_set_it():
    traced = trace_make_fx(_small_batch_branch, (torch.randn(8, 4),))
    symbol = next(iter(traced.env.hints))
    lower, upper = traced.range_origins[symbol]
    assert f"{symbol} < 16" in upper and "_small_batch_branch" in upper
    with pytest.raises(ValueError) as info:
        BatchPoints.build([8, 64], traced.env, [symbol], DimNames.of({"batch": symbol}, batch=symbol), [parse(f"{symbol} >= 1")],
                          origins=traced.range_origins)
    message = str(info.value)
    assert f"puts batch ({symbol})=64 outside its range [2, 15]" in message
    assert f"guard {symbol} < 16 at" in message and "_small_batch_branch" in message


def _env() -> ShapeEnv:
    """``s0`` (the batch, Dim ``batch``) at 8, ``s1`` (a length, at least 16) at 32, ``s2 := 4*s0`` at most 4096."""
    env = ShapeEnv()
    env.create_symbol(8, name="s0")
    env.create_symbol(32, name="s1")
    env.create_symbol(32, name="s2", max=4096)
    assert env.evaluate_expr("Eq(s2, 4*s0)") and env.evaluate_expr("s1 >= 16")
    return env


def _build(batch_sizes, *, constraints=(), batch_symbol="s0") -> BatchPoints:
    return BatchPoints.build(batch_sizes, _env(), ["s0", "s1", "s2"], DimNames.of({"batch": "s0"}, batch=batch_symbol),
                             [parse(c) for c in constraints])


def test_no_batch_sizes_is_one_point_at_the_hints():
    points = _build(None)
    assert points.values == [{"s0": 8, "s1": 32}] and points.labels == [{"batch": 8, "s1": 32}]
    assert points.weights.tolist() == [1.0] and len(points) == 1


def test_ints_bind_the_batch_symbol_and_other_symbols_keep_their_hints():
    points = _build([8, 64])
    assert points.values == [{"s0": 8, "s1": 32}, {"s0": 64, "s1": 32}]
    assert points.labels == [{"batch": 8}, {"batch": 64}]
    assert _build([16, 24], batch_symbol="s1").values == [{"s0": 8, "s1": 16}, {"s0": 8, "s1": 24}]


def test_mappings_name_dims_or_symbols_and_pairs_carry_weights():
    points = _build([({"batch": 4, "s1": 64}, 3.0), ({"s0": 16}, 1.0)])
    assert points.values == [{"s0": 4, "s1": 64}, {"s0": 16, "s1": 32}]
    assert points.labels == [{"batch": 4, "s1": 64}, {"batch": 16}]
    assert points.weights.tolist() == [0.75, 0.25]
    alone = points.single(1)
    assert alone.values == [{"s0": 16, "s1": 32}] and alone.weights.tolist() == [1.0]


@settings(max_examples=50)
@given(st.dictionaries(st.integers(2, 1024), st.floats(0.01, 100.0), min_size=1, max_size=5))
def test_weights_are_normalized_and_sizes_follow_the_replacements(weighted):
    points = _build(weighted)
    total = sum(weighted.values())
    assert np.allclose(points.weights, [w / total for w in weighted.values()]) and points.weights.sum() == pytest.approx(1.0)
    assert points.size(parse("s2*s1")).tolist() == [4 * b * 32 for b in weighted]  # s2 := 4*s0
    assert points.size(sympy.Integer(7)).tolist() == [7.0] * len(weighted)
    assert points.expected(points.size(parse("s0"))) == pytest.approx(sum(b * w for b, w in weighted.items()) / total)


@pytest.mark.parametrize("batch_sizes, constraints, error, message", [
    ([6], ["Eq(Mod(s0, 4), 0)"], ValueError, r"batch point \{'batch': 6\} breaks Eq\(Mod\(batch, 4\), 0\)"),  # in Dim names
    ([{"s1": 8}], [], ValueError, r"batch point \{'s1': 8\} breaks s1 >= 16"),
    ([2048], [], ValueError, r"puts batch \(s0\)=2048 outside its range \[2, 1024\]\. The trace holds only there"),
    ([{"seq": 8}], [], ValueError, r"names 'seq', which is neither a Dim name \(batch\) nor a symbol of the trace \(s0, s1, s2\)"),
    ([{"batch": 8.0}], [], TypeError, r"batch point value for 'batch' must be an int, got 8\.0"),
    ([8, {"batch": 8}], [], TypeError, "mixes ints and mappings"),
    (["8"], [], TypeError, r"entries must be ints, mappings, or \(mapping, weight\) pairs; got '8'"),
    ({8: 1.0, 16: -1.0}, [], ValueError, "weights must be nonnegative with a positive sum"),
    ({8: 0.0}, [], ValueError, "weights must be nonnegative with a positive sum"),
])
def test_points_that_cannot_be_costed_are_refused_naming_them(batch_sizes, constraints, error, message):
    with pytest.raises(error, match=message):
        _build(batch_sizes, constraints=constraints)


def test_ints_need_a_symbolic_size_to_bind():
    with pytest.raises(ValueError, match="the graph has no symbolic size; trace with a dynamic batch dim"):
        BatchPoints.build([8], ShapeEnv(), [], DimNames())


def test_the_default_expectation_of_a_data_dependent_size_is_recorded_as_an_expression_that_reads_back():
    env = ShapeEnv()
    env.create_symbol(8, name="s0")
    env.create_symbol(6, name="s1")
    env.create_unbacked_symbol(name="u0", min=0, max=1024)
    dims = DimNames.of({"batch": "s0", "seq": "s1"})
    points = BatchPoints.build([{"batch": 10, "seq": 4}, {"batch": 3, "seq": 9}], env, ["s0", "s1", "u0"], dims)
    assert points.unbacked == {"u0": "(max(batch, seq)) // 2"}  # half of the largest size, over the Dim names
    assert [v["u0"] for v in points.values] == [5, 4]
    again = BatchPoints.build([{"batch": 10, "seq": 4}, {"batch": 3, "seq": 9}], env, ["s0", "s1", "u0"], dims,
                              unbacked_sizes=points.unbacked)
    assert again.values == points.values
