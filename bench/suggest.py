"""Benchmark: shapecore's suggested ``dynamic_shapes`` against torch's own "Suggested fixes:", on
the corpus of rejected specs (``tests/shapecore/torch/suggest_models.py``).

Per model: torch's fix (from the export error) and ours; whether each exports; whether each
exported program runs, and agrees with the model, at the smallest sizes its spec admits (and
one more): a spec that exports but whose program rejects sizes it promises shows a guard the
spec left out; the constraints each asks (:func:`~shapecore.torch.suggest.constraint_count`:
static, derived or shared dims, a min above 0, a finite max); and the seconds ours took
(trace, proofs, and the export that checks it).

    python bench/suggest.py [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the tests package holds the corpus

import torch  # noqa: E402

from shapecore.torch.suggest import constraint_count, suggest_dynamic_shapes, torch_suggested_spec  # noqa: E402
from shapecore.torch.tracing import trace_export  # noqa: E402
from tests.shapecore.torch.suggest_models import CORPUS, SpecCase, program_runs  # noqa: E402


def _program(case: SpecCase, spec) -> tuple[bool, object]:
    try:
        return True, torch.export.export(case.model, case.args, dynamic_shapes=spec)
    except Exception as error:  # noqa: BLE001 - not exporting is a result
        return False, error


def _row(case: SpecCase) -> list[str]:
    spec = case.spec()
    traced = trace_export(case.model, case.args, dynamic_shapes=spec, on_constraint_violation="return")
    start = time.perf_counter()
    ours = suggest_dynamic_shapes(case.model, case.args, spec)
    seconds = time.perf_counter() - start
    our_ok, our_program = _program(case, ours.dynamic_shapes)
    our_runs = our_ok and program_runs(our_program, case, ours.dynamic_shapes, ours)
    theirs = None if traced.error is None else torch_suggested_spec(spec, traced.error)
    fix = "none" if theirs is None else "; ".join(
        line.strip() for line in traced.error.split("Suggested fixes:", 1)[1].strip().splitlines())
    if theirs is None:
        their_exports = their_runs = their_count = "-"
    else:
        ok, program = _program(case, theirs)
        their_exports = "yes" if ok else "NO"
        their_runs = ("yes" if program_runs(program, case, theirs, ours) else "NO") if ok else "-"
        their_count = str(constraint_count(theirs, spec))
    return [case.name, fix, their_exports, their_runs, "; ".join(ours.fixes()),
            "yes" if our_ok and ours.proven else "NO", "yes" if our_runs else "NO",
            f"{constraint_count(ours.dynamic_shapes, spec)} vs {their_count}", f"{seconds:.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="corpus cases to run (default: all)")
    names = parser.parse_args(argv).names or list(CORPUS)
    warnings.filterwarnings("ignore")
    header = ["model", "torch's fix", "exports", "runs", "ours", "exports+proved", "runs", "constraints ours vs torch", "s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names:
        print("| " + " | ".join(_row(CORPUS[name])) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
