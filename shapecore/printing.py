"""Printing expressions: torch's guard syntax and plain Python source.

* :func:`torch_str` is ``str(expr)``: the text PyTorch logs for the same expression
  (``Eq(Mod(s0, 8), 0)``, ``s77 >= ((s77//3))``), which :func:`shapecore.parse` reads back.
* :func:`python_str` prints Python source with the same value under Python's semantics
  (``s0 % 8 == 0``; the strict ``And``/``Or`` as ``&``/``|`` on the parts' bools, since Python's
  ``and``/``or`` would skip a part, and with it a division by zero; Python's own short circuit,
  :class:`~shapecore.functions.PythonAnd`/``PythonOr``, as ``and``/``or``), optionally with
  each symbol replaced by a source expression such as ``x.size()[0]``. Rational coefficients print as ``Fraction(p, q)`` and float-to-int functions
  as ``math.floor(...)`` etc., so the source needs ``Fraction`` and ``math`` in scope
  (:data:`PYTHON_NAMESPACE`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from shapecore import functions as F
from shapecore.operations import SHORT_CIRCUITS

__all__ = ["torch_str", "python_str", "PYTHON_NAMESPACE"]

PYTHON_NAMESPACE: dict[str, object] = {"Fraction": Fraction, "math": math}
"""The names that :func:`python_str` output may refer to besides the symbols."""

_ATOM = PRECEDENCE["Atom"]
_MUL = PRECEDENCE["Mul"]
_REL = PRECEDENCE["Relational"]


def torch_str(expr: sympy.Basic) -> str:
    """The expression in PyTorch's guard syntax (``str(expr)``)."""
    return str(expr)


