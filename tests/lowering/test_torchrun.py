"""ParallelModule under torchrun (env:// rendezvous), not only under lowering.launch."""

import json
import os
import subprocess
import sys

import pytest
import torch

from lowering.examples import MLP
from tests.lowering.budgets import sharding_budget
from tests.lowering.torchrun_worker import ARGUMENTS


@pytest.mark.slow  # torchrun starts two ranks
def test_a_parallel_module_runs_under_torchrun(tmp_path):
    result = tmp_path / "result.json"
    budget = sharding_budget(MLP(), (torch.randn(8, 32),), **ARGUMENTS)
    worker = os.path.join(os.path.dirname(__file__), "torchrun_worker.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           worker, str(result), repr(budget)], timeout=180, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(result.read_text())
    assert data["world"] == 2 and data["compiles"] == 1 and data["sharded"]
    assert max(data["errors"]) < 1e-4
