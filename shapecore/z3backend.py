"""z3 with an integer encoding of Python semantics: the complete (but slowest) layer.

Encoding (each symbol is a z3 ``Int``):

* ``a // d`` and ``a % d`` for a positive integer constant ``d`` are z3's ``div``/``mod``,
  which round toward -infinity for positive divisors, i.e. Python's semantics; a negative
  constant uses ``a // d = (-a) // (-d)``.
* Any other ``FloorDiv(a, b)`` gets a fresh ``Int q`` with the axiom
  ``(b > 0 → b*q <= a < b*q + b) ∧ (b < 0 → b*q >= a > b*q + b)``; ``Mod(a, b) = a - b*q``
  with the same ``q`` (one per pair ``(a, b)``, so z3 sees ``a == b*(a//b) + a%b``).
  The axiom only constrains the fresh ``q``, so it is asserted once, globally.
* Every division contributes the definedness condition ``b != 0``; a formula *holds* when it
  is defined and true (see :func:`shapecore.evaluation.holds`). Python's short-circuiting
  ``A and B`` (``A or B``) is defined where ``A`` is and, unless ``A`` is false (true), ``B``.
* Rational constants are z3 reals (mixed integer/real arithmetic, exact); so is a float
  constant, at its double's exact value, as Python compares it with an int.
* ``CleanDiv``, ``PythonMod``, ``CeilDiv`` and ``ModularIndexing`` are encoded through the
  above node by node, without rebuilding (and so re-simplifying) the sympy tree.
* A division, remainder, Max or Min with a float operand (:func:`shapecore.functions.rounded_in_floats`),
  float-valued functions and anything else outside the integer vocabulary become fresh,
  unconstrained variables: proofs stay
  sound, and since a model may then be spurious, the reasoner checks every model by exact
  evaluation before it calls it a counterexample.

:class:`Z3Session` keeps one incremental solver per fact scope: facts are asserted once behind
tracking literals (for unsat cores), each query adds ``q → ¬holds(claim)`` and checks under
the assumption ``q``, within the caller's :class:`~shapecore.budget.Budget` (a deterministic
resource count with a wall-clock backstop).
"""

from __future__ import annotations

from dataclasses import dataclass

from fractions import Fraction

import sympy
import z3

from shapecore import functions as F
from shapecore import z3_threads
from shapecore.budget import Budget
from shapecore.operations import BY_CLASS, DIVISOR_ARGUMENTS, SHORT_CIRCUITS

__all__ = ["Translator", "Z3Session", "Z3Answer", "smtlib_script"]


