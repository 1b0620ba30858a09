"""Run by ``torchrun`` from test_torchrun.py: a ParallelModule under env:// rendezvous.

Usage: ``torchrun --standalone --nproc-per-node 2 torchrun_worker.py RESULT.json``; rank 0 writes
the compile count and the relative errors at three batch sizes to RESULT.json.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.export import Dim

from lowering.examples import MLP
from lowering.parallel import ParallelModule


def main(path: str) -> None:
    dist.init_process_group("gloo")  # env:// from torchrun
    torch.manual_seed(0)
    model = MLP()
    pm = ParallelModule(model, (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(2,),
                        memory_budget=12000, batch_sizes=[3, 8, 13])  # as test_parallel's mlp_on_2: cache hit
    errors = []
    for batch in (3, 8, 13):
        x = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        out = pm(*pm.shard_inputs(x)).full_tensor()
        errors.append(float((out - model(x)).abs().max() / model(x).abs().max()))
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump({"compiles": pm.compile_count, "errors": errors, "world": dist.get_world_size()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
