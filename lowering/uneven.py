"""Uneven pieces of a data-dependent dim, cut as ``torch.chunk`` and DTensor cut them.

A dim of size ``u`` split ``n`` ways gives rank ``r`` the rows ``[r*c, min(u, (r+1)*c))`` with
``c = ceil(u/n)``, that is ``min(c, max(0, u - r*c))`` rows: the pieces of ranks ``0 … n-1``
laid end to end are the whole dim in order, and every nonempty piece but the last has ``c``
rows. The planner offers such a split for a data-dependent (unbacked) size, which no entry
guard can prove divisible (:mod:`planner.divisibility`); each rank cuts its piece when the
program runs, from the dim's size and its mesh coordinate. Traced, the piece's size is a fresh
unbacked symbol of the local program, so one compile serves every size.

Collectives over such a dim pad and trim, as DTensor does: ``all_gather`` pads every piece to
``c`` rows, gathers ``n*c`` and keeps the first ``u`` (the pieces are contiguous);
``reduce_scatter`` pads the whole to ``n*c`` rows, scatters ``c`` to each rank and keeps its
piece's. No row is dropped or repeated for any ``u`` (``u < n`` leaves trailing pieces empty).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["all_gather", "chunk", "piece_length", "rank_of", "reduce_scatter"]


def _ceil(size: Any, pieces: int) -> Any:
    return (size + pieces - 1) // pieces


def rank_of(index: int | torch.Tensor, pieces: int) -> Any:
    """``index`` (an int, or a one-element tensor in a traced program) as an int in ``[0, pieces)``."""
    import torch

    from shapecore.torch.private import check

    if not isinstance(index, torch.Tensor):
        return index
    r = index.item()
    check(r >= 0)
    check(r < pieces)
    return r


def piece_length(size: Any, pieces: int, r: Any) -> Any:
    """Rows of piece ``r`` of a dim of ``size`` rows cut into ``pieces``."""
    import torch

    c = _ceil(size, pieces)
    return torch.sym_min(c, torch.sym_max(0, size - r * c))


def chunk(x: torch.Tensor, dim: int, pieces: int, index: int | torch.Tensor) -> torch.Tensor:
    """Piece ``index`` of ``pieces`` of ``x`` along ``dim`` (a slice: its end is clamped to the size)."""
    import torch

    r = rank_of(index, pieces)
    c = _ceil(x.size(dim), pieces)
    return torch.ops.aten.slice.Tensor(x, dim, r * c, (r + 1) * c)


def _pad(x: torch.Tensor, dim: int, length: Any) -> torch.Tensor:
    """``x`` with zero rows appended along ``dim`` up to ``length`` rows (a tensor of exactly ``length``
    rows, so the sizes that follow stay simple)."""
    import torch

    from shapecore.torch.private import check

    check(x.size(dim) <= length)
    shape = list(x.shape)
    shape[dim] = length
    return torch.ops.aten.slice_scatter.default(x.new_zeros(shape), x, dim, 0, x.size(dim))


def all_gather(x: torch.Tensor, dim: int, pieces: int, size: Any, group: str) -> torch.Tensor:
    """The whole dim (``size`` rows) from every rank's piece ``x`` of it: padded, gathered, trimmed."""
    import torch

    from shapecore.torch.private import all_gather_single, check
    from shapecore.torch.private import functional_collectives as funcol

    gathered = all_gather_single(_pad(x, dim, _ceil(size, pieces)), dim, group)
    gathered = gathered.wait() if isinstance(gathered, funcol.AsyncCollectiveTensor) else gathered
    check(size <= gathered.size(dim))
    return torch.ops.aten.slice.Tensor(gathered, dim, 0, size)


def reduce_scatter(x: torch.Tensor, op: str, dim: int, pieces: int, index: int | torch.Tensor,
                   group: str) -> torch.Tensor:
    """This rank's piece of ``x`` reduced over the group (``x``'s dim ``dim`` whole): padded, scattered, trimmed."""
    import torch

    from shapecore.torch.private import functional_collectives as funcol
    from shapecore.torch.private import reduce_scatter_single

    size = x.size(dim)
    c = _ceil(size, pieces)
    scattered = reduce_scatter_single(_pad(x, dim, pieces * c), op, dim, group)
    scattered = scattered.wait() if isinstance(scattered, funcol.AsyncCollectiveTensor) else scattered
    r = rank_of(index, pieces)
    return torch.ops.aten.slice.Tensor(scattered, dim, 0, torch.sym_max(0, size - r * c))
