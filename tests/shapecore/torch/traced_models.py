"""A zoo of small models and functions, each traced on CPU by one of the three front ends.

``CASES`` maps a case name to a :class:`Case`; ``Case.trace()`` runs the front end through
:mod:`shapecore.torch` (cached: each case is traced once per test session). Example
sizes avoid 0 and 1 (torch specializes them) and avoid accidental equalities (duck sizing)
unless the case is about them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as TF
from torch import nn
from torch.export import Dim

from shapecore.torch import Traced, trace_compile, trace_export, trace_make_fx

FrontEnd = Literal["export", "compile", "make_fx"]


@dataclass(frozen=True)
class Case:
    """One traced model: its name, front end, and the (cached) trace."""

    name: str
    front_end: FrontEnd
    run: Callable[[], Traced]

    def trace(self) -> Traced:
        return _trace(self.name)


CASES: dict[str, Case] = {}


def _case(front_end: FrontEnd) -> Callable[[Callable[[], Traced]], Callable[[], Traced]]:
    def register(run: Callable[[], Traced]) -> Callable[[], Traced]:
        name = run.__name__
        CASES[name] = Case(name, front_end, run)
        return run

    return register


@functools.cache
def _trace(name: str) -> Traced:
    torch.manual_seed(0)
    with torch.no_grad():
        return CASES[name].run()


# -- modules -----------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.up = nn.Linear(d_in, d_hidden)
        self.down = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Attention(nn.Module):
    """Multi-head self-attention with the head split written out (``view`` + ``transpose``)."""

    def __init__(self, d_model: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        split = lambda t: t.view(batch, seq, self.heads, d_model // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(-2, -1)) / (d_model // self.heads) ** 0.5
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(batch, seq, d_model))


class Block(nn.Module):
    """Pre-norm transformer block: attention and MLP with residuals."""

    def __init__(self, d_model: int = 16) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, 2 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, stride=2)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = TF.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x))
        return self.head(TF.adaptive_avg_pool2d(x, 1).flatten(1))


class View8(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(8, -1, x.shape[-1]).sum(1)


class ArangeThird(nn.Module):
    """``torch.arange(n // 3, n)``: export reports "Constraints violated" for n in [3, 10000]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return torch.arange(n // 3, n) + x[n // 3 :]


class NonzeroItem(nn.Module):
    def forward(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        rows = torch.nonzero(x > 0)
        count = k.item()
        torch._check(count >= 2)
        torch._check(count <= x.shape[0])
        return rows.sum(0) + x[:count].sum()


class TwoInputs(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], dim=0) + y[1:]


# -- export ------------------------------------------------------------------------------------


@_case("export")
def export_mlp() -> Traced:
    return trace_export(MLP(), (torch.randn(6, 16),), dynamic_shapes={"x": {0: Dim("batch", max=1024)}})


@_case("export")
def export_attention_head_split() -> Traced:
    dims = {0: Dim("batch", max=64), 1: Dim("seq", max=512)}
    return trace_export(Attention(), (torch.randn(3, 10, 16),), dynamic_shapes={"x": dims})


def _conv_dims(smallest: int) -> dict[int, Dim]:
    return {0: Dim("batch", max=64), 2: Dim("height", min=smallest, max=256), 3: Dim("width", min=smallest, max=256)}


@_case("export")
def export_conv_net() -> Traced:
    """Even heights and widths (derived dims): torch 2.11's export guards them even, later
    releases do not; the net itself runs at any size from 10."""
    height, width = Dim("_height", min=5, max=128), Dim("_width", min=5, max=128)
    dims = {0: Dim("batch", max=64), 2: 2 * height, 3: 2 * width}
    return trace_export(ConvNet(), (torch.randn(2, 3, 20, 18),), dynamic_shapes={"x": dims})


@_case("export")
def export_conv_net_too_small() -> Traced:
    """Sizes 8 and 9 really break the net (its second conv gets a 1x1 output): a true violation."""
    return trace_export(ConvNet(), (torch.randn(2, 3, 20, 18),), dynamic_shapes={"x": _conv_dims(8)},
                        on_constraint_violation="return")


@_case("export")
def export_view8_derived() -> Traced:
    k = Dim("k", max=128)
    return trace_export(View8(), (torch.randn(24, 5),), dynamic_shapes={"x": {0: 8 * k}})


@_case("export")
def export_view8_strict() -> Traced:
    k = Dim("k", max=128)
    return trace_export(View8(), (torch.randn(24, 5),), dynamic_shapes={"x": {0: 8 * k}}, strict=True)


@_case("export")
def export_derived_dims() -> Traced:
    batch = Dim("batch", max=256)
    return trace_export(TwoInputs(), (torch.randn(5, 3), torch.randn(11, 3)),
                        dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch + 1}})


@_case("export")
def export_nonzero_item() -> Traced:
    return trace_export(NonzeroItem(), (torch.randn(12), torch.tensor(5)),
                        dynamic_shapes={"x": {0: Dim("n", max=4096)}, "k": None})


