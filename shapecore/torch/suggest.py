"""Specs that export: the least restrictive ``dynamic_shapes`` that satisfies every guard of a trace.

When ``torch.export`` rejects a spec ("Constraints violated"), its guards say which sizes the
traced program serves. :func:`suggest_spec` reads them (shapecore claims over one integer
symbol per user ``Dim``, each with its declared range and, when known, its example value)
and returns a :class:`Suggestion` in the vocabulary ``torch.export`` accepts:

1. **equalities** — a guard linear in two dims (``Eq(2*dx, dy)``, or torch's replacement
   ``s17 := s77 + 1``) makes one dim derived from the other (``dy = 2*dx``, the earlier dim
   the root, a nonnegative offset preferred); ``2*a == 3*b`` puts both on a new root
   (``a = 3*_a``, ``b = 2*_a``); one linear in one dim fixes it (``n = 8``: static). A dim
   equal to a nonlinear function of others (``Eq((dx + 1)//2, dy)``) keeps its own ``Dim``:
   torch checks that relation at run time, so it is *asserted* (``Suggestion.asserted``) and
   the other guards are proved with it substituted;
2. **divisibility and ranges** — each remaining root ``r`` (example ``h``) is written
   ``r = m*_r + h % m`` over the widest interval of ``_r`` around the example on which
   shapecore's prover shows every guard of ``r`` alone. ``m`` is the divisor of the lcm of
   the guards' constant divisors and coefficients that admits the most values (an infinite
   interval beats a finite one, then the smaller ``m``), so no divisibility is asked that the
   guards do not need: every smaller candidate dividing ``m`` is reported as a rejected
   alternative with a counterexample, a value where a named guard fails. Interval ends are
   found by proofs, narrowed by the prover's counterexamples, and bisected where the prover
   is unsure (``unknown`` never widens). A root's divisibility can make a guard between
   roots linear (``Eq(dx//2, dy//3)``), so steps 1 and 2 repeat until none does;
3. **the proof** — every guard, rewritten over the suggested roots, is proved under their
   ranges; a guard not proved (one relating several roots by other than an equality, which
   ``dynamic_shapes`` cannot state) is listed in ``unproven`` and the suggestion says so.

Each change records the guard that forced it and, for the alternative it rejects, a
counterexample. A dim's value ``coeff*root + offset`` is a :class:`DimFix`.

:func:`suggest_dynamic_shapes` runs ``torch.export`` on a model with the user's spec,
collects the guards (torch's guards, replacements and divisibility over the dims' symbols),
suggests, rebuilds the spec with ``torch.export.Dim`` objects (derived dims included) and
exports with it to check. torch's export checks a spec with its own, weaker reasoning: when it
rejects a proven spec (it cannot show ``dx//2 <= dx`` from ``dx >= 4``), the least
divisibility that makes the failing guard plain to it (``dx = 2*_dx``) is tried, and the
change says why. :func:`read_export_failure` reads the same guards from text: a
saved export error (``Not all values of n = L['x'].size()[0] ... satisfy the generated guard G``,
"must always be equal", "related ... by", "specialized it to be a constant") or a
``TORCH_LOGS=dynamic`` log. :func:`torch_suggested_spec` applies torch's own "Suggested
fixes:" to a spec, and :func:`constraint_count` counts what a spec asks beyond the user's,
to compare the two. Only this module's model functions import torch.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import sympy

from shapecore.errors import ShapecoreError
from shapecore.evaluation import holds
from shapecore.functions import Mod, int_symbol
from shapecore.operations import DIVISOR_ARGUMENTS
from shapecore.printing import torch_str
from shapecore.proof import Proof
from shapecore.reasoner import prove
from shapecore.rewrite import divisors
from shapecore.rewrite import simplify as rewrite

if TYPE_CHECKING:
    import torch

__all__ = ["DimInfo", "DimFix", "Change", "Suggestion", "suggest_spec", "suggest_dynamic_shapes",
           "read_export_failure", "torch_suggested_spec", "constraint_count"]

Range = tuple[int | None, int | None]

MAX_MODULUS = 1 << 12
"""Candidate moduli are the divisors of the lcm of the guards' constants, up to this value."""

_MAX_PROBES = 64  # proofs spent on one end of one interval


@dataclass(frozen=True)
class DimInfo:
    """One user dim as the guards see it: its declared range and its example value (None: unknown)."""

    lo: int | None = 0
    hi: int | None = None
    hint: int | None = None


@dataclass(frozen=True)
class DimFix:
    """A dim's suggested value: ``coeff*root + offset``, or the constant ``offset`` when ``root`` is None."""

    root: str | None
    coeff: int = 1
    offset: int = 0

    def expr(self) -> sympy.Basic:
        return sympy.Integer(self.offset) if self.root is None else self.coeff * int_symbol(self.root) + self.offset

    def __str__(self) -> str:
        return torch_str(self.expr())


