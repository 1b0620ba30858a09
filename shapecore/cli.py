"""The ``shapecore`` command line.

Subcommands: ``prove`` (one claim), ``simplify`` (an equivalent, smaller guard set), ``check``
(which guards fail for given values), ``explain`` (what the guards say about each symbol),
``suggest`` (a ``dynamic_shapes`` spec under which a rejected export's guards hold), plus
those other packages register (:data:`PLUGIN_GROUP`). Guard files are read by
:mod:`shapecore.guard_input` (guard lines, ShapeEnv JSON, corpus JSON, ``TORCH_LOGS=dynamic``).

Every subcommand has ``--help`` with examples. Exit codes: 0 success (``prove``: proved),
1 a negative answer (``prove``: refuted; ``simplify``/``explain``: the guards contradict each
other; ``check``: a guard fails), 2 malformed input (one line: ``where:line:column: message``;
an argument argparse refuses is named with the help to read; never a traceback or a usage
dump), 3 unknown (``prove``: undecided; ``simplify``/``explain``: ``--timeout`` fired, and
the partial answer printed is sound), 4 an internal error: a bug in shapecore, not in the
input, printed as one line naming the exception and where it was raised (never as 1 or 2,
which would pass it off as an answer or as the user's mistake).

Two limits on time, not to be confused: ``--timeout-ms`` is z3's budget
(:mod:`shapecore.budget`: deterministic resource units with a wall-clock backstop);
``--timeout`` (seconds) is the whole command's wall-clock limit (:mod:`shapecore.progress`),
and work still running after :data:`PROGRESS_EVERY_S` says how far it got on stderr. A long
trace repeats its guards: each distinct guard is parsed, digested and printed once.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from shapecore.errors import ArgumentError, ParseError, ShapecoreError
from shapecore.parsing import MAX_INTEGER_DIGITS
from shapecore.reasoner import as_claim, prove
from shapecore.validation import check_integer, check_symbol_name

if TYPE_CHECKING:
    import sympy

    from shapecore.guard_input import GuardSet
    from shapecore.progress import Progress

__all__ = ["main", "UsageError"]

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE, EXIT_UNKNOWN, EXIT_INTERNAL = 0, 1, 2, 3, 4

PROGRESS_EVERY_S = 2.0
"""Work still running after this many seconds says how far it got on stderr, and again every as many."""


class UsageError(Exception):
    """Malformed input from the user: printed as ``where:line:column: message``, exit 2 (as is a
    plugin subcommand whose extra is not installed)."""


class _CommandLineError(UsageError):
    """An argument argparse refuses (unknown option, missing or unknown subcommand, bad value),
    with the program (``shapecore prove``) whose help to read."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{message}; run '{prog} --help'")
        self.prog = prog


class _ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (exit 2) instead of a usage dump: the
    argument, what is wrong with it, and the help to read. Subcommands' parsers are of this
    class too (argparse makes them of their parent's class)."""

    def error(self, message: str) -> NoReturn:
        raise _CommandLineError(self.prog, message)


def _name(text: str, name: str) -> str:
    """``name`` (from the argument ``text``) as a symbol name."""
    try:
        return check_symbol_name(name.strip(), "the name")
    except ArgumentError as error:
        raise UsageError(f"{text}:1:1: {error}") from None


def _integer(text: str, digits: str, column: int, expected: str) -> int:
    """The integer ``digits`` (at ``column`` of the argument ``text``); else ``expected`` is the error."""
    where = text if len(text) <= 60 else text[:57] + "..."
    magnitude = digits.strip().lstrip("+-")
    if magnitude.isdigit() and len(magnitude) > MAX_INTEGER_DIGITS:  # int() itself refuses 4,300 digits
        raise UsageError(f"{where}:1:{column}: the value is too large: {len(magnitude)} digits; "
                         f"shapecore's integers have at most {MAX_INTEGER_DIGITS} digits")
    try:
        value = int(digits)
    except ValueError:
        raise UsageError(f"{where}:1:{column}: {expected}") from None
    try:
        return check_integer(value, "the value")
    except ArgumentError as error:
        raise UsageError(f"{where}:1:{column}: {error}") from None


def parse_range(text: str) -> tuple[str, tuple[int | None, int | None]]:
    """``NAME=LO..HI`` (either bound may be omitted) → ``(name, (lo, hi))``."""
    name, eq, span = text.partition("=")
    lo_text, dots, hi_text = span.partition("..")
    if not eq or not dots:
        raise UsageError(f"--range {text}:1:1: expected NAME=LO..HI, e.g. --range n=3..10000 (omit a bound to leave it open)")
    where = f"--range {text}"
    name = _name(where, name)
    expected = "bounds must be integers, e.g. n=3..10000"
    lo = _integer(where, lo_text, len(name) + 2, expected) if lo_text.strip() else None
    hi = _integer(where, hi_text, len(name) + 4 + len(lo_text), expected) if hi_text.strip() else None
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"{where}:1:{len(name) + 2}: empty range: {lo} > {hi}")
    return name, (lo, hi)


