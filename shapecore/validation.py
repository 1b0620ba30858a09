"""Checks on the arguments of shapecore's public functions.

Each check raises :class:`~shapecore.errors.ArgumentError` naming the argument, what was
expected and what was given, before any work starts: ``prove("x > 1", facts="x > 2")`` is
refused rather than read as the facts ``"x"``, ``" "``, ``">"``, … .
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence

import sympy

from shapecore.errors import ArgumentError, ParseError
from shapecore.functions import int_symbol
from shapecore.parsing import MAX_INTEGER_DIGITS, decimal_digits, integer_fits, parse

__all__ = ["check_bound", "check_integer", "check_ranges", "check_symbol_name", "check_values", "guard_list"]

Range = tuple[int | None, int | None]


def _shown(value: object) -> str:
    """``repr(value)``, shortened; a huge int is described rather than printed."""
    if isinstance(value, int) and not integer_fits(value):
        return f"an integer of {decimal_digits(value)} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_integer(value: object, what: str, *, expected: str = "an int") -> int:
    """``value`` as an int; bools, floats and strings are refused.

    Any integral type is accepted (``numpy.int64``, ``sympy.Integer``); its magnitude is at most
    :data:`~shapecore.parsing.MAX_INTEGER_DIGITS` digits, like the integers in guard text.
    """
    if type(value) is int:  # the common case, without the ABC check below
        number = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{what} must be {expected}, got {_shown(value)}")
    else:
        number = int(value)
    if not integer_fits(number):
        raise ArgumentError(f"{what} is too large: {_shown(number)}; shapecore's integers have at most "
                            f"{MAX_INTEGER_DIGITS} digits")
    return number


def check_bound(value: object, what: str) -> int | None:
    """A range bound: an int (as :func:`check_integer`), or None for an open side."""
    return None if value is None else check_integer(value, what, expected="an int or None")


def guard_list(values: object, what: str) -> list[str | sympy.Basic | int | bool]:
    """``values``, an iterable of guard text or sympy expressions, as a list.

    A single string (or expression) is refused: iterating it would read each character as a guard.
    """
    if isinstance(values, (str, bytes, sympy.Basic)) or not isinstance(values, Iterable):
        hint = f"; for one guard pass a list: {what}=[{values!r}]" if isinstance(values, (str, sympy.Basic)) else ""
        raise ArgumentError(f"{what} must be a list of guards (text or sympy expressions), got {_shown(values)}{hint}")
    items = list(values)
    for i, item in enumerate(items):
        if not isinstance(item, (str, sympy.Basic, int)):
            raise ArgumentError(f"{what}[{i}] must be guard text or a sympy expression, got {_shown(item)}")
    return items


def check_symbol_name(name: object, what: str) -> str:
    """``name``, if guard text reads it back as the integer symbol of that name."""
    if not isinstance(name, str):
        raise ArgumentError(f"{what} must be a str, got {_shown(name)}")
    try:
        reads_back = parse(name) == int_symbol(name)
    except ParseError:
        reads_back = False
    if not reads_back:
        raise ArgumentError(
            f"{what} {_shown(name)} cannot name a symbol: guard text would not read it back as that symbol; a name "
            "is a Python identifier other than a keyword, a function name (Max, Eq, ...) or a float symbol name (zf0)"
        )
    return name


def check_ranges(ranges: object, what: str = "ranges") -> dict[str, Range]:
    """``ranges`` (symbol or name → ``(lo, hi)``, None = open) as a dict by name; None is empty."""
    if ranges is None:
        return {}
    if not isinstance(ranges, Mapping):
        raise ArgumentError(f"{what} must map symbol names to (lo, hi), e.g. {{'s0': (2, None)}}, got {_shown(ranges)}")
    result: dict[str, Range] = {}
    for key, span in ranges.items():
        name = check_symbol_name(key.name if isinstance(key, sympy.Symbol) else key, f"{what} key")
        where = f"{what}[{name!r}]"
        if isinstance(span, (str, bytes)) or not isinstance(span, Sequence) or len(span) != 2:
            raise ArgumentError(f"{where} must be a pair (lo, hi) of ints or None, e.g. (2, None), got {_shown(span)}")
        result[name] = (check_bound(span[0], f"{where} lower bound"), check_bound(span[1], f"{where} upper bound"))
    return result


def check_values(values: object, what: str = "values") -> dict[str, int]:
    """``values`` (symbol name → int) as a dict."""
    if not isinstance(values, Mapping):
        raise ArgumentError(f"{what} must map symbol names to ints, e.g. {{'s0': 64}}, got {_shown(values)}")
    return {str(name): check_integer(value, f"{what}[{name!r}]") for name, value in values.items()}
