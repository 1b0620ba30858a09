"""Small models the planner tests trace (built on the meta device: no memory, any size)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class GroupedQueryAttention(nn.Module):
    """Qwen2/Mistral-style attention: ``kv_heads < heads``, keys and values repeated per group
    (``repeat_kv``: ``x[:, :, None].expand(...).reshape(...)``)."""

    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def _repeat(self, x: torch.Tensor) -> torch.Tensor:
        b, kv, s, d = x.shape
        return x[:, :, None].expand(b, kv, self.heads // kv, s, d).reshape(b, self.heads, s, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self._repeat(self.k(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2))
        v = self._repeat(self.v(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.RMSNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, layers: int, dim: int = 64, heads: int = 4, hidden: int = 128, vocab: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, heads, hidden) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


class Tokens(nn.Module):
    """``[b, s, d]`` flattened to ``b*s`` tokens before a linear layer."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return self.fc(x.reshape(b * s, d))


def on_meta(model_cls, *args, **kwargs) -> nn.Module:
    with torch.device("meta"):
        return model_cls(*args, **kwargs)


class SmallCNN(nn.Module):
    """A ResNet-style stem without torchvision: conv, BatchNorm2d, relu, pooling, linear.

    Its stride-1 3x3 convolution is the op whose fake backward once asked which CPU backend
    the batch size picks, so a joint trace at batch 8 carried the guard ``batch < 16``.
    """

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * channels)
        self.fc = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Routed(nn.Module):
    """Mixture-of-experts routing: a gate picks tokens (a data-dependent count), an expert runs on
    them, ``index_add`` scatters its output back."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, 2)
        self.expert = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sel = (self.gate(x).argmax(-1) == 0).nonzero().squeeze(-1)
        return x.index_add(0, sel, self.expert(x.index_select(0, sel)))


class RoutedThroughViews(Routed):
    """:class:`Routed` whose expert's output goes through views of the routed tokens ``[u0, 4, 4]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sel = (self.gate(x).argmax(-1) == 0).nonzero().squeeze(-1)
        out = self.expert(x.index_select(0, sel))
        return x.index_add(0, sel, out.view(-1, 4, x.shape[1] // 4).relu().view(-1, x.shape[1]))


class EvenlyRouted(Routed):
    """:class:`Routed` whose model states that it routes an even number of tokens (``torch._check``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sel = (self.gate(x).argmax(-1) == 0).nonzero().squeeze(-1)
        torch._check(sel.size(0) % 2 == 0)
        return x.index_add(0, sel, self.expert(x.index_select(0, sel)))


class SortedExperts(nn.Module):
    """A routed mixture of experts as hand-written MoE layers cut it: top-``k`` routing, the
    token copies sorted by expert, each expert's slice of the data-dependent size
    ``counts[e]`` (``one_hot(...).sum(0).tolist()``) run through its own weight of the stacked
    ``(experts, dim, dim)`` parameter, the results weighted and added back per token.
    ``sliced``: the slices are cut at running offsets (``xs[start:start + c]``), else by
    ``split(counts)``."""

    def __init__(self, dim: int = 8, experts: int = 4, k: int = 2, *, sliced: bool = True) -> None:
        super().__init__()
        self.k, self.experts, self.sliced = k, experts, sliced
        self.gate = nn.Linear(dim, experts)
        self.w = nn.Parameter(torch.randn(experts, dim, dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, chosen = self.gate(x).topk(self.k, -1)
        order = chosen.flatten().argsort()
        token = order // self.k
        out = self.run_experts(x[token], F.one_hot(chosen.flatten(), self.experts).sum(0))
        out = out * weights.softmax(-1).flatten()[order, None]
        return torch.zeros_like(x).index_add(0, token, out).view(shape)

    def run_experts(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Each expert's rows of ``routed`` (sorted by expert, ``counts[e]`` rows for expert ``e``) through its weight."""
        sizes = counts.tolist()
        for count in sizes:
            torch._check(count >= 0)
        if self.sliced:
            pieces, start = [], 0
            for count in sizes:
                pieces.append(routed[start:start + count])
                start = start + count
        else:
            pieces = routed.split(sizes)
        return torch.cat([piece @ self.w[e] for e, piece in enumerate(pieces)])


class GroupedExperts(SortedExperts):
    """:class:`SortedExperts` whose experts run as one grouped product with offsets, as
    transformers' MoE layers do on the CPU (its custom op ``transformers::grouped_mm_fallback``,
    whose backward is one op too): no data-dependent size in the trace."""

    def run_experts(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        import transformers.integrations.moe  # noqa: F401 - registers torch.ops.transformers.grouped_mm_fallback

        return torch.ops.transformers.grouped_mm_fallback(routed, self.w, counts.cumsum(0))


def _transformers_moe(config_class: str, module: type[nn.Module], dim: int, experts: int) -> nn.Module:
    """``module`` (a transformers MoE layer class) of a ``config_class`` config, top-2 of ``experts``, width ``dim``,
    its experts as one grouped product, its parameters drawn from a seeded normal."""
    import transformers

    config = getattr(transformers, config_class)(hidden_size=dim, intermediate_size=2 * dim, num_local_experts=experts,
                                                 num_experts_per_tok=2, experts_implementation="grouped_mm")
    torch.manual_seed(0)
    block = module(config)
    with torch.no_grad():  # its parameters are left empty for the model's own initialization
        for parameter in block.parameters():
            parameter.normal_(0.0, 0.3)
    return block


def transformers_moe_block(dim: int = 8, experts: int = 4) -> nn.Module:
    """transformers' Mixtral sparse MoE block (top-2 of ``experts``, width ``dim``), seeded, its experts
    as one grouped product: the routing chain that sorts every routed row of the batch."""
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    return _transformers_moe("MixtralConfig", MixtralSparseMoeBlock, dim, experts)


def transformers_gpt_oss_moe(dim: int = 8, experts: int = 4) -> nn.Module:
    """transformers' GPT-OSS MoE layer (router with a bias, top-2 of ``experts``, width ``dim``),
    seeded: its experts' biases gathered per routed row by the sorted expert ids."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    return _transformers_moe("GptOssConfig", GptOssMLP, dim, experts)


class Positions(nn.Module):
    """Rows plus constant ``full`` and ``new_empty_strided`` tensors and the row numbers
    (``arange``): factory ops whose dim 0 is the batch. ``arange`` stays replicated (split,
    T5's relative positions met an Inductor error): what is computed from it takes its piece."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ones = x.new_empty_strided(x.shape, (x.shape[1], 1)).fill_(1.0)
        rows = torch.arange(x.shape[0], dtype=x.dtype)[:, None]
        return self.fc(x) + torch.full((x.shape[0], x.shape[1]), 2.0) + ones + rows