def located(where: str, error: ParseError) -> UsageError:
    """A parse error re-labelled with where the text came from."""
    return UsageError(f"{where}:{error.line}:{error.column}: {error.message}")


def _claim(text: str, where: str) -> sympy.Basic:
    """``text`` (the argument named ``where``: ``<claim>``, ``--assume[2]``) read as a claim."""
    try:
        return as_claim(text)
    except ParseError as error:
        raise located(where, error) from None
    except ArgumentError as error:  # an integer expression, not a claim
        raise UsageError(f"{where}:1:1: {error}") from None


def _positive_int(text: str) -> int:
    """An argparse type: a positive integer (z3 reads 0 as no limit at all)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


_TIMEOUT_MS_HELP = (
    "z3's budget in milliseconds{scope}: a deterministic count of z3's resource units (the answer does not "
    "depend on the machine's load) with a wall-clock backstop (default {default}); not --timeout"
)


def _add_timeout_option(parser: argparse.ArgumentParser, stops: str, also: str = "") -> None:
    parser.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                        help="wall-clock limit on the whole command; when it passes, "
                        f"{stops}, says so on stderr and exits 3. Work running longer than a few seconds reports "
                        f"its progress on stderr either way.{also}")


def _progress(args: argparse.Namespace) -> Progress:
    """The command's progress: lines on stderr for long work, and its --timeout."""
    from shapecore.progress import Progress

    def report(line: str) -> None:
        print(f"shapecore {args.command}: {line}", file=sys.stderr, flush=True)

    return Progress(report, time_limit_s=args.timeout, quiet_s=PROGRESS_EVERY_S, every_s=PROGRESS_EVERY_S)


def _timed_out(args: argparse.Namespace, progress: Progress, what: str) -> None:
    """Say on stderr that --timeout fired, where the work was then, and what the answer printed is."""
    print(f"shapecore {args.command}: --timeout {args.timeout:g} fired ({progress.describe()}): {what}",
          file=sys.stderr)


def _add_scope_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--assume", action="append", default=[], metavar="EXPR",
                        help="a fact to assume (repeatable), e.g. --assume 'Eq(Mod(b, 4), 0)'")
    parser.add_argument("--range", action="append", default=[], metavar="NAME=LO..HI", dest="ranges",
                        help="a symbol's range (repeatable), e.g. --range n=3..10000 or --range b=1..")


def _scope(args: argparse.Namespace) -> tuple[list[sympy.Basic], dict[str, tuple[int | None, int | None]]]:
    facts = [_claim(fact, f"--assume[{i}]") for i, fact in enumerate(args.assume, 1)]
    return facts, dict(parse_range(r) for r in args.ranges)


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
    parser.add_argument("claim", metavar="CLAIM", help="the claim, in torch's guard syntax or Python's")
    _add_scope_options(parser)
    parser.add_argument("--smtlib", action="store_true",
                        help="print an SMT-LIB2 script whose (check-sat) is unsat exactly when the claim is proved")
    parser.add_argument("--timeout-ms", type=_positive_int, default=1000, metavar="MS",
                        help=_TIMEOUT_MS_HELP.format(scope="", default=1000))
    parser.set_defaults(run=_run_prove)


def _run_prove(args: argparse.Namespace) -> int:
    claim = _claim(args.claim, "<claim>")
    facts, ranges = _scope(args)
    proof = prove(claim, facts=facts, ranges=ranges, timeout_ms=args.timeout_ms)
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


