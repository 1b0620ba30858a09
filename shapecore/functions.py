"""The integer vocabulary of shape expressions, with PyTorch's names and Python's semantics.

An expression is a sympy tree over integer symbols (:func:`int_symbol`) built from ``+ - *``,
integer powers and the functions below; a claim or guard is a relation (``Eq Ne Lt Le Gt Ge``)
or a boolean combination (``And Or Not``) of expressions.

Semantics, one per operation, exactly Python's on ``int``:

* ``FloorDiv(a, b) = a // b`` (rounds toward -infinity), ``CleanDiv`` is ``FloorDiv`` with a
  marker saying the division is known to be exact; ``CeilDiv(a, b) = -((-a) // b)``.
* ``Mod(a, b) = a % b`` (the result has the sign of ``b``); ``PythonMod`` is the same function
  under torch's other name, so the two can never disagree on a value.
* ``ModularIndexing(a, b, c) = (a // b) % c``.
* ``Max``/``Min``: Python's ``max``/``min``, a float when any operand is one (as
  ``torch.sym_max``: Python's own ``max(3, 2.5)`` is the int 3, its type depends on the values);
  built without comparing symbolic arguments. The parser reads Python's ``max``/``min`` only
  where that is the same: with no int operand beside a float one.
* A zero divisor makes the expression undefined: evaluating it raises ``ZeroDivisionError``.
* ``And``/``Or``/``Not`` (torch's ``& | ~``) are strict: every part is evaluated, so a part that
  is undefined makes the whole undefined.
* :class:`PythonAnd`/:class:`PythonOr` are Python's ``and``/``or``: they short-circuit, so a
  part after one that decides (``False`` for ``and``, ``True`` for ``or``) is not evaluated and
  its zero divisors do not count (``x == 0 or 10 // x > 2`` is True at ``x = 0``). Where
  defined their value is ``And``/``Or``'s; ``A and B`` is defined where ``A`` is and, if ``A``
  is true, ``B`` is too. They print as Python's ``and``/``or``.

Floats follow Python, not sympy. The float-valued functions torch emits (``ToFloat``,
``IntTrueDiv``, ``FloatTrueDiv``, ``TruncToInt``, ``FloorToInt``, ``CeilToInt``,
``RoundToInt``, ``TruncToFloat``) mean ``float(a)``, ``a / b``, ``math.trunc`` …; and since
float arithmetic is neither associative nor exact (``3*0.1*10 <= 3`` is False in Python, while
sympy folds ``s0*0.1*10`` to ``1.0*s0``), ``+ * **`` with a float operand are the binary
:class:`FloatAdd`, :class:`FloatMul` and :class:`FloatPow`: one Python operation each, in the
order written, folded only when both operands are numbers (with Python's floats). So is ``**``
with an exponent that may be negative (``2 ** -1`` is ``0.5``). Build them with :func:`add`,
:func:`mul` and :func:`power`, which keep sympy's exact arithmetic when no float is involved.
They parse, print and evaluate; the reasoner treats them as opaque. A float constant is a
:class:`PythonFloat`: one double, which compares with an int exactly, as in Python
(``5e17 <= 499999999999999999`` is False; sympy's own ``Float`` rounds the int first). A
division or ``%`` with a float operand is computed in floats by Python, so it is an integer
here only when its operands are (``(x*0.5) % 2`` is ``0.5`` at ``x = 1``).

Each class is registered once, with its Python semantics, in :mod:`shapecore.operations`,
which every layer reads or is tested against.

Construction folds constants and applies only identities that hold for *every* integer
(``x // 1 = x``, ``0 % b = 0`` for a nonzero constant ``b``); knowledge-dependent rewriting
lives in :mod:`shapecore.rewrite`. Printing follows torch: ``FloorDiv`` prints ``(a//b)`` and
the rest print as calls, so ``str(expr)`` is the text torch would log.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import sympy
from sympy.core.logic import fuzzy_and
from sympy.logic.boolalg import BooleanFunction
from sympy.printing.precedence import PRECEDENCE

__all__ = [
    "FloorDiv",
    "CleanDiv",
    "CeilDiv",
    "Mod",
    "PythonMod",
    "ModularIndexing",
    "Max",
    "Min",
    "ToFloat",
    "IntTrueDiv",
    "FloatTrueDiv",
    "TruncToInt",
    "FloorToInt",
    "CeilToInt",
    "RoundToInt",
    "TruncToFloat",
    "FloatAdd",
    "FloatMul",
    "FloatPow",
    "PythonAnd",
    "PythonOr",
    "add",
    "mul",
    "power",
    "float_valued",
    "rounded_in_floats",
    "float_number",
    "as_number",
    "PythonFloat",
    "int_symbol",
    "float_symbol",
    "symbol_for",
]



@functools.lru_cache(maxsize=1 << 14)
def int_symbol(name: str) -> sympy.Symbol:
    """The integer symbol called ``name``: what every size and guard variable is (cached: sympy
    takes microseconds to find its own cached symbol)."""
    return sympy.Symbol(name, integer=True)


def float_symbol(name: str) -> sympy.Symbol:
    """A real-valued symbol, for torch's float inputs (``zf0``, ``zuf0``); opaque to the reasoner."""
    return sympy.Symbol(name, real=True)


