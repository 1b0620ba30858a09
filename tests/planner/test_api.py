"""plan / plan_module: inputs, batch points, constraints, and clear errors for bad ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.export import Dim

import planner
from planner import Mesh
from planner.api import prepare
from planner.ilp import IlpModel
from shapecore.torch import trace_for_planning
from tests.planner.models import MLP, Decoder, on_meta


@pytest.fixture(scope="module")
def mlp_trace():
    model = on_meta(MLP, 64, 256)
    return trace_for_planning(model, (torch.randn(16, 64, device="meta"),), dynamic_shapes={"x": {0: Dim("batch")}})


def _plan(trace, **options):
    exported, env, dims = trace.exported, trace.env, trace.dim_exprs
    options.setdefault("constraints", ["Eq(Mod(batch, 4), 0)"])
    return planner.plan(exported, options.pop("mesh", Mesh((4,))), shape_env=env, dims=dims, **options)


def test_constraints_are_translated_to_trace_symbols(mlp_trace):
    plan = _plan(mlp_trace, batch_sizes=[8, 4096])
    symbol = plan.names.symbols["batch"]
    assert plan.trace_guards == (f"Eq(Mod({symbol}, 4), 0)",) and plan.guards == ("Eq(Mod(batch, 4), 0)",)
    assert [b.values for b in plan.batch_costs] == [{"batch": 8}, {"batch": 4096}]
    assert set(plan.param_placements) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert len(plan.input_placements) == 1 and len(plan.output_placements) == 1


def test_planning_under_constraints_leaves_the_callers_env_as_it_was(mlp_trace):
    before = mlp_trace.env.to_json()
    plan = _plan(mlp_trace, constraints=["Eq(Mod(batch, 8), 0)"], batch_sizes=[8, 64])
    assert plan.guards and mlp_trace.env.to_json() == before
    assert not mlp_trace.env.statically_known_true(f"Eq(Mod({plan.names.symbols['batch']}, 8), 0)")


def test_weighted_batch_sizes(mlp_trace):
    plan = _plan(mlp_trace, batch_sizes={8: 3, 4096: 1})
    assert [b.weight for b in plan.batch_costs] == pytest.approx([0.75, 0.25])
    expected = sum(b.weight * b.cost for b in plan.batch_costs)
    assert plan.cost.total == pytest.approx(expected, rel=1e-9)


def test_mesh_may_be_a_tuple_or_a_device_mesh(mlp_trace):
    from torch.distributed.device_mesh import DeviceMesh

    device_mesh = DeviceMesh("cpu", torch.arange(4), mesh_dim_names=("tp",), _init_backend=False, _rank=0)
    assert _plan(mlp_trace, mesh=device_mesh).mesh == Mesh((4,), ("tp",))
    assert _plan(mlp_trace, mesh=(2, 2)).mesh == Mesh((2, 2))


@pytest.mark.parametrize("options, error, message", [
    ({"constraints": ["Eq(Mod(bacth, 4), 0)"]}, ValueError, "mentions bacth"),
    ({"batch_sizes": [6]}, ValueError, r"batch point \{'batch': 6\} breaks"),
    ({"batch_sizes": [{"seq": 8}]}, ValueError, "names 'seq'"),
    ({"solver": "gurobi"}, ValueError, "solver must be"),
    ({"objective": "fastest"}, ValueError, "objective must be"),
    ({"regret": True}, ValueError, "regret must be one of"),
    ({"objective": "regret", "regret": "off"}, ValueError, "use regret='bound' or 'exact'"),
    ({"objective": "worst-regret", "solver": "greedy"}, ValueError, "greedy baseline has no worst-regret"),
    ({"divisibility": "sometimes"}, ValueError, "divisibility must be one of"),
    ({"hardware": "tpu-v5"}, ValueError, "unknown hardware preset"),
    ({"mesh": "2x2"}, TypeError, "mesh must be"),
])
def test_bad_options_get_clear_errors(mlp_trace, options, error, message):
    with pytest.raises(error, match=message):
        _plan(mlp_trace, **options)


def test_progress_names_each_phase_and_each_batch_point(mlp_trace):
    lines: list[str] = []
    _plan(mlp_trace, batch_sizes=[8, 64], progress=lines.append)
    assert lines[0].startswith("reading the graph") and lines[1].startswith("building the ILP")
    assert lines[2:4] == ["bounding the optimum at batch=64 alone (1/2)", "bounding the optimum at batch=8 alone (2/2)"]
    assert lines[4:] == ["solving for the expected objective (highs)", "assembling the plan"]


@pytest.mark.parametrize("regret", ["bound", "exact"])
def test_each_points_optimum_is_found_costliest_first_and_reported_at_its_own_point(mlp_trace, regret):
    """The bounds are found from the costliest point to the cheapest (the regret solve then starts
    nearest its optimum); each is reported at its point, equal to that point's bound found alone."""
    options = dict(constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[64, 8, 4096, 512])
    lines: list[str] = []
    plan = _plan(mlp_trace, regret=regret, objective="regret", progress=lines.append, **options)
    order = [line.split("=")[1].split()[0] for line in lines if line.startswith(("bounding", "solving the optimum"))]
    assert order == ["4096", "512", "64", "8"]
    problem = prepare(mlp_trace.exported, Mesh((4,)), shape_env=mlp_trace.env, dims=mlp_trace.dim_exprs, **options).problem
    for k, batch in enumerate(plan.batch_costs):
        alone = IlpModel(problem)
        weights = np.eye(len(problem.points))[k]
        expected = alone.lower_bound(weights).value if regret == "bound" else alone.solve(weights).objective
        assert batch.values == problem.points.labels[k] and batch.optimum == pytest.approx(expected, rel=1e-6)


