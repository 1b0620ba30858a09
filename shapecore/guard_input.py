"""Reading a guard set from a file, in any of the forms a compiler engineer has at hand.

:func:`read_guard_set` recognizes, from the text alone:

* **ShapeEnv JSON** (``ShapeEnv.to_json``): its guards and runtime asserts are guards; its
  declared ranges and user facts are assumptions.
* **Corpus JSON** (a guard corpus case, ``schema_version`` 1, as the repository's
  ``tests/data/corpus/SCHEMA.md`` describes): torch's raw guards, its replacements as
  ``Eq(symbol, expr)``, each backed symbol's final range as a range guard (``var_to_range``
  after tracing already carries what guards taught it, so it is a guard, not an assumption)
  and the deferred runtime asserts.
* **A ``TORCH_LOGS=dynamic`` log**: guard lines are picked out, everything else is ignored.
  ``eval G [guard added]`` and ``runtime_assert G [guard added]`` give guards (``[guard
  suppressed]`` ones were never recorded by torch, so they are skipped), ``set_replacement s
  = e`` gives ``Eq(s, e)``, ``constrain_symbol_range s [lo, hi]`` a range guard;
  ``create_symbol s = hint for SOURCE [lo, hi]`` (and ``create_unbacked_sym*``) give the
  declared range (an assumption), the source and the hint. An export error's ``Not all values
  of n = SOURCE in the specified range LO <= n <= HI satisfy the generated guard G`` gives
  ``G`` in terms of the ``Dim`` name ``n``, and ``n``'s range.
* otherwise **one guard per line**, in torch or Python syntax; blank lines and ``#``
  comments are skipped.

Every guard carries where it came from (``file:line:column``), and malformed input raises
:class:`GuardInputError` with that location and what is wrong (for JSON, also the path of the
value, such as ``symbols[3].hint``). Reading is linear in the size of the input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import sympy

from shapecore.env_json import is_env_json, read_env_json
from shapecore.errors import GuardInputError, ParseError
from shapecore.functions import int_symbol, symbol_for
from shapecore.input_text import JsonInput, JsonPath, LocatedText, format_path
from shapecore.parsing import parse
from shapecore.progress import Progress
from shapecore.reasoner import as_claim

__all__ = ["GuardInputError", "Guard", "GuardSet", "read_guard_set"]

GuardKind = Literal["guard", "runtime_assert", "replacement", "range", "fact"]
Range = tuple[int | None, int | None]


@dataclass(frozen=True)
class Guard:
    """One condition read from the input, with its kind and location (``file:line:column``)."""

    expr: sympy.Basic
    where: str
    kind: GuardKind = "guard"


@dataclass
class GuardSet:
    """What a file says: guards to simplify or check, and what may be assumed about symbols.

    ``assumptions`` (facts) and ``ranges`` (name → ``(lo, hi)``, None = open) describe the
    inputs; ``sources`` names each symbol's source (``L['x'].size()[0]``); ``hints`` its
    example value; ``format`` is ``text``, ``log``, ``shapeenv`` or ``corpus``.
    """

    format: str
    guards: list[Guard] = field(default_factory=list)
    assumptions: list[Guard] = field(default_factory=list)
    ranges: dict[str, Range] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    hints: dict[str, int] = field(default_factory=dict)


class _Reader(LocatedText):
    def __init__(self, text: str, where: str, progress: Progress | None) -> None:
        super().__init__(text, where)
        self.progress = progress

    def guard(self, source: str, offset: int, kind: GuardKind = "guard") -> Guard:
        return Guard(self.parsed(source, offset), self.location(offset), kind)

    def lines(self) -> Iterator[tuple[int, int, str]]:
        """``(number, offset, line)`` of every line, reporting progress every so many lines."""
        offset, progress = 0, self.progress
        lines = self.text.split("\n")
        for number, line in enumerate(lines, 1):
            if progress is not None and number % _REPORT_EVERY == 0:
                progress.step("reading", number, len(lines))
            yield number, offset, line
            offset += len(line) + 1


_REPORT_EVERY = 1 << 10  # lines


# -- plain lines ----------------------------------------------------------------------------------


def _read_lines(reader: _Reader) -> GuardSet:
    result = GuardSet("text")
    where = reader.where
    for number, offset, line in reader.lines():
        body = line.split("#", 1)[0] if "#" in line else line
        stripped = body.strip()
        if stripped:
            column = 0 if stripped is body else body.index(stripped)  # strip() returns the str itself if it can
            expr = reader.parsed(stripped, offset + column)
            result.guards.append(Guard(expr, f"{where}:{number}:{column + 1}"))
    return result


# -- TORCH_LOGS=dynamic ---------------------------------------------------------------------------

_BOUND = r"(-?int_oo|-?oo|-?[\d.e+-]+)"
_LOG_PATTERNS = {
    "guard": re.compile(r"(?:^|\s)(?P<what>eval|runtime_assert)(?: \(forcing_spec\))? (?!\[guard suppressed\])(?P<expr>.+?) \[guard added\]"),
    "replacement": re.compile(r"(?:^|\s)set_replacement (?P<symbol>\w+) = (?P<expr>.+?) \((?P<why>[\w ]+)\)(?: VR\[[^\]]*\])?\s*$"),
    "constrain": re.compile(rf"(?:^|\s)constrain_symbol_range (?P<symbol>\w+) \[{_BOUND}, {_BOUND}\]"),
    "create": re.compile(rf"(?:^|\s)create_symbol (?P<symbol>\w+) = (?P<hint>\S+) for (?P<source>.+?) \[{_BOUND}, {_BOUND}\]"),
    "unbacked": re.compile(rf"(?:^|\s)create_unbacked_sym\w+ (?P<symbol>\w+) \[{_BOUND}, {_BOUND}\]"),
    "violation": re.compile(
        r"Not all values of (?P<name>\w+) = (?P<source>.+?) in the specified range (?P<range>.+?) "
        r"satisfy the generated guard (?P<expr>.+?)\.?\s*$"
    ),
}


def _bound(text: str) -> int | None:
    """A log's range bound: an int, or None for ``int_oo``, ``oo`` and non-integers."""
    try:
        return int(text)
    except ValueError:
        return None