class Translator:
    """sympy → z3 terms in ``ctx``, with the shared axioms of division.

    Give each solver's terms a context of their own: z3 orders terms by when the context first
    saw them, so in a shared context (such as z3's main one) the same query can take another
    path, and get another answer within the same budget, depending on what ran before.
    """

    def __init__(self, ctx: z3.Context) -> None:
        self.ctx = ctx
        self.axioms: list[z3.BoolRef] = []
        self._symbols: dict[str, z3.ArithRef] = {}
        self._reals: dict[str, z3.ArithRef] = {}
        self._terms: dict[sympy.Basic, tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]] = {}
        self._fresh = 0
        self._quotients: dict[tuple[sympy.Basic, ...], z3.ArithRef] = {}

    def symbol(self, name: str) -> z3.ArithRef:
        found = self._symbols.get(name)
        if found is None:
            found = self._symbols[name] = z3.Int(name, self.ctx)
        return found

    def _real(self, name: str) -> z3.ArithRef:
        found = self._reals.get(name)
        if found is None:
            found = self._reals[name] = z3.Real(name, self.ctx)
        return found

    @property
    def symbols(self) -> dict[str, z3.ArithRef]:
        """The integer symbols translated so far, by name."""
        return self._symbols

    @property
    def reals(self) -> dict[str, z3.ArithRef]:
        """The real (float) symbols translated so far, by name."""
        return self._reals

    def _fresh_var(self, prefix: str, real: bool = False) -> z3.ArithRef:
        self._fresh += 1
        name = f"!{prefix}{self._fresh}"
        return z3.Real(name, self.ctx) if real else z3.Int(name, self.ctx)

    def holds(self, formula: sympy.Basic) -> z3.BoolRef:
        """z3 formula true exactly where ``formula`` is defined and true."""
        value, defined = self.term(formula)
        return z3.And(*defined, value) if defined else value

    def term(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        """``(value, definedness conditions)`` of ``expr``."""
        found = self._terms.get(expr)
        if found is None:
            found = self._terms[expr] = self._translate(expr)
        return found

    def _args(self, expr: sympy.Basic) -> tuple[list[z3.ExprRef], tuple[z3.BoolRef, ...]]:
        values, defined = [], []
        for arg in expr.args:
            v, d = self.term(arg)
            values.append(v)
            defined.extend(d)
        return values, tuple(dict.fromkeys(defined))

    def _opaque(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        """A fresh variable, defined where the arguments are and its divisors are nonzero."""
        values, defined = self._args(expr)
        divisors = DIVISOR_ARGUMENTS.get(type(expr))
        if divisors is not None:
            nonzero = (v != 0 for v, arg in zip(values[divisors], expr.args[divisors]) if not arg.is_Number)
            defined = tuple(dict.fromkeys(defined + tuple(nonzero)))
        return self._fresh_var("opaque", real=not expr.is_integer), defined

    def _translate(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        ctx = self.ctx
        if expr.is_Symbol:
            return (self.symbol(expr.name) if expr.is_integer else self._real(expr.name)), ()
        if expr.is_Integer:
            return z3.IntVal(int(expr), ctx), ()
        if expr.is_Rational:
            return z3.RealVal(f"{expr.p}/{expr.q}", ctx), ()
        if isinstance(expr, F.PythonFloat):  # a double's exact value, as Python compares it
            exact = expr.exact()
            return z3.RealVal(f"{exact.p}/{exact.q}", ctx), ()
        if expr is sympy.true:
            return z3.BoolVal(True, ctx), ()
        if expr is sympy.false:
            return z3.BoolVal(False, ctx), ()
        if F.rounded_in_floats(expr):  # rounded by Python: a fresh variable, models checked by evaluation
            return self._opaque(expr)
        if isinstance(expr, (F.FloorDiv, F.Mod)):
            return self._division(expr)
        if isinstance(expr, (F.CeilDiv, F.ModularIndexing)):
            return self._composite_division(expr)
        if expr.is_Pow:
            if expr.exp.is_Integer and 0 <= expr.exp <= 64:
                base, defined = self.term(expr.base)
                result: z3.ExprRef = z3.IntVal(1, ctx)
                for _ in range(int(expr.exp)):
                    result = result * base
                return result, defined
            return self._opaque(expr)
        if isinstance(expr, SHORT_CIRCUITS):
            return self._short_circuit(expr)
        values, defined = self._args(expr)
        if expr.is_Add:
            return z3.Sum(*values), defined
        if expr.is_Mul:
            return z3.Product(*values), defined
        if isinstance(expr, (F.Max, F.Min)):
            result = values[0]
            for v in values[1:]:
                result = z3.If(v > result, v, result) if isinstance(expr, F.Max) else z3.If(v < result, v, result)
            return result, defined
        if expr.is_Relational:
            return BY_CLASS[type(expr)].python(*values), defined  # operator.eq … work on z3 terms
        if isinstance(expr, sympy.And):
            return z3.And(*values), defined
        if isinstance(expr, sympy.Or):
            return z3.Or(*values), defined
        if isinstance(expr, sympy.Not):
            return z3.Not(values[0]), defined
        return self._opaque(expr)

    def _short_circuit(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        """Python's ``and``/``or``: the value of ``And``/``Or``, defined where the first part is
        and each later part is wherever the parts before it did not decide."""
        is_and = isinstance(expr, F.PythonAnd)
        parts = [self.term(arg) for arg in expr.args]
        defined: tuple[z3.BoolRef, ...] = ()
        for value, conditions in reversed(parts):
            if defined:
                decides = z3.Not(value) if is_and else value
                defined = (*conditions, z3.Or(decides, z3.And(*defined)))
            else:
                defined = conditions
        values = [value for value, _ in parts]
        return (z3.And(*values) if is_and else z3.Or(*values)), defined

    def _composite_division(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        """``CeilDiv(a, b) = -((-a) // b)`` and ``ModularIndexing(a, b, c) = (a // b) % c``.

        Built node by node, not by rebuilding the sympy tree, so nothing is simplified away.
        """
        if isinstance(expr, F.CeilDiv):
            a, b = expr.args
            value, defined = self._division(F.FloorDiv(-a, b, evaluate=False))
            return -value, defined
        a, b, c = expr.args
        return self._division(F.Mod(F.FloorDiv(a, b, evaluate=False), c, evaluate=False))

    def _division(self, expr: sympy.Basic) -> tuple[z3.ExprRef, tuple[z3.BoolRef, ...]]:
        (a, b), defined = self._args(expr)
        is_mod = isinstance(expr, F.Mod)
        divisor = expr.args[1]
        integral = a.is_int() and b.is_int()
        if divisor.is_Integer and integral:
            d = int(divisor)
            if d > 0:
                return (a % d if is_mod else a / d), defined
            quotient = (-a) / (-d)
            return (a - b * quotient if is_mod else quotient), defined
        q = self._quotients.get(expr.args)
        if q is None:  # one quotient per (a, b): FloorDiv(a, b) and Mod(a, b) share it
            q = self._quotients[expr.args] = self._fresh_var("q")
            self.axioms.append(z3.Implies(b > 0, z3.And(b * q <= a, a < b * q + b)))
            self.axioms.append(z3.Implies(b < 0, z3.And(b * q >= a, a > b * q + b)))
        if not divisor.is_Number:
            defined = tuple(dict.fromkeys(defined + (b != 0,)))
        return (a - b * q if is_mod else q), defined


@dataclass(frozen=True)
class Z3Answer:
    """``status`` is ``unsat`` (claim proved), ``sat`` (``model`` given) or ``unknown``."""

    status: str
    model: dict[str, int | float] | None = None
    core: tuple[int, ...] | None = None
    reason: str = ""


class Z3Session:
    """One persistent incremental solver, in a context of its own, for a growing list of facts.

    A context is never reused: one used before makes z3 take other paths (ids of freed terms
    are recycled), so answers within a budget would depend on earlier queries. Measured with
    z3 5.4: a context costs 3-20 ms to make (its term table, ~16 MB, page-faulted in afresh
    when the allocator gave the last one's back), the one cost of a first query that reaches z3.
    """

    def __init__(self) -> None:
        self.translator = Translator(z3.Context())
        self.solver = z3.Solver(ctx=self.translator.ctx)
        self._tracks: list[z3.BoolRef] = []
        self._axioms_sent = 0
        self._queries = 0

    def __del__(self) -> None:
        # its z3 objects go back to z3 inside exclusive(), whoever drops the session (see shapecore.z3_threads)
        with z3_threads.exclusive():
            self._tracks, self.solver, self.translator = [], None, None  # type: ignore[assignment]

    def _flush_axioms(self) -> None:
        axioms = self.translator.axioms
        if self._axioms_sent < len(axioms):
            self.solver.add(*axioms[self._axioms_sent :])
            self._axioms_sent = len(axioms)

    def add_fact(self, fact: sympy.Basic) -> None:
        track = z3.Bool(f"!fact{len(self._tracks)}", self.translator.ctx)
        self.solver.add(z3.Implies(track, self.translator.holds(fact)))
        self._tracks.append(track)

    def check(self, claim: sympy.Basic, budget: Budget) -> Z3Answer:
        """Is ``facts ∧ ¬holds(claim)`` unsatisfiable (proved) or satisfiable (model), within ``budget``?"""
        translator = self.translator
        negated = z3.Not(translator.holds(claim))
        self._flush_axioms()
        self._queries += 1
        query = z3.Bool(f"!query{self._queries}", translator.ctx)
        self.solver.add(z3.Implies(query, negated))
        result = budget.check(self.solver, *self._tracks, query)
        if result == z3.unsat:
            core = {str(t) for t in self.solver.unsat_core()}
            used = tuple(i for i, t in enumerate(self._tracks) if str(t) in core)
            return Z3Answer("unsat", core=used)
        if result == z3.sat:
            model = self.solver.model()
            values: dict[str, int | float] = {
                name: model.eval(var, model_completion=True).as_long()
                for name, var in translator.symbols.items()
            }
            for name, var in translator.reals.items():
                value = model.eval(var, model_completion=True)
                values[name] = float(Fraction(value.numerator_as_long(), value.denominator_as_long()))
            return Z3Answer("sat", model=values)
        return Z3Answer("unknown", reason=budget.describe())


def smtlib_script(facts: list[sympy.Basic], claim: sympy.Basic) -> str:
    """SMT-LIB2 asserting the facts and the negated claim: ``unsat`` iff the claim follows."""
    with z3_threads.exclusive():
        translator = Translator(z3.Context())
        solver = z3.Solver(ctx=translator.ctx)
        for fact in facts:
            solver.add(translator.holds(fact))
        solver.add(z3.Not(translator.holds(claim)))
        solver.add(*translator.axioms)
        script = solver.to_smt2()
        del translator, solver  # z3 objects freed inside the block
    return script