def test_shape_env_must_be_shapecore(mlp_trace):
    exported, dims = mlp_trace.exported, mlp_trace.dim_exprs
    with pytest.raises(TypeError, match="shapecore.ShapeEnv"):
        planner.plan(exported, Mesh((2,)), shape_env=object(), dims=dims)  # type: ignore[arg-type]


@torch.library.custom_op("plannertest::mystery", mutates_args=())
def _mystery(x: torch.Tensor) -> torch.Tensor:
    return x.flip(0)


@_mystery.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_op_no_provider_covers_is_replicated_with_a_warning():
    class Mystery(torch.nn.Module):
        def forward(self, x):
            return _mystery(x @ x.t()) * 2

    x = torch.randn(8, 8)
    with pytest.warns(UserWarning, match="plannertest.mystery"):
        plan = planner.plan_module(Mystery(), (x,), dynamic_shapes={"x": {0: Dim("n")}}, mesh=Mesh((2,)))
    node = next(name for name, d in plan.decisions.items() if "mystery" in d.op)
    assert plan.placements[node] == (Replicate(),) and plan.decisions[node].provider == "fallback"


def test_custom_strategy_provider_is_asked_first(mlp_trace):
    class RowsOnly:
        name = "rows-only"

        def strategies(self, node, graph, mesh):
            if node.target != "aten.addmm.default":
                return None
            return [planner.Strategy(((Shard(0),),), ((Replicate(),), (Shard(0),), (Replicate(),)), "rows")]

    plan = _plan(mlp_trace, strategies=[RowsOnly(), planner.BuiltinProvider()], batch_sizes=[64])
    linear = [d for d in plan.decisions.values() if d.op == "aten.addmm.default"]
    assert linear and all(d.provider == "rows-only" and d.rule == "rows" for d in linear)


def test_a_divisibility_constraint_guards_the_plan_in_dim_names_and_the_names_travel_through_json():
    model, x = on_meta(MLP, 64, 256), torch.randn(16, 64, device="meta")
    plan = planner.plan_module(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}}, mesh=Mesh((4,)),
                               constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[8, 64],
                               placement_constraints=[planner.Pin("inputs", "S(0)")])
    symbol = plan.names.batch
    assert plan.names.symbols == {"batch": symbol} and symbol.startswith("s")
    assert plan.guards == ("Eq(Mod(batch, 4), 0)",)  # the split of the batch relies on it
    assert plan.trace_guards == (f"Eq(Mod({symbol}, 4), 0)",)  # what the lowering checks
    assert "guards: Eq(Mod(batch, 4), 0)" in str(plan)
    again = planner.Plan.from_json(plan.to_json())
    assert again.names == plan.names and again.guards == plan.guards and again.trace_guards == plan.trace_guards


def test_the_batch_symbol_is_the_root_of_the_first_inputs_dim_even_a_derived_one():
    model, batch = on_meta(MLP, 64, 256), Dim("batch")
    traced = planner.trace_module(model, (torch.randn(32, 64, device="meta"),), dynamic_shapes={"x": {0: 8 * batch}})
    assert traced.names.batch == traced.traced.dims["batch"]
    plan = traced.plan(Mesh((2,)))
    assert plan.names.batch == traced.names.batch and plan.batch_costs[0].values == {"batch": 4}