FLOAT_SYMBOL_NAME = re.compile(r"zu?f\d+")
"""torch's names for float-valued symbols; the parser reads these as :func:`float_symbol`."""


@functools.lru_cache(maxsize=1 << 14)
def symbol_for(name: str) -> sympy.Symbol:
    """The symbol torch would mean by ``name``: real for ``zf*``/``zuf*``, integer otherwise (cached)."""
    return float_symbol(name) if FLOAT_SYMBOL_NAME.fullmatch(name) else int_symbol(name)


def _as_fraction(value: sympy.Basic) -> Fraction | None:
    if isinstance(value, sympy.Integer):
        return Fraction(int(value))
    if isinstance(value, sympy.Rational):
        return Fraction(int(value.p), int(value.q))
    return None


def _nonzero_constant(value: sympy.Basic) -> bool:
    return isinstance(value, sympy.Rational) and value != 0


def _int_if_ints(operation: sympy.Basic) -> bool | None:
    """True when every operand is an integer, else unknown: ``x % 2.5`` is ``0.0`` at ``x = 0``."""
    return True if all(a.is_integer for a in operation.args) else None


class _Lattice(sympy.Function):
    """``Max``/``Min`` that only flatten, drop duplicates and fold numbers (as torch prints them).

    Unlike sympy's, they never compare symbolic arguments at construction: that is the
    reasoner's job, under the facts, and it keeps ``Max(s0, s0 + 1)`` printing as written.
    """

    _pick = max
    precedence = PRECEDENCE["Atom"]  # as torch's Max/Min (LatticeOps) print: never parenthesized

    @classmethod
    def eval(cls, *args: sympy.Basic) -> sympy.Basic | None:
        if not args:
            raise TypeError(f"{cls.__name__}() needs at least one argument")
        flat: list[sympy.Basic] = []
        for arg in args:
            flat.extend(arg.args if type(arg) is cls else (arg,))
        numbers = [a for a in flat if a.is_Number]
        unique = list(dict.fromkeys(a for a in flat if not a.is_Number))
        if numbers:
            unique.extend(_promoted(cls._pick(numbers), numbers))
        if len(unique) == 1:
            return unique[0]
        ordered = tuple(sympy.ordered(unique))
        return None if ordered == args else cls(*ordered)

    def _eval_is_integer(self) -> bool | None:
        return _int_if_ints(self)  # max(x, 2.5) is 3 at x = 3

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        return printer._print_LatticeOp(self)  # sorted arguments, as torch's Max/Min print

    @classmethod
    def class_key(cls) -> tuple[int, int, str]:
        return 5, 0, cls.__name__  # torch's Max/Min are not Functions: sort like them

    def _eval_is_real(self) -> bool | None:
        return fuzzy_and(a.is_real for a in self.args)


