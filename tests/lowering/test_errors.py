"""The lowering's errors: the built-in errors callers catch, the fields a GuardViolation carries,
and every one survives pickling with its message and fields (ranks send them to each other and
``launch`` re-raises a rank's error in the caller)."""

from __future__ import annotations

import pickle

import pytest

from lowering import GuardViolation, InputError, LoweringError, RankMismatch


def test_each_error_is_the_builtin_error_callers_catch():
    assert issubclass(GuardViolation, ValueError) and issubclass(RankMismatch, ValueError)
    assert issubclass(InputError, TypeError) and issubclass(InputError, ValueError)
    assert issubclass(LoweringError, Exception) and not issubclass(LoweringError, ValueError)


def test_a_guard_violation_names_the_guard_and_the_values_it_was_evaluated_at():
    values = {"s0": 6}
    error = GuardViolation("batch 6 breaks Eq(Mod(s0, 4), 0)", guard="Eq(Mod(s0, 4), 0)", values=values)
    values["s0"] = 7  # the error keeps its own copy
    assert (str(error), error.guard, error.values) == ("batch 6 breaks Eq(Mod(s0, 4), 0)", "Eq(Mod(s0, 4), 0)", {"s0": 6})
    bare = GuardViolation("no guard")
    assert (bare.guard, bare.values) == ("", {})


@pytest.mark.parametrize("error", [
    GuardViolation("batch 6 breaks Eq(Mod(s0, 4), 0)", guard="Eq(Mod(s0, 4), 0)", values={"s0": 6}),
    InputError("input 0 (x): expected float32, got float64"),
    RankMismatch("rank 1 passed a batch of 8, rank 0 of 16"),
    LoweringError("node relu: the local result has shape [4*b0, 8] but placement R"),
], ids=lambda error: type(error).__name__)
def test_each_error_survives_pickling_with_its_message_and_fields(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
