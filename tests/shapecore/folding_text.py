"""Guard text that sympy's folding would rewrite, as hypothesis strategies.

Text, not sympy trees, so that parsing and the folding sympy does while building are under
test too. Unlike :class:`tests.shapecore.guard_text.GuardWriter`, whose traps are whole
claims, these nest what folds anywhere in an expression or claim (``a - a``, ``0*(a)``,
``Mod(a, 1)``, ``(a)**0``, ``Max(a, a)``, ``Eq(a, a)``, ``Ne(2*a, 5)``) and write float
arithmetic (``s0*0.1*10``). The oracle is :mod:`tests.shapecore.oracle`: Python itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def _divisions(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pairs = st.tuples(children, children)
    return st.one_of(
        pairs.map(lambda ab: f"({ab[0]} + {ab[1]})"),
        pairs.map(lambda ab: f"({ab[0]} - {ab[1]})"),
        pairs.map(lambda ab: f"({ab[0]})*({ab[1]})"),
        pairs.map(lambda ab: f"({ab[0]} // {ab[1]})"),
        pairs.map(lambda ab: f"Mod({ab[0]}, {ab[1]})"),
        pairs.map(lambda ab: f"CeilDiv({ab[0]}, {ab[1]})"),
        st.tuples(children, children, children).map(lambda t: f"ModularIndexing({t[0]}, {t[1]}, {t[2]})"),
        pairs.map(lambda ab: f"Max({ab[0]}, {ab[1]})"),
        pairs.map(lambda ab: f"Min({ab[0]}, {ab[1]})"),
        children.map(lambda a: f"({a})**2"),
    )


def _leaves(names: Sequence[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(list(names)), st.integers(-4, 6).map(str))


def _small(names: Sequence[str]) -> st.SearchStrategy[str]:
    """Small expressions, for the patterns that repeat one (so text stays short)."""
    return st.recursive(_leaves(names), _divisions, max_leaves=3)


def int_texts(names: Sequence[str], *, max_leaves: int = 5) -> st.SearchStrategy[str]:
    """Integer expressions as text, over ``names``, with symbolic divisors and foldable parts."""
    small = _small(names)
    folding = st.one_of(  # what sympy folds away, divisions and all
        small.map(lambda a: f"({a} - {a})"),
        small.map(lambda a: f"Max({a}, {a})"),
    )

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            _divisions(children),
            folding,
            children.map(lambda a: f"0*({a})"),
            children.map(lambda a: f"({a})**0"),
            st.tuples(children, st.sampled_from([1, -1])).map(lambda ab: f"Mod({ab[0]}, {ab[1]})"),
        )

    return st.recursive(_leaves(names), extend, max_leaves=max_leaves)


def claim_texts(names: Sequence[str], *, max_leaves: int = 4) -> st.SearchStrategy[str]:
    """Relations of :func:`int_texts` and their ``And``/``Or``/``Not`` and Python's ``and``/``or``, as text."""
    ints = int_texts(names, max_leaves=max_leaves)
    small = _small(names)
    relation = st.one_of(
        st.tuples(st.sampled_from(["Eq", "Ne", "Lt", "Le", "Gt", "Ge"]), ints, ints).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        small.map(lambda a: f"Eq({a}, {a})"),
        ints.map(lambda a: f"Ne(2*({a}), 5)"),  # never 5: sympy knows 2*a is even
    )
    return st.recursive(
        relation,
        lambda children: st.one_of(
            st.tuples(children, children).map(lambda ab: f"And({ab[0]}, {ab[1]})"),
            st.tuples(children, children).map(lambda ab: f"Or({ab[0]}, {ab[1]})"),
            st.tuples(children, children).map(lambda ab: f"({ab[0]} and {ab[1]})"),  # Python's: short circuits
            st.tuples(children, children).map(lambda ab: f"({ab[0]} or {ab[1]})"),
            children.map(lambda a: f"Not({a})"),
        ),
        max_leaves=3,
    )


def float_texts(names: Sequence[str], *, max_leaves: int = 4) -> st.SearchStrategy[str]:
    """Claims mixing integers and floats as Python would (``s0*0.1*10 <= s0``), as text."""
    leaves = st.one_of(
        st.sampled_from(list(names)),
        st.integers(-3, 10).map(str),
        st.sampled_from(["0.1", "0.5", "2.5", "0.3", "1e-3", "10.0", "(-0.2)"]),
    )

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda ab: f"{ab[0]} + {ab[1]}"),
            pairs.map(lambda ab: f"{ab[0]} - {ab[1]}"),
            pairs.map(lambda ab: f"{ab[0]}*{ab[1]}"),
            pairs.map(lambda ab: f"({ab[0]})*({ab[1]})"),
            pairs.map(lambda ab: f"({ab[0]} + {ab[1]})"),
            children.map(lambda a: f"({a})**2"),
        )

    values = st.recursive(leaves, extend, max_leaves=max_leaves)
    return st.tuples(st.sampled_from(["<=", "<", "==", "!=", ">="]), values, values).map(lambda t: f"{t[1]} {t[0]} {t[2]}")
