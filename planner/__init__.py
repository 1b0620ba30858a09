"""planner: an ILP sharding planner that shards only what shapecore proves divides evenly.

Public API: :class:`Mesh`; the :class:`Plan` and its parts (see :mod:`planner.plan` for the
contract the lowering relies on).
"""

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

__all__ = [
    "Alternative",
    "BatchCost",
    "CollectiveStep",
    "CostBreakdown",
    "Decision",
    "MemoryBreakdown",
    "Mesh",
    "Plan",
    "PrunedStrategy",
    "Redistribution",
    "ShardProof",
    "SolverStats",
]
