"""Fake-mode helpers: the ShapeEnv that traced values (an FX graph's ``meta["val"]``) live in."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.fx import GraphModule
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

__all__ = ["shape_env_of", "graph_shape_env"]


def shape_env_of(values: Iterable[Any]) -> TorchShapeEnv | None:
    """The ShapeEnv of the fake mode ``values`` (fake tensors, SymInts, anything else) were made
    in, or None when none of them is fake or the fake mode has no ShapeEnv (static shapes)."""
    from shapecore.torch.private import detect_fake_mode

    mode = detect_fake_mode([v for v in values if v is not None])
    return None if mode is None else mode.shape_env


def graph_shape_env(gm: GraphModule) -> TorchShapeEnv | None:
    """The ShapeEnv of ``gm``'s placeholders' ``meta["val"]``: the trace's; None for static shapes."""
    return shape_env_of(node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder")
