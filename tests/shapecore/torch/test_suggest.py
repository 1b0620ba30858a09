"""suggest: the least restrictive spec for a trace's guards, proved, checked against brute force and torch.

The solver (:func:`suggest_spec`) is checked against brute force on random guard sets (every
admitted value satisfies every guard; as many values admitted as the best progression over an
interval admits); the torch side on the corpus of rejected specs (``suggest_models.py``): ours
exports, the exported program runs at sizes it admits, and it asks no more than torch's own
suggestion whenever torch's exports, keeps its promise and keeps the same dims dynamic.
"""

import math
import os

import pytest
import sympy
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.export import Dim

from shapecore import FloorDiv, Mod, holds, int_symbol
from shapecore.errors import ShapecoreError
from shapecore.torch.suggest import (_moduli, DimFix, DimInfo, constraint_count, read_export_failure, suggest_dynamic_shapes,
                                     suggest_spec, torch_suggested_spec)
from shapecore.torch.tracing import trace_export

from .suggest_models import CORPUS, dim_values, dynamic_dims, program_runs

n, dx, dy = int_symbol("n"), int_symbol("dx"), int_symbol("dy")


def _admitted(suggestion, window):
    """Every value of the single dim admitted by ``suggestion`` with its root in ``window``."""
    ((root, (lo, hi)),) = suggestion.roots.items()
    top = window if hi is None else min(hi, window)
    return [dim_values(suggestion, {root: k})["n"] for k in range(lo, top + 1)]


# -- the solver, without torch ------------------------------------------------------------------


def test_divisibility_asks_what_the_guard_needs_and_shows_why_less_fails():
    s = suggest_spec([sympy.Eq(Mod(3 * n, 4), 0)], {"n": DimInfo(hint=8)})
    assert s.proven
    assert s.dims["n"] == DimFix("_n", 4, 0)
    assert s.fixes() == ["_n = Dim('_n')", "n = 4*_n"]
    rejected = [c for c in s.changes if c.rejected]
    assert {c.rejected for c in rejected} == {"n with no divisibility", "n = 2*_n"}
    for change in rejected:
        assert not holds(change.guard, change.counterexample)


def test_range_from_a_guard_the_example_satisfies():
    s = suggest_spec([sympy.Ge(n - 3, 2), sympy.Le(n, 100)], {"n": DimInfo(hint=8)})
    assert s.dims["n"] == DimFix("n") and s.roots == {"n": (5, 100)}
    (low, high) = s.changes
    assert low.fix == "n: min=5" and not holds(low.guard, low.counterexample) and low.counterexample == {"n": 4}
    assert high.fix == "n: max=100" and high.counterexample == {"n": 101}


def test_a_residue_other_than_zero():
    s = suggest_spec([sympy.Eq(Mod(n + 1, 2), 0), sympy.Ge(n, 3)], {"n": DimInfo(hint=5)})
    assert s.dims["n"] == DimFix("_n", 2, 1) and s.roots == {"_n": (1, None)} and s.proven


def test_equalities_become_derived_dims_with_nonnegative_offsets():
    s = suggest_spec([sympy.Eq(dx + 1, dy)], {"dx": DimInfo(hint=4), "dy": DimInfo(hint=5)})
    assert s.dims == {"dx": DimFix("dx"), "dy": DimFix("dx", 1, 1)} and s.proven
    (change,) = s.changes
    assert change.rejected == "dy as its own Dim" and not holds(change.guard, change.counterexample)


def test_a_ratio_puts_both_dims_on_a_new_root():
    s = suggest_spec([sympy.Eq(3 * dx, 2 * dy)], {"dx": DimInfo(hint=4), "dy": DimInfo(hint=6)})
    assert s.dims == {"dx": DimFix("_dx", 2, 0), "dy": DimFix("_dx", 3, 0)} and s.proven


def test_a_floor_division_relation_is_asserted_not_derived():
    s = suggest_spec([sympy.Eq(FloorDiv(dx + 1, 2), dy), sympy.Ge(dx, 3)], {"dx": DimInfo(hint=8), "dy": DimInfo(hint=4)})
    assert s.asserted == {"dy": FloorDiv(dx + 1, 2)} and s.roots["dx"] == (3, None) and s.proven


def test_a_value_the_guards_fix_makes_the_dim_static():
    s = suggest_spec([sympy.Eq(3 * n, 24)], {"n": DimInfo(hint=8)})
    assert s.dims["n"] == DimFix(None, 0, 8) and s.fixes() == ["n = 8"] and s.proven


def test_without_example_values_the_prover_finds_one():
    s = suggest_spec([sympy.Eq(Mod(n, 6), 0), sympy.Ge(n, 1)], {"n": DimInfo()})
    assert s.dims["n"].coeff == 6 and s.proven


def test_a_guard_no_spec_can_state_is_reported_unproven():
    s = suggest_spec([sympy.Le(dx, dy)], {"dx": DimInfo(hint=3), "dy": DimInfo(hint=5)})
    assert s.unproven == [sympy.Le(dx, dy)] and not s.proven


def test_a_guard_over_an_unknown_symbol_is_refused():
    with pytest.raises(ShapecoreError, match="u0"):
        suggest_spec([sympy.Le(n, int_symbol("u0"))], {"n": DimInfo(hint=3)})


