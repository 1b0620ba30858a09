"""The device a mesh's groups run on comes from the process group's backend, not a fixed "cpu"."""

import pytest

from lowering.mesh_groups import device_type


@pytest.mark.parametrize("backend, device", [
    ("gloo", "cpu"),
    ("nccl", "cuda"),
    ("mpi", "cpu"),
    ("cpu:gloo,cuda:nccl", "cuda"),
    ("cpu:gloo", "cpu"),
])
def test_device_type_follows_the_backend(backend, device):
    assert device_type(backend) == device


def test_a_backend_torch_does_not_know_is_refused_by_name():
    with pytest.raises(ValueError, match="'no-such-backend' runs on no device"):
        device_type("no-such-backend")
