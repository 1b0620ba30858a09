"""A reference executor for strategies: run an op on per-rank pieces of real tensors.

Given a strategy (placements of every operand and output on a mesh), :func:`check_strategy`
splits real global operands the way the placements say (``S(d)``: nested chunks, outer mesh
axis first; ``P``: random addends that sum to the value, a mask whole on one rank and false
elsewhere, as the lowering makes one partial; ``R``: a full copy), runs the aten op
on every rank's pieces, reassembles each output by its placement and compares it with the op
on the global tensors. This is the ground truth the planner's and DTensor's rules answer to.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.fx.node import Node, map_aggregate

Placements = tuple[Any, ...]


def _ranks(mesh: Sequence[int]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(n) for n in mesh)))


def _region(shape: Sequence[int], placements: Placements, mesh: Sequence[int], coord: Sequence[int]) -> tuple[slice, ...]:
    """The slice of the global tensor rank ``coord`` holds (nested chunks, outer axis first)."""
    region = []
    for d, size in enumerate(shape):
        start, length = 0, size
        for a, p in enumerate(placements):
            if isinstance(p, Shard) and p.dim == d:
                length //= mesh[a]
                start += coord[a] * length
        region.append(slice(start, start + length))
    return tuple(region)


def split(value: torch.Tensor, placements: Placements, mesh: Sequence[int], gen: torch.Generator) -> dict[tuple, torch.Tensor]:
    """Every rank's piece of ``value``."""
    partial_axes = [a for a, p in enumerate(placements) if isinstance(p, Partial)]
    combos = list(itertools.product(*(range(mesh[a]) for a in partial_axes)))
    addends: dict[tuple, torch.Tensor] = {}
    if combos != [()] and value.dtype == torch.bool:  # a mask is made partial one way: whole on one rank, false elsewhere
        addends = {combo: value if combo == combos[-1] else torch.zeros_like(value) for combo in combos}
    elif combos != [()]:
        rest = value.clone()
        for combo in combos[:-1]:
            if value.is_floating_point():
                addends[combo] = torch.randn(value.shape, generator=gen, dtype=value.dtype)
            else:
                addends[combo] = torch.randint(-5, 5, value.shape, generator=gen, dtype=value.dtype)
            rest = rest - addends[combo]
        addends[combos[-1]] = rest
    else:
        addends = {combo: value for combo in combos}
    pieces = {}
    for coord in _ranks(mesh):
        combo = tuple(coord[a] for a in partial_axes)
        pieces[coord] = addends[combo][_region(value.shape, placements, mesh, coord)].contiguous()
    return pieces


def assemble(pieces: dict[tuple, torch.Tensor], shape: Sequence[int], placements: Placements, mesh: Sequence[int]) -> torch.Tensor:
    """The global value the pieces stand for; replicated axes must agree."""
    first = next(iter(pieces.values()))
    out = torch.zeros(tuple(shape), dtype=first.dtype if first.is_floating_point() else torch.float64)
    for coord, piece in pieces.items():
        twin = tuple(0 if isinstance(p, Replicate) else c for c, p in zip(coord, placements))
        torch.testing.assert_close(piece.to(out.dtype), pieces[twin].to(out.dtype), rtol=1e-4, atol=1e-4)
        if twin != coord:
            continue
        out[_region(shape, placements, mesh, coord)] += piece.to(out.dtype)
    return out


def _local_size_args(node: Node, out_shape: Sequence[int], out_placements: Placements, mesh: Sequence[int]) -> list[int]:
    local = list(out_shape)
    for a, p in enumerate(out_placements):
        if isinstance(p, Shard):
            local[p.dim] //= mesh[a]
    return local


_SIZE_ARG_OPS = {"view": 1, "_unsafe_view": 1, "reshape": 1, "expand": 1, "slice_backward": 1, "select_backward": 1,
                 "zeros": 0, "ones": 0, "full": 0, "new_zeros": 1, "new_ones": 1, "new_full": 1}
"""Ops (their packet) whose size argument (its position) is the output's shape: given the local one, as the lowering does."""


def check_strategy(node: Node, values: dict[str, Any], operand_nodes: Sequence[Node], strategy: Any, mesh: Sequence[int], seed: int = 0) -> None:
    """Raise AssertionError if ``strategy`` does not compute ``node`` on ``mesh``."""
    gen = torch.Generator().manual_seed(seed)
    operand_pieces = [split(values[n.name], ps, mesh, gen) for n, ps in zip(operand_nodes, strategy.inputs)]
    packet = str(node.target).split(".")[1] if str(node.target).startswith("aten.") else ""
    expected = values[node.name]
    outputs = expected if isinstance(expected, (tuple, list)) else (expected,)
    results: list[dict[tuple, torch.Tensor]] = [dict() for _ in outputs]
    for coord in _ranks(mesh):
        position = iter(range(len(operand_nodes)))

        def local(arg: Any) -> Any:
            if isinstance(arg, Node) and isinstance(values.get(arg.name), torch.Tensor):
                return operand_pieces[next(position)][coord]
            if isinstance(arg, Node):
                return values[arg.name]
            return arg

        args = list(map_aggregate(node.args, local))
        kwargs = dict(map_aggregate(dict(node.kwargs), local))
        if packet in _SIZE_ARG_OPS:
            args[_SIZE_ARG_OPS[packet]] = _local_size_args(node, outputs[0].shape, strategy.outputs[0], mesh)
        got = node.target(*args, **kwargs)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for i, g in enumerate(got):
            results[i][coord] = g
    for i, (want, placements) in enumerate(zip(outputs, strategy.outputs)):
        if placements is None or not isinstance(want, torch.Tensor):
            continue
        whole = assemble(results[i], want.shape, placements, mesh)
        torch.testing.assert_close(whole, want.to(whole.dtype), rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{node.name} ({node.target}) under {strategy}: output {i} differs: {m}")


def divides(value: Any, placements: Placements, mesh: Sequence[int]) -> bool:
    if not isinstance(value, torch.Tensor) or placements is None:
        return True
    for d, size in enumerate(value.shape):
        m = math.prod(mesh[a] for a, p in enumerate(placements) if isinstance(p, Shard) and p.dim == d)
        if size % m:
            return False
    return True
