"""partition(): a joint forward+backward graph split into a forward program (user outputs and
saved values) and a backward program (saved values and tangents -> gradients) that together
compute what autograd computes. One process, the traced global joint graph, run eagerly."""

import torch
from torch import nn
from torch.export import Dim

from lowering.partition import example_values, partition
from shapecore.torch import trace_for_planning


def _bn_model() -> nn.Module:
    """A linear layer and BatchNorm in eval mode (running statistics not trivial): its forward
    returns the saved mean and inverse std beside its output, and only its backward reads them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh())
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    return model.eval()


def test_a_batchnorm_in_eval_mode_splits_into_programs_that_compute_autograds_gradients():
    model = _bn_model()
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    traced = trace_for_planning(model, (x,), dynamic_shapes=({0: Dim("batch")},), training=True)
    gm = traced.graph_module
    for node in gm.graph.nodes:  # as a lowered program (retraced by make_fx): no AOTAutograd forward tags
        node.meta.pop("partitioner_tag", None)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tangents = {k for k, n in enumerate(placeholders) if n.name.startswith("tangents")}
    split = partition(gm, example_values(gm), 1, tangents)  # failed: 'Node getitem_... was invalid, but is output'

    primals = [*(p.detach() for p in model.parameters()), *model.buffers(), x]
    assert len(primals) + len(tangents) == len(placeholders)
    out, *saved = split.forward(*primals)
    tangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    grads = split.backward(*(saved[k] if kind == "saved" else tangent for kind, k in split.backward_inputs))

    expected = model(x)
    expected.backward(tangent)
    torch.testing.assert_close(out, expected.detach())
    for (name, parameter), grad in zip(model.named_parameters(), grads, strict=False):
        torch.testing.assert_close(grad, parameter.grad, msg=lambda m: f"{name}: {m}")


def test_a_saved_view_of_an_input_is_taken_again_by_the_backward_not_returned_by_the_forward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    traced = trace_for_planning(model, (x,), dynamic_shapes=({0: Dim("batch")},), training=True)
    gm = traced.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tangents = {k for k, n in enumerate(placeholders) if n.name.startswith("tangents")}
    split = partition(gm, example_values(gm), 1, tangents)

    inputs = [n for n in split.forward.graph.nodes if n.op == "placeholder"]
    saved = split.forward.graph.output_node().args[0][1:]
    views_of_inputs = [n for n in saved if n.op == "call_function" and n.target.is_view and n.args[0] in inputs]
    assert views_of_inputs == []  # no output aliasing an input (the transposed weights)
    assert ("input", inputs.index(next(n for n in inputs if n.meta["val"].shape == (3, 6)))) in split.backward_inputs

    primals = [*(p.detach() for p in model.parameters()), x]
    out, *values = split.forward(*primals)
    tangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    given = {"saved": values, "tangent": [tangent], "input": primals}
    grads = split.backward(*(given[kind][k] for kind, k in split.backward_inputs))
    model(x).backward(tangent)
    for (name, parameter), grad in zip(model.named_parameters(), grads, strict=False):
        torch.testing.assert_close(grad, parameter.grad, msg=lambda m: f"{name}: {m}")


def _routed_rows_joint(w: torch.Tensor, x: torch.Tensor, tangent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A joint graph whose backward reads only rows of size ``2*u0`` (``u0``: the rows routed)."""
    rows = x.index_select(0, (x[:, 0] > 0).nonzero().squeeze(-1)).repeat(2, 1)
    return (rows @ w).sum(0), rows.t() @ tangent.expand(rows.size(0), -1)


def test_the_backward_takes_each_unbacked_symbol_its_inputs_sizes_read():
    """torch 2.14's Inductor refused the backward ("For 2*u0, expected [u0] to have been codegen-ed"):
    no input of it was ``u0`` itself."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    w, x, tangent = (torch.randn(*shape, generator=torch.Generator().manual_seed(k))
                     for k, shape in enumerate([(4, 3), (6, 4), (3,)]))
    gm = make_fx(_routed_rows_joint, tracing_mode="symbolic")(w, x, tangent)
    split = partition(gm, example_values(gm), 1, {2})

    values = example_values(split.backward)
    read = set().union(*(free_unbacked_symbols(size) for v in values if isinstance(v, torch.Tensor)
                         for size in (*v.shape, *v.stride())))
    assert read and read <= {v.node.expr for v in values if isinstance(v, torch.SymInt)}
    out, *saved = split.forward(w, x)
    given = {"saved": saved, "tangent": [tangent], "input": [w, x]}
    (grad,) = split.backward(*(given[kind][k] for kind, k in split.backward_inputs))
    expected_out, expected_grad = _routed_rows_joint(w, x, tangent)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(grad, expected_grad)
