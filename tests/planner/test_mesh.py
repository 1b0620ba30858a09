"""Mesh: shapes, names, and the view of a torch DeviceMesh."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard

from planner import Mesh, as_mesh


def test_mesh_names_and_sizes():
    mesh = Mesh(shape=(2, 4), axis_names=("dp", "tp"))
    assert mesh.ndim == 2 and mesh.size == 8
    assert mesh.axis("tp") == 1 and mesh.axis(0) == 0
    assert str(mesh) == "(dp=2, tp=4)"
    assert Mesh((3,)).axis_names == ("axis0",)
    assert Mesh.from_dict(mesh.to_dict()) == mesh


@pytest.mark.parametrize("shape, names, message", [
    ((), None, "non-empty"),
    ((2, 0), None, "positive"),
    ((2, 2), ("dp",), "2 axes but 1 axis names"),
    ((2, 2), ("a", "a"), "distinct"),
])
def test_bad_meshes_are_rejected(shape, names, message):
    with pytest.raises(ValueError, match=message):
        Mesh(shape, names)


def test_unknown_axis():
    with pytest.raises(KeyError, match="no mesh axis named 'pp'"):
        Mesh((2,), ("dp",)).axis("pp")
    with pytest.raises(IndexError):
        Mesh((2,)).axis(3)


def test_from_device_mesh():
    device_mesh = DeviceMesh("cpu", torch.arange(8).view(2, 4), mesh_dim_names=("dp", "tp"), _init_backend=False, _rank=0)
    assert Mesh.from_device_mesh(device_mesh) == Mesh((2, 4), ("dp", "tp"))


def test_as_mesh_takes_a_mesh_a_device_mesh_or_axis_sizes():
    mesh = Mesh((2, 4), ("dp", "tp"))
    device_mesh = DeviceMesh("cpu", torch.arange(8).view(2, 4), mesh_dim_names=("dp", "tp"), _init_backend=False, _rank=0)
    assert as_mesh(mesh) is mesh
    assert as_mesh(device_mesh) == mesh
    assert as_mesh((2, 4)) == as_mesh([2, 4]) == Mesh((2, 4))
    with pytest.raises(TypeError, match="a DeviceMesh or a tuple of axis sizes, got 8"):
        as_mesh(8)


def test_shard_factor_multiplies_the_axes_that_split_a_dim():
    mesh = Mesh((2, 3))
    assert mesh.shard_factor((Shard(0), Shard(0)), 0) == 6
    assert mesh.shard_factor((Shard(0), Shard(1)), 1) == 3
    assert mesh.shard_factor((Replicate(), Partial()), 0) == 1
