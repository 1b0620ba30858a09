"""A parallel module checked against its model on one device: the tests that run plans on ranks share it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def errors_against(pm: Any, model: torch.nn.Module, inputs: Sequence[torch.Tensor], *, training: bool) -> list[float]:
    """How far ``pm`` (a ``ParallelModule`` of ``model``) is from ``model`` on whole ``inputs``: the
    output's largest difference and, in training (the gradients of the output's squares' sum, then
    reset), each parameter gradient's, relative to the gradient's largest entry."""
    out = pm(*pm.shard_inputs(*inputs)).full_tensor()
    expected = model(*inputs)
    errors = [float((out - expected).detach().abs().max())]
    if training:
        out.square().sum().backward()
        model.zero_grad()
        expected.square().sum().backward()
        for name, p in pm.named_parameters():
            grad = model.get_parameter(name).grad
            errors.append(float((p.grad.full_tensor() - grad).abs().max()) / (1 + float(grad.abs().max())))
            p.grad = None
    return errors