@dataclass(frozen=True)
class Change:
    """One change to the user's spec: ``fix`` (``batch = 4*_batch``), the ``guard`` that forced
    it, and the ``rejected`` alternative with a ``counterexample`` (values of the user's dims)
    where that guard fails."""

    dim: str
    fix: str
    guard: sympy.Basic | None
    rejected: str | None = None
    counterexample: Mapping[str, int] | None = None

    def __str__(self) -> str:
        text = self.fix
        if self.guard is not None:
            text += f"  (forced by {torch_str(self.guard)}"
            if self.rejected is not None:
                values = ", ".join(f"{k}={v}" for k, v in sorted((self.counterexample or {}).items()))
                text += f"; rejected {self.rejected}: fails at {values}"
            text += ")"
        return text


@dataclass(frozen=True)
class Suggestion:
    """A corrected spec: each user dim's :class:`DimFix`, each root's range, the changes, and the
    proof of every guard over it (``unproven``: guards not proved; empty when the suggestion is
    proven). Model mode also fills ``dynamic_shapes`` (``torch.export.Dim`` objects) and
    ``exports`` (whether ``torch.export`` accepted it; ``export_error`` when not)."""

    dims: dict[str, DimFix]
    roots: dict[str, Range]
    changes: list[Change]
    proofs: list[Proof]
    unproven: list[sympy.Basic]
    asserted: dict[str, sympy.Basic] = field(default_factory=dict)
    dynamic_shapes: Any = None
    exports: bool | None = None
    export_error: str | None = None

    @property
    def proven(self) -> bool:
        return not self.unproven

    def fixes(self) -> list[str]:
        """The suggestion in torch's "Suggested fixes:" form: each new or changed root, then each derived or static dim."""
        changed = {change.dim for change in self.changes}
        lines = [f"{name} = {_dim_text(name, lo, hi)}" for name, (lo, hi) in self.roots.items()
                 if (name not in self.dims or name in changed) and name not in self.asserted]
        lines += [f"{name} = {fix}" for name, fix in self.dims.items() if fix != DimFix(name)]
        return lines + [f"# {name} = {torch_str(value)}, checked at run time" for name, value in self.asserted.items()]


def _dim_text(name: str, lo: int | None, hi: int | None) -> str:
    bounds = ([f"min={lo}"] if lo else []) + ([f"max={hi}"] if hi is not None else [])
    return f"Dim({name!r}{''.join(', ' + b for b in bounds)})"


# -- the solver over guards ---------------------------------------------------------------------


def _linear(expr: sympy.Basic) -> dict[sympy.Symbol | int, int] | None:
    """``expr`` as integer coefficients of its symbols (key 1: the constant), or None if not linear."""
    free = sorted(expr.free_symbols, key=lambda s: s.name)
    try:
        poly = sympy.Poly(expr, *free) if free else None
    except sympy.PolynomialError:
        return None
    if poly is None:
        return {1: int(expr)} if expr.is_Integer else None
    if poly.total_degree() > 1 or not all(c.is_Integer for c in poly.coeffs()):
        return None
    result: dict[sympy.Symbol | int, int] = {1: 0}
    for monomial, coeff in poly.terms():
        key = next((free[i] for i, power in enumerate(monomial) if power), 1)
        result[key] = int(coeff)
    return result


class _Roots:
    """Each dim as ``coeff*root + offset`` (root None: a constant), with each root's example value."""

    def __init__(self, dims: Mapping[str, DimInfo], hints: Mapping[str, int]) -> None:
        self.fix = {name: DimFix(name) for name in dims}
        self.hints = dict(hints)
        self.asserted: dict[str, sympy.Basic] = {}  # root -> its value over other roots, checked by torch at run time

    def order(self, root: str) -> int:
        """Where ``root`` comes in the spec (a new root after every dim)."""
        names = list(self.fix)
        return names.index(root) if root in names else len(names)

    def substitution(self) -> dict[sympy.Symbol, sympy.Basic]:
        asserted = {int_symbol(root): value for root, value in self.asserted.items()}
        return {int_symbol(name): fix.expr().xreplace(asserted) for name, fix in self.fix.items()}

    def free(self) -> list[str]:
        """The roots a spec ranges over, in spec order (not those asserted from others)."""
        return sorted({f.root for f in self.fix.values() if f.root is not None} - set(self.asserted), key=self.order)

    def fresh(self, base: str) -> str:
        name = base if base.startswith("_") else f"_{base}"
        taken = set(self.fix) | set(self.hints)
        while name in taken:
            name += "_"
        return name

    def rebind(self, root: str, new: DimFix) -> None:
        """Every dim over ``root`` is now over ``new`` (``root = new``)."""
        for name, fix in self.fix.items():
            if fix.root == root:
                if new.root is None:
                    self.fix[name] = DimFix(None, 0, fix.coeff * new.offset + fix.offset)
                else:
                    self.fix[name] = DimFix(new.root, fix.coeff * new.coeff, fix.coeff * new.offset + fix.offset)


