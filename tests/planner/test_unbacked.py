"""Data-dependent (unbacked) sizes: costed at an expectation, never split evenly without a proof."""

import pytest
import torch
from torch.export import Dim

import planner
from planner import Mesh, PlacementConflict, RequireShard
from tests.planner.models import Routed


def _plan(**options):
    """The batch (even: it may split) routes a data-dependent number u0 of tokens to the expert."""
    return planner.plan_module(Routed(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                               mesh=Mesh((2,)), batch_sizes=[4, 32, 256], **options)


def _unbacked_dims(plan):
    return [(p.node, p.status) for p in plan.proofs if "u" in p.size]


def test_a_routed_expert_plans_with_its_data_dependent_size_whole_and_states_the_expectation():
    plan = _plan()
    assert set(plan.options["unbacked_sizes"]) >= {"u0"}
    assert plan.options["unbacked_sizes"]["u0"] == "batch // 2"  # the default, over the Dim names
    assert not _unbacked_dims(plan)  # no dim of size u0 is split
    assert any("(size u0)" in p.reason and "Eq(Mod(u0, 2), 0) is refuted" in p.reason for p in plan.pruned)


def test_the_plan_says_why_a_data_dependent_dim_stays_whole():
    plan = _plan()
    assert ("data-dependent sizes: u0 costed at batch // 2; a dim of one is split only with a proof that it "
            "divides evenly: every one kept whole") in str(plan)
    expert = next(name for name, d in plan.decisions.items() if d.op == "aten.addmm.default"
                  and any("(size u0)" in p.reason for p in plan.pruned if p.node == name))
    why = plan.explain(expert)
    assert "dim 0 (size u0)" in why and "u0 is a data-dependent size" in why
    assert "split only with a proof (torch._check(u0 % 2 == 0) in the model would give one), so it stays whole" in why


def test_requiring_a_data_dependent_dim_split_is_a_conflict_naming_it():
    with pytest.raises(PlacementConflict, match=r"RequireShard\('u0', axis=0\).* may not split dim 0 \(size u0\): "
                       r"Eq\(Mod\(u0, 2\), 0\) is refuted .*u0 is a data-dependent size") as conflict:
        _plan(placement_constraints=[RequireShard("u0", 0)])
    assert [str(c) for c in conflict.value.constraints] == ["RequireShard('u0', axis=0)"]


def test_the_users_expectation_is_what_the_plan_is_costed_at():
    few, many = _plan(unbacked_sizes={"u0": 1}), _plan(unbacked_sizes={"u0": "batch"})
    assert few.options["unbacked_sizes"]["u0"] == "1"
    assert many.options["unbacked_sizes"]["u0"] == "batch"
    assert many.cost.compute > few.cost.compute


def test_an_expectation_in_pythons_syntax_is_read_and_the_default_given_back_costs_the_same():
    quarter, default = _plan(unbacked_sizes={"u0": "batch // 4"}), _plan()
    assert quarter.options["unbacked_sizes"]["u0"] == "batch // 4"
    assert quarter.cost.compute < default.cost.compute
    again = _plan(unbacked_sizes={"u0": default.options["unbacked_sizes"]["u0"]})
    assert again.cost == default.cost


def test_no_guard_stands_in_for_a_proof_on_a_data_dependent_size():
    plan = _plan(divisibility="assume")
    assert not [g for g in plan.guards if "u" in g]
    assert not _unbacked_dims(plan)


def test_an_expectation_for_a_symbol_that_is_not_data_dependent_is_refused():
    with pytest.raises(ValueError, match="no data-dependent symbol"):
        _plan(unbacked_sizes={"batch": 4})


def test_the_plan_carries_the_runtime_asserts_on_data_dependent_sizes():
    plan = _plan()
    assert plan.runtime_asserts and all("u" in a for a in plan.runtime_asserts)
    assert type(plan).from_json(plan.to_json()).runtime_asserts == plan.runtime_asserts
    assert "runtime asserts: " in str(plan)
