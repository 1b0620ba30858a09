"""``shapecore demo``: plan, lower and run a small decoder with a dynamic batch on 4 CPU processes.

The walk-through, printed as it happens:

1. trace a 2-layer LLaMA-style decoder (:class:`lowering.examples.Decoder`) with a dynamic
   batch and plan it on a (2, 2) mesh under ``Eq(Mod(batch, 4), 0)`` and a per-device memory
   budget small enough that the weights must be split; print the plan, the proofs its
   symbolic splits rely on and its guards;
2. launch 4 gloo processes on this machine; each lowers the plan and compiles it once with
   Inductor (rank 0 reports progress while it compiles);
3. run each batch size, compare with the single-device model, and print the compile count
   and the per-step times;
4. build the training module (a joint forward+backward plan, its forward and backward programs)
   and take a few AdamW steps on one batch: the loss printed at each step falls.

Registered as a ``shapecore`` subcommand through the ``shapecore.commands`` entry-point group
(:data:`shapecore.cli.PLUGIN_GROUP`) by :func:`register`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["CONSTRAINT", "MEMORY_BUDGET", "SEQ", "VOCAB", "decoder", "dynamic_shapes", "plan_decoder",
           "register", "run", "tokens"]

CONSTRAINT = "Eq(Mod(batch, 4), 0)"
MEMORY_BUDGET = 120_000  # bytes per device: at batch sizes up to 24 (40) a plan needs at least 70 (97) kB, and
# one keeping the weights replicated 143 (172) kB, so the weights are split
SEQ, VOCAB = 8, 64


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand (entry point ``demo = "lowering.demo:register"``)."""
    parser = subparsers.add_parser(
        "demo",
        help="plan, lower and run a small decoder with a dynamic batch on 4 CPU processes",
        description="Trace a 2-layer LLaMA-style decoder with a dynamic batch, plan it on a (2, 2) CPU mesh "
        f"under {CONSTRAINT}, print the plan with the proofs and guards it relies on, then run several batch "
        "sizes on 4 gloo processes from one Inductor compile per rank and check them against one device.",
        epilog="examples:\n  shapecore demo\n  shapecore demo --batch-sizes 8,16,24,32 --steps 10 --train-steps 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batch-sizes", default="8,16,24", type=_batch_sizes,
                        help=f"comma-separated global batch sizes (default 8,16,24); each must satisfy {CONSTRAINT}")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per batch size (default 5)")
    parser.add_argument("--train-steps", type=int, default=5,
                        help="AdamW steps of the training module afterwards (default 5; 0 skips training)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before the processes are stopped (default 300)")
    parser.set_defaults(run=run)


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 8,16,24, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected positive batch sizes, got {text!r}")
    return sizes


class _NoFlattenAdvice(logging.Filter):
    """Drops DTensor's advice to flatten the mesh, logged once per rank when the demo gathers an output
    split on both mesh axes (``full_tensor()``: two all-gathers) to compare it with one device."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("While redistributing from")


_NO_FLATTEN_ADVICE = _NoFlattenAdvice()


def _hide_dtensor_flatten_advice() -> None:
    from shapecore.torch.private import dtensor_redistribute_logger

    dtensor_redistribute_logger().addFilter(_NO_FLATTEN_ADVICE)


def _say(text: str = "") -> None:
    print(text, flush=True)


def decoder() -> Any:
    """The demo's model (also the one ``bench/lowering.py`` times): a 2-layer LLaMA-style decoder."""
    import torch

    from lowering.examples import Decoder

    torch.manual_seed(0)
    return Decoder(vocab=VOCAB, seq=SEQ)


def tokens(batch: int) -> Any:
    """A reproducible ``(batch, SEQ)`` batch of token ids."""
    import torch

    return torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(batch))


def dynamic_shapes() -> Any:
    """The batch dimension of the tokens is dynamic (``Dim("batch")``)."""
    from torch.export import Dim

    return ({0: Dim("batch")},)


