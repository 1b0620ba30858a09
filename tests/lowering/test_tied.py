"""Tied weights: GPT-2's ``lm_head.weight`` is its ``transformer.wte.weight``, the T5 encoder's
``encoder.embed_tokens.weight`` is its ``shared.weight``. torch.export and AOT lift every name of
a tied parameter and read it through one; the plan gives the tensor one placement (sharded here,
by a memory budget), the program one gradient, under the name ``named_parameters()`` gives it.

Tiny configs (one layer, width 32, vocabulary 64), random init, no downloads; GPT-2 forward and
a T5 encoder training step in one launch of 2 gloo ranks.
"""

import functools

import pytest
import torch
from torch import nn
from torch.export import Dim

from lowering import launch
from lowering.parallel import ParallelModule
from tests.lowering.budgets import sharding_budget

pytestmark = pytest.mark.slow  # gloo ranks, and transformers models compiled by Inductor

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


def _relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


TRAINING = {"gpt2": False, "t5": True}


def _arguments(name):
    return {"dynamic_shapes": ({0: Dim("batch")},), "mesh": (2,), "training": TRAINING[name]}


def _budget(name):
    """A memory budget that splits the tied parameter (tests/lowering/budgets.py)."""
    return sharding_budget(_model(name), (_tokens(4),), targets=(lambda info: info.fqn in TIED[name],), **_arguments(name))


def _run(name, memory_budget):
    training = TRAINING[name]
    model = _model(name)
    pm = ParallelModule(model, (_tokens(4),), memory_budget=memory_budget, **_arguments(name))
    result = {"placements": {k: v for k, v in pm.plan.param_placements.items() if k in TIED[name]},
              "output_errors": [], "grad_errors": [], "grad_names": []}
    for batch in (4, 6):
        x = _tokens(batch)
        out = pm(*pm.shard_inputs(x))
        if training:
            out.full_tensor().sum().backward()
            grads = {n: p.grad.full_tensor() for n, p in pm.named_parameters()}
            pm.zero_grad()
            model.zero_grad()
            model(x).sum().backward()
            expected = dict(model.named_parameters())
            result["grad_names"].append((sorted(grads), sorted(expected)))
            result["grad_errors"].append({n: _relative(g, expected[n].grad) for n, g in grads.items() if n in expected})
        with torch.no_grad():
            result["output_errors"].append(_relative(out.full_tensor(), model(x)))
    return result


def _both(budgets, rank):
    return {name: _run(name, budget) for name, budget in budgets.items()}


def _launch_both():
    per_rank = launch(functools.partial(_both, {name: _budget(name) for name in TIED}), 2, timeout=600)
    return {name: [r[name] for r in per_rank] for name in per_rank[0]}


@pytest.fixture(scope="module")
def tied(computed_once):
    return computed_once("lowering-tied", _launch_both)


@pytest.mark.parametrize("name", list(TIED))
def test_a_tied_parameter_has_one_placement_in_the_plan(tied, name):
    for r in tied[name]:
        assert len(r["placements"]) == 1, r["placements"]  # not one per name
        (placements,) = r["placements"].values()
        assert any(p.is_shard() for p in placements)  # the budget splits it: the cut is exercised


@pytest.mark.parametrize("name", list(TIED))
def test_a_model_with_tied_weights_computes_what_one_device_does(tied, name):
    for r in tied[name]:
        assert max(r["output_errors"]) < 1e-4, r["output_errors"]


def test_a_tied_parameter_gets_one_gradient_under_its_own_name(tied):
    for r in tied["t5"]:
        for names, expected in r["grad_names"]:
            assert names == expected  # every parameter once, as named_parameters() names it
        assert "m.encoder.embed_tokens.weight" not in r["grad_names"][0][0]
        for errors in r["grad_errors"]:
            assert errors["m.shared.weight"] < 1e-4
            assert max(errors.values()) < 1e-4, errors
