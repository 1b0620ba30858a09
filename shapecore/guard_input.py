"""Reading a guard set from a file, in any of the forms a compiler engineer has at hand.

:func:`read_guard_set` recognizes, from the text alone:

* **ShapeEnv JSON** (``ShapeEnv.to_json``): its guards and runtime asserts are guards; its
  declared ranges and user facts are assumptions.
* **Corpus JSON** (``/work/shared/corpus``, ``schema_version`` 1): torch's raw guards, its
  replacements as ``Eq(symbol, expr)``, each backed symbol's final range as a range guard
  (``var_to_range`` after tracing already carries what guards taught it, so it is a guard,
  not an assumption) and the deferred runtime asserts.
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
:class:`GuardInputError` with that location and what is wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import sympy

from shapecore.errors import ParseError, ShapecoreError
from shapecore.functions import int_symbol, symbol_for
from shapecore.parsing import parse
from shapecore.reasoner import as_claim

__all__ = ["GuardInputError", "Guard", "GuardSet", "read_guard_set"]

GuardKind = Literal["guard", "runtime_assert", "replacement", "range", "fact"]
Range = tuple[int | None, int | None]


class GuardInputError(ShapecoreError, ValueError):
    """Input that cannot be read: ``where:line:column: message``."""

    def __init__(self, where: str, line: int, column: int, message: str) -> None:
        self.where, self.line, self.column, self.message = where, line, column, message
        super().__init__(f"{where}:{line}:{column}: {message}")


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


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Reader:
    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where

    def error(self, offset: int, message: str) -> GuardInputError:
        return GuardInputError(self.where, *_position(self.text, offset), message)

    def parsed(self, source: str, offset: int, *, claim: bool = True) -> sympy.Basic:
        """``source`` (found at ``offset`` in the file) parsed; errors point into the file."""
        try:
            expr = parse(source)
            return as_claim(expr) if claim else expr
        except ParseError as error:
            lines = source.split("\n")
            inner = sum(len(line) + 1 for line in lines[: error.line - 1]) + error.column - 1
            raise self.error(offset + inner, error.message) from None
        except TypeError as error:
            raise self.error(offset, str(error)) from None

    def location(self, offset: int) -> str:
        """``file:line:column`` of ``offset``."""
        line, column = _position(self.text, offset)
        return f"{self.where}:{line}:{column}"

    def guard(self, source: str, offset: int, kind: GuardKind = "guard") -> Guard:
        return Guard(self.parsed(source, offset), self.location(offset), kind)


# -- plain lines ----------------------------------------------------------------------------------


def _read_lines(reader: _Reader) -> GuardSet:
    result = GuardSet("text")
    offset = 0
    for line in reader.text.split("\n"):
        body = line.split("#", 1)[0]
        stripped = body.strip()
        if stripped:
            result.guards.append(reader.guard(stripped, offset + body.index(stripped)))
        offset += len(line) + 1
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


def _is_log(text: str) -> bool:
    return any(p.search(line) for line in text.split("\n") for p in _LOG_PATTERNS.values())


def _declared_range(text: str) -> Range:
    """``3 <= n <= 10000`` / ``n <= 4096`` / ``2 <= n`` → ``(lo, hi)``."""
    parts = [p.strip() for p in text.split("<=")]
    lo = _bound(parts[0]) if len(parts) > 1 else None
    hi = _bound(parts[-1]) if len(parts) > 1 else None
    return lo, hi


def _read_log(reader: _Reader) -> GuardSet:
    result = GuardSet("log")
    offset = 0
    for line in reader.text.split("\n"):
        _read_log_line(reader, result, line, offset)
        offset += len(line) + 1
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


class _JsonReader(_Reader):
    def __init__(self, text: str, where: str) -> None:
        super().__init__(text, where)
        self.cursor = 0

    def locate(self, value: str) -> int:
        """Offset of the JSON string ``value`` in the file (searching on from the last one)."""
        encoded = json.dumps(value)
        found = self.text.find(encoded, self.cursor)
        if found < 0:
            found = self.text.find(encoded)
        if found < 0:
            return 0
        self.cursor = found + len(encoded)
        return found + 1

    def key_offset(self, name: str, key: str) -> int:
        """Offset of ``"key"`` in the JSON object whose ``"name"`` is ``name``."""
        start = self.text.find(f'"name": {json.dumps(name)}')
        found = self.text.find(json.dumps(key), max(start, 0))
        return found if found >= 0 else 0

    def json_guard(self, value: Any, context: str, kind: GuardKind = "guard") -> Guard:
        if not isinstance(value, str):
            raise self.error(self.cursor, f"{context}: expected guard text, got {json.dumps(value)[:60]}")
        return self.guard(value, self.locate(value), kind)


def _read_shape_env(reader: _JsonReader, document: dict[str, Any]) -> GuardSet:
    result = GuardSet("shapeenv")
    for entry in document.get("symbols", []):
        if entry.get("source"):
            result.sources[entry["name"]] = entry["source"]
        if entry.get("hint") is not None:
            result.hints[entry["name"]] = entry["hint"]
    kinds = {"range": "range", "fact": "fact", "guard": "guard", "runtime_assert": "runtime_assert"}
    for i, entry in enumerate(document.get("log", [])):
        kind = kinds.get(entry.get("kind"))
        if kind is None:
            raise reader.error(reader.cursor, f"log[{i}]: unknown kind {entry.get('kind')!r}; expected one of {', '.join(kinds)}")
        guard = reader.json_guard(entry.get("expr"), f"log[{i}].expr", kind)  # type: ignore[arg-type]
        (result.assumptions if kind in ("range", "fact") else result.guards).append(guard)
    return result


def _corpus_bound(text: str) -> int | None:
    return _bound(text) if isinstance(text, str) else None


def _read_corpus(reader: _JsonReader, document: dict[str, Any]) -> GuardSet:
    result = GuardSet("corpus")
    backed = []
    for entry in document.get("symbols", []):
        name = entry["name"]
        if entry.get("sources"):
            result.sources[name] = entry["sources"][0]
        if entry.get("hint") is not None and entry.get("kind") == "backed":
            result.hints[name] = entry["hint"]
        if entry.get("kind") == "backed":
            backed.append(entry)
    for i, entry in enumerate(document.get("guards", [])):
        result.guards.append(reader.json_guard(entry.get("str"), f"guards[{i}].str"))
    replaced = set()
    for i, entry in enumerate(document.get("replacements", [])):
        value, symbol = entry.get("str"), entry.get("symbol")
        if not isinstance(value, str) or not isinstance(symbol, str) or not symbol.isidentifier():
            raise reader.error(reader.cursor, f"replacements[{i}]: expected a symbol name and expression text")
        offset = reader.locate(value)
        target = reader.parsed(value, offset, claim=False)
        result.guards.append(Guard(sympy.Eq(symbol_for(symbol), target), reader.location(offset), "replacement"))
        replaced.add(symbol)
    for entry in backed:
        if entry["name"] in replaced:
            continue
        lo, hi = (_corpus_bound(b) for b in entry.get("range", [None, None]))
        x = int_symbol(entry["name"])
        where = reader.location(reader.key_offset(entry["name"], "range"))
        if lo is not None and hi is not None:
            result.guards.append(Guard(sympy.And(sympy.Ge(x, lo), sympy.Le(x, hi)), where, "range"))
        elif lo is not None or hi is not None:
            result.guards.append(Guard(sympy.Ge(x, lo) if lo is not None else sympy.Le(x, hi), where, "range"))
    for i, entry in enumerate(document.get("runtime_asserts", [])):
        result.guards.append(reader.json_guard(entry.get("str"), f"runtime_asserts[{i}].str", "runtime_assert"))
    return result


def read_guard_set(text: str, where: str = "<input>") -> GuardSet:
    """The guard set in ``text`` (any form in the module docstring); ``where`` names the file."""
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise GuardInputError(where, error.lineno, error.colno, f"invalid JSON: {error.msg}") from None
        reader = _JsonReader(text, where)
        if isinstance(document, dict) and document.get("format") == "shapecore.ShapeEnv":
            return _read_shape_env(reader, document)
        if isinstance(document, dict) and "schema_version" in document and "guards" in document:
            return _read_corpus(reader, document)
        raise GuardInputError(
            where, 1, 1, "unrecognized JSON: expected ShapeEnv.to_json() output or a guard corpus case (schema_version 1)"
        )
    reader = _Reader(text, where)
    return _read_log(reader) if _is_log(text) else _read_lines(reader)
