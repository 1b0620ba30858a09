"""PlanOptions: every bad field is refused as the options are made, and the JSON record is exact."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from planner import HARDWARE_PRESETS, AlphaBetaCostModel, BuiltinProvider, Mesh, PlanOptions
from planner.options import options_from


@pytest.mark.parametrize("fields, error, message", [
    ({"hardware": "tpu-v5"}, ValueError, r"unknown hardware preset 'tpu-v5'; presets: h100-nvlink"),
    ({"hardware": 3}, TypeError, "hardware must be a preset name or a planner.Hardware, got 3"),
    ({"constraints": "Eq(Mod(batch, 4), 0)"}, TypeError, r"constraints must be a list of guard texts"),
    ({"constraints": ["batch >= 1", 4]}, TypeError, r"constraints\[1\] must be a guard text"),
    ({"memory_budget": 0}, ValueError, r"memory_budget must be a positive number \(bytes per device, or None"),
    ({"memory_budget": "1GB"}, ValueError, "memory_budget must be a positive number"),
    ({"divisibility": "sometimes"}, ValueError, "divisibility must be one of 'prove', 'assume', 'uneven', got 'sometimes'"),
    ({"solver": "gurobi"}, ValueError, "solver must be one of 'highs', 'cbc', 'greedy', got 'gurobi'"),
    ({"objective": "fastest"}, ValueError, "objective must be one of 'expected', 'regret', 'worst-regret'"),
    ({"regret": True}, ValueError, "regret must be one of 'bound', 'exact', 'off', got True"),
    ({"time_limit": -1}, ValueError, r"time_limit must be a positive number \(seconds\), got -1"),
    ({"time_limit": float("nan")}, ValueError, "time_limit must be a positive number"),
    ({"mip_gap": 1.0}, ValueError, r"mip_gap must be a fraction in \[0, 1\) \(the relative gap the ILP stops at\), got 1.0"),
    ({"mip_gap": float("nan")}, ValueError, "mip_gap must be a fraction"),
    ({"mip_gap": True}, ValueError, "mip_gap must be a fraction"),
    ({"strategies": BuiltinProvider()}, TypeError, "strategies must be a list of planner.StrategyProvider"),
    ({"strategies": [BuiltinProvider(), "dtensor"]}, TypeError, r"strategies\[1\] must be a planner.StrategyProvider"),
    ({"cost_model": object()}, TypeError, "cost_model must be a planner.CostModel .*object lacks compute_seconds, "
                                          "collective_seconds, memory_bytes"),
    ({"cluster": "yes"}, TypeError, "cluster must be True or False, got 'yes'"),
    ({"explain": None}, TypeError, "explain must be True or False, got None"),
    ({"objective": "regret", "regret": "off"}, ValueError, "use regret='bound' or 'exact'"),
    ({"objective": "worst-regret", "solver": "greedy"}, ValueError, "greedy baseline has no worst-regret"),
])
def test_bad_fields_are_refused_naming_the_field_and_what_it_allows(fields, error, message):
    with pytest.raises(error, match=message):
        PlanOptions(**fields)
    with pytest.raises(error, match=message):  # replacing a field checks it too
        dataclasses.replace(PlanOptions(), **fields)


def test_options_are_frozen_and_sequences_become_tuples():
    options = PlanOptions(constraints=["Eq(Mod(batch, 4), 0)"], strategies=[BuiltinProvider()])
    assert options.constraints == ("Eq(Mod(batch, 4), 0)",) and isinstance(options.strategies, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.objective = "regret"  # type: ignore[misc]


def test_keywords_replace_the_fields_of_the_options_given():
    base = PlanOptions(constraints=["Eq(Mod(batch, 4), 0)"], time_limit=5)
    assert options_from(None, {}, caller="plan") == PlanOptions()
    assert options_from(base, {}, caller="plan") is base
    merged = options_from(base, {"objective": "regret", "time_limit": 9}, caller="plan")
    assert merged == PlanOptions(constraints=["Eq(Mod(batch, 4), 0)"], time_limit=9, objective="regret")


def test_unknown_keywords_name_the_keyword_the_closest_field_and_every_field():
    with pytest.raises(TypeError, match=r"plan\(\) got an unexpected keyword argument 'batch_size' "
                                        r"\(did you mean 'batch_sizes'\?\); its options are the fields of "
                                        r"planner.PlanOptions: hardware, batch_sizes, constraints, .*, explain$"):
        options_from(None, {"batch_size": [8]}, caller="plan")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzz'; its options"):
        options_from(None, {"zzz": 1}, caller="plan")
    with pytest.raises(TypeError, match=r"prepare\(\) options must be a planner.PlanOptions, got dict"):
        options_from({"objective": "regret"}, {}, caller="prepare")  # type: ignore[arg-type]


def test_to_dict_names_providers_and_cost_models_and_spells_out_custom_hardware():
    custom = dataclasses.replace(HARDWARE_PRESETS["cpu-gloo"], name="my-cpu", flops=1e12)
    record = PlanOptions(hardware=custom, strategies=[BuiltinProvider()], constraints=[sympy.sympify("b >= 2")],
                         cost_model=AlphaBetaCostModel("cpu-gloo", Mesh((2,)))).to_dict()
    assert record["strategies"] == ["builtin"] and record["cost_model"] == "AlphaBetaCostModel"
    assert record["hardware"]["name"] == "my-cpu" and record["hardware"]["flops"] == 1e12
    assert record["constraints"] == ["b >= 2"]
    assert list(record) == [f.name for f in dataclasses.fields(PlanOptions)]


_points = st.dictionaries(st.sampled_from(["batch", "seq", "s0"]), st.integers(1, 4096), min_size=1)
_batch_sizes = st.one_of(
    st.none(),
    st.lists(st.integers(1, 4096), min_size=1, max_size=4),
    st.dictionaries(st.integers(1, 4096), st.floats(0.01, 100), min_size=1, max_size=4),
    st.lists(st.one_of(_points, st.tuples(_points, st.floats(0.01, 100))), min_size=1, max_size=4),
)


@given(batch_sizes=_batch_sizes, time_limit=st.one_of(st.integers(1, 600), st.floats(0.5, 600)),
       memory_budget=st.one_of(st.none(), st.floats(1e3, 1e12)))
def test_to_dict_is_json_that_reads_back_unchanged(batch_sizes, time_limit, memory_budget):
    """What a Plan records must survive its JSON round trip exactly (int keys as pairs, tuples as lists)."""
    record = PlanOptions(batch_sizes=batch_sizes, time_limit=time_limit, memory_budget=memory_budget).to_dict()
    assert json.loads(json.dumps(record, sort_keys=True)) == record
