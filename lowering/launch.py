"""``launch``: run ``fn(rank)`` in ``world_size`` local processes with torch.distributed set up.

Contract:

* each rank runs in its own process with the default process group initialized (``backend``,
  rendezvous through a TCP store that the caller's process owns on 127.0.0.1 and a port the OS
  picked, so two launches never race for a port) and the torchrun environment variables set
  (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``);
* the return values come back in rank order (they must be picklable);
* when a rank raises, the other ranks get a short grace period to report, then every process
  still running is killed and the exception that was raised first (the root cause: the others
  are usually peers losing their connection to the failed rank) is re-raised in the caller,
  with the rank's traceback text as its ``__cause__``;
* after ``timeout`` seconds every process still running is killed and :class:`LaunchTimeout`
  names the ranks that had not finished;
* a rank that dies without a result is reported by :class:`RankFailure` with its exit code, or
  the signal that ended it; on a crash in native code (segfault, abort, ...) ``faulthandler``
  has written the Python stack of each of its threads to its stderr;
* no process is left behind: each rank leads its own process group (so helpers it started,
  such as compile workers, die with it) and is killed with its parent;
* unless ``OMP_NUM_THREADS`` is set, each rank gets ``cpu_count // world_size`` intra-op
  threads (at least one), as torchrun does: ranks spinning more OpenMP threads than the
  machine has cores slow every step down by orders of magnitude;
* ranks of a backend that carries CUDA tensors (``"nccl"``, or a per-device string such as
  ``"cpu:gloo,cuda:nccl"`` or ``"cpu:gloo,cuda:gloo"``) each use one CUDA device, made current
  (``torch.cuda.set_device``) before the group starts: rank ``r`` gets device
  ``r % torch.cuda.device_count()``. NCCL takes one device per rank (it refuses two ranks on
  one device), and the group is bound to it (``device_id``); gloo may share a device between
  ranks. Asking for more NCCL ranks than visible devices, or for CUDA where none is visible,
  raises ``ValueError`` before any process starts. A bare ``"gloo"`` runs on the CPU.

CPU ranks are forked from a ``forkserver`` that has imported torch, Inductor and
:mod:`lowering.parallel` (with the planner) once, and detected the CPU's vector ISA
(:mod:`lowering._forkserver_warmup`), so a launch costs milliseconds rather than an interpreter
start, a torch import and a compiler probe per rank. :func:`preload` adds the modules that
every rank's function imports (a model library: ``transformers.modeling_utils`` is ~2 CPU
seconds), imported once instead of once per rank of every launch.
CUDA ranks are spawned (a fresh interpreter each, seconds per launch): a CUDA context does not
survive ``fork``, and that preload may initialize CUDA (Inductor asks whether a GPU is there).
"""

from __future__ import annotations

import datetime
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any, TypeVar

__all__ = ["launch", "preload", "LaunchTimeout", "RankFailure"]

T = TypeVar("T")

_HOST = "127.0.0.1"
_FAULTS = {signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS, signal.SIGILL}  # what faulthandler reports
_GRACE_SECONDS = 1.0
_PRELOAD = ["torch", "torch.distributed", "lowering", "lowering._forkserver_warmup", "lowering.parallel"]
_forkserver_asked = False  # a CPU launch has started the forkserver: its imports are fixed


class LaunchTimeout(TimeoutError):
    """Some ranks did not finish within the launch's timeout (they have been killed)."""


class RankFailure(RuntimeError):
    """A rank failed in a way that cannot be re-raised as its own exception (it died, or its
    exception could not be sent back)."""


