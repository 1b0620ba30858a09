"""Quick proving: plain queries in text decided before any sympy work.

Most queries :func:`shapecore.prove` is asked are short: a linear relation between sizes
(``s0 < s2`` from ``s0 < s1, s1 < s2``), divisibility by a constant (``Eq(Mod(b*s, 8), 0)``
from ``Eq(Mod(b, 4), 0)``), a bound through a floor division. Parsing them into sympy and
digesting them costs several times what answering does. :func:`decide` reads the claim and
the facts straight into integer polynomials over names and the atoms ``Mod(e, k)`` and
``FloorDiv(e, k)`` (``e % k``, ``e // k``) for an integer ``k > 0`` (``e`` reduced modulo ``k``:
``(x + 8) // 8`` is ``x // 8 + 1``; ``(x // 2) // 8`` is ``x // 16``) and ``Max(a, b)``,
``Min(a, b)``, and decides with the reasoner's cheap layers in small:

* a residue class (:class:`~shapecore.modular.ModularSet`) per name, from facts
  ``Eq(Mod(a*x + b, m), r)`` and linear equalities (``Eq(s1, 4*s0)``: ``s1 ≡ 0 mod 4``);
* an interval per name, from its range and facts ``a*x + b <rel> 0``, tightened to its class
  and by difference bounds ``x - y <= c`` (shortest paths over the few names of a query);
* for the claim's ``d = lhs - rhs``: ``Eq``/``Ne`` by ``d``'s residue class alone, then,
  where ``d`` is linear, the bound that pairs names through their paths, each
  ``FloorDiv(e, k)`` read as ``(e - r)/k`` with ``r`` in ``[0, k - 1]`` and ``Max``/``Min``
  split by cases, and the interval of ``d`` from its monomials'; the bounds tightened to
  ``d``'s class.

The reading of each text is kept (the last 1024 texts: facts recur across queries far more
than claims); :func:`clear_cache` forgets them. Facts the digest cannot read are left out (proving from fewer facts is sound). A claim that
is not proved is tried at a few points, each name at the lowest value its bounds and class
allow, then a step higher: a point where every fact holds and the claim does not, by exact
evaluation, refutes it.

The grammar is a part of :mod:`shapecore.quick_parsing`'s: integers, names, ``+ - * // %``,
parentheses, calls of ``Mod`` and ``FloorDiv`` and of ``Max``/``Min`` (``max``/``min``) on two
arguments, and one comparison (``< <= > >= == !=``, or ``Eq``/``Ne``). Whatever is outside
it, facts that contradict each other, and every query not decided here get None: the
reasoner decides those (and reports errors) as before.
"""

from __future__ import annotations

import functools
import keyword
import math
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy

from shapecore.functions import FLOAT_SYMBOL_NAME
from shapecore.modular import ANY, ModularSet, combine_congruences, solve_linear_congruence, tighten
from shapecore.operations import CALL_NAMES
from shapecore.parsing import integer_fits
from shapecore.quick_parsing import INTEGER, MOST_DIGITS, MOST_TOKENS, NAME
from shapecore.ranges import INF, ValueRange, decide_difference

__all__ = ["QuickAnswer", "clear_cache", "decide"]

Atom = tuple  # ("", name, 0) for a name, ("%" or "//", polynomial as sorted items, k)
Polynomial = dict  # monomial (a sorted tuple of atoms) -> nonzero int coefficient

_RELATIONS = {"<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge, "==": sympy.Eq, "!=": sympy.Ne,
              "Eq": sympy.Eq, "Ne": sympy.Ne}
_COMPARISONS = {sympy.Lt: operator.lt, sympy.Le: operator.le, sympy.Gt: operator.gt, sympy.Ge: operator.ge,
                sympy.Eq: operator.eq, sympy.Ne: operator.ne}
_INFIX = frozenset(("<", "<=", ">", ">=", "==", "!="))
_ATOM_CALLS = {"Mod": "%", "FloorDiv": "//"}
_EXTREMES = {"Max": "max", "max": "max", "Min": "min", "min": "min"}
_SPLITS = 4  # Max/Min atoms split by cases per bound; past that the interval bounds them
_SENSES = {sympy.Le: ((1, 0),), sympy.Lt: ((1, 1),), sympy.Ge: ((-1, 0),), sympy.Gt: ((-1, 1),),
           sympy.Eq: ((1, 0), (-1, 0)), sympy.Ne: ()}
