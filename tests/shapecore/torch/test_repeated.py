"""Repeated layers traced once, by default: the joint graph built from the first blocks' trace is
the graph the whole model traces to, node for node (transformers' decoders too); blocks the model
computes apart (an attribute its forward reads, a call made apart) are traced whole."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from shapecore.torch import trace_for_planning
from shapecore.torch.repeated import TRACED_BLOCKS, check_blocks, repeated_blocks, replicate, truncated
from tests.models.zoo import transformers_decoder

SPEC = {"tokens": {0: Dim("batch")}}


class _Block(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32, index: int = 0) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.attention = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.index = index  # never read by the forward, as transformers' layer_idx without a cache
        self.gated = False
        self.widest = None

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.norm(x)) * scale
        if self.gated:  # an attribute that changes the computation
            h = h * torch.sigmoid(h)
        if self.widest is not None and x.shape[0] > self.widest:  # one that changes a guard only
            h = h * 1.0
        return h + self.down(F.silu(self.up(h)))


class _Decoder(nn.Module):
    """Blocks between an embedding and a head, all reading one buffer, as RoPE tables are read."""

    def __init__(self, layers: int, odd_block: int | None = None, doubled_after: int | None = None,
                 every_hidden_state: bool = False, index_passed: bool = False, wide_first: int = 0,
                 wide_last: int = 0) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)  # the first and last blocks of another kind, as DeepSeek-V3's dense ones
        wide = {odd_block, *range(wide_first), *range(layers - wide_last, layers)}
        self.layers = nn.ModuleList([_Block(hidden=48 if k in wide else 32, index=k) for k in range(layers)])
        self.norm = nn.RMSNorm(16)
        self.head = nn.Linear(16, 32, bias=False)
        self.register_buffer("scale", torch.ones(8, 1), persistent=False)
        self.doubled_after = doubled_after
        self.every_hidden_state = every_hidden_state
        self.index_passed = index_passed

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        scale = self.scale[: tokens.shape[1]]
        states = []
        for k, layer in enumerate(self.layers):
            h = layer(h, scale * k) if self.index_passed else layer(h, scale)
            states.append(h)
            if k == self.doubled_after:  # the model's own forward treats one block apart
                h = h * 2
        logits = self.head(self.norm(h))
        return (logits, *states) if self.every_hidden_state else logits


class _Twice(_Decoder):
    """Every block run twice, as a model that reuses its layers."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in [*self.layers, *self.layers]:
            h = layer(h, self.scale[: tokens.shape[1]])
        return self.head(self.norm(h))


def _trace(model: nn.Module, share_layers: bool):
    return trace_for_planning(model, (torch.randint(0, 32, (4, 8)),), dynamic_shapes=SPEC, training=True,
                              share_layers=share_layers).graph_module


def _described(gm):
    """Every node as the planner and the lowering read it."""
    return [(n.name, n.op, str(n.target), str(n.args), str(n.kwargs), str(getattr(n.meta.get("val"), "shape", None)),
             str(n.meta.get("nn_module_stack")), str(n.meta.get("fwd_nn_module_stack")), repr(n.meta.get("desc")),
             n.meta.get("partitioner_tag")) for n in gm.graph.nodes]


def _traced(model: nn.Module, share_layers: bool | None = None, spec=SPEC):
    return trace_for_planning(model, (torch.randint(0, 32, (4, 8)),), dynamic_shapes=spec, training=True,
                              share_layers=share_layers)


