"""A model's parameters and buffers as DTensors holding this rank's pieces, under their own names.

:func:`register_state` gives a module the model's module tree (empty ``nn.Module`` containers
along each name's path) with every parameter and buffer of the model registered as a DTensor
on the plan's mesh, placed as the plan places it (``Replicate`` where the plan does not name
it): ``named_parameters()`` and ``state_dict()`` list the model's names, a tied parameter is
one ``Parameter`` under each of its names, a non-persistent buffer stays out of
``state_dict()``. Only this rank's pieces are allocated: a meta tensor's piece is left
uninitialized (:func:`init_weights` or a checkpoint fills it), a real tensor's piece is
copied. On a mesh of one device every piece is the whole tensor, and the tensors are
registered as plain tensors (:func:`is_whole`): a DTensor there adds nothing but DTensor's
dispatch to every op on it (each optimizer op, each gradient's accumulation), which on the
tiny decoder of ``bench/overhead.py`` costs more than its whole optimizer step.

:func:`init_weights` runs a user init the way ``model.apply(fn)`` does on one device (each
module, children first, sees its own parameters and buffers as whole tensors), one module's
tensors at a time, and keeps this rank's piece of each: with the same seed, the global
tensors equal the one-device ones, and no rank ever holds more than the tensors of the
modules being initialized.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate

from lowering.collectives import local_shard
from lowering.errors import LoweringError
from lowering.mesh_groups import MeshGroups

__all__ = ["contiguous_strides", "init_weights", "is_whole", "register_state"]


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``."""
    strides, running = [], 1
    for n in reversed(shape):
        strides.append(running)
        running *= n
    return tuple(reversed(strides))


def is_whole(groups: MeshGroups) -> bool:
    """Whether the mesh has one device, where parameters and buffers are plain tensors."""
    return groups.mesh.size == 1


def _placed(tensor: torch.Tensor, placements: tuple[Any, ...], groups: MeshGroups) -> torch.Tensor:
    """This rank's piece of ``tensor`` (uninitialized when it is a meta tensor) as a DTensor (a plain
    tensor on a mesh of one device)."""
    with torch.no_grad():
        piece = local_shard(tensor.detach(), placements, groups)
        piece = torch.empty_like(piece, device=groups.device) if piece.is_meta else piece.clone()
    if is_whole(groups):
        return piece
    return DTensor.from_local(piece, groups.device_mesh, placements, run_check=False, shape=tensor.shape,
                              stride=contiguous_strides(tensor.shape))


def _container(root: nn.Module, path: str) -> nn.Module:
    module = root
    for part in path.split(".") if path else []:
        child = dict(module.named_children()).get(part)
        if child is None:
            if hasattr(module, part):
                raise LoweringError(f"the model's submodule {path!r} cannot be registered: {type(module).__name__} "
                                    f"already has an attribute {part!r}")
            child = nn.Module()
            module.add_module(part, child)
        module = child
    return module


def register_state(root: nn.Module, model: nn.Module, placements: Mapping[str, tuple[Any, ...]],
                   groups: MeshGroups) -> None:
    """Register ``model``'s parameters and buffers on ``root`` as DTensors, plain tensors on a mesh of
    one device (``placements``: by name; any name of a tied tensor may carry them)."""
    persistent = set(model.state_dict(keep_vars=True))
    made: dict[int, Any] = {}
    every = [(name, t, True) for name, t in model.named_parameters(remove_duplicate=False)] + [
        (name, t, False) for name, t in model.named_buffers(remove_duplicate=False)]
    aliases: dict[int, list[str]] = {}
    for name, t, _ in every:
        aliases.setdefault(id(t), []).append(name)
    for name, tensor, is_parameter in every:
        if id(tensor) not in made:
            placed = next((tuple(placements[a]) for a in aliases[id(tensor)] if a in placements),
                          (Replicate(),) * groups.mesh.ndim)
            if is_parameter and any(isinstance(p, Partial) for p in placed):
                raise LoweringError(f"the plan places parameter {name} as {placed}: a parameter must be sharded or "
                                    "replicated for an optimizer to update it")
            value = _placed(tensor, placed, groups)
            made[id(tensor)] = nn.Parameter(value, requires_grad=tensor.requires_grad) if is_parameter else value
        path, _, leaf = name.rpartition(".")
        owner = _container(root, path)
        if is_parameter:
            owner.register_parameter(leaf, made[id(tensor)])
        else:
            owner.register_buffer(leaf, made[id(tensor)], persistent=name in persistent)


@contextlib.contextmanager
def _whole(module: nn.Module, globals_by_id: dict[int, torch.Tensor]) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``module``'s own parameters and buffers swapped for whole CPU tensors (one per tensor, shared
    with other owners through ``globals_by_id``); yields (name, original) pairs, restores after."""
    originals = [(k, t) for k, t in module.named_parameters(recurse=False)] + [
        (k, t) for k, t in module.named_buffers(recurse=False)]
    for k, t in originals:
        if id(t) not in globals_by_id:
            with torch.no_grad():
                globals_by_id[id(t)] = (torch.empty_like(t, device="cpu") if t.is_meta else t.detach().clone())
        whole = globals_by_id[id(t)]
        setattr(module, k, nn.Parameter(whole, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else whole)
    try:
        yield originals
    finally:
        for k, t in originals:
            setattr(module, k, t)


def init_weights(root: nn.Module, model: nn.Module, fn: Callable[[nn.Module], None], groups: MeshGroups) -> None:
    """Fill ``root``'s DTensors (made by :func:`register_state` from ``model``) with ``fn`` applied to
    each module of ``model`` as ``model.apply(fn)`` would, on whole tensors, keeping this rank's pieces."""
    named = {id(t): name for name, t in [*model.named_parameters(remove_duplicate=False),
                                          *model.named_buffers(remove_duplicate=False)]}
    owners: dict[int, int] = {}

    def count(module: nn.Module) -> None:  # visits as apply will: a module shared by two parents twice
        for _, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            owners[id(t)] = owners.get(id(t), 0) + 1

    model.apply(count)
    whole: dict[int, torch.Tensor] = {}

    def visit(module: nn.Module) -> None:
        with _whole(module, whole) as originals:
            fn(module)
            done = [(k, t, getattr(module, k)) for k, t in originals]
        for _, t, value in done:
            target = root.get_parameter(named[id(t)]) if isinstance(t, nn.Parameter) else root.get_buffer(named[id(t)])
            with torch.no_grad():
                if isinstance(target, DTensor):
                    target.to_local().copy_(local_shard(value.detach(), target.placements, groups))
                else:
                    target.copy_(value)
            owners[id(t)] -= 1
            if owners[id(t)] == 0:
                whole.pop(id(t), None)

    model.apply(visit)
