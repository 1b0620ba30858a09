"""Reading guard text: PyTorch's printed syntax and plain Python, into shapecore expressions.

Accepted, and mixable in one expression:

* torch's syntax as ``str()`` prints it: ``Eq(Mod(s0, 8), 0)``, ``s77 >= ((s77//3))``,
  ``Ne(s0 - ((s0//3)), 1)``, ``(s0 > 2) & (s1 < 3)``, ``~(s0 > 2)``, ``3*s0/4``;
* Python: ``s0 % 8 == 0``, ``a < b and b < c``, ``2 <= k <= 512``, ``not x``, ``max(a, b)``.

``//`` is :class:`FloorDiv`, ``%`` is :class:`Mod` (Python semantics both), ``/`` by a nonzero
integer literal is exact rational division (as sympy prints ``s0/8``) and any other ``/`` is
:class:`IntTrueDiv` (:class:`FloatTrueDiv` with a float operand). Float literals and float
arithmetic follow Python, not sympy: ``+ * **`` with a float operand are one Python operation
each, in the order written (:func:`shapecore.functions.add`), so ``s0*0.1*10 <= s0`` is False
at ``s0 = 3``, as in Python. Every name is an integer symbol. Errors are :class:`ParseError`
with the 1-based line and column of the offending token.

Size limits, so that malformed input is refused at once rather than exhausting the stack or
memory: integers have at most :data:`MAX_INTEGER_DIGITS` decimal digits (a power that would be
larger is refused before it is computed), and expressions nest at most :data:`MAX_NESTING`
levels, where a chain of one kind of operator (a sum, a product, ``&``, ``|``, repeated ``not``
or ``-``) counts as one level however long it is, up to what Python's own parser takes (a
chain of about 3,000 operators).

Python's ``and``/``or`` (and chained comparisons, ``a < b < c`` being ``a < b and b < c``)
short-circuit, as in Python: they are :class:`~shapecore.functions.PythonAnd` and
:class:`~shapecore.functions.PythonOr`, so ``x == 0 or 10 // x > 2`` is True at ``x = 0`` and
``x != 0 and 10 // x > 2`` is False there. Where that is the same thing, they are the strict
``And``/``Or`` of torch's ``& |`` (``s0 >= 2 and s0 % 8 == 0``: the second part has no
division that the first does not; see :func:`shapecore.rewrite.strict_suffices`), which every
analyzer reads. A part after a constant that decides (``0 == 1 and x // y > 0``) is read for
its errors only.

Folding never hides a division: sympy simplifies as it builds (``x//y - x//y`` is ``0``,
``Ne(2*x, 5)`` is ``True``), but like Python, an expression is undefined wherever a division
it was written with divides by zero. A node whose folding would drop a division is built
unevaluated, as written (everything else still folds), so the text keeps Python's meaning:
``x//y - x//y >= 0`` is True where ``y != 0`` and undefined (``ZeroDivisionError``) where
``y == 0``.

Every name is an integer symbol, except torch's float symbols ``zf<n>``/``zuf<n>``, which are real.

Most guards are short and plain (``Eq(Mod(s0, 8), 0)``, ``s0 < s1 + 2``): :mod:`shapecore.quick_parsing`
reads those without Python's parser, building the same expression with the same builders; the
rest, and every error, are read through Python's ``ast`` by the general reader here.
"""

from __future__ import annotations

import ast
import functools
import keyword
import math
import re
from collections.abc import Callable

import sympy
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from shapecore import functions as F
from shapecore.errors import ArgumentError, ParseError
from shapecore.operations import CALL_NAMES, DIVISOR_ARGUMENTS, Kind
from shapecore.quick_parsing import read_common
from shapecore.rewrite import build_keeping_divisions, divisors, short_circuit, strict_suffices

__all__ = ["parse", "named_symbols", "FUNCTIONS", "MAX_INTEGER_DIGITS", "MAX_NESTING", "decimal_digits", "integer_fits"]

