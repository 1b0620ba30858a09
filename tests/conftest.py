"""Test-wide settings and fixtures.

Hypothesis profiles, picked by ``HYPOTHESIS_PROFILE``: ``default`` locally; ``ci`` when
``CI=true`` (as CI services set it): the same examples, and a failing one is printed with its
reproduction blob (``@reproduce_failure``) so it can be replayed; ``thorough`` for long runs.
A test that hangs fails after pytest-timeout's ``timeout`` (``pyproject.toml``) instead of
holding the run.

Every test process, and every rank it launches, runs one intra-op thread (``OMP_NUM_THREADS``,
unless already set): the suite runs two xdist workers on two cores, and a process spinning
OpenMP threads on cores another process holds slows down many times over (the CPU run of
``bench/gpu.py`` took 646 s beside a (2, 2) model test with the default threads, 392 s with one).

One Inductor cache serves the whole test session (``TORCHINDUCTOR_CACHE_DIR``): made here, in
the process pytest starts, before pytest-xdist starts its workers, so the workers, the ranks they
launch and the interpreters the tests start inherit it and a program one of them compiled is
not compiled again by another; fresh per session, so timings do not depend on earlier runs, and
removed when that process exits.

The ranks that the model tests launch build transformers models: their forkserver imports
transformers' model base once (:func:`lowering.preload`), not every rank of every launch
(~2 CPU seconds each).
"""

import atexit
import contextlib
import fcntl
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported (see the docstring)
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="shapecore-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import lowering  # noqa: E402

lowering.preload("transformers.modeling_utils")

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("default", max_examples=150, **_COMMON)
settings.register_profile("ci", max_examples=150, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "default"))


@contextlib.contextmanager
def _busy():
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.2)
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture
def one_rank():
    """A default process group of one gloo rank in this process (its collectives send to itself)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def busy_machine():
    """A context manager: while it is open, every core (and one more) spins in another
    process, so the code under test runs several times slower than on an idle machine."""
    return _busy


@pytest.fixture(scope="session")
def computed_once(tmp_path_factory, worker_id):
    """``computed_once(key, compute)``: ``compute()``'s result (it must pickle), computed once
    per test session also under pytest-xdist: the first worker to ask computes it and writes it
    to a file, under a lock; the others read the file (a multi-rank launch costs minutes)."""
    memory = {}
    shared = None if worker_id == "master" else tmp_path_factory.getbasetemp().parent

    def get(key, compute):
        if key not in memory:
            if shared is None:
                memory[key] = compute()
            else:
                path = shared / f"{key}.pickle"
                with open(f"{path}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not path.exists():
                        path.write_bytes(pickle.dumps(compute()))
                    memory[key] = pickle.loads(path.read_bytes())
        return memory[key]

    return get
