"""Fixtures of the lowering tests."""

import pytest


@pytest.fixture
def one_rank():
    """A default process group of one gloo rank in this process."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
