"""A quick reader for the common guard grammar, building what :func:`shapecore.parse` builds.

Most guards are short and plain: names, integers, ``+ - * // %``, one comparison, ``and``
``or`` ``not``, ``& | ~``, parentheses and calls such as ``Eq``, ``Mod``, ``FloorDiv`` or
``Max``. For those, Python's parser (``ast.parse``, about a quarter of parsing's time) and the
general reader's bookkeeping are more than needed: :func:`read_common` reads the text with two
regular expressions and a climb over Python's precedence, and calls the very builders
the general reader calls, with the same arguments, so the expression is the same, node for node.

It answers None, and the general reader takes over, for anything else: float literals or
symbols, ``/`` and ``**``, chained comparisons, a ``True``/``False`` that decides an ``and``/``or``,
text that is not a guard (a syntax error, a type mismatch, a division by zero; the general
reader then gives the located error), a parenthesized ``a + b`` continued by ``+`` (which
Python's tree makes one sum), and text long or nested enough for the size limits to matter:
at most :data:`MOST_TOKENS` tokens, so no tree is nested past
:data:`shapecore.parsing.MAX_NESTING` and no integer has past
:data:`~shapecore.parsing.MAX_INTEGER_DIGITS` digits.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable

import sympy

from shapecore import functions as F
from shapecore.operations import CALL_NAMES, Kind

__all__ = ["INTEGER", "MOST_DIGITS", "MOST_TOKENS", "NAME", "read_common"]

MOST_TOKENS = 90
"""Tokens of the longest text read: a tree's depth is at most its tokens, well within
:data:`shapecore.parsing.MAX_NESTING`, and with integers of at most 30 digits
no product's coefficient comes near :data:`shapecore.parsing.MAX_INTEGER_DIGITS`."""

_MOST_NESTED = 16  # parentheses and calls inside each other: the recursion stays shallow

MOST_DIGITS = 30
"""Digits of the longest integer read."""
INTEGER = rf"(?:[1-9][0-9]{{0,{MOST_DIGITS - 1}}}|0)"
"""An integer as Python writes one, of at most :data:`MOST_DIGITS` digits (a regular expression)."""
NAME = r"[A-Za-z_][A-Za-z0-9_]*+"
"""A name (a regular expression; possessive: a name never gives back a character)."""

_TOKEN = rf"{INTEGER}(?![\w.])|{NAME}|//|==|!=|<=|>=|[-+*%<>(),&|~]"
"""One token: an integer as Python writes one (not followed by a letter or a dot, which would
make it another literal) of at most 30 digits, a name, or an operator. ``/`` alone, ``**``,
``=`` and every other character are outside the grammar."""
_TOKENS_ONLY = re.compile(rf"(?: *+(?:{_TOKEN}))*+ *+")
_TOKENS = re.compile(_TOKEN)

