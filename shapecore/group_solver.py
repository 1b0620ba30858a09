"""Which guards of a group the others imply: z3 around one model, for the simplifier.

:class:`GroupSolver` takes the members of one group of guards (guards connected through the
symbols they share) and, member by member, decides whether the other kept members imply it.
Members are duck-typed: anything with ``formula`` (what z3 encodes), ``extra_divisors``
(divisors that must be nonzero besides those in ``formula``) and ``symbols``.
:func:`unsatisfiable` and :func:`minimal_unsat` find contradictions.

Every z3 check runs within a part of the caller's :class:`~shapecore.budget.Budget` (a
resource count, not wall time, with a wall-clock backstop), and everything that reaches z3 is
in a fixed order (:func:`ordered`): the same input gets the same answers on any machine load
and any hash seed, unless the backstop fires.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import sympy
import z3

from shapecore.budget import Budget
from shapecore.evaluation import evaluate
from shapecore.functions import FloorDiv, Max, Min, Mod, int_symbol
from shapecore.guard_code import compile_predicate
from shapecore.ranges import is_infinite
from shapecore.rewrite import symbols_of
from shapecore.z3backend import Translator

__all__ = ["GroupSolver", "unsatisfiable", "minimal_unsat", "ordered", "is_linear"]


def ordered(items: Iterable[sympy.Basic]) -> list[sympy.Basic]:
    """A set of expressions in sympy's canonical order (a set's own order changes from run to
    run with string hashing, and z3's answers near its budget depend on the order of assertions)."""
    return sorted(items, key=sympy.default_sort_key)


def is_linear(expr: sympy.Basic) -> bool:
    """No product or power of symbols and no symbolic divisor: linear integer arithmetic
    (``//`` and ``%`` by constants, ``Max``/``Min`` included), which z3 decides quickly."""
    for node in sympy.preorder_traversal(expr):
        if node.is_Mul and sum(1 for a in node.args if not a.is_Number) > 1:
            return False
        if node.is_Pow or (isinstance(node, (FloorDiv, Mod)) and not node.args[1].is_Number):
            return False
        if not (node.is_Symbol or node.is_Number or node.is_Relational or node.is_Add or node.is_Mul
                or isinstance(node, (FloorDiv, Mod, Max, Min, sympy.And, sympy.Or, sympy.Not))
                or node in (sympy.true, sympy.false)):
            return False
    return True


