"""Placement text and codes round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.tensor import Partial, Replicate, Shard

from planner.placements import R_CODE, canonical, decode, encode, format_codes, format_placements, parse_placements, placement_key

placement = st.one_of(st.just(Replicate()), st.just(Partial()), st.integers(0, 5).map(Shard))


@given(st.lists(placement, min_size=1, max_size=4))
def test_text_and_codes_round_trip(ps):
    ps = tuple(ps)
    assert parse_placements(format_placements(ps)) == ps
    assert decode(encode(ps)) == ps
    assert format_codes(encode(ps)) == format_placements(ps)


def test_text_forms():
    assert format_placements((Shard(0), Replicate(), Partial())) == "S(0),R,P"
    assert format_placements(None) == "-" and parse_placements("-") is None
    assert parse_placements("P(max)") == (Partial("max"),)
    assert sorted([Partial(), Shard(1), Replicate(), Shard(0)], key=placement_key) == [Replicate(), Shard(0), Shard(1), Partial()]
    with pytest.raises(ValueError, match="not a placement"):
        parse_placements("X(1)")
    with pytest.raises(ValueError, match="unsupported placement"):
        encode((Partial("max"),))


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4).flatmap(
    lambda codes: st.tuples(st.just(tuple(codes)), st.lists(st.integers(1, 3), min_size=len(codes), max_size=len(codes)))))
def test_canonical_codes_replicate_on_size_one_axes_and_keep_the_others(case):
    codes, shape = case
    found = canonical(codes, shape)
    assert [c for c, n in zip(found, shape) if n == 1] == [R_CODE] * shape.count(1)
    assert [c for c, n in zip(found, shape) if n > 1] == [c for c, n in zip(codes, shape) if n > 1]
    assert canonical(found, shape) == found