def _promoted(picked: sympy.Basic, numbers: list[sympy.Basic]) -> list[sympy.Basic]:
    """The folded number of a ``Max``/``Min``: a float if any of ``numbers`` is one (left
    unfolded where the int is beyond a float's range, which evaluating then reports)."""
    if picked.is_Float or not any(n.is_Float for n in numbers):
        return [picked]
    try:
        return [float_number(float(picked))]
    except OverflowError:
        return [picked, next(n for n in numbers if n.is_Float)]


class Max(_Lattice):
    """``max(a, b, …)``."""

    _pick = max


class Min(_Lattice):
    """``min(a, b, …)``."""

    _pick = min


def _int_unless_float(division: sympy.Basic) -> bool | None:
    """A floor or ceiling division is an int (a Python ``int``, so an integer here) unless an
    operand is float-valued: then Python computes it in floats (an integral float, or ``inf``)."""
    return None if any(float_valued(a) for a in division.args) else True


class FloorDiv(sympy.Function):
    """``a // b``: floor division, rounding toward negative infinity (an int unless an operand
    is a float: then Python gives an integral float, or ``inf``)."""

    nargs = (2,)
    precedence = 35

    def _eval_is_integer(self) -> bool | None:
        return _int_unless_float(self)

    @classmethod
    def eval(cls, base: sympy.Basic, divisor: sympy.Basic) -> sympy.Basic | None:
        if divisor.is_zero:
            raise ZeroDivisionError(f"division by zero in {cls.__name__}({base}, {divisor})")
        a, b = _as_fraction(base), _as_fraction(divisor)
        if a is not None and b is not None:
            return sympy.Integer(math.floor(a / b))
        if base.is_integer and divisor == 1:
            return base
        if base.is_integer and divisor == -1:
            return -base
        if base.is_zero and _nonzero_constant(divisor) and not base.is_Float:  # 0.0 // -3 is -0.0
            return sympy.S.Zero
        return None

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        base = printer.parenthesize(self.args[0], PRECEDENCE["Atom"] - 0.5)
        divisor = printer.parenthesize(self.args[1], PRECEDENCE["Atom"] - 0.5)
        return f"({base}//{divisor})"


class CleanDiv(FloorDiv):
    """``a // b`` where ``b`` is known to divide ``a``: same value as :class:`FloorDiv`."""


class CeilDiv(sympy.Function):
    """``-((-a) // b)``: division rounding toward positive infinity (as :class:`FloorDiv`, an
    int unless an operand is a float)."""

    nargs = (2,)

    def _eval_is_integer(self) -> bool | None:
        return _int_unless_float(self)

    @classmethod
    def eval(cls, base: sympy.Basic, divisor: sympy.Basic) -> sympy.Basic | None:
        if divisor.is_zero:
            raise ZeroDivisionError(f"division by zero in CeilDiv({base}, {divisor})")
        a, b = _as_fraction(base), _as_fraction(divisor)
        if a is not None and b is not None:
            return sympy.Integer(math.ceil(a / b))
        if base.is_integer and divisor == 1:
            return base
        return None


class Mod(sympy.Function):
    """``a % b`` with Python semantics: the result has the sign of ``b`` (zero included); an
    integer when both operands are (``0.5 % 2`` is ``0.5``)."""

    nargs = (2,)
    precedence = 35

    def _eval_is_integer(self) -> bool | None:
        return _int_if_ints(self)

    @classmethod
    def eval(cls, p: sympy.Basic, q: sympy.Basic) -> sympy.Basic | None:
        if q.is_zero:
            raise ZeroDivisionError(f"modulo by zero in {cls.__name__}({p}, {q})")
        a, b = _as_fraction(p), _as_fraction(q)
        if a is not None and b is not None:
            return sympy.Rational(a - b * math.floor(a / b))
        if p.is_integer and q in (1, -1):
            return sympy.S.Zero
        if p.is_zero and _nonzero_constant(q) and not p.is_Float:  # 0.0 % 3 is 0.0, a float
            return sympy.S.Zero
        return None