def _decoded(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; a byte that is not UTF-8 is an error at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        column = len(data[line_start : error.start].decode("utf-8", errors="replace")) + 1
        raise UsageError(f"{where}:{line}:{column}: not UTF-8 text (byte 0x{data[error.start]:02x}: "
                         f"{error.reason}); guard files are UTF-8") from None


def _input_text(path: str) -> tuple[str, str]:
    """The text of ``path`` (``-``: standard input) and the name its errors go by."""
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)  # bytes, so that a non-UTF-8 byte is reported
        text, where = (sys.stdin.read() if stdin is None else _decoded(stdin.read(), "<stdin>")), "<stdin>"
    else:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            raise UsageError(f"{path}:1:1: cannot read: {error}") from None
        text, where = _decoded(data, path), path
    return text, where


def _read_input(path: str, progress: Progress | None = None) -> GuardSet:
    """The guard set in ``path`` (``-``: standard input), in any form guard_input reads."""
    from shapecore.guard_input import read_guard_set

    text, where = _input_text(path)
    # Reading makes an object or two per guard, and no garbage cycles: the collector's passes over
    # them took half the reading time of a 10 MB file. They are read with it off.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return read_guard_set(text, where, progress)
    finally:
        if collecting:
            gc.enable()


_INPUT_HELP = (
    "one guard per line (torch or Python syntax), ShapeEnv.to_json() output, a guard corpus case, "
    "or a TORCH_LOGS=dynamic log (guard lines are picked out); - reads standard input"
)


def _simplify_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "simplify",
        help="an equivalent, smaller guard set, with the reason for every dropped guard",
        description="Print an equivalent set of guards in which none is implied by the others (plus the "
        "assumed facts and ranges): implied guards dropped, ranges merged into one guard per symbol, the "
        "strongest divisibility kept. Exit 0, 1 when the guards can never hold together, or 3 when --timeout "
        "fired (the guards printed are still equivalent to the input).",
        epilog="examples:\n"
        "  shapecore simplify guards.txt --range n=3..10000\n"
        "  TORCH_LOGS=dynamic python train.py 2> log.txt; shapecore simplify log.txt --explain\n"
        "  shapecore simplify env.json --format json\n"
        "  shapecore simplify big-trace.log --timeout 30 --timeout-ms 10000\n"
        "  echo 'Ne(Mod(1, s0//2), 0)' | shapecore simplify - --assume 's0 > 2'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", default="-", metavar="FILE", help=_INPUT_HELP)
    _add_scope_options(parser)
    parser.add_argument("--format", choices=("text", "json", "python"), default="text",
                        help="text: torch syntax, one guard per line (default); json: one object with guards, "
                        "dropped, rewritten, contradiction and ranges; python: Python source over the inputs' sources")
    parser.add_argument("--explain", action="store_true",
                        help="also print every input guard, what became of it and why (json: an 'explain' list)")
    parser.add_argument("--timeout-ms", type=_positive_int, default=2000, metavar="MS",
                        help=_TIMEOUT_MS_HELP.format(scope=" for the whole run, all its queries together", default=2000))
    _add_timeout_option(parser, "it prints the guards it has not shown redundant (still equivalent to the input, "
                        "maybe not minimal)", " Not --timeout-ms, which bounds z3's part alone")
    parser.set_defaults(run=_run_simplify)


def _guard_scope(args: argparse.Namespace, guards: GuardSet, facts: list[sympy.Basic],
                 ranges: dict[str, tuple[int | None, int | None]]) -> tuple[list, dict[str, tuple[int | None, int | None]]]:
    """Facts and ranges: the file's, then the command line's (``facts`` and ``ranges``, from
    :func:`_scope`; a --range replaces the file's)."""
    merged = dict(guards.ranges)
    mentioned = set(guards.ranges)
    if ranges:  # a long trace repeats its guards: each distinct one is looked at once
        mentioned.update(s.name for e in dict.fromkeys(g.expr for g in guards.guards + guards.assumptions)
                         for s in e.free_symbols)
    for name, span in ranges.items():
        if name not in mentioned:
            known = ", ".join(sorted(mentioned)) or "none"
            print(f"shapecore {args.command}: warning: --range {name}: no guard mentions {name} (symbols: {known})",
                  file=sys.stderr)
        merged[name] = span
    return [a.expr for a in guards.assumptions] + facts, merged


