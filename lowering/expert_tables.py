"""Per-expert tables split by the expert dim: the lowering of a table's gather and its gradient's scatter.

A per-expert table ``B [E, ...]`` (GPT-OSS's experts' biases) is gathered per routed row by the
sorted expert ids, ``B[sorted]``, and its gradient is scattered back by them,
``index_put(zeros [E, ...], [sorted], rows, accumulate=True)`` (:mod:`planner.problem.per_token`).
Where the plan splits the table by the expert dim over a mesh axis of ``n`` ranks (rule
``experts``, or ``per_token+experts`` where each rank routes its own tokens), rank ``r`` holds
the entries of experts ``[r*L, (r+1)*L)`` (``L = E/n``), as the experts' weights are split:

* the gather sends each expert's rank only the counts of this rank's rows per expert; it answers
  with its experts' entries, one per row routed to them, in the rows' order
  (:func:`~lowering.expert_dispatch.serve`);
* the scatter sends each row (of the gradient) to its expert's rank
  (:func:`~lowering.expert_dispatch.dispatch`), which sums the rows of each of its experts onto its
  piece of the base: its experts' whole gradient, no partial sum left over the axis.

This rank's ids are sorted ascending (a block of the sorted ids, or its own sorted ids where it
routes its own tokens), so its rows per expert are the differences of their ``searchsorted``
bounds. Ids outside ``[0, E)`` leave counts that do not sum to the rows, which the dispatch refuses
on every rank. Each ``run`` takes the op's arguments as the lowering fetched them (this rank's
pieces), the size ``n`` of the axis and its group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lowering.expert_dispatch import dispatch, serve

__all__ = ["EXPERT_TABLES", "sorted_counts"]


def sorted_counts(ids: torch.Tensor, experts: int) -> torch.Tensor:
    """Rows per expert of ``ids`` sorted ascending: ``counts[e]`` of them equal ``e``."""
    bounds = torch.searchsorted(ids, torch.arange(experts + 1, device=ids.device, dtype=ids.dtype))
    return bounds[1:] - bounds[:-1]


def _gather(args: list[Any], ranks: int, group: str) -> torch.Tensor:
    """``index(table [L, ...], [ids [S]])``: ``[S, ...]``, row ``i`` expert ``ids[i]``'s entry."""
    table, (ids,) = args[:2]
    return serve(table, sorted_counts(ids, table.size(0) * ranks), ids.size(0), ranks, group)


def _scatter(args: list[Any], ranks: int, group: str) -> torch.Tensor:
    """``index_put(base [L, ...], [ids [S]], rows [S, ...], accumulate=True)``: ``base`` plus, for each
    local expert, the sum of the rows routed to it from every rank of the group."""
    base, (ids,), rows = args[:3]
    dispatched = dispatch(rows, sorted_counts(ids, base.size(0) * ranks), ranks, group)
    sums = [piece.sum(0) for piece in dispatched.tokens.split(dispatched.counts)]
    return base + torch.stack(sums).to(base.dtype)


EXPERT_TABLES: dict[str, Callable[[list[Any], int, str], torch.Tensor]] = {
    "aten.index.Tensor": _gather,
    "aten.index_put.default": _scatter,
}
"""Op (as the plan names it) -> its run ``(args, ranks, group)`` with the table split by the expert dim."""
