"""Strategies and per-axis rules: ``expand`` makes mesh strategies from one rule per axis."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import Mesh, expand
from planner.placements import Partial, Replicate, Shard
from planner.strategies.base import AxisRule, Strategy


def test_expand_takes_one_rule_per_axis():
    rules = [AxisRule((Replicate(),), (Replicate(),), "r"), AxisRule((Shard(0),), (Shard(0),), "s")]
    strategies = expand(rules, Mesh((2, 3)))
    assert [s.rule for s in strategies] == ["r/r", "r/s", "s/r", "s/s"]
    assert strategies[1].outputs == ((Replicate(), Shard(0)),)


@settings(max_examples=30)
@given(axes=st.integers(1, 3), names=st.lists(st.sampled_from("rsp"), min_size=0, max_size=3, unique=True))
def test_expand_makes_every_choice_of_one_rule_per_axis_once(axes, names):
    placement = {"r": Replicate(), "s": Shard(0), "p": Partial()}
    rules = [AxisRule((placement[n], None), (placement[n], Replicate()), n) for n in names]
    mesh = Mesh((2,) * axes)
    strategies = expand(rules, mesh)
    assert [s.rule for s in strategies] == ["/".join(combo) for combo in itertools.product(names, repeat=axes)]
    for s in strategies:
        chosen = s.rule.split("/")
        assert s.outputs == (tuple(placement[n] for n in chosen), None)  # a non-tensor output stays None
        assert s.inputs == (tuple(placement[n] for n in chosen), (Replicate(),) * axes)


def test_rules_that_place_alike_give_one_strategy_named_by_the_first():
    rules = [AxisRule((Shard(0),), (Shard(0),), "rows"), AxisRule((Shard(0),), (Shard(0),), "batch")]
    assert [s.rule for s in expand(rules, Mesh((2,)))] == ["rows"]


def test_a_strategy_reads_as_outputs_from_inputs():
    strategy = Strategy(((Shard(0), Replicate()), None), ((Shard(0), Replicate()), (Replicate(), Partial())), "rows")
    assert str(strategy) == "S(0),R | - <- S(0),R; R,P"
    assert str(Strategy(((Replicate(),),), ())) == "R"