@st.composite
def _single_dim_guards(draw):
    """Guards on one dim: congruences, bounds and exclusions, with an example value that satisfies them."""
    hint = draw(st.integers(2, 40))
    guards = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["mod", "ge", "le", "ne"]))
        if kind == "mod":
            a, m = draw(st.integers(1, 6)), draw(st.integers(2, 6))
            guards.append(sympy.Eq(Mod(a * n + (-a * hint) % m, m), 0))
        elif kind == "ge":
            guards.append(sympy.Ge(n, draw(st.integers(0, hint))))
        elif kind == "le":
            guards.append(sympy.Le(n, draw(st.integers(hint, 60))))
        else:
            excluded = draw(st.integers(0, 60))
            assume(excluded != hint)
            guards.append(sympy.Ne(FloorDiv(n, 2), FloorDiv(excluded, 2)) if draw(st.booleans()) else sympy.Ne(n, excluded))
            assume(holds(guards[-1], {"n": hint}))
    return guards, hint


def _brute_best(guards, hint, hi):
    """The most values a progression ``m*k + hint % m`` over an interval around ``hint`` in ``[0, hi]``
    admits with every guard holding, by enumeration, over the candidate moduli."""
    best = 0
    for m in _moduli(guards):
        ok = lambda v: 0 <= v <= hi and all(holds(g, {"n": v}) for g in guards)  # noqa: E731
        lo = up = hint
        while ok(lo - m):
            lo -= m
        while ok(up + m):
            up += m
        best = max(best, (up - lo) // m + 1)
    return best


@settings(max_examples=25)
@given(_single_dim_guards())
def test_single_dim_suggestion_is_sound_and_admits_as_many_values_as_brute_force(case):
    guards, hint = case
    s = suggest_spec(guards, {"n": DimInfo(0, 80, hint)})
    assert s.proven
    admitted = _admitted(s, 80)
    assert hint in admitted
    assert all(holds(g, {"n": v}) for v in admitted for g in guards)
    assert len(admitted) == _brute_best(guards, hint, 80)
    for change in s.changes:
        if change.counterexample is not None:
            assert not holds(change.guard, change.counterexample)


# -- from text ----------------------------------------------------------------------------------

EXPORT_ERROR = os.path.join(os.path.dirname(__file__), "..", "..", "data", "export_error_view_by_quarter.txt")


def test_an_export_error_gives_the_guards_in_dim_names():
    with open(EXPORT_ERROR) as handle:
        guards, dims = read_export_failure(handle.read())
    assert set(dims) == {"batch", "dx", "dy"}
    s = suggest_spec(guards, dims)
    assert s.proven and s.dims["batch"] == DimFix("_batch", 4, s.dims["batch"].offset)
    assert s.dims["dy"] == DimFix("dx") and s.roots["_batch"][0] >= 2 - s.dims["batch"].offset // 4


# -- with torch: the corpus ----------------------------------------------------------------------


def _check(case):
    spec = case.spec()
    traced = trace_export(case.model, case.args, dynamic_shapes=spec, on_constraint_violation="return")
    assert traced.error is not None, f"{case.name}: the user's spec should be rejected"
    ours = suggest_dynamic_shapes(case.model, case.args, spec)
    assert ours.proven and ours.exports, (case.name, ours.fixes(), ours.unproven, ours.export_error)
    for change in ours.changes:
        if change.counterexample is not None:
            assert not holds(change.guard, change.counterexample), (case.name, str(change))
    exported = torch.export.export(case.model, case.args, dynamic_shapes=ours.dynamic_shapes)
    assert program_runs(exported, case, ours.dynamic_shapes, ours), case.name
    theirs = torch_suggested_spec(spec, traced.error)
    if theirs is None:
        return
    try:
        their_program = torch.export.export(case.model, case.args, dynamic_shapes=theirs)
    except Exception:  # noqa: BLE001 - torch's suggestion not exporting is a finding, not a failure
        return
    if program_runs(their_program, case, theirs, ours) and dynamic_dims(theirs) == dynamic_dims(ours.dynamic_shapes):
        assert constraint_count(ours.dynamic_shapes, spec) <= constraint_count(theirs, spec), (case.name, ours.fixes())


FAST = [name for name, case in CORPUS.items() if case.fast]


@pytest.mark.parametrize("name", FAST)
def test_corpus_fast_cases_export_with_our_suggestion(name):
    _check(CORPUS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in CORPUS if name not in FAST])
def test_corpus_export_with_our_suggestion(name):
    _check(CORPUS[name])


def test_corpus_has_every_kind_of_rejection():
    assert len(CORPUS) >= 15 and 4 <= len(FAST) <= 8


def test_a_spec_that_exports_is_left_as_it_is():
    model = CORPUS["narrow"].model
    spec = {"x": {0: Dim("n", min=5)}}
    ours = suggest_dynamic_shapes(model, (torch.randn(8),), spec)
    assert ours.fixes() == [] and ours.changes == [] and ours.proven and ours.exports


def test_torch_s_fixes_applied_and_counted():
    user = {"x": {0: Dim("batch")}, "y": {0: Dim("dy"), 1: Dim("k")}}
    with open(EXPORT_ERROR) as handle:
        error = handle.read().replace("dy = dx", "dy = batch")
    theirs = torch_suggested_spec(user, error)
    batch, dy = theirs["x"][0], theirs["y"][0]
    assert batch.__name__ == "4*_batch" and batch.root.min == 1 and dy is batch and theirs["y"][1] is user["y"][1]
    assert constraint_count(theirs, user) == 3  # derived batch, dy shares it, _batch's min
    assert torch_suggested_spec(user, "Constraints violated (n)!") is None