class PythonMod(Mod):
    """torch's name for Python's ``%``; identical to :class:`Mod` here."""


class ModularIndexing(sympy.Function):
    """``(a // b) % c``, Python semantics; an integer when every operand is."""

    nargs = (3,)
    precedence = 35

    def _eval_is_integer(self) -> bool | None:
        return _int_if_ints(self)

    @classmethod
    def eval(
        cls, base: sympy.Basic, divisor: sympy.Basic, modulus: sympy.Basic
    ) -> sympy.Basic | None:
        if divisor.is_zero or modulus.is_zero:
            raise ZeroDivisionError(f"division by zero in ModularIndexing({base}, {divisor}, {modulus})")
        if all(isinstance(x, sympy.Integer) for x in (base, divisor, modulus)):
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if modulus == 1 and isinstance(divisor, sympy.Integer):  # like Mod(x, 1) and torch's; no divisor erased
            return sympy.S.Zero
        return None


class PythonFloat(sympy.Float):
    """A float constant: exactly one double, compared and combined with numbers exactly.

    Python compares an int with a float exactly (``5e17 <= 499999999999999999`` is False),
    while sympy's ``Float`` first rounds the other number to its own precision. A double's
    value is a dyadic rational, so here every comparison with a number, and the arithmetic
    sympy does on numbers (``Add``/``Mul`` folding their constants, ``lhs - rhs`` when a
    relation is decided), use that rational: such arithmetic gives an exact ``Rational``, so
    sympy's ``Add``/``Mul`` never hold a float constant (only negation, exact in floats too,
    gives a float). Python's own float arithmetic, which rounds, is :class:`FloatAdd` and its
    kin, which fold two numbers with Python's floats. Build one with :func:`float_number`.
    """

    __slots__ = ()

    def _eval_is_integer(self) -> bool:
        return False  # a Python float, never an int, even where integral (sympy calls 0.0 an integer)

    def exact(self) -> sympy.Rational:
        """The double's exact value."""
        return sympy.Rational(self)

    @staticmethod
    def _exact_number(other: object) -> sympy.Rational | None:
        """``other``'s exact value if it is a finite number (a sympy or Python one), else None."""
        if isinstance(other, (int, float, Fraction)):
            other = sympy.sympify(other)
        if isinstance(other, sympy.Rational) or (isinstance(other, sympy.Float) and other.is_finite):
            return sympy.Rational(other)
        return None

    def _arithmetic(self, other: object, combine: Callable[[Any, Any], Any], reflected: bool) -> Any:
        """``self (op) other`` (``other (op) self`` if ``reflected``): exact with a number, else sympy's."""
        x = self._exact_number(other)
        if x is None:
            return getattr(sympy.Float, f"__{'r' if reflected else ''}{combine.__name__}__")(self, other)
        return combine(x, self.exact()) if reflected else combine(self.exact(), x)

    def __add__(self, other):
        return self._arithmetic(other, operator.add, False)

    def __radd__(self, other):
        return self._arithmetic(other, operator.add, True)

    def __sub__(self, other):
        return self._arithmetic(other, operator.sub, False)

    def __rsub__(self, other):
        return self._arithmetic(other, operator.sub, True)

    def __mul__(self, other):
        if isinstance(other, (int, sympy.Integer)) and other == -1:  # Mul(-1, f): -f, a float as Python's
            return -self
        return self._arithmetic(other, operator.mul, False)

    def __rmul__(self, other):
        return self.__mul__(other) if isinstance(other, (int, sympy.Integer)) and other == -1 else \
            self._arithmetic(other, operator.mul, True)

    def __truediv__(self, other):
        if self._exact_number(other) == 0:
            return sympy.Float.__truediv__(self, other)
        return self._arithmetic(other, operator.truediv, False)

    def __neg__(self):
        return float_number(-float(self))

    def _compare(self, other: object, compare: Callable[[Any, Any], bool]) -> Any:
        x = self._exact_number(other)
        if x is None:
            return getattr(sympy.Float, f"__{compare.__name__}__")(self, other)
        return sympy.true if compare(self.exact(), x) else sympy.false

    def __lt__(self, other):
        return self._compare(other, operator.lt)

    def __le__(self, other):
        return self._compare(other, operator.le)

    def __gt__(self, other):
        return self._compare(other, operator.gt)

    def __ge__(self, other):
        return self._compare(other, operator.ge)

    def _eval_Eq(self, other: sympy.Basic) -> sympy.Basic | None:
        """``Eq(self, other)`` for a number ``other``, exactly (sympy asks this before its own rules)."""
        x = self._exact_number(other)
        return None if x is None else sympy.true if self.exact() == x else sympy.false

    __hash__ = sympy.Float.__hash__


