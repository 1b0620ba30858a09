"""Routed sizes: each costed at its share of the total the trace proves they cover, and the
runtime asserts on them read simplified and equivalent."""

import itertools
import re

import pytest
import torch
from torch.export import Dim

import planner
from planner.graph import read_graph
from planner.routed_sizes import readable_asserts, shares
from shapecore import ShapeEnv, holds, parse
from shapecore.torch import trace_for_planning
from tests.planner.models import SortedExperts

TOKENS = (torch.randn(4, 6, 8),)  # batch x 6 tokens, top-2 of 4 experts: 12*batch routed copies
BATCH = {"x": {0: Dim("batch")}}  # no upper bound: every count's range is [0, inf]


def _plan(sliced=True, **options):
    return planner.plan_module(SortedExperts(sliced=sliced), TOKENS, dynamic_shapes=BATCH, mesh=(2,),
                               batch_sizes=[4, 32], **options)


@pytest.mark.parametrize("sliced", [True, False], ids=["slices at running offsets", "split"])
def test_counts_covering_the_routed_tokens_are_each_costed_at_their_even_share_and_read_non_negative(sliced):
    plan = _plan(sliced)
    costed = plan.options["unbacked_sizes"]
    assert costed and set(costed.values()) == {"3*batch"}  # 12*batch copies over 4 experts, not batch // 2
    total = next(a for a in plan.runtime_asserts if "12*" in a)  # split: the last count is the total less the others
    counts = set(re.findall(r"\bu\d+\b", total))
    assert len(counts) == 4 and {f"0 <= {u}" for u in counts} <= set(plan.runtime_asserts)


def test_expert_parallel_on_experts_computed_as_a_loop_over_slices_is_an_error_naming_what_to_write_instead():
    with pytest.raises(ValueError, match=r"ExpertParallel\(axis=0\): the graph has no grouped product of experts") as info:
        _plan(placement_constraints=[planner.ExpertParallel(0)])
    assert "torch._grouped_mm(rows, weights, offs=counts.cumsum(0).to(torch.int32))" in str(info.value)
    assert 'experts_implementation="grouped_mm"' in str(info.value)


# The counts' names are torch's: u0..u3 on 2.13, others on 2.11 (whose trace has more unbacked symbols).


def test_the_users_expectation_wins_over_the_share():
    first, *others = sorted(_plan().options["unbacked_sizes"])
    costed = _plan(unbacked_sizes={first: "batch"}).options["unbacked_sizes"]
    assert others and costed[first] == "batch" and all(costed[u] == "3*batch" for u in others)


def test_an_expectation_for_a_count_the_trace_defines_by_the_others_is_an_error_naming_them():
    """split: the last count is the routed total less the others; an expectation of its own was ignored."""
    env = trace_for_planning(SortedExperts(sliced=False), TOKENS, dynamic_shapes=BATCH).env
    derived = next(s.name for s, e in env.replacements.items() if s.name.startswith("u") and not e.is_Symbol)
    with pytest.raises(ValueError, match=rf"unbacked_sizes names '{derived}', which the trace defines as "
                                         r"12\*batch - u\d+ - u\d+ - u\d+: give the expectation of u\d+, u\d+, u\d+ instead"):
        _plan(sliced=False, unbacked_sizes={derived: "batch"})


def test_an_expectation_that_leaves_a_derived_count_negative_is_an_error_naming_it_and_the_expectations():
    first = sorted(_plan(sliced=False).options["unbacked_sizes"])[0]
    # split: the last count is the routed total less the others, here 12*4 - 80 - 12 - 12
    with pytest.raises(ValueError, match=rf"expects the data-dependent sizes \{{'{first}': 80, .*\}}, which put "
                                         r"u\d+ \(= 12\*batch - u\d+ - u\d+ - u\d+\) = -56 outside its range \[0, inf\]: "
                                         r"choose unbacked_sizes"):
        _plan(sliced=False, unbacked_sizes={first: "20*batch"})


