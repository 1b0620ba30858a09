"""planner: an ILP sharding planner that shards only what shapecore proves divides evenly.

* :func:`plan` (a traced graph) and :func:`plan_module` (a module: trace, then plan) return a
  :class:`Plan` (see :mod:`planner.plan` for the contract the lowering relies on: placements,
  redistributions, guards, and the roles of the graph's inputs (:class:`GraphInput`) and
  outputs (:class:`GraphOutput`)); ``plan_module`` and ``lowering.ParallelModule`` trace through
  :func:`trace_module` (options checked first, a trace covering the batch sizes, a
  :class:`ModuleTrace` that plans itself, its :class:`DimNames` the one map between the user's
  ``Dim`` names and the trace's symbols), callers planning a trace of their own take
  :func:`shapecore.torch.trace_for_planning`; how they plan is a :class:`PlanOptions` (or its
  fields as keywords, checked by :func:`options_from`);
* :class:`Mesh` (:meth:`Mesh.shard_factor`) and :func:`as_mesh`; placements as text
  (:func:`format_placements`, :func:`parse_placements`);
* :class:`Hardware` and the presets in :data:`HARDWARE_PRESETS`; :func:`calibrate` measures
  one on the live process group (saved and loaded as JSON: :meth:`Hardware.save`, :meth:`Hardware.load`);
* placement constraints (``PlanOptions.placement_constraints``): :class:`Pin`,
  :class:`ForbidShard`, :class:`RequireShard`, :class:`MinShards`, :class:`ExpertParallel`, targets seen as
  :class:`NodeInfo`; an unsatisfiable set raises :class:`PlacementConflict`;
* ``PlanOptions.memory_budget``: a plan's peak memory per device is :attr:`CostBreakdown.memory`
  (a :class:`MemoryBreakdown`); a budget no plan fits raises :class:`MemoryBudgetError`, which
  says what the plan needing the least memory needs;
* pluggable parts: :class:`StrategyProvider` (with :class:`BuiltinProvider` and
  :class:`DTensorProvider`), :class:`CostModel` (default :class:`AlphaBetaCostModel`);
* :func:`tensor_operands` — how operands are numbered in a plan;
* :data:`PER_TOKEN` — the rule (``Decision.rule``, one part per mesh axis joined by ``/``) of a
  node of a mixture of experts' routing chain on a mesh axis where each rank runs the chain on
  its own tokens (:mod:`planner.problem.per_token`): the lowering runs it there on the local
  tensors as they are, an ``arange`` giving the local positions; :func:`per_token_rule_axes`
  reads those axes from a rule, and :func:`expert_table_axes` the axes over which a per-expert
  table's gather or gradient's scatter (GPT-OSS's experts' biases) splits the table by the expert dim.
"""

from planner.api import ModuleTrace, plan, plan_module, trace_module
from planner.calibrate import calibrate
from planner.dim_names import DimNames
from planner.cost import HARDWARE_PRESETS, AlphaBetaCostModel, CostModel, Hardware, LinkCost, LocalTensor
from planner.graph import tensor_operands
from planner.ilp import MemoryBudgetError
from planner.mesh import Mesh, as_mesh
from planner.options import PlanOptions, options_from
from planner.plan import (
    Alternative,
    BatchCost,
    CollectiveStep,
    CostBreakdown,
    Decision,
    GraphInput,
    GraphOutput,
    MemoryBreakdown,
    Plan,
    PrunedStrategy,
    Redistribution,
    ShardProof,
    SolverStats,
)
from planner.placement_constraints import (ExpertParallel, ForbidShard, MinShards, NodeInfo, Pin, PlacementConflict,
                                          PlacementConstraint, RequireShard)
from planner.placements import format_placements, parse_placements
from planner.problem.per_token import PER_TOKEN, expert_table_axes, per_token_rule_axes
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
    "DimNames",
    "ForbidShard",
    "GraphInput",
    "GraphOutput",
    "Hardware",
    "LinkCost",
    "LocalTensor",
    "MemoryBreakdown",
    "MemoryBudgetError",
    "MinShards",
    "ExpertParallel",
    "ModuleTrace",
    "PER_TOKEN",
    "NodeInfo",
    "Mesh",
    "Pin",
    "Plan",
    "PlanOptions",
    "PlacementConflict",
    "PlacementConstraint",
    "PrunedStrategy",
    "Redistribution",
    "RequireShard",
    "ShardProof",
    "SolverStats",
    "Strategy",
    "StrategyProvider",
    "as_mesh",
    "calibrate",
    "expand",
    "format_placements",
    "options_from",
    "parse_placements",
    "per_token_rule_axes",
    "expert_table_axes",
    "plan",
    "plan_module",
    "tensor_operands",
    "trace_module",
]
