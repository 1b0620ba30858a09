"""Real models trained by the parallel module equal one-device training, step by step.

Each model of the zoo (transformers GPT-2 with tied embeddings, LLaMA, BERT, the T5 encoder, a
BatchNorm CNN in eval mode) takes 5 AdamW steps at batch sizes the guards accept, on 2 gloo
ranks (mesh (2,)) and on 4 (mesh (2, 2), weights split by a memory budget); after each step the
loss and every parameter (``full_tensor()``) equal one device's (fp32, rtol 1e-4).

AdamW's ``eps`` is 1e-4, not 1e-8: a parameter whose true gradient is zero (BERT's attention key
bias: softmax ignores a shift shared by all keys) gets rounding noise of about 1e-9 as its
gradient, and with eps 1e-8 Adam turns noise of either sign into a full step of that sign.
"""

import functools

import pytest
import torch
from torch.export import Dim

import lowering
from lowering import launch
from tests.models.test_planning import CONSTRAINT
from tests.models.zoo import CASES, train_one_device

pytestmark = pytest.mark.slow  # gloo ranks, each model compiled by Inductor

BATCH_SIZES = [4, 8, 4, 12, 8]
OPTIMIZER = dict(lr=1e-2, eps=1e-4)


def _train(rank, name, mesh, memory_budget):
    case = CASES[name]
    inputs, _ = case.batch(BATCH_SIZES[0])
    pm = lowering.parallelize(case.model(), (inputs,), dynamic_shapes=({0: Dim("batch")},), mesh=mesh, training=True,
                              constraints=[CONSTRAINT], memory_budget=memory_budget, hardware="cpu-gloo",
                              regret="off", time_limit=10)
    optimizer = torch.optim.AdamW(pm.parameters(), **OPTIMIZER)
    history = []
    for batch in BATCH_SIZES:
        inputs, target = case.batch(batch)
        loss = case.loss(pm(inputs).full_tensor(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append((loss.item(), {n: p.full_tensor().detach() for n, p in pm.named_parameters()}))
    split = sorted(n for n, p in pm.named_parameters() if any(q.is_shard() for q in p.placements))
    return history, pm.compile_count, split


def _check(name, mesh, memory_budget):
    ranks = 2 if mesh == (2,) else 4
    expected = train_one_device(CASES[name], BATCH_SIZES, **OPTIMIZER)
    for history, compiles, split in launch(functools.partial(_train, name=name, mesh=mesh, memory_budget=memory_budget),
                                           ranks, timeout=900):
        for step, ((loss, params), (want_loss, want_params)) in enumerate(zip(history, expected)):
            assert loss == pytest.approx(want_loss, rel=1e-4), (step, loss, want_loss)
            assert params.keys() == want_params.keys()
            for n, p in params.items():
                torch.testing.assert_close(p, want_params[n], rtol=1e-4, atol=1e-6, msg=lambda m: f"step {step} {n}: {m}")
        assert compiles == 1
    return split


# Known failures of the training module (lowering/partition.py, lowering/parallel.py) on i11-module's branch.
# Checked: cnn and gpt2 on (2,) (strict), llama on (2,); the other transformers models read an embedding
# the same way and are expected to fail alike (not strict: not yet run to the end on this machine).
_PARTITION = "splitting forward and backward fails: 'Node getitem_16 was invalid, but is output' (BatchNorm in eval mode)"
_EMBEDDING = ("the embedding weight (GPT-2's tied wte, LLaMA's embed_tokens) differs from one device by up to 0.04 after "
              "the first AdamW step, more than the 2*lr one step allows, though the initial weights and the loss match")
KNOWN = {(2,): {"cnn": (_PARTITION, True), "gpt2": (_EMBEDDING, True), "llama": (_EMBEDDING, False),
                "bert": (_EMBEDDING, False), "t5-encoder": (_EMBEDDING, False)},
         (2, 2): {"cnn": (_PARTITION, False), "gpt2": (_EMBEDDING, False), "llama": (_EMBEDDING, False),
                  "bert": (_EMBEDDING, False), "t5-encoder": (_EMBEDDING, False)}}


def _cases(mesh):
    return [pytest.param(name, marks=pytest.mark.xfail(strict=KNOWN[mesh][name][1], reason=KNOWN[mesh][name][0]))
            if name in KNOWN[mesh] else name for name in CASES]


@pytest.mark.parametrize("name", _cases((2,)))
def test_training_on_two_ranks_equals_one_device(name):
    _check(name, (2,), None)


@pytest.mark.parametrize("name", _cases((2, 2)))
def test_training_with_weights_split_on_a_two_by_two_mesh_equals_one_device(name):
    assert _check(name, (2, 2), CASES[name].memory_budget)  # some weight is split