class GroupSolver:
    """Decides, member by member, whether the other kept members of a group imply it.

    One model ``M`` of the whole group (from z3, checked by exact evaluation) makes most
    answers local. For member ``g``:

    1. a counterexample is sought by moving ``g``'s symbols away from ``M`` (one at a time to
       nearby and boundary values, then all together by small random steps) and evaluating
       exactly: if every other kept member still holds and ``g`` does not, ``g`` stays;
    2. z3 looks for a counterexample that moves only ``g``'s symbols, every other symbol fixed
       at ``M`` (so members that do not mention them still hold);
    3. for growing neighbourhoods (the members sharing a symbol with ``g``, then with those,
       ...) z3 tries to prove ``g`` from the neighbourhood alone, its linear members first
       (then it follows from the group), and otherwise looks for a counterexample moving the
       neighbourhood's inner symbols as in 2.

    Any counterexample is checked by exact evaluation before it counts. Once the neighbourhood
    is the whole group, z3's answer is final; ``unknown``, or more than a few queries about
    ``g`` without an answer, keeps it.

    z3 works within ``budget``: the model gets half of it, each member the part of it the
    caller passes to :meth:`implied_by`, and :meth:`bounds` what is left.
    """

    _STEPS = (1, -1, 2, -2, 8, -8, 16, -16)
    _JUMBLES = 64
    _QUERIES = 6  # z3 queries about one member, each within a share of its budget, before it is kept unanswered

    def __init__(self, group: list[Any], related: list[sympy.Basic],
                 replacements: Mapping[sympy.Symbol, sympy.Basic], budget: Budget) -> None:
        self.group = group
        self.related = related
        self.budget = budget
        self.translator = Translator(z3.Context())
        tr = self.translator
        self.members = [
            z3.And(tr.holds(c.formula), *(tr.holds(sympy.Ne(d, 0)) for d in ordered(c.extra_divisors))) for c in group
        ]
        self.facts = [tr.holds(f) for f in related]
        self.tracks = [z3.Bool(f"!member{i}", tr.ctx) for i in range(len(group))]
        self.tracked = [z3.Implies(t, m) for t, m in zip(self.tracks, self.members)]
        self.track_index = {f"!member{i}": i for i in range(len(group))}
        self.linear = [is_linear(c.formula) and not c.extra_divisors for c in group]
        self.axioms = list(tr.axioms)
        self.solver = z3.Solver(ctx=tr.ctx)
        self.solver.add(*self.axioms)
        self.predicates = [compile_predicate([c.formula, *(sympy.Ne(d, 0) for d in ordered(c.extra_divisors))]) for c in group]
        self.fact_predicates = [(symbols_of(f), compile_predicate([f])) for f in related]
        self.touching: dict[sympy.Symbol, list[int]] = {}
        for i, c in enumerate(group):
            for x in c.symbols:
                self.touching.setdefault(x, []).append(i)
        symbols = set(self.touching)
        self.definitions = {x: e for x, e in replacements.items() if x in symbols}
        self.linked = {x: symbols_of(e) & symbols for x, e in self.definitions.items()}
        self.model: dict[str, int] | None = None
        self.queries = 0  # z3 queries asked about the member being decided

    @contextlib.contextmanager
    def _scope(self, symbols: set[sympy.Symbol]) -> Iterator[z3.Solver]:
        """The group's one solver, with the context facts on ``symbols``, for one query.

        Queries push and pop a scope on one solver that holds the division axioms: a fresh
        z3 solver costs milliseconds to set up, more than most of these queries take.
        """
        self.solver.push()
        try:
            self.solver.add(*(f for f, (mentions, _) in zip(self.facts, self.fact_predicates) if mentions & symbols))
            yield self.solver
        finally:
            self.solver.pop()

    def _holds_all(self, values: Mapping[str, int], members: Iterable[int], symbols: Iterable[sympy.Symbol]) -> bool:
        try:
            return all(self.predicates[j](values) for j in members) and all(
                p(values) for s, p in self.fact_predicates if s & set(symbols)
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return False

    def model_of_all(self) -> tuple[str, list[int]]:
        """Check the whole group: ``("unsat", core)``, or ``("sat", [])`` with ``self.model`` set
        when z3's model survives exact evaluation, or ``("unknown", [])``.

        The members are asserted outright, for z3's nonlinear tactic (much faster here than
        the incremental solver that tracking literals need); only an unsat answer is re-checked
        with tracking literals, for the core.
        """
        ctx = self.translator.ctx
        budget = self.budget.part(1 / 2)
        result = z3.unknown
        for solver in (z3.Tactic("qfnia", ctx=ctx).solver(), z3.Solver(ctx=ctx)):
            solver.add(*self.facts, *self.axioms, *self.members)
            try:
                result = budget.check(solver)
            except z3.Z3Exception:  # the tactic does not apply (real-valued terms)
                continue
            if result != z3.unknown:
                break
        if result == z3.unsat:
            with self._scope(set(self.touching)) as tracked:
                tracked.add(*self.tracked)
                if budget.check(tracked, *self.tracks) != z3.unsat:
                    return "unsat", list(range(len(self.group)))
                return "unsat", [self.track_index[t.decl().name()] for t in tracked.unsat_core()
                                 if t.decl().name() in self.track_index]
        if result != z3.sat:
            return "unknown", []
        model = solver.model()
        values = {
            name: model.eval(var, model_completion=True).as_long() for name, var in self.translator.symbols.items()
        }
        if self._holds_all(values, range(len(self.group)), self.touching):
            self.model = values
        return "sat", []

    def bounds(self, sides: Mapping[sympy.Symbol, tuple[float, float]]) -> dict[sympy.Symbol, tuple[int | None, int | None]]:
        """Bounds z3's optimizer finds for the open (infinite) ``sides`` of symbols, over the
        kept linear members (a relaxation of the group, so the bounds hold for all of it).

        Only symbols that a kept linear member relates to another symbol can gain a bound the
        digest does not have; all objectives are optimized independently in one check (box).
        """
        related = {x for c, linear in zip(self.group, self.linear) if c.kept and linear and len(c.symbols) > 1
                   for x in c.symbols}
        goals = [(x, i) for x in ordered(set(sides) & related) for i in (0, 1)
                 if is_infinite(sides[x][i]) and x.name in self.translator.symbols]
        if not goals:
            return {}
        optimizer = z3.Optimize(ctx=self.translator.ctx)
        optimizer.set(priority="box")
        optimizer.add(*self.axioms, *self.facts)
        optimizer.add(*(m for m, c, linear in zip(self.members, self.group, self.linear) if c.kept and linear))
        handles = [(optimizer.maximize if i else optimizer.minimize)(self.translator.symbols[x.name]) for x, i in goals]
        if self.budget.check(optimizer) != z3.sat:
            return {}
        found: dict[sympy.Symbol, list[int | None]] = {}
        for (x, i), handle in zip(goals, handles):
            value = handle.value()
            found.setdefault(x, [None, None])[i] = value.as_long() if z3.is_int_value(value) else None
        return {x: (lo, hi) for x, (lo, hi) in found.items() if (lo, hi) != (None, None)}

    def _kept_others(self, i: int) -> list[int]:
        return [j for j, c in enumerate(self.group) if j != i and c.kept]

    def implied_by(self, i: int, budget: Budget) -> list[int] | None:
        """The kept members that imply member ``i`` (z3's unsat core), or None if not shown;
        z3 works within ``budget``."""
        group = self.group
        self.queries = 0
        others = set(self._kept_others(i))
        inner = set(group[i].symbols)
        inner |= {x for y in list(inner) for x, uses in self.linked.items() if y in uses}
        if self.model is not None and self._moved_counterexample(i):
            return None
        near = set()
        while self.queries < self._QUERIES:
            inner |= {x for y in list(inner) for x, uses in self.linked.items() if y in uses}
            wider = {j for x in inner for j in self.touching.get(x, ()) if j in others}
            if near and wider == near:  # nothing more is connected to member i
                return None
            near = wider
            status, core = self._prove_from(i, near, budget)
            if status == "unsat":
                return core
            if status == "unknown" or near == others:  # more members will not make z3 faster
                return None
            if self.model is not None and self._boundary_counterexample(i, inner, near, budget):
                return None
            inner |= {x for j in near for x in group[j].symbols}
        return None  # z3 was asked enough about this member without an answer: keep it

    def _prove_from(self, i: int, members: set[int], budget: Budget) -> tuple[str, list[int]]:
        """z3 on ``members ∧ ¬member i``: ``("unsat", core)``, ``("sat", [])`` or ``("unknown", [])``.

        The linear members are tried alone first: linear integer arithmetic is decidable and
        fast, most implications need nothing else, and fewer premises can only weaken them.
        """
        linear = {j for j in members if self.linear[j]}
        if linear != members:
            status, core = self._query(i, linear, budget)
            if status == "unsat":
                return status, core
        return self._query(i, members, budget)

    def _share(self, member: Budget) -> Budget:
        """One query's part of a member's budget: an equal share of what its queries have left."""
        return member.part(1 / max(1, self._QUERIES - self.queries))

    def _query(self, i: int, members: set[int], budget: Budget) -> tuple[str, list[int]]:
        symbols = set(self.group[i].symbols).union(*(self.group[j].symbols for j in members))
        ordered = sorted(members)  # z3's answers near its budget depend on the order
        with self._scope(symbols) as solver:
            solver.add(*(self.tracked[j] for j in ordered))
            solver.add(z3.Not(self.members[i]))
            result = self._share(budget).check(solver, *[self.tracks[j] for j in ordered])
            self.queries += 1
            if result != z3.unsat:
                return str(result), []
            return "unsat", [self.track_index[t.decl().name()] for t in solver.unsat_core() if t.decl().name() in self.track_index]

    def _is_counterexample(self, i: int, values: dict[str, int], moved: set[sympy.Symbol]) -> bool:
        touched = {j for x in moved for j in self.touching.get(x, ())}
        if self.predicates[i](values):
            return False
        return self._holds_all(values, (j for j in touched if j != i and self.group[j].kept), moved)

    def _moved_counterexample(self, i: int) -> bool:
        """Move one symbol of member ``i`` (and what is defined from it) away from the model."""
        model = self.model
        assert model is not None
        cand = self.group[i]
        symbols = sorted((x for x in cand.symbols if x.is_integer), key=str)
        numbers = {int(n) for n in cand.formula.atoms(sympy.Integer)}
        for x in symbols:
            near = {model[y.name] + e for y in symbols for e in (-1, 0, 1)}
            # past a product's bound: n // y + 1 for each other symbol y of the member
            past = {n // model[y.name] + e for n in numbers for y in symbols if y != x and model[y.name] > 0 for e in (0, 1)}
            trial_values = ({model[x.name] + d for d in self._STEPS} | near | past
                            | {n + e for n in numbers for e in (0, *self._STEPS)} | {2 * model[x.name], 16 * model[x.name]})
            dependents = {y for y, uses in self.linked.items() if x in uses}
            for v in sorted(trial_values - {model[x.name]}):
                values = dict(model)
                values[x.name] = v
                try:
                    for y in dependents:
                        values[y.name] = evaluate(self.definitions[y], values)
                except (ZeroDivisionError, TypeError):
                    continue
                if self._is_counterexample(i, values, {x} | dependents):
                    return True
        return self._jumbled_counterexample(i, symbols)

    def _jumbled_counterexample(self, i: int, symbols: list[sympy.Symbol]) -> bool:
        """Move all of member ``i``'s symbols at once, by small pseudo-random steps."""
        model = self.model
        assert model is not None
        if len(symbols) < 2:
            return False
        rng = random.Random(i)
        dependents = {y for y, uses in self.linked.items() if uses & set(symbols)}
        for _ in range(self._JUMBLES):
            values = dict(model)
            for x in symbols:
                values[x.name] = model[x.name] + rng.choice(self._STEPS + (0,)) * rng.choice((1, 1, 2, 3))
            try:
                for y in dependents:
                    values[y.name] = evaluate(self.definitions[y], values)
            except (ZeroDivisionError, TypeError):
                continue
            if self._is_counterexample(i, values, set(symbols) | dependents):
                return True
        return False

    def _boundary_counterexample(self, i: int, inner: set[sympy.Symbol], near: set[int], budget: Budget) -> bool:
        """z3: a counterexample moving only ``inner``; every other symbol stays at the model."""
        model = self.model
        assert model is not None
        with self._scope(set(inner)) as solver:
            for j in sorted(near):
                solver.add(self.members[j])
            solver.add(z3.Not(self.members[i]))
            for name, var in self.translator.symbols.items():
                if int_symbol(name) not in inner:
                    solver.add(var == model[name])
            result = self._share(budget).check(solver)
            self.queries += 1
            if result != z3.sat:
                return False
            found = solver.model()
            values = dict(model)
            for x in inner:
                if x.is_integer and x.name in self.translator.symbols:
                    values[x.name] = found.eval(self.translator.symbols[x.name], model_completion=True).as_long()
        return self._is_counterexample(i, values, inner)


def unsatisfiable(atoms: list[Any], context: list[sympy.Basic], budget: Budget) -> bool:
    """Whether z3 shows, within ``budget``, that ``atoms`` cannot all hold together with ``context``."""
    translator = Translator(z3.Context())
    solver = z3.Solver(ctx=translator.ctx)
    solver.add(*(translator.holds(f) for f in context))
    for atom in atoms:
        defined = [translator.holds(sympy.Ne(d, 0)) for d in ordered(atom.divisors) if not d.is_Number]
        solver.add(translator.holds(atom.canonical), *defined)
    solver.add(*translator.axioms)
    return budget.check(solver) == z3.unsat


_MINIMIZE_AT_MOST = 64  # conjuncts; a larger unsatisfiable set is reported as it is


def minimal_unsat(atoms: list[Any], context: list[sympy.Basic], budget: Budget) -> list[Any]:
    """A subset of the unsatisfiable ``atoms`` that z3 shows unsatisfiable, each member needed;
    each trial gets an equal part of what is left of ``budget``."""
    keep = list(atoms)
    if len(keep) > _MINIMIZE_AT_MOST:
        return keep
    for k, atom in enumerate(list(keep)):
        trial = [a for a in keep if a is not atom]
        if trial and unsatisfiable(trial, context, budget.part(1 / (len(atoms) - k))):
            keep = trial
    return keep
