"""Reading guard text: PyTorch's printed syntax and plain Python, into shapecore expressions.

Accepted, and mixable in one expression:

* torch's syntax as ``str()`` prints it: ``Eq(Mod(s0, 8), 0)``, ``s77 >= ((s77//3))``,
  ``Ne(s0 - ((s0//3)), 1)``, ``(s0 > 2) & (s1 < 3)``, ``~(s0 > 2)``, ``3*s0/4``;
* Python: ``s0 % 8 == 0``, ``a < b and b < c``, ``2 <= k <= 512``, ``not x``, ``max(a, b)``.

``//`` is :class:`FloorDiv`, ``%`` is :class:`Mod` (Python semantics both), ``/`` by a nonzero
integer literal is exact rational division (as sympy prints ``s0/8``) and any other ``/`` is
:class:`IntTrueDiv`. Every name is an integer symbol. Errors are :class:`ParseError` with the
1-based line and column of the offending token.

Every name is an integer symbol, except torch's float symbols ``zf<n>``/``zuf<n>``, which are real.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable

import sympy
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from shapecore import functions as F
from shapecore.errors import ParseError

__all__ = ["parse", "FUNCTIONS"]

FUNCTIONS: dict[str, Callable[..., sympy.Basic]] = {
    "Eq": sympy.Eq,
    "Ne": sympy.Ne,
    "Lt": sympy.Lt,
    "Le": sympy.Le,
    "Gt": sympy.Gt,
    "Ge": sympy.Ge,
    "And": sympy.And,
    "Or": sympy.Or,
    "Not": sympy.Not,
    "Mod": F.Mod,
    "PythonMod": F.PythonMod,
    "FloorDiv": F.FloorDiv,
    "CleanDiv": F.CleanDiv,
    "CeilDiv": F.CeilDiv,
    "ModularIndexing": F.ModularIndexing,
    "Max": F.Max,
    "Min": F.Min,
    "max": F.Max,
    "min": F.Min,
    "PowByNatural": sympy.Pow,
    "ToFloat": F.ToFloat,
    "IntTrueDiv": F.IntTrueDiv,
    "FloatTrueDiv": F.FloatTrueDiv,
    "TruncToInt": F.TruncToInt,
    "FloorToInt": F.FloorToInt,
    "CeilToInt": F.CeilToInt,
    "RoundToInt": F.RoundToInt,
    "TruncToFloat": F.TruncToFloat,
}
"""Function names the parser accepts, mapped to their constructors."""

_CONNECTIVES = frozenset({"And", "Or", "Not"})
_ARITY = {name: 2 for name in ("Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Mod", "PythonMod", "FloorDiv", "CleanDiv",
                               "CeilDiv", "PowByNatural", "IntTrueDiv", "FloatTrueDiv")}
_ARITY.update({"ModularIndexing": 3, "Not": 1, "ToFloat": 1, "TruncToInt": 1, "FloorToInt": 1, "CeilToInt": 1,
               "RoundToInt": 1, "TruncToFloat": 1})

_COMPARE: dict[type, Callable[[sympy.Basic, sympy.Basic], sympy.Basic]] = {
    ast.Eq: sympy.Eq,
    ast.NotEq: sympy.Ne,
    ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le,
    ast.Gt: sympy.Gt,
    ast.GtE: sympy.Ge,
}

_TOKEN = re.compile(r"\w+|\S")


def _is_bool(expr: sympy.Basic) -> bool:
    return expr.is_Relational or isinstance(expr, (BooleanFunction, BooleanAtom))


class _Reader:
    """Turns one ``ast`` expression into sympy, reporting positions in the caller's text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines() or [""]
        self.source = text.lstrip()
        skipped = text[: len(text) - len(self.source)]
        self.line_shift = skipped.count("\n")
        self.column_shift = len(skipped) - (skipped.rfind("\n") + 1)

    def error(self, message: str, node: ast.AST | None = None, *, line: int = 1, offset: int = 0) -> ParseError:
        if node is not None:
            line, offset = node.lineno, node.col_offset
        # ``offset`` counts UTF-8 bytes of the parsed (left-stripped) text.
        parsed_lines = self.source.splitlines() or [""]
        parsed_line = parsed_lines[line - 1] if 0 < line <= len(parsed_lines) else ""
        column = len(parsed_line.encode()[: max(offset, 0)].decode(errors="ignore")) + 1
        if line == 1:
            column += self.column_shift
        line += self.line_shift
        source_line = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        match = _TOKEN.search(source_line, column - 1)
        token = match.group() if match else ""
        return ParseError(message, text=self.text, line=line, column=column, token=token)

    def read(self, node: ast.AST) -> sympy.Basic:
        try:
            method = getattr(self, f"_read_{type(node).__name__}")
        except AttributeError:
            raise self.error(f"unsupported syntax ({type(node).__name__}) in a guard", node) from None
        try:
            return method(node)
        except ParseError:
            raise
        except ZeroDivisionError as exc:
            raise self.error(f"division by zero: {exc}", node) from None
        except (TypeError, ValueError) as exc:
            raise self.error(f"invalid expression: {exc}", node) from None

    def _read_Expression(self, node: ast.Expression) -> sympy.Basic:
        return self.read(node.body)

    def _read_Constant(self, node: ast.Constant) -> sympy.Basic:
        value = node.value
        if isinstance(value, bool):
            return sympy.true if value else sympy.false
        if isinstance(value, int):
            return sympy.Integer(value)
        if isinstance(value, float):
            return sympy.Float(value)
        raise self.error(f"unsupported literal {value!r}: guards hold integers and booleans", node)

    def _read_Name(self, node: ast.Name) -> sympy.Basic:
        if node.id in FUNCTIONS:
            raise self.error(f"{node.id} is a function: call it, e.g. {node.id}(...)", node)
        return F.symbol_for(node.id)

    def _integer(self, node: ast.AST) -> sympy.Basic:
        value = self.read(node)
        if _is_bool(value):
            raise self.error("expected an integer expression, got a condition", node)
        return value

    def _condition(self, node: ast.AST) -> sympy.Basic:
        value = self.read(node)
        if not _is_bool(value):
            raise self.error(f"expected a condition, got the integer expression {value}", node)
        return value

    def _read_UnaryOp(self, node: ast.UnaryOp) -> sympy.Basic:
        if isinstance(node.op, ast.USub):
            return -self._integer(node.operand)
        if isinstance(node.op, ast.UAdd):
            return self._integer(node.operand)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return sympy.Not(self._condition(node.operand))
        raise self.error(f"unsupported operator {type(node.op).__name__}", node)

    def _read_BinOp(self, node: ast.BinOp) -> sympy.Basic:
        op = node.op
        if isinstance(op, (ast.BitAnd, ast.BitOr)):
            left, right = self._condition(node.left), self._condition(node.right)
            return sympy.And(left, right) if isinstance(op, ast.BitAnd) else sympy.Or(left, right)
        left, right = self._integer(node.left), self._integer(node.right)
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return F.FloorDiv(left, right)
        if isinstance(op, ast.Mod):
            return F.Mod(left, right)
        if isinstance(op, ast.Pow):
            return sympy.Pow(left, right)
        if isinstance(op, ast.Div):
            if isinstance(right, sympy.Integer):
                if right == 0:
                    raise self.error("division by zero", node.right)
                return left * sympy.Rational(1, int(right))
            return F.IntTrueDiv(left, right)
        raise self.error(f"unsupported operator {type(op).__name__} (bitwise operators apply to conditions only)", node)

    def _read_BoolOp(self, node: ast.BoolOp) -> sympy.Basic:
        values = [self._condition(v) for v in node.values]
        return sympy.And(*values) if isinstance(node.op, ast.And) else sympy.Or(*values)

    def _read_Compare(self, node: ast.Compare) -> sympy.Basic:
        operands = [self._integer(node.left)] + [self._integer(c) for c in node.comparators]
        parts = []
        for op, left, right in zip(node.ops, operands, operands[1:]):
            build = _COMPARE.get(type(op))
            if build is None:
                raise self.error(f"unsupported comparison {type(op).__name__}", node)
            parts.append(build(left, right))
        return sympy.And(*parts)

    def _read_Call(self, node: ast.Call) -> sympy.Basic:
        if not isinstance(node.func, ast.Name):
            raise self.error("only named functions can be called in a guard", node)
        build = FUNCTIONS.get(node.func.id)
        if build is None:
            known = ", ".join(sorted(FUNCTIONS))
            raise self.error(f"unknown function {node.func.id!r}; known functions: {known}", node)
        name = node.func.id
        if node.keywords:
            raise self.error(f"{name}() takes no keyword arguments", node.keywords[0].value)
        arity = _ARITY.get(name)
        if arity is not None and len(node.args) != arity:
            raise self.error(f"{name}() takes {arity} argument{'s' * (arity > 1)}, got {len(node.args)}", node)
        if not node.args:
            raise self.error(f"{name}() needs arguments", node)
        read = self._condition if name in _CONNECTIVES else self._integer
        return build(*(read(arg) for arg in node.args))


@functools.lru_cache(maxsize=1 << 16)
def parse(text: str) -> sympy.Basic:
    """Read one expression or guard from ``text`` (torch's syntax or Python's).

    >>> parse("Eq(Mod(s0, 8), 0)")
    Eq(Mod(s0, 8), 0)
    >>> parse("s0 % 8 == 0 and s0 >= 16")
    Eq(Mod(s0, 8), 0) & (s0 >= 16)
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() takes guard text, got {type(text).__name__}")
    reader = _Reader(text)
    if not text.strip():
        raise reader.error("empty expression: expected a guard such as Eq(Mod(s0, 8), 0)")
    try:
        tree = ast.parse(reader.source, mode="eval")
    except SyntaxError as exc:
        raise reader.error(f"syntax error: {exc.msg}", line=exc.lineno or 1, offset=(exc.offset or 1) - 1) from None
    if isinstance(tree.body, ast.Tuple):
        raise reader.error("expected one expression, got several separated by commas", tree.body)
    return reader.read(tree)
