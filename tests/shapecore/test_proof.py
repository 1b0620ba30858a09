"""proof: a Proof is three-valued, prints who decided and why, and exports a checkable script."""

import pickle

import pytest
import sympy
import z3

from shapecore import functions as F
from shapecore import prove
from shapecore.proof import DeferredProof, Proof

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


def _deferred(calls: list) -> tuple[DeferredProof, Proof]:
    parts = (sympy.Ge(x, 0), (sympy.Ge(x, 1),), (sympy.Ge(x, 1),))
    plain = Proof(parts[0], "proved", "ranges", facts_used=parts[2], facts=parts[1])
    return DeferredProof("proved", "ranges", lambda: calls.append(1) or parts), plain


def test_a_deferred_proof_builds_its_sympy_parts_once_when_first_read():
    calls: list = []
    deferred, plain = _deferred(calls)
    assert deferred.proved and deferred.method == "ranges" and calls == []
    assert (deferred.claim, deferred.facts, deferred.facts_used) == (plain.claim, plain.facts, plain.facts_used)
    assert calls == [1]


def test_a_deferred_proof_equals_hashes_and_pickles_as_the_proof_it_stands_for():
    deferred, plain = _deferred([])
    assert deferred == plain and plain == deferred and hash(deferred) == hash(plain)
    assert deferred != Proof(plain.claim, "refuted", "ranges", facts_used=plain.facts_used)
    copied = pickle.loads(pickle.dumps(deferred))
    assert type(copied) is Proof and copied == plain and copied.facts == plain.facts
    assert str(deferred) == str(plain)
