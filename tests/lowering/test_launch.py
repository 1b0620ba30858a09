"""launch: results in rank order, a rank's exception re-raised, timeouts kill everything; CUDA ranks
get a device each (NCCL) or share them (gloo), and are refused before anything starts without one."""

import functools
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from lowering.launch import LaunchTimeout, RankFailure, _context, _cuda_backend, _rank_devices, _start, launch

launch_module = sys.modules["lowering.launch"]  # ``lowering.launch`` is the function

slow = pytest.mark.slow  # the test starts processes


def _sum_of_ranks(rank: int) -> dict:
    value = torch.tensor([float(rank)])
    dist.all_reduce(value)
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item(),
            "env": (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"])}


@slow
def test_results_come_back_in_rank_order_with_the_group_initialized():
    results = launch(_sum_of_ranks, 3, timeout=60)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world"] == 3 and r["sum"] == 3.0 for r in results)
    assert [r["env"] for r in results] == [(str(i), "3", "127.0.0.1") for i in range(3)]


class _Odd(ValueError):
    pass


def _rank_one_raises_while_rank_zero_waits(rank: int) -> int:
    if rank == 1:
        raise _Odd("rank one refuses")
    dist.barrier()  # would wait forever for rank 1
    return rank


@slow
def test_the_failed_rank_exception_is_reraised_with_its_traceback_and_nobody_hangs():
    start = time.monotonic()
    with pytest.raises(_Odd, match="rank one refuses") as info:
        launch(_rank_one_raises_while_rank_zero_waits, 2, timeout=60)
    assert time.monotonic() - start < 30
    assert "_rank_one_raises_while_rank_zero_waits" in str(info.value.__cause__)
    assert "(raised on rank 1)" in info.value.__notes__


def _record_pids_and_hang(directory: str, rank: int) -> None:
    helper = subprocess.Popen(["sleep", "600"])
    with open(os.path.join(directory, f"{rank}.pids"), "w") as f:
        f.write(f"{os.getpid()} {helper.pid}")
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited; only its parent has to reap it
        return f.read().split(")")[-1].split()[0] != "Z"


@slow
def test_timeout_kills_every_rank_and_the_processes_they_started(tmp_path):
    with pytest.raises(LaunchTimeout, match=r"rank\(s\) 0, 1 of 2"):
        launch(functools.partial(_record_pids_and_hang, str(tmp_path)), 2, timeout=8)
    pids = [int(p) for rank in range(2) for p in (tmp_path / f"{rank}.pids").read_text().split()]
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def _exit_without_result(rank: int) -> None:
    if rank == 0:
        os._exit(7)


@slow
def test_a_rank_that_dies_is_reported_with_its_exit_code():
    with pytest.raises(RankFailure, match="rank 0 exited with code 7"):
        launch(_exit_without_result, 2, timeout=60)


def _abort(rank: int) -> None:
    if rank == 0:
        os.abort()  # as glibc does when it finds the heap corrupted
    time.sleep(60)  # the peer: killed once rank 0's death is seen


@slow
def test_a_rank_killed_by_a_crash_is_named_with_its_signal_and_its_python_stack_is_printed():
    """Run in a child interpreter, so that the ranks' stderr (inherited through the forkserver) can be read."""
    script = ("import pytest\nfrom lowering.launch import launch, RankFailure\nfrom tests.lowering.test_launch import _abort\n"
              "with pytest.raises(RankFailure) as error:\n    launch(_abort, 2, timeout=60)\nprint(error.value)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert "rank 0 exited with code -6, killed by SIGABRT, without returning a result" in done.stdout
    assert "Fatal Python error: Aborted" in done.stderr and "in _abort" in done.stderr, done.stderr


def _imported(rank: int) -> tuple[bool, bool]:
    return "wave" in sys.modules, "lowering.parallel" in sys.modules


@slow
def test_preloaded_modules_are_imported_in_every_rank_before_its_function_runs():
    """In a child interpreter, whose forkserver has not started yet: ``wave`` (imported by nothing
    else) is there in each rank, as the planner and the lowering are for every launch."""
    script = ("import lowering\nfrom tests.lowering.test_launch import _imported\n"
              "lowering.preload('wave')\nprint(lowering.launch(_imported, 2, timeout=60))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(True, True), (True, True)]"


def test_preload_names_a_module_it_cannot_find_and_refuses_to_come_after_the_first_launch(monkeypatch):
    monkeypatch.setattr(launch_module, "_PRELOAD", ["torch"])
    monkeypatch.setattr(launch_module, "_forkserver_asked", False)
    with pytest.raises(ValueError, match="no module named 'no_such_module', 'json.no_such_part'"):
        launch_module.preload("json", "no_such_module", "json.no_such_part")
    assert launch_module._PRELOAD == ["torch"]  # nothing added when one is refused
    launch_module.preload("json", "torch")
    assert launch_module._PRELOAD == ["torch", "json"]
    launch_module._context("forkserver")
    with pytest.raises(ValueError, match=r"preload\('wave'\) came after this process's first CPU launch"):
        launch_module.preload("wave")


def _unpicklable(rank: int):
    return lambda: rank


@slow
def test_an_unpicklable_result_is_named():
    with pytest.raises(TypeError, match="return value of rank 0 .* not picklable"):
        launch(_unpicklable, 1, timeout=60)


@pytest.mark.parametrize("backend, carrier", [
    ("gloo", None), ("nccl", "nccl"), ("NCCL", "nccl"), ("cpu:gloo,cuda:nccl", "nccl"), ("cuda:nccl,cpu:gloo", "nccl"),
    ("cpu:gloo,cuda:gloo", "gloo"), ("cpu:gloo", None), ("mpi", None)])
def test_the_backend_carrying_cuda_tensors_is_read_off_torchs_backend_string(backend, carrier):
    assert _cuda_backend(backend) == carrier


@pytest.mark.parametrize("backend", ["cpu:gloo,cuda", "cpu:gloo,,cuda:nccl", "cuda:nccl:0"])
def test_a_malformed_backend_string_is_named(backend):
    with pytest.raises(ValueError, match=f"backend '{backend}' is neither"):
        _cuda_backend(backend)


def _never_counted() -> int:
    raise AssertionError("a CPU backend asked how many CUDA devices there are")


def test_cpu_ranks_get_no_device_and_cuda_is_not_asked_about():
    assert _rank_devices("gloo", 4, _never_counted) is None
    assert _rank_devices("cpu:gloo", 2, _never_counted) is None


def test_nccl_ranks_get_a_device_each_and_gloo_ranks_share_them():
    assert _rank_devices("nccl", 1, lambda: 1) == [0]
    assert _rank_devices("nccl", 3, lambda: 4) == [0, 1, 2]
    assert _rank_devices("cpu:gloo,cuda:nccl", 2, lambda: 2) == [0, 1]
    assert _rank_devices("cpu:gloo,cuda:gloo", 2, lambda: 1) == [0, 0]
    assert _rank_devices("cpu:gloo,cuda:gloo", 5, lambda: 2) == [0, 1, 0, 1, 0]


def test_more_nccl_ranks_than_devices_or_no_device_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match=r"NCCL needs a CUDA device per rank: 2 ranks .* 1 device\(s\) visible; "
                                         r"launch at most 1 rank\(s\), or .* backend='cpu:gloo,cuda:gloo'"):
        _rank_devices("nccl", 2, lambda: 1)
    for backend in ("nccl", "cpu:gloo,cuda:gloo"):
        with pytest.raises(ValueError, match=f"backend '{backend}' runs collectives on CUDA tensors, but no CUDA device "
                                             "is visible .* backend='gloo'"):
            _rank_devices(backend, 1, lambda: 0)


def test_launch_refuses_cuda_ranks_it_cannot_place_before_starting_anything(monkeypatch):
    started = []
    monkeypatch.setattr(launch_module, "_start", lambda *args: started.append(args))
    monkeypatch.setattr(launch_module, "_visible_cuda_devices", lambda: torch.cuda.device_count())
    if torch.cuda.device_count() == 0:  # this machine: no CUDA at all
        with pytest.raises(ValueError, match="no CUDA device is visible"):
            launch(_sum_of_ranks, 1, backend="nccl")
    monkeypatch.setattr(launch_module, "_visible_cuda_devices", lambda: 1)
    with pytest.raises(ValueError, match="NCCL needs a CUDA device per rank: 2 ranks"):
        launch(_sum_of_ranks, 2, backend="nccl")
    assert started == []
    launch(_sum_of_ranks, 2, backend="cpu:gloo,cuda:gloo")
    assert [(args[3], args[4], args[5]._name) for args in started] == [(300.0, [0, 0], "spawn")]


@slow
def test_spawned_ranks_run_as_forked_ones_do():
    """The start method CUDA ranks use, exercised on CPU ranks."""
    results = _start(_sum_of_ranks, 2, "gloo", 60, None, _context("spawn"))
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == [(0, 2, 1.0), (1, 2, 1.0)]
