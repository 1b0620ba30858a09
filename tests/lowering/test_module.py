"""``parallelize(..., training=True)`` is a trainable ``nn.Module``: DTensor parameters under the
model's names, a user loss backpropagated through the forward and backward programs, AdamW
steps equal to one-device training, gradient accumulation, eval/no_grad running the forward
only, ``init_weights`` equal to one-device init, and ``torch.distributed.checkpoint`` across
mesh shapes. Tiny models on 2 (and 4) gloo ranks.
"""

import copy
import functools
import math

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication
from torch.export import Dim
from torch.nn import functional as F

from lowering import GuardViolation, launch, parallelize
from lowering.examples import MLP, Decoder
from planner import RequireShard
from tests.lowering.budgets import sharding_budget

pytestmark = pytest.mark.slow  # gloo ranks

RTOL = 1e-4
MOD2 = ["Eq(Mod(batch, 2), 0)"]


def _tokens(batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (batch, 8), generator=g), torch.randint(0, 64, (batch, 8), generator=g)


def _close(a, b):
    return bool(torch.allclose(a, b, rtol=RTOL, atol=1e-6))


DECODER = {"dynamic_shapes": {"tokens": {0: Dim("batch")}}, "mesh": (2,), "training": True, "constraints": MOD2,
           "batch_sizes": [2, 8]}
MLP_ON_2X2 = {"dynamic_shapes": ({0: Dim("batch")},), "mesh": (2, 2), "training": True,
              "constraints": ["Eq(Mod(batch, 4), 0)"]}


def _new_decoder():
    torch.manual_seed(0)
    return Decoder(layers=1)


def _decoder(budget, rank):
    model = _new_decoder()
    reference = copy.deepcopy(model)
    pm = parallelize(model, (_tokens(4, 0)[0],), memory_budget=budget, **DECODER)
    result = {
        "module": isinstance(pm, nn.Module),
        "names": [n for n, _ in pm.named_parameters()] == [n for n, _ in reference.named_parameters()],
        "state_names": list(pm.state_dict()) == list(reference.state_dict()),
        "dtensors": all(isinstance(p, DTensor) for p in pm.parameters()),
        "placements": all(tuple(p.placements) == tuple(pm.plan.param_placements[n])
                          for n, p in pm.named_parameters() if n in pm.plan.param_placements),
        "sharded": sorted(n for n, p in pm.named_parameters() if any(q.is_shard() for q in p.placements)),
        "losses": [], "parameters": [],
    }
    opt = torch.optim.AdamW(pm.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for step, batch in enumerate((4, 2, 6, 4, 8)):
        tokens, labels = _tokens(batch, step)
        logits = pm(tokens)
        with implicit_replication():  # the labels (forward and backward): the same global tensor on every rank
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            loss.backward()
        opt.step()
        opt.zero_grad()
        expected = F.cross_entropy(reference(tokens).flatten(0, 1), labels.flatten())
        expected.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        result["losses"].append(_close(loss.full_tensor().detach(), expected.detach()))
        ours = dict(pm.named_parameters())
        result["parameters"].append([n for n, p in reference.named_parameters()
                                     if not _close(ours[n].full_tensor().detach(), p.detach())])
    result["compiles"] = pm.compile_count
    # eval and no_grad: the forward program only, no autograd, same values
    tokens, _ = _tokens(6, 9)
    with torch.no_grad():
        expected = reference(tokens)
        quiet = pm(tokens)
    pm.eval()
    evaluated = pm(tokens)
    pm.train()
    result["no_grad"] = (not quiet.requires_grad, _close(quiet.full_tensor(), expected))
    result["eval"] = (not evaluated.requires_grad, _close(evaluated.full_tensor(), expected))
    result["compiles_after"] = pm.compile_count
    try:  # an odd batch does not split: refused on every rank before any collective
        pm(_tokens(3, 0)[0])
        result["odd_batch"] = None
    except GuardViolation as error:
        result["odd_batch"] = error.guard
    return result


def _mlp(mesh, budget, *, global_outputs=False, device="cpu"):
    torch.manual_seed(0)
    with torch.device(device):
        model = MLP()
    pm = parallelize(model, (torch.randn(8, 32),), memory_budget=budget, global_outputs=global_outputs,
                     **{**MLP_ON_2X2, "mesh": mesh})
    return model, pm


@pytest.fixture(scope="module")
def mlp_budget():
    """A memory budget that splits weights of the MLP on (2, 2) (tests/lowering/budgets.py)."""
    return sharding_budget(MLP(), (torch.randn(8, 32),), **MLP_ON_2X2)


def _accumulate(budget, rank):
    """Two calls, two backward passes: the gradients add up, as on one device."""
    model, pm = _mlp((2, 2), budget, global_outputs=True)
    xs = [torch.randn(b, 32, generator=torch.Generator().manual_seed(b)) for b in (4, 8)]
    for x in xs:
        out = pm(x)
        (out ** 2).mean().backward()
        model_out = model(x)
        (model_out ** 2).mean().backward()
    return {"plain": isinstance(out, torch.Tensor) and not isinstance(out, DTensor),
            "grads": {n: _close(p.grad.full_tensor(), dict(model.named_parameters())[n].grad)
                      for n, p in pm.named_parameters()}}


def _init(module):
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.5)
        nn.init.uniform_(module.bias)


def _initialized(budget, rank):
    """init_weights equals model.apply on one device with the same seed (weights sharded on (2, 2))."""
    model, pm = _mlp((2, 2), budget)
    pm.init_weights(_init, seed=3)
    torch.manual_seed(3)
    model.apply(_init)
    return {n: _close(p.full_tensor(), dict(model.named_parameters())[n].detach()) for n, p in pm.named_parameters()}


