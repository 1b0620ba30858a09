"""bench/moe.py: its hand-written expert-parallel peer computes Mixtral's experts (forward and
gradients) when its capacity drops nothing, and counts the rows it drops as a brute-force count does."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_moe", os.path.join(ROOT, "bench", "moe.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def _routing(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, 64, generator=generator)
    scores = torch.randn(tokens, BENCH.EXPERTS, generator=generator)
    weights, index = scores.softmax(-1).topk(BENCH.TOP_K, dim=-1)
    return hidden, index, weights


@settings(max_examples=15, deadline=None,  # one process group serves every example
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_the_padded_peer_with_room_for_every_row_computes_mixtrals_experts(one_rank, tokens, seed):
    experts = BENCH._model(1).m.model.layers[0].mlp.experts
    dropped = [0, 0]
    padded = BENCH.PaddedExperts(experts, rank=0, world=1, factor=BENCH.EXPERTS / BENCH.TOP_K, dropped=dropped)
    hidden, index, weights = _routing(tokens, seed)
    want_in, got_in = hidden.clone().requires_grad_(), hidden.clone().requires_grad_()
    want, got = experts(want_in, index, weights), padded(got_in, index, weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(got_in.grad, want_in.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(padded.gate_up_proj.grad, experts.gate_up_proj.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(padded.down_proj.grad, experts.down_proj.grad, rtol=1e-4, atol=1e-5)
    assert dropped == [0, tokens * BENCH.TOP_K]


@settings(max_examples=15, deadline=None,  # one process group serves every example
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.integers(1, 40), seed=st.integers(0, 2**16), factor=st.sampled_from([0.5, 1.0, 1.25]))
def test_the_padded_peer_drops_each_experts_rows_past_its_capacity(one_rank, tokens, seed, factor):
    experts = BENCH._model(1).m.model.layers[0].mlp.experts
    dropped = [0, 0]
    padded = BENCH.PaddedExperts(experts, rank=0, world=1, factor=factor, dropped=dropped)
    hidden, index, weights = _routing(tokens, seed)
    padded(hidden, index, weights)
    cap = BENCH.capacity(tokens, factor)
    per_expert = [int((index == e).sum()) for e in range(BENCH.EXPERTS)]
    assert dropped == [sum(max(0, n - cap) for n in per_expert), tokens * BENCH.TOP_K]
