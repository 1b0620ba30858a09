"""Placement changes on local tensors, through ``torch.distributed._functional_collectives``.

One function per change of one mesh axis, as the planner's :class:`~planner.CollectiveStep`
describes it:

=================  ==============  ================================================
kind               placement       local operation on the axis's group
=================  ==============  ================================================
``all_gather``     ``S(d) → R``    ``all_gather_single`` along ``d``
``all_reduce``     ``P → R``       ``all_reduce``
``reduce_scatter`` ``P → S(d)``    ``reduce_scatter_single`` along ``d``
``all_to_all``     ``S(d) → S(e)`` ``all_to_all_single`` on ``e``'s pieces, joined on ``d``
``chunk``          ``R → S(d)``    this rank's slice (no communication)
``to_partial``     ``R → P``       kept on coordinate 0, zeros elsewhere (local)
=================  ==============  ================================================

The same functions run eagerly (``gather_steps``, the tests) and under tracing (``lower``): traced, each
collective is a ``_c10d_functional`` op followed by ``wait_tensor``, which Inductor lowers.

Nesting follows DTensor (and :mod:`planner.mesh`): when several axes shard one dim, the
lower-numbered axis is the outer split. A step may only remove the innermost split of a dim
and only add a split inside the existing ones; :func:`apply_step` refuses any other order
(it would scramble the data while keeping every shape right).

``Partial("avg")`` is reduced as a sum divided by the group size: gloo has no ``AVG``.

A step over a mesh axis of size 1 is no operation at all: one rank's ``Shard`` is the whole
tensor and its ``Partial`` the whole sum, so the tensor is returned as it is, with the new
placement (the planner never plans such a step; a plan made by hand may hold one). Likewise
:func:`all_reduce_over` leaves such axes out.

A dim of data-dependent size (``uneven``: dim → its global size, known only when the program
runs) is cut into ``torch.chunk``'s uneven pieces and gathered and scattered with padding
(:mod:`lowering.uneven`); an ``all_to_all`` that moves such a dim is an ``all_gather`` then a
``chunk`` (the planner routes such a move that way itself, and prices it so; a plan made by
hand may still ask for the ``all_to_all``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from torch.distributed.tensor import Partial, Placement, Replicate, Shard

from lowering import uneven as pieces_of
from lowering.errors import LoweringError
from lowering.mesh_groups import MeshGroups

if TYPE_CHECKING:
    import torch

__all__ = ["Step", "StepLike", "all_reduce_over", "apply_step", "apply_steps", "gather_steps", "local_shard", "waited"]

Placements = tuple[Placement, ...]


class StepLike(Protocol):
    """What :func:`apply_step` reads from a step (:class:`planner.CollectiveStep` fits)."""

    axis: int
    kind: str
    src: Placement
    dst: Placement


@dataclass(frozen=True)
class Step:
    """A step the lowering itself decides on (gathering outputs); same fields as the planner's."""

    axis: int
    kind: str
    src: Placement
    dst: Placement


_KINDS = {
    "all_gather": (Shard, Replicate),
    "all_reduce": (Partial, Replicate),
    "reduce_scatter": (Partial, Shard),
    "all_to_all": (Shard, Shard),
    "chunk": (Replicate, Shard),
    "to_partial": (Replicate, Partial),
}


def waited(t: torch.Tensor) -> torch.Tensor:
    """``t``, a functional collective's result, once the collective is done (its
    ``AsyncCollectiveTensor`` waited on; any other tensor as it is)."""
    from shapecore.torch.private import functional_collectives as funcol

    return t.wait() if isinstance(t, funcol.AsyncCollectiveTensor) else t


def _reduce_op(p: Partial) -> tuple[str, bool]:
    """(the collective's reduce op, whether to divide by the group size afterwards)."""
    return ("sum", True) if p.reduce_op == "avg" else (p.reduce_op, False)


def _check_order(state: Sequence[Placement], step: StepLike, where: str) -> None:
    axis = step.axis
    if isinstance(step.src, Shard):
        inner = [a for a in range(axis + 1, len(state)) if state[a] == step.src]
        if inner:
            raise LoweringError(f"{where}: {step.kind} on mesh axis {axis} removes the split of dim {step.src.dim} "
                                f"while axis {inner[0]} still splits it inside; gather the inner axis first")
    if isinstance(step.dst, Shard):
        inner = [a for a in range(axis + 1, len(state)) if state[a] == step.dst]
        if inner:
            raise LoweringError(f"{where}: {step.kind} on mesh axis {axis} splits dim {step.dst.dim} outside the "
                                f"split by axis {inner[0]}; only innermost splits can be added")