def _explain_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def _run_simplify(args: argparse.Namespace) -> int:
    from shapecore.printing import python_str
    from shapecore.simplifier import simplify

    progress = _progress(args)
    scope = _scope(args)  # the arguments are checked before a long file is read
    guards = _read_input(args.file, progress)
    facts, ranges = _guard_scope(args, guards, *scope)
    result = simplify([g.expr for g in guards.guards], facts=facts, ranges=ranges, timeout_ms=args.timeout_ms,
                      progress=progress)
    if progress.timed_out:
        _timed_out(args, progress, "the guards it has not shown redundant are kept, so the result is equivalent to "
                   "the input but may not be minimal")
    if result.backstop_fired:
        print(f"shapecore simplify: warning: z3's wall-clock backstop fired before its --timeout-ms budget was spent "
              f"(a loaded machine): guards it could not decide were kept, so another run may drop more",
              file=sys.stderr)
    if args.explain:  # a long input repeats its guards: each is printed once
        text, reason = functools.cache(str), functools.cache(lambda dropped: dropped.reason)
        rows = [("where", "guard", "outcome", "why")] + [
            (guards.guards[f.source].where, text(f.guard), f.outcome, f.detail if f.dropped is None else reason(f.dropped))
            for f in result.fates
        ]
    if args.format == "json":
        document = result.to_json()
        document["timed_out"] = progress.timed_out
        if args.explain:
            document["explain"] = [dict(zip(("where", "guard", "outcome", "why"), row)) for row in rows[1:]]
        json.dump(document, sys.stdout, indent=2)  # written as it is encoded, not held whole in memory
        print()
    else:
        total = len(result.fates)
        if result.contradiction is not None:
            print("# contradiction: these guards can never hold together")
        else:
            print(f"# {len(result.guards)} of {total} guards kept ({len(result.dropped)} dropped, "
                  f"{len(result.rewritten)} rewritten)" + ("; --timeout fired: maybe not minimal" if progress.timed_out else ""))
        names = guards.sources if args.format == "python" else None
        for guard in result.guards:
            print(python_str(guard, names) if args.format == "python" else str(guard))
        if args.explain:
            print()
            print(_explain_table(rows))
    if result.contradiction is not None:
        return EXIT_NEGATIVE
    return EXIT_UNKNOWN if progress.timed_out else EXIT_OK


def _check_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check",
        help="which guards fail for given values",
        description="Evaluate every guard of FILE (and its declared ranges) at NAME=VALUE: exit 0 when all hold, "
        "1 when some fail (each distinct guard once, with where it first appears and how many times it does).",
        epilog="examples:\n"
        "  shapecore check guards.txt s0=64 s1=16\n"
        "  shapecore check env.json s77=12",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help=_INPUT_HELP)
    parser.add_argument("values", nargs="+", metavar="NAME=VALUE", help="an integer value per symbol, e.g. s0=64")
    parser.set_defaults(run=_run_check)


def _parse_value(text: str) -> tuple[str, int]:
    name, eq, value = text.partition("=")
    if not eq:
        raise UsageError(f"{text}:1:1: expected NAME=VALUE, e.g. s0=64")
    name = _name(text, name)
    return name, _integer(text, value, len(name) + 2, f"the value must be an integer, e.g. {name}=64")


def _first_occurrences(guards: GuardSet) -> dict[sympy.Basic, tuple[str, int]]:
    """Each distinct condition (assumptions first, then guards, in input order): where it first
    appears and how many times. A long trace repeats its guards, and two spellings may parse to
    one (``s0 % 4 == 0``, ``Eq(Mod(s0, 4), 0)``): each is looked at and printed once."""
    first: dict[sympy.Basic, tuple[str, int]] = {}
    for guard in guards.assumptions + guards.guards:
        where, count = first.get(guard.expr, (guard.where, 0))
        first[guard.expr] = (where, count + 1)
    return first