def _dims_of(root: str, roots: _Roots) -> list[str]:
    return [name for name, fix in roots.fix.items() if fix.root == root]


_Binding = tuple[list[tuple[str, DimFix]], dict[str, int]]


def _equality(guard: sympy.Basic, roots: _Roots) -> _Binding | None:
    """What the equality ``guard`` (after the current substitution) determines: roots rebound
    (``root = fix``, in order) and the example values of any new root; None if nothing."""
    if not isinstance(guard, sympy.Equality):
        return None
    coeffs = _linear(rewrite((guard.lhs - guard.rhs).xreplace(roots.substitution()), {}, {})[0])
    if coeffs is None:
        return None
    const = coeffs.pop(1)
    terms = [(s.name, c) for s, c in coeffs.items() if c != 0]
    if len(terms) == 1:
        (name, a), = terms
        return ([(name, DimFix(None, 0, -const // a))], {}) if const % a == 0 and name in roots.hints else None
    if len(terms) != 2:
        return None
    (r1, a), (r2, b) = sorted(terms, key=lambda t: roots.order(t[0]))  # a*r1 + b*r2 + const == 0
    options = [(target, DimFix(root, -q // p, -const // p))
               for target, p, root, q in ((r2, b, r1, a), (r1, a, r2, b))
               if q % p == 0 and const % p == 0 and -q // p > 0]
    if options:  # one in terms of the other: a nonnegative offset first, then the earlier dim as the root
        return [min(options, key=lambda o: (o[1].offset < 0, roots.order(o[1].root)))], {}
    if a * b < 0 and r1 in roots.hints and r2 in roots.hints:  # both on a new root t: r1 = |b/g|*t + c1, r2 = |a/g|*t + c2
        g = math.gcd(a, b)
        step1, step2 = abs(b) // g, abs(a) // g
        c1 = roots.hints[r1] % step1
        t = (roots.hints[r1] - c1) // step1
        new = roots.fresh(r1)
        return [(r1, DimFix(new, step1, c1)), (r2, DimFix(new, step2, roots.hints[r2] - step2 * t))], {new: t}
    return None


def _asserted(guard: sympy.Basic, roots: _Roots) -> tuple[str, sympy.Basic] | None:
    """A root that the equality ``guard`` gives as a function of other roots (``Eq((dx + 1)//2, dy)``),
    when no linear relation does: torch keeps such a dim its own ``Dim`` and checks the relation
    at run time."""
    if not isinstance(guard, sympy.Equality):
        return None
    substitution = roots.substitution()
    sides = [rewrite(side.xreplace(substitution), {}, {})[0] for side in (guard.lhs, guard.rhs)]
    for alone, other in (sides, sides[::-1]):
        if (isinstance(alone, sympy.Symbol) and alone.name in roots.fix and roots.fix[alone.name] == DimFix(alone.name)
                and alone not in other.free_symbols and other.free_symbols and alone.name not in roots.asserted):
            return alone.name, other
    return None


def _witness(guards: list[sympy.Basic], dims: Mapping[str, DimInfo], timeout_ms: int) -> dict[str, int]:
    """Example values of the dims: their hints, or else values where every guard holds (from the prover)."""
    known = {name: info.hint for name, info in dims.items() if info.hint is not None}
    if len(known) == len(dims):
        return known
    facts = [sympy.Eq(int_symbol(n), v) for n, v in known.items()]
    facts += [sympy.Ne(d, 0) for g in guards for d in divisors(g)]  # so that a counterexample is a point where all hold
    ranges = {name: (max(info.lo or 0, 0), info.hi) for name, info in dims.items()}  # sizes
    proof = prove(sympy.Not(sympy.And(*guards)), facts=facts, ranges=ranges, timeout_ms=timeout_ms)
    point = None
    if proof.counterexample is not None:
        point = {name: proof.counterexample.get(name, dims[name].lo or 0) for name in dims} | known
    if point is None or not all(holds(g, point) for g in guards):
        raise ShapecoreError(
            "no example values were given and the prover found no values of "
            f"{', '.join(sorted(set(dims) - set(known)))} where every guard holds ({proof.status}): "
            "pass example values (hints), or check that the guards can all hold"
        )
    return point


@dataclass
class _Interval:
    """The widest interval of ``k`` (in ``[limit_lo, limit_hi]``) around ``start`` on which ``claim`` is proved,
    and, for each end that stops short of its limit, a value just past it where the claim fails."""

    lo: int
    hi: int | None
    below: int | None = None
    above: int | None = None

    def count(self) -> float:
        return math.inf if self.hi is None else self.hi - self.lo + 1


def _proved_on(claim: sympy.Basic, k: str, lo: int | None, hi: int | None, timeout_ms: int) -> Proof:
    return prove(claim, ranges={k: (lo, hi)}, timeout_ms=timeout_ms)


def _extend(claim: sympy.Basic, k: str, start: int, limit: int | None, up: bool, timeout_ms: int) -> tuple[int | None, int | None]:
    """How far from ``start`` toward ``limit`` (None: unbounded) ``claim`` is proved for every ``k``:
    the last end proved, and a failing value past it (None when unknown or the limit was reached)."""
    def span(end: int | None) -> Proof:
        return _proved_on(claim, k, start, end, timeout_ms) if up else _proved_on(claim, k, end, start, timeout_ms)

    proof = span(limit)
    if proof.proved:
        return limit, None
    good, bad, failing = start, limit, None
    if proof.refuted and k in proof.counterexample:
        bad = failing = proof.counterexample[k]
    for _ in range(_MAX_PROBES):
        if bad is not None and abs(bad - good) <= 1:
            break
        if bad is None:
            probe = good + max(1, abs(good)) if up else good - max(1, abs(good))
        else:
            probe = (good + bad) // 2 if up else -((-good - bad) // 2)
        proof = span(probe)
        if proof.proved:
            good = probe
        elif proof.refuted and k in proof.counterexample:
            bad = failing = proof.counterexample[k]
        else:
            bad = probe
    if failing is not None and abs(failing - good) != 1:
        failing = None  # the value past the end was only unknown, not refuted
    return good, failing


def _interval(claim: sympy.Basic, k: str, start: int, lo: int | None, hi: int | None, timeout_ms: int) -> _Interval:
    top, above = _extend(claim, k, start, hi, True, timeout_ms)
    bottom, below = _extend(claim, k, start, lo, False, timeout_ms)
    assert bottom is not None
    return _Interval(bottom, top, below, above)


def _constants(exprs: Iterable[sympy.Basic]) -> set[int]:
    """The integers that can ask for divisibility: constant divisors (of ``//``, ``%``, ...) and coefficients."""
    found: set[int] = set()
    for expr in exprs:
        for node in sympy.preorder_traversal(expr):
            where = DIVISOR_ARGUMENTS.get(type(node))
            if where is not None:
                found.update(abs(int(n)) for d in node.args[where] for n in d.atoms(sympy.Integer))
        for product in expr.atoms(sympy.Mul):
            found.update(abs(int(n)) for n in product.args if n.is_Integer)
    return {n for n in found if n >= 2}


def _moduli(guards: list[sympy.Basic]) -> list[int]:
    """Candidate moduli: the divisors of the lcm of the guards' constant divisors and coefficients
    (those up to :data:`MAX_MODULUS`)."""
    lcm = 1
    for n in sorted(_constants(guards)):
        if math.lcm(lcm, n) <= MAX_MODULUS:
            lcm = math.lcm(lcm, n)
    return [m for m in range(1, lcm + 1) if lcm % m == 0]


def _root_range(root: str, roots: _Roots, dims: Mapping[str, DimInfo]) -> Range:
    """The range of ``root`` that keeps each of its dims in the dim's declared range (and nonnegative)."""
    lo: int | None = None
    hi: int | None = None
    for name in _dims_of(root, roots):
        fix, info = roots.fix[name], dims[name]
        dim_lo = max(info.lo or 0, 0)
        this_lo = -((fix.offset - dim_lo) // fix.coeff)
        lo = this_lo if lo is None else max(lo, this_lo)
        if info.hi is not None:
            this_hi = (info.hi - fix.offset) // fix.coeff
            hi = this_hi if hi is None else min(hi, this_hi)
    return lo, hi


def _first_failing(guards: list[sympy.Basic], values: Mapping[str, int]) -> sympy.Basic | None:
    return next((g for g in guards if not holds(g, values)), None)


def suggest_spec(guards: Iterable[sympy.Basic], dims: Mapping[str, DimInfo], *, timeout_ms: int = 1000) -> Suggestion:
    """The least restrictive spec of ``dims`` (name -> :class:`DimInfo`) under which every guard holds.

    ``guards`` are claims over one integer symbol per dim name. See the module docstring for
    what is suggested and how it is proved.
    """
    guards = list(dict.fromkeys(guards))
    strangers = sorted({s.name for g in guards for s in g.free_symbols} - set(dims))
    if strangers:
        raise ShapecoreError(f"guards mention {', '.join(strangers)}, which are not dims of the spec "
                             f"({', '.join(dims) or 'none'}): pass each one's range and example value")
    roots = _Roots(dims, _witness(guards, dims, timeout_ms))
    changes: list[Change] = []
    user_ranges = {name: (info.lo, info.hi) for name, info in dims.items()}
    for _ in range(len(dims) + 1):  # a root's divisibility can turn a guard into an equality between roots
        _solve_equalities(guards, roots, changes, user_ranges, timeout_ms)
        ranges: dict[str, Range] = {}
        range_changes: list[Change] = []
        for root in roots.free():
            ranges.update(_solve_root(root, guards, roots, dims, changes, range_changes, timeout_ms))
        if not any(_equality(g, roots) for g in guards):
            break
    substitution = roots.substitution()
    proofs = [prove(g.xreplace(substitution), ranges=ranges, timeout_ms=timeout_ms) for g in guards]
    unproven = [g for g, p in zip(guards, proofs) if not p.proved]
    ranges.update({root: _root_range(root, roots, dims) for root in roots.asserted})
    return Suggestion(dict(roots.fix), ranges, changes + range_changes, proofs, unproven, dict(roots.asserted))


def _solve_equalities(guards: list[sympy.Basic], roots: _Roots, changes: list[Change],
                      user_ranges: Mapping[str, Range], timeout_ms: int) -> None:
    progress = True
    while progress:
        progress = False
        for guard in guards:
            found = _equality(guard, roots)
            if found is None:
                continue
            bindings, hints = found
            if not bindings:
                continue
            before = [name for root, _ in bindings for name in _dims_of(root, roots)]
            roots.hints.update(hints)
            for root, value in bindings:
                roots.rebind(root, value)
            progress = True
            refutation = prove(guard, ranges={n: user_ranges[n] for n in _names(guard)}, timeout_ms=timeout_ms)
            cex = dict(refutation.counterexample) if refutation.refuted else None
            for name in before:
                rejected = f"{name} as its own Dim" if roots.fix[name].root is not None else f"{name} dynamic"
                changes.append(Change(name, f"{name} = {roots.fix[name]}", guard, rejected, cex))
    for guard in guards:
        if _equality(guard, roots) is None and (found := _asserted(guard, roots)) is not None:
            root, value = found
            roots.asserted[root] = value
            refutation = prove(guard, ranges={n: user_ranges[n] for n in _names(guard)}, timeout_ms=timeout_ms)
            cex = dict(refutation.counterexample) if refutation.refuted else None
            changes.append(Change(root, f"{root} = {torch_str(value)} (a Dim of its own: torch checks this at run time)",
                                  guard, f"{root} independent", cex))


def _names(expr: sympy.Basic) -> list[str]:
    return sorted(s.name for s in expr.free_symbols)


def _point(root: str, value: int, roots: _Roots) -> dict[str, int]:
    """The user dims' values when ``root`` takes ``value`` and every other root its example value."""
    point = dict(roots.hints)
    point[root] = value
    return {name: fix.offset if fix.root is None else fix.coeff * point[fix.root] + fix.offset
            for name, fix in roots.fix.items()}


def _k_bound(bound: int | None, m: int, c: int, *, low: bool) -> int | None:
    """``bound`` on ``m*k + c`` as a bound on ``k``."""
    if bound is None:
        return None
    return -((c - bound) // m) if low else (bound - c) // m


def _solve_root(root: str, guards: list[sympy.Basic], roots: _Roots, dims: Mapping[str, DimInfo],
                changes: list[Change], range_changes: list[Change], timeout_ms: int) -> dict[str, Range]:
    """Pick the modulus and interval of ``root`` (see the module docstring); record the changes."""
    substitution = roots.substitution()
    mine = [g for g in guards if {s.name for s in g.xreplace(substitution).free_symbols} == {root}]
    claim = sympy.And(*(g.xreplace(substitution) for g in mine))
    lo, hi = _root_range(root, roots, dims)
    hint = roots.hints[root]
    k = roots.fresh(root)
    tried: list[tuple[int, _Interval]] = []
    for m in _moduli(list(claim.args) or [claim]):
        c = hint % m
        over_k = claim.xreplace({int_symbol(root): m * int_symbol(k) + c})
        tried.append((m, _interval(over_k, k, (hint - c) // m, _k_bound(lo, m, c, low=True),
                                   _k_bound(hi, m, c, low=False), timeout_ms)))
        if tried[-1][1].count() == math.inf:
            break
    m, found = max(tried, key=lambda entry: (entry[1].count(), -entry[0]))
    c = hint % m

    def failing_point(modulus: int, k_value: int | None) -> dict[str, int] | None:
        return None if k_value is None else _point(root, modulus * k_value + hint % modulus, roots)

    def change(dim: str, fix: str, rejected: str, point: dict[str, int] | None, into: list[Change] = changes) -> None:
        guard = None if point is None else _first_failing(mine, point)
        into.append(Change(dim, fix, guard, rejected if guard is not None else None, point if guard is not None else None))

    name = root
    if m != 1:
        user = ", ".join(_dims_of(root, roots))
        for other, interval in tried:
            if other < m and m % other == 0:
                rejected = f"{root} = {DimFix(k, other, hint % other)}" if other != 1 else f"{root} with no divisibility"
                at = interval.above if interval.above is not None else interval.below
                change(user, f"{root} = {DimFix(k, m, c)}", rejected, failing_point(other, at))
        roots.rebind(root, DimFix(k, m, c))
        roots.hints[k] = (hint - c) // m
        name = k
    for value, declared, at, which in ((found.lo, _k_bound(lo, m, c, low=True), found.below, "min"),
                                       (found.hi, _k_bound(hi, m, c, low=False), found.above, "max")):
        if value != declared:
            change(name, f"{name}: {which}={value}", f"{which}={'none' if declared is None else declared}",
                   None if at is None else _point(name, at, roots), range_changes)
    return {name: (found.lo, found.hi)}


# -- from text: a saved export error or a TORCH_LOGS=dynamic log ------------------------------------

_EQUAL = re.compile(r"The values of (?P<a>\w+) = \S+ and (?P<b>\w+) = \S+ must always be equal")
_RELATED = re.compile(r"The values of (?P<a>\w+) = \S+ must always be related to the values of (?P<b>\w+) = \S+ "
                      r"by (?P=a) = (?P<expr>[^\n]+?)\.?$", re.MULTILINE)
_CONSTANT = re.compile(r"You marked (?P<a>\w+) as dynamic but your code specialized it to be a constant \((?P<v>-?\d+)\)")


def read_export_failure(text: str, where: str = "<input>") -> tuple[list[sympy.Basic], dict[str, DimInfo]]:
    """The guards and dims of a saved ``torch.export`` error or a ``TORCH_LOGS=dynamic`` log, for :func:`suggest_spec`.

    An error's guard lines are read in terms of the ``Dim`` names (:func:`~shapecore.guard_input.read_guard_set`),
    with its "must always be equal", "must always be related ... by" and "specialized it to be a
    constant" lines as equalities; a log's symbols keep their names (``s77``), with their ranges
    and example values. Raises :class:`~shapecore.GuardInputError` for malformed input.
    """
    from shapecore.guard_input import read_guard_set
    from shapecore.parsing import parse

    found = read_guard_set(text, where)
    guards = [g.expr for g in found.guards + found.assumptions]
    names = set(found.ranges) | set(found.hints)
    for m in _EQUAL.finditer(text):
        guards.append(sympy.Eq(int_symbol(m["a"]), int_symbol(m["b"])))
        names |= {m["a"], m["b"]}
    for m in _RELATED.finditer(text):
        guards.append(sympy.Eq(int_symbol(m["a"]), parse(m["expr"])))
        names |= {m["a"], m["b"]}
    for m in _CONSTANT.finditer(text):
        guards.append(sympy.Eq(int_symbol(m["a"]), int(m["v"])))
        names.add(m["a"])
    names |= {s.name for g in guards for s in g.free_symbols}
    dims = {}
    for name in dict.fromkeys([*found.ranges, *found.hints, *sorted(names)]):
        lo, hi = found.ranges.get(name, (None, None))
        dims[name] = DimInfo(lo, hi, found.hints.get(name))
    return guards, dims


# -- from a model: torch.export ------------------------------------------------------------------------


def _positions(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None,
               dynamic_shapes: Any) -> dict[str, Any]:
    """``L['x'].size()[0]`` -> the user's ``Dim`` there, for each top-level tensor input the spec gives a ``Dim``."""
    from torch.export import Dim

    bound = inspect.signature(model.forward).bind(*args, **dict(kwargs or {}))
    names = list(bound.arguments)
    specs = dynamic_shapes.items() if isinstance(dynamic_shapes, Mapping) else zip(names, dynamic_shapes)
    result = {}
    for name, spec in specs:
        axes = spec.items() if isinstance(spec, Mapping) else enumerate(spec or ())
        for axis, dim in axes:
            if isinstance(dim, Dim):
                if getattr(dim, "root", None) is not None:
                    raise ShapecoreError(f"dynamic_shapes[{name!r}][{axis}] is the derived Dim {dim.__name__}: pass a "
                                         f"plain Dim there; suggest_dynamic_shapes suggests derived ones")
                result[f"L[{name!r}].size()[{axis}]"] = dim
    return result


def _trace_guards(traced: Any, symbols: Mapping[sympy.Symbol, str]) -> list[sympy.Basic]:
    """torch's guards, replacements and divisibility over the traced symbols, renamed to the user's Dims."""
    from shapecore.torch.expressions import map_expr

    env = traced.torch_env
    raw = list(traced.torch_guards)
    raw += [map_expr(sympy.Eq(s, e, evaluate=False)) for s, e in env.replacements.items() if s != e]
    raw += [sympy.Eq(map_expr(term), 0) for term in env.divisible]
    rename = {int_symbol(s.name): int_symbol(name) for s, name in symbols.items()}
    guards = [g.xreplace(rename) for g in raw]
    strangers = sorted({s.name for g in guards for s in g.free_symbols} - set(symbols.values()))
    if strangers:
        raise ShapecoreError(f"the trace's guards mention {', '.join(strangers)}, which no Dim of the spec names "
                             f"(data-dependent or unspecified sizes): a dynamic_shapes spec cannot constrain them")
    return guards


def _rebuilt_spec(dynamic_shapes: Any, suggestion: Suggestion) -> Any:
    """The user's spec with each ``Dim`` replaced by its suggested value (None for a static dim)."""
    from torch.export import Dim

    roots = {name: Dim(name, **({"min": lo} if lo is not None else {}), **({"max": hi} if hi is not None else {}))
             for name, (lo, hi) in suggestion.roots.items()}

    def value(fix: DimFix) -> Any:
        if fix.root is None:
            return Dim.STATIC
        dim = roots[fix.root]
        dim = dim if fix.coeff == 1 else fix.coeff * dim
        return dim if fix.offset == 0 else dim + fix.offset

    return _replace_dims(dynamic_shapes, {name: value(fix) for name, fix in suggestion.dims.items()})


def _replace_dims(spec: Any, by_name: Mapping[str, Any]) -> Any:
    from torch.export import Dim

    if isinstance(spec, Dim):
        return by_name.get(spec.__name__, spec)
    if isinstance(spec, Mapping):
        return type(spec)((k, _replace_dims(v, by_name)) for k, v in spec.items())
    if isinstance(spec, (list, tuple)):
        return type(spec)(_replace_dims(v, by_name) for v in spec)
    return spec


def _export_error(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, spec: Any,
                  strict: bool) -> str | None:
    """None when ``torch.export`` accepts ``spec``, else the first line of its error."""
    import torch

    try:
        torch.export.export(model, args, kwargs=dict(kwargs or {}), dynamic_shapes=spec, strict=strict)
    except Exception as exc:  # noqa: BLE001 - any failure of export is the answer
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None


def suggest_dynamic_shapes(model: torch.nn.Module, args: tuple[Any, ...], dynamic_shapes: Any, *,
                           kwargs: Mapping[str, Any] | None = None, strict: bool = False, check: bool = True,
                           timeout_ms: int = 1000) -> Suggestion:
    """A corrected ``dynamic_shapes`` for ``torch.export.export(model, args, dynamic_shapes=...)``.

    Traces with the user's spec (a "Constraints violated" failure is caught), suggests from its
    guards (:func:`suggest_spec`) and rebuilds the spec with ``Dim`` objects, derived ones
    included. With ``check`` (the default) exports once more with the suggestion and says in
    ``exports`` whether torch accepted it. The spec gives plain ``Dim`` objects to top-level
    tensor inputs (by name, or by position).
    """
    from shapecore.torch.private import int_oo
    from shapecore.torch.shape_env import source_name
    from shapecore.torch.tracing import trace_export

    args = tuple(args)
    positions = _positions(model, args, kwargs, dynamic_shapes)
    traced = trace_export(model, args, dynamic_shapes=dynamic_shapes, kwargs=kwargs, strict=strict,
                          on_constraint_violation="return", timeout_ms=timeout_ms)
    env = traced.torch_env
    by_source = {source_name(src): s for s, sources in env.var_to_sources.items() for src in sources}
    symbols: dict[sympy.Symbol, str] = {}
    dims: dict[str, DimInfo] = {}
    for source, dim in positions.items():
        symbol = by_source.get(source)
        if symbol is None or symbol not in env.backed_var_to_val:
            continue
        symbols[symbol] = dim.__name__
        dims[dim.__name__] = DimInfo(dim.min, None if dim.max in (int_oo, math.inf) else int(dim.max),
                                     int(env.backed_var_to_val[symbol]))
    guards = _trace_guards(traced, symbols)
    suggestion = suggest_spec(guards, dims, timeout_ms=timeout_ms)
    spec = _rebuilt_spec(dynamic_shapes, suggestion)
    if not check:
        return replace(suggestion, dynamic_shapes=spec)
    error = _export_error(model, args, kwargs, spec, strict)
    if error is not None:
        found = _plainer(model, args, kwargs, strict, dynamic_shapes, spec, guards, dims, timeout_ms)
        if found is not None:
            return found
    return replace(suggestion, dynamic_shapes=spec, exports=error is None, export_error=error)


_PLAINER_TRIES = 6


def _plainer(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None, strict: bool,
             user_spec: Any, spec: Any, guards: list[sympy.Basic], dims: Mapping[str, DimInfo],
             timeout_ms: int) -> Suggestion | None:
    """When torch's export rejects a proven spec because its checker cannot show a guard from it
    (``dx//2 <= dx`` from ``dx >= 4``), the spec that asks the least divisibility making that guard
    plain to torch (``dx = 2*_dx``), if one of :data:`_PLAINER_TRIES` exports; None otherwise."""
    from shapecore.torch.tracing import trace_export

    traced = trace_export(model, args, dynamic_shapes=spec, kwargs=kwargs, strict=strict,
                          on_constraint_violation="return", timeout_ms=timeout_ms)
    if traced.error is None:
        return None
    failing, _ = read_export_failure(traced.error, "<export error>")
    tries = 0
    for guard in failing:
        names = _names(guard)
        if len(names) != 1 or names[0] not in dims:
            continue
        for d in _moduli([guard])[1:]:
            if tries == _PLAINER_TRIES:
                return None
            tries += 1
            helper = sympy.Eq(Mod(int_symbol(names[0]), d), 0)
            suggestion = suggest_spec(guards + [helper], dims, timeout_ms=timeout_ms)
            stronger = _rebuilt_spec(user_spec, suggestion)
            if _export_error(model, args, kwargs, stronger, strict) is None:
                note = Change(names[0], f"{names[0]} a multiple of {d}: torch's export cannot show {torch_str(guard)} "
                                        f"from the weaker spec, where shapecore proved it", guard)
                return replace(suggestion, changes=suggestion.changes + [note], dynamic_shapes=stronger, exports=True)
    return None


# -- comparing with torch's own suggestion -------------------------------------------------------------

_FIX_LINE = re.compile(r"^\s*(?P<name>\w+) = (?P<expr>.+?)\s*$")


def torch_suggested_spec(dynamic_shapes: Any, error_text: str) -> Any | None:
    """``dynamic_shapes`` with torch's "Suggested fixes:" (from an export error's text) applied, or
    None when the error suggests none."""
    from torch.export import Dim

    if "Suggested fixes:" not in error_text:
        return None
    names: dict[str, Any] = {d.__name__: d for d in _spec_dims(dynamic_shapes)}
    scope: dict[str, Any] = {"Dim": Dim, "oo": None, **names}
    for line in error_text.split("Suggested fixes:", 1)[1].splitlines()[1:]:
        m = _FIX_LINE.match(line)
        if m is None:
            break
        value = eval(m["expr"], {"__builtins__": {}}, scope)  # noqa: S307 - torch's own fix text, Dim arithmetic
        scope[m["name"]] = value
        if m["name"] in names:
            names[m["name"]] = Dim.STATIC if isinstance(value, int) else value
    return _replace_dims(dynamic_shapes, names)


def _spec_dims(spec: Any) -> list[Any]:
    from torch.export import Dim

    if isinstance(spec, Dim):
        return [spec]
    if isinstance(spec, Mapping):
        return [d for v in spec.values() for d in _spec_dims(v)]
    if isinstance(spec, (list, tuple)):
        return [d for v in spec for d in _spec_dims(v)]
    return []


def constraint_count(dynamic_shapes: Any, user_spec: Any) -> int:
    """What ``dynamic_shapes`` asks of the dims the user marked dynamic in ``user_spec``: one per
    static dim, per derived dim, per dim sharing another's ``Dim``, per root min above 0 and per
    finite root max."""
    from torch.export import Dim

    count, roots, seen = 0, {}, set()
    for user, dim in zip(_leaves(user_spec), _leaves(dynamic_shapes)):
        if not isinstance(user, Dim):
            continue
        if not isinstance(dim, Dim):
            count += 1
            continue
        root = getattr(dim, "root", None)
        if root is not None or dim.__name__ in seen:
            count += 1
        seen.add(dim.__name__)
        root = root or dim
        roots[root.__name__] = root
    for root in roots.values():
        count += int(root.min > 0) + int(root.max is not None and math.isfinite(float(root.max)))
    return count


def _leaves(spec: Any) -> list[Any]:
    if isinstance(spec, Mapping):
        return [leaf for v in spec.values() for leaf in _leaves(v)]
    if isinstance(spec, (list, tuple)):
        return [leaf for v in spec for leaf in _leaves(v)]
    return [spec]