_COMPARE = {"==": sympy.Eq, "!=": sympy.Ne, "<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge}
_CALLS = {
    name: op for name, op in CALL_NAMES.items()
    if op.kind in (Kind.INTEGER, Kind.RELATION, Kind.CONNECTIVE) and op.cls is not sympy.Pow
}
"""The functions read here: all but the float ones and ``PowByNatural`` (whose size and float
rules the general reader applies)."""
_INT, _BOOL = False, True  # what a part is: an integer expression or a condition

_POWER = {"or": 1, "and": 2, "|": 5, "&": 6, "+": 7, "-": 7, "*": 8, "//": 8, "%": 8, **dict.fromkeys(_COMPARE, 4)}
"""How tightly each binary operator binds, as in Python (``not`` is 3, unary operators 9)."""
_NOT, _COMPARISON, _PRODUCT, _UNARY = 3, 4, 8, 9
_RUNS = {5: ("|", sympy.Or), 6: ("&", sympy.And), 7: ("+", F.add)}
"""The operators the general reader builds a run of at once (``a - b + c`` is one sum), by power;
``*`` (power 8) too, between ``//`` and ``%``."""
_Part = tuple[sympy.Basic, bool, "str | None"]


class _Unsupported(Exception):
    """Outside the grammar, or not a guard: the general reader decides."""


_BUILD_ERRORS = (_Unsupported, ZeroDivisionError, TypeError, ValueError, OverflowError)
"""What ends a quick reading: the errors the general reader reports as a :class:`ParseError`."""


def read_common(
    text: str,
    build: Callable[..., sympy.Basic],
    python_and: Callable[..., sympy.Basic],
    python_or: Callable[..., sympy.Basic],
) -> sympy.Basic | None:
    """``text`` read as :func:`shapecore.parse` reads it, or None where that reader must.

    ``build(constructor, *args)`` builds every node the general reader builds through its own
    ``build`` (noting divisors, leaving undecidable relations unevaluated); ``python_and`` and
    ``python_or`` are its constructors of Python's ``and``/``or``.
    """
    tokens = _tokens(text)
    if tokens is None:
        return None
    try:
        return _Climber(tokens, build, python_and, python_or).whole()
    except _BUILD_ERRORS:
        return None


def _tokens(text: str) -> list[str | int] | None:
    """The tokens of ``text`` (an integer as an ``int``), or None if it has one outside the grammar."""
    if _TOKENS_ONLY.fullmatch(text) is None:
        return None
    tokens = _TOKENS.findall(text)
    if len(tokens) > MOST_TOKENS:
        return None
    return [int(token) if token[0].isdigit() else token for token in tokens]


class _Climber:
    """Python's precedence climbed (a Pratt parser), on parts ``(value, kind, top)``.

    ``value`` is built as the general reader builds it; ``kind`` is :data:`_INT` or
    :data:`_BOOL`, what the value is (the general reader checks that on the value itself);
    ``top`` is the operator of the run (``+``, ``*``, ``&``, ``|``) the value is, parenthesized
    or not, else None. The general reader builds a run at once down the left of Python's tree,
    where parentheses leave no trace (``(a + b) + c`` is one sum there): a run continued by
    its own operator after parentheses is left to it.
    """

    def __init__(
        self,
        tokens: list,
        build: Callable[..., sympy.Basic],
        python_and: Callable[..., sympy.Basic],
        python_or: Callable[..., sympy.Basic],
    ) -> None:
        self.tokens = [*tokens, None]  # None ends the text
        self.at = 0
        self.nested = 0
        self.build = build
        self.connectives = {1: (python_or, sympy.true), 2: (python_and, sympy.false)}

    def whole(self) -> sympy.Basic:
        value = self.expression(1)[0]
        if self.tokens[self.at] is not None:
            raise _Unsupported
        return value

    def expression(self, least: int) -> _Part:
        """The longest expression here whose binary operators bind at least ``least``."""
        part = self.prefix(least)
        tokens = self.tokens
        while True:
            power = _POWER.get(tokens[self.at])  # type: ignore[arg-type]
            if power is None or power < least:
                return part
            if power <= 2:
                part = self.connective(power, part)
            elif power == _COMPARISON:
                part = self.comparison(part)
            elif power == _PRODUCT:
                part = self.product(part)
            else:
                part = self.run(power, part)

    def connective(self, power: int, first: _Part) -> _Part:
        """``a or b or …`` (power 1) or ``a and b and …`` (2): one Python ``or``/``and``."""
        connective, decisive = self.connectives[power]
        word = self.tokens[self.at]
        parts = [first]
        while self.tokens[self.at] == word:
            self.at += 1
            parts.append(self.expression(power + 1))
        for value, kind, _ in parts:
            if kind is not _BOOL or value is decisive:  # after one that decides, the rest is read for errors only
                raise _Unsupported
        return self.build(connective, *(value for value, _, _ in parts)), _BOOL, None

    def comparison(self, left: _Part) -> _Part:
        relation = _COMPARE[self.tokens[self.at]]  # type: ignore[index]
        self.at += 1
        right = self.expression(_COMPARISON + 1)
        if left[1] is not _INT or right[1] is not _INT or self.tokens[self.at] in _COMPARE:  # a < b < c: and of two
            raise _Unsupported
        return self.build(relation, left[0], right[0]), _BOOL, None

    def run(self, power: int, first: _Part) -> _Part:
        """``a | b | …``, ``a & b & …`` or ``a + b - …``, built at once."""
        operator, constructor = _RUNS[power]
        want = _INT if operator == "+" else _BOOL
        if first[2] == operator or first[1] is not want:
            raise _Unsupported
        operands = [first[0]]
        while (token := self.tokens[self.at]) == operator or token == "-" and operator == "+":
            self.at += 1
            right, kind, _ = self.expression(power + 1)
            if kind is not want:
                raise _Unsupported
            operands.append(self.build(sympy.Mul, sympy.S.NegativeOne, right) if token == "-" else right)
        return self.build(constructor, *operands), want, operator

    def product(self, first: _Part) -> _Part:
        """``*``, ``//`` and ``%``, left to right; each run of ``*`` is one product."""
        value, kind, top = first
        if kind is not _INT or top == "*" and self.tokens[self.at] == "*":
            raise _Unsupported
        factors = None  # the run of ``*`` being read
        while (token := self.tokens[self.at]) in ("*", "//", "%"):
            self.at += 1
            right, right_kind, _ = self.prefix(_UNARY)
            if right_kind is not _INT:
                raise _Unsupported
            if token == "*":
                factors = [value, right] if factors is None else [*factors, right]
                continue
            if factors is not None:
                value, factors = self.build(F.mul, *factors), None
            value = self.build(F.FloorDiv if token == "//" else F.Mod, value, right)
        if factors is not None:
            return self.build(F.mul, *factors), _INT, "*"
        return value, _INT, None

    def prefix(self, least: int) -> _Part:
        """An operand: a literal, a name, a call, a parenthesized expression, or a unary
        operator's (``not`` only where operators binding at least ``least`` may follow it)."""
        token = self.tokens[self.at]
        self.at += 1
        if type(token) is int:
            return sympy.Integer(token), _INT, None
        if token == "(":
            part = self.nest(self.expression, 1)
            if self.tokens[self.at] != ")":
                raise _Unsupported
            self.at += 1
            return part
        if token in ("-", "+", "~"):
            value, kind, _ = self.prefix(_UNARY)
            if kind is not (_BOOL if token == "~" else _INT):
                raise _Unsupported
            if token == "+":
                return value, _INT, None
            if token == "-":
                return self.build(sympy.Mul, sympy.S.NegativeOne, value), _INT, None
            return self.build(sympy.Not, value), _BOOL, None
        if token == "not" and least <= _NOT:
            value, kind, _ = self.expression(_NOT)
            if kind is not _BOOL:
                raise _Unsupported
            return self.build(sympy.Not, value), _BOOL, None
        if token is None or not (token[0].isalpha() or token[0] == "_"):  # type: ignore[index]
            raise _Unsupported
        if self.tokens[self.at] == "(":
            return self.call(token)  # type: ignore[arg-type]
        if token in CALL_NAMES or keyword.iskeyword(token) or F.FLOAT_SYMBOL_NAME.fullmatch(token):  # type: ignore[arg-type]
            raise _Unsupported  # a function not called, a keyword, a float symbol
        return F.int_symbol(token), _INT, None

    def call(self, name: str) -> _Part:
        operation = _CALLS.get(name)
        if operation is None:
            raise _Unsupported
        self.at += 1  # the parenthesis
        want = _BOOL if operation.kind is Kind.CONNECTIVE else _INT
        args = []
        while True:
            value, kind, _ = self.nest(self.expression, 1)
            if kind is not want:
                raise _Unsupported
            args.append(value)
            token = self.tokens[self.at]
            self.at += 1
            if token == ")":
                break
            if token != ",":
                raise _Unsupported
        if operation.arity is not None and len(args) != operation.arity:
            raise _Unsupported
        return self.build(operation.cls, *args), (_INT if operation.kind is Kind.INTEGER else _BOOL), None

    def nest(self, read: Callable[[int], _Part], least: int) -> _Part:
        """``read(least)`` one level deeper inside parentheses."""
        self.nested += 1
        if self.nested > _MOST_NESTED:
            raise _Unsupported
        part = read(least)
        self.nested -= 1
        return part
