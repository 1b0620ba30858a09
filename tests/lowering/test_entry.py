"""The entry check binds symbols from local shapes (one process: no agreement traffic)."""

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

from lowering.entry import EntryCheck, InputSpec
from lowering.errors import GuardViolation
from shapecore import ShapeEnv

LAYOUTS = {
    # batch split 2 ways; heads bound through c·s + d
    "affine": lambda b, h: [InputSpec("x", (Shard(0),), (b, 2 * h + 1), torch.float32)],
    # heads bound through a coefficient that is itself a symbol bound first
    "product": lambda b, h: [InputSpec("y", (Replicate(),), (b, b * h), torch.float32)],
}
LOCAL_SHAPES = {"affine": lambda batch, heads: [(batch // 2, 2 * heads + 1)],
                "product": lambda batch, heads: [(batch, batch * heads)]}


def _check(layout: str) -> EntryCheck:
    env = ShapeEnv()
    b, h = env.create_symbol(8, name="s0"), env.create_symbol(3, name="s1")
    return EntryCheck(LAYOUTS[layout](b, h), (2,), env, {"s0": "batch", "s1": "heads"})


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("batch, heads", [(8, 3), (6, 5), (2, 2)])
def test_symbols_are_bound_from_local_shapes(layout, batch, heads):
    inputs = [torch.ones(shape) for shape in LOCAL_SHAPES[layout](batch, heads)]
    assert _check(layout).check(inputs) == {"s0": batch, "s1": heads}


def test_a_size_no_value_of_the_symbols_explains_names_the_input():
    with pytest.raises(GuardViolation, match=r"input y dim 1 has global size 25, but the program was traced for batch\*heads"):
        _check("product").check([torch.ones(8, 25)])
