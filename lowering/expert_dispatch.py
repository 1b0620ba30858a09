"""Expert parallelism's token dispatch and combine: ``all_to_all`` with data-dependent split sizes.

Experts stored stacked ``(E, ...)`` are split over a group of ``n`` ranks by the expert dim:
rank ``r`` holds experts ``[r*L, (r+1)*L)``, ``L = E/n``. Each rank routes its own tokens and
hands :func:`dispatch` their copies sorted by (global) expert, with ``counts[e]`` rows for
expert ``e``; :func:`dispatch` sends every row to the rank that holds its expert and returns
the rows this rank received, grouped by its local expert (``Dispatched.tokens``, in blocks of
``Dispatched.counts[l]`` rows); :func:`combine` sends the experts' results back, in the order
the rows were given (as many rows as it was given, in a traced program too). No padding:
every collective moves exactly the routed rows.

The split sizes are data-dependent. The counts are exchanged first (an ``all_to_all`` of ``E``
numbers per rank, equal splits), then ``.tolist()`` makes the sizes unbacked SymInts of a traced
program, so one compile serves every routing (tested through Inductor, training included).
Both collectives are differentiable: the backward of each is the ``all_to_all`` with the split
sizes swapped (``funcol.all_to_all_single_autograd``).

Checked on every rank before any token moves: each rank's counts are non-negative and sum to
its routed rows (and, where a caller asks, that another condition of its own holds: ``agrees``).
A rank cannot raise alone (its peers would wait for it in the next collective),
so each rank sends its verdict along with its counts, and every rank checks all verdicts: a
violation anywhere is the same ``ValueError`` on every rank, naming the ranks at fault. The
check is an op of its own (``shapecore::all_counts_valid``: a runtime assert of a traced
program would lose its message, and a compiled one reads ``u0 <= 0``), whose result gates every
split size (the sizes are the counts times it), so no compiled program can reach a token
``all_to_all`` before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lowering.collectives import waited

__all__ = ["COUNTS_ERROR", "DISAGREE_ERROR", "Dispatched", "combine", "dispatch", "serve"]

COUNTS_ERROR = ("expert dispatch: some rank's routed counts are negative or do not sum to its routed rows; "
                "pass counts[e] = the number of rows routed to expert e, in the rows' (sorted) order")
DISAGREE_ERROR = ("expert dispatch: some rank's per-expert table is indexed by expert ids that give its rows "
                  "other experts than the grouped product's offsets do; the table's ids and the offsets must "
                  "come from one routing")
_VERDICTS = {0: (COUNTS_ERROR, "the counts"), 2: (DISAGREE_ERROR, "the ids")}  # verdict -> what failed (1: valid)


@torch.library.custom_op("shapecore::all_counts_valid", mutates_args=())
def _all_counts_valid(verdicts: torch.Tensor) -> torch.Tensor:
    """1 (a 0-dim tensor of ``verdicts``' dtype) when every rank's verdict is 1; else a ValueError
    naming the ranks of each failed verdict (0: bad counts, 2: ``agrees`` false)."""
    failed = {v: ranks for v in _VERDICTS if (ranks := (verdicts == v).nonzero().flatten().tolist())}
    if failed:
        raise ValueError("; ".join(f"{_VERDICTS[v][0]} ({_VERDICTS[v][1]} of rank {', '.join(map(str, ranks))} "
                                   "of the group)" for v, ranks in failed.items()))
    return verdicts.new_ones(())


@_all_counts_valid.register_fake
def _(verdicts: torch.Tensor) -> torch.Tensor:
    return verdicts.new_empty(())


@dataclass(frozen=True)
class Dispatched:
    """The rows a rank received, and what :func:`combine` needs to send their results back.

    ``tokens``: the received rows grouped by local expert (``counts[l]`` rows for expert ``l``);
    ``counts``: rows per local expert (SymInts in a traced program); ``sent`` and ``received``:
    the rows sent to and received from each rank; ``order``: row ``i`` of ``tokens`` is row
    ``order[i]`` of the rows as received (by source rank, then local expert).
    """

    tokens: torch.Tensor
    counts: list[Any]
    sent: list[Any]
    received: list[Any]
    order: torch.Tensor
    group: str


def _exchange_counts(counts: torch.Tensor, rows: Any, ranks: int, group: str,
                     agrees: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows this rank sends to each rank, counts received: ``[source rank, local expert]``),
    both gated by every rank's verdict on its own counts and ``agrees`` (a ValueError on every rank if one fails)."""
    from shapecore.torch.private import functional_collectives as funcol

    local = counts.numel() // ranks
    sizes = counts.view(ranks, local)
    counted = (counts >= 0).all() & (counts.sum() == rows)
    verdict = (counted if agrees is None else torch.where(agrees, counted, 2)).to(counts.dtype)
    outgoing = torch.cat([sizes, verdict.expand(ranks, 1)], 1)
    incoming = waited(funcol.all_to_all_single(outgoing.flatten(), None, None, group)).view(ranks, local + 1)
    valid = _all_counts_valid(incoming[:, local])
    return sizes.sum(1) * valid, incoming[:, :local] * valid


def _routes(counts: torch.Tensor, rows: Any, ranks: int, group: str,
            agrees: torch.Tensor | None = None) -> tuple[list[Any], list[Any], torch.Tensor]:
    """The rows this rank sends to each rank and receives from each (sizes), and the counts it
    receives (``[source rank, local expert]``), for ``rows`` rows sorted by expert (``counts[e]``
    for expert ``e``) over the ``ranks`` ranks of ``group`` (``agrees``: see :func:`dispatch`)."""
    from shapecore.torch.private import check

    experts = counts.numel()
    if experts % ranks:
        raise ValueError(f"expert dispatch: {experts} experts do not split over {ranks} ranks; "
                         f"expert parallelism needs a number of experts divisible by the group size")
    sending, incoming = _exchange_counts(counts, rows, ranks, group, agrees)
    sent, received = sending.tolist(), incoming.sum(1).tolist()
    check(sum(sent) == rows)
    # the last rank's rows as what the others leave (the same number, checked on every rank): the
    # rows combine returns then number ``rows`` in the traced program too, not a sum of counts
    sent[-1] = rows - sum(sent[:-1])
    return sent, received, incoming


def _received_experts(incoming: torch.Tensor, rows: Any) -> torch.Tensor:
    """The local expert of each of the ``rows`` rows received, by source rank then local expert."""
    ranks, local = incoming.shape
    expert = torch.arange(local, device=incoming.device).repeat(ranks)
    return torch.repeat_interleave(expert, incoming.flatten(), output_size=rows)


def dispatch(tokens: torch.Tensor, counts: torch.Tensor, ranks: int, group: str,
             agrees: torch.Tensor | None = None) -> Dispatched:
    """Send each row of ``tokens`` (sorted by expert, ``counts[e]`` rows for expert ``e``) to the
    rank of its expert, over the ``ranks`` ranks of ``group`` (a registered group name); where
    ``agrees`` (a boolean 0-dim tensor) is false on a rank, that rank's per-expert table disagrees
    with the counts (:data:`DISAGREE_ERROR`, on every rank)."""
    from shapecore.torch.private import check
    from shapecore.torch.private import functional_collectives as funcol

    sent, received, incoming = _routes(counts, tokens.size(0), ranks, group, agrees)
    rows = waited(funcol.all_to_all_single_autograd(tokens.contiguous(), received, sent, group))
    # received by source rank, then local expert: group the rows by local expert, stably
    order = _received_experts(incoming, rows.size(0)).argsort(stable=True)
    per_expert = incoming.sum(0).tolist()
    for c in per_expert:
        check(c >= 0)
    return Dispatched(rows[order], per_expert, sent, received, order, group)


def serve(table: torch.Tensor, counts: torch.Tensor, rows: Any, ranks: int, group: str) -> torch.Tensor:
    """Each of ``rows`` rows (sorted by expert, ``counts[e]`` for expert ``e``) given its expert's
    entry of a per-expert table split over the ``ranks`` ranks of ``group`` (``table``: this rank's
    experts' entries, ``[E/ranks, ...]``): only the counts go to the experts' ranks, and each
    answers with its experts' entries, one per row routed to them, in the rows' order."""
    from shapecore.torch.private import functional_collectives as funcol

    sent, received, incoming = _routes(counts, rows, ranks, group)
    entries = table[_received_experts(incoming, sum(received))]  # as the rows would have been received
    return waited(funcol.all_to_all_single_autograd(entries.contiguous(), sent, received, group))


def combine(results: torch.Tensor, dispatched: Dispatched) -> torch.Tensor:
    """The experts' ``results`` (one row per row of ``dispatched.tokens``) sent back to the ranks
    the rows came from, in the order :func:`dispatch` was given them."""
    from shapecore.torch.private import functional_collectives as funcol

    as_received = results.new_empty(results.shape).index_copy(0, dispatched.order, results)
    return waited(funcol.all_to_all_single_autograd(as_received, dispatched.sent, dispatched.received,
                                                    dispatched.group))
