"""Decision problems for the tests of the solvers and of what they solve over."""

from __future__ import annotations

import torch
from torch.export import Dim

from planner.api import prepare
from planner.problem import Problem
from shapecore.torch import trace_for_planning


def problem_of(model, x, mesh, *, training=False, batch_sizes=None, constraints=("Eq(Mod(batch, 4), 0)",), **options) -> Problem:
    """The decision problem of ``model`` traced at ``x`` with a dynamic batch (``Dim("batch")``), under ``constraints``."""
    traced = trace_for_planning(model, (x,), dynamic_shapes={"input" if isinstance(model, torch.nn.Linear) else "x": {0: Dim("batch")}},
                                training=training)
    gm, ep, env, dims = traced.graph_module, traced.exported, traced.env, traced.dim_exprs
    return prepare(ep if ep is not None else gm, mesh, shape_env=env, dims=dims, constraints=list(constraints),
                   batch_sizes=batch_sizes, **options).problem
