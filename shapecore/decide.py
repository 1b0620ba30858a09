"""The cheap layers of the reasoner: decide a claim from ranges, residues and rewriting.

:class:`CheapLayers` reads a claim (a relation or ``And``/``Or``/``Not`` of relations, Python's
``and``/``or`` too) under a :class:`~shapecore.knowledge.Knowledge` digest and answers True (it
holds wherever the digest does), False (it holds nowhere) or None. Each relation ``lhs <rel> rhs`` is decided on
``d = lhs - rhs``, cheapest first:

* a number: compare;
* ``Eq``/``Ne``: the residue class of ``d`` (:mod:`shapecore.modular`) alone settles most
  (``d ≡ 0`` exactly, or ``d ≡ r ≠ 0 (mod m)`` so ``d`` is never 0);
* interval bounds of ``d`` (:mod:`shapecore.ranges`);
* with ``differences``, bounds of ``d`` from chains of facts ``x - y <= c``, ``Max``/``Min``
  split by cases and ``FloorDiv`` by a constant made linear (:mod:`shapecore.differences`);
* those bounds (narrowed by ``differences`` when given) tightened to ``d``'s residue class
  (``d ≡ 0 mod 8`` and ``d >= 1`` give ``d >= 8``; ``d = 2*(x//2) - x`` in ``[-1, 0]`` and
  even, as ``x`` is, gives ``d == 0`` before any rewriting).

With ``rewrite``, ``d`` is first simplified (:class:`~shapecore.rewrite.Simplifier`): this
decides more but builds new sympy expressions. The caller must only pass claims that are
defined wherever the digest holds (see :meth:`shapecore.reasoner.Reasoner.prove`): the
answers are about values, not about division by zero. ``layer`` records the most expensive
layer that was needed (an index into :data:`LAYERS`).
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from shapecore.differences import DifferenceBounds
from shapecore.functions import PythonOr
from shapecore.knowledge import Knowledge
from shapecore.modular import ModularSet, tighten
from shapecore.operations import SHORT_CIRCUITS
from shapecore.ranges import ValueRange, decide_difference
from shapecore.rewrite import Simplifier, needs_rewriting

__all__ = ["CheapLayers", "LAYERS"]

LAYERS = ("rewrite", "ranges", "modular", "differences")
"""The cheap layers, cheapest first; :attr:`CheapLayers.layer` indexes this."""


class CheapLayers:
    """Decides a claim with ranges and residue classes, tracking the layer used.

    With ``rewrite``, each ``lhs - rhs`` is first simplified (:class:`Simplifier`), which
    decides more but builds new sympy expressions; without, the analyzers read it as is.
    ``differences``: the difference graph of ``knowledge`` (shared between queries), if any.
    """

    def __init__(
        self, knowledge: Knowledge, *, rewrite: bool = True, differences: DifferenceBounds | None = None
    ) -> None:
        self.simplify = Simplifier(knowledge.ranges, knowledge.congruences)
        self.rewrite = rewrite
        self.differences = differences
        self.layer = 0  # index into LAYERS of the most expensive layer needed

    def _use(self, layer: str) -> None:
        self.layer = max(self.layer, LAYERS.index(layer))

    def decide(self, claim: sympy.Basic) -> bool | None:
        if claim is sympy.true or claim is sympy.false:
            return claim is sympy.true
        if claim.is_Relational:
            lhs, rhs = claim.args
            plain = rhs is sympy.S.Zero and isinstance(lhs, sympy.Expr)  # lhs - 0 is lhs: spare sympy the sum
            return self._relation(type(claim), lhs if plain else lhs - rhs)
        if isinstance(claim, sympy.Not):
            inner = self.decide(claim.args[0])
            return None if inner is None else not inner
        if isinstance(claim, (sympy.And, sympy.Or, *SHORT_CIRCUITS)):  # defined: Python's and/or are And/Or
            values = [self.decide(arg) for arg in claim.args]
            absorbing = isinstance(claim, (sympy.Or, PythonOr))
            if absorbing in values:
                return absorbing
            return None if None in values else not absorbing
        return None

    def _relation(self, relation: type, difference: sympy.Basic) -> bool | None:
        simplify = self.simplify
        d = simplify(difference) if self.rewrite and needs_rewriting(difference) else difference
        for layer in ("modular", "ranges"):
            if layer in simplify.used:
                self._use(layer)
        if d.is_Number:
            value = Fraction(int(d.p), int(d.q)) if d.is_Rational else float(d)
            return decide_difference(relation, ValueRange.point(value))
        if relation is sympy.Eq or relation is sympy.Ne:
            # (In)equalities are mostly settled by residues alone: d ≡ 0 mod m facts.
            residues = simplify.residues.analyze(d)
            if residues is not None and (residues.coeff == 0 or residues.base != 0):
                self._use("modular")
                is_zero = residues.coeff == 0 and residues.base == 0  # else d can never be 0
                return is_zero if relation is sympy.Eq else not is_zero
        bounds = simplify.bounds.bound(d)
        verdict = decide_difference(relation, bounds)
        if verdict is not None:
            self._use("ranges")
            return verdict
        narrowed = None
        if self.differences is not None:
            narrowed = self.differences.bound(relation, d, simplify.bounds, bounds)
            verdict = None if narrowed is None else decide_difference(relation, narrowed)
            if verdict is not None:
                self._use("differences")
                return verdict
        residues = simplify.residues.analyze(d)
        if residues is None or residues == ModularSet(1, 0):
            return None
        tightened = tighten(bounds if narrowed is None else narrowed, residues)
        if tightened.is_empty:
            return None
        verdict = decide_difference(relation, tightened)
        if verdict is not None:
            self._use("modular")
            if narrowed is not None and narrowed != bounds:
                self._use("differences")
        return verdict
