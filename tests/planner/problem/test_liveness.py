"""Liveness: which storages are live at each step of the program — aliases share their base's,
temporaries die at their last use, what the caller holds or the graph returns lives throughout,
and the bytes live at a step are those of the storages live there."""

from __future__ import annotations

import functools

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

from planner.graph import read_graph
from planner.problem import Liveness
from shapecore.torch import trace_for_planning


def test_views_and_in_place_results_share_their_base_storage():
    def f(x):
        y = x * 2
        y.add_(1)
        top, bottom = y.split(2)
        z = top.t() + bottom
        return z.exp().sum() + x

    graph = read_graph(make_fx(f)(torch.randn(4, 2)))
    live = Liveness.of(graph)
    assert {n.target: n.alias_of for n in graph if n.role == "op" and n.alias_of} == {
        "aten.add_.Tensor": "mul", "aten.split.Tensor": "add_", "aten.t.default": "getitem"}
    assert live.holders == ("x_1", "mul", "add", "exp", "sum_1", "add_1")  # x_1: the input; the rest allocate
    span = {h: (int(s), int(e)) for h, s, e in zip(live.holders, live.start, live.end)}
    step = live.step
    assert span["mul"] == (step["mul"], step["add"])  # read through its views until the sum, then freed
    assert span["add"] == (step["add"], step["exp"])  # a temporary dies at its last use
    assert span["x_1"] == (0, len(live.steps) - 1)  # the caller holds its input


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x).relu()
        return (h * h.sum(1, keepdim=True)).t()


@functools.cache
def _graph(training: bool):
    traced = trace_for_planning(_Scaled(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch")},), training=training)
    return read_graph(traced.graph_module, exported=traced.exported)


@settings(max_examples=30)
@given(training=st.booleans(), data=st.data())
def test_the_bytes_live_at_a_step_are_those_of_the_storages_live_there(training, data):
    live = Liveness.of(_graph(training))
    steps, points = len(live.steps), 2
    sizes = {h: np.array(data.draw(st.lists(st.integers(0, 100), min_size=points, max_size=points)), dtype=float)
             for h in live.holders if data.draw(st.booleans())}
    extra = []
    for _ in range(data.draw(st.integers(0, 3))):
        first = data.draw(st.integers(0, steps - 1))
        last = data.draw(st.integers(first, steps - 1))
        extra.append((first, last, np.array([float(data.draw(st.integers(0, 100)))] * points)))
    timeline = live.timeline(sizes, points, extra)
    assert timeline.shape == (steps, points)
    for step in range(steps):
        expected = sum((sizes[h] for h in live.live(step) if h in sizes), np.zeros(points))
        expected = expected + sum((size for first, last, size in extra if first <= step <= last), np.zeros(points))
        np.testing.assert_array_equal(timeline[step], expected)


def test_a_returned_gradient_is_counted_with_its_parameter_and_placeholders_live_throughout():
    graph = _graph(training=True)
    live = Liveness.of(graph)
    gradients = [graph.nodes[name].operands[0] for name in graph.outputs if name is not None and graph.nodes[name].grad_of]
    assert gradients and not any(live.holds(live.root[g]) for g in gradients)
    last = len(live.steps) - 1
    for name in graph.inputs:
        assert live.holds(name) and all(name in live.live(step) for step in range(last + 1))
    assert all(live.holds(h) for h in live.holders) and set(live.holders) <= set(live.steps)
