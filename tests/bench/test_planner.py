"""bench/planner.py's peer runs in a process of its own: a peer that fails or dies (the system's
out-of-memory killer took autoparallel's on the 32-layer graph on (2, 4, 8)) is reported, and
the benchmark goes on (it waited forever on a pool whose worker had died)."""

from __future__ import annotations

import importlib

import pytest

PEER = importlib.import_module("bench.planner")  # by name: the peer's process imports it again


@pytest.mark.slow  # a spawned interpreter each (torch imported)
@pytest.mark.parametrize(("body", "reported"), [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "autoparallel's process died (killed: out of memory?) after"),
    ("raise RuntimeError('a broken checkout')\n", "autoparallel failed: RuntimeError: a broken checkout"),
])
def test_a_peer_that_dies_or_fails_is_reported_and_the_benchmark_goes_on(tmp_path, body, reported):
    (tmp_path / "autoparallel").mkdir()
    (tmp_path / "autoparallel" / "__init__.py").write_text(body)
    outcome = PEER._run_peer(str(tmp_path), 1, (2,))
    assert isinstance(outcome, str) and outcome.startswith(reported), outcome
