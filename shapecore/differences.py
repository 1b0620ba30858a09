"""Difference bounds: interval bounds of linear claims from chains of facts ``x - y <= c``.

The facts torch records between sizes are mostly differences (``s0 < s1``, ``s1 <= s2 + 1``)
and bounds of one size; what a claim needs from them is a path: ``s0 < s1, s1 < s2`` give
``s0 - s2 <= -2``. :class:`DifferenceBounds` reads the
:class:`~shapecore.knowledge.Knowledge` digest as a graph whose edge ``y → x`` of weight ``c``
stands for ``x - y <= c``: each two-symbol inequality ``a*x - a*y <= b`` gives one
(``c = floor(b/a)``), and each range gives edges to and from a node for the constant 0
(``x <= hi``, ``-x <= -lo``). The shortest path from ``y`` to ``x`` (Bellman–Ford from each
source the claims ask about) bounds ``x - y``; a negative cycle means the facts contradict
each other, and no bound is given.

An upper bound of ``d = sum(c_i * x_i) + k`` pairs a positive term with a negative one where
a path bounds their difference more tightly than the two ranges do (greedily, the largest
gain first); what is left is bounded through the 0 node, i.e. by the tightened ranges.
One inequality ``L <= b`` with other coefficients (``s0 <= 4*s1 - 1``) adds the bound
``λ*b + upper(d - λ*L)`` for each ``λ > 0`` that cancels a term of ``d``. Other atoms:

* ``FloorDiv(a, k)`` for a constant ``k > 0`` is ``(a - r)/k`` with ``r = Mod(a, k)`` in
  ``[0, k - 1]`` (``[0, k]`` when ``a`` is not known to be an integer), so ``a`` joins the
  linear part; ``c*FloorDiv(a, b)`` with ``c > 0`` is at most ``c*a`` where the ranges show
  ``a >= 0`` and ``b >= 1``; a division, remainder, Max or Min with a float operand (Python rounds it) has
  no bound;
* ``c*Max(a, b)``: with ``c > 0`` the bound is the larger of the bounds with ``a`` or ``b`` in
  its place (one of them is the value); with ``c < 0`` the smaller (``Max(a, b) >= a`` and
  ``>= b``); ``Min`` the other way round;
* anything else is bounded by its interval (:mod:`shapecore.ranges`).

Every step adds sound upper bounds, so the result holds wherever the facts do. A lower bound
is ``-upper(-d)``; an integer-valued ``d`` rounds both inward.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

import sympy

from shapecore import functions as F
from shapecore.knowledge import Inequality, Knowledge
from shapecore.ranges import INF, Bound, ValueRange, _add, _Bounder, _mul, decide_difference

__all__ = ["DifferenceBounds"]

_ZERO = sympy.S.Zero  # the node standing for the constant 0
_SPLITS = 4  # Max/Min atoms split per bound; deeper ones are bounded by their interval


class _Inconsistent(Exception):
    """A negative cycle: the facts cannot hold together."""


class DifferenceBounds:
    """The difference graph of one fact digest, with shortest paths computed on demand."""

    def __init__(self, knowledge: Knowledge) -> None:
        """The graph of ``knowledge`` as it is now, read when first asked (most claims never ask)."""
        self.knowledge = knowledge
        self._built = False
        self.edges: dict[sympy.Basic, dict[sympy.Basic, int]] = {}  # edges[y][x] = c: x - y <= c
        self.general: list[Inequality] = []
        self._neighbours: dict[sympy.Basic, set[sympy.Basic]] = {}  # symbols sharing an inequality
        self._nodes = 0
        self._distances: dict[sympy.Basic, dict[sympy.Basic, int] | None] = {}

    def _build(self) -> None:
        self._built = True
        for x, r in self.knowledge.ranges.items():  # integer symbols: the digest bounds no others
            if r.hi != INF:
                self._edge(_ZERO, x, math.floor(r.hi))
            if r.lo != -INF:
                self._edge(x, _ZERO, -math.ceil(r.lo))
        for inequality in self.knowledge.inequalities:
            terms = inequality.terms
            for x, _ in terms:
                self._neighbours.setdefault(x, set()).update(y for y, _ in terms)
            if len(terms) == 2 and terms[0][1] == -terms[1][1]:
                (x, a), (y, _) = terms if terms[0][1] > 0 else terms[::-1]
                self._edge(y, x, inequality.bound // a)
            else:
                self.general.append(inequality)
        self._nodes = len(set(self.edges).union(*self.edges.values())) if self.edges else 0

    def _edge(self, source: sympy.Basic, target: sympy.Basic, weight: int) -> None:
        out = self.edges.setdefault(source, {})
        if weight < out.get(target, INF):
            out[target] = weight

    def decide(self, relation: type, difference: sympy.Basic, bounder: _Bounder, known: ValueRange) -> bool | None:
        """:func:`~shapecore.ranges.decide_difference` on :meth:`bound`."""
        found = self.bound(relation, difference, bounder, known)
        return None if found is None else decide_difference(relation, found)

    def bound(self, relation: type, difference: sympy.Basic, bounder: _Bounder, known: ValueRange) -> ValueRange | None:
        """``known`` (a range of ``difference``) narrowed by the graph; None where it shows the facts
        contradict each other.

        ``bounder`` bounds other atoms (the facts' ranges). The side that can prove
        ``difference <relation> 0`` is computed first, the other only if that does not decide.
        """
        if not self._built:
            self._build()
        lo, hi = known.lo, known.hi
        integral = difference.is_integer
        terms = _terms(difference, 1)
        graph = any(map(_reads_graph, terms))  # else each atom is bounded by its interval, as in known
        sides = ("lo", "hi") if relation is sympy.Gt or relation is sympy.Ge else ("hi", "lo")
        try:
            for side in sides:
                if side == "hi":
                    hi = min(hi, self._upper(terms, bounder, _SPLITS)) if graph else hi
                    hi = math.floor(hi) if integral and hi != INF else hi
                else:
                    lo = max(lo, -self._upper({atom: -c for atom, c in terms.items()}, bounder, _SPLITS)) if graph else lo
                    lo = math.ceil(lo) if integral and lo != -INF else lo
                if lo > hi:
                    return None  # no value at all: the facts contradict each other
                if decide_difference(relation, ValueRange(lo, hi)) is not None:
                    break
        except _Inconsistent:
            return None
        return ValueRange(lo, hi)

    def connected(self, symbols: Iterable[sympy.Basic]) -> set[sympy.Basic]:
        """``symbols`` and every symbol a chain of inequalities links them to: those whose facts
        a bound on an expression in ``symbols`` may have used (with their ranges)."""
        if not self._built:
            self._build()
        found, stack = set(symbols), list(symbols)
        while stack:
            for y in self._neighbours.get(stack.pop(), ()):
                if y not in found:
                    found.add(y)
                    stack.append(y)
        return found

    # -- shortest paths ---------------------------------------------------------------------

    def distance(self, source: sympy.Basic, target: sympy.Basic) -> Bound:
        """The least ``c`` the graph shows for ``target - source <= c`` (``inf``: none)."""
        found = self._distances.get(source, False)
        if found is False:
            found = self._distances[source] = self._shortest_paths(source)
        if found is None:
            raise _Inconsistent
        return found.get(target, INF)

    def _shortest_paths(self, source: sympy.Basic) -> dict[sympy.Basic, int] | None:
        """Bellman–Ford, in rounds until nothing changes; None on a negative cycle reachable from ``source``."""
        distance = {source: 0}
        for _ in range(self._nodes + 1):
            changed = False
            for node, out in self.edges.items():
                base = distance.get(node)
                if base is None:
                    continue
                for target, weight in out.items():
                    if base + weight < distance.get(target, INF):
                        distance[target] = base + weight
                        changed = True
            if not changed:
                return distance
        return None  # still shortening after as many rounds as there are nodes

    # -- upper bounds -----------------------------------------------------------------------

    def _upper(self, terms: dict[sympy.Basic, int | Fraction], bounder: _Bounder, splits: int) -> Bound:
        """An upper bound of ``sum(c * atom for atom, c in terms.items())``."""
        linear: dict[sympy.Basic, int | Fraction] = {}
        total: Bound = 0
        work = list(terms.items())
        while work:
            atom, c = work.pop()
            if atom is sympy.S.One:
                total += c
            elif atom.is_Symbol and atom.is_integer:
                linear[atom] = linear.get(atom, 0) + c
            elif F.rounded_in_floats(atom):  # rounded by Python: no bound
                return INF
            elif isinstance(atom, F.FloorDiv) and atom.args[1].is_Integer and int(atom.args[1]) > 0:
                k = int(atom.args[1])
                work.extend(_terms(atom.args[0], Fraction(c, k)).items())
                top = k - 1 if atom.args[0].is_integer else k  # r = Mod(a, k) in [0, top]
                total += Fraction(-c * top, k) if c < 0 else 0
            elif c > 0 and isinstance(atom, F.FloorDiv) and _floor_at_most_dividend(atom, bounder):
                work.extend(_terms(atom.args[0], c).items())
            elif isinstance(atom, (F.Max, F.Min)) and splits > 0:
                rest = dict(linear)
                for other, coeff in work:
                    rest[other] = rest.get(other, 0) + coeff
                bounds = []
                for arg in atom.args:
                    case = dict(rest)
                    for other, coeff in _terms(arg, c).items():
                        case[other] = case.get(other, 0) + coeff
                    bounds.append(_add(total, self._upper(case, bounder, splits - 1)))
                return max(bounds) if isinstance(atom, F.Max) == (c > 0) else min(bounds)
            else:
                r = bounder.bound(atom)
                total = _add(total, _mul(c, r.hi if c > 0 else r.lo))
            if total == INF:
                return INF
        linear = {x: c for x, c in linear.items() if c}
        best = self._paired(linear)
        for inequality in self.general:
            best = min(best, self._through(inequality, linear))
        return _add(total, best)

    def _paired(self, linear: Mapping[sympy.Basic, Fraction]) -> Bound:
        """An upper bound of a sum of symbols times coefficients, by paths and ranges."""
        positive = {x: c for x, c in linear.items() if c > 0}
        negative = {y: -c for y, c in linear.items() if c < 0}
        total: Bound = 0
        distance = self.distance
        while positive and negative:
            best = None
            for x in positive:
                apart = distance(_ZERO, x)
                for y in negative:
                    through = distance(y, x)
                    if through == INF:
                        continue
                    gain = _add(_add(apart, distance(y, _ZERO)), -through)
                    if gain > 0 and (best is None or gain > best[0]):
                        best = (gain, x, y, through)
            if best is None:
                break
            _, x, y, through = best
            m = min(positive[x], negative[y])
            total += m * through
            for side, symbol in ((positive, x), (negative, y)):
                side[symbol] -= m
                if not side[symbol]:
                    del side[symbol]
        for x, c in positive.items():
            total = _add(total, _mul(c, distance(_ZERO, x)))
        for y, c in negative.items():
            total = _add(total, _mul(c, distance(y, _ZERO)))
        return total

    def _through(self, inequality: Inequality, linear: Mapping[sympy.Basic, Fraction]) -> Bound:
        """The best ``λ*bound + upper(linear - λ*L)`` over the ``λ > 0`` that cancel a term."""
        best: Bound = INF
        for x, a in inequality.terms:
            c = linear.get(x, 0)
            if c * a <= 0:
                continue
            scale = Fraction(c, a)
            rest = dict(linear)
            for y, b in inequality.terms:
                rest[y] = rest.get(y, 0) - scale * b
            best = min(best, _add(scale * inequality.bound, self._paired({y: v for y, v in rest.items() if v})))
        return best


def _reads_graph(atom: sympy.Basic) -> bool:
    """Whether :meth:`DifferenceBounds._upper` bounds ``atom`` otherwise than by its interval."""
    return atom.is_Symbol or isinstance(atom, (F.FloorDiv, F.Max, F.Min))


def _floor_at_most_dividend(division: sympy.Basic, bounder: _Bounder) -> bool:
    """Whether ``a // b <= a`` wherever the facts hold: ``a >= 0`` and ``b >= 1`` by their ranges."""
    a, b = division.args
    return bounder.bound(a).lo >= 0 and bounder.bound(b).lo >= 1


def _terms(expr: sympy.Basic, scale: int | Fraction) -> dict[sympy.Basic, int | Fraction]:
    """``expr`` times ``scale`` as atom → rational coefficient (an atom ``1`` for the constant)."""
    terms: dict[sympy.Basic, int | Fraction] = {}
    for term in expr.args if expr.is_Add else (expr,):
        coeff, atom = term.as_coeff_Mul()
        if not coeff.is_Rational:  # a float coefficient: bound the whole term by its interval
            coeff, atom = sympy.S.One, term
        value = scale * (int(coeff.p) if coeff.q == 1 else Fraction(int(coeff.p), int(coeff.q)))
        terms[atom] = terms.get(atom, 0) + value
    return terms
