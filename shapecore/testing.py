"""Hypothesis strategies for property tests of shape reasoning (requires ``hypothesis``).

Public so that other compilers can test their own code against shapecore's vocabulary:

* :func:`int_exprs` — integer expressions over given symbols, with every operation of the
  vocabulary (``FloorDiv``, ``Mod``, ``Max`` … and nonconstant divisors);
* :func:`claims` — relations and boolean combinations of them;
* :func:`fact_sets` — facts of the shapes torch records (ranges, congruences, relations);
* :func:`assignments` — integer values for symbols, negatives included;
* :func:`shape_envs` — :class:`~shapecore.env.ShapeEnv` objects whose facts hold at the hints.

Expressions stay small (depth and constants bounded) so that brute force and z3 stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore.env import ShapeEnv
from shapecore.evaluation import holds

__all__ = ["int_exprs", "claims", "relations", "fact_sets", "assignments", "shape_envs", "DEFAULT_NAMES"]

DEFAULT_NAMES: tuple[str, ...] = ("s0", "s1", "s2")

_RELATIONS = (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)


def _nonzero(n: int) -> int:
    return n if n else 1


def int_exprs(
    names: Sequence[str] = DEFAULT_NAMES,
    *,
    max_leaves: int = 6,
    constants: tuple[int, int] = (-12, 12),
    divisors: tuple[int, int] = (-8, 16),
    variable_divisors: bool = True,
) -> st.SearchStrategy[sympy.Basic]:
    """Integer expressions over ``names`` built from the whole vocabulary."""
    symbols = st.sampled_from([F.int_symbol(n) for n in names])
    leaves = st.one_of(symbols, st.integers(*constants).map(sympy.Integer))
    constant_divisor = st.integers(*divisors).map(_nonzero).map(sympy.Integer)

    def extend(children: st.SearchStrategy[sympy.Basic]) -> st.SearchStrategy[sympy.Basic]:
        nonzero_children = children.filter(lambda d: d.is_zero is not True)
        divisor = st.one_of(constant_divisor, nonzero_children) if variable_divisors else constant_divisor
        return st.one_of(
            st.tuples(children, children).map(lambda ab: ab[0] + ab[1]),
            st.tuples(children, children).map(lambda ab: ab[0] - ab[1]),
            st.tuples(st.integers(*constants).map(sympy.Integer), children).map(lambda ab: ab[0] * ab[1]),
            st.tuples(children, children).map(lambda ab: ab[0] * ab[1]),
            st.tuples(children, divisor).map(lambda ab: F.FloorDiv(*ab)),
            st.tuples(children, divisor).map(lambda ab: F.Mod(*ab)),
            st.tuples(children, divisor).map(lambda ab: F.PythonMod(*ab)),
            st.tuples(children, constant_divisor).map(lambda ab: F.CleanDiv(*ab)),
            st.tuples(children, divisor).map(lambda ab: F.CeilDiv(*ab)),
            st.tuples(children, constant_divisor, constant_divisor).map(lambda abc: F.ModularIndexing(*abc)),
            st.tuples(children, children).map(lambda ab: F.Max(*ab)),
            st.tuples(children, children).map(lambda ab: F.Min(*ab)),
            children.map(lambda a: a**2),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def relations(names: Sequence[str] = DEFAULT_NAMES, **expr_options: object) -> st.SearchStrategy[sympy.Basic]:
    """``Eq/Ne/Lt/Le/Gt/Ge`` between two expressions (may fold to ``true``/``false``)."""
    exprs = int_exprs(names, **expr_options)  # type: ignore[arg-type]
    return st.tuples(st.sampled_from(_RELATIONS), exprs, exprs).map(lambda t: t[0](t[1], t[2]))


def claims(
    names: Sequence[str] = DEFAULT_NAMES, *, short_circuits: bool = True, **expr_options: object
) -> st.SearchStrategy[sympy.Basic]:
    """Relations and their ``And``/``Or``/``Not`` combinations, and (unless ``short_circuits``
    is False) Python's short-circuiting ``and``/``or`` (:class:`~shapecore.PythonAnd`)."""
    base = relations(names, **expr_options)
    connectives = [sympy.And, sympy.Or] + ([F.PythonAnd, F.PythonOr] if short_circuits else [])
    return st.recursive(
        base,
        lambda children: st.one_of(
            *(st.tuples(children, children).map(lambda ab, c=c: c(*ab)) for c in connectives),
            children.map(sympy.Not),
        ),
        max_leaves=3,
    )


def _congruence(names: Sequence[str]) -> st.SearchStrategy[sympy.Basic]:
    return st.tuples(st.sampled_from(names), st.sampled_from([2, 3, 4, 8, 16]), st.integers(0, 15)).map(
        lambda t: sympy.Eq(F.Mod(F.int_symbol(t[0]), t[1]), t[2] % t[1])
    )


def _bound(names: Sequence[str]) -> st.SearchStrategy[sympy.Basic]:
    return st.tuples(st.sampled_from(names), st.sampled_from([sympy.Ge, sympy.Le, sympy.Gt, sympy.Lt, sympy.Ne]),
                     st.integers(-10, 40)).map(lambda t: t[1](F.int_symbol(t[0]), t[2]))


def fact_sets(
    names: Sequence[str] = DEFAULT_NAMES, *, max_size: int = 4, **expr_options: object
) -> st.SearchStrategy[list[sympy.Basic]]:
    """Lists of facts: ranges, congruences (``Eq(Mod(s0, 8), 0)``) and general relations."""
    fact = st.one_of(
        _bound(names), _congruence(names), relations(names, **expr_options)  # type: ignore[arg-type]
    ).filter(lambda f: f is not sympy.true)
    return st.lists(fact, max_size=max_size)


def assignments(
    names: Sequence[str] = DEFAULT_NAMES, *, lo: int = -20, hi: int = 40
) -> st.SearchStrategy[dict[str, int]]:
    """Integer values for every name in ``[lo, hi]``."""
    return st.fixed_dictionaries({n: st.integers(lo, hi) for n in names})


@st.composite
def shape_envs(draw: st.DrawFn, names: Sequence[str] = DEFAULT_NAMES, *, max_facts: int = 3) -> ShapeEnv:
    """A ShapeEnv with backed symbols ``names`` (hints in [2, 64]) and facts true at the hints."""
    env = ShapeEnv(timeout_ms=200)
    hints = {n: draw(st.integers(2, 64)) for n in names}
    for name in names:
        env.create_symbol(hints[name], name=name, source=f"{name}_source")
    for fact in draw(fact_sets(names, max_size=max_facts, variable_divisors=False)):
        if fact is not sympy.false and holds(fact, hints):
            env.add_fact(fact)
    return env