def _times(count: int) -> str:
    return f"  ({count:,} times)" if count > 1 else ""


def _run_check(args: argparse.Namespace) -> int:
    from shapecore.evaluation import holds

    guards = _read_input(args.file)
    values = dict(_parse_value(v) for v in args.values)
    failures = []
    for name, (lo, hi) in guards.ranges.items():
        if name in values and not ((lo is None or lo <= values[name]) and (hi is None or values[name] <= hi)):
            failures.append(f"{args.file}: {name}={values[name]} is outside its declared range "
                            f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]")
    first = _first_occurrences(guards)
    for expr, (where, count) in first.items():
        missing = sorted(s.name for s in expr.free_symbols if s.name not in values)
        if missing:
            raise UsageError(f"{where}: {expr} mentions {', '.join(missing)}, which has no value; "
                             f"pass {missing[0]}=VALUE")
        if not holds(expr, values):
            failures.append(f"{where}: {expr}{_times(count)}")
    total = len(first) + len(guards.ranges)
    if failures:
        print(f"{len(failures)} of {total} conditions fail for " + ", ".join(f"{k}={v}" for k, v in values.items()) + ":")
        print("\n".join("  " + f for f in failures))
        return EXIT_NEGATIVE
    print(f"all {total} conditions hold")
    return EXIT_OK


def _explain_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "explain",
        help="per symbol: range, divisibility, replacement and the guards that mention it",
        description="Summarize what the guards of FILE (with their declared ranges) say about each symbol: its "
        "range, divisibility or replacement, and each distinct guard that mentions it, where it first appears "
        "and how many times. Exit 0, 1 when the guards can never hold together, or 3 when --timeout fired.",
        epilog="examples:\n"
        "  shapecore explain guards.txt\n"
        "  shapecore explain case.json\n"
        "  shapecore explain big-trace.log --timeout 30",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help=_INPUT_HELP)
    _add_timeout_option(parser, "it prints what the distinct guards it got to imply (true, but maybe looser "
                        "than what all of them imply)")
    parser.set_defaults(run=_run_explain)


def _run_explain(args: argparse.Namespace) -> int:
    from shapecore.functions import int_symbol
    from shapecore.knowledge import Knowledge
    from shapecore.ranges import is_infinite

    progress = _progress(args)
    guards = _read_input(args.file, progress)
    first = _first_occurrences(guards)
    knowledge = Knowledge()
    for name, (lo, hi) in guards.ranges.items():
        x = int_symbol(name)
        for bound in ([x >= lo] if lo is not None else []) + ([x <= hi] if hi is not None else []):
            knowledge.add(bound)
    digested = 0
    for expr in first:
        if not progress.step("digesting distinct guards", digested, len(first)):
            break
        knowledge.add(expr)
        digested += 1
    if knowledge.contradiction is not None:
        print("contradiction: the guards can never hold together: "
              + ", ".join(str(knowledge.facts[i]) for i in knowledge.contradiction))
        return EXIT_NEGATIVE
    if progress.timed_out:
        what = (f"what the first {digested:,} of {len(first):,} distinct guards imply is printed (true, but maybe "
                "looser than all of them give)")
        _timed_out(args, progress, what)
        print(f"# --timeout fired: {what}")
    mentions: dict[str, list[sympy.Basic]] = {}
    for expr in first:
        for s in expr.free_symbols:
            mentions.setdefault(s.name, []).append(expr)
    names = sorted(set(mentions) | set(guards.ranges) | set(guards.sources), key=_creation_order)
    for name in names:
        x = int_symbol(name)
        origin = ", ".join(p for p in (f"source {guards.sources[name]}" if name in guards.sources else "",
                                       f"hint {guards.hints[name]}" if name in guards.hints else "") if p)
        print(f"{name}" + (f"  ({origin})" if origin else ""))
        if x in knowledge.replacements:
            print(f"  replaced by  {knowledge.replacements[x]}")
        else:
            r = knowledge.range_of(x)
            print(f"  range        [{'-inf' if is_infinite(r.lo) else r.lo}, {'inf' if is_infinite(r.hi) else r.hi}]")
            congruence = knowledge.congruences.get(x)
            if congruence is not None and congruence.coeff > 1:
                print(f"  divisible    {name} % {congruence.coeff} == {congruence.base}")
        for i, expr in enumerate(mentions.get(name, [])):
            where, count = first[expr]
            print(f"  {'guards' if i == 0 else '':11s}  {where}: {expr}{_times(count)}")
    return EXIT_UNKNOWN if progress.timed_out else EXIT_OK