def plan_decoder(batch_sizes: Sequence[int]) -> Any:
    """Trace :func:`decoder` and plan it on a (2, 2) mesh under :data:`CONSTRAINT` and :data:`MEMORY_BUDGET`
    (traced at the largest of ``batch_sizes``, which the plan records: ``ParallelModule(plan=...)`` traces there)."""
    import planner

    options = planner.PlanOptions(constraints=[CONSTRAINT], memory_budget=MEMORY_BUDGET, batch_sizes=list(batch_sizes),
                                  hardware="cpu-gloo", regret="exact")  # a small problem: each batch size's optimum solved exactly
    return planner.plan_module(decoder(), (tokens(batch_sizes[0]),), dynamic_shapes=dynamic_shapes(),
                               mesh=planner.Mesh((2, 2), ("dp", "tp")), options=options)


def _show_plan(plan: Any) -> None:
    _say(str(plan))
    _say()
    symbolic = [p for p in plan.proofs if any(c.isalpha() for c in p.size)]
    static = len(plan.proofs) - len(symbolic)
    _say(f"proofs: {len(plan.proofs)} split dims, {static} of static size; the symbolic ones rely on")
    for (obligation, status, method), count in sorted(Counter((plan.readable(p.obligation), p.status, p.method)
                                                              for p in symbolic).items()):
        _say(f"  {obligation}: {status} by shapecore ({method}) for {count} dim(s)")
    _say("guards (checked on every call before any collective): "
         + ("; ".join(plan.guards) or "none"))


class _Progress:
    """Rank 0's progress: each construction phase as it starts, and a line every few seconds."""

    _WORDS = {"trace": "tracing the model", "plan": "reading the plan", "lower": "lowering the plan",
              "compile": "compiling with Inductor (dynamic batch)"}

    def __init__(self, every: float = 5.0) -> None:
        self.phase, self.every, self.start = "", every, time.monotonic()
        self.stop = threading.Event()
        threading.Thread(target=self._tick, daemon=True).start()

    def __call__(self, phase: str) -> None:
        self.phase = self._WORDS.get(phase, phase)
        _say(f"rank 0: {self.phase}…")

    def _tick(self) -> None:
        while not self.stop.wait(self.every):
            _say(f"  rank 0: still {self.phase} ({time.monotonic() - self.start:.0f} s)")


def _rank(rank: int, plan_json: str, batch_sizes: Sequence[int], steps: int, train_steps: int) -> dict[str, Any]:
    import torch

    from lowering.parallel import ParallelModule
    from planner import Plan

    _hide_dtensor_flatten_advice()
    model = decoder()
    progress = _Progress() if rank == 0 else None
    try:
        pm = ParallelModule(model, (tokens(batch_sizes[0]),), dynamic_shapes=dynamic_shapes(), mesh=(2, 2),
                            plan=Plan.from_json(plan_json), progress=progress)
    finally:
        if progress is not None:
            progress.stop.set()
    if rank == 0:
        local = ", ".join(f"{s.of} = {s.multiplier}*{s.name}" for s in pm.program.symbols)
        _say("rank 0: ready in " + ", ".join(f"{k} {v:.1f} s" for k, v in pm.timings.items())
             + f"; local symbols: {pm.plan.readable(local)}")
    rows = []
    for batch in batch_sizes:
        inputs = tokens(batch)
        local_inputs = pm.shard_inputs(inputs)
        out = pm(*local_inputs)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            out = pm(*local_inputs)
            times.append(time.perf_counter() - start)
        full = out.full_tensor()
        with torch.no_grad():
            expected = model(inputs)
        error = float((full - expected).abs().max() / expected.abs().max())
        rows.append({"batch": batch, "error": error, "compiles": pm.compile_count,
                     "step_ms": 1000 * statistics.median(times)})
        if rank == 0:
            _say(f"rank 0: batch {batch} done")
    losses, train_compiles = _train(rank, batch_sizes[0], train_steps) if train_steps else ([], 0)
    return {"rows": rows, "compile_seconds": pm.compile_seconds, "timings": pm.timings, "losses": losses,
            "train_compiles": train_compiles}


