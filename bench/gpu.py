"""GPU check: the lowering on one GPU, against eager and torch.compile, written as one JSON report.

On one GPU (``--device cuda``, the default) it runs two worlds: a NCCL world of 1 rank, and 2
ranks sharing the GPU over ``cpu:gloo,cuda:gloo`` (NCCL refuses two ranks on one device; gloo
moves the CUDA tensors, so the CUDA code paths run with collectives, not NCCL itself). In each
world it measures the machine (:func:`planner.calibrate`, the figures the plans are priced
with; where it fails, the error is recorded and the preset is used) beside the rates of one
large product and one large copy (``REFERENCE``), which calibrate's figures should come within
2x of, then for each decoder (:class:`lowering.examples.Decoder`: the demo's, and one of about
70M parameters, dim 1024, 4 layers, seq 256) on a ``(ranks,)`` mesh:

* inference: ``lowering.parallelize`` with the batch dynamic, called at 6 batch sizes; each
  output against the eager model's (largest difference over the largest magnitude, at most
  ``RTOL``), and one compile for all of them;
* training: ``lowering.parallelize(..., training=True)`` and AdamW for ``TRAIN_STEPS`` steps
  on one batch, each loss against the eager model trained alike (relative error at most
  ``RTOL``), with one forward and one backward compile;
* step times (the median of interleaved blocks, the device synchronized after each call) of
  the lowering, the eager model and ``torch.compile(dynamic=True)``, for inference and for a
  training step (forward, loss, backward, AdamW step), and the peak memory of each (CUDA: the
  most allocated while its steps ran, beside what was allocated before; CPU: the rank's peak
  resident set);
* construction seconds (trace, plan, lower, compile).

``--device cpu`` runs the same on gloo CPU ranks (worlds of 1 and 2) with tiny decoders, so CI
keeps it working (``tests/bench/test_gpu.py``). The report is rewritten after every world and
model, so a run stopped early keeps what it measured; a model that fails is recorded with its
error and the run goes on. Exit code 0 when every check passed.

Run: ``python bench/gpu.py --out gpu.json`` (under 8 minutes on an H100 is the aim);
``--device cpu``, ``--models``, ``--worlds`` pick a part.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

# this directory holds a file named like the package it benchmarks: keep it off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

RTOL = 1e-3
TRAIN_STEPS = 5
CONSTRAINT = "Eq(Mod(batch, 2), 0)"  # every batch splits over 2 ranks
MODELS = {  # per device: decoder sizes and the 6 batch sizes they run at, each at least 2 per rank (Inductor
    # specializes a size of 1: batch 2 on 2 ranks compiled again, as ParallelModule warns)
    "cuda": {
        "demo": (dict(vocab=64, dim=32, heads=4, hidden=64, layers=2, seq=8), [8, 16, 24, 32, 40, 48]),
        "70m": (dict(vocab=8192, dim=1024, heads=16, hidden=2816, layers=4, seq=256), [4, 8, 12, 16, 20, 24]),
    },
    "cpu": {
        "demo": (dict(vocab=64, dim=32, heads=4, hidden=64, layers=2, seq=8), [4, 8, 12, 16, 20, 24]),
        "70m": (dict(vocab=256, dim=64, heads=4, hidden=176, layers=2, seq=16), [4, 8, 12, 16, 20, 24]),
    },
}
WORLDS = {"cuda": {"nccl-1": ("nccl", 1), "gloo-shared-2": ("cpu:gloo,cuda:gloo", 2)},
          "cpu": {"gloo-1": ("gloo", 1), "gloo-2": ("gloo", 2)}}
HARDWARE = {"cuda": "h100-nvlink", "cpu": "cpu-gloo"}  # the preset reported beside calibrate's figures (and used
# for planning where calibrate failed)
REFERENCE = {"cuda": (8192, 1 << 30), "cpu": (512, 1 << 24)}  # a large product's side and a large copy's bytes: the
# rates calibrate's growing probes should come within 2x of (an H100: about 790e12 FLOP/s bf16, 3e12 B/s)


def _device() -> Any:
    """This rank's device: the CUDA device ``lowering.launch`` made current, or the CPU."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend())
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend or "cuda:" in backend \
        else torch.device("cpu")


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _decoder(config: dict[str, int], device: Any) -> Any:
    """The decoder of ``config``, seeded (the same weights on every rank and for every variant)."""
    import torch

    from lowering.examples import Decoder

    torch.manual_seed(0)
    return Decoder(**config).to(device)


def _tokens(config: dict[str, int], batch: int, device: Any) -> Any:
    """A reproducible ``(batch, seq)`` batch of token ids and its next-token labels."""
    import torch

    ids = torch.randint(0, config["vocab"], (batch, config["seq"] + 1), generator=torch.Generator().manual_seed(batch))
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def _relative_error(got: Any, expected: Any) -> float:
    return float((got.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-30))


