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
size ``n`` of the axis, its group, this rank's coordinate on it (a traced tensor) and a per-expert
table folded into its exchange or None (:class:`FoldedTable`, :mod:`lowering.expert_fusion`); it
returns the op's local result and, for a folded gradient scatter, each local expert's sum of the
rows it received (else None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from lowering.expert_dispatch import Dispatched, combine, dispatch
from lowering.expert_tables import sorted_counts

__all__ = ["EXPERT_PARALLEL", "ExpertRun", "FoldedTable", "expert_parallel", "local_counts"]


@dataclass(frozen=True)
class FoldedTable:
    """A per-expert table split with the experts, folded into a grouped product's exchange: ``ids``
    are this rank's sorted expert ids the table is indexed by (on every rank checked to give each
    row the expert the offsets give it, before any row moves); ``entries``, this rank's experts'
    entries, added to the results of the rows routed to them before they go back (a gather), or
    None: the rows the run sends are a gradient whose sum per expert the table's scatter takes."""

    ids: torch.Tensor
    entries: torch.Tensor | None


class ExpertRun(NamedTuple):
    """An op's expert-parallel run, the dim of its operand 0 that holds the rows, and the operand
    whose rows reach their expert's rank (a folded scatter sums them there; sent in operand 0's
    dtype where the two differ)."""

    run: Callable[..., tuple[Any, torch.Tensor | None]]
    rows_dim: int
    sent: int


def local_counts(offs: torch.Tensor, rows: Any, coordinate: torch.Tensor) -> torch.Tensor:
    """Rows per expert among rows ``[coordinate*rows, (coordinate+1)*rows)`` of the sorted rows,
    expert ``e`` taking ``offs[e-1]:offs[e]`` (offsets that cover fewer rows leave some rows to
    no expert, which :func:`~lowering.expert_dispatch.dispatch` refuses on every rank)."""
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    first = coordinate.to(torch.int64) * rows
    last = first + rows
    return ends.clamp(first, last) - starts.clamp(first, last)


def _dispatched(rows: torch.Tensor, offs: torch.Tensor, ranks: int, group: str, coordinate: torch.Tensor,
                table: FoldedTable | None) -> tuple[Dispatched, list[torch.Tensor]]:
    """``rows`` (sorted by expert as the offsets cut them) sent to their expert's rank: what arrived,
    and its rows per local expert; a folded table's ids must count as many rows per expert."""
    counts = local_counts(offs, rows.size(0), coordinate)
    agrees = None if table is None else (sorted_counts(table.ids, offs.size(0)) == counts).all()
    dispatched = dispatch(rows, counts, ranks, group, agrees)
    return dispatched, list(dispatched.tokens.split(dispatched.counts))


def _sums(table: FoldedTable | None, pieces: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Each local expert's sum of its gradient ``pieces``, for a folded scatter (else None)."""
    return None if table is None or table.entries is not None else torch.stack([piece.sum(0) for piece in pieces])


def _forward(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor,
             table: FoldedTable | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``grouped_mm_fallback(input [S, K], weight [L, K, N], offs [E])``: ``[S, N]``; ``_grouped_mm``
    alike. A folded gather adds expert ``e``'s entry to each of its rows' results."""
    rows, weight, offs = args[:3]
    dispatched, pieces = _dispatched(rows, offs, ranks, group, coordinate, table)
    entries = None if table is None else table.entries
    results = [piece @ weight[e] if entries is None else piece @ weight[e] + entries[e]
               for e, piece in enumerate(pieces)]
    return combine(torch.cat(results), dispatched), _sums(table, pieces)


def _dispatched_pairs(rows: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor, ranks: int, group: str,
                      coordinate: torch.Tensor, table: FoldedTable | None
                      ) -> tuple[Dispatched, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Each row of ``rows`` and of its gradient ``grad`` sent together (one exchange) to their
    expert's rank: what arrived, and its rows and gradients per local expert."""
    width = rows.size(1)
    dispatched, pieces = _dispatched(torch.cat([rows, grad.to(rows.dtype)], 1), offs, ranks, group, coordinate, table)
    return dispatched, [(piece[:, :width], piece[:, width:]) for piece in pieces]


def _backward(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor,
              table: FoldedTable | None) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor | None]:
    """``grouped_mm_fallback_backward(input, weight, offs, grad_output)``: ``(grad_input, grad_weight)``."""
    rows, weight, offs, grad = args[:4]
    dispatched, pairs = _dispatched_pairs(rows, grad, offs, ranks, group, coordinate, table)
    grad_rows = combine(torch.cat([g @ weight[e].t() for e, (_, g) in enumerate(pairs)]), dispatched)
    return (grad_rows, torch.stack([x.t() @ g for x, g in pairs])), _sums(table, [g for _, g in pairs])


def _weight_gradient(args: list[Any], ranks: int, group: str, coordinate: torch.Tensor,
                     table: FoldedTable | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_grouped_mm(input.T [K, S], grad_output [S, N], offs)``: the experts' ``grad_weight [L, K, N]``."""
    columns, grad, offs = args[:3]
    _, pairs = _dispatched_pairs(columns.t(), grad, offs, ranks, group, coordinate, table)
    return torch.stack([x.t() @ g for x, g in pairs]), _sums(table, [g for _, g in pairs])


EXPERT_PARALLEL: dict[str, ExpertRun] = {
    "transformers.grouped_mm_fallback.default": ExpertRun(_forward, 0, 0),
    "transformers.grouped_mm_fallback_backward.default": ExpertRun(_backward, 0, 3),
}
"""Op (as the plan names it) -> its expert-parallel run."""


def expert_parallel(target: str, ndims: Sequence[int]) -> ExpertRun | None:
    """The expert-parallel run of op ``target`` whose operands have ``ndims`` dims; None where the op
    has none (``_grouped_mm`` has one in two layouts: rows by stacked experts, and the experts'
    weight gradient)."""
    if target == "aten._grouped_mm.default":
        return {(2, 3): ExpertRun(_forward, 0, 0), (2, 2): ExpertRun(_weight_gradient, 1, 1)}.get(tuple(ndims[:2]))
    return EXPERT_PARALLEL.get(target)