_LOG_WORDS = ("[guard added]", "set_replacement", "constrain_symbol_range", "create_symbol", "create_unbacked_sym",
              "Not all values of")  # one in every line a pattern matches


def _is_log(text: str) -> bool:
    if not any(word in text for word in _LOG_WORDS):  # a guard file: no line to look at
        return False
    return any(p.search(line) for line in text.split("\n") for p in _LOG_PATTERNS.values())


def _declared_range(text: str) -> Range:
    """``3 <= n <= 10000`` / ``n <= 4096`` / ``2 <= n`` → ``(lo, hi)``."""
    parts = [p.strip() for p in text.split("<=")]
    lo = _bound(parts[0]) if len(parts) > 1 else None
    hi = _bound(parts[-1]) if len(parts) > 1 else None
    return lo, hi


def _read_log(reader: _Reader) -> GuardSet:
    result = GuardSet("log")
    for _, offset, line in reader.lines():
        _read_log_line(reader, result, line, offset)
    return result


def _read_log_line(reader: _Reader, result: GuardSet, line: str, offset: int) -> None:
    p = _LOG_PATTERNS
    if m := p["guard"].search(line):
        kind: GuardKind = "guard" if m["what"] == "eval" else "runtime_assert"
        result.guards.append(reader.guard(m["expr"], offset + m.start("expr"), kind))
    elif m := p["replacement"].search(line):
        target = sympy.Eq(symbol_for(m["symbol"]), reader.parsed(m["expr"], offset + m.start("expr"), claim=False))
        result.guards.append(Guard(target, reader.location(offset + m.start("symbol")), "replacement"))
    elif m := p["constrain"].search(line):
        lo, hi = _bound(m[2]), _bound(m[3])
        where = reader.location(offset + m.start("symbol"))
        x = int_symbol(m["symbol"])
        for bound in ([sympy.Ge(x, lo)] if lo is not None else []) + ([sympy.Le(x, hi)] if hi is not None else []):
            result.guards.append(Guard(bound, where, "range"))
    elif m := p["create"].search(line):
        result.ranges[m["symbol"]] = (_bound(m[4]), _bound(m[5]))
        result.sources[m["symbol"]] = m["source"]
        hint = _bound(m["hint"])
        if hint is not None:
            result.hints[m["symbol"]] = hint
    elif m := p["unbacked"].search(line):
        result.ranges[m["symbol"]] = (_bound(m[2]), _bound(m[3]))
    elif m := p["violation"].search(line):
        name, source = m["name"], m["source"]
        expr = m["expr"].replace(source, name)
        if expr == m["expr"] or not name.isidentifier():
            return
        # the guard is re-read in terms of the Dim name; errors point at the guard's start
        try:
            claim = as_claim(parse(expr))
        except (ParseError, TypeError) as error:
            raise reader.error(offset + m.start("expr"), f"{getattr(error, 'message', error)} in {m['expr']!r}") from None
        result.guards.append(Guard(claim, reader.location(offset + m.start("expr"))))
        result.ranges.setdefault(name, _declared_range(m["range"]))
        result.sources.setdefault(name, source)


# -- JSON -----------------------------------------------------------------------------------------


def _read_shape_env(source: JsonInput) -> GuardSet:
    result = GuardSet("shapeenv")
    document = read_env_json(source)
    for info in document.symbols:
        if info.source:
            result.sources[info.name] = info.source
        if info.hint is not None:
            result.hints[info.name] = info.hint
    for entry in document.log:
        guard = Guard(entry.expr, entry.where, entry.kind)
        (result.assumptions if entry.kind in ("range", "fact") else result.guards).append(guard)
    return result