def _validate(state: Sequence[Placement], step: StepLike, where: str) -> None:
    if step.kind not in _KINDS:
        raise LoweringError(f"{where}: unknown collective kind {step.kind!r}; expected one of {', '.join(_KINDS)}")
    src_type, dst_type = _KINDS[step.kind]
    if not (isinstance(step.src, src_type) and isinstance(step.dst, dst_type)):
        raise LoweringError(f"{where}: a {step.kind} step cannot go from {step.src} to {step.dst}")
    if not 0 <= step.axis < len(state):
        raise LoweringError(f"{where}: step on mesh axis {step.axis} of a {len(state)}-axis mesh")
    if state[step.axis] != step.src:
        raise LoweringError(f"{where}: {step.kind} on mesh axis {step.axis} expects {step.src} there, "
                            f"but the tensor is {state[step.axis]} at that point")
    if step.kind == "all_to_all" and step.src == step.dst:
        raise LoweringError(f"{where}: all_to_all from {step.src} to itself")
    if step.kind == "to_partial" and step.dst.reduce_op != "sum":
        raise LoweringError(f"{where}: to_partial can only make sum partials, not {step.dst}")
    _check_order(state, step, where)


def _piece_size(x: torch.Tensor, dim: int, pieces: int) -> int:
    """The size of each of ``pieces`` equal pieces of dim ``dim``.

    A concrete size that does not split evenly is refused: cutting it would drop rows with no
    error. (A symbolic size, in a traced program, splits evenly by the plan's proofs.)
    """
    size = x.size(dim)
    if isinstance(size, int) and size % pieces:
        raise ValueError(f"dim {dim} of a tensor of shape {list(x.shape)} does not split into {pieces} equal pieces; "
                         f"only sizes divisible by {pieces} can be placed this way")
    return size // pieces


def _chunk(x: torch.Tensor, dim: int, pieces: int, index: int | torch.Tensor) -> torch.Tensor:
    """Piece ``index`` of ``pieces`` along ``dim``; a tensor ``index`` keeps traced graphs rank-independent."""
    import torch

    size = _piece_size(x, dim, pieces)
    if isinstance(index, torch.Tensor):
        return x.unflatten(dim, (pieces, size)).index_select(dim, index.view(1)).flatten(dim, dim + 1)
    return x.narrow(dim, index * size, size).contiguous()


def _keep_on_first(x: torch.Tensor, index: int | torch.Tensor) -> torch.Tensor:
    """``x`` where ``index`` is 0, zeros elsewhere (a tensor ``index`` keeps traced graphs rank-independent)."""
    import torch

    if isinstance(index, torch.Tensor):
        return x * (index == 0).to(x.dtype)
    return x if index == 0 else torch.zeros_like(x)


def _all_to_all(x: torch.Tensor, gather_dim: int, split_dim: int, pieces: int, group: str) -> torch.Tensor:
    """Split ``split_dim`` into ``pieces`` sent one per rank; join the received pieces on ``gather_dim``."""
    from shapecore.torch.private import functional_collectives as funcol

    size = _piece_size(x, split_dim, pieces)
    # (pieces, ...rest) where rest is x with split_dim shrunk: piece j goes to rank j.
    outgoing = x.unflatten(split_dim, (pieces, size)).movedim(split_dim, 0).contiguous()
    incoming = waited(funcol.all_to_all_single(outgoing, None, None, group))
    # Piece j came from rank j, which holds the j-th split of gather_dim: put it in place.
    return incoming.movedim(0, gather_dim).flatten(gather_dim, gather_dim + 1)


def _whole_size(size: Any, dim: int, axis: int, state: Placements, groups: MeshGroups,
                coordinate: torch.Tensor | None, where: str) -> Any:
    """The rows of dim ``dim`` (global ``size``) that mesh ``axis`` splits: this rank's piece of
    the outer axes' splits (a lower axis is the outer split)."""
    if size is None:
        raise LoweringError(f"{where}: gathering a data-dependent dim {dim} whose global size the program never "
                            "held whole; only sizes born whole (nonzero, masking) can be split unevenly")
    for b in range(axis):
        if state[b] == Shard(dim):
            index = coordinate.select(0, b) if coordinate is not None else groups.coordinate[b]
            size = pieces_of.piece_length(size, groups.axis_size(b), pieces_of.rank_of(index, groups.axis_size(b)))
    return size