class _RemoteTraceback(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _cuda_backend(backend: str) -> str | None:
    """The backend that carries CUDA tensors under torch's ``backend`` string (``"nccl"``,
    ``"cpu:gloo,cuda:nccl"``, ...), or None where the ranks use no GPU (a bare ``"gloo"``)."""
    text = backend.strip().lower()
    if ":" not in text:
        return "nccl" if text == "nccl" else None
    pairs = [part.split(":") for part in text.split(",")]
    if any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise ValueError(f"backend {backend!r} is neither a backend name nor comma-separated device:backend pairs "
                         "such as 'cpu:gloo,cuda:nccl'")
    return dict(pairs).get("cuda")


def _rank_devices(backend: str, world_size: int, cuda_devices: Callable[[], int]) -> list[int] | None:
    """The CUDA device index of each rank under ``backend``, or None where the ranks use no GPU.

    ``cuda_devices()`` counts the visible CUDA devices (asked only for a CUDA backend). Raises
    ``ValueError`` naming what to change when NCCL would get fewer devices than ranks, or
    CUDA none at all.
    """
    carrier = _cuda_backend(backend)
    if carrier is None:
        return None
    count = cuda_devices()
    if count == 0:
        raise ValueError(f"backend {backend!r} runs collectives on CUDA tensors, but no CUDA device is visible "
                         "(torch.cuda.device_count() is 0: no GPU, a CPU build of torch, or CUDA_VISIBLE_DEVICES "
                         "empty); launch with backend='gloo' to run the ranks on the CPU")
    if carrier == "nccl" and world_size > count:
        raise ValueError(f"NCCL needs a CUDA device per rank: {world_size} ranks asked for on backend {backend!r}, "
                         f"{count} device(s) visible; launch at most {count} rank(s), or let ranks share devices "
                         "with backend='cpu:gloo,cuda:gloo'")
    return [rank % count for rank in range(world_size)]


def _visible_cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def _rank_main(fn: Callable[[int], Any], rank: int, world_size: int, backend: str, device: int | None, port: int,
               timeout: float, conn: multiprocessing.connection.Connection) -> None:
    os.setpgrp()
    _die_with_parent()
    faulthandler.enable(all_threads=True)  # a crash in native code prints every thread's Python stack
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR=_HOST, MASTER_PORT=str(port))
    raised_at = None
    try:
        import torch
        import torch.distributed as dist

        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))

        bound = None
        if device is not None:
            torch.cuda.set_device(device)
            if _cuda_backend(backend) == "nccl":  # NCCL's communicator forms now, on this rank's device
                bound = torch.device("cuda", device)
        delta = datetime.timedelta(seconds=timeout)
        store = dist.TCPStore(_HOST, port, is_master=False, timeout=delta)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=delta,
                                device_id=bound)
        try:
            result = fn(rank)
        except BaseException:
            raised_at = time.time()  # before tearing down the group makes the peers fail too
            raise
        finally:
            dist.destroy_process_group()
        try:
            message = ("ok", pickle.dumps(result))
        except Exception as error:  # noqa: BLE001 - reported to the caller with the culprit named
            raise TypeError(f"the return value of rank {rank} ({type(result).__name__}) is not picklable: {error}") from error
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        text = "".join(traceback.format_exception(error))
        try:
            payload = pickle.dumps(error)
            pickle.loads(payload)
        except Exception:  # noqa: BLE001 - unpicklable exceptions travel as text
            payload = None
        message = ("error", (raised_at or time.time(), payload, f"{type(error).__name__}: {error}", text))
    conn.send(message)
    conn.close()


def preload(*modules: str) -> None:
    """Have the forkserver of CPU ranks import ``modules`` too (after its own), once for every
    later launch of this process, instead of each rank importing them again.

    Call it before the process's first CPU launch: a started forkserver keeps what it has
    imported. A module that imports it must not start threads or touch CUDA (the ranks are
    forked from it). Raises ``ValueError`` for a module that cannot be found, or when a launch
    has already started the forkserver."""
    missing = [m for m in modules if not isinstance(m, str) or _spec(m) is None]
    if missing:
        raise ValueError(f"preload: no module named {', '.join(map(repr, missing))}: pass importable module names")
    if _forkserver_asked:
        raise ValueError(f"preload({', '.join(map(repr, modules))}) came after this process's first CPU launch, "
                         "whose forkserver keeps what it imported: call preload before the first launch")
    _PRELOAD.extend(m for m in modules if m not in _PRELOAD)


def _spec(module: str) -> object | None:
    try:
        return find_spec(module)
    except (ImportError, ValueError):  # a parent package that is missing, or an empty name
        return None


def _context(method: str) -> multiprocessing.context.BaseContext:
    """``"forkserver"`` (CPU ranks: forked from a process that has imported torch, Inductor and
    the :func:`preload` modules) or ``"spawn"`` (CUDA ranks: a fresh interpreter, with no CUDA
    state inherited)."""
    global _forkserver_asked
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
        _forkserver_asked = True
    return ctx