class _PythonPrinter(StrPrinter):
    """StrPrinter whose output is Python source with Python semantics."""

    printmethod = "_shapecore_python"  # ignore torch-syntax ``_sympystr`` hooks

    def __init__(self, names: Mapping[str, str] | None) -> None:
        super().__init__()
        self._names = names or {}

    def _operand(self, expr: sympy.Basic) -> str:
        text = self._print(expr)
        return text if expr.is_Atom and not (expr.is_Number and expr < 0) else f"({text})"

    def _binary(self, op: str, left: sympy.Basic, right: sympy.Basic) -> str:
        return f"{self._operand(left)} {op} {self._operand(right)}"

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return self._names.get(expr.name, expr.name)

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"Fraction({expr.p}, {expr.q})"

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return str(int(expr))

    def _print_Mul(self, expr: sympy.Mul) -> str:
        coeff, rest = expr.as_coeff_Mul()
        if coeff.is_negative:
            return "-" + self.parenthesize(-expr, _MUL)
        if isinstance(coeff, sympy.Rational) and not coeff.is_Integer:
            return f"Fraction({coeff.p}, {coeff.q})*{self.parenthesize(rest, _MUL)}"
        return "*".join(self.parenthesize(f, _MUL) for f in expr.as_ordered_factors())

    def _print_Pow(self, expr: sympy.Pow) -> str:
        return f"{self._operand(expr.base)}**{self._operand(expr.exp)}"

    def _print_FloorDiv(self, expr: sympy.Basic) -> str:
        return self._binary("//", *expr.args)

    _print_CleanDiv = _print_FloorDiv

    def _print_Mod(self, expr: sympy.Basic) -> str:
        return self._binary("%", *expr.args)

    _print_PythonMod = _print_Mod

    def _print_CeilDiv(self, expr: sympy.Basic) -> str:
        return f"-({self._operand(-expr.args[0])} // {self._operand(expr.args[1])})"

    def _print_ModularIndexing(self, expr: sympy.Basic) -> str:
        a, b, c = expr.args
        return f"({self._binary('//', a, b)}) % {self._operand(c)}"

    def _print_Max(self, expr: sympy.Basic) -> str:
        return self._lattice("max", expr)

    def _print_Min(self, expr: sympy.Basic) -> str:
        return self._lattice("min", expr)

    def _lattice(self, name: str, expr: sympy.Basic) -> str:
        """Python's ``max``/``min``, every operand a float where one is (Python's own would
        return an int operand as an int: ``Max`` follows ``torch.sym_max``)."""
        if not F.float_valued(expr):
            return f"{name}({', '.join(self._print(a) for a in expr.args)})"
        return f"{name}({', '.join(self._print(a if F.float_valued(a) else F.ToFloat(a)) for a in expr.args)})"

    def _print_ToFloat(self, expr: sympy.Basic) -> str:
        return f"float({self._print(expr.args[0])})"

    def _print_IntTrueDiv(self, expr: sympy.Basic) -> str:
        return self._binary("/", *expr.args)

    def _print_FloatTrueDiv(self, expr: sympy.Basic) -> str:
        a, b = expr.args
        return f"float({self._print(a)}) / float({self._print(b)})"

    def _print_TruncToInt(self, expr: sympy.Basic) -> str:
        return f"math.trunc({self._print(expr.args[0])})"

    def _print_FloorToInt(self, expr: sympy.Basic) -> str:
        return f"math.floor({self._print(expr.args[0])})"

    def _print_CeilToInt(self, expr: sympy.Basic) -> str:
        return f"math.ceil({self._print(expr.args[0])})"

    def _print_RoundToInt(self, expr: sympy.Basic) -> str:
        return f"round({self._print(expr.args[0])})"

    def _print_TruncToFloat(self, expr: sympy.Basic) -> str:
        return f"float(math.trunc({self._print(expr.args[0])}))"

    def _print_FloatAdd(self, expr: sympy.Basic) -> str:
        return f"({self._print(expr.args[0])}) + ({self._print(expr.args[1])})"

    def _print_FloatMul(self, expr: sympy.Basic) -> str:
        return f"({self._print(expr.args[0])}) * ({self._print(expr.args[1])})"

    def _print_FloatPow(self, expr: sympy.Basic) -> str:
        return f"({self._print(expr.args[0])}) ** ({self._print(expr.args[1])})"

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _relation(self, op: str, expr: sympy.Basic) -> str:
        lhs, rhs = expr.args
        return f"{self.parenthesize(lhs, _REL, strict=True)} {op} {self.parenthesize(rhs, _REL, strict=True)}"

    def _print_Equality(self, expr: sympy.Basic) -> str:
        return self._relation("==", expr)

    def _print_Unequality(self, expr: sympy.Basic) -> str:
        return self._relation("!=", expr)

    def _print_StrictLessThan(self, expr: sympy.Basic) -> str:
        return self._relation("<", expr)

    def _print_LessThan(self, expr: sympy.Basic) -> str:
        return self._relation("<=", expr)

    def _print_StrictGreaterThan(self, expr: sympy.Basic) -> str:
        return self._relation(">", expr)

    def _print_GreaterThan(self, expr: sympy.Basic) -> str:
        return self._relation(">=", expr)

    def _print_And(self, expr: sympy.Basic) -> str:  # strict: & evaluates every part, unlike and
        return " & ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Or(self, expr: sympy.Basic) -> str:
        return " | ".join(f"({self._print(a)})" for a in expr.args)

    def _print_PythonAnd(self, expr: sympy.Basic) -> str:  # Python's own short circuit: and is exactly it
        return " and ".join(f"({self._print(a)})" for a in expr.args)

    def _print_PythonOr(self, expr: sympy.Basic) -> str:
        return " or ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Not(self, expr: sympy.Basic) -> str:
        return f"not {self._operand_bool(expr.args[0])}"

    def _operand_bool(self, expr: sympy.Basic) -> str:
        text = self._print(expr)
        return f"({text})" if isinstance(expr, (sympy.And, sympy.Or, sympy.Not, *SHORT_CIRCUITS)) else text

    def _print_BooleanTrue(self, expr: sympy.Basic) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: sympy.Basic) -> str:
        return "False"


def python_str(expr: sympy.Basic, names: Mapping[str, str] | None = None) -> str:
    """Python source computing ``expr``; ``names`` maps a symbol name to the source to print."""
    return _PythonPrinter(names).doprint(expr)
