"""Placements: DTensor's ``Shard(d)`` / ``Replicate()`` / ``Partial()``, one per mesh axis.

A plan stores ``torch.distributed.tensor`` placement objects unchanged, so it plugs into
DTensor. This module adds what planning needs on top: a short text form used in tables and
JSON (``R``, ``S(0)``, ``P``, ``P(max)``; a tuple prints as ``S(0),R``), a total order for
deterministic output, and the per-dim view of a placement tuple (which mesh axes shard a dim
and into how many pieces).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from torch.distributed.tensor import Partial, Placement, Replicate, Shard

__all__ = [
    "Placements",
    "Partial",
    "Placement",
    "Replicate",
    "Shard",
    "format_placement",
    "format_placements",
    "parse_placement",
    "parse_placements",
    "placement_key",
    "shard_axes",
    "shard_factor",
]

Placements = tuple[Placement, ...]

_SHARD = re.compile(r"S\((\d+)\)")
_PARTIAL = re.compile(r"P(?:\((\w+)\))?")


def format_placement(p: Placement) -> str:
    """``R``, ``S(d)``, ``P`` (sum) or ``P(op)``."""
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Partial):
        return "P" if p.reduce_op == "sum" else f"P({p.reduce_op})"
    raise TypeError(f"unsupported placement {p!r}: plans use Shard, Replicate and Partial only")


def format_placements(ps: Sequence[Placement] | None) -> str:
    """``S(0),R`` for a tuple; ``-`` for None (a non-tensor)."""
    return "-" if ps is None else ",".join(format_placement(p) for p in ps)


def parse_placement(text: str) -> Placement:
    """Inverse of :func:`format_placement`."""
    text = text.strip()
    if text == "R":
        return Replicate()
    if m := _SHARD.fullmatch(text):
        return Shard(int(m.group(1)))
    if m := _PARTIAL.fullmatch(text):
        return Partial(m.group(1) or "sum")
    raise ValueError(f"not a placement: {text!r} (expected R, S(<dim>), P or P(<reduce op>))")


def parse_placements(text: str) -> Placements | None:
    """Inverse of :func:`format_placements`."""
    if text == "-":
        return None
    return tuple(parse_placement(part) for part in text.split(","))


def placement_key(p: Placement) -> tuple[int, int, str]:
    """Total order: R < S(0) < S(1) < … < P."""
    if isinstance(p, Replicate):
        return (0, 0, "")
    if isinstance(p, Shard):
        return (1, p.dim, "")
    if isinstance(p, Partial):
        return (2, 0, p.reduce_op)
    raise TypeError(f"unsupported placement {p!r}")


def shard_axes(ps: Sequence[Placement], dim: int) -> tuple[int, ...]:
    """Mesh axes that shard tensor dim ``dim``, outermost first."""
    return tuple(a for a, p in enumerate(ps) if isinstance(p, Shard) and p.dim == dim)


def shard_factor(ps: Sequence[Placement], mesh_shape: Sequence[int], dim: int) -> int:
    """Number of pieces dim ``dim`` is split into."""
    return math.prod(mesh_shape[a] for a in shard_axes(ps, dim))


# -- compact codes for the planner's inner loops ------------------------------------------------
#
# Hashing DTensor placement objects is slow, and the planner hashes placements millions of
# times. Inside the planner one axis's placement is a small int: ``R = 0``, ``P = 1`` (sum),
# ``S(d) = 2 + d``; a placement tuple is a tuple of those codes. Plans hold real placements.

Codes = tuple[int, ...]
R_CODE = 0
P_CODE = 1


def shard_code(dim: int) -> int:
    return 2 + dim


def encode(ps: Sequence[Placement]) -> Codes:
    """Codes of a placement tuple (only ``Partial("sum")`` among partials)."""
    out = []
    for p in ps:
        if isinstance(p, Shard):
            out.append(2 + p.dim)
        elif isinstance(p, Replicate):
            out.append(R_CODE)
        elif isinstance(p, Partial) and p.reduce_op == "sum":
            out.append(P_CODE)
        else:
            raise ValueError(f"unsupported placement {p!r}: plans use Shard, Replicate and Partial(sum)")
    return tuple(out)


def decode_one(code: int) -> Placement:
    return Replicate() if code == R_CODE else Partial() if code == P_CODE else Shard(code - 2)


def decode(codes: Codes) -> Placements:
    return tuple(decode_one(c) for c in codes)


def format_code(code: int) -> str:
    return "R" if code == R_CODE else "P" if code == P_CODE else f"S({code - 2})"


def format_codes(codes: Codes | None) -> str:
    return "-" if codes is None else ",".join(format_code(c) for c in codes)


def canonical(codes: Codes, mesh_shape: Sequence[int]) -> Codes:
    """``codes`` with ``R`` on every mesh axis of size 1: one rank's ``Shard`` is the whole tensor
    and its ``Partial`` the whole sum, so on such an axis every placement holds the same data, and
    only ``R`` needs no step to become any other."""
    return tuple(R_CODE if mesh_shape[a] == 1 else c for a, c in enumerate(codes))


def code_shard_axes(codes: Codes, dim: int) -> tuple[int, ...]:
    """Mesh axes whose code shards tensor dim ``dim``, outermost first."""
    target = 2 + dim
    return tuple(a for a, c in enumerate(codes) if c == target)