def float_number(value: float) -> PythonFloat:
    """The double ``value`` as a :class:`PythonFloat`: exactly it, printed with enough digits to read back."""
    mantissa = repr(value).split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return PythonFloat(value, max(15, len(mantissa)))


def _python_number(value: sympy.Basic) -> int | Fraction | float | None:
    """A number as Python computes with it (exact for integers and rationals), else None."""
    if isinstance(value, sympy.Integer):
        return int(value)
    if isinstance(value, sympy.Rational):
        return Fraction(int(value.p), int(value.q))
    if isinstance(value, sympy.Float) and value.is_finite:
        return float(value)
    return None


def as_number(value: int | Fraction | float) -> sympy.Basic | None:
    """A Python number as the sympy number with its value (None for a float that is not finite)."""
    if isinstance(value, float):
        return float_number(value) if math.isfinite(value) else None
    if isinstance(value, Fraction):
        return sympy.Rational(value.numerator, value.denominator)
    return sympy.Integer(value)


class ToFloat(sympy.Function):
    """``float(a)``."""

    nargs = (1,)
    is_real = True

    @classmethod
    def eval(cls, number: sympy.Basic) -> sympy.Basic | None:
        if isinstance(number, sympy.Integer):
            return as_number(float(int(number)))
        return None


class _TrueDiv(sympy.Function):
    """Float-valued division; folds when both operands are ``_operand`` numbers."""

    nargs = (2,)
    precedence = 35
    is_real = True
    _operand: type = sympy.Number

    @staticmethod
    def _divide(base: sympy.Basic, divisor: sympy.Basic) -> float:
        return float(base) / float(divisor)

    @classmethod
    def eval(cls, base: sympy.Basic, divisor: sympy.Basic) -> sympy.Basic | None:
        if divisor.is_zero:
            raise ZeroDivisionError(f"division by zero in {cls.__name__}({base}, {divisor})")
        if isinstance(base, cls._operand) and isinstance(divisor, cls._operand):
            return as_number(cls._divide(base, divisor))
        return None


class IntTrueDiv(_TrueDiv):
    """``a / b`` on integers: Python's correctly rounded true division, a float."""

    _operand = sympy.Integer

    @staticmethod
    def _divide(base: sympy.Basic, divisor: sympy.Basic) -> float:
        return int(base) / int(divisor)


class FloatTrueDiv(_TrueDiv):
    """``float(a) / float(b)``."""


def _float_to_int(name: str, rounding, doc: str) -> type[sympy.Function]:
    """A unary float → int function class with constant folding through ``rounding``."""

    @classmethod
    def eval(cls, number: sympy.Basic) -> sympy.Basic | None:
        if isinstance(number, sympy.Number) and number.is_finite:
            return sympy.Integer(rounding(float(number)))
        return None

    return type(name, (sympy.Function,), {"nargs": (1,), "is_integer": True, "eval": eval, "__doc__": doc})


TruncToInt = _float_to_int("TruncToInt", math.trunc, "``math.trunc(x)``: float to int, toward zero.")
FloorToInt = _float_to_int("FloorToInt", math.floor, "``math.floor(x)``: float to int, down.")
CeilToInt = _float_to_int("CeilToInt", math.ceil, "``math.ceil(x)``: float to int, up.")
RoundToInt = _float_to_int("RoundToInt", round, "``round(x)``: float to int, half to even.")


