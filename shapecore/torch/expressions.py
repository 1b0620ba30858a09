"""Expressions across the bridge: torch's sympy to shapecore's and back, rebuilt node by node.

Never through text:

* torch's ``FloorDiv CleanDiv CeilDiv Mod PythonMod ModularIndexing Max Min ToFloat IntTrueDiv
  FloatTrueDiv TruncToInt FloorToInt CeilToInt RoundToInt TruncToFloat FloatPow`` map to the shapecore
  classes of the same name; ``PowByNatural`` maps to ``Pow``, ``Identity(x)`` to ``x``; sympy's
  ``Add Mul Pow Mod Max Min``, numbers, relations and ``And Or Not`` map to themselves.
  Values are preserved wherever torch defines them (torch's ``Mod`` is defined only for a
  nonnegative dividend and positive divisor, where it equals Python's ``%``). sympy's ``Add``,
  ``Mul`` and ``Pow`` with a float operand become shapecore's ``FloatAdd``, ``FloatMul`` and
  ``FloatPow`` (Python's float operations, one at a time, in the order of the arguments), and
  back (``FloatPow`` to torch's, whose ``float(base) ** float(exp)`` it equals on its float
  arguments).
* Symbols keep their names: an integer symbol becomes ``int_symbol(name)``, torch's float
  symbols ``zf*``/``zuf*`` become ``float_symbol(name)``.
* Anything else (``Where``, ``LShift``, ``OpaqueUnaryFn_*``, ``int_oo`` …) is
  rejected with :class:`UnmappableExpressionError`, naming the class and the expression.

:func:`size_expr` reads a traced size (an int or a ``SymInt``) as a shapecore expression;
:func:`to_symint` evaluates a shapecore expression on SymInts, so tracing records it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import sympy

from shapecore import functions as F
from shapecore.errors import ShapecoreError

if TYPE_CHECKING:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

__all__ = ["UnmappableExpressionError", "map_expr", "to_torch", "torch_symbols", "size_expr", "to_symint"]


class UnmappableExpressionError(ShapecoreError, TypeError):
    """An expression node with no counterpart on the other side of the bridge."""

    def __init__(self, node: sympy.Basic, expr: sympy.Basic, direction: str, reason: str | None = None) -> None:
        self.node_class = type(node).__name__
        self.expr = expr
        side = "torch's" if direction == "to torch" else "shapecore's"
        reason = reason or f"{side} vocabulary has no {self.node_class}"
        super().__init__(
            f"cannot map {self.node_class} ({node}) in {expr} {direction}: {reason}; rewrite the model so "
            "the shape does not need it, or drop this guard"
        )


class _NotExactInTorch(Exception):
    """Raised while rebuilding for torch: the node would not keep its value there (the reason)."""


# -- torch -> shapecore -------------------------------------------------------------------------

_RELATIONS: dict[type, Callable[..., sympy.Basic]] = {
    sympy.Equality: sympy.Eq,
    sympy.Unequality: sympy.Ne,
    sympy.StrictLessThan: sympy.Lt,
    sympy.LessThan: sympy.Le,
    sympy.StrictGreaterThan: sympy.Gt,
    sympy.GreaterThan: sympy.Ge,
}

_SAME_ON_BOTH_SIDES: dict[type, Callable[..., sympy.Basic]] = {
    sympy.Add: sympy.Add,
    sympy.Mul: sympy.Mul,
    sympy.Pow: sympy.Pow,
    sympy.And: sympy.And,
    sympy.Or: sympy.Or,
    sympy.Not: sympy.Not,
    **_RELATIONS,
}


def _identity(x: sympy.Basic) -> sympy.Basic:
    return x


@functools.cache
def _from_torch_table() -> dict[type, Callable[..., sympy.Basic]]:
    from shapecore.torch.private import sympy_functions as T

    table: dict[type, Callable[..., sympy.Basic]] = dict(_SAME_ON_BOTH_SIDES)
    # float arithmetic becomes Python's, one operation at a time (exact arithmetic stays sympy's)
    table.update({sympy.Add: F.add, sympy.Mul: F.mul, sympy.Pow: F.power})
    table.update({sympy.Mod: F.Mod, sympy.Max: F.Max, sympy.Min: F.Min})
    table.update(
        {
            T.FloorDiv: F.FloorDiv,
            T.CleanDiv: F.CleanDiv,
            T.CeilDiv: F.CeilDiv,
            T.Mod: F.Mod,
            T.PythonMod: F.PythonMod,
            T.ModularIndexing: F.ModularIndexing,
            T.Max: F.Max,
            T.Min: F.Min,
            T.PowByNatural: sympy.Pow,
            T.Identity: _identity,
            T.ToFloat: F.ToFloat,
            T.IntTrueDiv: F.IntTrueDiv,
            T.FloatTrueDiv: F.FloatTrueDiv,
            T.TruncToInt: F.TruncToInt,
            T.FloorToInt: F.FloorToInt,
            T.CeilToInt: F.CeilToInt,
            T.RoundToInt: F.RoundToInt,
            T.TruncToFloat: F.TruncToFloat,
            T.FloatPow: F.FloatPow,
        }
    )
    return table


def _map_atom(node: sympy.Basic, root: sympy.Basic) -> sympy.Basic:
    if isinstance(node, sympy.Symbol):
        if node.is_integer:
            return F.int_symbol(node.name)
        if F.FLOAT_SYMBOL_NAME.fullmatch(node.name):  # torch's unbacked floats carry no assumptions
            return F.float_symbol(node.name)
        raise UnmappableExpressionError(node, root, "from torch (a symbol neither integer nor named zf<n>/zuf<n>)")
    if isinstance(node, sympy.Float) and node.is_finite:  # torch's floats are doubles; compared exactly here
        return F.float_number(float(node))
    if isinstance(node, (sympy.Integer, sympy.Rational)):
        return node
    if node is sympy.true or node is sympy.false:
        return node
    raise UnmappableExpressionError(node, root, "from torch")


def _printed_args(node: sympy.Basic) -> tuple[sympy.Basic, ...]:
    """``node``'s arguments in the order it prints them, which Python evaluates a float sum in."""
    if isinstance(node, sympy.Add):
        return tuple(node.as_ordered_terms())
    if isinstance(node, sympy.Mul):
        return tuple(node.as_ordered_factors())
    return node.args


