"""Peak memory per device as the program runs: aliases allocate nothing, temporaries die at their
last use, and the estimate agrees with the bytes a run of the program keeps live."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.export import Dim

import planner
from planner import AlphaBetaCostModel, Mesh
from planner.api import prepare
from planner.placements import R_CODE
from shapecore.torch import trace_for_planning
from tests.planner.live_bytes import LiveBytes
from tests.planner.models import MLP, Attention, Block, on_meta


class PreNormMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


def test_transposed_weights_saved_for_backward_are_views_that_allocate_nothing():
    # issue 12: 35.7 MB of "activations" per device, 33.5 MB of them t(weight), and a 150 MB budget refused
    model = on_meta(PreNormMLP, 2048, 8192)
    x = torch.randn(64, 2048, device="meta")
    plan = planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((4,), ("tp",)),
                               training=True, batch_sizes=[64], replicate_outputs=True, memory_budget=150e6)
    assert plan.param_placements["fc1.weight"] == (Shard(0),)  # Megatron: column- then row-parallel
    assert plan.param_placements["fc2.weight"] == (Shard(1),)
    memory = plan.cost.memory
    weights = 2 * 2048 * 8192 * 4 / 4  # both weights' shards
    assert memory.parameters == pytest.approx(weights + (2048 * 3 + 8192 / 4) * 4)
    assert memory.optimizer == 2 * memory.parameters and memory.gradients == memory.parameters
    # live at the peak: the input, its norm, fc1's and silu's outputs (a quarter each), all-reduce buffers
    assert memory.activations < 5e6
    assert memory.total <= 150e6


def test_no_plan_fits_says_what_the_plan_needing_the_least_memory_needs():
    # an attention block whose activations dominate the least memory a plan needs
    model, x = on_meta(Attention, 32, 4), torch.randn(8, 8, 32, device="meta")
    options = {"dynamic_shapes": {"x": {0: Dim("batch")}}, "mesh": Mesh((4,)), "constraints": ["Eq(Mod(batch, 4), 0)"],
               "batch_sizes": [8, 24]}
    sharded = planner.plan_module(model, (x,), placement_constraints=[planner.MinShards(4)], **options)
    free = planner.plan_module(model, (x,), **options)
    with pytest.raises(planner.MemoryBudgetError) as error:
        planner.plan_module(model, (x,), memory_budget=1e3, **options)
    least = error.value.memory
    assert error.value.exact and error.value.budget == 1e3
    assert least.total <= min(sharded.cost.memory.total, free.cost.memory.total)
    assert least.point == {"batch": 24} and least.activations > least.parameters > 0
    assert "activations dominate" in str(error.value) and f"needs {least}" in str(error.value)
    fitted = planner.plan_module(model, (x,), memory_budget=least.total, **options)  # the least fits
    assert fitted.cost.memory.total <= least.total * (1 + 1e-6)


def _replicated(problem):
    """Each group's choice that replicates every node: the plan whose memory is one device's."""
    choices = []
    for group in problem.groups:
        choices.append(next(c for c in range(group.choices) if all(
            all(out is None or set(out) == {R_CODE} for out in problem.candidates[n][problem.pick[n][c]].outputs)
            for n in group.nodes)))
    return choices


def _run_measured(gm, graph, values):
    """Peak live bytes of running ``gm`` eagerly on ``values`` (placeholder name -> tensor or int)."""
    args = [values[node.name] for node in gm.graph.nodes if node.op == "placeholder"]
    with torch.no_grad(), LiveBytes([a for a in args if isinstance(a, torch.Tensor)]) as live:
        torch.fx.Interpreter(gm).run(*args)
    return live.peak


@pytest.mark.parametrize("training", [False, True])
def test_estimate_is_within_15_percent_of_the_bytes_a_run_keeps_live(training):
    torch.manual_seed(0)
    model, batch = Block(64, 4, 256), 32
    x = torch.randn(batch, 16, 64)
    traced = trace_for_planning(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, training=training)
    mesh = Mesh((2,))
    gm = traced.exported.graph_module if traced.exported is not None else traced.graph_module
    problem = prepare(traced.exported or gm, mesh, shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[batch],
                      cost_model=AlphaBetaCostModel("cpu-gloo", mesh, optimizer_states=0)).problem
    estimate = float(problem.peak_memory(_replicated(problem)).total[0])
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    values = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        planned = problem.graph.nodes.get(node.name)
        if planned is None:
            values[node.name] = batch  # the batch symbol
        elif planned.role in ("param", "buffer"):
            values[node.name] = params[planned.fqn].detach()
        else:
            values[node.name] = x if planned.role == "input" else torch.ones_like(x)
    measured = _run_measured(gm, problem.graph, values)
    assert abs(estimate - measured) <= 0.15 * measured, (estimate, measured)
