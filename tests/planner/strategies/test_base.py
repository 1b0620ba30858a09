"""Strategies and per-axis rules: ``expand`` makes mesh strategies from one rule per axis."""

from __future__ import annotations

from planner import Mesh, expand
from planner.placements import Replicate, Shard
from planner.strategies.base import AxisRule


def test_expand_takes_one_rule_per_axis():
    rules = [AxisRule((Replicate(),), (Replicate(),), "r"), AxisRule((Shard(0),), (Shard(0),), "s")]
    strategies = expand(rules, Mesh((2, 3)))
    assert [s.rule for s in strategies] == ["r/r", "r/s", "s/r", "s/s"]
    assert strategies[1].outputs == ((Replicate(), Shard(0)),)
