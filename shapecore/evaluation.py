"""Exact evaluation of expressions and claims under an assignment of integers to symbols.

``evaluate(expr, values)`` computes each operation as :mod:`shapecore.operations` defines it,
with Python ints (``Fraction`` for rational coefficients, ``float`` inside float-valued
functions), so its result is the ground truth every analyzer is tested against. ``And``/``Or``/
``Not`` are strict: every argument is evaluated, and a zero divisor anywhere raises
``ZeroDivisionError`` (a float overflow, ``OverflowError``: both are Python's
``ArithmeticError``); Python's ``and``/``or`` (:class:`~shapecore.functions.PythonAnd`,
:class:`~shapecore.functions.PythonOr`) stop at the first part that decides, as in Python.
:func:`holds` is the predicate the reasoner's contract is stated in: a claim *holds* under an
assignment when it evaluates to ``True`` without error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

from shapecore.errors import ArgumentError, UnboundSymbolError
from shapecore.operations import BY_CLASS, Kind

__all__ = ["evaluate", "extend_assignment", "holds", "Value"]

Value = int | Fraction | float | bool


def _normalize(value: Value) -> Value:
    if type(value) is Fraction and value.denominator == 1:
        return int(value)
    return value


Evaluator = Callable[[Mapping[str, Value]], Value]


def _constant(value: Value) -> Evaluator:
    return lambda values: value


def _lookup(name: str) -> Evaluator:
    def symbol(values: Mapping[str, Value]) -> Value:
        try:
            return values[name]
        except KeyError:
            raise UnboundSymbolError(name) from None

    return symbol


@functools.lru_cache(maxsize=1 << 15)
def _compile(expr: sympy.Basic) -> Evaluator:
    """A closure computing ``expr`` from an assignment; built once per expression (cached)."""
    if not isinstance(expr, sympy.Basic):
        raise ArgumentError(f"expected a sympy expression (shapecore.parse reads guard text), got {expr!r}")
    if expr.is_Symbol:
        return _lookup(expr.name)
    if expr.is_Integer:
        return _constant(int(expr))
    if expr.is_Rational:
        return _constant(Fraction(int(expr.p), int(expr.q)))
    if expr.is_Float:
        return _constant(float(expr))
    if expr is sympy.true or expr is sympy.false:
        return _constant(expr is sympy.true)
    operation = BY_CLASS.get(type(expr))
    if operation is None:
        raise TypeError(f"cannot evaluate {type(expr).__name__} in {expr}: not in shapecore's vocabulary")
    op = operation.python
    parts = tuple(_compile(arg) for arg in expr.args)
    if operation.kind is Kind.SHORT_CIRCUIT:  # the parts go unevaluated: Python evaluates only what it reaches
        return lambda values: op(*(functools.partial(part, values) for part in parts))
    if len(parts) == 1:
        (a,) = parts
        return lambda values: _normalize(op(a(values)))
    if len(parts) == 2:
        a, b = parts
        return lambda values: _normalize(op(a(values), b(values)))
    return lambda values: _normalize(op(*[p(values) for p in parts]))


def evaluate(expr: sympy.Basic, values: Mapping[str, Value]) -> Value:
    """The value of ``expr`` with each symbol replaced by ``values[name]``, in Python semantics.

    Raises ``ZeroDivisionError`` for a zero divisor and :class:`UnboundSymbolError` for a
    symbol that ``values`` does not assign.
    """
    return _compile(expr)(values)


def extend_assignment(values: Mapping[str, Value], replacements: Mapping[sympy.Symbol, sympy.Basic]) -> dict[str, Value]:
    """``values`` plus the value of each replaced symbol it leaves unassigned whose replacement it
    binds: ``{"s0": 3}`` under ``s1 := 2*s0`` gives ``{"s0": 3, "s1": 6}``.

    A symbol ``values`` assigns keeps its value; a replacement over a symbol ``values`` does not
    assign is skipped. Raises ``ZeroDivisionError`` where a replacement divides by zero.
    """
    extended = dict(values)
    for symbol, expression in replacements.items():
        if symbol.name not in extended and all(s.name in extended for s in expression.free_symbols):
            extended[symbol.name] = evaluate(expression, extended)
    return extended


def holds(claim: sympy.Basic, values: Mapping[str, Value]) -> bool:
    """Whether ``claim`` evaluates to True under ``values`` (a zero divisor, or a float
    overflow, means it does not)."""
    try:
        return _compile(claim)(values) is True
    except ArithmeticError:
        return False