def _train(rank: int, batch: int, steps: int) -> tuple[list[float], int]:
    """``steps`` AdamW steps of a training module (planned on rank 0) on one batch (next-token
    cross-entropy): the losses, and the module's compile count."""
    import torch
    from torch.nn import functional as F

    from lowering.parallel import ParallelModule

    if rank == 0:
        _say(f"rank 0: planning, lowering and compiling the training step (forward and backward, batch {batch})…")
    ids = tokens(batch)
    pm = ParallelModule(decoder(), (ids,), dynamic_shapes=dynamic_shapes(), mesh=(2, 2), training=True,
                        constraints=[CONSTRAINT], hardware="cpu-gloo")
    optimizer = torch.optim.AdamW(pm.parameters(), lr=1e-2)
    labels = ids.roll(-1, dims=1)
    losses = []
    for step in range(steps):
        loss = F.cross_entropy(pm(ids).full_tensor().flatten(0, 1), labels.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if rank == 0:
            _say(f"rank 0: training step {step + 1}: loss {losses[-1]:.4f}")
    return losses, pm.compile_count


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit code 0 when every batch size matched one device with one compile per rank."""
    from lowering.launch import launch
    from shapecore import holds, parse

    start = time.monotonic()
    bad = [b for b in args.batch_sizes if not holds(parse(CONSTRAINT), {"batch": b})]
    if bad:
        print(f"shapecore demo: batch size(s) {', '.join(map(str, bad))} break {CONSTRAINT}; "
              "the program would refuse them (try 8,16,24)", file=sys.stderr)
        return 2
    _say(f"shapecore demo: a 2-layer LLaMA-style decoder (seq {SEQ}, vocab {VOCAB}) with a dynamic batch, "
         f"on a (2, 2) CPU mesh of 4 gloo processes")
    _say(f"planning under {CONSTRAINT} and a memory budget of {MEMORY_BUDGET // 1000} kB per device…")
    plan = plan_decoder(args.batch_sizes)
    _show_plan(plan)
    _say()
    _say(f"launching 4 processes ({time.monotonic() - start:.0f} s so far)…")
    results = launch(functools.partial(_rank, plan_json=plan.to_json(), batch_sizes=args.batch_sizes,
                                       steps=args.steps, train_steps=args.train_steps), 4, timeout=args.timeout)
    _say()
    _say(f"{'batch':>6} {'max rel. error':>15} {'compiles':>9} " + " ".join(f"{'rank ' + str(r) + ' ms/step':>15}" for r in range(4)))
    ok = True
    for i, batch in enumerate(args.batch_sizes):
        rows = [r["rows"][i] for r in results]
        error = max(row["error"] for row in rows)
        compiles = {row["compiles"] for row in rows}
        ok &= error < 1e-4 and compiles == {1}
        _say(f"{batch:>6} {error:>15.2e} {','.join(map(str, sorted(compiles))):>9} "
             + " ".join(f"{row['step_ms']:>15.2f}" for row in rows))
    compile_seconds = max(r["compile_seconds"] for r in results)
    _say()
    _say(f"Inductor compiles per rank: {sorted({r['rows'][-1]['compiles'] for r in results})} for "
         f"{len(args.batch_sizes)} batch sizes (longest compile {compile_seconds:.1f} s); "
         f"outputs {'match' if ok else 'DO NOT match'} one device (rtol 1e-4)")
    losses = results[0]["losses"]
    if losses:
        falling = losses[-1] < losses[0]
        ok &= falling
        compiles = sorted({r["train_compiles"] for r in results})
        _say(f"training ({len(losses)} AdamW steps on one batch, forward and backward compiled {compiles} time(s) per "
             "rank): loss " + " -> ".join(f"{x:.3f}" for x in losses) + ("" if falling else " DID NOT fall"))
    _say(f"total {time.monotonic() - start:.0f} s")
    return 0 if ok else 1