def _suggest_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "suggest",
        help="a dynamic_shapes spec that satisfies every guard of a rejected torch.export",
        description="Read a saved torch.export error (\"Constraints violated\" with its guard lines) or a "
        "TORCH_LOGS=dynamic log and print the least restrictive spec under which every guard holds: derived "
        "Dims (batch = 4*_batch), min/max, equal dims, static dims; each change with the guard that forced it "
        "and a counterexample for the alternative it rejects. Every guard is proved under the suggestion. "
        "Exit 0, or 3 when a guard could not be proved (one relating dims in a way a spec cannot state; "
        "they are listed). From Python, shapecore.torch.suggest_dynamic_shapes(model, args, dynamic_shapes) "
        "also exports with the suggestion to check it.",
        epilog="examples:\n"
        "  python export.py 2> error.txt; shapecore suggest error.txt\n"
        "  TORCH_LOGS=dynamic python export.py 2> run.log; shapecore suggest run.log\n"
        "  shapecore suggest error.txt --hint batch=8    # the example value (a log has them)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", metavar="FILE", help="a saved export error or a TORCH_LOGS=dynamic log; - reads "
                        "standard input")
    parser.add_argument("--hint", action="append", default=[], metavar="NAME=VALUE",
                        help="the example value of a dim (repeatable); without one, the prover picks values where "
                        "every guard holds")
    parser.add_argument("--timeout-ms", type=_positive_int, default=1000, metavar="MS",
                        help=_TIMEOUT_MS_HELP.format(scope=" per proof", default=1000))
    parser.set_defaults(run=_run_suggest)


def _run_suggest(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from shapecore.torch.suggest import read_export_failure, suggest_spec

    text, where = _input_text(args.input)
    guards, dims = read_export_failure(text, where)
    if not guards:
        raise UsageError(f"{where}:1:1: no guard found: expected torch.export's \"Constraints violated\" error "
                         "or a TORCH_LOGS=dynamic log")
    for name, value in map(_parse_value, args.hint):
        if name not in dims:
            raise UsageError(f"--hint {name}={value}: no dim {name} in {where} (its dims: {', '.join(dims)})")
        dims[name] = replace(dims[name], hint=value)
    suggestion = suggest_spec(guards, dims, timeout_ms=args.timeout_ms)
    print("Suggested fixes:" if suggestion.fixes() else "No change: every guard holds under the spec as given.")
    for line in suggestion.fixes():
        print(f"  {line}")
    if suggestion.changes:
        print("Why:")
        for change in suggestion.changes:
            print(f"  {change}")
    if suggestion.unproven:
        print(f"Not proved under the suggestion ({len(suggestion.unproven)} of {len(guards)} guards):")
        for guard in suggestion.unproven:
            print(f"  {guard}")
        return EXIT_UNKNOWN
    print(f"Proved: all {len(guards)} guards hold under the suggestion.")
    return EXIT_OK


def _creation_order(name: str) -> tuple[str, int, str]:
    """``s2`` before ``s10``: letters, then the number, then the name."""
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1, name)


PLUGIN_GROUP = "shapecore.commands"
"""Entry-point group through which other packages (``lowering``'s ``demo``) add subcommands.

An entry point ``name = "module:register"`` names a function ``register(subparsers)`` that
adds the subcommand ``name`` with ``set_defaults(run=...)``. It is imported only when that
subcommand runs, so ``shapecore`` itself never imports what sits above it (or torch).
"""


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)}


