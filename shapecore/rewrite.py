"""Rewriting: one canonical form per operation, then simplification with known facts.

:func:`canonicalize` is purely syntactic and keeps value *and* definedness at every
assignment: ``PythonMod → Mod``, ``CleanDiv → FloorDiv``, ``CeilDiv(a, b) → -FloorDiv(-a, b)``,
``ModularIndexing(a, b, c) → Mod(FloorDiv(a, b), c)``.

:func:`simplify` rewrites bottom-up with the residue classes (:mod:`shapecore.modular`) and
ranges (:mod:`shapecore.ranges`) of symbols. Each rule is an identity over the integers,
valid wherever its side condition holds (``d`` is a nonzero integer constant, ``g > 0``):

=====================================================  ==========================================
``FloorDiv(a, d)`` → ``FloorDiv(-a, -d)``              ``d < 0``
``FloorDiv(a, d)`` → ``(a - a%d) / d``                 ``a`` has a known residue mod ``d``
``FloorDiv(d*x + y, d)`` → ``x + FloorDiv(y, d)``      ``x`` integer
``FloorDiv(g*x, g*m)`` → ``FloorDiv(x, m)``            ``g > 0``, ``m`` constant
``FloorDiv(FloorDiv(x, e), d)`` → ``FloorDiv(x, e*d)``  ``d > 0``
``FloorDiv(a, d)`` → ``k``                             ``a ∈ [k*d, k*d + d - 1]`` by ranges
``Mod(a, d)`` → ``r``                                  ``a ≡ r (mod d)`` always
``Mod(d*x + y, d)`` → ``Mod(y, d)``                    ``x`` integer
``Mod(g*x, g*m)`` → ``g*Mod(x, m)``                    ``g > 0``, ``m`` constant
``Mod(Mod(x, e), d)`` → ``Mod(x, d)``                  ``d | e`` (constants)
``Mod(a, d)`` → ``a - k*d``                            ``a ∈ [k*d, k*d + d - 1]`` by ranges
``Max(a, b)`` → ``a``, ``Min(a, b)`` → ``b``          ``a - b >= 0`` by ranges
``c*x + k*FloorDiv(x, m)`` → ``(c*m + k)*FloorDiv(x, m) + c*Mod(x, m)``   (``x = m*(x//m) + x%m``)
=====================================================  ==========================================

The last rule separates ``x`` from ``x // m`` so that interval arithmetic sees them
independently (``n - n//3 = 2*(n//3) + n%3``); when ``c*m + k == 0`` it fuses the pair into
``c*Mod(x, m)`` (``16*s - 128*(s//8) = 16*Mod(s, 8)``). Each rule is property-tested against
brute-force evaluation. They are integer identities: a division, remainder, Max or Min with a float
operand, which Python rounds, is left as it is.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import sympy

from shapecore import functions as F
from shapecore.modular import ModularSet, _Analyzer
from shapecore.operations import DIVISOR_ARGUMENTS, FLOAT_FUNCTIONS, NONCANONICAL, SHORT_CIRCUITS
from shapecore.ranges import ValueRange, _Bounder, _floor_div, is_infinite

__all__ = [
    "canonicalize",
    "substitute",
    "simplify",
    "divisors",
    "short_circuit",
    "strict_suffices",
    "keep_definedness",
    "build_keeping_divisions",
    "fold",
    "needs_rewriting",
    "symbols_of",
    "Simplifier",
]


def _rebuild(
    expr: sympy.Basic, visit: Callable[[sympy.Basic], sympy.Basic], *, keep_divisions: bool = False
) -> sympy.Basic:
    """``expr`` with ``visit`` applied to each argument, rebuilt only when one changed
    (unevaluated, with ``keep_divisions``, where sympy's folding would drop a division)."""
    if not expr.args or expr.is_Atom:
        return expr
    args = tuple(visit(a) for a in expr.args)
    if all(new is old for new, old in zip(args, expr.args)):
        return expr
    return build_keeping_divisions(expr.func, *args) if keep_divisions else expr.func(*args)


def _canonical_node(expr: sympy.Basic) -> sympy.Basic:
    cls = type(expr)
    if cls is F.PythonMod:
        return F.Mod(*expr.args)
    if cls is F.CleanDiv:
        return F.FloorDiv(*expr.args)
    if cls is F.CeilDiv:
        a, b = expr.args
        return -F.FloorDiv(-a, b)
    if cls is F.ModularIndexing:
        a, b, c = expr.args
        return F.Mod(F.FloorDiv(a, b), c)
    return expr


_REWRITABLE = frozenset({F.FloorDiv, F.CleanDiv, F.Mod, F.PythonMod, F.CeilDiv, F.ModularIndexing, F.Max, F.Min})


@functools.lru_cache(maxsize=1 << 14)
def _survey(expr: sympy.Basic) -> tuple[frozenset[type], frozenset[sympy.Basic], frozenset[sympy.Symbol]]:
    """The node types in ``expr``, its non-constant divisors and its symbols, in one walk (cached)."""
    kinds: set[type] = set()
    found: set[sympy.Basic] = set()
    symbols: set[sympy.Symbol] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        kinds.add(type(node))
        if node.is_Symbol:
            symbols.add(node)
        elif (where := DIVISOR_ARGUMENTS.get(type(node))) is not None:
            found.update(a for a in node.args[where] if not a.is_Number)
        elif node.is_Pow and node.exp.is_negative and not node.base.is_Number:
            found.add(node.base)
        elif isinstance(node, F.FloatPow) and node.args[1].is_nonnegative is not True:
            if not (node.args[0].is_Number and node.args[0] != 0):
                found.add(node.args[0])  # 0 ** -n raises ZeroDivisionError
        stack.extend(node.args)
    return frozenset(kinds), frozenset(found), frozenset(symbols)


@functools.lru_cache(maxsize=1 << 14)
def canonicalize(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` with one function per operation (see the module docstring); cached."""
    if not (_survey(expr)[0] & NONCANONICAL):
        return expr
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(node: sympy.Basic) -> sympy.Basic:
        found = memo.get(node)
        if found is None:
            found = memo[node] = _canonical_node(_rebuild(node, visit, keep_divisions=True))
        return found

    return visit(expr)


def symbols_of(expr: sympy.Basic) -> frozenset[sympy.Symbol]:
    """``expr.free_symbols``, cached (sympy recomputes it on every call)."""
    return _survey(expr)[2]


def substitute(
    expr: sympy.Basic, replacements: Mapping[sympy.Symbol, sympy.Basic], *, keep_divisions: bool = False
) -> sympy.Basic:
    """``expr`` with each replaced symbol swapped for its (fully resolved) expression.

    The rebuilt expression is folded, which may drop divisions (``(s1 - s0)*(x//y)`` is 0
    under ``s1 := s0``): a caller that needs to know where ``expr`` is defined keeps
    ``divisors(expr)`` of the original (as the reasoner and the simplifier do), or asks to
    ``keep_divisions`` (see :func:`build_keeping_divisions`).
    """
    if not replacements or not (symbols_of(expr) & replacements.keys()):
        return expr
    if not keep_divisions:
        return expr.xreplace(dict(replacements))
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(node: sympy.Basic) -> sympy.Basic:
        found = replacements.get(node) if node.is_Symbol else None
        if found is None:
            found = memo.get(node)
        if found is None:
            found = memo[node] = _rebuild(node, visit, keep_divisions=True)
        return found

    return visit(expr)


def divisors(expr: sympy.Basic) -> frozenset[sympy.Basic]:
    """The non-constant divisors in ``expr``: where it may be undefined."""
    return _survey(expr)[1]


_MAY_RAISE = frozenset(FLOAT_FUNCTIONS)  # a float operation may overflow (OverflowError) without a divisor


def short_circuit(claim: sympy.Basic) -> bool:
    """Whether ``claim`` has Python's ``and``/``or`` in it (:data:`shapecore.operations.SHORT_CIRCUITS`):
    then it may be defined where some of its divisors are zero, and :func:`divisors` only says
    where it *may* be undefined."""
    return not _survey(claim)[0].isdisjoint(SHORT_CIRCUITS)


def strict_suffices(parts: Sequence[sympy.Basic]) -> bool:
    """Whether Python's ``and``/``or`` of ``parts`` is the strict ``And``/``Or`` of them (same
    value, defined at the same points): each part after the first is defined wherever the
    parts before it are, as it divides only by what a strict one of them (no short circuit in
    it: it evaluates every division) divides by, and has no float operation (which may
    overflow). The common case (``s0 >= 2 and s0 % 8 == 0``) then stays strict, for every
    analyzer to read."""
    seen: set[sympy.Basic] = set()  # divisors nonzero wherever the parts so far are defined
    for i, part in enumerate(parts):
        kinds, found, _ = _survey(part)
        if i and (not kinds.isdisjoint(_MAY_RAISE) or not found <= seen):
            return False
        if kinds.isdisjoint(SHORT_CIRCUITS):
            seen |= found
    return True


def build_keeping_divisions(build: Callable[..., sympy.Basic], *args: sympy.Basic) -> sympy.Basic:
    """``build(*args)``, unevaluated if sympy's folding would drop a divisor of ``args``.

    sympy folds as it builds (``x//y - x//y`` is 0, ``Not(x//y - x//y >= 0)`` is False), and
    an expression is undefined wherever a division in it divides by zero: keeping the
    structure keeps that (and ``evaluate`` raises ``ZeroDivisionError`` there, like Python).

    sympy's deductions of assumptions take a node to be in its folded form: on ``x//y - x//y``
    kept as written they contradict each other (``InconsistentAssumptions``) or answer wrongly
    (``is_zero`` False), and the answers stay cached on the node. So a node kept unevaluated
    answers every assumption as its folded value does: its value wherever it is defined.
    """
    result = build(*args)
    required = set().union(*(divisors(a) for a in args))
    if not required - divisors(result):
        return result
    result = build(*_numbers_combined(build, args), evaluate=False)
    if required - divisors(result):  # And/Or fold a True argument, or a condition and its negation, even so
        result = build(*(_opaque_to_connectives(a) for a in args), evaluate=False)
    return _answering_as_folded(result)


_FACTS = importlib.import_module("sympy.core.assumptions")._assume_defined
"""Every assumption sympy deduces (``is_zero``, ``is_even``, …): it has no public list of them."""


def _answering_as_folded(node: sympy.Basic) -> sympy.Basic:
    """``node`` (an expression kept unevaluated) with every assumption set to its folded
    value's, before sympy deduces any from its unfolded form (see :func:`build_keeping_divisions`)."""
    if not isinstance(node, sympy.Expr):
        return node
    try:
        value = fold(node)
    except ZeroDivisionError:  # defined nowhere: nothing is known of its value
        facts = dict.fromkeys(_FACTS) | {"commutative": True}
    else:
        facts = {fact: getattr(value, f"is_{fact}") for fact in _FACTS}
    node._assumptions = node.default_assumptions.copy()
    node._assumptions.update(facts)
    return node


def _numbers_combined(build: Callable[..., sympy.Basic], args: tuple[sympy.Basic, ...]) -> tuple[sympy.Basic, ...]:
    """The operands of an exact sum or product to build unevaluated, nested ones flattened and
    their numbers combined into one (numbers divide by nothing): ``-(1*0*x)`` is ``0*x``, and
    it prints as text that reads back the same."""
    kind = {sympy.Add: sympy.Add, F.add: sympy.Add, sympy.Mul: sympy.Mul, F.mul: sympy.Mul}.get(build)
    if kind is None or any(F.float_valued(a) for a in args):
        return args
    flat = [part for a in args for part in (a.args if isinstance(a, kind) else (a,))]
    numbers = [part for part in flat if part.is_Number]
    others = [part for part in flat if not part.is_Number]
    number = kind(*numbers)  # evaluated: a single number
    neutral = sympy.S.Zero if kind is sympy.Add else sympy.S.One
    return tuple(([number] if number != neutral or not others else []) + others)


def _opaque_to_connectives(claim: sympy.Basic) -> sympy.Basic:
    """``~~claim``, which ``And``/``Or`` never fold (True is written ``Eq(0, 0)`` inside)."""
    if claim is sympy.true or claim is sympy.false:
        claim = (sympy.Eq if claim is sympy.true else sympy.Ne)(0, 0, evaluate=False)
    return sympy.Not(sympy.Not(claim, evaluate=False), evaluate=False)


def fold(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` rebuilt with all of sympy's folding, also of nodes kept unevaluated.

    Folding may drop divisions (see :func:`build_keeping_divisions`), so the result has the
    value of ``expr`` only where ``expr`` is defined: for what a fact implies, or for a claim
    whose divisors are known to be nonzero. Raises ``ZeroDivisionError`` if a divisor folds to 0.
    """
    if not divisors(expr):  # only divisions are ever kept unevaluated
        return expr
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(node: sympy.Basic) -> sympy.Basic:
        found = memo.get(node)
        if found is None:
            found = memo[node] = node.func(*(visit(a) for a in node.args)) if node.args and not node.is_Atom else node
        return found

    return visit(expr)


def keep_definedness(claim: sympy.Basic, required: Iterable[sympy.Basic]) -> sympy.Basic:
    """``claim`` and ``Ne(d, 0)`` for each divisor ``d`` of ``required`` that ``claim`` lost.

    For a claim rebuilt from parts whose divisions were already folded away (by substituting
    replacements, say): it then *holds* (:func:`shapecore.holds`) exactly where a claim built
    without folding would, since each rule sympy folds by is an identity wherever the claim
    is defined. Where the claim is undefined it is false rather than an error, so this suits
    answers about where a claim holds, not its negation (see :func:`build_keeping_divisions`).
    """
    required = {d for d in required if not (d.is_Number and d != 0)}
    result, restored = claim, set()
    while True:
        missing = sorted(required - divisors(result) - restored, key=sympy.default_sort_key)
        if not missing:
            return result
        restored.update(missing)
        # a condition may fold in turn (``Ne(x**2 + 1, 0)`` is True), dropping divisors inside
        # ``d``: those were required too, so the next round restores them
        result = sympy.And(result, *(sympy.Ne(d, 0) for d in missing))


def needs_rewriting(expr: sympy.Basic) -> bool:
    """Whether :class:`Simplifier` could change ``expr`` (it has divisions, Max or Min)."""
    return bool(_survey(expr)[0] & _REWRITABLE)


def _split_multiples(expr: sympy.Basic, d: int) -> tuple[sympy.Basic, sympy.Basic]:
    """``expr = multiple + rest`` where ``multiple`` is ``d`` times an integer expression."""
    multiple, rest = [], []
    for term in sympy.Add.make_args(expr):
        coeff, factor = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) % d == 0 and factor.is_integer:
            multiple.append(term)
        else:
            rest.append(term)
    return sympy.Add(*multiple), sympy.Add(*rest)


def _content(expr: sympy.Basic) -> int:
    """The gcd of the integer coefficients of ``expr``'s terms (1 if one is not an integer)."""
    g = 0
    for term in sympy.Add.make_args(expr):
        coeff, _ = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return 1
        g = math.gcd(g, int(coeff))
    return g


class Simplifier:
    """Bottom-up rewriting of expressions under known ranges and residue classes.

    ``used`` collects which analyses fired (``"modular"``, ``"ranges"``) so the reasoner can
    report which layer decided a claim.
    """

    def __init__(
        self,
        ranges: Mapping[sympy.Symbol, ValueRange],
        congruences: Mapping[sympy.Symbol, ModularSet],
    ) -> None:
        self.bounds = _Bounder(ranges)
        self.residues = _Analyzer(congruences)
        self.used: set[str] = set()
        self.memo: dict[sympy.Basic, sympy.Basic] = {}

    def __call__(self, expr: sympy.Basic) -> sympy.Basic:
        found = self.memo.get(expr)
        if found is None:
            found = self.memo[expr] = self._node(_rebuild(expr, self))
        return found

    def _node(self, expr: sympy.Basic) -> sympy.Basic:
        if F.rounded_in_floats(expr):  # rounded by Python: the integer identities do not hold
            return expr
        if isinstance(expr, F.FloorDiv):
            return self._floordiv(*expr.args)
        if isinstance(expr, F.Mod):
            return self._mod(*expr.args)
        if isinstance(expr, (F.Max, F.Min)):
            return self._minmax(expr)
        if expr.is_Add:
            return self._separate_floordiv(expr)
        return expr

    def _period(self, a: sympy.Basic, d: int) -> int | None:
        """``k`` when the ranges put ``a`` inside ``[k*d, k*d + d - 1]``."""
        r = self.bounds.bound(a)
        if is_infinite(r.lo) or is_infinite(r.hi):
            return None
        k = _floor_div(r.lo, d)
        return k if _floor_div(r.hi, d) == k else None

    def _floordiv(self, a: sympy.Basic, d: sympy.Basic) -> sympy.Basic:
        if not (d.is_Integer and d != 0):
            return F.FloorDiv(a, d)
        if d < 0:
            return self(F.FloorDiv(-a, -d))
        divisor = int(d)
        residues = self.residues.analyze(a)
        if residues is not None and residues.residue(divisor) is not None:
            self.used.add("modular")
            return self((a - residues.residue(divisor)) / divisor)
        multiple, rest = _split_multiples(a, divisor)
        if multiple != 0:
            return self(multiple / divisor + F.FloorDiv(rest, d))
        g = math.gcd(_content(a), divisor)
        if g > 1:
            return self(F.FloorDiv(a / g, divisor // g))
        if isinstance(a, F.FloorDiv) and divisor > 0:
            return self(F.FloorDiv(a.args[0], a.args[1] * divisor))
        k = self._period(a, divisor) if divisor > 0 else None
        if k is not None:
            self.used.add("ranges")
            return sympy.Integer(k)
        return F.FloorDiv(a, d)

    def _mod(self, a: sympy.Basic, d: sympy.Basic) -> sympy.Basic:
        if not (d.is_Integer and d != 0):
            return F.Mod(a, d)
        divisor = int(d)
        residues = self.residues.analyze(a)
        if residues is not None:
            residue = residues.residue(divisor)
            if residue is not None:
                self.used.add("modular")
                return sympy.Integer(residue)
        multiple, rest = _split_multiples(a, divisor)
        if multiple != 0:
            return self(F.Mod(rest, d))
        g = math.gcd(_content(a), divisor)
        if g > 1:
            return self(g * F.Mod(a / g, divisor // g))
        if isinstance(a, F.Mod) and a.args[1].is_Integer and int(a.args[1]) % divisor == 0:
            return self(F.Mod(a.args[0], d))
        k = self._period(a, divisor) if divisor > 0 else None
        if k is not None:
            self.used.add("ranges")
            return self(a - k * divisor)
        return F.Mod(a, d)

    def _minmax(self, expr: sympy.Basic) -> sympy.Basic:
        pick_max = isinstance(expr, F.Max)
        for candidate in expr.args:
            dominates = True
            for other in expr.args:
                if other is candidate:
                    continue
                r = self.bounds.bound(candidate - other)
                if not (r.lo >= 0 if pick_max else r.hi <= 0):
                    dominates = False
                    break
            if dominates:
                self.used.add("ranges")
                return candidate
        return expr

    def _separate_floordiv(self, expr: sympy.Basic) -> sympy.Basic:
        terms = expr.as_coefficients_dict()
        for node, k in terms.items():
            if not (isinstance(node, F.FloorDiv) and node.args[1].is_Integer and node.args[1] > 0):
                continue
            x, m = node.args
            x_terms = {t: c for t, c in x.as_coefficients_dict().items() if not t.is_Number}
            if not x_terms:
                continue
            first, first_coeff = next(iter(x_terms.items()))
            c = terms.get(first, 0) / first_coeff
            if c == 0 or not c.is_Integer:
                continue
            if all(terms.get(t, 0) == c * v for t, v in x_terms.items()):
                return self(expr - c * x + c * m * node + c * F.Mod(x, m))
        return expr


def simplify(
    expr: sympy.Basic,
    ranges: Mapping[sympy.Symbol, ValueRange],
    congruences: Mapping[sympy.Symbol, ModularSet],
) -> tuple[sympy.Basic, set[str]]:
    """``expr`` rewritten with the rules above, and the analyses that fired."""
    simplifier = Simplifier(ranges, congruences)
    return simplifier(expr), simplifier.used
