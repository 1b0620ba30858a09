"""planner: an ILP sharding planner that shards only what shapecore proves divides evenly.

* :func:`plan` (a traced graph) and :func:`plan_module` (a module: trace, then plan) return a
  :class:`Plan` (see :mod:`planner.plan` for the contract the lowering relies on);
  :func:`trace_for_planning` is the trace ``plan_module`` makes, for callers that plan it themselves;
* :class:`Mesh`; :class:`Hardware` and the presets in :data:`HARDWARE_PRESETS`;
* pluggable parts: :class:`StrategyProvider` (with :class:`BuiltinProvider` and
  :class:`DTensorProvider`), :class:`CostModel` (default :class:`AlphaBetaCostModel`);
* :func:`tensor_operands` — how operands are numbered in a plan.
"""

from planner.api import plan, plan_module, trace_for_planning
from planner.cost import HARDWARE_PRESETS, AlphaBetaCostModel, CostModel, Hardware, LocalTensor
from planner.graph import tensor_operands
from planner.mesh import Mesh
from planner.plan import (
    Alternative,
    BatchCost,
    CollectiveStep,
    CostBreakdown,
    Decision,
    MemoryBreakdown,
    Plan,
    PrunedStrategy,
    Redistribution,
    ShardProof,
    SolverStats,
)
from planner.strategies import AxisRule, BuiltinProvider, DTensorProvider, Strategy, StrategyProvider, expand

__all__ = [
    "HARDWARE_PRESETS",
    "AlphaBetaCostModel",
    "Alternative",
    "AxisRule",
    "BatchCost",
    "BuiltinProvider",
    "CollectiveStep",
    "CostBreakdown",
    "CostModel",
    "DTensorProvider",
    "Decision",
    "Hardware",
    "LocalTensor",
    "MemoryBreakdown",
    "Mesh",
    "Plan",
    "PrunedStrategy",
    "Redistribution",
    "ShardProof",
    "SolverStats",
    "Strategy",
    "StrategyProvider",
    "expand",
    "plan",
    "plan_module",
    "tensor_operands",
    "trace_for_planning",
]
