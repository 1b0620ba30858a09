"""Breadth from DTensor: the sharding strategies ``torch.distributed.tensor`` registers per op.

DTensor's sharding propagator keeps two tables:

* single-mesh-dim strategies (``op_single_dim_strategy_funcs``, over a thousand ops): a list
  of ``[outputs..., inputs...]`` placements for one mesh axis, with ``_ShardingPlaceholder(d)``
  standing for ``Shard(d)``. They need no mesh; this provider turns them into
  :class:`~planner.strategies.base.AxisRule` s and expands them over the mesh like the
  built-in rules.
* whole-mesh strategy functions (``op_strategy_funcs``): called with an ``OpSchema`` whose
  tensor arguments are ``OpStrategy`` s listing every non-partial placement of the operand, on
  a ``DeviceMesh`` built with ``_init_backend=False`` (no process group is created or needed),
  through ``shapecore.torch.private.whole_mesh_strategies``: a rule that refuses the whole list
  (a view rule at one placement it cannot view) is asked about each placement alone.

Tensor shapes are given to DTensor at the hints (DTensor's rules read concrete sizes); the
planner still checks every resulting ``Shard`` symbolically afterwards. Strategies with
placements plans do not use (``_StridedShard``, partials other than sum) are dropped. A
DTensor rule that raises for a node is treated as "no strategy" for it.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.mesh import Mesh
from planner.placements import Partial, Placement, Placements, Replicate, Shard
from planner.strategies.base import AxisRule, Strategy, expand

__all__ = ["DTensorProvider"]

log = logging.getLogger(__name__)


def _plannable(p: Any) -> bool:
    if type(p) is Shard or type(p) is Replicate:
        return True
    return type(p) is Partial and p.reduce_op == "sum"


class DTensorProvider:
    """Strategies from DTensor's registered op rules (see the module docstring)."""

    name = "dtensor"

    def __init__(self) -> None:
        self._meshes: dict[Mesh, Any] = {}

    def strategies(self, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> list[Strategy] | None:
        from shapecore.torch.private import OpOverload, sharding_propagator

        op = node.fx.target if node.fx is not None else None
        if node.role != "op" or not isinstance(op, OpOverload):
            return None
        propagator = sharding_propagator()
        try:
            single = propagator.op_single_dim_strategy_funcs.get(op)
            if single is not None:
                return self._from_single_dim(single, op, node, graph, mesh)
            full = propagator.op_strategy_funcs.get(op)
            if full is not None:
                return self._from_full_mesh(full, op, node, graph, mesh)
        except Exception as exc:  # DTensor's rules assert freely on shapes they do not expect
            log.debug("DTensor strategy for %s (%s) failed: %s", node.name, op, exc)
        return None

    # -- single-mesh-dim rules --------------------------------------------------------------

    def _from_single_dim(self, info: Any, op: Any, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> list[Strategy] | None:
        from shapecore.torch.private import ShardingPlaceholder

        args, kwargs = _schema_args(node, graph, lambda meta: _tensor_meta(meta, graph.hints))
        n_out, n_in = len(node.outputs), len(node.operands)
        rules = [AxisRule(tuple(None if m is None else Replicate() for m in node.outputs), (Replicate(),) * n_in, "replicate")]
        for k, row in enumerate(info.func(op, args, kwargs)):
            if len(row) != n_out + n_in:
                return None
            converted = [Shard(p.dim) if isinstance(p, ShardingPlaceholder) else p for p in row]
            outputs, inputs = converted[:n_out], converted[n_out:]
            if any(p is None for p in inputs) or not all(_plannable(p) for p in converted if p is not None):
                continue
            if any((p is None) != (m is None) for p, m in zip(outputs, node.outputs)):
                continue
            rules.append(AxisRule(tuple(outputs), tuple(inputs), f"dtensor{k}"))
        return expand(rules, mesh)

    # -- whole-mesh rules -------------------------------------------------------------------

    def _device_mesh(self, mesh: Mesh) -> Any:
        found = self._meshes.get(mesh)
        if found is None:
            from shapecore.torch.private import device_mesh_without_process_group

            found = self._meshes[mesh] = device_mesh_without_process_group(mesh.shape, mesh.axis_names)
        return found

    def _from_full_mesh(self, func: Any, op: Any, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> list[Strategy] | None:
        from shapecore.torch.private import DTensorSpec, OpSpec, OpStrategy, whole_mesh_strategies

        device_mesh = self._device_mesh(mesh)

        def candidates(meta: TensorMeta) -> Any:
            tensor_meta = _tensor_meta(meta, graph.hints)
            return OpStrategy([OpSpec(DTensorSpec(device_mesh, ps, tensor_meta)) for ps in _all_placements(meta.ndim, mesh.ndim)])

        args, kwargs = _schema_args(node, graph, candidates)
        specs = whole_mesh_strategies(func, op, args, kwargs)
        if specs is None:
            return None
        strategies = [Strategy(tuple(None if m is None else tuple(Replicate() for _ in range(mesh.ndim)) for m in node.outputs),
                               tuple((Replicate(),) * mesh.ndim for _ in node.operands), "replicate")]
        for k, spec in enumerate(specs):
            outputs = spec.output_specs if isinstance(spec.output_specs, (tuple, list)) else (spec.output_specs,)
            if len(outputs) != len(node.outputs) or spec.input_specs is None or len(spec.input_specs) != len(node.operands):
                continue
            outs = tuple(None if o is None else tuple(o.placements) for o in outputs)
            ins = tuple(tuple(i.placements) for i in spec.input_specs)
            if all(_plannable(p) for ps in outs + ins if ps is not None for p in ps):
                strategies.append(Strategy(outs, ins, f"dtensor{k}"))  # type: ignore[arg-type]
        return list(dict.fromkeys(strategies))


def _tensor_meta(meta: TensorMeta, hints: dict[str, int]) -> Any:
    import torch

    from shapecore import evaluate
    from shapecore.torch.private import DTensorMeta

    shape = torch.Size(int(evaluate(s, hints)) for s in meta.shape)
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return DTensorMeta(shape, tuple(reversed(stride)), getattr(torch, meta.dtype))


def _schema_args(node: GraphNode, graph: PlanGraph, tensor: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The node's args with tensor operands replaced by ``tensor(meta)`` and SymInts by hints."""
    import torch
    from torch.fx.node import Node, map_aggregate

    from shapecore import evaluate
    from shapecore.torch import size_expr

    def convert(a: Any) -> Any:
        if not isinstance(a, Node):
            return a
        value = a.meta.get("val")
        if isinstance(value, torch.Tensor):
            return tensor(graph.nodes[a.name].output)
        if isinstance(value, torch.SymInt):
            return int(evaluate(size_expr(value), graph.hints))
        return value

    return tuple(map_aggregate(node.fx.args, convert)), dict(map_aggregate(dict(node.fx.kwargs), convert))


def _all_placements(tensor_ndim: int, mesh_ndim: int) -> list[Placements]:
    per_axis: list[Placement] = [Replicate()] + [Shard(d) for d in range(tensor_ndim)]
    return [tuple(c) for c in itertools.product(per_axis, repeat=mesh_ndim)]
