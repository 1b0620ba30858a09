"""The entry check binds symbols from global shapes and names every misfit (one process: no
agreement traffic; test_parallel runs it across ranks), keeps what sizes that passed bound, agrees
on a gloo side group where the default group takes no CPU tensor, and names a model's device that
the process group cannot reach."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Replicate, Shard

from lowering.entry import EntryCheck, InputSpec, agreement_group, device_problem
from lowering.errors import GuardViolation, InputError, RankMismatch
from lowering.launch import launch
from shapecore import ShapeEnv

LAYOUTS = {
    # batch split 2 ways; heads bound through c·s + d
    "affine": lambda b, h: [InputSpec("x", (Shard(0),), (b, 2 * h + 1), torch.float32)],
    # heads bound through a coefficient that is itself a symbol bound first
    "product": lambda b, h: [InputSpec("y", (Replicate(),), (b, b * h), torch.float32)],
}
SHAPES = {"affine": lambda batch, heads: [(batch, 2 * heads + 1)],
          "product": lambda batch, heads: [(batch, batch * heads)]}


def _check(layout: str) -> EntryCheck:
    env = ShapeEnv()
    b, h = env.create_symbol(8, name="s0"), env.create_symbol(3, name="s1")
    return EntryCheck(LAYOUTS[layout](b, h), (2,), env, {"s0": "batch", "s1": "heads"})


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("batch, heads", [(8, 3), (6, 5), (2, 2)])
def test_symbols_are_bound_from_global_shapes(layout, batch, heads):
    inputs = [torch.ones(shape) for shape in SHAPES[layout](batch, heads)]
    assert _check(layout).check(inputs) == {"s0": batch, "s1": heads}


def test_a_size_no_value_of_the_symbols_explains_names_the_input():
    with pytest.raises(GuardViolation, match=r"input y dim 1 has global size 25, but the program was traced for batch\*heads"):
        _check("product").check([torch.ones(8, 25)])


def test_a_batch_that_does_not_split_evenly_is_refused_with_the_dim_and_its_value():
    # x is split 2 ways on dim 0 and nothing in the env promises an even batch (a plan given by hand)
    with pytest.raises(GuardViolation) as info:
        _check("affine").check([torch.ones(9, 7)])
    assert info.value.guard == "Eq(Mod(batch, 2), 0)"
    assert info.value.values == {"batch": 9, "heads": 3}
    assert "input x dim 0 has global size 9 (batch = 9), which does not split into 2 equal pieces" in str(info.value)


def test_a_batch_of_one_is_reported_as_one():
    with pytest.raises(GuardViolation, match="breaks? the guard batch >= 2 .*: batch = 1") as info:
        _check("affine").check([torch.ones(1, 7)])
    assert info.value.values == {"batch": 1, "heads": 3}


@pytest.mark.parametrize("inputs, message", [
    ([torch.ones(8, 7, dtype=torch.int64)],
     "input x: expected dtype torch.float32, got a Tensor of dtype torch.int64 and shape [8, 7]"),
    ([torch.ones(8, 7, 1)], "input x: expected 2 dims (a tensor of dtype torch.float32 and global shape (batch, "
                            "2*heads + 1)), got 3 dims (a Tensor of dtype torch.float32 and shape [8, 7, 1])"),
    ([None], "input x: expected a tensor of dtype torch.float32 and global shape (batch, 2*heads + 1), got None"),
    ([[torch.ones(7)] * 8], "input x: expected a tensor of dtype torch.float32 and global shape (batch, 2*heads + 1), "
                            "got a list of 8 items"),
    ([], "passed 0 inputs, the program takes 1 (x)"),
])
def test_an_input_that_does_not_fit_is_named_with_what_was_expected_and_given(inputs, message):
    with pytest.raises(InputError) as info:
        _check("affine").check(inputs)
    assert str(info.value) == message


@pytest.mark.parametrize("device, backend, mesh, fix", [
    ("cuda", "gloo", "cpu", "nccl"),  # a CUDA model on a gloo-only group
    ("cpu", "nccl", "cuda", "gloo"),  # a CPU model on NCCL
    ("cpu", "cpu:gloo,cuda:nccl", "cuda", "gloo"),  # the mesh is on the accelerator
])
def test_a_model_on_another_device_than_the_mesh_is_named_with_both_devices(device, backend, mesh, fix):
    assert device_problem(device, backend) == (
        f"the model is on {device}, but the process group's backend {backend} runs the mesh on {mesh}: move the model "
        f"to {mesh}, or initialize the process group with a backend for {device} "
        f"(torch.distributed.init_process_group({fix!r}))")


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl"), ("cuda", "cpu:gloo,cuda:nccl")])
def test_a_model_on_the_meshs_device_is_no_problem(device, backend):
    assert device_problem(device, backend) is None


def test_an_input_on_another_device_than_the_model_is_refused_by_name():
    env = ShapeEnv()
    b = env.create_symbol(8, name="s0")
    check = EntryCheck([InputSpec("x", (Shard(0),), (b,), torch.float32)], (2,), env, {"s0": "batch"}, device="cuda")
    with pytest.raises(InputError, match="input x: expected a tensor on cuda, where the model is, got a Tensor .* on cpu"):
        check.check([torch.ones(8)])


def test_sizes_that_passed_are_bound_again_without_binding_and_misfits_are_still_refused():
    check = _check("affine")
    assert check.check([torch.ones(8, 7)]) == {"s0": 8, "s1": 3}
    check._bind = None  # a kept outcome: binding and guards are not run again
    values = check.check([torch.ones(8, 7)])
    assert values == {"s0": 8, "s1": 3}
    values["s0"] = 0  # the caller's copy
    assert check.check([torch.ones(8, 7)]) == {"s0": 8, "s1": 3}
    with pytest.raises(InputError, match="expected dtype torch.float32"):
        check.check([torch.ones(8, 7, dtype=torch.int64)])


def _outcome(check, inputs):
    try:
        return check.check(inputs)
    except (InputError, GuardViolation) as error:
        return f"{type(error).__name__}: {error}"


_SIZES = st.sampled_from([1, 2, 3, 4, 8, 9])  # few, so that calls repeat what an earlier call passed
_INPUTS = st.one_of(
    st.builds(lambda b, w, dtype: [torch.ones(b, w, dtype=dtype)], _SIZES, _SIZES,
              st.sampled_from([torch.float32, torch.int64])),
    st.builds(lambda b, w: [torch.ones(b, w, 1)], _SIZES, _SIZES),
    st.builds(lambda b, w: [torch.ones(b, w)] * 2, _SIZES, _SIZES),
    st.just([None]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_INPUTS, min_size=1, max_size=8), st.sampled_from(list(LAYOUTS)))
def test_a_check_that_has_seen_calls_answers_each_call_as_a_new_check_does(calls, layout):
    # what passed is kept (fitting signatures, bound sizes): a later call is answered from it only when
    # a fresh check would answer the same
    kept = _check(layout)
    for inputs in calls:
        assert _outcome(kept, inputs) == _outcome(_check(layout), inputs)


def _agree_on_a_side_group(rank):
    import torch.distributed as dist

    default = agreement_group("gloo")  # the default group takes CPU tensors: agree on it
    group = agreement_group("nccl")  # as on NCCL: a gloo group made for the agreement, once
    env = ShapeEnv()
    b = env.create_symbol(8, name="s0")
    check = EntryCheck([InputSpec("x", (Shard(0),), (b,), torch.float32)], (2,), env, {"s0": "batch"}, group=group)
    bound = check.check([torch.ones(8)])
    try:
        check.check([torch.ones(8 if rank else 6)])
        mismatch = None
    except RankMismatch as error:
        mismatch = str(error)
    return default is None, group is agreement_group("nccl"), dist.get_backend(group), bound, mismatch


@pytest.mark.slow  # gloo ranks
def test_the_agreement_runs_on_a_gloo_side_group_where_the_default_group_takes_no_cpu_tensor():
    for default, kept, backend, bound, mismatch in launch(_agree_on_a_side_group, 2, timeout=120):
        assert default and kept and backend == "gloo"
        assert bound == {"s0": 8}
        assert mismatch is not None and "input x: rank 0 [6], rank 1 [8]" in mismatch