def _shared_silently(model: nn.Module, spec=SPEC):
    """The default trace, which must share blocks and warn of nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traced = _traced(model, spec=spec)
    assert "copied from block" in traced.shared_layers, traced.shared_layers
    return traced


@pytest.mark.parametrize(("layers", "wide_first", "wide_last"),
                         [(TRACED_BLOCKS + 2, 0, 0), (TRACED_BLOCKS + 5, 0, 0), (TRACED_BLOCKS + 5, 2, 1)],
                         ids=["6-alike", "9-alike", "2-wide-6-alike-1-wide"])
def test_a_run_of_alike_blocks_traced_once_is_the_graph_of_the_whole_model(layers, wide_first, wide_last):
    torch.manual_seed(0)
    model = _Decoder(layers, wide_first=wide_first, wide_last=wide_last)  # blocks of another kind: traced as they are
    traced = _shared_silently(model)
    shared, whole = traced.graph_module, _trace(model, share_layers=False)
    middle, last = wide_first + 2, layers - wide_last - 1
    after = f"-{layers - 1}" if wide_last else ""
    assert traced.shared_layers == (f"layers: blocks 0-{middle} and {last}{after} traced, {middle + 1}-{last - 1} copied "
                                    f"from block {middle} (each checked to compute as block {middle} does)")
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


def test_blocks_of_one_structure_are_a_run_whatever_their_attributes():
    assert repeated_blocks(_Decoder(8)).count == 8
    assert repeated_blocks(_Decoder(8)).varying == (("", "index"),)  # differs from block 1 on; never read
    assert repeated_blocks(_odd(6, extra=1)).varying == (("", "extra"), ("", "index"))  # one block's own attribute
    assert repeated_blocks(_odd(0, gated=True)).varying == (("", "index"),)  # the first block is traced as it is
    assert repeated_blocks(_Decoder(8, odd_block=3)) is None  # a block of another width: runs of 3 and 4
    assert repeated_blocks(_Decoder(TRACED_BLOCKS + 1)) is None  # too few to gain from sharing
    tied = _Decoder(8)
    tied.layers[5].up.weight = tied.layers[4].up.weight
    assert repeated_blocks(tied) is None


def test_the_longest_run_of_consecutive_alike_blocks_among_blocks_of_another_kind_is_a_run():
    run = repeated_blocks(_Decoder(9, wide_first=3))
    assert (run.start, run.count, len(run.members)) == (3, 6, 6) and run.members[0] is run.blocks[3]
    assert run.varying == (("", "index"),)  # the run's own blocks only
    for model, start, count in [(_Decoder(8, odd_block=1), 2, 6), (_Decoder(8, odd_block=6), 0, 6),
                                (_Decoder(16, odd_block=6), 7, 9), (_Decoder(10, wide_first=1, wide_last=2), 1, 7)]:
        run = repeated_blocks(model)
        assert (run.start, run.count) == (start, count)
    assert repeated_blocks(_Decoder(8, wide_first=3)) is None  # five alike: too few
    tied = _Decoder(9, wide_first=3)
    tied.layers[0].attention.weight = tied.layers[4].attention.weight  # a traced block reads a run's parameter
    assert repeated_blocks(tied) is None


def _odd(block: int, **attributes) -> _Decoder:
    model = _Decoder(8)
    for name, value in attributes.items():
        setattr(model.layers[block], name, value)
    return model


def _wide_first_odd(block: int, **attributes) -> _Decoder:
    model = _Decoder(11, wide_first=3)  # the run: blocks 3-10
    for name, value in attributes.items():
        setattr(model.layers[block], name, value)
    return model


def _hooked(block: int) -> _Decoder:
    model = _Decoder(8)
    model.layers[block].register_forward_hook(lambda *args: None)
    return model


@pytest.mark.parametrize(("build", "why"), [
    (lambda: _odd(5, gated=True), "block 5's 'gated' differs from block 1's, and the forward reads it"),
    (lambda: _odd(6, widest=3), "block 6's 'widest' differs from block 1's, and the forward reads it"),  # a guard only
    (lambda: _hooked(4), "block 4's '_forward_hooks' differs from block 1's, and the forward reads it"),
    (lambda: _Decoder(8, doubled_after=5), "block 6 is not called or computed as block 2 is (a call of mul)"),
    (lambda: _Decoder(8, doubled_after=1),
     "block 3 is not called or computed as block 2 is (the arguments it is called with)"),
    (lambda: _Decoder(8, index_passed=True), "block 3 is not called or computed as block 2 is (a call of mul)"),
    (lambda: _Decoder(8, every_hidden_state=True),
     "the forward outside the blocks is not the same with 8 blocks as with 4 (what it returns)"),
    (lambda: _Twice(8), "blocks 1 and 2 do not each run once before block 3"),
    (lambda: _wide_first_odd(8, gated=True), "block 8's 'gated' differs from block 4's, and the forward reads it"),
    (lambda: _Decoder(11, wide_first=3, doubled_after=8), "block 9 is not called or computed as block 5 is (a call of mul)"),
    (lambda: _Decoder(12, wide_first=3, wide_last=1, every_hidden_state=True),
     "the forward outside the blocks is not the same with 12 blocks as with 8 (what it returns)"),
    (lambda: _Decoder(12, wide_first=3, wide_last=1, doubled_after=10),
     "the forward outside the blocks is not the same with 12 blocks as with 8 (a call of mul)"),
], ids=["gated", "guard-only", "hooked", "treated-apart", "treated-apart-among-traced", "index-passed",
        "output-per-block", "run-twice", "after-others-gated", "after-others-treated-apart", "among-others-output-per-block",
        "among-others-treated-apart-after"])
def test_blocks_the_model_computes_apart_fail_the_check_which_says_why(build, why):
    model = build()
    run = repeated_blocks(model)
    assert run is not None and check_blocks(model, (torch.randint(0, 32, (4, 8)),), run) == why


def test_a_run_that_fails_the_check_is_traced_whole_silently_and_the_trace_says_why():
    model = _Decoder(8, doubled_after=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default path does not warn
        traced = _traced(model)
    why = "block 6 is not called or computed as block 2 is (a call of mul)"
    assert traced.shared_layers == f"none (layers: {why})"
    with pytest.warns(UserWarning, match=re.escape(f"share_layers: traced whole: layers: {why}")):  # asked: a warning
        asked = _traced(model, share_layers=True)
    assert _described(traced.graph_module) == _described(asked.graph_module)


def test_a_guard_only_an_odd_block_records_is_not_lost():
    model = _odd(6, widest=3)  # block 6 alone asks for batch > 3, which narrows Dim("batch"): the whole trace fails
    with pytest.raises(Exception, match="Constraints violated .*\n.* guard 4 <= L\\['tokens'\\]"):
        _traced(model)


def test_asked_to_share_blocks_it_cannot_it_warns_why():
    with pytest.warns(UserWarning, match="share_layers: traced whole: _Decoder has no nn.ModuleList with 6 or more consecutive"):
        traced = _traced(_Decoder(2), share_layers=True)
    assert traced.shared_layers == ""  # nothing repeated: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _traced(_Decoder(2)).shared_layers == _traced(_Decoder(2), share_layers=False).shared_layers == ""


def test_the_check_leaves_the_model_as_it_was():
    model = _odd(5, gated=True)

    def state():
        return ([(name, id(m), {k: v for k, v in vars(m).items() if k != "_modules"}) for name, m in model.named_modules()],
                [(name, p.data_ptr()) for name, p in model.named_parameters()], "__getattribute__" in vars(_Block))

    before = state()
    check_blocks(model, (torch.randint(0, 32, (4, 8)),), repeated_blocks(model))
    assert state() == before


@pytest.mark.parametrize(("wide_first", "wide_last"), [(0, 0), (1, 2)])
def test_truncation_restores_the_blocks_under_their_names(wide_first, wide_last):
    model = _Decoder(8 + wide_first + wide_last, wide_first=wide_first, wide_last=wide_last)
    before, blocks = list(model.state_dict()), list(model.layers)
    run = repeated_blocks(model)
    with pytest.raises(RuntimeError, match="inside"):
        with truncated(run):  # the run's first blocks, with those before and after it
            assert list(model.layers) == blocks[:wide_first + TRACED_BLOCKS] + blocks[len(blocks) - wide_last:]
            raise RuntimeError("inside")
    assert list(model.state_dict()) == before and list(model.layers) == blocks


def test_replicate_says_why_when_the_trace_has_no_such_blocks():
    gm = _trace(_Decoder(TRACED_BLOCKS), share_layers=False)
    assert "not in one run per block" in replicate(gm, "norm", 8, lambda *args: None)


def test_sharing_the_forward_trace_s_blocks_is_refused_by_name_and_not_tried_by_default():
    with pytest.raises(ValueError, match="share_layers=True .* training=True"):
        trace_for_planning(_Decoder(8), (torch.randint(0, 32, (4, 8)),), dynamic_shapes=SPEC, share_layers=True)
    traced = trace_for_planning(_Decoder(8), (torch.randint(0, 32, (4, 8)),), dynamic_shapes=SPEC)
    assert traced.shared_layers == ""


# -- transformers' decoders: layer_idx is never read without a cache ------------------------------------


IDS = {"ids": {0: Dim("batch")}}
ALL_SLIDING = {"layer_types": ["sliding_attention"] * (TRACED_BLOCKS + 2)}
DECODERS = [("gpt2", {}), ("llama", {}), ("qwen2", {}), ("mistral", {}), ("phi3", {}), ("gemma3", ALL_SLIDING)]
NAMES = ["gpt2", "llama", "qwen2", "mistral", "phi3", "gemma3-all-sliding"]


@pytest.mark.parametrize(("name", "extra"), DECODERS, ids=NAMES)
def test_a_transformers_decoder_passes_the_check_though_each_layer_has_its_own_index(name, extra):
    model = transformers_decoder(name, TRACED_BLOCKS + 2, **extra)
    run = repeated_blocks(model)
    assert run is not None and run.count == TRACED_BLOCKS + 2 and any(a == "layer_idx" for _, a in run.varying)
    assert check_blocks(model, (torch.randint(0, 32, (4, 8)),), run) is None


def test_gemma3_s_full_attention_layer_among_sliding_ones_fails_the_check():
    model = transformers_decoder("gemma3", TRACED_BLOCKS + 2)  # layers 0-4 slide over 4 tokens, layer 5 attends to all
    why = check_blocks(model, (torch.randint(0, 32, (4, 8)),), repeated_blocks(model))
    assert why is not None and why.startswith("block 5's ") and why.endswith("differs from block 1's, and the forward reads it")


# Qwen2 and Mistral are LLaMA's decoder layer with a bias or a sliding window (transformers copies
# LLaMA's code into theirs): they pass the check above, and their traces cost a minute of the suite.
@pytest.mark.slow  # two joint traces of a transformers model: tens of CPU seconds
@pytest.mark.parametrize(("name", "extra"), [d for d in DECODERS if d[0] not in ("qwen2", "mistral")],
                         ids=[n for n in NAMES if n not in ("qwen2", "mistral")])
def test_a_transformers_decoder_s_shared_trace_is_its_whole_graph(name, extra):
    model = transformers_decoder(name, TRACED_BLOCKS + 2, **extra)
    shared = _shared_silently(model, IDS).graph_module
    assert _described(shared) == _described(_traced(model, False, IDS).graph_module)


def tiny_deepseek_v3(layers: int, dense: int):
    """transformers' DeepSeek-V3, tiny: ``dense`` dense layers, then MoE ones (4 routed experts, 2 per token)."""
    import transformers

    from tests.models.zoo import FirstOutput

    config = transformers.DeepseekV3Config(
        vocab_size=32, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=layers,
        first_k_dense_replace=dense, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        num_attention_heads=2, num_key_value_heads=2, q_lora_rank=8, kv_lora_rank=8, qk_rope_head_dim=4,
        qk_nope_head_dim=4, v_head_dim=4, max_position_embeddings=16, use_cache=False, bos_token_id=0, eos_token_id=0,
        pad_token_id=0)
    torch.manual_seed(0)
    return FirstOutput(transformers.DeepseekV3ForCausalLM(config)).eval()


@pytest.mark.slow  # two joint traces of a transformers model: about 30 CPU s (the hand-written decoder whose first
# blocks are of another kind is the fast case: test_a_run_of_alike_blocks_traced_once_is_the_graph_of_the_whole_model)
def test_deepseek_v3_s_moe_layers_after_its_dense_one_are_shared_and_their_trace_is_its_whole_graph():
    model = tiny_deepseek_v3(TRACED_BLOCKS + 3, dense=1)
    shared = _shared_silently(model, IDS)
    assert shared.shared_layers == ("m.model.layers: blocks 0-3 and 6 traced, 4-5 copied from block 3 "
                                    "(each checked to compute as block 3 does)")
    assert _described(shared.graph_module) == _described(_traced(model, False, IDS).graph_module)
