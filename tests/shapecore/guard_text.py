"""Random guard text for differential tests: integer expressions and claims over a small box.

Choices come from a :class:`Chooser`: hypothesis in the tests (so it can shrink what it finds),
a seeded :class:`RandomChooser` in ``bench/fuzz.py`` (so a run is reproducible). Text is in
torch's syntax, Python's or both; integers, and now and then a float literal (compared exactly
with integers beyond a double's precision: boxes are sometimes shifted there); divisors often
vanish inside the box; and
:meth:`GuardWriter.trap` writes the shapes constant folding has erased zero divisors from
(``x//y - x//y >= 0``, ``Mod(x//y, -1)``, ``Or(Ne(2*x, 5), x//y > 0)``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from tests.shapecore.oracle import Box

__all__ = [
    "Chooser",
    "RandomChooser",
    "GuardWriter",
    "chance",
    "divisibility",
    "extra_fact",
    "pick",
    "random_box",
    "random_style",
    "range_texts",
]


class Chooser(Protocol):
    """Where choices come from; every choice shrinks toward ``lo``."""

    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """Choices from a seeded ``random.Random``: the same seed gives the same queries."""

    def __init__(self, seed: object) -> None:
        self._random = random.Random(str(seed))

    def integer(self, lo: int, hi: int) -> int:
        return self._random.randint(lo, hi)


def pick(choose: Chooser, options: Sequence):
    """One of ``options``; shrinks toward the first."""
    return options[choose.integer(0, len(options) - 1)]


def chance(choose: Chooser, percent: int) -> bool:
    """True with probability ``percent``/100; shrinks to False."""
    return choose.integer(0, 99) >= 100 - percent


_INTERVALS = ((-6, 6), (0, 12), (1, 8), (-3, 3), (2, 9), (0, 0), (-8, -1), (5, 5))
# Where a double's precision runs out: sizes near these compare with floats only exactly
_BIG_OFFSETS = (2**53, 10**16, 5 * 10**17 - 6, 62999999999999999990, 2**64 - 6, -(2**60))
_SMALL_FLOATS = ("0.5", "1.5", "-2.0", "0.1", "2.5", "1e-3", "3.0")
_RELATIONS = (("Eq", "=="), ("Ne", "!="), ("Lt", "<"), ("Le", "<="), ("Gt", ">"), ("Ge", ">="))


def random_box(choose: Chooser, names: Sequence[str]) -> Box:
    """Each of ``names`` over a small interval (at most 13 values; single points included),
    now and then all shifted to where a double can no longer hold every integer (``2**53``,
    ``10**16``, …), so that comparisons with float literals must be exact."""
    offset = pick(choose, _BIG_OFFSETS) if chance(choose, 10) else 0
    intervals = []
    for name in names:
        if chance(choose, 50):
            lo, hi = pick(choose, _INTERVALS)
        else:
            lo = choose.integer(-8, 6)
            hi = lo + choose.integer(0, 12)
        intervals.append((name, offset + lo, offset + hi))
    return Box(tuple(intervals))


class GuardWriter:
    """Integer expressions and claims as text over ``box``'s symbols.

    ``style`` is ``torch``, ``python`` or ``mixed`` (a syntax per node). Divisors are often
    a symbol, ``v - c`` with ``c`` inside ``v``'s interval, or ``v - w``: zero somewhere in
    the box.
    """

    def __init__(self, choose: Chooser, box: Box, style: str) -> None:
        self.choose = choose
        self.box = box
        self.style = style

    def _torch(self) -> bool:
        return self.style == "torch" or (self.style == "mixed" and chance(self.choose, 50))

    def literal(self, lo: int = -8, hi: int = 8) -> str:
        """An integer literal in ``[lo, hi]``, parenthesized when negative."""
        value = self.choose.integer(lo, hi)
        return f"({value})" if value < 0 else str(value)

    def symbol(self) -> str:
        return pick(self.choose, self.box.names)

    def atom(self) -> str:
        if chance(self.choose, 5):
            return self.float_literal()
        return self.symbol() if chance(self.choose, 65) else self.literal()

    def float_literal(self) -> str:
        """A float literal: a small one (``0.5``), or the double nearest a value in or beside
        the box, written as Python would (``5e+17``) or as a user would (``500000000000000003.0``)."""
        c = self.choose
        if chance(c, 40):
            return f"({pick(c, _SMALL_FLOATS)})"
        _, lo, hi = pick(c, self.box.intervals)
        value = c.integer(lo - 2, hi + 2)
        text = repr(float(value)) if chance(c, 50) else f"{value}.0"
        return f"({text})" if value < 0 else text

    def divisor(self, depth: int) -> str:
        """A divisor: a constant, or (mostly) one that is zero somewhere in the box."""
        c = self.choose
        kind = c.integer(0, 5)
        if kind == 0:  # 0 rarely: text that divides by a literal zero may be refused outright
            value = pick(c, (1, -1, 2, 3, 4, -2, 8, 5, -3, 0) if chance(c, 20) else (1, -1, 2, 3, 4, -2, 8, 5, -3))
            return f"({value})" if value < 0 else str(value)
        if kind == 1:
            return self.symbol()
        if kind == 3 and len(self.box.names) > 1:
            first = self.symbol()
            return f"({first} - {pick(c, [n for n in self.box.names if n != first])})"
        if kind in (2, 3):
            name, lo, hi = pick(c, self.box.intervals)
            return f"({name} - {self.literal(lo, hi)})"
        return self.expr(max(depth - 1, 0))

    def expr(self, depth: int) -> str:
        """An integer expression of at most ``depth`` levels over the whole vocabulary."""
        c = self.choose
        if depth <= 0 or chance(c, 25):
            return self.atom()
        a = lambda: self.expr(depth - 1)  # noqa: E731 - a fresh operand each call
        kind = c.integer(0, 13)
        torch = self._torch()
        if kind == 0:
            return f"({a()} + {a()})"
        if kind == 1:
            return f"({a()} - {a()})"
        if kind == 2:
            return f"({self.literal()}*{a()})"
        if kind == 3:
            return f"({a()}*{a()})"
        if kind == 4:
            return f"(-{a()})"
        if kind == 5:
            k = c.integer(0, 3)
            return f"PowByNatural({a()}, {k})" if torch and chance(c, 30) else f"({a()})**{k}"
        if kind in (6, 7):
            base, d = a(), self.divisor(depth)
            if not torch:
                return f"({base} // {d})"
            return f"FloorDiv({base}, {d})" if chance(c, 50) else f"(({base})//({d}))"
        if kind == 8:
            d = self.divisor(depth)
            base = f"({d}*{a()})" if chance(c, 50) else a()  # exact, as CleanDiv promises, or not
            return f"CleanDiv({base}, {d})" if torch else f"({base} // {d})"
        if kind == 9:
            base, d = a(), self.divisor(depth)
            return f"CeilDiv({base}, {d})" if torch else f"(-((-{base}) // {d}))"
        if kind in (10, 11):
            base, d = a(), self.divisor(depth)
            if not torch:
                return f"({base} % {d})"
            return f"{pick(c, ('Mod', 'PythonMod'))}({base}, {d})"
        if kind == 12:
            base, d, m = a(), self.divisor(depth), self.divisor(depth)
            return f"ModularIndexing({base}, {d}, {m})" if torch else f"(({base} // {d}) % {m})"
        args = ", ".join(a() for _ in range(c.integer(2, 3)))
        name = pick(c, ("Max", "Min"))
        return f"{name}({args})" if torch else f"{name.lower()}({args})"

    def relation(self, depth: int) -> str:
        """A comparison of two expressions (now and then a chained one, in Python's syntax;
        now and then of a float literal, or a sum with one, with an expression)."""
        c = self.choose
        (name, op), left, right = pick(c, _RELATIONS), self.expr(depth), self.expr(depth)
        if chance(c, 10):
            left = self.float_literal() if chance(c, 50) else f"({left} + {self.float_literal()})"
        if self._torch():
            if name in ("Eq", "Ne") or chance(c, 40):
                return f"{name}({left}, {right})"
            return f"({left} {op} {right})"
        if chance(c, 10):  # a chained comparison: Python's short circuit
            op2 = pick(c, _RELATIONS)[1]
            return f"({left} {op} {right} {op2} {self.expr(depth)})"
        return f"({left} {op} {right})"

    def claim(self, depth: int) -> str:
        """Relations under ``And``/``Or``/``Not`` (``& | ~``, or Python's ``and``/``or``/``not``)."""
        c = self.choose
        if depth <= 0 or chance(c, 45):
            return self.relation(max(depth, 1))
        kind = c.integer(0, 2)
        if kind == 0:
            inner = self.claim(depth - 1)
            if self._torch():
                return f"~{inner}" if chance(c, 50) else f"Not({inner})"
            return f"(not {inner})"
        parts = [self.claim(depth - 1) for _ in range(c.integer(2, 3 if kind == 1 else 2))]
        name, symbol, word = ("And", "&", "and") if kind == 1 else ("Or", "|", "or")
        if self._torch() and chance(c, 50):
            return f"{name}({', '.join(parts)})"
        if not self._torch() and chance(c, 15):  # Python's keyword: a short circuit
            return "(" + f" {word} ".join(parts) + ")"
        return "(" + f" {symbol} ".join(parts) + ")"

    def fragile(self) -> str:
        """An integer expression whose divisor vanishes somewhere in the box."""
        name, lo, hi = pick(self.choose, self.box.intervals)
        d = pick(self.choose, (name, f"({name} - {self.literal(lo, hi)})"))
        base = self.expr(1)
        return f"({base} // {d})" if chance(self.choose, 50) else f"Mod({base}, {d})"

    def trap(self) -> str:
        """A claim constant folding could decide while erasing the zero divisor in it."""
        c = self.choose
        e = self.fragile()
        name = self.symbol()
        shapes = (
            f"{e} - {e} >= 0",
            f"Eq(Mod({e}, {pick(c, ('-1', '1'))}), 0)",
            f"{e} % 1 == 0",
            f"Or(Ne(2*{name}, {2 * c.integer(-4, 4) + 1}), {e} > 0)",
            f"Eq({e}*0, 0)",
            f"({e})**0 == 1",
            f"Eq({e}, {e})",
            f"{e} <= {e}",
            f"Ne({e}, {e} + 1)",
            f"Eq(Max({e}, {e}), {e})",
            f"Eq(FloorDiv({e}, 1), {e})",
            f"Eq(FloorDiv({e}, -1), -{e})",
            f"Or({e} > 0, True)",
            f"({e} > 0) | ~({e} > 0)",
            f"Or({e} >= 1, {e} < 1)",
            f"Not(And({e} > 0, {e} <= 0))",
            f"Not(And({name} > {name}, {e} > 0))",
            f"Or({name} >= {name}, {e} > 0)",
            f"Eq(Mod(0, {e}), 0)",
            f"Eq(FloorDiv(0, {e}), 0)",
            f"Mod({name}, {name} - {name}) >= 0",
        )
        return pick(c, shapes)

    def division(self, name: str) -> str:
        """``name`` under one operation that divides or clamps, mostly by a constant (a symbol
        now and then, zero somewhere in the box), scaled and shifted now and then: the
        right-hand sides of torch's size definitions."""
        c = self.choose
        k = pick(c, (16, 2, 3, 4, 8, 5)) if chance(c, 85) else self.divisor(0)
        kind, torch = c.integer(0, 5), self._torch()
        if kind == 0:
            term = f"CeilDiv({name}, {k})" if torch else f"(-((-{name}) // {k}))"
        elif kind == 1:
            term = f"FloorDiv({name}, {k})" if torch else f"({name} // {k})"
        elif kind == 2:
            term = f"Mod({name}, {k})" if torch else f"({name} % {k})"
        elif kind == 3:
            m = pick(c, (2, 4, 8, 3))
            term = f"ModularIndexing({name}, {k}, {m})" if torch else f"(({name} // {k}) % {m})"
        else:
            term = f"{pick(c, ('Max', 'Min'))}({name}, {self.literal(-2, 8)})"
            term = term if torch else term.lower()
        if chance(c, 20):
            term = f"({c.integer(2, 3)}*{term} + {self.literal(-2, 2)})"
        return term

    def any_claim(self) -> str:
        """A random claim, or one time in four a :meth:`trap`."""
        return self.trap() if chance(self.choose, 25) else self.claim(self.choose.integer(1, 3))


def random_style(choose: Chooser) -> str:
    """``torch``, ``python`` or ``mixed``: the syntax of a :class:`GuardWriter`."""
    return pick(choose, ("torch", "python", "mixed"))


def range_texts(choose: Chooser, name: str, lo: int, hi: int) -> list[str]:
    """``lo <= name <= hi`` as facts, in one of the ways users and torch write it."""
    form = choose.integer(0, 4)
    if form == 0:
        return [f"{name} >= {lo}", f"{name} <= {hi}"]
    if form == 1:
        return [f"Ge({name}, {lo})", f"Le({name}, {hi})"]
    if form == 2:
        return [f"{lo} <= {name} <= {hi}"]
    if form == 3:
        return [f"And({name} >= {lo}, {name} <= {hi})"]
    return [f"({name} >= {lo}) & ({name} <= {hi})"]


def extra_fact(writer: GuardWriter) -> str:
    """A fact of the kinds torch records (congruence, order, exclusion), or any small claim."""
    c = writer.choose
    kind = c.integer(0, 3)
    name = writer.symbol()
    if kind == 0:
        return divisibility(c, name)
    if kind == 1:
        (rel, _), other = pick(c, _RELATIONS), writer.symbol()
        return f"{rel}({name}, {other})"
    if kind == 2:
        return f"Ne({name}, {writer.literal()})"
    return writer.claim(1)


def divisibility(choose: Chooser, name: str) -> str:
    """``name`` in a residue class, as torch or Python writes it."""
    m = choose.integer(2, 4)
    r = choose.integer(0, m - 1)
    return f"Eq(Mod({name}, {m}), {r})" if chance(choose, 50) else f"{name} % {m} == {r}"
