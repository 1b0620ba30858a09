"""Every proposed strategy computes the op: the differential harness the providers' tests share.

Small functions are traced with make_fx; for every aten node, each strategy a provider
proposes (on a 1-D and a 2-D mesh, restricted to sizes that divide) is executed piecewise by
``tests.planner.simulate`` and compared with the op on whole tensors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from planner import Mesh
from planner.graph import read_graph, tensor_operands
from tests.planner.simulate import check_strategy, divides

MESHES = [Mesh((2,)), Mesh((2, 2))]


def trace(fn, *args, run=None):
    """``fn`` traced by make_fx on fake tensors, and every node's value on the real ``args`` (on
    ``run`` instead, where given: an op whose meta function takes bfloat16 only, run in float32)."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result
            return result

    Recorder(gm).run(*(args if run is None else run))
    return gm, values


def check_all(fn, args, provider, *, ops=None, mesh=None, run=None) -> int:
    """Check every strategy ``provider`` proposes for the ops of ``fn`` (``ops``: only targets naming
    one of these; ``run``: :func:`trace`'s); the number of strategies checked."""
    gm, values = trace(fn, *args, run=run)
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
                if s.all_reduces or s.all_to_alls:  # the op's own collectives: tests/lowering (test_sync_norm.py, test_experts.py) run them
                    continue
                outputs = values[fx_node.name] if isinstance(values[fx_node.name], (tuple, list)) else (values[fx_node.name],)
                if not all(divides(values[o.name], p, m.shape) for o, p in zip(operands, s.inputs)):
                    continue
                if not all(divides(v, p, m.shape) for v, p in zip(outputs, s.outputs)):
                    continue
                check_strategy(fx_node, values, operands, s, m.shape, seed=checked)
                checked += 1
    return checked


def real(*shape, dtype=torch.float64):
    """A random tensor of ``shape`` (float64 unless ``dtype`` says otherwise)."""
    return torch.randn(*shape, dtype=dtype)

CASES = {
    "mm": (lambda a, b: a @ b, (real(4, 8), real(8, 4))),
    "linear": (lambda x, w, b: F.linear(x, w, b), (real(4, 8), real(4, 8), real(4))),
    "bmm": (torch.bmm, (real(4, 4, 8), real(4, 8, 4))),
    "baddbmm": (torch.baddbmm, (real(4, 4, 4), real(4, 4, 8), real(4, 8, 4))),
    "layout": (lambda x: x.transpose(0, 2).permute(1, 0, 2), (real(4, 8, 4),)),
    "t": (lambda x: x.t(), (real(4, 8),)),
    "flatten": (lambda x: x.view(16, 8), (real(4, 4, 8),)),
    "unflatten": (lambda x: x.view(4, 4, 2, 4), (real(16, 8),)),
    "expand": (lambda x: x.expand(4, 4, 8), (real(4, 1, 8),)),
    "broadcast": (lambda x, y, z: torch.where(x > 0, x * y - z / 2, -x) + F.gelu(x) + F.silu(y), (real(4, 4, 8), real(4, 8), real(8))),
    "softmax": (lambda x: torch.softmax(x, -1) + torch.log_softmax(x, 1), (real(4, 4, 8),)),
    "safe_softmax": (lambda x: torch.ops.aten._safe_softmax(x, -1), (real(4, 4, 8),)),  # SDPA's math path in a trace
    "norms": (lambda x, w, b: F.layer_norm(x, (8,), w, b) + F.rms_norm(x, (8,), w), (real(4, 4, 8), real(8), real(8))),
    "embedding": (lambda w, i: F.embedding(i, w), (real(8, 4), torch.randint(0, 8, (4, 4)))),
    "floor_divide": (lambda x, i: x * (i // 2) + (i // i.clamp(min=1)), (real(4, 8), torch.randint(-8, 8, (4, 8)))),
    "index_select": (lambda x, i: x.index_select(1, i), (real(4, 8, 4), torch.randint(0, 8, (4,)))),
    "index": (lambda x, i, j: x[i] * x[:, j] + x[:, :, j] + x[i[:, None], j] + (x[i, :, j] - x[:, i, j])[:, None],
              (real(4, 4, 4), torch.randint(0, 4, (4,)), torch.randint(0, 4, (4,)))),
    "index_put": (lambda x, i, j, p, v: torch.ops.aten.index_put(x, [p], v) + torch.ops.aten.index_put(x, [i], v, True)
                  + torch.ops.aten.index_put(x, [None, i], v[0], True) + torch.ops.aten.index_put(x, [i[:, None], None, j], v, True),
                  (real(4, 4, 4), torch.randint(0, 4, (4,)), torch.randint(0, 4, (4,)), torch.randperm(4), real(4, 4, 4))),
    "scatter": (lambda x, i, s: x.scatter(1, i, s) + x.scatter(1, i, 2.0) + x.scatter_add(1, i, s)
                + x.scatter_reduce(1, i, s, "amax") + x.scatter_add(1, i[:2], s[:2]),
                (real(4, 8, 4), torch.rand(4, 8, 4).argsort(1)[:, :4], real(4, 4, 4))),
    "index_add": (lambda x, i, j, s: x.index_add(1, i, s, alpha=2.0) + x.index_add(1, i[:2], s[:, :2])
                  + x.index_add(-1, j, x[:, :, :2]),
                  (real(4, 8, 4), torch.randint(0, 8, (4,)), torch.randint(0, 4, (2,)), real(4, 4, 4))),
    "fill": (lambda x, v: torch.ops.aten.fill(x, 2.0) * x + torch.ops.aten.fill(x, v), (real(4, 4, 8), real(()))),
    "reductions": (lambda x: x.sum((0, 2), keepdim=True) + x.mean(1, keepdim=True) + x.sum(), (real(4, 4, 8),)),
    "cat_split": (lambda x, y: torch.cat([x, y], 1).split([4, 8], dim=1)[1] + torch.chunk(y, 2, 2)[0].repeat(1, 1, 2), (real(4, 4, 8), real(4, 8, 8))),
    "stack_unbind": (lambda x, y: (torch.stack([x, y], 1).unbind(2)[1], torch.stack(x.unbind(0), 2)), (real(4, 4, 8), real(4, 4, 8))),
    "slicing": (lambda x: x[:, 2:4] + x[:, 0:2] * x[:, 0:2].select(2, 1).unsqueeze(2), (real(4, 4, 8),)),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (real(4, 4, 8, 4, dtype=torch.float32),) * 3),
    "conv": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (real(4, 4, 4, 4), real(4, 4, 3, 3), real(4))),
    "pooling": (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2) + F.adaptive_avg_pool2d(x, 2), (real(4, 4, 4, 4),)),
    "batch_norm_eval": (lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False),
                        (real(4, 4, 2, 2), real(4), real(4), real(4), real(4).abs() + 0.5)),
}
"""Small functions over real tensors, by name: each traced op's strategies are checked against torch."""
