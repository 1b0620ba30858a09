"""The entry check binds symbols from global shapes and names every misfit (one process: no
agreement traffic; test_parallel runs it across ranks)."""

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

from lowering.entry import EntryCheck, InputSpec
from lowering.errors import GuardViolation, InputError
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
