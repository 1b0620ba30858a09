"""Fake-mode helpers: the ShapeEnv traced values live in, or None for static shapes."""

import torch
from torch.export import Dim

from shapecore.torch import graph_shape_env, shape_env_of, to_torch_symbols


class _Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_the_shape_env_of_fake_values_and_of_a_graph():
    symbols = to_torch_symbols({"b0": 5})
    with symbols.fake_mode:
        x = torch.empty(symbols.symints["b0"], 3)
    assert shape_env_of([None, 3, x]) is symbols.shape_env
    assert shape_env_of([1, torch.ones(2)]) is None, "real tensors have no ShapeEnv"
    dynamic = torch.export.export(_Double(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n")}}).graph_module
    assert graph_shape_env(dynamic) is not None and len(graph_shape_env(dynamic).var_to_range) == 1
    static = torch.export.export(_Double(), (torch.randn(4, 3),)).graph_module
    assert not graph_shape_env(static).var_to_range, "a static trace's ShapeEnv has no symbols"
    assert graph_shape_env(torch.fx.symbolic_trace(_Double())) is None, "no fake values at all"
