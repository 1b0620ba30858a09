"""Ground truth for differential tests: guard text evaluated by Python itself, and small boxes.

Nothing here uses shapecore. Text in torch's syntax or Python's is read with Python's ``ast``
and run by Python on plain ``int`` values, with shapecore's vocabulary defined directly from
its documented semantics (``shapecore/functions.py``), which are Python's:

* ``+ - * ** // %`` and comparisons are Python's; ``/`` by an integer literal is exact
  rational division (``Fraction``), as shapecore documents for sympy's printed ``s0/8``;
* ``FloorDiv``/``CleanDiv`` ``a // b``, ``CeilDiv`` ``-((-a) // b)``, ``Mod``/``PythonMod``
  ``a % b``, ``ModularIndexing`` ``(a // b) % c``, ``Max``/``Min`` ``max``/``min`` (a float when any
  operand is one, as ``torch.sym_max``; lowercase ``max``/``min`` are Python's own),
  ``PowByNatural`` ``a ** b``, ``Eq`` … ``Ge`` the comparisons;
* ``And``/``Or``/``Not`` and ``& | ~`` are strict (every argument is evaluated; ``~`` is
  logical negation, as torch prints sympy's ``Not``); Python's own ``and``/``or``/``not`` and
  chained comparisons keep Python's short circuit;
* a zero divisor raises ``ZeroDivisionError``. A claim *holds* at a point when it evaluates to
  ``True`` without raising; a fact that raises at a point excludes the point.
"""

from __future__ import annotations

import ast
import functools
import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Box", "Formula", "OracleError", "formula", "holds", "satisfying", "value_at", "zero_divisor"]


class OracleError(Exception):
    """Text outside the vocabulary the oracle knows, or ill-typed (an int where a bool belongs)."""


