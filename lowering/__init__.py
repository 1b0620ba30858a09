"""lowering: plans become per-rank programs, compiled once by Inductor, run on torch.distributed."""
