"""PlanOptions: every choice :func:`~planner.plan` and :func:`~planner.api.prepare` take besides the graph.

One frozen dataclass, one line per field, checked as it is made: a bad value is an error
naming the field, what it allows and what was given, raised before any tracing or solving.
The entry points take it as ``options=`` or build it from keywords
(``plan(gm, mesh, shape_env=env, constraints=[...], batch_sizes=[...])``); keywords given
beside ``options=`` replace its fields. What describes the trace rather than the planning
(``shape_env``, ``dims``) and how progress is reported (``progress``) are arguments of the
entry points, not options.

A :class:`~planner.plan.Plan` records the options it was made with (:meth:`PlanOptions.to_dict`).
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sympy

from planner.batches import BatchSizes
from planner.cost import CostModel, Hardware, resolve_hardware
from planner.divisibility import POLICIES, Policy
from planner.placement_constraints import PlacementConstraint, check_constraints
from planner.strategies import StrategyProvider

__all__ = ["PlanOptions", "Objective", "RegretMode", "Solver", "OBJECTIVES", "REGRET_MODES", "SOLVERS", "options_from"]

Objective = Literal["expected", "regret", "worst-regret"]
RegretMode = Literal["bound", "exact", "off"]
Solver = Literal["highs", "cbc", "greedy"]
OBJECTIVES: tuple[Objective, ...] = ("expected", "regret", "worst-regret")
REGRET_MODES: tuple[RegretMode, ...] = ("bound", "exact", "off")
SOLVERS: tuple[Solver, ...] = ("highs", "cbc", "greedy")

_COST_MODEL_METHODS = ("compute_seconds", "collective_seconds", "memory_bytes")


@dataclass(frozen=True)
class PlanOptions:
    """How to plan: costs, batch sizes, constraints, divisibility policy, solver and objective."""

    hardware: str | Hardware = "h100-nvlink"
    """Device constants for the default cost model: a preset name (``HARDWARE_PRESETS``) or a ``Hardware``."""
    batch_sizes: BatchSizes = None
    """Where symbolic sizes are costed, with weights (see :mod:`planner.batches`); None: the example's sizes."""
    constraints: Sequence[str | sympy.Basic] = ()
    """Guard texts over the ``Dim`` names or the trace's symbols that every input will satisfy."""
    placement_constraints: Sequence[PlacementConstraint] = ()
    """Placements the plan must take: :class:`~planner.Pin`, :class:`~planner.ForbidShard`,
    :class:`~planner.RequireShard`, :class:`~planner.MinShards` (see :mod:`planner.placement_constraints`)."""
    unbacked_sizes: Mapping[str, int | str] = dataclasses.field(default_factory=dict)
    """Expected value of each data-dependent (unbacked) size, by symbol: an int or an expression over
    Dim names (``{"u0": "batch // 4"}``); an unnamed one is costed at half the largest size (recorded
    over the Dim names: ``batch // 2``), see :mod:`planner.batches`."""
    memory_budget: float | None = None
    """Bytes per device the plan may use (parameters, gradients, optimizer state, activations); None: no limit."""
    divisibility: Policy = "prove"
    """``prove``: shard only where shapecore proves even division; ``assume``: guard the unknown; ``uneven``: pad."""
    solver: Solver = "highs"
    """``highs`` or ``cbc`` (python-mip), or ``greedy`` (the baseline, no optimality)."""
    objective: Objective = "expected"
    """``expected`` cost over the batch points, mean ``regret`` against each point's optimum, or ``worst-regret``."""
    regret: RegretMode = "bound"
    """Each point's own optimum: ``bound`` (LP relaxation, fast), ``exact`` (its MIP) or ``off`` (no regret report)."""
    time_limit: float = 60
    """Seconds per solve (the plan's, and each point's own under ``regret="exact"``)."""
    mip_gap: float = 1e-4
    """The ILP stops once its plan is proved within this fraction of the optimum (its relative gap):
    a plan found so is the same on any machine load, one stopped by ``time_limit`` may not be."""
    strategies: Sequence[StrategyProvider] | None = None
    """Strategy providers, asked in order per node; None: the built-in rules, then DTensor's."""
    cost_model: CostModel | None = None
    """Prices compute, collectives and memory; None: ``AlphaBetaCostModel(hardware, mesh)``."""
    cluster: bool = True
    """Identical layers share one decision (a restriction that makes large graphs tractable)."""
    merge_followers: bool = True
    """An elementwise or layout op keeps its first operand's placement when that costs nothing."""
    replicate_outputs: bool = False
    """Deliver the user's outputs replicated on every device."""
    explain: bool = True
    """Record each node's runners-up for :meth:`Plan.explain <planner.plan.Plan.explain>`."""

    def __post_init__(self) -> None:
        if not isinstance(self.hardware, (str, Hardware)):
            raise TypeError(f"hardware must be a preset name or a planner.Hardware, got {self.hardware!r}")
        resolve_hardware(self.hardware)
        _check_constraints(self.constraints)
        if not isinstance(self.unbacked_sizes, Mapping):
            raise TypeError(f"unbacked_sizes must map symbols to ints or expressions, got {self.unbacked_sizes!r}")
        object.__setattr__(self, "unbacked_sizes", dict(self.unbacked_sizes))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        object.__setattr__(self, "placement_constraints", check_constraints(self.placement_constraints))
        if self.memory_budget is not None:
            _check_positive("memory_budget", self.memory_budget, "bytes per device, or None for no limit")
        _check_choice("divisibility", self.divisibility, POLICIES)
        _check_choice("solver", self.solver, SOLVERS)
        _check_choice("objective", self.objective, OBJECTIVES)
        _check_choice("regret", self.regret, REGRET_MODES)
        _check_positive("time_limit", self.time_limit, "seconds")
        if isinstance(self.mip_gap, bool) or not isinstance(self.mip_gap, numbers.Real) or not 0 <= self.mip_gap < 1:
            raise ValueError(f"mip_gap must be a fraction in [0, 1) (the relative gap the ILP stops at), got {self.mip_gap!r}")
        if self.strategies is not None:
            _check_strategies(self.strategies)
            object.__setattr__(self, "strategies", tuple(self.strategies))
        if self.cost_model is not None:
            missing = [m for m in _COST_MODEL_METHODS if not callable(getattr(self.cost_model, m, None))]
            if missing:
                raise TypeError(f"cost_model must be a planner.CostModel (methods {', '.join(_COST_MODEL_METHODS)}); "
                                f"{type(self.cost_model).__name__} lacks {', '.join(missing)}")
        for name in ("cluster", "merge_followers", "replicate_outputs", "explain"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.objective != "expected" and self.regret == "off":
            raise ValueError(f"objective={self.objective!r} measures each batch point against its own optimum: "
                             "use regret='bound' or 'exact'")
        if self.objective == "worst-regret" and self.solver == "greedy":
            raise ValueError("the greedy baseline has no worst-regret objective: use objective='regret' or solver='highs'")

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values: strategy providers by name, a cost model by class, constraints as text."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "hardware" and isinstance(value, Hardware):
                value = dataclasses.asdict(value)
            elif f.name == "strategies" and value is not None:
                value = [provider.name for provider in value]
            elif f.name == "cost_model" and value is not None:
                value = type(value).__qualname__
            out[f.name] = _json_value(value)
        return out


def options_from(options: PlanOptions | None, keywords: Mapping[str, Any], *, caller: str) -> PlanOptions:
    """``options`` (or the defaults) with the fields named in ``keywords`` replaced.

    A keyword that is no field is a TypeError naming it, the closest field and every field.
    """
    if options is not None and not isinstance(options, PlanOptions):
        raise TypeError(f"{caller}() options must be a planner.PlanOptions, got {type(options).__name__}")
    names = [f.name for f in dataclasses.fields(PlanOptions)]
    for key in keywords:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{hint}; "
                            f"its options are the fields of planner.PlanOptions: {', '.join(names)}")
    base = options if options is not None else PlanOptions()
    return dataclasses.replace(base, **keywords) if keywords else base


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _check_positive(name: str, value: Any, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number ({unit}), got {value!r}")


def _check_constraints(constraints: Any) -> None:
    if isinstance(constraints, (str, sympy.Basic)) or not isinstance(constraints, Sequence):
        raise TypeError(f"constraints must be a list of guard texts such as ['Eq(Mod(batch, 4), 0)'], got {constraints!r}")
    for k, c in enumerate(constraints):
        if not isinstance(c, (str, sympy.Basic)):
            raise TypeError(f"constraints[{k}] must be a guard text such as 'Eq(Mod(batch, 4), 0)', got {c!r}")


def _check_strategies(strategies: Any) -> None:
    if isinstance(strategies, str) or not isinstance(strategies, Sequence):
        raise TypeError(f"strategies must be a list of planner.StrategyProvider, got {strategies!r}")
    for k, provider in enumerate(strategies):
        if not isinstance(getattr(provider, "name", None), str) or not callable(getattr(provider, "strategies", None)):
            raise TypeError(f"strategies[{k}] must be a planner.StrategyProvider (a name and a strategies(node, graph, mesh) "
                            f"method), got {provider!r}")


def _json_value(value: Any) -> Any:
    """``value`` as JSON data that survives a round trip unchanged (tuples as lists, int keys as pairs)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        items = [(_json_value(k), _json_value(v)) for k, v in value.items()]
        return dict(items) if all(isinstance(k, str) for k, _ in items) else [list(item) for item in items]
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return str(value)
