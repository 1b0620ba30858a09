"""Models nobody on the project wrote, in tiny configs (random init, no downloads), with the
data and the loss each is trained on.

Each :class:`Case` builds its model seeded (the same weights on every rank and on one device),
makes the ``(inputs, target)`` batch of a step from the batch size alone (the same on every rank),
and computes the loss from the model's output. Transformers models are wrapped as
``ids -> first output`` with dropout off, in eval mode (no random masks: ranks and one device
compute the same function); the CNN's BatchNorm runs in eval mode on its running statistics.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from planner import Pin

SEQ, VOCAB, WIDTH, CLASSES = 8, 64, 32, 10


class FirstOutput(nn.Module):
    """A transformers model as ``ids -> its first output`` (logits, or an encoder's hidden states)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids, return_dict=False)[0]


class SmallCNN(nn.Module):
    """Two conv-BatchNorm-ReLU stages, global average pooling and a linear classifier (no torchvision)."""

    def __init__(self, channels: int = 16, classes: int = CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1, bias=False), nn.BatchNorm2d(2 * channels), nn.ReLU())
        self.classifier = nn.Linear(2 * channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).mean(dim=(2, 3)))


def _gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_embd=WIDTH, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                                     bos_token_id=0, eos_token_id=0)
    return FirstOutput(transformers.GPT2LMHeadModel(config))


def _grouped_query_decoder(config_class: str, model_class: str, **extra: Any) -> nn.Module:
    """A transformers causal LM of one decoder layer with grouped-query attention (``LlamaConfig``
    and ``LlamaForCausalLM``, say, by their names in transformers); ``extra`` adds to its configuration
    or overrides it."""
    import transformers

    sizes = dict(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ, use_cache=False,
                 bos_token_id=0, eos_token_id=0, pad_token_id=0)
    config = getattr(transformers, config_class)(**{**sizes, **extra})
    return FirstOutput(getattr(transformers, model_class)(config))


def _bert() -> nn.Module:
    import transformers

    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=2 * WIDTH, max_position_embeddings=SEQ,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    return FirstOutput(transformers.BertForMaskedLM(config))


def _t5_encoder() -> nn.Module:
    import transformers

    config = transformers.T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=2 * WIDTH, num_layers=1, num_heads=4,
                                   relative_attention_num_buckets=8, dropout_rate=0.0, use_cache=False)
    return FirstOutput(transformers.T5EncoderModel(config))


def transformers_decoder(name: str, layers: int, **config: Any) -> nn.Module:
    """A transformers causal LM (``gpt2``, ``llama``, ``qwen2``, ``mistral``, ``phi3``, ``gemma3``) of
    ``layers`` decoder layers in a tiny configuration (width 16, vocabulary 32), seeded, in eval
    mode, as ``ids -> logits``; ``config`` adds to its configuration."""
    import transformers

    sizes = dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=layers, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=16, use_cache=False, bos_token_id=0, eos_token_id=0,
                 pad_token_id=0)
    configs = {
        "gpt2": lambda: transformers.GPT2Config(n_layer=layers, n_embd=16, n_head=2, vocab_size=32, n_positions=16,
                                                use_cache=False, bos_token_id=0, eos_token_id=0, **config),
        "llama": lambda: transformers.LlamaConfig(**sizes, **config),
        "qwen2": lambda: transformers.Qwen2Config(**sizes, **config),
        "mistral": lambda: transformers.MistralConfig(**sizes, **config),
        "phi3": lambda: transformers.Phi3Config(**sizes, **config),
        "gemma3": lambda: transformers.Gemma3TextConfig(**sizes, head_dim=4, sliding_window=4, **config),
    }
    torch.manual_seed(0)
    return FirstOutput(transformers.AutoModelForCausalLM.from_config(configs[name]())).eval()


def _token_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch)
    return (torch.randint(0, VOCAB, (batch, SEQ), generator=generator),
            torch.randint(0, VOCAB, (batch, SEQ), generator=generator))


def _hidden_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch)
    return torch.randint(0, VOCAB, (batch, SEQ), generator=generator), torch.randn(batch, SEQ, WIDTH, generator=generator)


def _image_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 3, 8, 8, generator=generator), torch.randint(0, CLASSES, (batch,), generator=generator)


def one_token_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A token batch whose every position holds one token (labels at random): attention averages
    equal values, so every position reaches a MoE layer alike and is routed to the same experts,
    the others getting no token (as :func:`_token_batch`, it depends on the batch size alone)."""
    ids, labels = _token_batch(batch)
    return torch.full_like(ids, 5), labels


def _token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


@dataclasses.dataclass(frozen=True)
class Case:
    """A model to train: how to build it, a step's batch, and the loss on its output."""

    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    memory_budget: int | None = None
    """Bytes per device on a (2, 2) mesh, planned at batch 8: about half what a replicated plan needs
    (the weights with their gradients and AdamW state, and the activations), so the plan must
    split weights too; None for a case never planned under a budget."""

    def model(self) -> nn.Module:
        """The model, seeded: the same weights wherever it is built; in eval mode (no dropout, BatchNorm on running stats)."""
        torch.manual_seed(0)
        return self.build().eval()