def _int(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, Fraction, float)):
        raise OracleError(f"expected a number, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise OracleError(f"expected a condition, got {value!r}")
    return value


def _relation(compare):
    return lambda a, b: compare(_int(a), _int(b))


def _floordiv(a: object, b: object) -> object:
    return _int(a) // _int(b)


def _mod(a: object, b: object) -> object:
    return _int(a) % _int(b)


def _promoting(pick, values):
    """``pick(values)``, a float when any value is one."""
    result = pick(values)
    return float(result) if any(isinstance(v, float) for v in values) else result


_FUNCTIONS = {
    "Eq": _relation(operator.eq),
    "Ne": _relation(operator.ne),
    "Lt": _relation(operator.lt),
    "Le": _relation(operator.le),
    "Gt": _relation(operator.gt),
    "Ge": _relation(operator.ge),
    "And": lambda *xs: all([_bool(x) for x in xs]),
    "Or": lambda *xs: any([_bool(x) for x in xs]),
    "Not": lambda x: not _bool(x),
    "FloorDiv": _floordiv,
    "CleanDiv": _floordiv,
    "CeilDiv": lambda a, b: -(-_int(a) // _int(b)),
    "Mod": _mod,
    "PythonMod": _mod,
    "ModularIndexing": lambda a, b, c: (_int(a) // _int(b)) % _int(c),
    "Max": lambda *xs: _promoting(max, [_int(x) for x in xs]),  # torch.sym_max's rule
    "Min": lambda *xs: _promoting(min, [_int(x) for x in xs]),
    "max": lambda *xs: max(_int(x) for x in xs),
    "min": lambda *xs: min(_int(x) for x in xs),
    "PowByNatural": lambda a, b: _int(a) ** _int(b),
}
_DIVIDING = frozenset({"FloorDiv", "CleanDiv", "CeilDiv", "Mod", "PythonMod", "ModularIndexing"})
_HELPERS = {f"__oracle_{name}": fn for name, fn in _FUNCTIONS.items()}
_HELPERS["__oracle_Fraction"] = Fraction
_NAMESPACE = {"__builtins__": {}, **_HELPERS}


class _Rewrite(ast.NodeTransformer):
    """Vocabulary calls to the helpers above, ``~`` to ``Not``, ``/ k`` to ``Fraction``."""

    def __init__(self) -> None:
        self.symbols: set[str] = set()
        self.divisors: list[str] = []

    def _call(self, name: str, args: list[ast.AST], node: ast.AST) -> ast.AST:
        return ast.copy_location(ast.Call(ast.Name(f"__oracle_{name}", ast.Load()), args, []), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in ("True", "False"):
            return ast.copy_location(ast.Constant(node.id == "True"), node)
        if node.id in _FUNCTIONS or node.id.startswith("__"):
            raise OracleError(f"{node.id} is not a symbol")
        self.symbols.add(node.id)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords:
            raise OracleError(f"unknown call {ast.unparse(node)}")
        self.divisors += [ast.unparse(a) for a in node.args[1:] if node.func.id in _DIVIDING]
        return self._call(node.func.id, [self.visit(a) for a in node.args], node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        operand = self.visit(node.operand)
        if isinstance(node.op, ast.Invert):
            return self._call("Not", [operand], node)
        return ast.copy_location(ast.UnaryOp(node.op, operand), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)):
            self.divisors.append(ast.unparse(node.right))
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Div):
            literal = right.value if isinstance(right, ast.Constant) else None
            if not (isinstance(literal, int) and not isinstance(literal, bool)):
                raise OracleError(f"/ by a non-literal: {ast.unparse(node)}")
            right = self._call("Fraction", [ast.Constant(1), right], node)
            return ast.copy_location(ast.BinOp(left, ast.Mult(), right), node)
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow, ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr)):
            raise OracleError(f"unsupported operator in {ast.unparse(node)}")
        return ast.copy_location(ast.BinOp(left, node.op, right), node)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        allowed = (ast.Expression, ast.Constant, ast.BoolOp, ast.Compare, ast.cmpop, ast.boolop, ast.unaryop,
                   ast.Load, ast.expr_context)
        if not isinstance(node, allowed):
            raise OracleError(f"unsupported syntax {type(node).__name__}")
        return super().generic_visit(node)


@dataclass(frozen=True, eq=False)
class Formula:
    """Compiled guard text: call it with ``{name: int}`` to get its Python value."""

    text: str
    symbols: frozenset[str]
    divisors: tuple[str, ...]  # the text of every divisor in it
    code: object

    def __call__(self, point: Mapping[str, int]) -> object:
        return eval(self.code, _NAMESPACE, point)  # noqa: S307 - our own AST, builtins removed


@functools.lru_cache(maxsize=1 << 14)
def formula(text: str) -> Formula:
    """``text`` compiled by the oracle (cached); raises :class:`OracleError` outside the vocabulary."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise OracleError(f"not Python syntax: {text!r}") from exc
    rewrite = _Rewrite()
    tree = ast.fix_missing_locations(rewrite.visit(tree))
    return Formula(text, frozenset(rewrite.symbols), tuple(rewrite.divisors), compile(tree, "<oracle>", "eval"))


def holds(claim: Formula, point: Mapping[str, int]) -> bool:
    """Whether ``claim`` evaluates to ``True`` at ``point`` (a zero divisor means it does not)."""
    try:
        return claim(point) is True
    except ZeroDivisionError:
        return False


def value_at(expr: Formula, point: Mapping[str, int]) -> object:
    """``expr``'s value at ``point``, or ``ZeroDivisionError`` (the class) where it is undefined."""
    try:
        return expr(point)
    except ZeroDivisionError:
        return ZeroDivisionError


@dataclass(frozen=True)
class Box:
    """Each symbol ranging over a small closed interval: ``((name, lo, hi), ...)``."""

    intervals: tuple[tuple[str, int, int], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.intervals)

    def points(self) -> Iterator[dict[str, int]]:
        axes = [range(lo, hi + 1) for _, lo, hi in self.intervals]
        for values in itertools.product(*axes):
            yield dict(zip(self.names, values))

    def range_facts(self) -> tuple[str, ...]:
        return tuple(f for name, lo, hi in self.intervals for f in (f"{name} >= {lo}", f"{name} <= {hi}"))


_PROBES = (-7, -2, -1, 0, 1, 2, 3, 5, 12)


def zero_divisor(text: str) -> str | None:
    """A divisor in ``text`` that is zero (or undefined) for every value of its symbols, if any.

    Probed on a grid; such a divisor (``0``, ``y - y``, ``0*x``) makes ``text`` undefined
    everywhere, so refusing it outright is a fair answer.
    """
    for divisor in formula(text).divisors:
        d = formula(divisor)
        names = sorted(d.symbols)
        grid = (dict(zip(names, values)) for values in itertools.product(_PROBES, repeat=len(names)))
        if all(value_at(d, p) in (0, ZeroDivisionError) for p in grid):
            return divisor
    return None


def satisfying(facts: Sequence[Formula], box: Box) -> Iterator[dict[str, int]]:
    """Every point of ``box`` at which every fact holds."""
    for point in box.points():
        if all(holds(f, point) for f in facts):
            yield point
