"""The device a mesh's groups run on comes from the process group's backend, not a fixed "cpu";
a rank's tensors are on that type's current device."""

import pytest
import torch

from lowering.mesh_groups import device_type, rank_device


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


def test_a_ranks_device_is_the_accelerators_current_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # as lowering.launch makes it on rank 3
    assert rank_device("cuda") == torch.device("cuda", 3)
    assert rank_device("cpu") == torch.device("cpu")
