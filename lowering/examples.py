"""Small reference models for the demo, the benchmark and the tests.

* :class:`MLP` — Linear, GELU, Linear.
* :class:`Attention` — multi-head causal self-attention (q/k/v/o projections, SDPA).
* :class:`Decoder` — a LLaMA-style decoder: token embedding, ``layers`` blocks of RMSNorm,
  attention with rotary position embeddings, RMSNorm and a SwiGLU MLP (each with a residual),
  a final RMSNorm and an output head.

Only the batch is meant to be dynamic; every other size is fixed at construction.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MLP", "Attention", "Decoder"]


class MLP(nn.Module):
    """``fc2(gelu(fc1(x)))`` on ``(batch, dim)`` inputs."""

    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal multi-head self-attention on ``(batch, seq, dim)``; rotary embeddings when ``seq`` is given."""

    def __init__(self, dim: int = 32, heads: int = 4, seq: int | None = None) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.rotary = seq is not None
        if seq is not None:
            head_dim = dim // heads
            angles = torch.outer(torch.arange(seq, dtype=torch.float32),
                                 1.0 / 10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            self.register_buffer("cos", torch.cat((angles.cos(), angles.cos()), dim=-1), persistent=False)
            self.register_buffer("sin", torch.cat((angles.sin(), angles.sin()), dim=-1), persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        return x.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        if self.rotary:
            q, k = _rotate(q, self.cos, self.sin), _rotate(k, self.cos, self.sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(batch, seq, -1))  # -1: tensor parallel peers compute some heads


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, seq: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim, heads, seq)
        self.mlp_norm = nn.RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    """LLaMA-style decoder: ``(batch, seq)`` token ids to ``(batch, seq, vocab)`` logits."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, hidden: int = 64, layers: int = 2,
                 seq: int = 8) -> None:
        super().__init__()
        self.seq = seq
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Block(dim, heads, hidden, seq) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
