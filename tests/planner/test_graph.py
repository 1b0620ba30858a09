"""read_graph: an FX graph as the planner sees it — tensors with shapecore shapes, operands in
order, and roles for every placeholder and output, from an export signature or AOT descriptors."""

from __future__ import annotations

import operator

import pytest
import sympy
import torch
from torch import nn
from torch.export import Dim

from planner.graph import input_roles, op_name, output_roles, read_graph, tensor_operands
from planner.plan import GraphInput, GraphOutput
from shapecore.torch import trace_for_planning, trace_make_fx


class _Scaled(nn.Module):
    """A linear layer whose output a buffer scales: one parameter pair, one buffer, one input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


class _Tied(nn.Module):
    """An embedding whose table is also the output head's weight (GPT-2's tying), and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(tokens)
        first, second = h.split(2, dim=-1)
        return torch.cat([second, first], -1) * mask, self.head(h)


def _batch(name: str = "b") -> dict:
    return {0: Dim(name)}


def test_export_signature_names_parameters_buffers_and_user_inputs():
    exported = torch.export.export(_Scaled(), (torch.randn(5, 4),), dynamic_shapes=(_batch(),))
    graph = read_graph(exported.graph_module, exported=exported)
    placeholders = [(n.role, n.fqn, n.input_index) for n in graph if n.target == "placeholder"]
    assert placeholders == [("param", "fc.weight", None), ("param", "fc.bias", None), ("buffer", "scale", None),
                            ("input", None, 0)]
    (x,) = graph.inputs
    batch = graph[x].output.shape[0]
    assert isinstance(batch, sympy.Symbol) and graph[x].output.shape[1] == 4 and graph[x].output.dtype == "float32"
    assert graph.outputs == ["output:0"] and graph["output:0"].role == "sink"
    assert graph["output:0"].output.shape == (batch, 3)
    assert input_roles(graph)[-1] == GraphInput(x, "input", 0, None)
    assert output_roles(graph) == (GraphOutput("output", 0),)
    assert not graph.is_training()


def test_a_tied_parameter_is_planned_once_and_every_read_goes_through_it():
    exported = torch.export.export(_Tied(), (torch.randint(0, 10, (4, 5)), torch.ones(4, 5, 1)),
                                   dynamic_shapes=(_batch(), _batch()))
    graph = read_graph(exported.graph_module, exported=exported)
    (table,) = [n.name for n in graph if n.role == "param"]
    assert graph[table].fqn in ("embed.weight", "head.weight")
    readers = sorted(graph[user].target for user, _ in graph.users[table])
    assert readers == ["aten.embedding.default", "aten.linear.default"]
    assert [r.role for r in output_roles(graph)] == ["output", "output"]


def test_a_multi_output_op_is_a_tuple_read_through_getitems():
    exported = torch.export.export(_Tied(), (torch.randint(0, 10, (4, 5)), torch.ones(4, 5, 1)),
                                   dynamic_shapes=(_batch(), _batch()))
    graph = read_graph(exported.graph_module, exported=exported)
    (split,) = [n for n in graph if n.target == "aten.split.Tensor"]
    assert split.is_tuple and len(split.outputs) == 2 and all(m.shape[2] == 2 for m in split.outputs)
    getitems = sorted((n.source, n.index) for n in graph if n.role == "getitem")
    assert getitems == [(split.name, 0), (split.name, 1)]
    (cat,) = [n for n in graph if n.target == "aten.cat.default"]
    assert [graph[p].index for p in cat.operands] == [1, 0]  # torch.cat([second, first])


def test_the_joint_graph_names_tangents_gradients_and_the_backward_phase():
    traced = trace_for_planning(_Scaled(), (torch.randn(5, 4),), dynamic_shapes=(_batch(),), training=True)
    graph = read_graph(traced.graph_module)
    assert graph.is_training()
    roles = {(r.role, r.fqn if r.role in ("param", "buffer") else r.index) for r in input_roles(graph)}
    assert roles == {("param", "fc.weight"), ("param", "fc.bias"), ("buffer", "scale"), ("input", 0), ("tangent", 0)}
    tangent = next(n for n in graph if n.role == "tangent")
    assert tangent.phase == "backward" and tangent.output_index == 0
    outputs = [r for r in output_roles(graph) if r is not None]
    assert outputs[0] == GraphOutput("output", 0)
    assert {r.grad_of for r in outputs[1:]} == {"fc.weight", "fc.bias"} and all(r.role == "grad" for r in outputs[1:])
    params = {n.fqn: n for n in graph if n.role == "param"}
    for sink in [graph[name] for name in graph.outputs if name is not None and graph[name].grad_of]:
        assert sink.phase == "backward" and sink.output == params[sink.grad_of].output
    assert {n.module_path for n in graph if n.target == "aten.addmm.default"} == {"fc"}


def test_without_roles_every_placeholder_is_a_user_input_and_only_tensors_are_planned():
    traced = trace_make_fx(lambda x, y: ((x * x).sum(0) + y, x.shape[0] * 2), (torch.randn(3, 4), torch.randn(4)))
    graph = read_graph(traced.graph_module)
    assert [(n.role, n.input_index) for n in graph if n.target == "placeholder"] == [("input", 0), ("input", 1)]
    assert not [n for n in graph if "sym_size" in n.target]  # sizes read off a tensor are not planned
    assert graph.outputs[1] is None and output_roles(graph)[1] is None  # a SymInt output has no placement
    (mul,) = [n for n in graph if n.target == "aten.mul.Tensor"]
    assert mul.operands == [graph.inputs[0]] * 2  # one producer read twice is two operands
    assert graph.users[graph.inputs[0]] == [(mul.name, 0), (mul.name, 1)]


def test_tensor_operands_flatten_args_and_kwargs_in_order_keeping_repeats():
    traced = trace_make_fx(lambda x, y: (torch.where(x > 0, y, x), torch.cat([y, x, y])), (torch.randn(4), torch.randn(4)))
    fx = {n.name: n for n in traced.graph_module.graph.nodes}
    where = next(n for n in fx.values() if n.target is torch.ops.aten.where.self)
    cat = next(n for n in fx.values() if n.target is torch.ops.aten.cat.default)
    x, y = [n for n in fx.values() if n.op == "placeholder"]
    assert tensor_operands(where) == [where.args[0], y, x]
    assert tensor_operands(cat) == [y, x, y]


def test_op_names_are_aten_overloads_or_getitem():
    assert op_name(torch.ops.aten.mm.default) == "aten.mm.default"
    assert op_name(operator.getitem) == "getitem"


def test_a_graph_with_module_calls_is_refused_naming_the_node_and_the_tracers_to_use():
    gm = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match=r"node _0 is a call_module; .* trace with torch.export or make_fx"):
        read_graph(gm)