def _rebuild(expr: sympy.Basic, table: Mapping[type, Callable[..., sympy.Basic]],
             leaf: Callable[[sympy.Basic, sympy.Basic], sympy.Basic], direction: str) -> sympy.Basic:
    """``expr`` rebuilt bottom-up: each node through ``table[type(node)]``, atoms through ``leaf``."""
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(node: sympy.Basic) -> sympy.Basic:
        if node in memo:
            return memo[node]
        if not node.args:
            result = leaf(node, expr)
        else:
            build = table.get(type(node))
            if build is None:
                raise UnmappableExpressionError(node, expr, direction)
            try:
                result = build(*(visit(a) for a in _printed_args(node)))
            except _NotExactInTorch as refused:
                raise UnmappableExpressionError(node, expr, direction, str(refused)) from None
        memo[node] = result
        return result

    return visit(expr)


def map_expr(expr: sympy.Basic) -> sympy.Basic:
    """torch's expression ``expr`` (from ``torch.utils._sympy``) as a shapecore expression.

    Raises :class:`UnmappableExpressionError` for a node class shapecore has no counterpart for.
    """
    return _rebuild(expr, _from_torch_table(), _map_atom, "from torch")


def size_expr(size: int | Any) -> sympy.Basic:
    """A traced size (an int or a ``SymInt``) as a shapecore expression, through its ShapeEnv's
    replacements as torch reads it (``s1`` is ``8*s0`` once torch knows they are equal)."""
    if isinstance(size, int):
        return sympy.Integer(size)
    return map_expr(size.node.expr)


# -- shapecore -> torch -------------------------------------------------------------------------

_SIZE_NAME = re.compile(r"s\d+")


def _torch_symbol(name: str, known: Mapping[str, sympy.Symbol] | None) -> sympy.Symbol:
    if known is not None:
        try:
            return known[name]
        except KeyError:
            raise KeyError(
                f"symbol {name} is not in the torch ShapeEnv; it has: {', '.join(sorted(known)) or 'none'}"
            ) from None
    if F.FLOAT_SYMBOL_NAME.fullmatch(name):
        return sympy.Symbol(name, real=True)
    if _SIZE_NAME.fullmatch(name):
        return sympy.Symbol(name, integer=True, positive=True)
    return sympy.Symbol(name, integer=True)