def apply_step(x: torch.Tensor, step: StepLike, state: Placements, groups: MeshGroups,
               where: str = "redistribution", coordinate: torch.Tensor | None = None,
               uneven: Mapping[int, Any] | None = None) -> tuple[torch.Tensor, Placements]:
    """``x`` (placed as ``state``) after ``step``, and the new placements.

    ``coordinate``: this rank's mesh coordinate as an int64 tensor, for traced programs that
    must not bake it in (``chunk``); by default ``groups.coordinate``. ``uneven``: the dims of
    data-dependent size, each with its global size (None: unknown), split in ``torch.chunk``'s
    pieces. Raises :class:`LoweringError` (naming ``where``) for a step that does not fit the state.
    """
    from shapecore.torch.private import all_gather_single, reduce_scatter_single
    from shapecore.torch.private import functional_collectives as funcol

    _validate(state, step, where)
    axis, group, pieces = step.axis, groups.group_name(step.axis), groups.axis_size(step.axis)
    new_state = tuple(step.dst if a == axis else p for a, p in enumerate(state))
    if pieces == 1:  # one rank: the same data in every placement, nothing to run
        return x, new_state
    uneven = uneven or {}
    moved = {p.dim for p in (step.src, step.dst) if isinstance(p, Shard)} & uneven.keys()
    index = coordinate.select(0, axis) if coordinate is not None else groups.coordinate[axis]
    if moved and step.kind == "all_to_all":
        y, middle = apply_step(x, Step(axis, "all_gather", step.src, Replicate()), state, groups, where, coordinate, uneven)
        return apply_step(y, Step(axis, "chunk", Replicate(), step.dst), middle, groups, where, coordinate, uneven)
    if moved and step.kind == "all_gather":
        size = _whole_size(uneven[step.src.dim], step.src.dim, axis, state, groups, coordinate, where)
        y = pieces_of.all_gather(x, step.src.dim, pieces, size, group)
    elif moved and step.kind == "reduce_scatter":
        op, divide = _reduce_op(step.src)
        y = pieces_of.reduce_scatter(x, op, step.dst.dim, pieces, index, group)
        y = y / pieces if divide else y
    elif moved:  # chunk
        y = pieces_of.chunk(x, step.dst.dim, pieces, index)
    elif step.kind == "all_gather":
        y = waited(all_gather_single(x, step.src.dim, group))
    elif step.kind == "all_reduce":
        op, divide = _reduce_op(step.src)
        y = waited(funcol.all_reduce(x, op, group))
        y = y / pieces if divide else y
    elif step.kind == "reduce_scatter":
        op, divide = _reduce_op(step.src)
        y = waited(reduce_scatter_single(x, op, step.dst.dim, group))
        y = y / pieces if divide else y
    elif step.kind == "all_to_all":
        y = _all_to_all(x, step.src.dim, step.dst.dim, pieces, group)
    else:
        y = _chunk(x, step.dst.dim, pieces, index) if step.kind == "chunk" else _keep_on_first(x, index)
    return y, new_state


def apply_steps(x: torch.Tensor, steps: Sequence[StepLike], src: Placements, dst: Placements,
                groups: MeshGroups, where: str = "redistribution", coordinate: torch.Tensor | None = None,
                uneven: Mapping[int, Any] | None = None) -> torch.Tensor:
    """``x`` moved from ``src`` to ``dst`` by ``steps``, which must end exactly at ``dst``
    (``uneven``: as :func:`apply_step` takes it)."""
    state = tuple(src)
    for step in steps:
        x, state = apply_step(x, step, state, groups, where, coordinate, uneven)
    if state != tuple(dst):
        raise LoweringError(f"{where}: the steps end at {state}, not at the target {tuple(dst)}")
    return x


def all_reduce_over(x: torch.Tensor, axes: Sequence[int], groups: MeshGroups) -> torch.Tensor:
    """``x`` summed over the ranks of the given mesh axes (an op's own collective, not a placement change)."""
    from shapecore.torch.private import functional_collectives as funcol

    for axis in axes:
        if groups.axis_size(axis) > 1:
            x = waited(funcol.all_reduce(x, "sum", groups.group_name(axis)))
    return x


def gather_steps(placements: Placements) -> list[Step]:
    """Steps that make ``placements`` fully replicated: innermost axes first."""
    steps = []
    for axis in reversed(range(len(placements))):
        p = placements[axis]
        if isinstance(p, Shard):
            steps.append(Step(axis, "all_gather", p, Replicate()))
        elif isinstance(p, Partial):
            steps.append(Step(axis, "all_reduce", p, Replicate()))
    return steps


def local_shard(x: torch.Tensor, placements: Placements, groups: MeshGroups) -> torch.Tensor:
    """This rank's piece of the full tensor ``x`` placed as ``placements`` (no communication).

    ``Shard(d)`` keeps this rank's chunk of dim ``d`` (a size the mesh axes do not divide is a
    ValueError, never a truncated piece); a ``Partial`` axis keeps ``x`` on coordinate 0 and
    zeros elsewhere, so the pieces sum to ``x``.
    """
    for axis, p in enumerate(placements):
        if isinstance(p, Partial):
            if p.reduce_op != "sum":
                raise ValueError(f"cannot cut a full tensor into Partial({p.reduce_op!r}) pieces (mesh axis {axis}); "
                                 "only sum partials have a canonical split")
            x = _keep_on_first(x, groups.coordinate[axis])
        elif isinstance(p, Shard):
            x = _chunk(x, p.dim, groups.axis_size(axis), groups.coordinate[axis])
    return x
