"""MeshGroups: one process group per mesh axis for this rank, under a rank-independent name.

Ranks are laid out on the mesh in row-major order, as ``torch.distributed``'s ``DeviceMesh``
does (``init_device_mesh`` builds the groups: every rank joins the creation of every slice's
group). This rank's group along axis ``a`` is registered a second time under the name
``shapecore:<shape>:<axis name>`` (e.g. ``shapecore:2x2:dp``), which is the same on every rank.
Lowered graphs refer to groups by that name, so all ranks compile the same graph text and
share one compile cache entry.

The ``DeviceMesh`` is on the device the default group's backend runs collectives on
(:func:`device_type`: gloo → ``cpu``, nccl → ``cuda``), so the same code runs on gloo and NCCL;
this rank's tensors are on that type's current device (:func:`rank_device`: ``cuda:1`` on rank 1
of ``lowering.launch``), where the lowered program is traced and compiled too.

Groups are created once per process and mesh; creating them is a collective over the default
group (every rank must ask for the same meshes in the same order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner import Mesh

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["MeshGroups", "device_type", "mesh_groups", "rank_device"]


@dataclass(frozen=True)
class MeshGroups:
    """This rank's view of a mesh: its coordinate, the group name of each axis, and the device its
    tensors are on (every tensor a program of the mesh creates or takes: its inputs, its factory
    ops, the coordinate it reads)."""

    mesh: Mesh
    device_mesh: DeviceMesh
    coordinate: tuple[int, ...]
    group_names: tuple[str, ...]
    device: torch.device

    def group_name(self, axis: int) -> str:
        return self.group_names[axis]

    def axis_size(self, axis: int) -> int:
        return self.mesh.shape[axis]


_CACHE: dict[tuple[Any, tuple[int, ...], tuple[str, ...]], MeshGroups] = {}


def _alias(mesh: Mesh, axis: int) -> str:
    assert mesh.axis_names is not None
    return f"shapecore:{'x'.join(map(str, mesh.shape))}:{mesh.axis_names[axis]}"


def device_type(backend: str) -> str:
    """The device type a process group backend runs collectives on: the device torch makes it
    the default for (``gloo`` → ``cpu``, ``nccl`` → ``cuda``), else the first it supports
    (``mpi`` → ``cpu``); for a backend per device (``cpu:gloo,cuda:nccl``), the accelerator's."""
    import torch.distributed as dist

    per_device = [part.split(":", 1)[0] for part in backend.split(",") if ":" in part]
    if per_device:
        return next((d for d in per_device if d != "cpu"), per_device[0])
    default_for = [d for d, name in dist.Backend.default_device_backend_map.items() if name == backend]
    supported = dist.Backend.backend_capability.get(backend, [])
    if not default_for and not supported:
        raise ValueError(f"process group backend {backend!r} runs on no device torch knows of "
                         f"(torch.distributed.Backend.backend_capability); initialize the process group with a "
                         f"registered backend, or as 'device:backend' pairs")
    return (default_for or supported)[0]


def rank_device(device_type: str) -> torch.device:
    """This rank's device of ``device_type``: an accelerator's current device (``lowering.launch``
    makes rank ``r``'s current before its group starts), else the device type itself (``cpu``)."""
    import torch

    if device_type in ("cpu", "meta"):
        return torch.device(device_type)
    return torch.device(device_type, torch.get_device_module(device_type).current_device())


def mesh_groups(mesh: Mesh) -> MeshGroups:
    """The groups of ``mesh`` for this rank (created on first use; a collective).

    The default process group must be initialized and its size must equal the mesh size.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from shapecore.torch.private import register_process_group

    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialized: call torch.distributed.init_process_group first "
            "(torchrun does it through env://), or run under lowering.launch"
        )
    world = dist.get_world_size()
    if world != mesh.size:
        raise ValueError(f"mesh {mesh} has {mesh.size} devices but the process group has {world} ranks; "
                         f"launch {mesh.size} processes or plan for a mesh of {world}")
    assert mesh.axis_names is not None
    key = (dist.group.WORLD, mesh.shape, mesh.axis_names)
    if key not in _CACHE:
        device_mesh = init_device_mesh(device_type(dist.get_backend()), mesh.shape, mesh_dim_names=mesh.axis_names)
        names = []
        for axis in range(mesh.ndim):
            name = _alias(mesh, axis)
            register_process_group(name, device_mesh.get_group(axis))
            names.append(name)
        coordinate = device_mesh.get_coordinate()
        assert coordinate is not None
        _CACHE[key] = MeshGroups(mesh, device_mesh, tuple(coordinate), tuple(names),
                                 rank_device(device_mesh.device_type))
    return _CACHE[key]