def _loss(logits: Any, labels: Any) -> Any:
    from torch.nn import functional as F

    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _full(out: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return out.full_tensor() if isinstance(out, DTensor) else out


class _Trainer:
    """A model, AdamW, and one training step on a global batch (the loss of the whole batch)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.model, self.optimizer = model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    def __call__(self, ids: Any, labels: Any) -> float:
        loss = _loss(_full(self.model(ids)), labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.detach()


def _timed(calls: dict[str, Any], device: Any, blocks: int, steps: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Median milliseconds per call of each of ``calls`` (after one warm-up call), their timed calls
    interleaved in ``blocks`` of ``steps``; and the memory each used while its calls ran."""
    import torch
    import torch.distributed as dist

    times: dict[str, list[float]] = {name: [] for name in calls}
    memory: dict[str, Any] = {}
    for call in calls.values():  # warm-up: torch.compile compiles here
        call()
    for name, call in calls.items():
        if device.type == "cuda":
            _sync(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            call()
            _sync(device)
            memory[name] = {"allocated_before_bytes": before, "peak_allocated_bytes": torch.cuda.max_memory_allocated(device)}
    for _ in range(blocks):
        for name, call in calls.items():
            dist.barrier()
            for _ in range(steps):
                start = time.perf_counter()
                call()
                _sync(device)
                times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}, memory


def _rank(rank: int, config: dict[str, int], batch_sizes: list[int], hardware_json: str, blocks: int,
          steps: int) -> dict[str, Any]:
    import torch
    from torch.export import Dim

    import lowering
    from planner import Hardware

    device = _device()
    world = torch.distributed.get_world_size()
    options = dict(dynamic_shapes=({0: Dim("batch")},), mesh=(world,), constraints=[CONSTRAINT],
                   hardware=Hardware.from_json(hardware_json), batch_sizes=batch_sizes)
    report: dict[str, Any] = {"rank": rank, "device": str(device)}

    eager = _decoder(config, device)
    pm = lowering.parallelize(_decoder(config, device), (_tokens(config, batch_sizes[0], device)[0],), **options)
    rows = []
    with torch.no_grad():
        for batch in batch_sizes:
            ids, _ = _tokens(config, batch, device)
            error = _relative_error(_full(pm(ids)), eager(ids))
            rows.append({"batch": batch, "relative_error": error, "ok": error <= RTOL})
    report["inference"] = {"rows": rows, "compiles": pm.compile_count, "construction_seconds": pm.timings}

    ids, labels = _tokens(config, batch_sizes[-1], device)
    compiled = torch.compile(_decoder(config, device), dynamic=True)
    with torch.no_grad():
        ms, memory = _timed({"shapecore": lambda: pm(ids), "eager": lambda: eager(ids),
                             "torch.compile": lambda: compiled(ids)}, device, blocks, steps)
    report["inference"].update(batch=batch_sizes[-1], step_ms=ms, memory=memory)
    del pm, compiled

    ids, labels = _tokens(config, batch_sizes[0], device)
    trained = lowering.parallelize(_decoder(config, device), (ids,), training=True, **options)
    ours, reference = _Trainer(trained), _Trainer(_decoder(config, device))
    losses = [float(ours(ids, labels)) for _ in range(TRAIN_STEPS)]
    expected = [float(reference(ids, labels)) for _ in range(TRAIN_STEPS)]
    errors = [abs(a - e) / abs(e) for a, e in zip(losses, expected)]
    report["training"] = {"batch": batch_sizes[0], "losses": losses, "eager_losses": expected, "max_relative_error":
                          max(errors), "ok": max(errors) <= RTOL, "compiles": trained.compile_count,
                          "construction_seconds": trained.timings}
    peer = _Trainer(torch.compile(_decoder(config, device), dynamic=True))
    ms, memory = _timed({"shapecore": lambda: ours(ids, labels), "eager": lambda: reference(ids, labels),
                         "torch.compile": lambda: peer(ids, labels)}, device, blocks, steps)
    report["training"].update(step_ms=ms, memory=memory)
    report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return report


def _reference_rates(device: Any, side: int, nbytes: int) -> dict[str, float]:
    """This device's rates at one large size: a ``side``-square product (FLOP/s, fp32 and bf16) and
    a copy of ``nbytes`` (bytes read and written per second), each the mean of 10 calls after 3."""
    import torch

    def rate(call: Any, work: float) -> float:
        for _ in range(3):
            call()
        _sync(device)
        start = time.perf_counter()
        for _ in range(10):
            call()
        _sync(device)
        return 10 * work / (time.perf_counter() - start)

    rates = {}
    for dtype, name in ((torch.float32, "flops_fp32"), (torch.bfloat16, "flops_bf16")):
        a = torch.randn(side, side, device=device, dtype=dtype)
        rates[name] = rate(lambda: a @ a, 2.0 * side**3)
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    rates["copy_bytes_per_s"] = rate(lambda: target.copy_(source), 2.0 * nbytes)
    return rates


def _calibrate(rank: int, reference: tuple[int, int]) -> tuple[str, dict[str, float]]:
    """calibrate's figures on this world's mesh, and this rank's rates at the large ``reference``
    sizes (every rank measuring at once, as calibrate's probes do)."""
    import torch.distributed as dist

    import planner

    hardware = planner.calibrate((dist.get_world_size(),))
    dist.barrier()
    return hardware.to_json(), _reference_rates(_device(), *reference)


def _against_reference(hardware: dict[str, Any], reference: dict[str, float]) -> dict[str, float]:
    """calibrate's figures over the rates at the large sizes (1.0: calibrate reads the large rate)."""
    return {"flops": hardware["flops"] / reference["flops_bf16"],
            "flops_fp32": hardware["flops_fp32"] / reference["flops_fp32"],
            "memory_bandwidth": hardware["memory_bandwidth"] / reference["copy_bytes_per_s"]}


def _checks(model: dict[str, Any]) -> dict[str, bool]:
    """The checks of one model's ranks: outputs and losses equal to eager, one compile each."""
    ranks = model["ranks"]
    return {
        "inference_equal": all(row["ok"] for r in ranks for row in r["inference"]["rows"]),
        "inference_one_compile": all(r["inference"]["compiles"] == 1 for r in ranks),
        "training_equal": all(r["training"]["ok"] for r in ranks),
        "training_one_compile": all(r["training"]["compiles"] == 1 for r in ranks),
    }


def _write(report: dict[str, Any], path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, path)


def _environment(device: str) -> dict[str, Any]:
    import platform

    import torch

    environment = {"python": platform.python_version(), "torch": torch.__version__, "device": device,
                   "cpu_count": os.cpu_count()}
    if device == "cuda" and torch.cuda.is_available():
        environment.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                           cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version())))
    return environment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="gpu.json", help="the JSON report's path (default gpu.json)")
    parser.add_argument("--models", default=None, help="a subset of the models, comma-separated (default all)")
    parser.add_argument("--worlds", default=None, help="a subset of the worlds, comma-separated (default all)")
    parser.add_argument("--blocks", type=int, default=3, help="interleaved timing blocks (default 3)")
    parser.add_argument("--steps", type=int, default=5, help="timed calls per block (default 5)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each launch may take (default 600)")
    args = parser.parse_args(argv)
    models = {k: v for k, v in MODELS[args.device].items() if args.models is None or k in args.models.split(",")}
    worlds = {k: v for k, v in WORLDS[args.device].items() if args.worlds is None or k in args.worlds.split(",")}

    from lowering.launch import launch
    from planner import HARDWARE_PRESETS

    start = time.monotonic()
    report: dict[str, Any] = {"environment": _environment(args.device), "rtol": RTOL, "train_steps": TRAIN_STEPS,
                              "preset": HARDWARE_PRESETS[HARDWARE[args.device]].to_dict(), "worlds": {}}
    ok = True
    for world_name, (backend, ranks) in worlds.items():
        entry: dict[str, Any] = {"backend": backend, "ranks": ranks, "models": {}}
        report["worlds"][world_name] = entry
        print(f"{world_name}: calibrate on {ranks} rank(s) over {backend}", flush=True)
        try:
            measured = launch(functools.partial(_calibrate, reference=REFERENCE[args.device]), ranks,
                              backend=backend, timeout=args.timeout)
            hardware_json = measured[0][0]
            entry["calibrated"] = json.loads(hardware_json)
            entry["reference_rates"] = [rates for _, rates in measured]
            entry["calibrated_over_reference"] = _against_reference(entry["calibrated"], measured[0][1])
        except Exception as error:  # noqa: BLE001 - recorded in the report; the models are planned with the preset
            entry["calibrated"] = {"error": f"{type(error).__name__}: {error}"}
            hardware_json = HARDWARE_PRESETS[HARDWARE[args.device]].to_json()
            ok = False
        _write(report, args.out)
        for model_name, (config, batch_sizes) in models.items():
            print(f"{world_name}: {model_name} {config} at batch sizes {batch_sizes}", flush=True)
            clock = time.monotonic()
            model: dict[str, Any] = {"config": config, "batch_sizes": batch_sizes}
            try:
                model["ranks"] = launch(functools.partial(_rank, config=config, batch_sizes=batch_sizes,
                                                          hardware_json=hardware_json, blocks=args.blocks,
                                                          steps=args.steps), ranks, backend=backend, timeout=args.timeout)
                model["checks"] = _checks(model)
                ok &= all(model["checks"].values())
            except Exception as error:  # noqa: BLE001 - recorded in the report; the next model runs
                model["error"] = f"{type(error).__name__}: {error}"
                ok = False
            model["seconds"] = time.monotonic() - clock
            entry["models"][model_name] = model
            _write(report, args.out)
            print(f"  {json.dumps(model.get('checks', model.get('error')))} in {model['seconds']:.0f} s", flush=True)
    report["seconds"] = time.monotonic() - start
    report["ok"] = ok
    _write(report, args.out)
    print(f"{'all checks passed' if ok else 'SOME CHECKS FAILED'}; report in {args.out} ({report['seconds']:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
