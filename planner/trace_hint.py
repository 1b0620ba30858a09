"""The example :func:`~planner.api.plan_module` traces at: one that covers the batch sizes it costs.

torch records guards at the example's sizes (a branch taken at batch 8 may hold only below
16), so a trace at the smallest batch size can exclude the largest. ``plan_module`` traces at
the largest size the user asks to cost, per ``Dim``: each example tensor whose dim is that
``Dim`` is grown (or shrunk) to it by repeating its own rows, so values stay valid (token ids
stay in the vocabulary). Derived dims (``8*Dim("b")``) and inputs nested in containers keep
their example size.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from planner.batches import BatchSizes

__all__ = ["largest_sizes", "covering_inputs", "batch_dim"]


def largest_sizes(batch_sizes: BatchSizes, first_dim: str | None) -> dict[str, int]:
    """The largest value ``batch_sizes`` gives each ``Dim`` name (plain ints bind ``first_dim``, the batch Dim)."""
    if batch_sizes is None:
        return {}
    items = list(batch_sizes.keys()) if isinstance(batch_sizes, Mapping) else list(batch_sizes)
    found: dict[str, int] = {}
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mapping):
            item = item[0]
        values = item.items() if isinstance(item, Mapping) else [(first_dim, item)]
        for name, value in values:
            if name is not None and isinstance(value, int) and not isinstance(value, bool):
                found[name] = max(found.get(name, value), value)
    return found


def covering_inputs(model: Any, example_inputs: Sequence[Any], dynamic_shapes: Any,
                    batch_sizes: BatchSizes) -> tuple[tuple[Any, ...], dict[str, int]]:
    """``example_inputs`` with every plain ``Dim``'s size set to the largest in ``batch_sizes``,
    and the sizes changed (``Dim`` name → size traced at)."""
    specs = _input_specs(model, example_inputs, dynamic_shapes)
    wanted = largest_sizes(batch_sizes, _batch_dim(specs))
    inputs, changed = list(example_inputs), {}
    for k, spec in enumerate(specs):
        tensor = inputs[k]
        for axis, dim in sorted(_dims_of(spec).items()):
            size = wanted.get(dim.__name__)
            if size is None or not hasattr(tensor, "index_select") or axis >= tensor.dim() or tensor.shape[axis] == size:
                continue
            if not _within(dim, size) or tensor.shape[axis] == 0:
                continue
            import torch

            rows = torch.arange(size, device=tensor.device) % tensor.shape[axis]
            tensor = tensor.index_select(axis, rows)
            changed[dim.__name__] = size
        inputs[k] = tensor
    return tuple(inputs), changed


def batch_dim(model: Any, example_inputs: Sequence[Any], dynamic_shapes: Any) -> str | None:
    """The name of the batch ``Dim``, whose symbol plain ints in ``batch_sizes`` bind: the ``Dim``
    of the first dynamic dim of the first input that has one (a derived ``Dim``'s root)."""
    return _batch_dim(_input_specs(model, example_inputs, dynamic_shapes))


def _batch_dim(specs: Sequence[Any]) -> str | None:
    for spec in specs:
        found = _dims_of(spec, derived=True)
        if found:
            dim = found[min(found)]
            while hasattr(dim, "root"):
                dim = dim.root
            return dim.__name__
    return None


def _input_specs(model: Any, example_inputs: Sequence[Any], dynamic_shapes: Any) -> list[Any]:
    """One ``dynamic_shapes`` entry per example input (None where it has none)."""
    if isinstance(dynamic_shapes, (list, tuple)):
        return list(dynamic_shapes)[: len(example_inputs)] + [None] * max(0, len(example_inputs) - len(dynamic_shapes))
    if isinstance(dynamic_shapes, Mapping):
        try:
            names = list(inspect.signature(model.forward).bind(*example_inputs).arguments)
        except (TypeError, ValueError):
            return [None] * len(example_inputs)
        return [dynamic_shapes.get(name) for name in names]
    return [None] * len(example_inputs)


def _dims_of(spec: Any, *, derived: bool = False) -> dict[int, Any]:
    """Tensor dim → plain ``Dim`` (``derived``: or derived one) in one input's spec (a mapping or a per-dim sequence)."""
    from torch.export import Dim

    pairs = spec.items() if isinstance(spec, Mapping) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
    return {axis: d for axis, d in pairs if type(d) is Dim or (derived and isinstance(d, Dim))}


def _within(dim: Any, size: int) -> bool:
    lo, hi = getattr(dim, "min", 0), getattr(dim, "max", None)
    return size >= lo and (hi is None or size <= hi)
