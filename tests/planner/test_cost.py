"""The alpha-beta cost model: ring factors, links per mesh axis, roofline compute, memory."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy

from planner import HARDWARE_PRESETS, AlphaBetaCostModel, Hardware, LocalTensor, Mesh
from planner.cost import resolve_hardware
from planner.graph import GraphNode, TensorMeta

H100 = HARDWARE_PRESETS["h100-nvlink"]


def test_collectives_follow_ring_factors():
    model = AlphaBetaCostModel("h100-ib", Mesh((4,)))
    hw = model.hardware
    nbytes = np.array([1e6, 1e9])
    gather = model.collective_seconds("all_gather", 0, nbytes / 4, nbytes)
    np.testing.assert_allclose(gather, 3 * hw.intra_latency + 0.75 * nbytes / hw.intra_bandwidth)
    scatter = model.collective_seconds("reduce_scatter", 0, nbytes, nbytes / 4)
    np.testing.assert_allclose(scatter, gather)
    reduce = model.collective_seconds("all_reduce", 0, nbytes, nbytes)
    np.testing.assert_allclose(reduce, 2 * gather)
    np.testing.assert_allclose(model.collective_seconds("chunk", 0, nbytes, nbytes / 4), hw.launch)
    np.testing.assert_allclose(model.collective_seconds("to_partial", 0, nbytes, nbytes), hw.launch)
    with pytest.raises(ValueError, match="unknown collective"):
        model.collective_seconds("broadcast", 0, nbytes, nbytes)  # type: ignore[arg-type]


KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "chunk", "to_partial")


@pytest.mark.parametrize("preset", sorted(HARDWARE_PRESETS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_step_has_a_fixed_cost_and_a_step_over_one_rank_costs_nothing(preset, kind):
    # so among placements that move the same bytes, fewer steps are cheaper; and a size-1 axis moves nothing
    model = AlphaBetaCostModel(preset, Mesh((2, 1)))
    none = np.zeros(1)
    assert model.collective_seconds(kind, 0, none, none)[0] > 0
    assert model.collective_seconds(kind, 1, np.array([1e6]), np.array([1e6]))[0] == 0


def test_a_hardware_document_without_a_launch_cost_takes_the_default():
    data = HARDWARE_PRESETS["cpu-gloo"].to_dict()
    del data["launch"]
    assert Hardware.from_dict(data) == HARDWARE_PRESETS["cpu-gloo"]


@pytest.mark.parametrize("shape, inside", [((8, 8), (False, True)), ((2, 4), (True, True)), ((2, 4, 8), (False, False, True)), ((16,), (False,))])
def test_innermost_axes_use_the_node_link(shape, inside):
    model = AlphaBetaCostModel(H100, Mesh(shape))
    fast = model.collective_seconds("all_gather", len(shape) - 1, np.array([1e8]), np.array([1e9]))
    for axis, expect_inside in enumerate(inside):
        n = shape[axis]
        seconds = model.collective_seconds("all_gather", axis, np.array([1e9 / n]), np.array([1e9]))
        bandwidth = H100.intra_bandwidth if expect_inside else H100.inter_bandwidth
        latency = H100.intra_latency if expect_inside else H100.inter_latency
        np.testing.assert_allclose(seconds, (n - 1) * latency + (n - 1) / n * 1e9 / bandwidth)
    assert fast.shape == (1,)


def _node(target, outputs, role="op"):
    return GraphNode("n", role, target, tuple(TensorMeta(tuple(sympy.Integer(s) for s in o), "bfloat16", 2) for o in outputs))


def _local(*dims):
    return LocalTensor(tuple(np.array([float(d)]) for d in dims), 2, 1)


def test_compute_is_a_roofline_and_views_are_free():
    model = AlphaBetaCostModel(H100, Mesh((8,)))
    a, b, out = _local(4096, 4096), _local(4096, 4096), _local(4096, 4096)
    seconds = model.compute_seconds(_node("aten.mm.default", [(4096, 4096)]), [a, b], [out])
    np.testing.assert_allclose(seconds, 2 * 4096**3 / H100.flops)
    small = model.compute_seconds(_node("aten.gelu.default", [(4096, 4096)]), [a], [out])
    np.testing.assert_allclose(small, 2 * 4096 * 4096 * 2 / H100.memory_bandwidth)
    assert model.compute_seconds(_node("aten.view.default", [(4096, 4096)]), [a], [out])[0] == 0


@pytest.mark.parametrize("a, b, out", [
    ((65536, 4096), (8, 4096, 4096), (65536, 4096)),  # rows through their expert
    ((8, 4096, 4096), (4096, 65536), (4096, 65536)),  # columns through their expert
    ((4096, 65536), (65536, 4096), (8, 4096, 4096)),  # each expert its slice of the contraction: a weight gradient
])  # each large enough to be bound by its FLOPs
def test_a_grouped_product_of_experts_is_priced_at_the_products_of_its_groups(a, b, out):
    """``torch._grouped_mm``: 2·M·N·K over all groups, as one product of the rows and the contraction."""
    model = AlphaBetaCostModel(H100, Mesh((8,)))
    seconds = model.compute_seconds(_node("aten._grouped_mm.default", [out]), [_local(*a), _local(*b)], [_local(*out)])
    rows, columns = (out[-2], out[-1])
    np.testing.assert_allclose(seconds, 2 * rows * columns * a[-1] / H100.flops)


def test_memory_counts_gradients_and_optimizer_states_in_training():
    model = AlphaBetaCostModel(H100, Mesh((8,)), optimizer_states=2)
    weight = _node("placeholder", [(1024, 1024)], role="param")
    parts = model.memory_bytes(weight, [_local(1024, 1024)], training=True, held=False)
    assert {k: float(v[0]) for k, v in parts.items()} == {"parameters": 2**21, "gradients": 2**21, "optimizer": 2**22}
    assert set(model.memory_bytes(weight, [_local(1024, 1024)], training=False, held=False)) == {"parameters"}
    activation = _node("aten.gelu.default", [(8, 8)])
    assert float(model.memory_bytes(activation, [_local(8, 8)], training=True, held=True)["activations"][0]) == 128
    assert model.memory_bytes(activation, [_local(8, 8)], training=True, held=False) == {}


def test_hardware_presets_and_user_constants():
    assert resolve_hardware("cpu-gloo").name == "cpu-gloo"
    mine = dataclasses.replace(H100, name="mine", devices_per_node=4)
    assert resolve_hardware(mine) is mine
    assert isinstance(mine, Hardware)
    with pytest.raises(ValueError, match="unknown hardware preset 'tpu'"):
        resolve_hardware("tpu")
