"""Batch norm on a split batch: the statistics all-reduced over the ranks that hold the batch.

The planner's ``batch_sync`` strategy (:mod:`planner.strategies.builtin`) splits the batch of
a batch norm that computes batch statistics (training). Run locally, the aten op would
normalize each rank's piece by that piece's statistics; :func:`synced_batch_norm` computes
the op's results from the global statistics instead, all-reducing per-channel sums over the
given mesh axes: forward, the sum and count (then the squared deviations from the global
mean, so the variance is as exact as the one-device op's); backward, the sums of the output
gradient and of its product with the normalized input. Weight and bias gradients come out
all-reduced (replicated), the placement the strategy promises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["SYNCED_BATCH_NORMS", "synced_batch_norm"]

_aten = torch.ops.aten
_FORWARD = _aten._native_batch_norm_legit_functional.default
_BACKWARD = _aten.native_batch_norm_backward.default
SYNCED_BATCH_NORMS = {_FORWARD: 5, _BACKWARD: 7}
"""Batch-norm ops with batch statistics -> index of their ``training`` argument."""

AllReduce = Callable[[torch.Tensor], torch.Tensor]


def _argument(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if index < len(args) else kwargs[name]


def _per_channel(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """``[C]`` broadcast against ``[N, C, *spatial]``."""
    return t.reshape([1, -1] + [1] * (ndim - 2))


def synced_batch_norm(target: Any, args: Sequence[Any], kwargs: dict[str, Any], all_reduce: AllReduce) -> Any:
    """The results of ``target(*args, **kwargs)`` over the whole batch, this rank holding a piece.

    ``all_reduce`` sums a tensor over the ranks that hold the other pieces.
    """
    if target is _FORWARD:
        return _forward(*args, **kwargs, all_reduce=all_reduce)
    return _backward(*args, **kwargs, all_reduce=all_reduce)


def _forward(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: torch.Tensor,
             running_var: torch.Tensor, training: bool, momentum: float, eps: float, *, all_reduce: AllReduce) -> tuple:
    x = input.float()
    dims = [0] + list(range(2, x.ndim))
    count = torch.ones_like(x[:, 0]).sum()  # elements per channel, a tensor: it is all-reduced with the sums
    totals = all_reduce(torch.cat([x.sum(dims), count.reshape(1)]))
    mean, n = totals[:-1] / totals[-1], totals[-1]
    centered = x - _per_channel(mean, x.ndim)
    var = all_reduce((centered * centered).sum(dims)) / n
    rstd = torch.rsqrt(var + eps)
    out = centered * _per_channel(rstd, x.ndim)
    if weight is not None:
        out = out * _per_channel(weight, x.ndim)
    if bias is not None:
        out = out + _per_channel(bias, x.ndim)
    new_mean = running_mean * (1 - momentum) + mean.to(running_mean.dtype) * momentum
    new_var = running_var * (1 - momentum) + (var * n / (n - 1)).to(running_var.dtype) * momentum
    return out.to(input.dtype), mean, rstd, new_mean, new_var


def _backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
              running_var: torch.Tensor | None, save_mean: torch.Tensor, save_invstd: torch.Tensor, train: bool, eps: float,
              output_mask: Sequence[bool], *, all_reduce: AllReduce) -> tuple:
    x, g = input.float(), grad_out.float()
    dims = [0] + list(range(2, x.ndim))
    xhat = (x - _per_channel(save_mean, x.ndim)) * _per_channel(save_invstd, x.ndim)
    count = torch.ones_like(x[:, 0]).sum()
    totals = all_reduce(torch.cat([g.sum(dims), (g * xhat).sum(dims), count.reshape(1)]))
    channels = x.shape[1]
    sum_g, sum_gx, n = totals[:channels], totals[channels:-1], totals[-1]
    scale = save_invstd if weight is None else save_invstd * weight
    grad_input = (g - _per_channel(sum_g / n, x.ndim) - xhat * _per_channel(sum_gx / n, x.ndim)) * _per_channel(scale, x.ndim)
    return (grad_input.to(input.dtype) if output_mask[0] else None,
            sum_gx.to(input.dtype) if output_mask[1] else None,
            sum_g.to(input.dtype) if output_mask[2] else None)
