"""Strategies: what a node may do, as placements of its outputs and of the operands it needs.

A :class:`Strategy` is one way to run a node across the whole mesh: a placement tuple per
output (``None`` for a non-tensor output) and per tensor operand, plus the name of the rule
that produced it. A :class:`StrategyProvider` proposes strategies for nodes it understands and
returns ``None`` for the rest; the planner asks providers in order and plans a node no
provider covers as fully replicated, with a warning naming the op.

Most rules are easiest to state for one mesh axis at a time (:class:`AxisRule`): "shard the
rows of the left operand, get rows of the output". :func:`expand` turns per-axis rules into
mesh strategies by choosing one rule per axis (the cartesian product, as DTensor does), so a
provider writes 1-D rules and gets every mesh for free. Whether a sharded dim divides evenly
is not a provider's concern: the planner checks every ``Shard`` against shapecore afterwards.

A strategy may need collectives inside the op itself (batch norm split on the batch reduces
its statistics over the ranks that hold the batch): ``all_reduces`` lists them as (mesh axis,
elements reduced), and the planner prices them like any other collective. Expert parallelism
exchanges rows inside the op (:mod:`lowering.expert_dispatch`: the counts, the routed rows to
their expert's rank, the results back): ``all_to_alls`` lists each exchanged tensor as (mesh
axis, tensor), the tensor an index into the operands followed by the outputs, priced at its
local bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from planner.graph import GraphNode, PlanGraph
from planner.mesh import Mesh
from planner.placements import Placement, Placements, format_placements

__all__ = ["Strategy", "AxisRule", "StrategyProvider", "expand"]


@dataclass(frozen=True)
class Strategy:
    """Placements of every output and of every tensor operand, for the whole mesh."""

    outputs: tuple[Placements | None, ...]
    inputs: tuple[Placements, ...]
    rule: str = ""
    all_reduces: tuple[tuple[int, int], ...] = ()
    """(mesh axis, elements) of each all-reduce the op itself performs under this strategy."""
    all_to_alls: tuple[tuple[int, int], ...] = ()
    """(mesh axis, tensor) of each tensor the op itself exchanges by an ``all_to_all``: operand
    ``k`` is tensor ``k``, output ``i`` is tensor ``len(inputs) + i``; its local piece is sent."""

    def __str__(self) -> str:
        outs = " | ".join(format_placements(p) for p in self.outputs)
        ins = "; ".join(format_placements(p) for p in self.inputs)
        return f"{outs} <- {ins}" if self.inputs else outs


@dataclass(frozen=True)
class AxisRule:
    """One mesh axis's view of a strategy: a placement per output and per tensor operand."""

    outputs: tuple[Placement | None, ...]
    inputs: tuple[Placement, ...]
    name: str
    all_reduces: tuple[int, ...] = ()
    """Elements of each all-reduce the op performs over this axis under the rule."""
    all_to_alls: tuple[int, ...] = ()
    """Tensors (operands, then outputs) the op exchanges by an ``all_to_all`` over this axis."""


@runtime_checkable
class StrategyProvider(Protocol):
    """Proposes strategies for a node; ``None`` means "not mine, ask the next provider"."""

    name: str

    def strategies(self, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> list[Strategy] | None: ...


def expand(rules: Sequence[AxisRule], mesh: Mesh) -> list[Strategy]:
    """Every choice of one rule per mesh axis, as mesh strategies (duplicates dropped, order kept).

    The rule name of a strategy joins the per-axis names with ``/`` (``batch/colwise``).
    """
    if not rules:
        return []
    seen: set[tuple] = set()
    result: list[Strategy] = []
    for combo in itertools.product(rules, repeat=mesh.ndim):
        outputs = tuple(
            None if combo[0].outputs[i] is None else tuple(r.outputs[i] for r in combo)  # type: ignore[misc]
            for i in range(len(combo[0].outputs))
        )
        inputs = tuple(tuple(r.inputs[i] for r in combo) for i in range(len(combo[0].inputs)))
        key = (outputs, inputs)
        if key in seen:
            continue
        seen.add(key)
        reduces = tuple((axis, n) for axis, r in enumerate(combo) for n in r.all_reduces)
        exchanged = tuple((axis, k) for axis, r in enumerate(combo) for k in r.all_to_alls)
        result.append(Strategy(outputs, inputs, "/".join(r.name for r in combo), reduces, exchanged))
    return result
