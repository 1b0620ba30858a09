"""Uneven pieces of a data-dependent dim: torch.chunk's pieces, cut and moved by every collective (gloo)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Partial, Replicate, Shard

from lowering import uneven
from lowering.collectives import Step, apply_steps
from lowering.launch import launch
from lowering.mesh_groups import mesh_groups
from tests.lowering.test_collectives import MESH, _partial_total

R, P, S0, S1 = Replicate(), Partial(), Shard(0), Shard(1)


def _torch_piece(x: torch.Tensor, pieces: int, r: int, dim: int = 0) -> torch.Tensor:
    """Piece ``r`` as torch.chunk (and DTensor) cut it: an empty one past the chunks torch returns."""
    chunks = torch.chunk(x, pieces, dim) if x.size(dim) else ()
    return chunks[r] if r < len(chunks) else x.narrow(dim, 0, 0)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 40), pieces=st.integers(1, 6))
def test_the_pieces_are_torch_chunks_and_lose_no_row(size, pieces):
    x = torch.arange(size * 3).reshape(size, 3)
    cut = [uneven.chunk(x, 0, pieces, r) for r in range(pieces)]
    for r, piece in enumerate(cut):
        assert torch.equal(piece, _torch_piece(x, pieces, r))
        assert piece.size(0) == uneven.piece_length(size, pieces, r)
    assert torch.equal(torch.cat(cut), x)


def test_a_traced_piece_reads_the_rank_from_the_coordinate_tensor():
    x = torch.arange(7 * 2).reshape(7, 2)
    for r in range(3):
        assert torch.equal(uneven.chunk(x, 0, 3, torch.tensor(r)), _torch_piece(x, 3, r))


# (source placements, steps, target placements) moving dim 0 (data-dependent) on one axis or both.
CASES = [
    ((R, R), [Step(0, "chunk", R, S0), Step(1, "chunk", R, S0)], (S0, S0)),
    ((S0, S0), [Step(1, "all_gather", S0, R), Step(0, "all_gather", S0, R)], (R, R)),
    ((S0, P), [Step(1, "reduce_scatter", P, S0)], (S0, S0)),
    ((P, R), [Step(0, "reduce_scatter", P, S0)], (S0, R)),
    ((S0, S1), [Step(1, "all_to_all", S1, S0)], (S0, S0)),
    ((S0, R), [Step(0, "all_to_all", S0, S1)], (S1, R)),
]


def _piece(x, placements, groups):
    """This rank's piece of ``x`` by torch.chunk, axis by axis; a Partial axis holds (coordinate + 1) * x."""
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            x = _torch_piece(x, MESH.shape[axis], groups.coordinate[axis], p.dim)
        elif isinstance(p, Partial):
            x = x * (groups.coordinate[axis] + 1)
    return x


def _run_cases(rank):
    groups = mesh_groups(MESH)
    checked = 0
    for size in (0, 1, 3, 5, 8):
        x = torch.arange(size * 4, dtype=torch.float32).reshape(size, 4)
        for src, steps, dst in CASES:
            moved = apply_steps(_piece(x, src, groups), steps, src, dst, groups, uneven={0: size})
            plain = tuple(R if isinstance(p, Partial) else p for p in dst)
            torch.testing.assert_close(moved, _piece(x, plain, groups) * _partial_total(src),
                                       msg=f"{src} -> {dst} at size {size}")
            checked += 1
    return checked


@pytest.mark.slow  # gloo ranks
def test_every_step_over_a_data_dependent_dim_pads_and_trims_to_torch_chunks_pieces():
    assert launch(_run_cases, 4, timeout=180) == [5 * len(CASES)] * 4