_CORPUS_VERSION = 1


def _corpus_bound(source: JsonInput, path: JsonPath) -> int | None:
    """A corpus range bound: an int (written as a string, as torch prints it), or None if open."""
    value = source.value(path, "a string", "an integer", "null")
    return _bound(value) if isinstance(value, str) else value


def _corpus_entries(source: JsonInput, key: str, fields: tuple[str, ...]) -> list[tuple[JsonPath, int]]:
    """``(path, offset)`` of each entry of the list ``key`` (if present): objects with string ``fields``."""
    if key not in source.root:
        return []
    source.value((key,), "a list")
    offsets = source.element_offsets_at(source.offset((key,)))
    for i in range(len(offsets)):
        source.value((key, i), "an object")
        for name in fields:
            source.value((key, i, name), "a string")
    return [((key, i), offset) for i, offset in enumerate(offsets)]


def _corpus_expr(source: JsonInput, path: JsonPath, offset: int, *, claim: bool = True) -> tuple[sympy.Basic, str]:
    """The parsed ``str`` of the entry at ``path`` (found at ``offset``), and where its text is."""
    start = source.offset(("str",), start=offset) + 1  # the text, after the quote
    text = source.value((*path, "str"), "a string")
    return source.parsed(text, start, claim=claim, context=format_path((*path, "str"))), source.location(start)


def _corpus_symbol(source: JsonInput, path: JsonPath) -> str:
    name = source.value(path, "a string")
    if not name.isidentifier():
        raise source.error_at(path, f"expected a symbol name, got {name!r}")
    return name


def _read_corpus(source: JsonInput) -> GuardSet:
    version = source.value(("schema_version",), "an integer")
    if version != _CORPUS_VERSION:
        raise source.error_at(("schema_version",), f"corpus schema_version {version} is not supported; "
                              f"this shapecore reads version {_CORPUS_VERSION}")
    result = GuardSet("corpus")
    backed = []
    for path, _ in _corpus_entries(source, "symbols", ("name",)):
        name = _corpus_symbol(source, (*path, "name"))
        if source.value((*path, "sources"), "a list", default=[]):
            result.sources[name] = source.value((*path, "sources", 0), "a string")
        hint = source.value((*path, "hint"), "an integer", "null", default=None)
        if source.value((*path, "kind"), "a string", default=None) == "backed":
            if hint is not None:
                result.hints[name] = hint
            backed.append((name, path))
    for path, offset in _corpus_entries(source, "guards", ("str",)):
        result.guards.append(Guard(*_corpus_expr(source, path, offset), "guard"))
    replaced = set()
    for path, offset in _corpus_entries(source, "replacements", ("symbol", "str")):
        symbol = _corpus_symbol(source, (*path, "symbol"))
        target, where = _corpus_expr(source, path, offset, claim=False)
        result.guards.append(Guard(sympy.Eq(symbol_for(symbol), target), where, "replacement"))
        replaced.add(symbol)
    for name, path in backed:
        if name in replaced or "range" not in source.value(path, "an object"):
            continue
        if len(source.value((*path, "range"), "a list")) != 2:
            raise source.error_at((*path, "range"), "expected [lower, upper]")
        lo, hi = _corpus_bound(source, (*path, "range", 0)), _corpus_bound(source, (*path, "range", 1))
        x = int_symbol(name)
        where = source.location(source.offset((*path, "range"), key=True))
        if lo is not None and hi is not None:
            result.guards.append(Guard(sympy.And(sympy.Ge(x, lo), sympy.Le(x, hi)), where, "range"))
        elif lo is not None or hi is not None:
            result.guards.append(Guard(sympy.Ge(x, lo) if lo is not None else sympy.Le(x, hi), where, "range"))
    for path, offset in _corpus_entries(source, "runtime_asserts", ("str",)):
        result.guards.append(Guard(*_corpus_expr(source, path, offset), "runtime_assert"))
    return result


def read_guard_set(text: str, where: str = "<input>", progress: Progress | None = None) -> GuardSet:
    """The guard set in ``text`` (any form in the module docstring); ``where`` names the file.

    Guard lines and logs report how many lines are read to ``progress`` (its time limit does not
    cut reading short: every guard is needed for a sound answer).
    """
    if text.lstrip().startswith("{"):
        source = JsonInput(text, where)
        if is_env_json(source.root):
            return _read_shape_env(source)
        if isinstance(source.root, dict) and "schema_version" in source.root and "guards" in source.root:
            return _read_corpus(source)
        raise GuardInputError(
            where, 1, 1, "unrecognized JSON: expected ShapeEnv.to_json() output or a guard corpus case (schema_version 1)"
        )
    reader = _Reader(text, where, progress)
    return _read_log(reader) if _is_log(text) else _read_lines(reader)
