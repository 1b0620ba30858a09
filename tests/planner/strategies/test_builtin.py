"""The built-in rules compute the op they are proposed for: forward and backward ops, checked
piecewise against torch on real tensors (:mod:`tests.planner.strategies.differential`)."""

from __future__ import annotations

import pytest
import torch

from planner import BuiltinProvider, Mesh
from planner.graph import read_graph
from planner.placements import Replicate, Shard
from tests.planner.strategies.differential import CASES, check_all, real, trace


def _with_grads(fn, args):
    def step(*xs):
        xs = [x.detach().requires_grad_(x.is_floating_point()) for x in xs]
        out = fn(*xs)
        grads = torch.autograd.grad(out.sum(), [x for x in xs if x.requires_grad])
        return (out, *grads)

    return step, args


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_rules_compute_the_op(case):
    fn, args = CASES[case]
    assert check_all(fn, args, BuiltinProvider()) > 0


@pytest.mark.parametrize("case", ["linear", "norms", "embedding", "attention", "conv", "softmax", "broadcast", "slicing"])
def test_builtin_rules_compute_the_backward_ops(case):
    fn, args = _with_grads(*CASES[case])
    assert check_all(fn, args, BuiltinProvider(), mesh=Mesh((2,))) > 0


def test_batch_norm_with_batch_statistics_splits_the_batch_only_with_its_all_reduces_priced():
    def step(x, w, b, m, v):
        return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.1, 1e-5)

    gm, _ = trace(step, real(4, 6, 2, 2), real(6), real(6), real(6), real(6).abs())
    graph = read_graph(gm)
    node = next(n for n in graph if n.role == "op" and "batch_norm" in n.target)
    strategies = BuiltinProvider().strategies(node, graph, Mesh((2, 2)))
    split_batch = [s for s in strategies if any(p == Shard(0) for p in s.inputs[0])]
    assert split_batch and all(s.all_reduces for s in split_batch)
    assert {s.all_reduces for s in split_batch} >= {((0, 7), (0, 6)), ((0, 7), (0, 6), (1, 7), (1, 6))}
    assert not any(p in (Shard(2), Shard(3)) for s in strategies for p in s.inputs[0])  # spatial dims need the stats too


def test_factory_ops_may_be_created_as_this_ranks_piece_when_the_batch_is_required_split():
    import planner
    from planner import RequireShard
    from torch.export import Dim
    from tests.planner.models import Positions

    plan = planner.plan_module(Positions(), (torch.randn(8, 8),), dynamic_shapes=({0: 2 * Dim("batch")},),
                               mesh=Mesh((2,), ("dp",)), placement_constraints=[RequireShard("batch", axis="dp")])
    assert all(plan.placements[n] == (Shard(0),) for n in ("full", "new_empty_strided")), plan.placements
    assert plan.placements["arange"] == (Replicate(),)  # only replicates; its reader takes the piece
