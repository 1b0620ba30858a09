"""proof: a Proof is three-valued, prints who decided and why, and exports a checkable script."""

import pytest
import sympy
import z3

from shapecore import functions as F
from shapecore import prove
from shapecore.proof import Proof

x, y = F.int_symbol("x"), F.int_symbol("y")


def test_proof_is_not_a_bool():
    with pytest.raises(TypeError, match="three-valued"):
        bool(prove("s0 >= s0"))


@pytest.mark.parametrize("status", ["proved", "refuted", "unknown"])
def test_exactly_one_status_property_holds(status):
    proof = Proof(sympy.Ge(x, 0), status, "z3")
    assert (proof.proved, proof.refuted) == (status == "proved", status == "refuted")


def test_str_names_status_method_claim_sorted_counterexample_and_reason():
    proof = Proof(sympy.Ge(x, y), "refuted", "search", counterexample={"y": 1, "x": 0}, reason="found by search")
    assert str(proof) == "refuted (search): x >= y; counterexample x=0, y=1; found by search"


@pytest.mark.parametrize(
    "facts, claim, follows",
    [
        ([sympy.Eq(F.Mod(x, 8), 0)], sympy.Eq(F.Mod(x, 4), 0), True),
        ([sympy.Eq(F.Mod(x, 4), 0)], sympy.Eq(F.Mod(x, 8), 0), False),
        ([sympy.Ge(y, 1)], sympy.Ge(F.FloorDiv(x, y) * y, x - y + 1), True),
    ],
)
def test_to_smtlib_is_unsat_exactly_when_the_facts_imply_the_claim(facts, claim, follows):
    solver = z3.Solver()
    solver.from_string(Proof(claim, "unknown", "z3", facts=tuple(facts)).to_smtlib())
    assert (solver.check() == z3.unsat) is follows
