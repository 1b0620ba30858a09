"""calibrate(mesh): measured figures the planner accepts; Hardware kept as JSON."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.export import Dim

import planner
from lowering import launch
from planner import HARDWARE_PRESETS, AlphaBetaCostModel, Hardware, LinkCost, Mesh
from planner.calibrate import KINDS, _fit, _mean_over, _time_after
from tests.planner.models import MLP, on_meta

MEASURED = dataclasses.replace(
    HARDWARE_PRESETS["cpu-gloo"], name="measured", mesh_shape=(2, 4),
    links=(LinkCost(1, 4, "all_gather", 1e-4, 3e8), LinkCost(0, 2, "all_reduce", 2e-3, 1e9)),
)


def test_json_round_trip_is_exact(tmp_path):
    assert Hardware.from_json(MEASURED.to_json()) == MEASURED
    MEASURED.save(tmp_path / "hw.json")
    assert Hardware.load(tmp_path / "hw.json") == MEASURED
    assert Hardware.from_json(HARDWARE_PRESETS["h100-nvlink"].to_json()) == HARDWARE_PRESETS["h100-nvlink"]


def test_json_that_is_not_hardware_is_refused():
    with pytest.raises(ValueError, match="not a hardware document"):
        Hardware.from_json('{"format": "planner.Plan"}')
    data = MEASURED.to_dict()
    del data["flops"]
    with pytest.raises(ValueError, match="lacks flops"):
        Hardware.from_dict(data)


def test_measured_links_price_their_axis_and_collective_on_the_mesh_measured():
    nbytes = np.array([1e6])
    model = AlphaBetaCostModel(MEASURED, Mesh((2, 4)))
    np.testing.assert_allclose(model.collective_seconds("all_gather", 1, nbytes / 4, nbytes), 3 * 1e-4 + 0.75 * 1e6 / 3e8)
    np.testing.assert_allclose(model.collective_seconds("all_reduce", 0, nbytes, nbytes), 2 * 2e-3 + 1e6 / 1e9)
    link = MEASURED.intra_latency, MEASURED.intra_bandwidth  # not measured: the link's figures
    np.testing.assert_allclose(model.collective_seconds("all_to_all", 1, nbytes, nbytes), 3 * link[0] + 0.75 * 1e6 / link[1])
    other = AlphaBetaCostModel(MEASURED, Mesh((4, 2)))  # another mesh: the link's figures everywhere
    np.testing.assert_allclose(other.collective_seconds("all_gather", 0, nbytes / 4, nbytes), 3 * link[0] + 0.75 * 1e6 / link[1])


@given(kind=st.sampled_from(KINDS), n=st.integers(2, 8), latency=st.floats(1e-6, 1e-2), bandwidth=st.floats(1e7, 1e11))
def test_fit_recovers_the_figures_the_cost_model_would_charge(kind, n, latency, bandwidth):
    hardware = dataclasses.replace(MEASURED, mesh_shape=(n,), links=(LinkCost(0, n, kind, latency, bandwidth),))
    model = AlphaBetaCostModel(hardware, Mesh((n,)))
    sizes = [1 << 10, 1 << 16, 1 << 20]
    local = np.array(sizes, dtype=float)
    after = local * n if kind == "all_gather" else local / n if kind == "reduce_scatter" else local
    seconds = model.collective_seconds(kind, 0, local, after)
    fitted = _fit(kind, n, sizes, seconds.tolist())
    assert math.isclose(fitted[0], latency, rel_tol=1e-6) and math.isclose(fitted[1], bandwidth, rel_tol=1e-6)


def test_a_collective_is_charged_what_it_adds_after_the_local_work_before_it():
    # A program issues each collective after compute, where the ranks meet after drifting apart;
    # back to back they stay in lock-step and the collective looks cheaper than it is in a program.
    now, calls = [0.0], []

    def work():
        calls.append("work")
        now[0] += 2.0

    def collective():
        calls.append("collective")
        now[0] += 3.0 if calls[-2] == "work" else 0.5  # what it costs after work, and back to back

    assert _time_after(collective, work, 4, torch.device("cpu"), clock=lambda: now[0]) == 3.0
    assert all(calls[k - 1] == "work" for k, c in enumerate(calls) if c == "collective")


def test_throughput_counts_the_time_the_device_spends_on_others():
    # A rank that shares its CPU is descheduled now and then: one call in four takes 5 units,
    # the others 1. The program pays the mean (2); a median of single calls (1) would not.
    now, calls = [0.0], [0]

    def kernel():
        calls[0] += 1
        now[0] += 5.0 if calls[0] % 4 == 0 else 1.0

    assert _mean_over(kernel, 39.5, torch.device("cpu"), clock=lambda: now[0]) == 2.0


def test_fit_of_collectives_too_fast_to_measure_prices_them_near_free():
    latency, bandwidth = _fit("all_reduce", 2, [1 << 10, 1 << 16], [0.0, 0.0])
    assert 0 < latency < 1e-6 and math.isfinite(bandwidth) and bandwidth > 1e12


def test_calibrate_needs_a_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        planner.calibrate((2,))


def _calibrate(rank: int) -> Hardware:
    return planner.calibrate((2,), message_bytes=(1 << 10, 1 << 14), matmul_size=64, elementwise_bytes=1 << 16, repeats=2)


@pytest.mark.slow
def test_calibrate_on_two_gloo_ranks_measures_what_the_planner_accepts(tmp_path):
    first, second = launch(_calibrate, 2, timeout=120)
    assert first == second  # every rank builds the same figures (the slowest rank's)
    assert first.mesh_shape == (2,) and sorted(link.kind for link in first.links) == sorted(KINDS)
    figures = [first.flops, first.flops_fp32, first.memory_bandwidth, first.memory, first.intra_latency,
               first.intra_bandwidth] + [x for link in first.links for x in (link.latency, link.bandwidth)]
    assert all(math.isfinite(x) and x > 0 for x in figures)
    assert first.devices_per_node == 2
    first.save(tmp_path / "hw.json")
    assert Hardware.load(tmp_path / "hw.json") == first
    x = torch.randn(8, 16, device="meta")
    plan = planner.plan_module(on_meta(MLP, 16, 32), (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((2,)),
                               constraints=["Eq(Mod(batch, 2), 0)"], hardware=Hardware.load(tmp_path / "hw.json"))
    assert plan.cost.total > 0 and plan.options["hardware"]["links"]
