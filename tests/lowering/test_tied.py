"""Tied weights: GPT-2's ``lm_head.weight`` is its ``transformer.wte.weight``, the T5 encoder's
``encoder.embed_tokens.weight`` is its ``shared.weight``. torch.export and AOT lift every name of
a tied parameter and read it through one; the plan gives the tensor one placement (sharded here,
by a memory budget), the program one gradient, under the name ``named_parameters()`` gives it.

Tiny configs (one layer, width 32, vocabulary 64), random init, no downloads; GPT-2 planned for
inference and the T5 encoder for training on a mesh of 2. That a split tied weight computes what
one device does, forward and gradient, is `tests/models/test_training.py`'s GPT-2 on (2, 2), whose
budget splits ``wte`` (asserted there): a launch here ran the same lowering again.
"""

import pytest
import torch
from torch import nn
from torch.export import Dim

import planner
from tests.lowering.budgets import sharding_budget

pytestmark = pytest.mark.slow  # transformers models traced and planned, each budget found by planning twice

TIED = {"gpt2": ("m.transformer.wte.weight", "m.lm_head.weight"),
        "t5": ("m.shared.weight", "m.encoder.embed_tokens.weight")}


class _Logits(nn.Module):
    """A transformers model as ``ids -> first output`` (logits, or the encoder's hidden states)."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids):
        return self.m(input_ids=ids, return_dict=False)[0]


def _model(name):
    import transformers

    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                         bos_token_id=0, eos_token_id=0, use_cache=False)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                                       relative_attention_num_buckets=8, use_cache=False)
        model = transformers.T5EncoderModel(config)
    return _Logits(model.eval())


def _tokens(batch):
    return torch.randint(0, 64, (batch, 8), generator=torch.Generator().manual_seed(batch))


def _plan(name):
    """The plan ``ParallelModule`` makes for ``name`` on a mesh of 2, its budget splitting the tied tensor."""
    return planner.plan_module(_model(name), (_tokens(4),), memory_budget=_budget(name), **_arguments(name))


TRAINING = {"gpt2": False, "t5": True}


def _arguments(name):
    return {"dynamic_shapes": ({0: Dim("batch")},), "mesh": (2,), "training": TRAINING[name]}


def _budget(name):
    """A memory budget that splits the tied parameter (tests/lowering/budgets.py)."""
    return sharding_budget(_model(name), (_tokens(4),), targets=(lambda info: info.fqn in TIED[name],), **_arguments(name))


@pytest.fixture(scope="module")
def plans():
    return {name: _plan(name) for name in TIED}


@pytest.mark.parametrize("name", list(TIED))
def test_a_tied_parameter_has_one_placement_in_the_plan(plans, name):
    placements = {k: v for k, v in plans[name].param_placements.items() if k in TIED[name]}
    assert len(placements) == 1, placements  # not one per name
    (placement,) = placements.values()
    assert any(p.is_shard() for p in placement)  # the budget splits it: the cut is exercised


def test_a_tied_parameter_gets_one_gradient_under_its_own_name(plans):
    graded = [o.grad_of for o in plans["t5"].graph_outputs if o is not None and o.role == "grad"]
    expected = [n for n, _ in _model("t5").named_parameters()]  # every parameter once, as named_parameters() names it
    assert sorted(graded) == sorted(expected)
    assert "m.shared.weight" in graded and "m.encoder.embed_tokens.weight" not in graded
