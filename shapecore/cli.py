"""The ``shapecore`` command line.

Every subcommand has ``--help`` with examples. Exit codes: 0 success (``prove``: proved),
1 a negative answer (``prove``: refuted), 2 malformed input (printed as
``where:line:column: message``, never a traceback), 3 unknown.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from shapecore.errors import ParseError, ShapecoreError
from shapecore.reasoner import prove

__all__ = ["main", "UsageError"]

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


class UsageError(Exception):
    """Malformed input from the user: printed as ``where:line:column: message``, exit 2."""


def parse_range(text: str) -> tuple[str, tuple[int | None, int | None]]:
    """``NAME=LO..HI`` (either bound may be omitted) → ``(name, (lo, hi))``."""
    name, eq, span = text.partition("=")
    lo_text, dots, hi_text = span.partition("..")
    if not eq or not dots or not name.strip().isidentifier():
        raise UsageError(f"--range {text}:1:1: expected NAME=LO..HI, e.g. --range n=3..10000 (omit a bound to leave it open)")
    try:
        lo = int(lo_text) if lo_text.strip() else None
        hi = int(hi_text) if hi_text.strip() else None
    except ValueError:
        raise UsageError(f"--range {text}:1:{len(name) + 2}: bounds must be integers, e.g. n=3..10000") from None
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"--range {text}:1:{len(name) + 2}: empty range: {lo} > {hi}")
    return name.strip(), (lo, hi)


def located(where: str, error: ParseError) -> UsageError:
    """A parse error re-labelled with where the text came from."""
    return UsageError(f"{where}:{error.line}:{error.column}: {error.message}")


def _add_scope_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--assume", action="append", default=[], metavar="EXPR",
                        help="a fact to assume (repeatable), e.g. --assume 'Eq(Mod(b, 4), 0)'")
    parser.add_argument("--range", action="append", default=[], metavar="NAME=LO..HI", dest="ranges",
                        help="a symbol's range (repeatable), e.g. --range n=3..10000 or --range b=1..")


def _scope(args: argparse.Namespace) -> tuple[list[str], dict[str, tuple[int | None, int | None]]]:
    from shapecore.parsing import parse

    for i, fact in enumerate(args.assume, 1):
        try:
            parse(fact)
        except ParseError as error:
            raise located(f"--assume[{i}]", error) from None
    return list(args.assume), dict(parse_range(r) for r in args.ranges)


def _prove_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "prove",
        help="prove or refute one claim",
        description="Decide CLAIM under the assumed facts and ranges: proved (exit 0), "
        "refuted with a counterexample (exit 1) or unknown (exit 3).",
        epilog="examples:\n"
        "  shapecore prove 'Eq(Mod(b*s, 8), 0)' --assume 'Eq(Mod(b, 4), 0)' --assume 'Eq(Mod(s, 2), 0)'\n"
        "  shapecore prove 'n - n//3 >= 2' --range n=3..10000\n"
        "  shapecore prove 's0 % 16 == 0' --assume 's0 % 8 == 0' --smtlib | z3 -in",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("claim", help="the claim, in torch's guard syntax or Python's")
    _add_scope_options(parser)
    parser.add_argument("--smtlib", action="store_true",
                        help="print an SMT-LIB2 script whose (check-sat) is unsat exactly when the claim is proved")
    parser.add_argument("--timeout-ms", type=int, default=1000, help="z3 time limit per query (default 1000)")
    parser.set_defaults(run=_run_prove)


def _run_prove(args: argparse.Namespace) -> int:
    facts, ranges = _scope(args)
    try:
        proof = prove(args.claim, facts=facts, ranges=ranges, timeout_ms=args.timeout_ms)
    except ParseError as error:
        raise located("<claim>", error) from None
    if args.smtlib:
        print(proof.to_smtlib())
        return EXIT_OK
    print(f"{proof.status} ({proof.method}): {proof.claim}")
    if proof.counterexample is not None:
        print("  counterexample: " + ", ".join(f"{k}={v}" for k, v in sorted(proof.counterexample.items())))
    if proof.facts_used:
        print("  facts used: " + ", ".join(str(f) for f in proof.facts_used))
    if proof.reason:
        print(f"  {proof.reason}")
    return {"proved": EXIT_OK, "refuted": EXIT_NEGATIVE}.get(proof.status, EXIT_UNKNOWN)


PLUGIN_GROUP = "shapecore.commands"
"""Entry-point group through which other packages (``lowering``'s ``demo``) add subcommands.

An entry point ``name = "module:register"`` names a function ``register(subparsers)`` that
adds the subcommand ``name`` with ``set_defaults(run=...)``. It is imported only when that
subcommand runs, so ``shapecore`` itself never imports what sits above it (or torch).
"""


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; plugin subcommands are loaded only when ``command`` names them."""
    parser = argparse.ArgumentParser(
        prog="shapecore",
        description="Symbolic shape reasoning: prove, simplify and check PyTorch shape guards.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _prove_parser(sub)
    for name, entry_point in sorted(_plugins().items()):
        if name == command:
            entry_point.load()(sub)
        else:
            sub.add_parser(name, help=f"(from {entry_point.value.split(':')[0]}; see shapecore {name} --help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as error:
        print(f"shapecore {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (ShapecoreError, TypeError) as error:
        print(f"shapecore {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