CASES: dict[str, Case] = {case.name: case for case in (
    Case("gpt2", _gpt2, _token_batch, _token_loss, 300_000),
    Case("llama", functools.partial(_grouped_query_decoder, "LlamaConfig", "LlamaForCausalLM"), _token_batch,
         _token_loss, 220_000),
    # fused projections; its compiled forward returns the rotated query transposed (issue 21)
    Case("phi3", functools.partial(_grouped_query_decoder, "Phi3Config", "Phi3ForCausalLM"), _token_batch,
         _token_loss, 220_000),
    # four experts, two per token: on the CPU the experts trace to transformers' grouped_mm_fallback (issue 21)
    Case("mixtral", functools.partial(_grouped_query_decoder, "MixtralConfig", "MixtralForCausalLM",
                                      num_local_experts=4, num_experts_per_tok=2), _token_batch, _token_loss, 400_000),
    Case("bert", _bert, _token_batch, _token_loss, 200_000),
    Case("t5-encoder", _t5_encoder, _hidden_batch, F.mse_loss, 180_000),
    Case("cnn", SmallCNN, _image_batch, F.cross_entropy, 150_000),
)}


def _moe(name: str, config_class: str, model_class: str, **extra: Any) -> Case:
    """A transformers MoE decoder of :func:`_grouped_query_decoder`'s sizes: four experts, two per
    token, stacked ``(4, ...)`` (on the CPU they run as transformers' ``grouped_mm_fallback``)."""
    return Case(name, functools.partial(_grouped_query_decoder, config_class, model_class, **extra),
                _token_batch, _token_loss)


MOE_CASES: dict[str, Case] = {case.name: case for case in (
    CASES["mixtral"],
    # a shared expert beside the routed ones, gated by a sigmoid
    _moe("qwen2-moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
         moe_intermediate_size=16, shared_expert_intermediate_size=32),
    _moe("qwen3-moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
         moe_intermediate_size=16, head_dim=8),
    _moe("olmoe", "OlmoeConfig", "OlmoeForCausalLM", num_experts=4, num_experts_per_tok=2),
    # grouped routing (2 groups of 2 experts, a token's top 2 from the best group), sigmoid scores,
    # a shared expert, multi-head latent attention (as many key-value heads as query heads)
    _moe("deepseek-v3", "DeepseekV3Config", "DeepseekV3ForCausalLM", n_routed_experts=4, num_experts_per_tok=2,
         n_group=2, topk_group=1, moe_intermediate_size=16, first_k_dense_replace=0, num_key_value_heads=4,
         q_lora_rank=8, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4),
    # experts with biases (gathered per routed row), transposed weights, an interleaved clamped
    # SwiGLU; a router with a bias; attention sinks and a sliding window of 4
    _moe("gpt-oss", "GptOssConfig", "GptOssForCausalLM", num_local_experts=4, num_experts_per_tok=2, head_dim=8,
         sliding_window=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
)}
"""transformers' six MoE decoders, one layer each (tiny, random init)."""

MIXTRAL_EXPERTS_SPLIT = [
    Pin("*experts.gate_up_proj", "S(2)"), Pin("*experts.down_proj", "S(1)"),  # [E, 2I, H] and [E, H, I]
    Pin("grouped_mm_fallback", "P"), Pin("grouped_mm_fallback_1", "S(1)"),  # used as pieces, not gathered
]
"""Placement constraints splitting the Mixtral case's expert weights on the hidden dim (``H``), its two
forward expert products computing on the pieces (the gate-up product split on its contraction, the
down product on its columns) rather than on weights gathered whole."""


def train_one_device(case: Case, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], model: nn.Module | None = None,
                     **adamw: Any) -> list[tuple[float, dict[str, torch.Tensor]]]:
    """The reference: AdamW (``adamw`` its options) on one device, a step per ``(inputs, target)``
    of ``batches``; per step, the loss and every parameter after it. ``model``: the case's model
    (built by the caller to watch it), or built here."""
    model = case.model() if model is None else model
    optimizer = torch.optim.AdamW(model.parameters(), **adamw)
    history: list[tuple[float, dict[str, Any]]] = []
    for inputs, target in batches:
        loss = case.loss(model(inputs), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append((loss.item(), {n: p.detach().clone() for n, p in model.named_parameters()}))
    return history
