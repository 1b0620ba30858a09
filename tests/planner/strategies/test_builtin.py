"""Every proposed strategy computes the op: a differential test against torch on real tensors.

Small functions are traced with make_fx; for every aten node, each strategy a provider
proposes (on a 1-D and a 2-D mesh, restricted to sizes that divide) is executed piecewise by
``tests.planner.simulate`` and compared with the op on whole tensors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from planner import BuiltinProvider, DTensorProvider, Mesh, expand
from planner.graph import read_graph, tensor_operands
from planner.placements import Replicate, Shard
from planner.strategies.base import AxisRule
from tests.planner.simulate import check_strategy, divides

MESHES = [Mesh((2,)), Mesh((2, 2))]


def _trace(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result
            return result

    Recorder(gm).run(*args)
    return gm, values


def _check_all(fn, args, provider, *, ops=None, mesh=None) -> int:
    gm, values = _trace(fn, *args)
    graph = read_graph(gm)
    checked = 0
    for fx_node in gm.graph.nodes:
        node = graph.nodes.get(fx_node.name)
        if node is None or node.role != "op":
            continue
        if ops is not None and not any(op in node.target for op in ops):
            continue
        operands = tensor_operands(fx_node)
        for m in [mesh] if mesh else MESHES:
            strategies = provider.strategies(node, graph, m) or []
            for s in strategies:
                if s.all_reduces:  # the op's own collectives: tests/lowering/test_sync_norm.py runs them
                    continue
                outputs = values[fx_node.name] if isinstance(values[fx_node.name], (tuple, list)) else (values[fx_node.name],)
                if not all(divides(values[o.name], p, m.shape) for o, p in zip(operands, s.inputs)):
                    continue
                if not all(divides(v, p, m.shape) for v, p in zip(outputs, s.outputs)):
                    continue
                check_strategy(fx_node, values, operands, s, m.shape, seed=checked)
                checked += 1
    return checked


def _r(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype)


CASES = {
    "mm": (lambda a, b: a @ b, (_r(4, 8), _r(8, 4))),
    "linear": (lambda x, w, b: F.linear(x, w, b), (_r(4, 8), _r(4, 8), _r(4))),
    "bmm": (torch.bmm, (_r(4, 4, 8), _r(4, 8, 4))),
    "baddbmm": (torch.baddbmm, (_r(4, 4, 4), _r(4, 4, 8), _r(4, 8, 4))),
    "layout": (lambda x: x.transpose(0, 2).permute(1, 0, 2), (_r(4, 8, 4),)),
    "t": (lambda x: x.t(), (_r(4, 8),)),
    "flatten": (lambda x: x.view(16, 8), (_r(4, 4, 8),)),
    "unflatten": (lambda x: x.view(4, 4, 2, 4), (_r(16, 8),)),
    "expand": (lambda x: x.expand(4, 4, 8), (_r(4, 1, 8),)),
    "broadcast": (lambda x, y, z: torch.where(x > 0, x * y - z / 2, -x) + F.gelu(x) + F.silu(y), (_r(4, 4, 8), _r(4, 8), _r(8))),
    "softmax": (lambda x: torch.softmax(x, -1) + torch.log_softmax(x, 1), (_r(4, 4, 8),)),
    "norms": (lambda x, w, b: F.layer_norm(x, (8,), w, b) + F.rms_norm(x, (8,), w), (_r(4, 4, 8), _r(8), _r(8))),
    "embedding": (lambda w, i: F.embedding(i, w), (_r(8, 4), torch.randint(0, 8, (4, 4)))),
    "reductions": (lambda x: x.sum((0, 2), keepdim=True) + x.mean(1, keepdim=True) + x.sum(), (_r(4, 4, 8),)),
    "cat_split": (lambda x, y: torch.cat([x, y], 1).split([4, 8], dim=1)[1] + torch.chunk(y, 2, 2)[0].repeat(1, 1, 2), (_r(4, 4, 8), _r(4, 8, 8))),
    "stack_unbind": (lambda x, y: (torch.stack([x, y], 1).unbind(2)[1], torch.stack(x.unbind(0), 2)), (_r(4, 4, 8), _r(4, 4, 8))),
    "slicing": (lambda x: x[:, 2:4] + x[:, 0:2] * x[:, 0:2].select(2, 1).unsqueeze(2), (_r(4, 4, 8),)),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (_r(4, 4, 8, 4, dtype=torch.float32),) * 3),
    "conv": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (_r(4, 4, 4, 4), _r(4, 4, 3, 3), _r(4))),
    "batch_norm_eval": (lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False),
                        (_r(4, 4, 2, 2), _r(4), _r(4), _r(4), _r(4).abs() + 0.5)),
}


def _with_grads(fn, args):
    def step(*xs):
        xs = [x.detach().requires_grad_(x.is_floating_point()) for x in xs]
        out = fn(*xs)
        grads = torch.autograd.grad(out.sum(), [x for x in xs if x.requires_grad])
        return (out, *grads)

    return step, args


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_rules_compute_the_op(case):
    fn, args = CASES[case]
    assert _check_all(fn, args, BuiltinProvider()) > 0


@pytest.mark.parametrize("case", ["linear", "norms", "embedding", "attention", "conv", "softmax", "broadcast", "slicing"])
def test_builtin_rules_compute_the_backward_ops(case):
    fn, args = _with_grads(*CASES[case])
    assert _check_all(fn, args, BuiltinProvider(), mesh=Mesh((2,))) > 0


@pytest.mark.parametrize("case", ["mm", "broadcast", "softmax", "flatten"])
def test_dtensor_strategies_compute_the_op(case):
    fn, args = CASES[case]
    assert _check_all(fn, args, DTensorProvider(), mesh=Mesh((2,))) > 0


def test_dtensor_provider_declines_what_it_does_not_know():
    gm, _ = _trace(lambda x: x * 2, _r(4))
    graph = read_graph(gm)
    placeholder = next(n for n in graph if n.role == "input")
    assert DTensorProvider().strategies(placeholder, graph, Mesh((2,))) is None


def test_batch_norm_with_batch_statistics_splits_the_batch_only_with_its_all_reduces_priced():
    def step(x, w, b, m, v):
        return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.1, 1e-5)

    gm, _ = _trace(step, _r(4, 6, 2, 2), _r(6), _r(6), _r(6), _r(6).abs())
    graph = read_graph(gm)
    node = next(n for n in graph if n.role == "op" and "batch_norm" in n.target)
    strategies = BuiltinProvider().strategies(node, graph, Mesh((2, 2)))
    split_batch = [s for s in strategies if any(p == Shard(0) for p in s.inputs[0])]
    assert split_batch and all(s.all_reduces for s in split_batch)
    assert {s.all_reduces for s in split_batch} >= {((0, 7), (0, 6)), ((0, 7), (0, 6), (1, 7), (1, 6))}
    assert not any(p in (Shard(2), Shard(3)) for s in strategies for p in s.inputs[0])  # spatial dims need the stats too


def test_expand_takes_one_rule_per_axis():
    rules = [AxisRule((Replicate(),), (Replicate(),), "r"), AxisRule((Shard(0),), (Shard(0),), "s")]
    strategies = expand(rules, Mesh((2, 3)))
    assert [s.rule for s in strategies] == ["r/r", "r/s", "s/r", "s/s"]
    assert strategies[1].outputs == ((Replicate(), Shard(0)),)
