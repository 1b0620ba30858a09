"""Data-dependent (unbacked) sizes: costed at an expectation, never split evenly without a proof."""

import pytest
import torch
from torch.export import Dim

import planner
from torch.distributed.tensor import Replicate

from planner import ForbidShard, Mesh, RequireShard
from tests.planner.models import EvenlyRouted, Routed


def _plan(**options):
    """The batch (even: it may split) routes a data-dependent number u0 of tokens to the expert."""
    return planner.plan_module(Routed(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                               mesh=Mesh((2,)), batch_sizes=[4, 32, 256], **options)


def _unbacked_dims(plan):
    return [(p.node, p.status) for p in plan.proofs if "u" in p.size]


def _uneven(plan):
    """The proofs of the plan's splits of a dim of size u0 (uneven unless proved even)."""
    return [p for p in plan.proofs if p.size == "u0"]


def test_a_routed_expert_plans_with_its_data_dependent_size_whole_when_cheaper_and_states_the_expectation():
    plan = _plan()  # 16 features on the h100 preset: gathering the expert's rows costs more than it saves
    assert set(plan.options["unbacked_sizes"]) >= {"u0"}
    assert plan.options["unbacked_sizes"]["u0"] == "batch // 2"  # the default, over the Dim names
    assert not _unbacked_dims(plan)  # no dim of size u0 is split
    assert ("data-dependent sizes: u0 costed at batch // 2; a dim of one is split evenly only with a proof, else "
            "unevenly (torch.chunk's pieces) or kept whole: u0 kept whole") in str(plan)


def test_the_uneven_split_is_a_costed_option_of_the_expert():
    plan = _plan()
    why = plan.explain("addmm_1")
    assert "S(0) <- R; S(0); R: +" in why  # its rows split: u0 of them, unevenly


def test_a_wide_expert_on_gloo_splits_its_routed_tokens_unevenly_where_the_cost_model_prices_that_cheaper():
    # 511 features, which no axis splits: 512 would split the expert's columns and scatter them back
    # by columns (index_put off its indexed dim), cheaper still
    wide = planner.plan_module(Routed(511), (torch.randn(8, 511),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                               mesh=Mesh((2,)), batch_sizes=[64, 256, 512], hardware="cpu-gloo")
    assert any(p.node == "addmm_1" for p in _uneven(wide))
    assert all(p.status == "uneven" and p.method == "data-dependent" for p in _uneven(wide))  # never passed off as even
    assert "u0 split unevenly" in str(wide)
    whole = planner.plan_module(Routed(511), (torch.randn(8, 511),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                                mesh=Mesh((2,)), batch_sizes=[64, 256, 512], hardware="cpu-gloo",
                                placement_constraints=[ForbidShard("u0", 0)])
    assert not _uneven(whole) and whole.cost.total > wide.cost.total


def test_requiring_a_data_dependent_dim_split_splits_it_unevenly_past_where_it_is_born():
    plan = _plan(placement_constraints=[RequireShard("u0", 0)])
    split = {p.node for p in _uneven(plan)}
    assert {"squeeze", "index_select", "addmm_1"} <= split  # every tensor computed from the routed tokens
    assert plan.placements["nonzero"] == (Replicate(),)  # where u0 is born: whole, cut by a chunk
    assert all(p.status == "uneven" and p.obligation == "Eq(Mod(u0, 2), 0)" for p in _uneven(plan))
    assert "u0 split unevenly" in str(plan)


def test_a_proved_data_dependent_dim_splits_evenly():
    plan = planner.plan_module(EvenlyRouted(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                               mesh=Mesh((2,)), batch_sizes=[4, 32, 256], placement_constraints=[RequireShard("u0", 0)])
    statuses = {p.node: p.status for p in _uneven(plan)}
    assert {"index_select", "addmm_1"} <= statuses.keys() and set(statuses.values()) == {"proved"}
    assert "u0 proved and split evenly" in str(plan)


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


def test_requiring_a_split_of_a_size_no_tensor_has_is_an_error_naming_those_it_has():
    # the joint trace sizes the routed tokens u1 (u0 is only asserted on); requiring u0 would require nothing
    with pytest.raises(ValueError, match=r"RequireShard\('u0', axis=0\): no tensor of the graph has a dim of 'u0'.*"
                                         r"data-dependent sizes are u1"):
        planner.plan_module(Routed(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: 2 * Dim("batch", max=512)}},
                            mesh=Mesh((2,)), batch_sizes=[4, 32], training=True,
                            placement_constraints=[RequireShard("u0", 0)])