def test_a_training_module_trains_like_one_device():
    budget = sharding_budget(_new_decoder(), (_tokens(4, 0)[0],), **DECODER)
    for r in launch(functools.partial(_decoder, budget), 2, timeout=600):
        assert r["module"] and r["names"] and r["state_names"] and r["dtensors"] and r["placements"]
        assert r["sharded"], "the memory budget should split some weights"
        assert r["losses"] == [True] * 5
        assert r["parameters"] == [[]] * 5
        assert r["compiles"] == 1
        assert r["no_grad"] == (True, True) and r["eval"] == (True, True)
        assert r["compiles_after"] == 1
        assert r["odd_batch"] is not None


def _data_parallel(rank):
    """A data-parallel plan (forced): how many programs compile over batches 4 to 64, and how
    many all-reduces one backward runs (one per replicated weight's gradient, unless bucketed)."""
    from torch.profiler import ProfilerActivity, profile

    pm = parallelize(_new_decoder(), (_tokens(4, 0)[0],), placement_constraints=[RequireShard("batch", 0)],
                     **{**DECODER, "batch_sizes": [4, 16, 64]})
    for batch in (4, 16, 64):
        tokens, labels = _tokens(batch, batch)
        loss = F.cross_entropy(pm(tokens).full_tensor().flatten(0, 1), labels.flatten())
        with profile(activities=[ProfilerActivity.CPU]) as backward:
            loss.backward()
    return {"compiles": pm.compile_count,
            "all_reduces": sum(e.name == "_c10d_functional::all_reduce_" for e in backward.events()),
            "replicated": sum(all(q.is_replicate() for q in p.placements) for p in pm.parameters())}


def test_a_data_parallel_step_compiles_once_and_reduces_the_gradients_in_one_all_reduce():
    for r in launch(_data_parallel, 2, timeout=600):
        assert r["compiles"] == 1
        assert r["replicated"] > 1 and r["all_reduces"] == 1, r


def _pieces(p):
    """How many pieces the placements of DTensor ``p`` cut it into."""
    return math.prod(p.device_mesh.shape[axis] for axis, q in enumerate(p.placements) if q.is_shard())


def _from_meta(budget, rank):
    """A model built on the meta device: only this rank's pieces are allocated, init_weights fills
    them as one device would, and the module computes what that device does."""
    _, pm = _mlp((2, 2), budget, device="meta")
    pm.init_weights(_init, seed=3)
    model = MLP()
    torch.manual_seed(3)
    model.apply(_init)
    x = torch.randn(8, 32)
    expected = dict(model.named_parameters())
    return {"pieces": all(p.to_local().numel() * _pieces(p) == p.numel() for p in pm.parameters()),
            "sharded": any(_pieces(p) > 1 for p in pm.parameters()),
            "weights": {n: _close(p.full_tensor(), expected[n].detach()) for n, p in pm.named_parameters()},
            "output": _close(pm(x).full_tensor().detach(), model(x).detach())}


def _both(budget, rank):
    return {"accumulate": _accumulate(budget, rank), "init": _initialized(budget, rank), "meta": _from_meta(budget, rank)}


def test_gradients_accumulate_init_weights_is_the_one_device_init_and_meta_models_allocate_pieces(mlp_budget):
    for r in launch(functools.partial(_both, mlp_budget), 4, timeout=600):
        assert r["accumulate"]["plain"]
        assert all(r["accumulate"]["grads"].values()), r["accumulate"]["grads"]
        assert all(r["init"].values()), r["init"]
        assert r["meta"]["sharded"], "the memory budget should split some weights"
        assert r["meta"]["pieces"] and all(r["meta"]["weights"].values()) and r["meta"]["output"], r["meta"]


def _weights(pm):
    """Each parameter's placements (None: a plain tensor, on one device) and global value."""
    return ({n: list(p.placements) if isinstance(p, DTensor) else None for n, p in pm.named_parameters()},
            {n: p.full_tensor() if isinstance(p, DTensor) else p.detach() for n, p in pm.named_parameters()})


def _save(mesh, path, budget, rank):
    model, pm = _mlp(mesh, budget)
    pm.init_weights(_init, seed=5)
    dcp.save(pm.state_dict(), checkpoint_id=path)
    return _weights(pm)


def _load(mesh, path, rank):
    model, pm = _mlp(mesh, None)
    state = pm.state_dict()
    dcp.load(state, checkpoint_id=path)
    return _weights(pm)


def test_a_checkpoint_saved_on_one_mesh_loads_on_another(tmp_path, mlp_budget):
    saved = launch(functools.partial(_save, (2, 2), str(tmp_path), mlp_budget), 4, timeout=600)
    loaded = launch(functools.partial(_load, (2,), str(tmp_path)), 2, timeout=600)
    loaded += launch(functools.partial(_load, (1,), str(tmp_path)), 1, timeout=600)  # plain tensors on one device
    assert saved[0][0] != loaded[0][0]  # the placements differ: the load reshards
    for _, values in loaded:
        for name, value in values.items():
            assert torch.equal(value, saved[0][1][name]), name


def test_a_checkpoint_saved_on_one_device_loads_on_a_mesh(tmp_path):
    [saved] = launch(functools.partial(_save, (1,), str(tmp_path), None), 1, timeout=600)
    assert set(saved[0].values()) == {None}  # plain tensors
    for _, values in launch(functools.partial(_load, (2,), str(tmp_path)), 2, timeout=600):
        for name, value in values.items():
            assert torch.equal(value, saved[1][name]), name
