"""Reading ``ShapeEnv.to_json()`` documents: the one reader behind ``ShapeEnv.from_json`` and the CLI.

Every field is checked before anything is built, and an error names its JSON path and place:
``env.json:9:15: symbols[0].hint: expected an integer, got "seven"``. Checked: ``format`` and
``version`` (this shapecore reads :data:`~shapecore.env.JSON_VERSION`); each symbol's ``name``
(one that guard text reads back, used once), ``kind`` (``backed`` with an integer ``hint``, or
``unbacked`` with none), ``source`` and ``size_like``; each log entry's ``kind``, ``expr`` (a
claim on the document's symbols) and ``msg``. Unknown fields are refused, so a misspelt one is
not silently ignored; the fields ``to_json`` derives for readers (``replacements``,
``divisible``, ``ranges``, ``guards``, ``runtime_asserts``) are not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import sympy

from shapecore.env import JSON_FORMAT, JSON_VERSION, FactKind, SymbolInfo
from shapecore.errors import ArgumentError
from shapecore.input_text import JsonInput
from shapecore.validation import check_integer, check_symbol_name

__all__ = ["EnvDocument", "LogEntry", "is_env_json", "read_env_json"]

_DOCUMENT_FIELDS = ("format", "version", "symbols", "log", "replacements", "divisible", "ranges", "guards",
                    "runtime_asserts")
_SYMBOL_FIELDS = ("name", "kind", "hint", "source", "size_like")
_LOG_FIELDS = ("kind", "expr", "msg")
_LOG_KINDS: tuple[str, ...] = get_args(FactKind)


@dataclass(frozen=True)
class LogEntry:
    """One range, fact, guard or runtime assert of the log, and where its text is (``file:line:column``)."""

    kind: FactKind
    expr: sympy.Basic
    msg: str
    where: str


@dataclass(frozen=True)
class EnvDocument:
    """A checked ShapeEnv document: its symbols and its log, in order."""

    symbols: list[SymbolInfo]
    log: list[LogEntry]


def is_env_json(document: object) -> bool:
    """Whether a parsed JSON document says it is a ShapeEnv's."""
    return isinstance(document, dict) and document.get("format") == JSON_FORMAT


def read_env_json(source: JsonInput) -> EnvDocument:
    """The checked contents of the ShapeEnv document ``source``; raises ``GuardInputError``."""
    source.fields((), _DOCUMENT_FIELDS)
    found = source.value(("format",), "a string")
    if found != JSON_FORMAT:
        raise source.error_at(("format",), f"expected {JSON_FORMAT!r}: this is not a ShapeEnv document")
    version = source.value(("version",), "an integer")
    if version != JSON_VERSION:
        raise source.error_at(
            ("version",), f"ShapeEnv JSON version {version} is not supported; this shapecore reads version {JSON_VERSION}"
        )
    symbols = _read_symbols(source)
    return EnvDocument(symbols, _read_log(source, {s.name for s in symbols}))


def _read_symbols(source: JsonInput) -> list[SymbolInfo]:
    symbols: dict[str, SymbolInfo] = {}
    for i in range(len(source.value(("symbols",), "a list"))):
        path = ("symbols", i)
        source.fields(path, _SYMBOL_FIELDS)
        name = source.value((*path, "name"), "a string")
        try:
            check_symbol_name(name, "name")
        except ArgumentError as error:
            raise source.error_at((*path, "name"), str(error)) from None
        if name in symbols:
            raise source.error_at((*path, "name"), f"symbol {name} is listed twice")
        kind = source.value((*path, "kind"), "a string")
        if kind == "backed":
            hint = source.value((*path, "hint"), "an integer")
            try:
                check_integer(hint, "hint")
            except ArgumentError as error:
                raise source.error_at((*path, "hint"), str(error)) from None
        elif kind == "unbacked":
            hint = source.value((*path, "hint"), "null", default=None)
        else:
            raise source.error_at((*path, "kind"), f"expected 'backed' or 'unbacked', got {kind!r}")
        symbols[name] = SymbolInfo(
            name, kind, hint,
            source.value((*path, "source"), "a string", "null", default=None),
            source.value((*path, "size_like"), "a boolean", default=False),
        )
    return list(symbols.values())


def _read_log(source: JsonInput, names: set[str]) -> list[LogEntry]:
    log = []
    count = len(source.value(("log",), "a list"))
    offsets = source.element_offsets_at(source.offset(("log",)))
    for i in range(count):
        path = ("log", i)
        source.fields(path, _LOG_FIELDS)
        kind = source.value((*path, "kind"), "a string")
        if kind not in _LOG_KINDS:
            raise source.error_at((*path, "kind"), f"expected one of {', '.join(_LOG_KINDS)}, got {kind!r}")
        text = source.value((*path, "expr"), "a string")
        offset = source.offset(("expr",), start=offsets[i]) + 1  # the text, after the quote
        expr = source.parsed(text, offset, context=f"log[{i}].expr")
        unknown = sorted(s.name for s in expr.free_symbols if s.name not in names)
        if unknown:
            raise source.error_at((*path, "expr"), f"mentions {', '.join(unknown)}, which is not in symbols")
        log.append(LogEntry(kind, expr, source.value((*path, "msg"), "a string", default=""), source.location(offset)))
    return log
