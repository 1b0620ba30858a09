"""Plan: JSON round trip, byte-identical JSON across processes, the table and explanations."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from planner import Plan
from planner.plan import PLAN_VERSION, format_bytes

pytestmark = pytest.mark.slow  # plans in other processes (the fixture, and the test that compares two)

SCRIPT = textwrap.dedent(
    """
    import torch
    from torch.export import Dim
    import planner
    from tests.planner.models import Decoder, on_meta
    model = on_meta(Decoder, 2)
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    plan = planner.plan_module(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, mesh=planner.Mesh((2, 2), ("dp", "tp")),
                               training=True, constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[8, 64])
    print(plan.to_json())
    """
)


@pytest.fixture(scope="module")
def plan_json(computed_once):
    return computed_once("planner-plan-json", lambda: subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True,
                                                                     text=True, check=True, cwd=_root()).stdout)


def _root():
    import pathlib

    return str(pathlib.Path(__file__).resolve().parents[2])


def test_json_is_byte_identical_across_processes(plan_json):
    again = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, cwd=_root())
    assert again.stdout == plan_json


def test_json_round_trip(plan_json):
    plan = Plan.from_json(plan_json)
    assert plan.to_json() + "\n" == plan_json
    assert plan.to_json(timings=True) != plan.to_json()
    assert plan == Plan.from_json(plan.to_json())


def test_json_version_is_checked(plan_json):
    document = json.loads(plan_json)
    document["version"] = PLAN_VERSION + 1
    with pytest.raises(ValueError, match="version.*plan the model again"):
        Plan.from_json(json.dumps(document))
    with pytest.raises(ValueError, match="not a plan"):
        Plan.from_json(json.dumps({"format": "something else"}))


def test_summary_table_and_explanations(plan_json):
    plan = Plan.from_json(plan_json)
    summary = str(plan)
    assert "Plan on mesh (dp=2, tp=2)" in summary
    assert "layers.*.attn.qkv.weight (x2)" in summary and "embed.weight" in summary  # identical layers folded
    assert "guards: Eq(Mod(batch, 4), 0)" in summary and "at batch=64" in summary and "regret" in summary
    memory = plan.cost.memory  # the peak: where it is reached, and what the storages live there hold
    assert memory.point == {"batch": 64} and memory.node in plan.decisions and memory.optimizer == 2 * memory.parameters
    assert f"memory: {format_bytes(memory.total)} per device at batch=64, node {memory.node} (" in summary
    symbol = plan.names.symbols["batch"]
    assert plan.trace_guards == (f"Eq(Mod({symbol}, 4), 0)",)  # the contract keeps the trace's symbols
    assert plan.guards == ("Eq(Mod(batch, 4), 0)",) and plan.names.batch == symbol
    assert symbol not in summary.replace("_", " ").split()
    assert len(summary.splitlines()) < len(plan.decisions)  # the per-node table is explain()'s
    table = plan.explain()
    assert all(name in table for name in plan.decisions)
    decided = [n for n, d in plan.decisions.items() if d.alternatives]
    assert decided
    text = plan.explain(decided[0])
    assert "alternatives" in text and decided[0] in text
    shared = [n for n, d in plan.decisions.items() if d.shared_with]
    assert shared and "shares its decision" in plan.explain(shared[0])
    with pytest.raises(KeyError, match="no decision"):
        plan.explain("no_such_node")


def test_plan_contract_covers_every_operand(plan_json):
    plan = Plan.from_json(plan_json)
    for r in plan.redistributions:
        assert r.src != r.dst and r.steps
        assert plan.operand_placements(r.consumer, r.operand) == r.dst
        for step in r.steps:
            assert 0 <= step.axis < plan.mesh.ndim
    with pytest.raises(KeyError, match="not redistributed"):
        plan.operand_placements("no_such_node", 0)
    assert plan.input_placements and all(p is None or len(p) == 2 for p in plan.input_placements)
    assert set(plan.param_placements) >= {"embed.weight", "head.weight"}
    for proof in plan.proofs:
        assert proof.status in ("proved", "guard", "uneven")
        assert proof.obligation.startswith("Eq(Mod(")


def test_plan_says_what_feeds_each_graph_input_and_what_each_output_is(plan_json):
    plan = Plan.from_json(plan_json)
    by_role = {}
    for graph_input in plan.graph_inputs:
        assert graph_input.name in plan.placements
        by_role.setdefault(graph_input.role, []).append(graph_input)
    assert [i.index for i in by_role["input"]] == list(range(len(plan.input_placements)))
    assert {i.fqn for i in by_role["param"]} >= {"embed.weight", "head.weight"}
    assert len(plan.graph_outputs) == len(plan.output_placements)
    users = [o for o in plan.graph_outputs if o is not None and o.role == "output"]
    grads = {o.grad_of for o in plan.graph_outputs if o is not None and o.role == "grad"}
    assert [o.index for o in users] == list(range(len(users))) and users
    assert grads == {i.fqn for i in by_role["param"]}
    assert sorted(i.index for i in by_role["tangent"]) == [o.index for o in users]


@pytest.mark.parametrize(("value", "text", "up"), [
    (0, "0 B", "0 B"), (512, "512 B", "512 B"), (70432, "70.43 kB", "70.44 kB"), (70430, "70.43 kB", "70.43 kB"),
    (1.5e9, "1.5 GB", "1.5 GB"), (123456789, "123.5 MB", "123.5 MB"), (123449999, "123.4 MB", "123.5 MB"),
])
def test_format_bytes_rounds_to_four_digits_and_up_when_asked(value, text, up):
    assert format_bytes(value) == text and format_bytes(value, up=True) == up
