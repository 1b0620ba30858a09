"""Run by ``torchrun`` from test_torchrun.py: a ParallelModule under env:// rendezvous.

Usage: ``torchrun --standalone --nproc-per-node 2 torchrun_worker.py RESULT.json BUDGET``; rank 0
writes the compile count, the relative errors at three batch sizes and the sharded parameters to
RESULT.json. BUDGET: a memory budget (bytes per device) that splits the MLP's weights
(``test_torchrun.py`` derives it).
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.export import Dim

from lowering.examples import MLP
from lowering.parallel import ParallelModule


ARGUMENTS = {"dynamic_shapes": ({0: Dim("batch")},), "mesh": (2,), "batch_sizes": [3, 8, 13]}


def main(path: str, budget: float) -> None:
    dist.init_process_group("gloo")  # env:// from torchrun
    torch.manual_seed(0)
    model = MLP()
    pm = ParallelModule(model, (torch.randn(8, 32),), memory_budget=budget, **ARGUMENTS)
    errors = []
    for batch in (3, 8, 13):
        x = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        out = pm(*pm.shard_inputs(x)).full_tensor()
        errors.append(float((out - model(x)).abs().max() / model(x).abs().max()))
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump({"compiles": pm.compile_count, "errors": errors, "world": dist.get_world_size(),
                       "sharded": sorted(n for n, ps in pm.plan.param_placements.items() if any(p.is_shard() for p in ps))}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
