"""Mesh: the logical device grid a plan is made for.

A mesh is a shape (one size per axis) and a name per axis, like
``torch.distributed.device_mesh.DeviceMesh`` without any process group: planning needs only
the sizes. Axis ``i`` of a plan's placement tuples refers to axis ``i`` of this mesh. When a
tensor dim is sharded over several axes, the lower-numbered axis is the outer split (as in
DTensor): rank ``(i, j)`` of a ``(2, 4)`` mesh holding ``(Shard(0), Shard(0))`` owns chunk
``j`` of chunk ``i``.

:func:`as_mesh` takes what users pass for a mesh (a ``Mesh``, a ``DeviceMesh`` or a tuple of
axis sizes); :meth:`Mesh.shard_factor` says into how many pieces a placement splits a dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Mesh", "as_mesh"]


@dataclass(frozen=True)
class Mesh:
    """Sizes and names of the mesh axes, e.g. ``Mesh(shape=(2, 4), axis_names=("dp", "tp"))``."""

    shape: tuple[int, ...]
    axis_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
            raise ValueError(f"mesh shape must be a non-empty tuple of positive ints, got {self.shape!r}")
        names = tuple(self.axis_names) if self.axis_names is not None else tuple(f"axis{i}" for i in range(len(shape)))
        if len(names) != len(shape):
            raise ValueError(f"mesh shape {shape} has {len(shape)} axes but {len(names)} axis names {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"mesh axis names must be distinct, got {names}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "axis_names", names)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of devices."""
        return math.prod(self.shape)

    def axis(self, name_or_index: str | int) -> int:
        """Index of an axis given by name or index."""
        if isinstance(name_or_index, int):
            if not 0 <= name_or_index < self.ndim:
                raise IndexError(f"mesh axis {name_or_index} out of range for a {self.ndim}-axis mesh")
            return name_or_index
        assert self.axis_names is not None
        if name_or_index not in self.axis_names:
            raise KeyError(f"no mesh axis named {name_or_index!r}; axes are {self.axis_names}")
        return self.axis_names.index(name_or_index)

    def shard_factor(self, placements: Sequence[Any], dim: int) -> int:
        """Into how many pieces ``placements`` (one per axis) split tensor dim ``dim``: the
        product of the sizes of the axes that ``Shard(dim)``; 1 when none does."""
        from planner.placements import shard_factor

        return shard_factor(placements, self.shape, dim)

    @classmethod
    def from_device_mesh(cls, device_mesh: Any) -> Mesh:
        """The planning view of a ``torch.distributed.device_mesh.DeviceMesh``."""
        return cls(shape=tuple(int(s) for s in device_mesh.shape), axis_names=device_mesh.mesh_dim_names)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "axis_names": list(self.axis_names or ())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mesh:
        return cls(shape=tuple(data["shape"]), axis_names=tuple(data["axis_names"]))

    def __str__(self) -> str:
        assert self.axis_names is not None
        return "(" + ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.shape)) + ")"


def as_mesh(mesh: Mesh | Any) -> Mesh:
    """``mesh`` as a :class:`Mesh`: a ``Mesh`` itself, the planning view of a ``DeviceMesh``
    (:meth:`Mesh.from_device_mesh`), or ``Mesh(shape)`` for a tuple or list of axis sizes."""
    if isinstance(mesh, Mesh):
        return mesh
    if hasattr(mesh, "mesh_dim_names") and hasattr(mesh, "shape"):
        return Mesh.from_device_mesh(mesh)
    if isinstance(mesh, (tuple, list)):
        return Mesh(tuple(mesh))
    raise TypeError(f"mesh must be a planner.Mesh, a DeviceMesh or a tuple of axis sizes, got {mesh!r}")