MAX_INTEGER_DIGITS = 4000
"""Decimal digits of the largest integer a guard may hold: every guard must print and read back,
and Python converts at most 4,300 digits between int and text (``sys.get_int_max_str_digits``)."""

MAX_NESTING = 100
"""Levels of nesting a guard may have; a chain of one kind of operator counts as one level."""

_INTEGER_LIMIT = 10**MAX_INTEGER_DIGITS
_FLAT_BINARY = {ast.Add: "+", ast.Sub: "+", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|"}


def integer_fits(value: int) -> bool:
    """Whether ``value`` has at most :data:`MAX_INTEGER_DIGITS` digits."""
    return -_INTEGER_LIMIT < value < _INTEGER_LIMIT


def _coefficient_digits(expr: sympy.Basic) -> float:
    """Decimal digits of the larger part of ``expr``'s rational coefficient (0 for none)."""
    coefficient = expr.as_coeff_Mul()[0]
    if not coefficient.is_Rational or coefficient == 0:
        return 0.0
    return math.log10(max(abs(coefficient.p), coefficient.q))


def decimal_digits(value: int) -> int:
    """How many decimal digits ``value`` has (printing it may be refused: it may be too long)."""
    value = abs(value)
    digits = int(math.log10(value)) + 1 if value else 1
    if value >= 10**digits:  # the float logarithm is off by one near powers of ten
        return digits + 1
    return digits - 1 if digits > 1 and value < 10 ** (digits - 1) else digits

FUNCTIONS: dict[str, Callable[..., sympy.Basic]] = {name: op.cls for name, op in CALL_NAMES.items()}
"""Function names the parser accepts, mapped to their constructors (from :mod:`shapecore.operations`)."""

_COMPARE: dict[type, Callable[[sympy.Basic, sympy.Basic], sympy.Basic]] = {
    ast.Eq: sympy.Eq,
    ast.NotEq: sympy.Ne,
    ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le,
    ast.Gt: sympy.Gt,
    ast.GtE: sympy.Ge,
}

_TOKEN = re.compile(r"\w+|\S")


def _nonzero_number(expr: sympy.Basic) -> bool:
    return expr.is_Number and expr != 0


def _is_bool(expr: sympy.Basic) -> bool:
    return expr.is_Relational or isinstance(expr, (BooleanFunction, BooleanAtom))


class _Builder:
    """Builds nodes as the text wrote them, noting every divisor (see :meth:`_build`)."""

    def __init__(self, *, keep_divisions: bool = False) -> None:
        self.divisors: set[sympy.Basic] = set()  # every divisor a division was built with
        self.keep_divisions = keep_divisions  # build a node unevaluated where folding drops a division

    def _build(self, build: Callable[..., sympy.Basic], *args: sympy.Basic) -> sympy.Basic:
        """``build(*args)``, noting the divisors it divides by, which folding may drop: with
        ``keep_divisions``, a node that would drop one is built unevaluated instead."""
        where = DIVISOR_ARGUMENTS.get(build)  # type: ignore[call-overload]
        if where is not None:
            self.divisors.update(a for a in args[where] if not a.is_Number)
        elif build is F.power and args[1].is_nonnegative is not True and not _nonzero_number(args[0]):
            self.divisors.add(args[0])  # 0 ** -n raises ZeroDivisionError
        if build is F.power and args[0].is_zero and args[1].is_negative:
            raise ZeroDivisionError(f"0 cannot be raised to the negative power {args[1]}")
        if build in _RELATIONS and _undecidable(*args):
            return build(*args, evaluate=False)  # what sympy's evaluation would return, after trying
        return build_keeping_divisions(build, *args) if self.keep_divisions else build(*args)


class _Reader(_Builder):
    """Turns one ``ast`` expression into sympy, reporting positions in the caller's text."""

    def __init__(self, text: str, *, keep_divisions: bool = False) -> None:
        super().__init__(keep_divisions=keep_divisions)
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
        return self._located(node, method, node)

    def _located(self, node: ast.AST, build: Callable[..., sympy.Basic], *args: object) -> sympy.Basic:
        """``build(*args)``, its errors reported at ``node``."""
        try:
            return build(*args)
        except ParseError:
            raise
        except ZeroDivisionError as exc:
            raise self.error(f"division by zero: {exc}", node) from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.error(f"invalid expression: {exc}", node) from None

    def _read_Expression(self, node: ast.Expression) -> sympy.Basic:
        return self.read(node.body)

    def _read_Constant(self, node: ast.Constant) -> sympy.Basic:
        value = node.value
        if isinstance(value, bool):
            return sympy.true if value else sympy.false
        if isinstance(value, int):
            if not integer_fits(value):
                raise self.error(self._too_large(value), node)
            return sympy.Integer(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.error(f"float literal {node.value!r} is not finite", node)
            return F.float_number(value)
        raise self.error(f"unsupported literal {value!r}: guards hold integers and booleans", node)

    def _read_Name(self, node: ast.Name) -> sympy.Basic:
        if node.id in FUNCTIONS:
            raise self.error(f"{node.id} is a function: call it, e.g. {node.id}(...)", node)
        return F.symbol_for(node.id)

    def _integer(self, node: ast.AST) -> sympy.Basic:
        return self._checked(self.read(node), node, condition=False)

    def _condition(self, node: ast.AST) -> sympy.Basic:
        return self._checked(self.read(node), node, condition=True)

    def _checked(self, value: sympy.Basic, node: ast.AST, *, condition: bool) -> sympy.Basic:
        """``value`` (read from ``node``), which must be a condition or an integer expression."""
        if condition and not _is_bool(value):
            raise self.error(f"expected a condition, got the integer expression {value}", node)
        if not condition and _is_bool(value):
            raise self.error("expected an integer expression, got a condition", node)
        return value

    @staticmethod
    def _too_large(value: int) -> str:
        return (f"integer too large: {decimal_digits(value)} digits; guards hold integers of at most "
                f"{MAX_INTEGER_DIGITS} digits")

    def _sized(self, value: sympy.Basic, node: ast.AST) -> sympy.Basic:
        """``value`` (a product or power), refused if its numeric coefficient is too large."""
        coefficient = value.as_coeff_Mul()[0]
        for part in (coefficient.p, coefficient.q) if coefficient.is_Rational else ():
            if not integer_fits(part):
                raise self.error(self._too_large(part), node)
        return value

    def _check_power(self, base: sympy.Basic, exponent: sympy.Basic, node: ast.BinOp) -> None:
        """Refuse ``base**exponent`` before computing it when its value could exceed the limit."""
        if not exponent.is_Integer:
            return
        digits = _coefficient_digits(base)
        if not base.is_Number:
            digits = max(digits, math.log10(2))  # a symbol's value may be 2 or more
        if digits > 0 and abs(int(exponent)) > MAX_INTEGER_DIGITS / digits:
            raise self.error(
                f"power too large: its value would have more than {MAX_INTEGER_DIGITS} digits, "
                "the most a guard's integers may have", node,
            )

    def _read_UnaryOp(self, node: ast.UnaryOp) -> sympy.Basic:
        # A chain of unary operators is read from the inside out, without recursion.
        chain = [node]
        while isinstance(chain[-1].operand, ast.UnaryOp):
            chain.append(chain[-1].operand)
        value = self.read(chain[-1].operand)
        for outer in reversed(chain):
            value = self._located(outer, self._unary, outer, value)
        return value

    def _unary(self, node: ast.UnaryOp, operand: sympy.Basic) -> sympy.Basic:
        if isinstance(node.op, ast.USub):
            return self._build(sympy.Mul, sympy.S.NegativeOne, self._checked(operand, node.operand, condition=False))  # exact, floats too
        if isinstance(node.op, ast.UAdd):
            return self._checked(operand, node.operand, condition=False)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return self._build(sympy.Not, self._checked(operand, node.operand, condition=True))
        raise self.error(f"unsupported operator {type(node.op).__name__}", node)

    def _read_BinOp(self, node: ast.BinOp) -> sympy.Basic:
        # ``a + b - c`` nests to the left: the left spine is read bottom-up, without recursion,
        # and each run of one associative operator is built at once (sympy sorts on every build).
        spine = [node]
        while isinstance(spine[-1].left, ast.BinOp):
            spine.append(spine[-1].left)
        spine.reverse()
        value = self.read(spine[0].left)
        start = 0
        while start < len(spine):
            kind = _FLAT_BINARY.get(type(spine[start].op))
            end = start + 1
            while kind is not None and end < len(spine) and _FLAT_BINARY.get(type(spine[end].op)) == kind:
                end += 1
            if kind is None:
                value = self._located(spine[start], self._binary, spine[start], value)
            else:
                value = self._located(spine[start], self._associative, spine[start:end], value)
            start = end
        return value

    def _associative(self, run: list[ast.BinOp], first: sympy.Basic) -> sympy.Basic:
        """``first`` followed by ``run``'s operators and right operands: one sum, product, ``&`` or ``|``."""
        op = run[0].op
        condition = isinstance(op, (ast.BitAnd, ast.BitOr))
        operands = [self._checked(first, run[0].left, condition=condition)]
        digits = _coefficient_digits(first) if isinstance(op, ast.Mult) else 0.0  # of the product's coefficient
        for node in run:
            right = self._checked(self.read(node.right), node.right, condition=condition)
            if isinstance(op, ast.Mult):
                digits += _coefficient_digits(right)
                if digits > MAX_INTEGER_DIGITS + 1:
                    raise self.error(f"product too large: its coefficient would exceed {MAX_INTEGER_DIGITS} digits, "
                                     "the most a guard's integers may have", node)
            operands.append(self._build(sympy.Mul, sympy.S.NegativeOne, right) if isinstance(node.op, ast.Sub) else right)
        if isinstance(op, ast.BitAnd):
            return self._build(sympy.And, *operands)
        if isinstance(op, ast.BitOr):
            return self._build(sympy.Or, *operands)
        if isinstance(op, ast.Mult):
            return self._sized(self._build(F.mul, *operands), run[-1])  # Python's, left to right, once a float is in
        return self._build(F.add, *operands)

    def _binary(self, node: ast.BinOp, left: sympy.Basic) -> sympy.Basic:
        """``left op right`` for an operator that is not associative (``//``, ``%``, ``**``, ``/``)."""
        op = node.op
        left, right = self._checked(left, node.left, condition=False), self._integer(node.right)
        if isinstance(op, ast.FloorDiv):
            return self._build(F.FloorDiv, left, right)
        if isinstance(op, ast.Mod):
            return self._build(F.Mod, left, right)
        if isinstance(op, ast.Pow):
            self._check_power(left, right, node)
            return self._sized(self._build(F.power, left, right), node)
        if isinstance(op, ast.Div):
            if F.float_valued(left) or F.float_valued(right):
                return self._build(F.FloatTrueDiv, left, right)
            if isinstance(right, sympy.Integer):
                if right == 0:
                    raise self.error("division by zero", node.right)
                return self._build(sympy.Mul, left, sympy.Rational(1, int(right)))
            return self._build(F.IntTrueDiv, left, right)
        raise self.error(f"unsupported operator {type(op).__name__} (bitwise operators apply to conditions only)", node)

    def _read_BoolOp(self, node: ast.BoolOp) -> sympy.Basic:
        connective = _python_and if isinstance(node.op, ast.And) else _python_or
        return self._short_circuit(connective, [lambda v=v: self._condition(v) for v in node.values])

    def _read_Compare(self, node: ast.Compare) -> sympy.Basic:
        operands = [self._integer(node.left)] + [self._integer(c) for c in node.comparators]
        parts = []
        for op, left, right in zip(node.ops, operands, operands[1:]):
            build = _COMPARE.get(type(op))
            if build is None:
                raise self.error(f"unsupported comparison {type(op).__name__}", node)
            parts.append(lambda build=build, left=left, right=right: self._build(build, left, right))
        if len(parts) == 1:  # a < b: what And(a < b) folds to, without building it
            return parts[0]()
        return self._short_circuit(_python_and, parts)  # a < b < c is a < b and b < c (b evaluated once)

    def _short_circuit(self, connective: Callable[..., sympy.Basic], operands: list[Callable[[], sympy.Basic]]) -> sympy.Basic:
        """Python's ``and``/``or`` (``connective``) of ``operands``, read in turn. After an
        operand that is a constant ``False`` (``True`` for ``or``), which decides, the rest is
        read for its errors only, as Python compiles what it does not run: its divisions do
        not count."""
        decisive = sympy.false if connective is _python_and else sympy.true
        values = []
        for i, operand in enumerate(operands):
            value = operand()
            values.append(value)
            if value is decisive:
                kept = set(self.divisors)
                for rest in operands[i + 1 :]:
                    rest()
                self.divisors = kept
                break
        return self._build(connective, *values)

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
        operation = CALL_NAMES[name]
        arity = operation.arity
        if arity is not None and len(node.args) != arity:
            raise self.error(f"{name}() takes {arity} argument{'s' * (arity > 1)}, got {len(node.args)}", node)
        if not node.args:
            raise self.error(f"{name}() needs arguments", node)
        read = self._condition if operation.kind is Kind.CONNECTIVE else self._integer
        args = [read(arg) for arg in node.args]
        if name == "PowByNatural":
            self._check_power(*args, node)
            if any(map(F.float_valued, args)):
                build = F.power  # Python's float power: 3.5 ** 0 is 1.0, which sympy's Pow folds to 1
        if name in ("max", "min") and any(map(F.float_valued, args)) and not all(map(F.float_valued, args)):
            raise self.error(
                f"{name}() of an int and a float: Python's returns whichever is {name}imal, so its type "
                f"depends on the values; write {name.capitalize()}() for a float always (as torch.sym_{name}), "
                f"or give every operand one type", node)
        return self._build(build, *args)


_RELATIONS = frozenset(_COMPARE.values())


def _undecidable(lhs: sympy.Basic, rhs: sympy.Basic) -> bool:
    """Whether sympy cannot decide any relation between ``lhs`` and ``rhs``: an integer and an
    opaque term (:func:`_opaque`: ``s0 >= 2``, ``Eq(Mod(s0*s1, 8), 0)``), or two different
    multiples ``k*a`` of opaque terms (``s0 < s1``, ``Eq(4*FloorDiv(s0, 4), s0)``). sympy knows
    such a term is an integer, not its sign nor its size; it is never asked about ``k*a`` against
    an integer, whose parity it knows (``Eq(2*s0, 1)`` is False)."""
    if lhs.is_Integer:
        return _opaque(rhs)
    if rhs.is_Integer:
        return _opaque(lhs)
    return lhs != rhs and _multiple_of_opaque(lhs) and _multiple_of_opaque(rhs)


def _opaque(expr: sympy.Basic) -> bool:
    """An integer symbol with nothing else known, :class:`~shapecore.functions.Mod` or
    :class:`~shapecore.functions.FloorDiv` of a polynomial in them by an integer, or
    :class:`~shapecore.functions.Max` or :class:`~shapecore.functions.Min` of such polynomials."""
    kind = type(expr)
    if kind is F.Mod or kind is F.FloorDiv:
        p, m = expr.args
        return m.is_Integer and _polynomial(p)
    if kind is F.Max or kind is F.Min:
        return all(map(_polynomial, expr.args))
    return _plain_symbol(expr)


def _multiple_of_opaque(expr: sympy.Basic) -> bool:
    """``k*a`` for an integer ``k`` and an opaque term ``a`` (``k`` may be 1)."""
    if expr.is_Mul:
        k, expr = expr.as_coeff_Mul()
        if not k.is_Integer:
            return False
    return _opaque(expr)


def _polynomial(expr: sympy.Basic) -> bool:
    if expr.is_Add or expr.is_Mul:
        return all(map(_polynomial, expr.args))
    return expr.is_Integer or _plain_symbol(expr)


def _plain_symbol(expr: sympy.Basic) -> bool:
    return expr.is_Symbol and expr == F.int_symbol(expr.name)


def _python_and(*parts: sympy.Basic, evaluate: bool = True) -> sympy.Basic:
    """Python's ``parts[0] and parts[1] and …``: :class:`~shapecore.functions.PythonAnd`, or the
    strict ``And`` where that is the same (:func:`shapecore.rewrite.strict_suffices`)."""
    build = sympy.And if strict_suffices(parts) else F.PythonAnd
    return build(*parts, evaluate=evaluate)


def _python_or(*parts: sympy.Basic, evaluate: bool = True) -> sympy.Basic:
    """Python's ``parts[0] or parts[1] or …`` (see :func:`_python_and`)."""
    build = sympy.Or if strict_suffices(parts) else F.PythonOr
    return build(*parts, evaluate=evaluate)


@functools.lru_cache(maxsize=1 << 16)
def parse(text: str) -> sympy.Basic:
    """Read one expression or guard from ``text`` (torch's syntax or Python's).

    >>> parse("Eq(Mod(s0, 8), 0)")
    Eq(Mod(s0, 8), 0)
    >>> parse("s0 % 8 == 0 and s0 >= 16")
    Eq(Mod(s0, 8), 0) & (s0 >= 16)
    """
    if not isinstance(text, str):
        raise ArgumentError(f"parse() takes guard text, got {type(text).__name__}")
    if _plain_name(text):  # what reading its tree gives, without building one
        return F.symbol_for(text)
    builder = _Builder()
    quick = read_common(text, builder._build, _python_and, _python_or)
    if quick is None or builder.divisors and (builder.divisors - divisors(quick) or short_circuit(quick)):
        return _read_in_full(text)  # outside the common grammar, or folding dropped a division
    return quick


def _read_in_full(text: str) -> sympy.Basic:
    """:func:`parse` by Python's parser and the general reader: every guard, and every error."""
    _check_characters(text)
    reader = _Reader(text)
    if not text.strip():
        raise reader.error("empty expression: expected a guard such as Eq(Mod(s0, 8), 0)")
    try:
        tree = ast.parse(reader.source, mode="eval")
    except SyntaxError as exc:
        raise reader.error(f"syntax error: {exc.msg}", line=exc.lineno or 1, offset=(exc.offset or 1) - 1) from None
    except (RecursionError, MemoryError):  # Python's parser gave up: a chain of thousands of operators
        raise reader.error(
            "expression too deeply nested for Python's parser (a chain of about 3,000 operators, such as a "
            "sum of 3,000 terms, is the most it takes): split it into several guards"
        ) from None
    if isinstance(tree.body, ast.Tuple):
        raise reader.error("expected one expression, got several separated by commas", tree.body)
    if len(reader.source) > _SHALLOW:
        _check_nesting(tree.body, reader)
    result = reader.read(tree)
    # Folding dropped a division: read again, keeping them. Under Python's and/or a division
    # may also be dropped where another part still divides by the same thing, but only when
    # that part is reached (``x == (0 // x) % 1 or 1 != 0 // x`` raises at x = 0).
    if reader.divisors - divisors(result):
        return _read_keeping_divisions(text, tree)
    if reader.divisors and short_circuit(result):
        kept = _read_keeping_divisions(text, tree)
        # Kept, each part may divide by what it did; where that made every connective strict,
        # the text it prints reads as the same function folded: read that, so it prints back.
        return kept if short_circuit(kept) else parse(str(kept))
    return result


def _plain_name(text: str) -> bool:
    """Whether ``text`` is a name alone that reads as a symbol: an ASCII identifier (Python
    normalizes others), no keyword (``True``, ``not``), no function name (refused alone)."""
    return text.isascii() and text.isidentifier() and not keyword.iskeyword(text) and text not in FUNCTIONS


_SHALLOW = (MAX_NESTING - 10) // 2
"""Length of text (left-stripped) too short to nest :data:`MAX_NESTING` levels, unchecked. On a
path down the tree each node with a position spans less text than the one above it, and the
nodes without one (``comprehension``, ``arguments``) each sit between two that have; f-strings,
whose parts share their position in Python 3.11, nest four deep at most. So ``n`` characters
nest at most ``2*n + 10`` levels."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_characters(text: str) -> None:
    """Refuse lone surrogates: what Python makes of bytes that are not UTF-8 (in argv, say)."""
    found = None if text.isascii() else _SURROGATE.search(text)
    if found is not None:
        line = text.count("\n", 0, found.start()) + 1
        column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
        raise ParseError(
            f"character U+{ord(found.group()):04X} is not text (a byte that is not UTF-8?): guards are UTF-8 text",
            text=text, line=line, column=column, token=found.group(),
        )


def _check_nesting(root: ast.AST, reader: _Reader) -> None:
    """Refuse trees nested deeper than :data:`MAX_NESTING` (a chain of one operator is one level)."""
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise reader.error(
                f"expression nested more than {MAX_NESTING} levels deep (a chain of one operator, such as a "
                "long sum, counts as one level): split it into several guards", node,
            )
        for child in ast.iter_child_nodes(node):
            stack.append((child, depth if _continues_chain(node, child) else depth + 1))


def _continues_chain(parent: ast.AST, child: ast.AST) -> bool:
    """Whether ``child`` extends ``parent``'s chain, which the reader and sympy keep flat."""
    if isinstance(parent, ast.BinOp) and isinstance(child, ast.BinOp) and child is parent.left:
        kind = _FLAT_BINARY.get(type(parent.op))
        return kind is not None and kind == _FLAT_BINARY.get(type(child.op))
    if isinstance(parent, ast.UnaryOp) and isinstance(child, ast.UnaryOp):
        return True
    return isinstance(child, (ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context))


def _read_keeping_divisions(text: str, tree: ast.Expression) -> sympy.Basic:
    """``tree`` read with every division kept, in the form whose printed text reads back the same.

    Kept (unevaluated) nodes may print in an order or grouping that reads back differently,
    so the printed text is read again until it is stable: then printing and parsing (a JSON
    round trip) gives the same text.
    """
    result = _Reader(text, keep_divisions=True).read(tree)
    for _ in range(_STABLE_AFTER):
        printed = str(result)
        again = _Reader(printed, keep_divisions=True).read(ast.parse(printed, mode="eval"))
        if str(again) == printed:
            return again
        result = again
    return result


_STABLE_AFTER = 4  # readings at most; two suffice in practice


@functools.lru_cache(maxsize=1 << 14)
def named_symbols(text: str) -> frozenset[sympy.Symbol]:
    """Every symbol ``text`` names, also those its parsed form folded away.

    >>> parse("Eq(s1, s1) | (s0 > 2)"), sorted(map(str, named_symbols("Eq(s1, s1) | (s0 > 2)")))
    (True, ['s0', 's1'])
    """
    parse(text)  # the same errors as parse
    names = _names_by_tokens(text)
    return frozenset(map(F.symbol_for, _names_by_tree(text) if names is None else names))


def _names_by_tree(text: str) -> set[str]:
    """The names in parsed ``text`` that are not called."""
    tree = ast.parse(text.lstrip(), mode="eval")
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in called}


_WORD = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*\()")
"""A word not inside a number (``1e5``, ``0x1f``) and not called."""
_KEYWORDS = frozenset(keyword.kwlist)


def _names_by_tokens(text: str) -> set[str] | None:
    """:func:`_names_by_tree` of text that parses, read off its words; None where that is unsure.

    What parses has no string, attribute or comprehension, so its words are names, keywords
    (``and``, ``True``) or called functions, except in text with a comment, a backslash (a
    line continuation before a call's parenthesis) or non-ASCII letters (normalized by Python).
    """
    if not text.isascii() or "#" in text or "\\" in text:
        return None
    return set(_WORD.findall(text)) - _KEYWORDS
