"""Plans do not depend on how fast they were made: the one-trace training graph plans as the
export-then-joint graph did, and the same call gives byte-identical plans."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

import planner
from planner import Mesh, PlanOptions
from tests.planner.models import Decoder, on_meta
from tests.shapecore.torch.traced_models import export_then_joint

OPTIONS = PlanOptions(constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[4, 16, 64], objective="regret")
SPEC = {"tokens": {0: Dim("batch")}}


def _plan_module(mesh: Mesh) -> planner.Plan:
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    return planner.plan_module(on_meta(Decoder, 2), (tokens,), dynamic_shapes=SPEC, mesh=mesh, training=True,
                               options=OPTIONS)


@pytest.mark.parametrize("shape", [(4,), (2, 2)], ids=["1d", "2d"])
def test_the_one_trace_plans_as_export_then_joint_did(shape):
    from shapecore.torch import from_torch
    from shapecore.torch.private import detect_fake_mode

    mesh = Mesh(shape)
    ours = _plan_module(mesh)
    tokens = torch.randint(0, 256, (64, 32), device="meta")  # where plan_module traces: the largest batch size
    gm = export_then_joint(on_meta(Decoder, 2), tokens, SPEC)
    fake = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    env = from_torch(detect_fake_mode(fake).shape_env)
    (batch,) = env.symbols
    reference = planner.plan(gm, mesh, shape_env=env, dims={"batch": batch}, options=OPTIONS)
    assert ours.to_json() == reference.to_json()


def test_the_same_call_gives_the_same_plan():
    first, second = _plan_module(Mesh((2, 2))), _plan_module(Mesh((2, 2)))
    assert first.to_json() == second.to_json()
    assert first.worst_regret is not None and first.worst_regret >= 1.0


def _plan_and_lower(rank: int) -> tuple[list[str], list[str]]:
    from lowering.lower import lower
    from shapecore.torch import trace_for_planning

    tokens = torch.randint(0, 256, (8, 32), device="meta")
    model = on_meta(Decoder, 6)
    plans, programs = [], []
    for share in (True, False):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="share_layers")  # shared, not traced whole
            traced = trace_for_planning(model, (tokens,), dynamic_shapes=SPEC, training=True, share_layers=share)
        plan = planner.plan(traced.graph_module, Mesh((2,)), shape_env=traced.env, dims=traced.dim_exprs, options=OPTIONS)
        plans.append(plan.to_json())
        programs.append(lower(traced.graph_module, plan).graph_module.code)
    return plans, programs


@pytest.mark.slow  # two gloo ranks
def test_a_decoder_whose_blocks_are_traced_once_plans_and_lowers_as_the_whole_trace():
    from lowering.launch import launch

    for (shared_plan, whole_plan), (shared_program, whole_program) in launch(_plan_and_lower, 2, timeout=300):
        assert shared_plan == whole_plan
        assert shared_program == whole_program