class TruncToFloat(sympy.Function):
    """``float(math.trunc(x))``."""

    nargs = (1,)
    is_real = True

    @classmethod
    def eval(cls, number: sympy.Basic) -> sympy.Basic | None:
        if isinstance(number, sympy.Number) and number.is_finite:
            return as_number(float(math.trunc(float(number))))
        return None


class _FloatArithmetic(sympy.Function):
    """One Python operation with a float operand; folds only two numbers, with Python's floats."""

    nargs = (2,)
    is_real = True
    _operator: Callable[[Any, Any], Any]

    @classmethod
    def eval(cls, a: sympy.Basic, b: sympy.Basic) -> sympy.Basic | None:
        x, y = _python_number(a), _python_number(b)
        if x is None or y is None:
            return None
        try:
            return as_number(cls._operator(x, y))
        except (ArithmeticError, TypeError):  # 0.0 ** -1, (-8.0) ** 0.5 (complex): left to evaluation
            return None


class FloatAdd(_FloatArithmetic):
    """``a + b`` where one operand is a float: Python's float addition (inexact, not associative)."""

    _operator = operator.add
    precedence = PRECEDENCE["Add"]

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        return _infix_sum(printer, *self.args)


class FloatMul(_FloatArithmetic):
    """``a * b`` where one operand is a float: Python's float multiplication."""

    _operator = operator.mul
    precedence = PRECEDENCE["Mul"]

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        a, b = self.args
        return f"{printer.parenthesize(a, self.precedence, strict=True)}*{printer.parenthesize(b, self.precedence)}"


class FloatPow(_FloatArithmetic):
    """``a ** b`` as Python computes it where the result may be a float: a float operand, or an
    exponent that may be negative (``2 ** -1 == 0.5``; ``0 ** -1`` raises ``ZeroDivisionError``)."""

    _operator = operator.pow
    precedence = PRECEDENCE["Pow"]

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        a, b = self.args  # ** groups to the right: the base needs parentheses at its own level
        return f"{printer.parenthesize(a, self.precedence)}**{printer.parenthesize(b, self.precedence, strict=True)}"


def _infix_sum(printer: sympy.printing.StrPrinter, a: sympy.Basic, b: sympy.Basic) -> str:
    """``a + b`` as text that reads back as the same two operands (``a - c`` when ``b == -c``)."""
    level = PRECEDENCE["Add"]  # the left operand needs parentheses only below it, the right one at it too
    left = printer.parenthesize(a, level, strict=True)
    if b.could_extract_minus_sign():
        return f"{left} - {printer.parenthesize(-b, level)}"
    return f"{left} + {printer.parenthesize(b, level)}"


_FLOAT_RESULTS = (ToFloat, IntTrueDiv, FloatTrueDiv, TruncToFloat, FloatAdd, FloatMul, FloatPow)
_INTEGER_RESULTS = (TruncToInt, FloorToInt, CeilToInt, RoundToInt)


@functools.lru_cache(maxsize=1 << 14)
def float_valued(expr: sympy.Basic) -> bool:
    """Whether Python computes ``expr`` in floats (a float literal, float symbol or float
    function in it, outside a float-to-int function): its arithmetic must then be Python's."""
    if expr.is_Float or isinstance(expr, _FLOAT_RESULTS):
        return True
    if expr.is_Symbol:
        return not expr.is_integer
    if isinstance(expr, _INTEGER_RESULTS) or expr.is_Relational or isinstance(expr, sympy.logic.boolalg.Boolean):
        return False
    return any(float_valued(a) for a in expr.args)


def rounded_in_floats(expr: sympy.Basic) -> bool:
    """Whether ``expr`` is a floor division, remainder, ``Max`` or ``Min`` that Python computes
    in floats (an operand is float-valued). Its value is rounded: ``-2.0**60 // -(2**60 + 3)`` is
    ``1.0`` (the exact quotient's floor is 0), and ``min(a, 0.5)`` is ``float(a)``, which for an
    int ``a`` past 2**53 is not ``a``. So the integer rules of ranges, rewriting and z3 do not
    hold for it: they take it as opaque, and only evaluation computes it."""
    return isinstance(expr, (FloorDiv, CeilDiv, Mod, ModularIndexing, Max, Min)) and float_valued(expr)