@functools.cache
def _to_torch_table() -> dict[type, Callable[..., sympy.Basic]]:
    from shapecore.torch.private import sympy_functions as T

    def mod(p: sympy.Basic, q: sympy.Basic) -> sympy.Basic:
        # torch's Mod claims a nonnegative result: true of Python's % when the divisor is.
        return T.Mod(p, q) if q.is_nonnegative else T.PythonMod(p, q)

    def unmerged(division: type) -> Callable[[sympy.Basic, sympy.Basic], sympy.Basic]:
        # torch's FloorDiv rules (CleanDiv's too: a FloorDiv that divides exactly) assume a positive
        # divisor: (x // y) // b becomes x // (y*b), a common factor (-1 too) cancels, so a // of a //
        # by a b that may be negative would not keep its value
        def convert(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
            if not b.is_nonnegative and a.has(T.FloorDiv):
                raise _NotExactInTorch(f"torch's {division.__name__} assumes a positive divisor, and {b} may be "
                                       f"negative while {a} holds a FloorDiv that torch would merge with it")
            return division(a, b)
        return convert

    floor_div = unmerged(T.FloorDiv)

    def ceil_div(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
        # torch's CeilDiv rewrites itself to FloorDiv(a + b - 1, b), exact only for b > 0: that form
        # where b > 0, else -FloorDiv(-a, b). The latter's FloorDiv is negative-valued, and torch's
        # rules, made for positive divisors, misread it as one: (a // b) // c becomes a // (b*c),
        # so CeilDiv(s0, 2) // CeilDiv(s0, 3) in that form read 0 at s0 = 1 instead of 1.
        return T.FloorDiv(a + b - 1, b) if b.is_positive else -floor_div(-a, b)

    table: dict[type, Callable[..., sympy.Basic]] = dict(_SAME_ON_BOTH_SIDES)
    table.update(
        {
            F.FloorDiv: floor_div,
            F.CleanDiv: unmerged(T.CleanDiv),
            F.CeilDiv: ceil_div,
            F.Mod: mod,
            F.PythonMod: T.PythonMod,
            F.ModularIndexing: T.ModularIndexing,
            F.Max: T.Max,
            F.Min: T.Min,
            F.ToFloat: T.ToFloat,
            F.IntTrueDiv: T.IntTrueDiv,
            F.FloatTrueDiv: T.FloatTrueDiv,
            F.TruncToInt: T.TruncToInt,
            F.FloorToInt: T.FloorToInt,
            F.CeilToInt: T.CeilToInt,
            F.RoundToInt: T.RoundToInt,
            F.TruncToFloat: T.TruncToFloat,
            F.FloatAdd: sympy.Add,
            F.FloatMul: sympy.Mul,
            F.FloatPow: T.FloatPow,
        }
    )
    return table


def torch_symbols(shape_env: TorchShapeEnv) -> dict[str, sympy.Symbol]:
    """Every symbol of ``shape_env`` (those with a range, then those with a hint) by name."""
    return {s.name: s for s in [*shape_env.var_to_range, *shape_env.backed_var_to_val]}


def to_torch(
    expr: sympy.Basic,
    shape_env: TorchShapeEnv | None = None,
    *,
    symbols: Mapping[str, sympy.Symbol] | None = None,
) -> sympy.Basic:
    """shapecore's ``expr`` in ``torch.utils._sympy.functions`` classes, for torch to use.

    Symbols: torch's own symbol of that name from ``shape_env`` or ``symbols`` (name → torch
    symbol; a name missing from them raises ``KeyError``); when neither is given, ``s<n>`` is
    ``Symbol(name, integer=True, positive=True)`` (torch's backed sizes), ``zf*``/``zuf*`` are
    real and every other name is integer only.
    ``Mod`` becomes torch's ``Mod`` when its divisor is nonnegative under those assumptions (then
    Python's ``%`` is nonnegative, as torch's ``Mod`` claims) and ``PythonMod`` otherwise;
    ``CeilDiv(a, b)`` becomes ``FloorDiv(a + b - 1, b)`` where ``b`` is positive under those
    assumptions, else ``-FloorDiv(-a, b)``; ``Pow`` stays sympy's. Values are preserved where the
    symbols are what torch assumes. A ``//`` (``FloorDiv`` or ``CleanDiv``) of an expression
    holding a ``//``, by a divisor not nonnegative under those assumptions, raises
    :class:`UnmappableExpressionError`: torch's rules, made for positive divisors, would make
    ``(s1 // 2) // (s0 - 5)`` into ``s1 // (2*s0 - 10)`` (-2, not -1, at ``s0 = 2, s1 = 7``).
    torch simplifies as it builds, under its symbols' assumptions: a divisor that folds to zero
    there (``s0 // (0 // s0)``) raises ``ZeroDivisionError``.
    """
    known: dict[str, sympy.Symbol] | None = None
    if shape_env is not None or symbols is not None:
        known = torch_symbols(shape_env) if shape_env is not None else {}
        known.update(symbols or {})

    def leaf(node: sympy.Basic, root: sympy.Basic) -> sympy.Basic:
        if isinstance(node, sympy.Symbol):
            return _torch_symbol(node.name, known)
        if isinstance(node, F.PythonFloat):
            return sympy.Float(float(node))  # torch's own Float class
        if isinstance(node, (sympy.Number, sympy.logic.boolalg.BooleanAtom)):
            return node
        raise UnmappableExpressionError(node, root, "to torch")

    return _rebuild(expr, _to_torch_table(), leaf, "to torch")


def to_symint(expr: sympy.Basic, values: Mapping[str, Any]) -> int | Any:
    """shapecore's ``expr`` evaluated with Python semantics at ``values`` (symbol name -> int or
    SymInt): an int for a constant, else the SymInt whose operations tracing records."""
    from shapecore.torch.private import evaluate_on_symints

    if expr.is_Integer:
        return int(expr)
    return evaluate_on_symints(to_torch(expr), {sympy.Symbol(name, integer=True): v for name, v in values.items()})
