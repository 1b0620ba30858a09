"""Repeated layers traced once: the joint graph built from the first blocks' trace is the graph
the whole model traces to, node for node; blocks that are not alike, or not called alike, are
traced whole."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from shapecore.torch import trace_for_planning
from shapecore.torch.repeated import TRACED_BLOCKS, repeated_blocks, replicate, truncated

SPEC = {"tokens": {0: Dim("batch")}}


class _Block(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.attention = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.norm(x)) * scale
        return h + self.down(F.silu(self.up(h)))


class _Decoder(nn.Module):
    """Alike blocks between an embedding and a head, all reading one buffer, as RoPE tables are read."""

    def __init__(self, layers: int, odd_block: int | None = None, doubled_after: int | None = None,
                 every_hidden_state: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.layers = nn.ModuleList([_Block(hidden=48 if k == odd_block else 32) for k in range(layers)])
        self.norm = nn.RMSNorm(16)
        self.head = nn.Linear(16, 32, bias=False)
        self.register_buffer("scale", torch.ones(8, 1), persistent=False)
        self.doubled_after = doubled_after
        self.every_hidden_state = every_hidden_state

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        scale = self.scale[: tokens.shape[1]]
        states = []
        for k, layer in enumerate(self.layers):
            h = layer(h, scale)
            states.append(h)
            if k == self.doubled_after:  # the model's own forward treats one block apart
                h = h * 2
        logits = self.head(self.norm(h))
        return (logits, *states) if self.every_hidden_state else logits


def _trace(model: nn.Module, share_layers: bool):
    return trace_for_planning(model, (torch.randint(0, 32, (4, 8)),), dynamic_shapes=SPEC, training=True,
                              share_layers=share_layers).graph_module


def _described(gm):
    """Every node as the planner and the lowering read it."""
    return [(n.name, n.op, str(n.target), str(n.args), str(n.kwargs), str(getattr(n.meta.get("val"), "shape", None)),
             str(n.meta.get("nn_module_stack")), str(n.meta.get("fwd_nn_module_stack")), repr(n.meta.get("desc")),
             n.meta.get("partitioner_tag")) for n in gm.graph.nodes]


@pytest.mark.parametrize("layers", [TRACED_BLOCKS + 2, TRACED_BLOCKS + 5])
def test_a_run_of_alike_blocks_traced_once_is_the_graph_of_the_whole_model(layers):
    torch.manual_seed(0)
    model = _Decoder(layers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # shared, not traced whole with a warning
        shared = _trace(model, share_layers=True)
    whole = _trace(model, share_layers=False)
    assert _described(shared) == _described(whole)
    assert shared.code == whole.code
    assert len(list(model.layers)) == layers and [n for n, _ in model.layers.named_children()] == [str(k) for k in range(layers)]
    tokens = torch.randint(0, 32, (4, 8))
    primals = [*model.parameters(), *model.buffers(), tokens]
    tangents = [torch.ones(4, 8, 32)]
    (outputs, grads), (full_outputs, full_grads) = shared(primals, tangents), whole(primals, tangents)
    assert len(grads) == len(full_grads) == len(primals)  # the calling convention: one gradient per primal
    for ours, theirs in zip([*outputs, *grads], [*full_outputs, *full_grads]):
        assert (ours is None and theirs is None) or torch.equal(ours, theirs)


def _sizes_read_at_first_use(gm):
    """``gm`` with each size of a graph input read where torch 2.15 reads it: at its first use,
    in that node's module (2.11 to 2.14 read it where the input is first used whole, here outside the blocks)."""
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.sym_size.int and node.args[0].op == "placeholder":
            first = min(node.users, key=order.__getitem__)
            first.prepend(node)
            node.meta["nn_module_stack"] = first.meta["nn_module_stack"]
    gm.recompile()
    return gm


def test_an_input_s_size_read_inside_the_first_block_is_shared_by_every_block():
    from shapecore.torch.private import set_joint_calling_convention

    traced = _sizes_read_at_first_use(_trace(_Decoder(TRACED_BLOCKS), share_layers=False))
    [size] = [n for n in traced.graph.nodes if n.target is torch.ops.aten.sym_size.int and n.args[0].op == "placeholder"]
    assert size.meta["nn_module_stack"]["L__self__layers.0"][0] == "layers.0"  # block 0 reads it, blocks 1 to 3 too
    made = replicate(traced, "layers", 8, lambda *args: set_joint_calling_convention(*args, like=traced.graph))
    assert not isinstance(made, str), made
    assert _described(made) == _described(_sizes_read_at_first_use(_trace(_Decoder(8), share_layers=False)))


def test_blocks_not_alike_as_modules_are_not_shared():
    assert repeated_blocks(_Decoder(8)).count == 8
    assert repeated_blocks(_Decoder(8, odd_block=6)) is None  # a block of another width
    assert repeated_blocks(_Decoder(TRACED_BLOCKS + 1)) is None  # too few to gain from sharing
    tied = _Decoder(8)
    tied.layers[5].up.weight = tied.layers[4].up.weight
    assert repeated_blocks(tied) is None
    hooked = _Decoder(8)
    hooked.layers[3].register_forward_hook(lambda *args: None)
    assert repeated_blocks(hooked) is None


@pytest.mark.parametrize(("apart", "why"), [
    ({"doubled_after": 1}, "the two middle blocks traced differently"),
    ({"every_hidden_state": True}, "the two middle blocks traced differently"),  # each reads its own tangent
], ids=["one-block-apart", "output-per-block"])
def test_blocks_the_forward_treats_apart_are_traced_whole_and_the_warning_says_why(apart, why):
    model = _Decoder(8, **apart)
    with pytest.warns(UserWarning, match=f"blocks of 'layers' are traced one by one: .*{why}"):
        shared = _trace(model, share_layers=True)
    assert _described(shared) == _described(_trace(model, share_layers=False))


def test_a_model_with_no_run_of_alike_blocks_is_traced_whole_and_the_warning_says_so():
    model = _Decoder(8, odd_block=6)
    with pytest.warns(UserWarning, match="share_layers: _Decoder has no nn.ModuleList of 6 or more alike blocks"):
        shared = _trace(model, share_layers=True)
    assert _described(shared) == _described(_trace(model, share_layers=False))


def test_truncation_restores_the_blocks_under_their_names():
    model = _Decoder(8)
    before = list(model.state_dict())
    run = repeated_blocks(model)
    with pytest.raises(RuntimeError, match="inside"):
        with truncated(run):
            assert len(model.layers) == TRACED_BLOCKS
            raise RuntimeError("inside")
    assert list(model.state_dict()) == before


def test_replicate_says_why_when_the_trace_has_no_such_blocks():
    gm = _trace(_Decoder(TRACED_BLOCKS), share_layers=False)
    assert "not in one run per block" in replicate(gm, "norm", 8, lambda *args: None)


def test_sharing_the_forward_trace_s_blocks_is_refused_by_name():
    with pytest.raises(ValueError, match="share_layers=True .* training=True"):
        trace_for_planning(_Decoder(8), (torch.randint(0, 32, (4, 8)),), dynamic_shapes=SPEC, share_layers=True)
