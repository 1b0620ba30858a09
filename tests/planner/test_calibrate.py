"""calibrate(mesh): measured figures the planner accepts; Hardware kept as JSON."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.export import Dim

import planner
from lowering import launch
from planner import HARDWARE_PRESETS, AlphaBetaCostModel, Hardware, LinkCost, Mesh
from planner.calibrate import KINDS, _device_type, _fit, _mean_over, _memory_per_device, _saturating, _time_after
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
    fitted = _fit(kind, n, sizes, seconds.tolist(), launch=0.0)
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


def test_fit_of_collectives_too_fast_to_measure_prices_them_at_one_launch():
    latency, bandwidth = _fit("all_reduce", 2, [1 << 10, 1 << 16], [0.0, 0.0], launch=0.0)
    assert 0 < latency < 1e-6 and math.isfinite(bandwidth) and bandwidth > 1e12
    latency, _ = _fit("all_reduce", 4, [1 << 10, 1 << 16], [0.0, 0.0], launch=6e-6)
    assert math.isclose(2 * 3 * latency, 6e-6)  # all_reduce's fixed cost, 2(n-1)·latency: one launch


@given(kind=st.sampled_from(KINDS), n=st.integers(2, 8), latency=st.floats(1e-7, 1e-3), launch=st.floats(0, 1e-4))
def test_a_fitted_collective_costs_at_least_one_launch_and_keeps_a_larger_measured_latency(kind, n, latency, launch):
    hops = 2.0 if kind == "all_reduce" else 1.0
    sizes = [1 << 10, 1 << 16, 1 << 20]
    seconds = [hops * (n - 1) * latency + s / 1e9 for s in sizes]
    fitted, _ = _fit(kind, n, sizes, seconds, launch=launch)
    assert math.isclose(hops * (n - 1) * fitted, max(hops * (n - 1) * latency, launch), rel_tol=1e-6)


def _launch_bound_device(latency: float, peak: float, work: Any, probed: list[int]) -> Any:
    """A fake kernel's seconds per call at each size: a fixed launch latency, then ``work(size) / peak``,
    so its throughput rises with the size towards ``peak`` (a GPU's small matmuls measure its launch)."""
    def seconds_at(size: int) -> float:
        probed.append(size)
        return latency + work(size) / peak

    return seconds_at


def _cube(side: int) -> float:
    return 2.0 * side**3


def _linear(nbytes: int) -> float:
    return 3.0 * nbytes


@given(latency=st.floats(1e-6, 1e-3), peak=st.floats(1e9, 1e16), work=st.sampled_from([_cube, _linear]),
       start=st.integers(1, 4096), tolerance=st.sampled_from([0.02, 0.1, 0.25]))
@example(latency=1e-6, peak=1e9, work=_linear, start=375, tolerance=0.1)  # stops exactly at the tolerance
def test_probes_grow_until_the_throughput_stops_rising_and_read_its_plateau(latency, peak, work, start, tolerance):
    probed = []
    rate = _saturating(_launch_bound_device(latency, peak, work, probed), work, start, limit=1 << 60,
                       tolerance=tolerance, window=1e9)
    # at the stop the rate is at least (1 - tolerance) * peak, with equality where the last doubling
    # rose by exactly the tolerance: a rounding error there (899999999.9999999 against 9e8) is no miss
    assert (1 - tolerance) * peak * (1 - 1e-12) <= rate < peak
    assert probed == [start * 2**k for k in range(len(probed))]
    rates = [work(size) / (latency + work(size) / peak) for size in probed]
    assert all(later > (1 + tolerance) * earlier for earlier, later in zip(rates[:-2], rates[1:-1]))  # still rising
    assert len(probed) == 1 or rates[-1] <= (1 + tolerance) * max(rates[:-1])  # stopped once it was not


def test_an_h100_like_device_reads_its_large_matmul_rate_where_a_512_probe_read_its_launch_latency():
    # 7.6e12 FLOP/s read at 512^2 (GPU.md): about 35 us a call, mostly launch; the card does ~790e12
    probed = []
    seconds_at = _launch_bound_device(35e-6 - _cube(512) / 790e12, 790e12, _cube, probed)
    assert math.isclose(_cube(512) / seconds_at(512), 7.6e12, rel_tol=0.05)
    probed.clear()
    rate = _saturating(seconds_at, _cube, 512, limit=16384, tolerance=0.1, window=0.1)
    assert rate > 790e12 / 2 and probed == [512, 1024, 2048, 4096, 8192, 16384]  # 8192 still rose by 17%


def test_probes_stop_at_the_size_cap_and_before_a_call_that_would_take_longer_than_the_window():
    probed = []
    rate = _saturating(_launch_bound_device(1e-3, 1e15, _linear, probed), _linear, 1 << 10, limit=1 << 14,
                       tolerance=0.1, window=1e9)
    assert probed == [1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14]
    assert rate == _linear(1 << 14) / (1e-3 + _linear(1 << 14) / 1e15)
    probed.clear()
    _saturating(_launch_bound_device(1e-3, 1e9, _cube, probed), _cube, 128, limit=1 << 20, tolerance=0.0, window=0.1)
    assert probed == [128, 256]  # 512^3 at 256's rate: more than 0.27 s a call, past the 0.1 s window


def test_the_fastest_probe_counts_when_a_larger_one_is_slower():
    rates = {64: 1.0, 128: 3.0, 256: 2.0}
    assert _saturating(lambda size: 1.0 / rates[size], lambda size: 1.0, 64, limit=1 << 20, tolerance=0.1,
                       window=1e9) == 3.0


@pytest.mark.parametrize("backend, device", [("gloo", "cpu"), ("nccl", "cuda"), ("cpu:gloo,cuda:nccl", "cuda"),
                                             ("cpu:gloo,cuda:gloo", "cuda")])
def test_the_device_measured_is_the_one_the_backend_computes_on(backend, device):
    assert _device_type(backend) == device  # two ranks sharing a GPU over gloo measure the GPU


def test_ranks_sharing_a_device_each_get_their_share_of_its_memory(monkeypatch):
    """Two ranks on one GPU (``cpu:gloo,cuda:gloo``) each read the whole card's memory on an H200
    (150e9 bytes): a plan for that budget on both would need the card twice."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("Props", (), {"total_memory": 150e9}))
    assert _memory_per_device(torch.device("cuda", 0), 1) == 150e9
    assert _memory_per_device(torch.device("cuda", 0), 2) == 75e9
    assert _memory_per_device(torch.device("cpu"), 2) == _memory_per_device(torch.device("cpu"), 1) / 2


def test_calibrate_needs_a_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        planner.calibrate((2,))


def _calibrate(rank: int) -> Hardware:
    return planner.calibrate((2,), message_bytes=(1 << 10, 1 << 14), matmul_size=64, elementwise_bytes=1 << 16, repeats=2,
                             max_matmul_size=256, max_elementwise_bytes=1 << 18)


@pytest.mark.slow
def test_calibrate_on_two_gloo_ranks_measures_what_the_planner_accepts(tmp_path):
    first, second = launch(_calibrate, 2, timeout=120)
    assert first == second  # every rank builds the same figures (the slowest rank's)
    assert first.mesh_shape == (2,) and sorted(link.kind for link in first.links) == sorted(KINDS)
    figures = [first.flops, first.flops_fp32, first.memory_bandwidth, first.memory, first.launch, first.intra_latency,
               first.intra_bandwidth] + [x for link in first.links for x in (link.latency, link.bandwidth)]
    assert all(math.isfinite(x) and x > 0 for x in figures)
    assert first.devices_per_node == 2
    assert all(2 * (link.size - 1) * link.latency >= first.launch if link.kind == "all_reduce"
               else (link.size - 1) * link.latency >= first.launch for link in first.links)
    first.save(tmp_path / "hw.json")
    assert Hardware.load(tmp_path / "hw.json") == first
    x = torch.randn(8, 16, device="meta")
    plan = planner.plan_module(on_meta(MLP, 16, 32), (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((2,)),
                               constraints=["Eq(Mod(batch, 2), 0)"], hardware=Hardware.load(tmp_path / "hw.json"))
    assert plan.cost.total > 0 and plan.options["hardware"]["links"]
