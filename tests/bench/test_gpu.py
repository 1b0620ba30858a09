"""bench/gpu.py: the GPU check runs end to end on CPU ranks (so it cannot rot), and its GPU
configuration is the one it is meant to check."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "gpu.py")


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_run_checks_a_70m_decoder_and_the_demo_on_a_nccl_world_and_two_ranks_sharing_the_gpu():
    from lowering.examples import Decoder

    bench = _bench()
    assert bench.WORLDS["cuda"] == {"nccl-1": ("nccl", 1), "gloo-shared-2": ("cpu:gloo,cuda:gloo", 2)}
    config, batch_sizes = bench.MODELS["cuda"]["70m"]
    assert (config["dim"], config["layers"], config["seq"]) == (1024, 4, 256)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in Decoder(**config).parameters())
    assert 60e6 < parameters < 80e6
    for device in ("cuda", "cpu"):
        assert set(bench.MODELS[device]) == {"demo", "70m"}
        assert all(len(sizes) == 6 and all(b % 4 == 0 for b in sizes) for _, sizes in bench.MODELS[device].values())


@pytest.mark.slow
def test_the_cpu_run_passes_every_check_and_writes_one_report(tmp_path):
    """The demo decoder on a gloo world of 1 rank, as the GPU run's NCCL world of 1 (its world of 2
    runs the same code with a peer rank: tests/lowering launches 2 ranks throughout): a minute on 2
    cores, most of it compiling the decoder and its torch.compile peer."""
    out = tmp_path / "gpu.json"
    done = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--out", str(out), "--models", "demo",
                           "--worlds", "gloo-1", "--blocks", "1", "--steps", "2"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] and set(report["worlds"]) == {"gloo-1"}
    for world in report["worlds"].values():
        hardware = world["calibrated"]
        assert all(hardware[k] > 0 for k in ("flops", "flops_fp32", "memory_bandwidth", "launch"))
        assert len(world["reference_rates"]) == world["ranks"]
        assert set(world["calibrated_over_reference"]) == {"flops", "flops_fp32", "memory_bandwidth"}
        assert all(ratio > 0 for ratio in world["calibrated_over_reference"].values())
        assert set(world["models"]) == {"demo"}  # the other model runs the same code at another size
        for model in world["models"].values():
            assert all(model["checks"].values()) and len(model["ranks"]) == world["ranks"]
            for rank in model["ranks"]:
                assert len(rank["inference"]["rows"]) == 6
                assert len(rank["training"]["losses"]) == 5 and rank["training"]["losses"][-1] < rank["training"]["losses"][0]
                for part in ("inference", "training"):
                    assert set(rank[part]["step_ms"]) == {"shapecore", "eager", "torch.compile"}
                    assert all(ms > 0 for ms in rank[part]["step_ms"].values())