@_case("export")
def export_arange_third() -> Traced:
    return trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes={"x": {0: Dim("n", min=3, max=10000)}},
                        on_constraint_violation="return")


# -- torch.compile -----------------------------------------------------------------------------


_BLOCK, _MLP, _CONV_NET = Block(), MLP(), ConvNet()


def _block(x: torch.Tensor, block: Block = _BLOCK) -> torch.Tensor:
    """``block`` is an input to Dynamo, so its LayerNorm ``eps`` become float symbols (specialized)."""
    return block(x)


def _cat_split_chunk(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    both = torch.cat([x, y], dim=0)
    head, tail = both.split([x.shape[0], y.shape[0]], dim=0)
    left, right = both.chunk(2, dim=1)
    return head.sum() + tail.sum() + (left * right).sum()


def _pad_multiple8(x: torch.Tensor) -> torch.Tensor:
    n, d = x.shape
    padded = TF.pad(x, (0, 0, 0, (-n) % 8))
    return padded.view(8, -1, d).sum(1)


def _view8(x: torch.Tensor) -> torch.Tensor:
    return x.view(8, -1, x.shape[-1]).mean(1)


def _slicing(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x[1:-1].sum(0) + x[::2].sum(0) + x[: n // 2].sum(0) + x[n // 3 : n - 1].sum(0)


def _interpolate(x: torch.Tensor) -> torch.Tensor:
    return TF.interpolate(x, scale_factor=0.5, mode="bilinear").sum((2, 3)) + TF.interpolate(x, scale_factor=2).sum()


def _mlp(x: torch.Tensor) -> torch.Tensor:
    return _MLP(x)


@_case("compile")
def compile_transformer_block() -> Traced:
    return trace_compile(_block, (torch.randn(3, 7, 16),))


@_case("compile")
def compile_cat_split_chunk() -> Traced:
    return trace_compile(_cat_split_chunk, (torch.randn(5, 6), torch.randn(3, 6)))


@_case("compile")
def compile_pad_multiple8() -> Traced:
    return trace_compile(_pad_multiple8, (torch.randn(13, 4),))


@_case("compile")
def compile_view8() -> Traced:
    return trace_compile(_view8, (torch.randn(24, 5),))


@_case("compile")
def compile_slicing() -> Traced:
    return trace_compile(_slicing, (torch.randn(11, 3),))


@_case("compile")
def compile_interpolate() -> Traced:
    return trace_compile(_interpolate, (torch.randn(2, 3, 5, 7),))


@_case("compile")
def compile_mark_dynamic_mlp() -> Traced:
    x = torch.randn(6, 16)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=512)
    return trace_compile(_mlp, (x,), dynamic=None)


# -- make_fx -----------------------------------------------------------------------------------


def _flatten_unflatten(x: torch.Tensor) -> torch.Tensor:
    flat = x.flatten(1)
    return flat.unflatten(1, (x.shape[1], -1)).sum(-1) + x.view(-1, x.shape[0] - 1).sum()


def _arange(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(2 * x.shape[0] + 1) + x.repeat(2).sum()


def _max_pool_ceil(x: torch.Tensor) -> torch.Tensor:
    return TF.max_pool2d(x, 3, stride=2, ceil_mode=True)


def _item_mod8(x: torch.Tensor) -> torch.Tensor:
    n = x.item()
    torch._check(n % 8 == 0)
    return torch.zeros(n).view(8, -1)


def _conv(x: torch.Tensor) -> torch.Tensor:
    return _CONV_NET(x)


@_case("make_fx")
def make_fx_flatten_unflatten() -> Traced:
    return trace_make_fx(_flatten_unflatten, (torch.randn(5, 3, 4),))


@_case("make_fx")
def make_fx_arange() -> Traced:
    return trace_make_fx(_arange, (torch.randn(6),))


@_case("make_fx")
def make_fx_max_pool_ceil() -> Traced:
    return trace_make_fx(_max_pool_ceil, (torch.randn(2, 3, 10, 9),))


@_case("make_fx")
def make_fx_item_mod8() -> Traced:
    return trace_make_fx(_item_mod8, (torch.tensor(24),))


@_case("make_fx")
def make_fx_conv_net() -> Traced:
    return trace_make_fx(_conv, (torch.randn(2, 3, 12, 14),))


def export_then_joint(model, example, dynamic_shapes):
    """The training trace as it was made before it was traced once: torch.export, then the joint
    graph of the exported module over export's own fake inputs."""
    from shapecore.torch.private import aot_export_joint_with_descriptors, detect_fake_mode

    exported = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes)
    fake = [n.meta["val"] for n in exported.graph.nodes if n.op == "placeholder"]
    with contextlib.ExitStack() as stack, detect_fake_mode(fake):
        return aot_export_joint_with_descriptors(stack, exported.module(), tuple(fake[-1:])).graph_module
