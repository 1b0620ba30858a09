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
  single product ran at 80). Each is probed at growing sizes (the side of the matrices, the
  bytes added, doubled) until the throughput stops rising by more than a tolerance, a call
  would take more than the window, or the size reaches its cap; the fastest probe counts. A small probe
  on a GPU measures its launch latency, not its throughput: on an H100 a 512^2 bfloat16 product
  read 7.6e12 FLOP/s where an 8192^2 one runs at about 790e12. On a CPU the first probes are
  at full speed already, and a call twice the size would take longer than the window;
* one op's launch (:attr:`~planner.cost.Hardware.launch`): the mean seconds of a one-element
  add issued back to back, what a local step of a redistribution costs before it moves a byte.
  A collective costs at least that much whatever its size, so the fitted fixed cost of each is
  never below it, and among plans moving the same bytes the one with fewer collectives wins;
* the memory per rank (the accelerator's, or this host's RAM, shared by the ranks on it) and how
  many ranks share a host (``devices_per_node``).

It uses the public ``torch.distributed`` collectives, on the device the backend runs on
(timing a CUDA device waits for it: ``torch.cuda.synchronize``): gloo (CPU) is what the tests
run; NCCL (CUDA) takes the same path, run by ``bench/gpu.py`` where a GPU is at hand.
"""

from __future__ import annotations

import functools
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
    max_matmul_size: int = 16384,
    max_elementwise_bytes: int = 1 << 30,
    tolerance: float = 0.1,
    gap: int = 128,
    repeats: int = 5,
    window: float = 0.1,
    name: str = "calibrated",
) -> Hardware:
    """Measure this machine on ``mesh`` (a ``DeviceMesh``, a :class:`~planner.Mesh` or a tuple of
    axis sizes whose product is the world size) and return the :class:`~planner.Hardware`.

    ``message_bytes``: the per-device message sizes each collective is timed at (at least two;
    latency comes from the small ones, bandwidth from the large); ``matmul_size``: the side of
    the first square matrices multiplied, doubled up to ``max_matmul_size`` while the FLOP/s
    rise by more than ``tolerance`` (a fraction); ``elementwise_bytes``: the size of each
    operand of the first elementwise add, doubled likewise up to ``max_elementwise_bytes``;
    ``gap``: the side of the square matrix product each collective is timed
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
    if not 1 <= matmul_size <= max_matmul_size or not 4 <= elementwise_bytes <= max_elementwise_bytes:
        raise ValueError(f"probe sizes must start positive and at most their caps, got matmul_size {matmul_size!r} "
                         f"(max_matmul_size {max_matmul_size!r}), elementwise_bytes {elementwise_bytes!r} "
                         f"(max_elementwise_bytes {max_elementwise_bytes!r})")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be a non-negative fraction, got {tolerance!r}")
    device_mesh, planning = _device_mesh(mesh)
    device = torch.device(device_mesh.device_type, torch.cuda.current_device()) if device_mesh.device_type == "cuda" \
        else torch.device(device_mesh.device_type)
    work = torch.randn(gap, gap, device=device)
    timings = [_time_collective(kind, device_mesh.get_group(axis), planning.shape[axis], size, repeats, device,
                                between=lambda: work @ work)
               for axis in range(planning.ndim) if planning.shape[axis] > 1 for kind in KINDS for size in sizes]
    seconds = _slowest(timings, device) if timings else []
    launch = _slowest([_launch_seconds(window, device)], device)[0]

    def probe(kernel: Callable[[int], Callable[[], Any]]) -> Callable[[int], float]:
        return lambda size: _slowest([_mean_over(kernel(size), window, device)], device)[0]

    flops_fp32, flops_bf16 = (_saturating(probe(functools.partial(_matmul, dtype=dtype, device=device)),
                                          lambda side: 2.0 * side**3, matmul_size, max_matmul_size, tolerance, window)
                              for dtype in (torch.float32, torch.bfloat16))
    memory_bandwidth = _saturating(probe(functools.partial(_elementwise, device=device)), lambda size: 3.0 * size,
                                   elementwise_bytes, max_elementwise_bytes, tolerance, window)
    host = socket.gethostname()
    ranks_per_host = _most_sharing(host)
    ranks_per_device = ranks_per_host if device.type == "cpu" else _most_sharing((host, device.index))

    links, k = [], 0
    for axis in range(planning.ndim):
        n_axis = planning.shape[axis]
        if n_axis == 1:
            continue
        for kind in KINDS:
            latency, bandwidth = _fit(kind, n_axis, sizes, seconds[k:k + len(sizes)], launch)
            links.append(LinkCost(axis, n_axis, kind, latency, bandwidth))  # type: ignore[arg-type]
            k += len(sizes)
    reduces = [link for link in links if link.kind == "all_reduce"] or links
    latency = float(np.median([link.latency for link in reduces])) if reduces else 0.0
    bandwidth = float(np.median([link.bandwidth for link in reduces])) if reduces else float("inf")
    return Hardware(
        name=name,
        flops=flops_bf16,
        flops_fp32=flops_fp32,
        memory_bandwidth=memory_bandwidth,
        memory=_memory_per_device(device, ranks_per_device),
        intra_bandwidth=bandwidth,
        intra_latency=latency,
        inter_bandwidth=bandwidth,
        inter_latency=latency,
        devices_per_node=ranks_per_host,
        mesh_shape=planning.shape,
        links=tuple(links),
        launch=launch,
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
    return init_device_mesh(_device_type(str(dist.get_backend())), planning.shape,
                            mesh_dim_names=planning.axis_names), planning


def _device_type(backend: str) -> str:
    """The device a process group of ``backend`` computes on: CUDA for NCCL or a per-device
    backend naming CUDA (``cpu:gloo,cuda:gloo``: ranks sharing a GPU over gloo), else the CPU."""
    return "cuda" if "nccl" in backend or "cuda:" in backend else "cpu"


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


def _saturating(seconds_at: Callable[[int], float], work: Callable[[int], float], start: int, limit: int,
                tolerance: float, window: float) -> float:
    """The highest throughput (work per second) of probes of doubling size from ``start``.

    ``seconds_at(size)`` is a probe's seconds per call (every rank's same figure), ``work(size)``
    the work one call does. The next probe is twice the size while the last one's throughput
    rose by more than ``tolerance`` over the best before it, the doubled size is at most
    ``limit``, and a call of it would take at most ``window`` seconds at the last one's rate
    (so a CPU, at full speed from the first probe, is not kept long). Small probes of a GPU are
    launch-bound; its throughput rises until the device is busy, then stays.
    """
    size, best = start, 0.0
    while True:
        seconds = seconds_at(size)
        rate = work(size) / max(seconds, 1e-12)
        rising = rate > best * (1.0 + tolerance)
        best = max(best, rate)
        if not rising or 2 * size > limit or work(2 * size) / rate > window:
            return best
        size *= 2


def _matmul(side: int, dtype: Any, device: Any) -> Callable[[], Any]:
    """A ``side``-square matrix product of ``dtype`` on ``device``, ready to call."""
    import torch

    a = torch.randn(side, side, device=device).to(dtype)
    return lambda: a @ a


def _elementwise(nbytes: int, device: Any) -> Callable[[], Any]:
    """An add of two 32-bit vectors of ``nbytes`` each into a third on ``device``, ready to call."""
    import torch

    a, b, out = (torch.ones(max(1, nbytes // 4), device=device) for _ in range(3))
    return lambda: torch.add(a, b, out=out)


_LAUNCHES = 100  # one-element adds per timed call of _launch_seconds


def _launch_seconds(window: float, device: Any) -> float:
    """Mean seconds of one op issued back to back (a one-element add): its launch, as a program pays it."""
    import torch

    a, out = torch.ones(1, device=device), torch.empty(1, device=device)

    def adds() -> None:
        for _ in range(_LAUNCHES):
            torch.add(a, a, out=out)

    return _mean_over(adds, window, device) / _LAUNCHES


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


def _fit(kind: str, n: int, sizes: Sequence[int], seconds: Sequence[float], launch: float) -> tuple[float, float]:
    """(latency, bandwidth) fitting ``seconds`` at local ``sizes`` to the cost model's formula for ``kind``.

    ``AlphaBetaCostModel`` prices ``hops·(n-1)·latency + ring·S / bandwidth``, with ``S`` the
    local bytes (the gathered output for ``all_gather``) and ``ring`` ``2(n-1)/n`` for
    ``all_reduce``, ``(n-1)/n`` otherwise: a straight line in ``S``, fitted by least squares
    (where noise makes a coefficient non-positive, the smallest message's time is taken as
    latency, the largest's as transfer). The fixed cost ``hops·(n-1)·latency`` is at least
    ``launch``, one op's: a collective is never cheaper to start than a local op.
    """
    ring = (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n
    volume = np.array([float(s * n if kind == "all_gather" else s) for s in sizes]) * ring
    t = np.maximum(np.array(seconds, dtype=float), 1e-9)  # a collective that added nothing measurable is ~free
    slope, intercept = np.polyfit(volume, t, 1)
    if slope <= 0:  # noise swamped the sizes: charge the largest message's time to bandwidth
        slope = t[-1] / volume[-1]
    if intercept <= 0:  # and the smallest message's time to latency
        intercept = t[0]
    intercept = max(intercept, launch)
    return float(intercept / (_HOPS[kind] * (n - 1))), float(1.0 / slope)


def _most_sharing(key: Any) -> int:
    """The most ranks of the default group that give the same ``key`` (a host; a host's device):
    the same count on every rank."""
    import torch.distributed as dist

    keys: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, key)
    return max(keys.count(k) for k in keys)


def _memory_per_device(device: Any, sharing: int) -> float:
    """Bytes one rank's device holds: the accelerator's memory, or this host's RAM, shared by the
    ``sharing`` ranks on it (2 ranks on one GPU over ``cpu:gloo,cuda:gloo`` hold half each)."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory) / sharing
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / sharing
