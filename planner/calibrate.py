"""``calibrate(mesh)``: the machine's figures measured, as a :class:`~planner.cost.Hardware`.

A collective over the live process group: every rank calls it, with the same arguments, and
every rank gets the same ``Hardware`` back (each figure is the slowest rank's). It measures

* per mesh axis (of more than one rank) and per collective the plans use (``all_reduce``,
  ``all_gather``, ``reduce_scatter``, ``all_to_all``): the time at a few message sizes, fitted
  by least squares to the cost model's own formula (``AlphaBetaCostModel``: ``hops·latency +
  ring·bytes / bandwidth``), so the figures price exactly what was measured. Each collective is
  timed *as a program issues it*: after a kernel of local work (``gap``), less that kernel's
  own time. Back to back, the ranks stay in lock-step and a collective costs only its transfer;
  in a program every collective follows compute, and the ranks meet there after drifting apart.
  On a CPU shared by its ranks (gloo) that meeting is most of the cost: on 2 busy cores, an
  all-reduce of 1 KiB took 0.3 ms back to back and 1.1 ms after 0.1 ms of compute;
* the device's matrix-product throughput (FLOP/s, 32-bit and bfloat16) and its elementwise
  throughput (bytes moved per second by ``a + b``, the roofline's memory bandwidth), each the
  mean over a window with every rank computing at once: ranks sharing a CPU get a share of it
  (on 2 busy cores, 2 ranks of 256^3 products: 25 GFLOP/s each over 0.1 s, where the median
  single product ran at 80);
* the memory per device (the accelerator's, or this host's RAM shared by its ranks) and how
  many ranks share a host (``devices_per_node``).

It uses the public ``torch.distributed`` collectives, on the device the backend runs on:
gloo (CPU) is what the tests run; NCCL (CUDA) takes the same path, untested here.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.cost import Hardware, LinkCost
from planner.mesh import Mesh, as_mesh

__all__ = ["calibrate"]

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
_HOPS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def calibrate(
    mesh: Mesh | Any,
    *,
    message_bytes: Sequence[int] = (1 << 10, 1 << 16, 1 << 20),
    matmul_size: int = 512,
    elementwise_bytes: int = 1 << 24,
    gap: int = 128,
    repeats: int = 5,
    window: float = 0.1,
    name: str = "calibrated",
) -> Hardware:
    """Measure this machine on ``mesh`` (a ``DeviceMesh``, a :class:`~planner.Mesh` or a tuple of
    axis sizes whose product is the world size) and return the :class:`~planner.Hardware`.

    ``message_bytes``: the per-device message sizes each collective is timed at (at least two;
    latency comes from the small ones, bandwidth from the large); ``matmul_size``: the side of
    the square matrices multiplied; ``elementwise_bytes``: the size of each operand of the
    elementwise add; ``gap``: the side of the square matrix product each collective is timed
    after (the local work a program runs between its collectives); ``repeats``: timed runs per
    collective and size (the median counts), after one warm-up; ``window``: the seconds each
    throughput is measured over, every rank at once (the mean over the window counts, so ranks
    sharing a device, or other work on it, slow it as they slow a program). Call it on every
    rank; it is a collective.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("calibrate(mesh) measures the live process group: call torch.distributed.init_process_group "
                           "first (torchrun does it through env://), or run under lowering.launch")
    sizes = sorted({int(s) for s in message_bytes})
    if len(sizes) < 2 or sizes[0] < 8:
        raise ValueError(f"message_bytes must hold at least two distinct sizes of 8 bytes or more, got {message_bytes!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not window > 0:
        raise ValueError(f"window must be a positive number of seconds, got {window!r}")
    if gap < 1:
        raise ValueError(f"gap must be a positive int (the side of a square matrix), got {gap!r}")
    device_mesh, planning = _device_mesh(mesh)
    device = torch.device(device_mesh.device_type, torch.cuda.current_device()) if device_mesh.device_type == "cuda" \
        else torch.device(device_mesh.device_type)
    work = torch.randn(gap, gap, device=device)
    timings = [_time_collective(kind, device_mesh.get_group(axis), planning.shape[axis], size, repeats, device,
                                between=lambda: work @ work)
               for axis in range(planning.ndim) if planning.shape[axis] > 1 for kind in KINDS for size in sizes]
    fp32 = torch.randn(matmul_size, matmul_size, device=device)
    bf16 = fp32.to(torch.bfloat16)
    matmul_fp32 = _mean_over(lambda: fp32 @ fp32, window, device)
    matmul_bf16 = _mean_over(lambda: bf16 @ bf16, window, device)
    n = max(1, elementwise_bytes // 4)
    a, b, out = (torch.rand(n, device=device) for _ in range(3))
    elementwise = _mean_over(lambda: torch.add(a, b, out=out), window, device)
    seconds = _slowest(timings + [matmul_fp32, matmul_bf16, elementwise], device)
    ranks_per_host = _ranks_per_host()

    links, k = [], 0
    for axis in range(planning.ndim):
        n_axis = planning.shape[axis]
        if n_axis == 1:
            continue
        for kind in KINDS:
            latency, bandwidth = _fit(kind, n_axis, sizes, seconds[k:k + len(sizes)])
            links.append(LinkCost(axis, n_axis, kind, latency, bandwidth))  # type: ignore[arg-type]
            k += len(sizes)
    flops_fp32, flops_bf16, moved = seconds[k:k + 3]
    reduces = [link for link in links if link.kind == "all_reduce"] or links
    latency = float(np.median([link.latency for link in reduces])) if reduces else 0.0
    bandwidth = float(np.median([link.bandwidth for link in reduces])) if reduces else float("inf")
    return Hardware(
        name=name,
        flops=2.0 * matmul_size**3 / flops_bf16,
        flops_fp32=2.0 * matmul_size**3 / flops_fp32,
        memory_bandwidth=3.0 * 4 * n / moved,
        memory=_memory_per_device(device, ranks_per_host),
        intra_bandwidth=bandwidth,
        intra_latency=latency,
        inter_bandwidth=bandwidth,
        inter_latency=latency,
        devices_per_node=ranks_per_host,
        mesh_shape=planning.shape,
        links=tuple(links),
    )


def _device_mesh(mesh: Any) -> tuple[Any, Mesh]:
    """The ``DeviceMesh`` to measure on (``mesh`` itself, or one made for its shape) and its planning view."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    if isinstance(mesh, DeviceMesh):
        return mesh, as_mesh(mesh)
    planning = as_mesh(mesh)
    world = dist.get_world_size()
    if planning.size != world:
        raise ValueError(f"mesh {planning} has {planning.size} devices but the process group has {world} ranks")
    device_type = "cuda" if "nccl" in str(dist.get_backend()) else "cpu"
    return init_device_mesh(device_type, planning.shape, mesh_dim_names=planning.axis_names), planning


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mean_over(fn: Callable[[], Any], window: float, device: Any, clock: Callable[[], float] = time.perf_counter) -> float:
    """Mean seconds of ``fn()`` called back to back until ``window`` seconds have passed (after one
    warm-up), every rank at once: time lost while the device serves other ranks or other work
    counts, as it does in a program (a median of single calls would leave it out)."""
    import torch.distributed as dist

    fn()
    _sync(device)
    if dist.is_initialized():
        dist.barrier()
    calls, start = 0, clock()
    while True:
        fn()
        _sync(device)
        calls += 1
        elapsed = clock() - start
        if elapsed >= window:
            return elapsed / calls


def _time_after(fn: Callable[[], Any], between: Callable[[], Any], repeats: int, device: Any,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds ``fn()`` adds after ``between()``: ``between(); fn()`` and ``between()`` alone
    timed alternately ``repeats`` times each (after one warm-up), the difference of their medians
    (never below zero)."""
    between()
    fn()
    _sync(device)
    alone, both = [], []
    for _ in range(repeats):
        start = clock()
        between()
        _sync(device)
        alone.append(clock() - start)
        start = clock()
        between()
        fn()
        _sync(device)
        both.append(clock() - start)
    return max(0.0, float(np.median(both) - np.median(alone)))


def _time_collective(kind: str, group: Any, n: int, nbytes: int, repeats: int, device: Any,
                     between: Callable[[], Any]) -> float:
    """Median seconds one ``kind`` over ``group`` on a local tensor of ``nbytes`` (rounded to ``n``
    floats) adds to a program when issued after the local work ``between`` (see :func:`_time_after`)."""
    import torch
    import torch.distributed as dist

    from shapecore.torch.private import dist_all_gather_single, dist_reduce_scatter_single

    numel = max(n, nbytes // 4 // n * n)
    x = torch.rand(numel, device=device)
    if kind == "all_reduce":
        def run() -> Any:
            return dist.all_reduce(x, group=group)
    elif kind == "all_gather":
        gathered = torch.empty(numel * n, device=device)

        def run() -> Any:
            return dist_all_gather_single(gathered, x, group=group)
    elif kind == "reduce_scatter":
        scattered = torch.empty(numel // n, device=device)

        def run() -> Any:
            return dist_reduce_scatter_single(scattered, x, group=group)
    else:
        exchanged = torch.empty_like(x)

        def run() -> Any:
            return dist.all_to_all_single(exchanged, x, group=group)
    dist.barrier(group=group)
    return _time_after(run, between, repeats, device)


def _slowest(seconds: list[float], device: Any) -> list[float]:
    """Each figure's maximum over all ranks, so every rank builds the same ``Hardware``."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def _fit(kind: str, n: int, sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """(latency, bandwidth) fitting ``seconds`` at local ``sizes`` to the cost model's formula for ``kind``.

    ``AlphaBetaCostModel`` prices ``hops·(n-1)·latency + ring·S / bandwidth``, with ``S`` the
    local bytes (the gathered output for ``all_gather``) and ``ring`` ``2(n-1)/n`` for
    ``all_reduce``, ``(n-1)/n`` otherwise: a straight line in ``S``, fitted by least squares
    (where noise makes a coefficient non-positive, the smallest message's time is taken as
    latency, the largest's as transfer).
    """
    ring = (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n
    volume = np.array([float(s * n if kind == "all_gather" else s) for s in sizes]) * ring
    t = np.maximum(np.array(seconds, dtype=float), 1e-9)  # a collective that added nothing measurable is ~free
    slope, intercept = np.polyfit(volume, t, 1)
    if slope <= 0:  # noise swamped the sizes: charge the largest message's time to bandwidth
        slope = t[-1] / volume[-1]
    if intercept <= 0:  # and the smallest message's time to latency
        intercept = t[0]
    return float(intercept / (_HOPS[kind] * (n - 1))), float(1.0 / slope)


def _ranks_per_host() -> int:
    """How many ranks of the default group run on this host."""
    import torch.distributed as dist

    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return max(hosts.count(h) for h in set(hosts))


def _memory_per_device(device: Any, ranks_per_host: int) -> float:
    """Bytes one device holds: the accelerator's memory, or this host's RAM shared by its ranks."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / ranks_per_host