"""Per relation of ``d`` to 0, each ``(sign, strict)`` with ``sign*d <= -strict`` (integers)."""
_TOKEN = re.compile(r"\w+|//|[=!<>]=|\S", re.ASCII)
"""A word (a name or an integer, checked after), a two-character operator or any other character."""
_NAME_START = frozenset("_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NAME = re.compile(NAME)
"""A name token of :mod:`shapecore.quick_parsing`'s grammar."""
_SIMPLE = re.compile(rf"Eq\(Mod\(({NAME}), ({INTEGER})\), ({INTEGER})\)|({NAME}) ([<>]=?|[=!]=) ({NAME}|{INTEGER})")
"""The texts most facts are, written as torch writes them: ``Eq(Mod(x, k), r)``, ``x < y``, ``x >= n``."""
_CANDIDATES = 2  # points tried for a counterexample: lowest values, then a step higher


@dataclass(frozen=True)
class QuickAnswer:
    """``status`` ("proved" or "refuted"), the layer that decided, and the counterexample."""

    status: str
    method: str
    counterexample: dict[str, int] | None = None


class _Outside(Exception):
    """Not in the grammar, or facts that contradict each other: the reasoner decides."""


# -- reading ----------------------------------------------------------------------------------


class _Reader:
    """Python's precedence over the grammar of this module: sums of products of factors."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.names: set[str] = set()  # every name read, whether or not it survives in a polynomial

    def relation(self) -> tuple[type, Polynomial]:
        """``(relation, lhs - rhs)`` of the whole text."""
        tokens = self.tokens
        token = tokens[0]
        if (token == "Eq" or token == "Ne") and tokens[1] == "(":
            self.at = 1
            lhs, rhs = self.arguments(-1)
        else:
            lhs = self.sum()
            token = tokens[self.at]
            if token not in _INFIX:
                raise _Outside
            self.at += 1
            rhs = self.sum(-1)
        if tokens[self.at] is not None:  # a chained comparison, or more
            raise _Outside
        return _RELATIONS[token], _add_into(lhs, rhs.items(), 1)  # lhs - rhs (rhs read negated)

    def arguments(self, sign: int = 1) -> tuple[Polynomial, Polynomial]:
        """The two arguments of the call whose ``(`` is here (the second times ``sign``)."""
        self.at += 1
        first = self.sum()
        self.expect(",")
        second = self.sum(sign)
        self.expect(")")
        return first, second

    def expect(self, token: str) -> None:
        if self.tokens[self.at] != token:
            raise _Outside
        self.at += 1

    def sum(self, outer: int = 1) -> Polynomial:
        """The sum here, times ``outer`` (1 or -1)."""
        tokens = self.tokens
        total = self.product()  # a new dict, as every part read is
        if outer != 1:
            total = {monomial: -c for monomial, c in total.items()}
        token = tokens[self.at]
        while token == "+" or token == "-":
            self.at += 1
            _add_into(total, self.product().items(), outer if token == "+" else -outer)
            token = tokens[self.at]
        return total

    def product(self) -> Polynomial:
        value = self.factor()
        tokens = self.tokens
        while True:
            operator = tokens[self.at]
            if operator != "*" and operator != "//" and operator != "%":
                return value
            self.at += 1
            right = self.factor()
            value = _multiply(value, right) if operator == "*" else _atom(operator, value, right)

    def factor(self) -> Polynomial:
        tokens = self.tokens
        negate = False
        token = tokens[self.at]
        while token == "-":
            negate = not negate
            self.at += 1
            token = tokens[self.at]
        self.at += 1
        if token is None:
            raise _Outside
        first = token[0]
        if "0" <= first <= "9":  # quick_parsing's integers: not 2x, 1_000, 007 or longer than it reads
            if not token.isdigit() or first == "0" and len(token) > 1 or len(token) > MOST_DIGITS:
                raise _Outside
            value = {(): int(token)} if first != "0" else {}
        elif token == "(":
            value = self.sum()
            self.expect(")")
        elif first not in _NAME_START:  # an operator out of place, or a character outside the grammar
            raise _Outside
        elif token in _EXTREMES and tokens[self.at] == "(":
            value = _extreme(_EXTREMES[token], *self.arguments())
        elif token in _ATOM_CALLS and tokens[self.at] == "(":
            value = _atom(_ATOM_CALLS[token], *self.arguments())
        elif _plain_name(token):
            self.names.add(token)
            value = {(("", token, 0),): 1}
        else:
            raise _Outside  # another function, a function name alone, True, a float symbol
        return {monomial: -c for monomial, c in value.items()} if negate else value


@functools.lru_cache(maxsize=1024)
def _read(text: str) -> tuple[type, Polynomial, frozenset[str]] | None:
    """``(relation, lhs - rhs, every name read)`` of ``text``, or None outside the grammar; kept
    for the last 1024 texts read (facts recur across queries), so the polynomial is never mutated."""
    try:
        simple = _SIMPLE.fullmatch(text)
        if simple is not None:
            name, k, r, left, operator, right = simple.groups()
            if name is not None and _plain_name(name):
                p = _atom("%", {(("", name, 0),): 1}, {(): int(k)})
                return sympy.Eq, _plus(p, (((), int(r)),), -1) if r != "0" else p, frozenset((name,))
            if left is not None and _plain_name(left):
                if not right[0].isdigit():
                    if _plain_name(right):
                        p = _plus({(("", left, 0),): 1}, (((("", right, 0),), 1),), -1)
                        return _RELATIONS[operator], p, frozenset((left, right))
                else:
                    p = {(("", left, 0),): 1}
                    return _RELATIONS[operator], _plus(p, (((), int(right)),), -1) if right != "0" else p, frozenset((left,))
        reader = _Reader(text)
        relation, p = reader.relation()
    except _Outside:
        return None
    return relation, p, frozenset(reader.names)


def clear_cache() -> None:
    """Forget the texts read (to time a first read)."""
    _read.cache_clear()


def _tokens(text: str) -> list:
    """The tokens of ``text``, then None; :class:`_Outside` if there are more than
    :mod:`shapecore.quick_parsing` reads. Each token is checked where it is read: an operator
    by equality, a word by :meth:`_Reader.factor` (every token of a text read is one or the other)."""
    if not text.isprintable():  # a tab or a line break: the reasoner reads (or refuses) it
        raise _Outside
    tokens: list = _TOKEN.findall(text)
    if len(tokens) > MOST_TOKENS:
        raise _Outside
    tokens.append(None)
    return tokens


@functools.lru_cache(maxsize=256)
def _plain_name(word: str) -> bool:
    """Whether ``word`` (a name token) reads as the integer symbol of that name."""
    return word not in CALL_NAMES and not keyword.iskeyword(word) and (word[0] != "z" or FLOAT_SYMBOL_NAME.fullmatch(word) is None)


def _scale(p: Polynomial, k: int) -> Polynomial:
    return {monomial: c * k for monomial, c in p.items()} if k else {}


def _multiply(p: Polynomial, q: Polynomial) -> Polynomial:
    total: Polynomial = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            monomial = tuple(sorted(m1 + m2)) if m1 and m2 else m1 or m2
            c = total.get(monomial, 0) + c1 * c2
            if c:
                total[monomial] = c
            else:
                total.pop(monomial, None)
    return total


def _atom(operator: str, value: Polynomial, divisor: Polynomial) -> Polynomial:
    """``value % divisor`` or ``value // divisor`` for a constant divisor ``k > 0``, with each
    coefficient ``q*k + r`` of ``value`` reduced (``(k*A + B) // k == A + B // k`` and
    ``(k*A + B) % k == B % k`` for an integer ``A``), ``(e // j) // k`` as ``e // (j*k)`` and
    ``(e % j) % k`` as ``e % k`` where ``k`` divides ``j``."""
    if len(divisor) != 1 or () not in divisor or divisor[()] <= 0:
        raise _Outside  # a symbolic, zero or negative divisor: the reasoner decides
    k = divisor[()]
    quotient: Polynomial = {}
    remainder: Polynomial = {}
    for monomial, c in value.items():
        q, r = divmod(c, k)
        if q:
            quotient[monomial] = q
        if r:
            remainder[monomial] = r
    if not remainder or len(remainder) == 1 and () in remainder:  # a number n in [0, k - 1]
        n = remainder.get((), 0)
        return ({(): n} if n else {}) if operator == "%" else quotient
    if len(remainder) == 1:
        ((monomial, c),) = remainder.items()
        if c == 1 and len(monomial) == 1 and monomial[0][0] == operator:
            _, nested, j = monomial[0]
            if operator == "//":
                return _plus(_atom("//", dict(nested), {(): j * k}), tuple(quotient.items()), 1)
            if j % k == 0:
                return _atom("%", dict(nested), divisor)
    atom = ((operator, tuple(sorted(remainder.items())), k),)
    return {atom: 1} if operator == "%" else _plus(quotient, ((atom, 1),), 1)


def _extreme(kind: str, first: Polynomial, second: Polynomial) -> Polynomial:
    """``Max(first, second)`` or ``Min``, of two integers."""
    if first == second:
        return first
    if all(not monomial for monomial in (*first, *second)):  # two numbers
        value = (max if kind == "max" else min)(first.get((), 0), second.get((), 0))
        return {(): value} if value else {}
    return {((kind, (tuple(sorted(first.items())), tuple(sorted(second.items()))), 0),): 1}


# -- evaluation ---------------------------------------------------------------------------------


def _value(p: Polynomial | tuple, point: Mapping[str, int]) -> int:
    """``p`` (or its sorted items) at ``point``, exactly."""
    total = 0
    for monomial, c in p.items() if type(p) is dict else p:
        for atom in monomial:
            kind, inner, k = atom
            if not kind:
                c *= point[inner]
            elif kind == "%":
                c *= _value(inner, point) % k
            elif kind == "//":
                c *= _value(inner, point) // k
            else:
                c *= (max if kind == "max" else min)(_value(inner[0], point), _value(inner[1], point))
        total += c
    return total


def _holds(relation: type, p: Polynomial, point: Mapping[str, int]) -> bool:
    return _COMPARISONS[relation](_value(p, point), 0)


# -- digest -------------------------------------------------------------------------------------


class _Digest:
    """What the facts say of each name: an interval, a residue class, difference bounds."""

    def __init__(self, names: set[str], ranges: Mapping[str, tuple[int | None, int | None]]) -> None:
        self.lo: dict[str, float | int] = dict.fromkeys(names, -INF)
        self.hi: dict[str, float | int] = dict.fromkeys(names, INF)
        self.classes: dict[str, ModularSet] = {}
        self.edges: dict[tuple[str, str], int] = {}  # (y, x) -> c: x - y <= c
        for name, (lo, hi) in ranges.items():
            if lo is not None:
                self.lo[name] = lo
            if hi is not None:
                self.hi[name] = hi
        self.paths: dict[tuple[str, str], float | int] | None = None  # shortest paths, once closed
        self.paired = 0  # pairs of names the last upper bound took through a path

    def add(self, relation: type, p: Polynomial) -> None:
        """Digest ``p <relation> 0``, or leave it out."""
        linear, constant = _linear(p)
        if linear is None:
            if relation is sympy.Eq:
                self._congruence(p)
            return
        for sign, strict in _SENSES[relation]:  # sign*(linear + constant) <= -strict
            self._inequality({x: sign * a for x, a in linear.items()}, -strict - sign * constant)
        if relation is sympy.Eq and len(linear) > 1:
            for x, a in linear.items():  # a*x ≡ -constant modulo the other coefficients' gcd
                g = math.gcd(*(b for y, b in linear.items() if y != x))
                self._restrict(x, solve_linear_congruence(a, -constant, g))

    def _inequality(self, terms: dict[str, int], bound: int) -> None:
        """``sum(a*x) <= bound``: a bound of one name, or an edge between two."""
        if not terms:
            if bound < 0:
                raise _Outside  # the facts contradict each other
        elif len(terms) == 1:
            ((x, a),) = terms.items()
            if a > 0:
                self.hi[x] = min(self.hi[x], bound // a)
            else:
                self.lo[x] = max(self.lo[x], -(bound // -a))
        elif len(terms) == 2:
            (x, a), (y, b) = terms.items()
            if a == -b:
                if a < 0:
                    x, y, a = y, x, b
                key = (y, x)
                self.edges[key] = min(self.edges.get(key, INF), bound // a)

    def _congruence(self, p: Polynomial) -> None:
        """``a*Mod(u*x + v, m) + b == 0`` as a class of ``x``."""
        b = p.get((), 0)
        others = [(monomial, a) for monomial, a in p.items() if monomial]
        if len(others) != 1 or len(others[0][0]) != 1:
            return
        ((kind, inner, m),), a = others[0]
        if kind != "%":
            return
        if b % a or not 0 <= -b // a < m:
            raise _Outside  # a remainder never equals that: a contradiction
        linear, v = _linear(dict(inner))
        if linear is None or len(linear) != 1:
            return
        ((x, u),) = linear.items()
        self._restrict(x, solve_linear_congruence(u, -b // a - v, m))

    def _restrict(self, x: str, congruence: ModularSet | None) -> None:
        if congruence is None:
            raise _Outside
        if congruence.coeff == 1:
            return
        old = self.classes.get(x)
        merged = congruence if old is None else combine_congruences(old, congruence)
        if merged is None:
            raise _Outside
        self.classes[x] = merged

    def close(self) -> None:
        """Tighten the intervals to the classes and through the shortest paths."""
        self._tighten()
        if not self.edges:
            return
        nodes: list[str | None] = [None, *sorted({n for edge in self.edges for n in edge})]
        index = {node: i for i, node in enumerate(nodes)}
        size = len(nodes)
        dist: list[list[float | int]] = [[INF] * size for _ in nodes]  # dist[i][j] bounds nodes[j] - nodes[i]
        for i, x in enumerate(nodes):
            dist[i][i] = 0
            if x is not None:
                dist[0][i] = self.hi[x]  # x - 0 <= hi
                dist[i][0] = -self.lo[x]  # 0 - x <= -lo
        for (y, x), c in self.edges.items():
            row = dist[index[y]]
            row[index[x]] = min(row[index[x]], c)
        for k in range(size):  # Floyd–Warshall: a query has a few names
            through = dist[k]
            for row in dist:
                via = row[k]
                if via == INF:
                    continue
                for j in range(size):
                    length = via + through[j]
                    if length < row[j]:
                        row[j] = length
        if any(dist[i][i] < 0 for i in range(size)):
            raise _Outside  # a negative cycle: the facts contradict each other
        for i, x in enumerate(nodes):
            if x is not None:
                self.hi[x] = min(self.hi[x], dist[0][i])
                self.lo[x] = max(self.lo[x], -dist[i][0])
        self.paths = {(y, x): dist[index[y]][index[x]] for y in nodes for x in nodes if y is not None and x is not None}
        self._tighten()

    def _tighten(self) -> None:
        for x, congruence in self.classes.items():
            r = tighten(ValueRange(self.lo[x], self.hi[x]), congruence)
            self.lo[x], self.hi[x] = r.lo, r.hi
        if any(self.lo[x] > self.hi[x] for x in self.lo):
            raise _Outside  # an empty range: the facts contradict each other

    # -- what the digest says of an expression

    def residue(self, p: Polynomial | tuple) -> ModularSet:
        total = ModularSet(0, 0)
        for monomial, c in p.items() if type(p) is dict else p:
            term = ModularSet(0, c)
            for kind, inner, k in monomial:
                if not kind:
                    term = term * self.classes.get(inner, ANY)
                elif kind == "%":
                    r = self.residue(inner)  # e % k ≡ e (mod k), and e ≡ base (mod coeff): one number if k | coeff
                    term = term * (ModularSet(0, r.base % k) if r.coeff % k == 0 else ModularSet.of(math.gcd(r.coeff, k), r.base))
                elif kind == "//":
                    term = term * ANY
                else:  # one of the two
                    term = term * self.residue(inner[0]).union(self.residue(inner[1]))
            total = total + term
        return total

    def interval(self, p: Polynomial | tuple) -> ValueRange:
        total = ValueRange.point(0)
        for monomial, c in p.items() if type(p) is dict else p:
            term = ValueRange.point(c)
            for kind, inner, k in monomial:
                if not kind:
                    term = term * ValueRange(self.lo[inner], self.hi[inner])
                elif kind == "%":
                    term = term * ValueRange(0, k - 1)
                elif kind == "//":
                    r = self.interval(inner)
                    term = term * ValueRange(r.lo if r.lo == -INF else r.lo // k, r.hi if r.hi == INF else r.hi // k)
                else:
                    a, b = self.interval(inner[0]), self.interval(inner[1])
                    pick = max if kind == "max" else min
                    term = term * ValueRange(pick(a.lo, b.lo), pick(a.hi, b.hi))
            total = total + term
        return total

    def upper(self, p: Polynomial) -> Fraction | float | None:
        """An upper bound of a linear ``p`` pairing names through their paths (:attr:`paired`: how
        many pairs), ``Max``/``Min`` split by cases; None if not linear."""
        self.paired = 0
        return self._upper(p, _SPLITS)

    def _upper(self, p: Polynomial, splits: int) -> Fraction | float | None:
        for monomial, c in p.items():
            if len(monomial) == 1 and monomial[0][0] in ("max", "min"):
                if not splits:
                    return None
                kind, (first, second), _ = monomial[0]
                rest = {m: v for m, v in p.items() if m != monomial}
                # c*Max(a, b) is c*a or c*b (c > 0), or at most both (c < 0); Min the other way round
                bounds = [self._upper(_plus(rest, arg, c), splits - 1) for arg in (first, second)]
                if None in bounds:
                    return None
                return max(bounds) if (kind == "max") == (c > 0) else min(bounds)
        terms: dict[str, Fraction | int] = {}
        remainders: Fraction | int = 0  # the upper bound of the remainders' part
        constant: Fraction | int = 0
        for monomial, c in p.items():
            if not monomial:
                constant += c
                continue
            if len(monomial) != 1:
                return None
            ((kind, inner, k),) = monomial
            if not kind:
                terms[inner] = terms.get(inner, 0) + c
                continue
            linear, v = _linear(dict(inner))
            if linear is None:
                return None
            if kind == "%":  # r in [0, k - 1]
                remainders += c * (k - 1) if c > 0 else 0
                continue
            share = Fraction(c, k) if c % k else c // k  # c*((e - r)/k), r in [0, k - 1]
            constant += share * v
            remainders += -share * (k - 1) if share < 0 else 0
            for x, a in linear.items():
                terms[x] = terms.get(x, 0) + share * a
        positive = {x: a for x, a in terms.items() if a > 0}
        negative = {y: -a for y, a in terms.items() if a < 0}
        paths = self.paths or {}
        total: Fraction | float = constant + remainders
        pairs = []  # (gain, x, y): x - y <= path(y, x), against hi(x) - lo(y) from the intervals
        for x in positive:
            for y in negative:
                path = paths.get((y, x), INF)
                if path != INF:
                    spread = self.hi[x] - self.lo[y]
                    pairs.append((-INF if spread == INF else path - spread, x, y))
        pairs.sort(key=lambda pair: pair[0])
        for gain, x, y in pairs:  # the largest gain first
            if gain >= 0:
                break
            t = min(positive[x], negative[y])
            if t:
                self.paired += 1
                total += t * paths[(y, x)]
                positive[x] -= t
                negative[y] -= t
        for x, a in positive.items():
            total += a * self.hi[x] if a else 0
        for y, a in negative.items():
            total -= a * self.lo[y] if a else 0
        return total


def _plus(p: Polynomial, items: tuple, c: int) -> Polynomial:
    """``p + c*q``, ``q`` given as its sorted items."""
    return _add_into(dict(p), items, c)


def _add_into(total: Polynomial, items: Iterable[tuple], c: int) -> Polynomial:
    """``total += c*q`` in place (``q`` given as its items), returned."""
    for monomial, a in items:
        a = total.get(monomial, 0) + c * a
        if a:
            total[monomial] = a
        else:
            del total[monomial]
    return total


def _linear(p: Polynomial | dict) -> tuple[dict[str, int] | None, int]:
    """``({name: coefficient}, constant)`` of a polynomial linear in names, else ``(None, constant)``."""
    linear: dict[str, int] = {}
    for monomial, c in p.items():
        if not monomial:
            continue
        if len(monomial) != 1 or monomial[0][0]:
            return None, p.get((), 0)
        linear[monomial[0][1]] = c
    return linear, p.get((), 0)


# -- deciding -------------------------------------------------------------------------------------


def decide(claim: str, facts: list[str], ranges: Mapping[str, tuple[int | None, int | None]]) -> QuickAnswer | None:
    """``claim`` under ``facts`` (text) and ``ranges`` (name → ``(lo, hi)``, ints or None), or None."""
    for name, (lo, hi) in ranges.items():  # what the reasoner would refuse or read otherwise, it decides
        if type(name) is not str or _NAME.fullmatch(name) is None or not _plain_name(name):
            return None
        if not (lo is None or integer_fits(lo)) or not (hi is None or integer_fits(hi)):
            return None
    names: set[str] = set(ranges)
    try:
        claim_read = _read(claim)
        if claim_read is None:
            return None
        relation, d, claim_names = claim_read
        names |= claim_names
        read = []
        for fact in facts:
            fact_read = _read(fact)
            if fact_read is None:
                return None
            read.append(fact_read[:2])
            names |= fact_read[2]
        digest = _Digest(names, ranges)
        for fact_relation, p in read:
            digest.add(fact_relation, p)
        digest.close()
        method = _prove(digest, relation, d)
    except (_Outside, ZeroDivisionError, OverflowError):
        return None
    if method is not None:
        return QuickAnswer("proved", method)
    for point in _points(digest):
        if _holds(relation, d, point):
            continue
        if all(_holds(r, p, point) for r, p in read) and all(
            (lo is None or point[x] >= lo) and (hi is None or point[x] <= hi) for x, (lo, hi) in ranges.items()
        ):
            return QuickAnswer("refuted", "search", point)
    return None


def _prove(digest: _Digest, relation: type, d: Polynomial) -> str | None:
    """The layer that shows ``d <relation> 0`` wherever the digest holds, or None."""
    if not d or len(d) == 1 and () in d:  # reading folded it to a number
        return "rewrite" if decide_difference(relation, ValueRange.point(d.get((), 0))) else None
    residue = None
    if relation is sympy.Eq or relation is sympy.Ne:
        residue = digest.residue(d)
        if residue.coeff == 0 or residue.base != 0:  # d is one number, or never 0
            is_zero = residue.coeff == 0 and residue.base == 0
            return "modular" if is_zero == (relation is sympy.Eq) else None
    # A bound from above proves d < 0 or d <= 0, one from below d > 0 or d >= 0; Eq, Ne need both.
    upper = digest.upper(d) if relation is not sympy.Gt and relation is not sympy.Ge else INF
    paths = digest.paired
    lower = digest.upper(_scale(d, -1)) if upper is not None and relation is not sympy.Lt and relation is not sympy.Le else INF
    linear = upper is not None and lower is not None
    if not linear:  # the interval of each monomial
        bounds, method = digest.interval(d), "ranges"
    else:
        paths += digest.paired
        bounds = ValueRange(-lower if lower == INF else math.ceil(-lower), upper if upper == INF else math.floor(upper))
        method = "differences" if paths else "ranges"
    if bounds.is_empty:
        return None
    if decide_difference(relation, bounds) is True:
        return method
    if linear:  # a floor division's interval may be narrower than its linear reading
        bounds &= digest.interval(d)
        if bounds.is_empty:
            return None
        if decide_difference(relation, bounds) is True:
            return method
    residue = digest.residue(d) if residue is None else residue
    if _decided(relation, bounds, residue):
        return "modular"
    return None


def _decided(relation: type, bounds: ValueRange, residue: ModularSet) -> bool:
    if residue == ANY:
        return False
    tightened = tighten(bounds, residue)
    return not tightened.is_empty and decide_difference(relation, tightened) is True


def _points(digest: _Digest) -> list[dict[str, int]]:
    """Each name at the lowest value its bounds and class allow, then a step higher."""
    points = []
    for step in range(_CANDIDATES):
        point = {}
        for x in digest.lo:
            lo, hi = digest.lo[x], digest.hi[x]
            start = lo if lo != -INF else (hi if hi != INF else 0)
            congruence = digest.classes.get(x)
            if lo == -INF and hi == INF and congruence is not None:
                start = congruence.base
            value = start + step * (congruence.coeff if congruence is not None and congruence.coeff else 1)
            point[x] = int(value if value <= hi else start)
        points.append(point)
    return points
