"""Sharding obligations: proved, refuted, unknown, and what each policy makes of them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shapecore.budget
from planner.divisibility import Divisibility
from shapecore import ShapeEnv, int_symbol


def _env(*facts: str, b_hint: int = 8, s_hint: int = 6) -> ShapeEnv:
    env = ShapeEnv()
    env.create_symbol(b_hint, name="b", min=1)
    env.create_symbol(s_hint, name="s", min=1)
    for fact in facts:
        env.add_fact(fact)
    return env


b, s = int_symbol("b"), int_symbol("s")


def test_tokens_divide_when_both_factors_are_constrained():
    verdict = Divisibility(_env("Eq(Mod(b, 4), 0)", "Eq(Mod(s, 2), 0)"), "prove").check(b * s, 8)
    assert verdict.allowed and verdict.status == "proved"
    assert verdict.obligation == "Eq(Mod(b*s, 8), 0)"


def test_tokens_do_not_divide_with_an_unconstrained_factor():
    checker = Divisibility(_env("Eq(Mod(b, 4), 0)", s_hint=5), "prove")
    verdict = checker.check(b * s, 8)
    assert not verdict.allowed and verdict.status == "refuted" and "counterexample" in verdict.reason


@pytest.mark.parametrize("policy, allowed, status", [("prove", False, "refuted"), ("assume", False, "refuted"), ("uneven", True, "uneven")])
def test_policies_on_a_refuted_obligation(policy, allowed, status):
    verdict = Divisibility(_env(), policy).check(b, 3)
    assert (verdict.allowed, verdict.status) == (allowed, status)


def test_unknown_obligation_under_each_policy():
    env = ShapeEnv(timeout_ms=100)
    env.create_symbol(16, name="b", min=1)
    env.add_fact("Eq(Mod(b*b*b, 512), 0)")  # implies 8 | b, beyond what the prover settles in time
    assert Divisibility(env, "prove").check(b, 8).status == "unknown"
    assert not Divisibility(env, "prove").check(b, 8).allowed
    guard = Divisibility(env, "assume").check(b, 8)
    assert guard.allowed and guard.status == "guard" and guard.obligation == "Eq(Mod(b, 8), 0)"
    uneven = Divisibility(env, "uneven").check(b, 8)
    assert uneven.allowed and uneven.status == "uneven"


def test_verdicts_follow_z3s_units_not_the_clock(monkeypatch, busy_machine):
    """The plan must not depend on the machine's load: an obligation z3 proves with a few
    thousand units is unknown under a smaller budget, proved under a larger one, and the same
    on a busy machine (it used to be a wall-clock timeout)."""
    monkeypatch.setattr(shapecore.budget, "RLIMIT_PER_MS", 1)  # timeout_ms counts units; the backstop is far off

    def verdicts():
        found = []
        for timeout_ms in (1000, 100_000):
            env = ShapeEnv(timeout_ms=timeout_ms)
            env.create_symbol(16, name="b", min=1)
            env.create_symbol(8, name="s", min=1)
            env.add_fact("Eq(Mod(b + s, 8), 0)")
            env.add_fact("Eq(Mod(s, 8), 0)")
            found.append(Divisibility(env, "prove").check(b, 8))
        return found

    idle = verdicts()
    with busy_machine():
        busy = verdicts()
    assert busy == idle
    assert idle[0].status == "unknown" and "deterministic budget" in idle[0].reason
    assert idle[1].status == "proved" and idle[1].method == "z3"


def test_static_sizes_need_no_prover():
    checker = Divisibility(ShapeEnv(), "prove")
    assert checker.check(int_symbol("x") * 0 + 4096, 64).method == "static"
    refuted = checker.check(int_symbol("x") * 0 + 6, 4)
    assert refuted.status == "refuted" and "not a multiple" in refuted.reason


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="divisibility must be one of"):
        Divisibility(ShapeEnv(), "maybe")  # type: ignore[arg-type]


@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from([2, 4, 8, 16]))
def test_proved_means_every_allowed_value_divides(k, j, m):
    """Sound: whatever is proved holds for every b, s the facts allow (checked on a grid)."""
    env = _env(f"Eq(Mod(b, {2 ** (k % 4)}), 0)", f"Eq(Mod(s, {2 ** (j % 3)}), 0)", b_hint=2 ** (k % 4) * 3, s_hint=2 ** (j % 3) * 5)
    verdict = Divisibility(env, "prove").check(b * s, m)
    if verdict.status == "proved":
        for bv in range(2 ** (k % 4), 64, 2 ** (k % 4)):
            for sv in range(2 ** (j % 3), 32, 2 ** (j % 3)):
                assert (bv * sv) % m == 0


def test_a_detached_checker_keeps_its_verdicts_and_refuses_new_symbolic_ones():
    checker = Divisibility(_env("Eq(Mod(b, 4), 0)"), "prove")
    decided = checker.check(b, 4)
    checker.detach()
    assert checker.check(b, 4) == decided and checker.check(int_symbol("s") * 0 + 12, 4).allowed
    with pytest.raises(LookupError, match=r"Eq\(Mod\(b, 8\), 0\) was not decided"):
        checker.check(b, 8)


@pytest.mark.parametrize("policy", ["prove", "assume", "uneven"])
def test_a_data_dependent_symbol_splits_evenly_only_when_proved_else_unevenly(policy):
    env = _env()
    env.create_unbacked_symbol(name="u0", min=0, max=1024)
    u0 = int_symbol("u0")
    verdict = Divisibility(env, policy).check(u0, 2)
    assert (verdict.allowed, verdict.status, verdict.method) == (True, "uneven", "data-dependent")  # never "guard"
    assert "min(ceil(u0/2), max(0, u0 - r*ceil(u0/2))) rows" in verdict.reason
    env.add_fact("Eq(Mod(u0, 2), 0)")  # torch._check(u0 % 2 == 0) in the model
    assert Divisibility(env, policy).check(u0, 2).status == "proved"


def test_a_data_dependent_size_other_than_one_symbol_stays_whole_even_when_proved():
    env = _env()
    env.create_unbacked_symbol(name="u0", min=0, max=1024)
    u0 = int_symbol("u0")
    for size in (16 * u0, u0 + 1, u0 * b):
        verdict = Divisibility(env, "uneven").check(size, 2)
        assert not verdict.allowed and "not one symbol" in verdict.reason