def test_derived_dims_and_constraints_over_the_root_dim():
    model = on_meta(MLP, 64, 256)
    batch = Dim("batch")
    x = torch.randn(32, 64, device="meta")
    plan = planner.plan_module(model, (x,), dynamic_shapes={"x": {0: 8 * batch}}, mesh=Mesh((8,)),
                               constraints=["batch <= 1024"], batch_sizes=[{"batch": 2}, {"batch": 512}])
    symbol = plan.names.symbols["batch"]
    assert plan.trace_guards == (f"{symbol} <= 1024",) and plan.guards == ("batch <= 1024",)
    rows = [p for p in plan.proofs if p.dim == 0 and symbol in p.size]
    assert rows and all(p.status == "proved" for p in rows)  # 8*batch always splits 8 ways
    with pytest.raises(ValueError, match="breaks"):
        planner.plan_module(model, (x,), dynamic_shapes={"x": {0: 8 * batch}}, mesh=Mesh((8,)),
                            constraints=["batch <= 1024"], batch_sizes=[{"batch": 2048}])


def test_keywords_and_plan_options_plan_alike_and_the_plan_records_them(mlp_trace):
    exported, env, dims = mlp_trace.exported, mlp_trace.env, mlp_trace.dim_exprs
    by_keywords = planner.plan(exported, Mesh((4,)), shape_env=env, dims=dims, constraints=["Eq(Mod(batch, 4), 0)"],
                               batch_sizes=[8, 64], objective="regret")
    options = planner.PlanOptions(constraints=["Eq(Mod(batch, 4), 0)"], batch_sizes=[8, 64])
    by_options = planner.plan(exported, Mesh((4,)), shape_env=env, dims=dims, options=options, objective="regret")
    assert by_options.to_json() == by_keywords.to_json()
    assert by_options.options == dataclasses.replace(options, objective="regret").to_dict()
    assert by_options.options["constraints"] == ["Eq(Mod(batch, 4), 0)"] and by_options.options["batch_sizes"] == [8, 64]
    assert planner.Plan.from_json(by_options.to_json()).options == by_options.options


def test_unknown_keywords_are_refused_naming_them(mlp_trace):
    exported, env, dims = mlp_trace.exported, mlp_trace.env, mlp_trace.dim_exprs
    with pytest.raises(TypeError, match=r"plan\(\) got an unexpected keyword argument 'batch_size' \(did you mean 'batch_sizes'\?\)"):
        planner.plan(exported, Mesh((4,)), shape_env=env, dims=dims, batch_size=[8])
    with pytest.raises(TypeError, match=r"prepare\(\) got an unexpected keyword argument 'solvr'"):
        prepare(exported, Mesh((4,)), shape_env=env, dims=dims, solvr="cbc")