def _kill(process: multiprocessing.process.BaseProcess) -> None:
    if process.pid is None:
        return
    for target in (lambda sig: os.killpg(process.pid, sig), lambda sig: os.kill(process.pid, sig)):
        try:
            target(signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.join()


def _failure(rank: int, report: tuple[float, bytes | None, str, str]) -> tuple[float, BaseException]:
    raised_at, payload, summary, text = report
    error: BaseException
    if payload is not None:
        error = pickle.loads(payload)
        error.__cause__ = _RemoteTraceback(f"\n--- traceback of rank {rank} ---\n{text}")
        error.add_note(f"(raised on rank {rank})")
    else:
        error = RankFailure(f"rank {rank} raised {summary}\n--- traceback of rank {rank} ---\n{text}")
    return raised_at, error


def launch(fn: Callable[[int], T], world_size: int, backend: str = "gloo", timeout: float = 300.0) -> list[T]:
    """Run ``fn(rank)`` on ``world_size`` processes with the default process group initialized.

    ``fn`` must be picklable (a module-level function or a ``functools.partial`` of one).
    ``backend`` is torch's backend string: ``"gloo"`` (CPU), ``"nccl"`` (one CUDA device per
    rank), or device:backend pairs such as ``"cpu:gloo,cuda:gloo"`` (CUDA ranks that may share a
    device). Returns the ranks' return values in rank order; re-raises the exception raised
    first; raises :class:`LaunchTimeout` after ``timeout`` seconds, and ``ValueError`` before
    starting anything when the CUDA devices ``backend`` needs are not there. Every process it
    started has ended when it returns or raises.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    devices = _rank_devices(backend, world_size, _visible_cuda_devices)
    return _start(fn, world_size, backend, timeout, devices, _context("forkserver" if devices is None else "spawn"))


def _start(fn: Callable[[int], T], world_size: int, backend: str, timeout: float, devices: list[int] | None,
           ctx: multiprocessing.context.BaseContext) -> list[T]:
    """:func:`launch` with its checks done: the ranks started from ``ctx`` on ``devices``."""
    import torch.distributed as dist

    store = dist.TCPStore(_HOST, 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    processes, connections = [], []
    try:
        for rank in range(world_size):
            receiver, sender = ctx.Pipe(duplex=False)
            device = None if devices is None else devices[rank]
            process = ctx.Process(target=_rank_main, name=f"rank{rank}",
                                  args=(fn, rank, world_size, backend, device, store.port, timeout, sender))
            process.start()
            sender.close()
            processes.append(process)
            connections.append(receiver)
        return _collect(processes, connections, time.monotonic() + timeout)
    finally:
        for process in processes:
            _kill(process)
        for receiver in connections:
            receiver.close()
        del store


def _death(rank: int, exitcode: int | None) -> str:
    """Why rank ``rank`` ended without a result, from its exit code (negative: the signal that ended it)."""
    if exitcode is None or exitcode >= 0:
        return f"rank {rank} exited with code {exitcode} without returning a result"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    where = (" (the Python stack of each of its threads at that moment is on its stderr)"
             if -exitcode in _FAULTS else "")
    return f"rank {rank} exited with code {exitcode}, killed by {name}, without returning a result{where}"


def _collect(processes: list[Any], connections: list[Any], deadline: float) -> list[Any]:
    results: dict[int, Any] = {}
    failures: dict[int, tuple[float, BaseException]] = {}
    pending = set(range(len(processes)))
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if failures:
                break
            ranks = ", ".join(str(r) for r in sorted(pending))
            raise LaunchTimeout(f"rank(s) {ranks} of {len(processes)} did not finish in time; they were killed "
                                "(raise launch(..., timeout=...) if they need longer)")
        waitables = {connections[r]: r for r in pending} | {processes[r].sentinel: r for r in pending}
        for ready in multiprocessing.connection.wait(list(waitables), timeout=remaining):
            rank = waitables[ready]
            if rank not in pending:
                continue
            try:
                kind, body = connections[rank].recv()
            except EOFError:  # the process ended without sending anything
                processes[rank].join()
                kind, body = "died", processes[rank].exitcode
            if kind == "ok":
                results[rank] = pickle.loads(body)
            elif kind == "error":
                failures[rank] = _failure(rank, body)
            else:
                failures[rank] = (time.time(), RankFailure(_death(rank, body)))
            pending.discard(rank)
        if failures and pending:
            deadline = min(deadline, time.monotonic() + _GRACE_SECONDS)
    if failures:
        raise min(failures.items(), key=lambda item: (item[1][0], item[0]))[1][1]
    return [results[r] for r in range(len(processes))]
