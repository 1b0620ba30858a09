"""The registry of shapecore's operations: each one named once, with its Python semantics.

Every node class an expression or claim may hold is an :class:`Operation` in
:data:`OPERATIONS`: its class, its meaning on Python values (the ground truth
:func:`shapecore.evaluate` computes with), its arity, the names :func:`shapecore.parse`
accepts for a call, which arguments are divisors, and how the reasoner treats it (:class:`Kind`).
Parsing, evaluation and rewriting read their tables from here; printing, z3, ranges, modular
analysis and the torch bridge are checked against it (``tests/shapecore/test_operations.py``:
every layer covers every operation, and names none that is not registered).

Adding an operation: define its class in :mod:`shapecore.functions`, register it here, then
give each layer the rule the test says it misses (or leave it opaque, as :data:`Kind.FLOAT`).
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from typing import Any

import sympy

from shapecore import functions as F

__all__ = [
    "Kind",
    "Operation",
    "OPERATIONS",
    "BY_CLASS",
    "CALL_NAMES",
    "DIVISOR_ARGUMENTS",
    "FLOAT_FUNCTIONS",
    "SHORT_CIRCUITS",
    "NONCANONICAL",
]


class Kind(enum.Enum):
    """How the reasoner treats an operation."""

    INTEGER = "integer"
    """Integers to an integer: ranges, modular analysis and z3 each interpret it."""
    FLOAT = "float"
    """A float argument or result: evaluated exactly, opaque to ranges, modular analysis and z3
    (a fresh unconstrained z3 variable, so a z3 model is checked by evaluation)."""
    RELATION = "relation"
    """Two integers to a bool; ranges and z3 decide it."""
    CONNECTIVE = "connective"
    """Bools to a bool, strict: every part is evaluated."""
    SHORT_CIRCUIT = "short circuit"
    """Bools to a bool, left to right, as Python's ``and``/``or``: a part after one that decides
    is not evaluated. Its value is a connective's wherever it is defined; ``python`` takes the
    parts unevaluated (callables), and z3 states where it is defined."""


@dataclass(frozen=True)
class Operation:
    """One operation of the vocabulary."""

    cls: type[sympy.Basic]
    """The sympy class of its nodes (exactly this class: subclasses are operations of their own)."""
    python: Callable[..., Any]
    """Its value on Python values (ints, ``Fraction``, floats, bools), raising as Python does
    (a :data:`Kind.SHORT_CIRCUIT` gets each part as a callable, to call only if it reaches it)."""
    kind: Kind
    arity: int | None = None
    """Number of arguments, or None for any number (at least one)."""
    names: tuple[str, ...] = ()
    """Names :func:`shapecore.parse` accepts for a call, torch's first; none for an operator
    written only infix (``+``, ``*``, float arithmetic)."""
    divisors: slice | None = None
    """The arguments that must be nonzero for it to be defined."""
    canonical: bool = True
    """False where :func:`shapecore.rewrite.canonicalize` rewrites it into canonical operations,
    which are all that ranges and modular analysis need to read."""


def _pow(base: Any, exp: Any) -> Any:
    if isinstance(exp, int) and exp < 0:
        return Fraction(1) / Fraction(base) ** -exp
    return base**exp


def _promoting(pick: Callable[..., Any]) -> Callable[..., Any]:
    """Python's ``max``/``min``, a float when any operand is one (``torch.sym_max``'s rule)."""

    def python(*values: Any) -> Any:
        result = pick(*values)
        return float(result) if any(isinstance(v, float) for v in values) else result

    python.__name__ = pick.__name__
    return python


_SECOND = slice(1, 2)

OPERATIONS: tuple[Operation, ...] = (
    # integer arithmetic
    Operation(sympy.Add, lambda *xs: sum(xs[1:], xs[0]), Kind.INTEGER),
    Operation(sympy.Mul, lambda *xs: reduce(operator.mul, xs), Kind.INTEGER),
    Operation(sympy.Pow, _pow, Kind.INTEGER, 2, ("PowByNatural",)),
    Operation(F.FloorDiv, operator.floordiv, Kind.INTEGER, 2, ("FloorDiv",), _SECOND),
    Operation(F.CleanDiv, operator.floordiv, Kind.INTEGER, 2, ("CleanDiv",), _SECOND, canonical=False),
    Operation(F.CeilDiv, lambda a, b: -((-a) // b), Kind.INTEGER, 2, ("CeilDiv",), _SECOND, canonical=False),
    Operation(F.Mod, operator.mod, Kind.INTEGER, 2, ("Mod",), _SECOND),
    Operation(F.PythonMod, operator.mod, Kind.INTEGER, 2, ("PythonMod",), _SECOND, canonical=False),
    Operation(F.ModularIndexing, lambda a, b, c: (a // b) % c, Kind.INTEGER, 3, ("ModularIndexing",),
              slice(1, 3), canonical=False),
    Operation(F.Max, _promoting(max), Kind.INTEGER, None, ("Max", "max")),
    Operation(F.Min, _promoting(min), Kind.INTEGER, None, ("Min", "min")),
    # relations
    Operation(sympy.Eq, operator.eq, Kind.RELATION, 2, ("Eq",)),
    Operation(sympy.Ne, operator.ne, Kind.RELATION, 2, ("Ne",)),
    Operation(sympy.Lt, operator.lt, Kind.RELATION, 2, ("Lt",)),
    Operation(sympy.Le, operator.le, Kind.RELATION, 2, ("Le",)),
    Operation(sympy.Gt, operator.gt, Kind.RELATION, 2, ("Gt",)),
    Operation(sympy.Ge, operator.ge, Kind.RELATION, 2, ("Ge",)),
    # connectives
    Operation(sympy.And, lambda *xs: all(xs), Kind.CONNECTIVE, None, ("And",)),
    Operation(sympy.Or, lambda *xs: any(xs), Kind.CONNECTIVE, None, ("Or",)),
    Operation(sympy.Not, operator.not_, Kind.CONNECTIVE, 1, ("Not",)),
    Operation(F.PythonAnd, lambda *parts: all(part() for part in parts), Kind.SHORT_CIRCUIT),  # written a and b
    Operation(F.PythonOr, lambda *parts: any(part() for part in parts), Kind.SHORT_CIRCUIT),  # written a or b
    # floats
    Operation(F.ToFloat, float, Kind.FLOAT, 1, ("ToFloat",)),
    Operation(F.IntTrueDiv, operator.truediv, Kind.FLOAT, 2, ("IntTrueDiv",), _SECOND),
    Operation(F.FloatTrueDiv, lambda a, b: float(a) / float(b), Kind.FLOAT, 2, ("FloatTrueDiv",), _SECOND),
    Operation(F.TruncToInt, math.trunc, Kind.FLOAT, 1, ("TruncToInt",)),
    Operation(F.FloorToInt, math.floor, Kind.FLOAT, 1, ("FloorToInt",)),
    Operation(F.CeilToInt, math.ceil, Kind.FLOAT, 1, ("CeilToInt",)),
    Operation(F.RoundToInt, round, Kind.FLOAT, 1, ("RoundToInt",)),
    Operation(F.TruncToFloat, lambda x: float(math.trunc(x)), Kind.FLOAT, 1, ("TruncToFloat",)),
    Operation(F.FloatAdd, operator.add, Kind.FLOAT, 2),
    Operation(F.FloatMul, operator.mul, Kind.FLOAT, 2),
    Operation(F.FloatPow, operator.pow, Kind.FLOAT, 2),
)
"""Every operation, each once."""

BY_CLASS: Mapping[type, Operation] = {op.cls: op for op in OPERATIONS}
"""Each operation by its class (``type(node)``, exactly)."""

CALL_NAMES: Mapping[str, Operation] = {name: op for op in OPERATIONS for name in op.names}
"""Each operation by the names :func:`shapecore.parse` accepts for a call."""

DIVISOR_ARGUMENTS: Mapping[type, slice] = {op.cls: op.divisors for op in OPERATIONS if op.divisors is not None}
"""Which arguments of each division are divisors (a zero one makes the expression undefined)."""

FLOAT_FUNCTIONS: tuple[type[sympy.Basic], ...] = tuple(op.cls for op in OPERATIONS if op.kind is Kind.FLOAT)
"""Functions with a float argument or result: evaluated exactly, opaque to the reasoner."""

SHORT_CIRCUITS: tuple[type[sympy.Basic], ...] = tuple(op.cls for op in OPERATIONS if op.kind is Kind.SHORT_CIRCUIT)
"""Python's ``and``/``or``: a claim with one may be defined where some of its divisors are zero."""

NONCANONICAL: frozenset[type] = frozenset(op.cls for op in OPERATIONS if not op.canonical)
"""The operations :func:`shapecore.rewrite.canonicalize` rewrites away."""