def _chain(exact: Callable[..., sympy.Basic], inexact: type, args: tuple, evaluate: bool) -> sympy.Basic:
    if not any(float_valued(a) for a in args):
        return exact(*args, evaluate=evaluate)
    return functools.reduce(lambda a, b: inexact(a, b, evaluate=evaluate), args)


def add(*terms: sympy.Basic, evaluate: bool = True) -> sympy.Basic:
    """``terms[0] + terms[1] + …`` as Python computes it: sympy's exact ``Add`` for integers
    and rationals, :class:`FloatAdd` from left to right once a float is involved."""
    return _chain(sympy.Add, FloatAdd, terms, evaluate)


def mul(*factors: sympy.Basic, evaluate: bool = True) -> sympy.Basic:
    """``factors[0] * factors[1] * …`` as Python computes it (see :func:`add`)."""
    return _chain(sympy.Mul, FloatMul, factors, evaluate)


def power(base: sympy.Basic, exponent: sympy.Basic, evaluate: bool = True) -> sympy.Basic:
    """``base ** exponent`` as Python computes it: sympy's exact ``Pow`` for a nonnegative
    integer exponent, else :class:`FloatPow`."""
    if exponent.is_nonnegative is not True and not float_valued(base) and not float_valued(exponent):
        return FloatPow(base, exponent, evaluate=evaluate)
    return _chain(sympy.Pow, FloatPow, (base, exponent), evaluate)


class _ShortCircuit(BooleanFunction):
    """Python's ``and``/``or`` on conditions: left to right, stopping at the first part that
    decides (``_decisive``). Arguments keep their order (unlike ``And``/``Or``): a later part
    may be undefined exactly where an earlier one decides.

    Construction applies only identities that keep value and definedness everywhere: nested
    ones of the same kind flatten, a neutral constant part is dropped (``a and True and b`` is
    ``a and b``), nothing after a decisive constant is kept (``a and False and b`` is
    ``a and False``), a decisive constant first is the value, and one part is itself.
    """

    _decisive: sympy.Basic
    _neutral: sympy.Basic
    _word: str

    @classmethod
    def eval(cls, *args: sympy.Basic) -> sympy.Basic | None:
        parts: list[sympy.Basic] = []
        for arg in args:
            for part in arg.args if type(arg) is cls else (arg,):
                if part is cls._neutral:
                    continue
                parts.append(part)
                if part is cls._decisive:
                    break
            if parts and parts[-1] is cls._decisive:
                break
        if not parts:
            return cls._neutral
        if len(parts) == 1 or parts[0] is cls._decisive:
            return parts[0]
        return None if tuple(parts) == args else cls(*parts)

    def _sympystr(self, printer: sympy.printing.StrPrinter) -> str:
        # Python's precedence: ``or`` < ``and`` < ``not`` < comparisons < ``|`` < ``&``; sympy's
        # ``~`` (Not) always parenthesizes its operand, so only the other kind needs parentheses.
        return f" {self._word} ".join(
            f"({printer._print(a)})" if isinstance(a, _ShortCircuit) else printer._print(a) for a in self.args
        )


class PythonAnd(_ShortCircuit):
    """Python's ``a and b and …`` on conditions: short-circuits at the first false part."""

    _decisive = sympy.false
    _neutral = sympy.true
    _word = "and"
    precedence = PRECEDENCE["Or"] - 2  # below sympy's And/Or/Not, which parenthesize it


class PythonOr(_ShortCircuit):
    """Python's ``a or b or …`` on conditions: short-circuits at the first true part."""

    _decisive = sympy.true
    _neutral = sympy.false
    _word = "or"
    precedence = PRECEDENCE["Or"] - 4
