"""The answers a sharding planner must find, and the divisibility it must respect."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.export import Dim

import planner
from planner import HARDWARE_PRESETS, Mesh
from tests.planner.models import MLP, Attention, GroupedQueryAttention, Tokens, on_meta

R = Replicate()


def _mlp_plan(dim, hidden, batch, mesh, **options):
    model = on_meta(MLP, dim, hidden)
    x = torch.randn(batch, dim, device="meta")
    return planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=mesh, training=True,
                               constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=[batch], **options)


def test_small_batch_large_hidden_is_column_then_row_parallel():
    plan = _mlp_plan(1024, 16384, 8, Mesh((4,), ("tp",)), replicate_outputs=True)
    assert plan.param_placements["fc1.weight"] == (Shard(0),)
    assert plan.param_placements["fc2.weight"] == (Shard(1),)
    communicating = [r for r in plan.redistributions if any(k not in ("chunk", "to_partial") for k in r.collectives)]
    assert [(r.consumer, r.collectives) for r in communicating] == [("output", ("all_reduce",))]
    assert plan.output_placements[0] == (R,)


def _split_biases(plan) -> list[str]:
    """The parameters not replicated, which must all be biases: a weight is replicated (data parallel), and a bias
    may be split at the same cost (its gradient reduce-scattered and the bias gathered before use
    cost what the all-reduce does), which the relaxation's optimum may take (a little less memory)."""
    split = [name for name, p in plan.param_placements.items() if p != (R,)]
    assert all(name.endswith(".bias") and plan.param_placements[name] == (Shard(0),) for name in split), split
    return split


def test_large_batch_small_hidden_is_data_parallel():
    plan = _mlp_plan(256, 512, 65536, Mesh((4,), ("dp",)))
    assert plan.input_placements == ((Shard(0),),)
    split = _split_biases(plan)
    gradient_reductions = [r for r in plan.redistributions if r.consumer == "output" and r.collectives == ("all_reduce",)]
    assert len(gradient_reductions) == 4 - len(split)  # one per replicated parameter


def test_two_dimensional_mesh_is_batch_on_dp_and_megatron_on_tp():
    hardware = dataclasses.replace(HARDWARE_PRESETS["h100-nvlink"], devices_per_node=4)
    plan = _mlp_plan(1024, 8192, 32768, Mesh((2, 4), ("dp", "tp")), hardware=hardware, replicate_outputs=True)
    assert plan.input_placements == ((Shard(0), R),)
    assert plan.param_placements["fc1.weight"] == (R, Shard(0))
    assert plan.param_placements["fc2.weight"] == (R, Shard(1))


@pytest.mark.parametrize("training", [False, True])
def test_grouped_query_attention_is_batch_split_with_no_all_to_all(training):
    # repeat_kv slices the batch dim whole (``k[:, :, None]``); with no batch strategy for that
    # slice (nor its backward) the plan took two all_to_alls per repeat to route around it
    model = on_meta(GroupedQueryAttention, 512, 8, 2)
    x = torch.randn(8, 128, 512, device="meta")
    plan = planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((4,), ("dp",)),
                               training=training, constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=[512])
    repeats = [name for name, d in plan.decisions.items() if d.op.startswith("aten.slice")]
    assert len(repeats) == (4 if training else 2) and all(plan.placements[name] == (Shard(0),) for name in repeats)
    assert not [r for r in plan.redistributions if "all_to_all" in r.collectives]
    if not training:  # data parallel: nothing to communicate
        assert plan.input_placements == ((Shard(0),),) and plan.cost.communication == 0


def _attention_plan(heads, tp=4, batch=2):
    model = on_meta(Attention, 512, heads) if 512 % heads == 0 else on_meta(Attention, 96 * heads, heads)
    d = model.out.in_features
    x = torch.randn(batch, 1024, d, device="meta")
    return planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((tp,), ("tp",)),
                               batch_sizes=[batch], replicate_outputs=True)


def _attention_node(plan):
    return next(name for name, d in plan.decisions.items() if "scaled_dot_product" in d.op)


def test_attention_shards_heads_on_tp():
    plan = _attention_plan(heads=8)
    node = _attention_node(plan)
    assert plan.placements[node] == (Shard(1),)
    assert any(p.node == node and p.dim == 1 and p.status == "proved" for p in plan.proofs)


def test_attention_never_shards_heads_that_tp_does_not_divide():
    plan = _attention_plan(heads=6)
    node = _attention_node(plan)
    assert plan.placements[node] != (Shard(1),)
    for name, placements in plan.placements.items():
        op = plan.decisions[name].op
        if "scaled_dot_product" in op:
            assert Shard(1) not in placements
    source = plan.decisions[node].same_candidates_as or node
    reasons = [p.reason for p in plan.pruned if p.node == source]
    assert any("Eq(Mod(6, 4), 0)" in r for r in reasons)


def _tokens_plan(constraints, **options):
    model = on_meta(Tokens, 64)
    x = torch.randn(8, 6, 64, device="meta")
    return planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("b"), 1: Dim("s")}}, mesh=Mesh((8,)),
                               constraints=constraints, **options)


def _token_rows_pruned(plan):
    """Pruned strategies of the linear layer that split its b*s token rows over the mesh."""
    addmm = next(name for name, d in plan.decisions.items() if d.op == "aten.addmm.default")
    source = plan.decisions[addmm].same_candidates_as or addmm
    return [p for p in plan.pruned if p.node == source and p.strategy.startswith("S(0) <-")]


def test_tokens_shard_eight_ways_only_when_shapecore_proves_it():
    proved = _tokens_plan(["Eq(Mod(b, 4), 0)", "Eq(Mod(s, 2), 0)"])
    assert _token_rows_pruned(proved) == []
    unconstrained = _tokens_plan(["Eq(Mod(b, 4), 0)"])
    pruned = _token_rows_pruned(unconstrained)
    assert pruned and all("refuted" in p.reason for p in pruned)


def test_assume_keeps_unknown_shardings_and_guards_them():
    plan = _tokens_plan([], divisibility="assume", batch_sizes=[{"b": 64, "s": 64}])
    guards = set(plan.trace_guards)
    for proof in plan.proofs:
        if proof.status == "guard":
            assert proof.obligation in guards
    assert all(p.status in ("proved", "guard") for p in plan.proofs)


def test_memory_budget_sweep_moves_weights_from_replicated_to_sharded():
    mesh = Mesh((8,), ("dp",))
    free = _mlp_plan(4096, 16384, 65536, mesh)
    _split_biases(free)
    budgets = [free.cost.memory.total * f for f in (1.0, 0.8, 0.6)]  # activations (2.3 GB of 4.4) stay
    plans = [_mlp_plan(4096, 16384, 65536, mesh, memory_budget=b) for b in budgets]
    for p, budget in zip(plans, budgets):
        assert p.cost.memory.total <= budget * (1 + 1e-6)  # the solver's feasibility tolerance
    assert any(p != (R,) for name, p in plans[-1].param_placements.items() if name.endswith(".weight"))
    objectives = [p.stats.objective for p in plans]
    assert objectives == sorted(objectives)
    with pytest.raises(ValueError, match="memory budget"):
        _mlp_plan(4096, 16384, 65536, mesh, memory_budget=1e6)
