"""Input text whose every error names its place: ``where:line:column: message``.

:class:`LocatedText` is a text (a guard file, a log, a JSON document) with the name of where it
came from; it turns offsets into ``line:column`` (lines are indexed once, so locating every
guard of a large file stays linear) and parses guard text found at an offset, pointing errors
into the file. :class:`JsonInput` parses a JSON document and reads its values by path
(``("symbols", 3, "hint")``), checking each one's type: an error names the JSON path and the
line and column of the value (``env.json:14:15: symbols[3].hint: expected an integer, got
"seven"``). What ``json.loads`` accepts but JSON does not (``NaN``, ``Infinity``) is refused.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterable
from json.decoder import scanstring
from json.scanner import make_scanner
from typing import Any

import sympy

from shapecore.errors import ArgumentError, GuardInputError, ParseError
from shapecore.parsing import parse
from shapecore.reasoner import as_claim

__all__ = ["LocatedText", "JsonInput", "JsonPath", "format_path"]

JsonPath = tuple[str | int, ...]

_KINDS: dict[str, Callable[[Any], bool]] = {
    "an object": lambda v: isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a string": lambda v: isinstance(v, str),
    "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "a boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_MISSING = object()
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# A JSON string, or a token json.loads takes but JSON does not (NaN, Infinity) or Python cannot
# convert (an integer of more than 4,300 digits).
_STRING_OR_BAD_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(NaN|-?Infinity|-?\d{4301,})')


class LocatedText:
    """``text`` read from ``where`` (a file name, ``<stdin>``), with located errors."""

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self._line_starts: list[int] | None = None
        self._parsed: dict[tuple[str, bool], sympy.Basic] = {}

    def line_column(self, offset: int) -> tuple[int, int]:
        """1-based line and column of ``offset``."""
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def location(self, offset: int) -> str:
        """``where:line:column`` of ``offset``."""
        line, column = self.line_column(offset)
        return f"{self.where}:{line}:{column}"

    def error(self, offset: int, message: str) -> GuardInputError:
        return GuardInputError(self.where, *self.line_column(offset), message)

    def parsed(self, source: str, offset: int, *, claim: bool = True, context: str = "") -> sympy.Basic:
        """``source`` (found at ``offset`` in the text) parsed; errors point into the text.

        ``context`` (a JSON path, say) prefixes the error message. Each distinct ``source`` is
        read once per text.
        """
        known = self._parsed.get((source, claim))
        if known is not None:  # a long trace repeats its guards
            return known
        prefix = f"{context}: " if context else ""
        try:
            expr = parse(source)
            self._parsed[source, claim] = expr = as_claim(expr) if claim else expr
            return expr
        except ParseError as error:
            lines = source.split("\n")
            inner = sum(len(line) + 1 for line in lines[: error.line - 1]) + error.column - 1
            raise self.error(offset + inner, prefix + error.message) from None
        except ArgumentError as error:
            raise self.error(offset, f"{prefix}{error}") from None


def format_path(path: JsonPath) -> str:
    """``("symbols", 3, "hint")`` → ``symbols[3].hint``."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")
    return text or "the document"


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class JsonInput(LocatedText):
    """A JSON document, parsed, whose values are read by path with their types checked."""

    def __init__(self, text: str, where: str) -> None:
        super().__init__(text, where)
        self._scan = make_scanner(json.JSONDecoder())
        self.root = self._load()

    def _load(self) -> Any:
        def refuse(token: str) -> Any:
            raise ValueError(token)

        try:
            return json.loads(self.text, parse_constant=refuse)
        except json.JSONDecodeError as error:
            raise GuardInputError(self.where, error.lineno, error.colno, f"invalid JSON: {error.msg}") from None
        except RecursionError:
            raise self.error(0, "invalid JSON: nested too deeply for Python's JSON reader") from None
        except ValueError:  # NaN, Infinity, or an integer beyond Python's 4,300 digits
            for match in _STRING_OR_BAD_TOKEN.finditer(self.text):
                token = match.group(1)
                if token and token[-1].isdigit():
                    raise self.error(match.start(), "invalid JSON: an integer of more than 4,300 digits, "
                                     "more than Python converts from text") from None
                if token:
                    raise self.error(match.start(), f"invalid JSON: {token} (JSON has no NaN or Infinity)") from None
            raise

    # -- values by path ---------------------------------------------------------------------

    def value(self, path: JsonPath, *kinds: str, default: Any = _MISSING) -> Any:
        """The value at ``path``, which must be one of ``kinds`` (keys of ``_KINDS``).

        A missing field is an error unless a ``default`` is given. The container at
        ``path[:-1]`` must already have been checked (an object or a list).
        """
        container: Any = self.root
        for step in path[:-1]:
            container = container[step]
        key = path[-1]
        if isinstance(container, dict) and key not in container:
            if default is _MISSING:
                raise self.error_at(path[:-1], f"missing field {key!r}")
            return default
        found = container[key]
        if not any(_KINDS[kind](found) for kind in kinds):
            raise self.error_at(path, f"expected {' or '.join(kinds)}, got {_shown(found)}")
        return found

    def fields(self, path: JsonPath, allowed: Iterable[str]) -> dict[str, Any]:
        """The object at ``path``, whose keys must all be in ``allowed``."""
        found = self.value(path, "an object") if path else self.root
        if not isinstance(found, dict):
            raise self.error_at(path, f"expected an object, got {_shown(found)}")
        allowed = list(allowed)
        for key in found:
            if key not in allowed:
                raise self.error_at(path, f"unknown field {key!r}; expected {', '.join(allowed)}")
        return found

    def error_at(self, path: JsonPath, message: str) -> GuardInputError:
        """An error about the value at ``path``, located at it in the text."""
        return self.error(self.offset(path), f"{format_path(path)}: {message}")

    # -- offsets ----------------------------------------------------------------------------

    def _skip(self, offset: int) -> int:
        match = _WHITESPACE.match(self.text, offset)
        return match.end() if match else offset

    def _child(self, offset: int, key: str | int) -> tuple[int, int] | None:
        """Offsets of ``key`` and of its value in the object or list at ``offset`` (for a list,
        both are the element's; for an object, the last ``key``, as ``json`` reads it)."""
        text = self.text
        if text.startswith("{", offset) and isinstance(key, str):
            found, offset = None, self._skip(offset + 1)
            while text.startswith('"', offset):
                name, after = scanstring(text, offset + 1)
                value = self._skip(self._skip(after) + 1)  # past the colon
                if name == key:
                    found = (offset, value)
                offset = self._skip(self._scan(text, value)[1])
                if text.startswith(",", offset):
                    offset = self._skip(offset + 1)
            return found
        if text.startswith("[", offset) and isinstance(key, int):
            elements = self.element_offsets_at(offset)
            return (elements[key], elements[key]) if 0 <= key < len(elements) else None
        return None

    def offset(self, path: JsonPath, start: int | None = None, *, key: bool = False) -> int:
        """Offset of the value at ``path`` (from the value at ``start``, else the root), or of its
        last key when ``key``; of its deepest existing container if it is missing."""
        offset = self._skip(0) if start is None else start
        for step in path:
            child = self._child(offset, step)
            if child is None:
                return offset
            key_offset, offset = child
        return key_offset if key and path else offset

    def element_offsets_at(self, offset: int) -> list[int]:
        """Offsets of the elements of the list at ``offset``, in one pass."""
        text, elements = self.text, []
        offset = self._skip(offset + 1)
        while not text.startswith("]", offset):
            elements.append(offset)
            offset = self._skip(self._scan(text, offset)[1])
            if text.startswith(",", offset):
                offset = self._skip(offset + 1)
        return elements
