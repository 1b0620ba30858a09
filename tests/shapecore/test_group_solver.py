"""group_solver: implications and contradictions z3 reports hold on a box by exact evaluation."""

import itertools
from dataclasses import dataclass, field

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import functions as F
from shapecore.budget import Budget
from shapecore.evaluation import holds
from shapecore.group_solver import GroupSolver, is_linear, minimal_unsat, unsatisfiable
from shapecore.rewrite import symbols_of
from shapecore.testing import relations

NAMES = ("s0", "s1")
BOX = [dict(zip(NAMES, point)) for point in itertools.product(range(-8, 9), repeat=len(NAMES))]
SMALL = {"max_leaves": 3, "constants": (-6, 6), "divisors": (-4, 6), "variable_divisors": False}
x, y = F.int_symbol("x"), F.int_symbol("y")


@dataclass
class Member:
    formula: sympy.Basic
    extra_divisors: frozenset = frozenset()
    kept: bool = True
    symbols: frozenset = field(init=False)

    def __post_init__(self):
        self.symbols = symbols_of(self.formula)


@dataclass
class Atom:
    canonical: sympy.Basic
    divisors: frozenset = frozenset()


members = st.lists(relations(NAMES, **SMALL).filter(lambda r: r not in (sympy.true, sympy.false)), min_size=2, max_size=4)


@settings(max_examples=25, deadline=None)
@given(formulas=members)
def test_an_implying_core_implies_the_member_on_a_box(formulas):
    group = [Member(f) for f in formulas]
    solver = GroupSolver(group, [], {}, Budget(500))
    status, _ = solver.model_of_all()
    if status != "sat":
        return
    for i in range(len(group)):
        core = solver.implied_by(i, Budget(200))
        if core is None:
            continue
        assert i not in core
        for point in BOX:
            if all(holds(formulas[j], point) for j in core):
                assert holds(formulas[i], point), (point, i, core)


@settings(max_examples=25, deadline=None)
@given(formulas=members)
def test_unsatisfiable_only_where_no_point_satisfies_all(formulas):
    atoms = [Atom(f) for f in formulas]
    if unsatisfiable(atoms, [], Budget(200)):
        assert not any(all(holds(f, point) for f in formulas) for point in BOX)
        kept = minimal_unsat(atoms, [], Budget(200))
        assert unsatisfiable(kept, [], Budget(200))
        assert set(map(id, kept)) <= set(map(id, atoms))


def test_minimal_unsat_drops_what_the_contradiction_does_not_need():
    atoms = [Atom(sympy.Ge(y, 0)), Atom(sympy.Ge(x, 5)), Atom(sympy.Le(x, 2))]
    assert [a.canonical for a in minimal_unsat(atoms, [], Budget(500))] == [sympy.Ge(x, 5), sympy.Le(x, 2)]


def test_is_linear():
    assert is_linear(sympy.Ge(2 * x + F.FloorDiv(y, 4) - F.Max(x, y), 3))
    assert not is_linear(sympy.Ge(x * y, 3))
    assert not is_linear(sympy.Ge(F.FloorDiv(x, y), 3))
    assert not is_linear(sympy.Ge(x**2, 3))


def test_a_weaker_member_is_implied_and_the_stronger_is_not():
    group = [Member(sympy.Ge(x, 5)), Member(sympy.Ge(x, 2)), Member(sympy.Le(x + y, 9))]
    solver = GroupSolver(group, [], {}, Budget(500))
    assert solver.model_of_all()[0] == "sat"
    assert solver.implied_by(1, Budget(200)) == [0]
    assert solver.implied_by(0, Budget(200)) is None