def test_the_runtime_asserts_read_simplified_in_dim_names_without_infinite_ends():
    plan = _plan()
    counts = set(plan.options["unbacked_sizes"])
    asserts = str(plan).split("runtime asserts: ")[1].split("\n")[0].split("; ")
    assert not any("inf" in a or "Max" in a for a in plan.runtime_asserts + tuple(asserts))
    traced = {str(s) for expr in plan.names.exprs.values() for s in expr.free_symbols}  # s77
    assert traced and not any(re.search(rf"\b{name}\b", a) for a in (*asserts, *plan.runtime_asserts)
                              for name in traced)  # Dim names instead, printed and in the plan
    assert {f"0 <= {u}" for u in counts} <= set(asserts)
    assert any("12*batch" in a and all(re.search(rf"\b{u}\b", a) for u in counts)
               for a in asserts)  # the total they cover: 12*batch <= u0 + u1 + u2 + u3 on 2.13


def _env(claims, totals=("s0",)):
    env = ShapeEnv()
    for name in totals:
        env.create_symbol(6, name=name, min=1)
    for k in range(3):
        env.create_unbacked_symbol(name=f"u{k}", min=0)
    for claim in claims:
        env.defer_runtime_assert(claim, "")
    return env


SLICES = ("Eq(Max(0, Min(3*s0, u0 + u1) - Min(3*s0, u0)) + Max(0, -Min(3*s0, u0 + u1) + Min(3*s0, u0 + u1 + u2))"
          " + Min(3*s0, u0), 3*s0)")


@pytest.mark.parametrize("claim, share", [
    ("Eq(u0 + u1 + u2, 3*s0)", "s0"),
    (SLICES, "s0"),
    ("Eq(u0 + u1 + u2, 2*s0)", "FloorDiv(2*s0, 3)"),
    ("Eq(u0*u1*u2, s0)", None),  # not true at an even split: no share
])
def test_a_share_is_taken_only_where_the_even_split_is_proved_to_satisfy_the_fact(claim, share):
    found = shares(_env([claim]), ["u0", "u1", "u2"])
    assert (found == {} if share is None else found == dict.fromkeys(["u0", "u1", "u2"], parse(share)))


@pytest.mark.parametrize("claim", [SLICES, "Eq(u0 + u1 + u2, 3*s0)", "Eq(Max(u0, u1), 3*s0)", "Eq(Min(u0, s0) + u2, 2*s0)", "u0 + u1 <= 3*s0"])
def test_the_readable_asserts_accept_exactly_what_the_trace_asserts(claim):
    env = _env([claim])
    original = [parse(claim)] + [parse(f"u{k} >= 0") for k in range(3)]
    readable = [parse(a) for a in readable_asserts(env, ["u0", "u1", "u2"])]
    assert not any("inf" in str(a) for a in readable)
    for s0, *us in itertools.product(range(1, 4), *[range(-1, 10)] * 3):
        point = {"s0": s0, **{f"u{k}": u for k, u in enumerate(us)}}
        assert all(holds(c, point) for c in original) == all(holds(c, point) for c in readable), point


def test_split_counts_each_read_as_non_negative():
    """``split`` asserts the counts' sum, which makes the last one the total less the others: its own
    ``torch._check(c >= 0)`` is printed all the same."""
    readable = readable_asserts(_env(["Eq(u0 + u1 + u2, 3*s0)"]), ["u0", "u1", "u2"])
    assert {"0 <= u0", "0 <= u1", "0 <= u2"} <= set(readable)
    env = _env([])  # a later trace's copy of the last count (u10 := u2), as run_decompositions makes
    for k in range(3, 11):
        env.create_unbacked_symbol(name=f"u{k}", min=0)
    env.add_fact("Eq(u10, u2)")
    env.defer_runtime_assert("Eq(u0 + u1 + u2, 3*s0)", "")
    readable = readable_asserts(env, ["u0", "u1", "u2", "u10"])
    assert {"0 <= u0", "0 <= u1", "0 <= u2"} <= set(readable) and "0 <= u10" not in readable


def test_the_slices_telescoping_sum_reads_as_covering_the_total():
    assert readable_asserts(_env([SLICES]), ["u0", "u1", "u2"])[-1] == "3*s0 <= u0 + u1 + u2"


def test_what_a_number_is_read_off_is_replicated_on_every_rank():
    traced = trace_for_planning(SortedExperts(), TOKENS, dynamic_shapes=BATCH)
    read = [n.name for n in read_graph(traced.exported) if n.read_as_scalar]
    plan = planner.plan(traced.exported, (2,), shape_env=traced.env, dims=traced.dim_exprs, batch_sizes=[4, 32])
    assert read and all(all(p.is_replicate() for p in plan.placements[n]) for n in read)
    assert all(all(p.is_replicate() for p in plan.placements[n]) for n in ("sum_1",))  # counts summed whole, not partial