_EXTRA_MARKER = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _extra_name(name: str) -> str:
    """An extra's name as packaging compares it (PEP 685)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _missing_requirements(entry_point: importlib.metadata.EntryPoint) -> list[str]:
    """The distributions required by the extras an entry point declares (``"module:register
    [extra]"``) that are not installed, in the order its distribution lists them."""
    extras = {_extra_name(extra) for extra in entry_point.extras}
    if not extras or entry_point.dist is None:
        return []
    missing = []
    for requirement in entry_point.dist.requires or ():
        name, _, marker = requirement.partition(";")
        extra = _EXTRA_MARKER.search(marker)
        if extra is None or _extra_name(extra.group(1)) not in extras:
            continue
        name = _REQUIREMENT_NAME.match(name).group(1)
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def _load_plugin(entry_point: importlib.metadata.EntryPoint, sub: argparse._SubParsersAction) -> None:
    """Register the plugin's subcommand, or refuse (exit 2) naming the extra it needs to run."""
    missing = _missing_requirements(entry_point)
    if missing:
        extras, dist = ",".join(entry_point.extras), entry_point.dist.name
        raise UsageError(f"needs {dist}'s {extras} extra, which is not installed (missing {', '.join(missing)}): "
                         f"pip install '{dist}[{extras}]'")
    entry_point.load()(sub)


_EPILOG = """\
Run 'shapecore COMMAND --help' for a command's options and examples.

exit codes:
  0  success (prove: proved; suggest: every guard proved under the suggestion)
  1  a negative answer (prove: refuted; simplify, explain: the guards contradict each other;
     check: a guard fails)
  2  malformed input, in one line: where:line:column: message (or the argument refused and
     the help to read)
  3  unknown (prove: undecided; simplify, explain: --timeout fired, and the partial answer
     printed is sound; suggest: a guard not proved under the suggestion)
  4  an internal error: a bug in shapecore, in one line naming the exception

two limits on time:
  --timeout-ms MS    z3's budget (prove, simplify): a deterministic count of z3's resource
                     units, so the answer does not depend on the machine's load, with a
                     wall-clock backstop of MS milliseconds
  --timeout SECONDS  the whole command's wall-clock limit (simplify, explain): reading,
                     analysis and z3; when it passes, the command stops with a sound partial
                     answer and exits 3. Work running longer than a few seconds reports its
                     progress on stderr either way
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; plugin subcommands are loaded only when ``command`` names them."""
    parser = _ArgumentParser(
        prog="shapecore",
        description="Symbolic shape reasoning: prove, simplify and check PyTorch shape guards.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _prove_parser(sub)
    _simplify_parser(sub)
    _check_parser(sub)
    _explain_parser(sub)
    _suggest_parser(sub)
    for name, entry_point in sorted(_plugins().items()):
        if name == command:
            _load_plugin(entry_point, sub)
        else:
            sub.add_parser(name, help=f"(from {entry_point.value.split(':')[0]}; see shapecore {name} --help)")
    return parser


def _undecodable(argv: Sequence[str]) -> str | None:
    """The error for the first argument that is not UTF-8 (Python keeps such bytes as lone
    surrogates), or None."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return f"argument {i} ('{shown}') is not UTF-8 text"
    return None


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines() splits at


def _print_error(message: str) -> None:
    """``message`` on stderr in one line: a line break in the user's text quoted in it is escaped."""
    print(_LINE_BREAKS.sub(lambda match: match.group().encode("unicode_escape").decode(), message), file=sys.stderr)


def _internal_error(command: str, error: Exception) -> str:
    """One line for an exception that is a bug: its type, message and where it was raised."""
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return (f"shapecore {command}: internal error: {type(error).__name__}: {error} (raised at "
            f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}); this is a bug in shapecore, "
            "not in the input: please report it with the command line")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    undecodable = _undecodable(argv)
    if undecodable is not None:
        _print_error(f"shapecore: {undecodable}")
        return EXIT_USAGE
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(command)
    except UsageError as error:
        _print_error(f"shapecore {command}: {error}")
        return EXIT_USAGE
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # argparse's parse_args would blame the top-level parser
            raise _CommandLineError(f"{parser.prog} {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
    except _CommandLineError as error:
        _print_error(f"{error.prog}: {error}")
        return EXIT_USAGE
    except SystemExit as exit:  # --help
        return exit.code
    try:
        return args.run(args)
    except (UsageError, ShapecoreError) as error:
        _print_error(f"shapecore {args.command}: {error}")
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - a bug: exit 4, never 1 (refuted) or 2 (bad input)
        _print_error(_internal_error(args.command, error))
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
