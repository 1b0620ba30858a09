"""Grouped products of experts run expert parallel: the lowering of the planner's ``experts`` rule.

The planner's ``experts`` rule (:mod:`planner.strategies.builtin`) splits a grouped product's
(transformers' ``grouped_mm_fallback`` and its backward, or ``torch._grouped_mm`` of rows by
stacked experts with offsets) stacked experts ``(E, ...)`` by the expert dim over one mesh axis
of ``n`` ranks, and its rows, sorted by expert, alike: rank ``c`` of the axis holds experts
``[c*L, (c+1)*L)`` (``L = E/n``) and rows ``[c*S, (c+1)*S)`` of the sorted rows (``S`` = its
rows), while the offsets (expert ``e`` takes the rows ``offs[e-1]:offs[e]``) are whole on every
rank. Each rank counts its rows
per expert (its block of rows against the offsets), sends them to their expert's rank
(:func:`lowering.expert_dispatch.dispatch`), runs its own experts on what arrives, and sends the
results back (:func:`~lowering.expert_dispatch.combine`), in its rows' order: the local result
is this rank's block of the one-device result. The backward dispatches the rows and their
gradients together, returns the rows' gradients the same way, and keeps its experts' weight
gradients, which every routed row reached (``_grouped_mm``'s backward is two ``_grouped_mm``:
the rows' gradient, run as a forward, and the weight gradient, which dispatches the same way).

Each ``run`` takes the op's arguments as the lowering fetched them (this rank's pieces), the
size ``n`` of the axis, its group and this rank's coordinate on it (a traced tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from lowering.expert_dispatch import Dispatched, combine, dispatch

__all__ = ["EXPERT_PARALLEL", "expert_parallel", "local_counts"]


def local_counts(offs: torch.Tensor, rows: Any, coordinate: torch.Tensor) -> torch.Tensor:
    """Rows per expert among rows ``[coordinate*rows, (coordinate+1)*rows)`` of the sorted rows,
    expert ``e`` taking ``offs[e-1]:offs[e]`` (offsets that cover fewer rows leave some rows to
    no expert, which :func:`~lowering.expert_dispatch.dispatch` refuses on every rank)."""
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    first = coordinate.to(torch.int64) * rows
    last = first + rows
    return ends.clamp(first, last) - starts.clamp(first, last)


def _forward(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor) -> torch.Tensor:
    """``grouped_mm_fallback(input [S, K], weight [L, K, N], offs [E])``: ``[S, N]``; ``_grouped_mm`` alike."""
    rows, weight, offs = args[:3]
    dispatched = dispatch(rows, local_counts(offs, rows.size(0), coordinate), ranks, group)
    pieces = dispatched.tokens.split(dispatched.counts)
    return combine(torch.cat([piece @ weight[e] for e, piece in enumerate(pieces)]), dispatched)


def _dispatched_pairs(rows: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor, ranks: int, group: str,
                      coordinate: torch.Tensor) -> tuple[Dispatched, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Each row of ``rows`` and of its gradient ``grad`` sent together (one exchange) to their
    expert's rank: what arrived, and its rows and gradients per local expert."""
    width = rows.size(1)
    both = torch.cat([rows, grad.to(rows.dtype)], 1)
    dispatched = dispatch(both, local_counts(offs, rows.size(0), coordinate), ranks, group)
    pieces = dispatched.tokens.split(dispatched.counts)
    return dispatched, [(piece[:, :width], piece[:, width:]) for piece in pieces]


def _backward(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``grouped_mm_fallback_backward(input, weight, offs, grad_output)``: ``(grad_input, grad_weight)``."""
    rows, weight, offs, grad = args[:4]
    dispatched, pairs = _dispatched_pairs(rows, grad, offs, ranks, group, coordinate)
    grad_rows = combine(torch.cat([g @ weight[e].t() for e, (_, g) in enumerate(pairs)]), dispatched)
    return grad_rows, torch.stack([x.t() @ g for x, g in pairs])


def _weight_gradient(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor) -> torch.Tensor:
    """``_grouped_mm(input.T [K, S], grad_output [S, N], offs)``: the experts' ``grad_weight [L, K, N]``."""
    columns, grad, offs = args[:3]
    _, pairs = _dispatched_pairs(columns.t(), grad, offs, ranks, group, coordinate)
    return torch.stack([x.t() @ g for x, g in pairs])


EXPERT_PARALLEL: dict[str, Callable[..., Any]] = {
    "transformers.grouped_mm_fallback.default": _forward,
    "transformers.grouped_mm_fallback_backward.default": _backward,
}
"""Op (as the plan names it) -> its expert-parallel run ``(args, ranks, group, coordinate)``."""


def expert_parallel(target: str, ndims: Sequence[int]) -> tuple[Callable[..., Any], int] | None:
    """The expert-parallel run of op ``target`` whose operands have ``ndims`` dims, and the dim of
    its operand 0 that holds the rows; None where the op has none (``_grouped_mm`` has one in two
    layouts: rows by stacked experts, and the experts' weight gradient)."""
    if target == "aten._grouped_mm.default":
        return {(2, 3): (_forward, 0), (2, 2): (_weight_gradient, 1)}.get(tuple(ndims[:2]))
    run = EXPERT_PARALLEL.get(target)
    return None if run is None else (run, 0)