def test_plan_module_checks_its_options_before_tracing():
    class Untraceable(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("traced")

    x = torch.randn(8, 4)
    for options, message in [({"objective": "fastest"}, "objective must be one of"),
                             ({"constraint": ["n >= 2"]}, "did you mean 'constraints'")]:
        with pytest.raises((ValueError, TypeError), match=message):
            planner.plan_module(Untraceable(), (x,), dynamic_shapes={"x": {0: Dim("n")}}, mesh=Mesh((2,)), **options)


def test_trace_module_checks_the_options_traces_at_the_largest_batch_size_and_plans_as_plan_module():
    model, x = on_meta(MLP, 64, 256), torch.randn(16, 64, device="meta")
    spec = {"x": {0: Dim("batch")}}
    with pytest.raises(TypeError, match=r"^parallelize\(\) got an unexpected keyword argument 'batch_size'"):
        planner.trace_module(model, (x,), dynamic_shapes=spec, caller="parallelize", batch_size=[8, 64])
    traced = planner.trace_module(model, (x,), dynamic_shapes=spec, batch_sizes=[8, 64], objective="regret")
    assert traced.traced_at == {"batch": 64} and traced.options.objective == "regret"
    assert traced.traced.env.hints[traced.traced.dims["batch"]] == 64
    made = traced.plan(Mesh((4,)))
    assert made.to_json() == planner.plan_module(model, (x,), dynamic_shapes=spec, mesh=Mesh((4,)), batch_sizes=[8, 64],
                                                 objective="regret").to_json()


def test_a_plan_records_the_sizes_it_was_traced_at_and_tracing_there_again_gives_its_graph():
    model, x = on_meta(MLP, 64, 256), torch.randn(16, 64, device="meta")
    spec = {"x": {0: Dim("batch")}}
    made = planner.plan_module(model, (x,), dynamic_shapes=spec, mesh=Mesh((4,)), batch_sizes=[8, 64])
    assert made.trace_sizes == {"batch": 64}  # the covering example, not the example's 16
    assert planner.Plan.from_json(made.to_json()).trace_sizes == {"batch": 64}
    again = planner.trace_module(model, (x,), dynamic_shapes=spec, trace_sizes=made.trace_sizes)
    assert again.traced_at == {"batch": 64}  # no batch_sizes given: the plan's sizes alone
    assert str(again.graph.graph_module.code) == str(
        planner.trace_module(model, (x,), dynamic_shapes=spec, batch_sizes=[8, 64]).graph.graph_module.code)
    assert _plan(trace_for_planning(model, (x,), dynamic_shapes=spec)).trace_sizes == {"batch": 16}  # a given graph's


def test_plans_read_with_the_users_dim_names(mlp_trace):
    plan = _plan(mlp_trace, placement_constraints=[planner.Pin("inputs", "S(0)")], batch_sizes=[8, 64])
    symbol = plan.names.symbols["batch"]
    assert plan.trace_guards == (f"Eq(Mod({symbol}, 4), 0)",)  # the contract: the trace's symbols
    assert plan.guards == ("Eq(Mod(batch, 4), 0)",) and plan.readable(plan.trace_guards[0]) == plan.guards[0]
    summary, node = str(plan), plan.explain("x")
    assert "guards: Eq(Mod(batch, 4), 0)" in summary and "inputs: 0: S(0)" in summary and "at batch=64" in summary
    assert "dim 0 (size batch) split over axis0: Eq(Mod(batch, 4), 0) proved" in node
    assert symbol not in summary + node + plan.explain()
    assert all(name in plan.explain() for name in plan.decisions)


def _shared_and_whole(model, tokens, spec):
    options = dict(dynamic_shapes=spec, mesh=Mesh((2,)), training=True, batch_sizes=[8, 64], objective="regret")
    return planner.plan_module(model, (tokens,), **options), planner.plan_module(model, (tokens,), share_layers=False,
                                                                                  **options)


def _without_sharing(plan):
    return dataclasses.replace(plan, shared_layers="").to_json()


def test_a_decoder_plans_alike_with_its_layers_shared_by_default_or_traced_whole():
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    shared, whole = _shared_and_whole(on_meta(Decoder, 6), tokens, {"tokens": {0: Dim("batch")}})
    assert shared.shared_layers.startswith("layers: blocks 0-2 and 5 traced, 3-4 copied from block 2")
    assert whole.shared_layers == ""
    assert _without_sharing(shared) == _without_sharing(whole)
    assert f"shared layers: {shared.shared_layers}" in str(shared)
    assert planner.Plan.from_json(shared.to_json()).shared_layers == shared.shared_layers


def test_a_decoder_whose_first_and_last_layers_are_of_another_kind_plans_alike_with_its_other_layers_shared():
    tokens = torch.randint(0, 256, (8, 32), device="meta")
    model = on_meta(Decoder, 8)
    model.layers[0], model.layers[7] = on_meta(Decoder, 2, hidden=192).layers  # wider, as DeepSeek-V3's dense layers
    shared, whole = _shared_and_whole(model, tokens, {"tokens": {0: Dim("batch")}})
    assert shared.shared_layers == ("layers: blocks 0-3 and 6-7 traced, 4-5 copied from block 3 "
                                    "(each checked to compute as block 3 does)")
    assert _without_sharing(shared) == _without_sharing(whole)


@pytest.mark.slow  # two joint traces of a transformers model: tens of CPU seconds (the shared trace of
# LLaMA and four more decoders is their whole graph: tests/shapecore/torch/test_repeated.py)
@pytest.mark.parametrize("name", ["gpt2"])
def test_a_transformers_decoder_plans_alike_with_its_layers_shared_or_traced_whole(name):
    from tests.models.zoo import transformers_decoder

    shared, whole = _shared_and_whole(transformers_decoder(name, 6), torch.randint(0, 32, (8, 8)),
                                      {"ids": {0: Dim("batch")}})
    assert shared.shared_layers.endswith(": blocks 0-2 and 5 traced, 3-4 copied from block 2 "
                                         "(each checked to compute as block 2 does)"), shared.shared_layers
    assert _without_sharing(shared) == _without_sharing(whole)
