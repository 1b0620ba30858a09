"""Plan: what the planner decided, and everything the lowering and a reader need to trust it.

The contract (names and meanings the lowering relies on):

* ``mesh`` — the :class:`~planner.mesh.Mesh` the plan is for. Every placement is a tuple of
  ``torch.distributed.tensor`` placements (``Shard(d)``, ``Replicate()``, ``Partial()``), one
  per mesh axis, in mesh-axis order.
* ``placements[name]`` — placement of the output of FX node ``name``, for every node whose
  value is one tensor (placeholders, ops, ``getitem`` of a multi-output op). Nodes that yield
  no tensor (SymInt arithmetic, ``sym_size``) are absent.
* ``tuple_placements[name]`` — for a node that yields a tuple or list (``native_layer_norm``,
  ``split``, ``chunk``, SDPA variants): one entry per element, ``None`` for a non-tensor
  element. Such nodes are not in ``placements``; each ``getitem`` that reads them is, with the
  placement of the element it selects.
* Operands: operand ``k`` of a node is the ``k``-th tensor-valued FX node met when flattening
  ``(args, kwargs)`` in order (see :func:`planner.graph.tensor_operands`); a node reading one
  producer twice has two operands. The graph's ``output`` node is a consumer like any other.
* ``redistributions`` — one :class:`Redistribution` per operand whose producer's placement
  differs from what the consumer's strategy needs (an operand absent from the list is used in
  its producer's placement). Each carries the ordered :class:`CollectiveStep` list (one mesh
  axis per step) and its cost. ``operand_placements(consumer, k)`` answers for any operand.
* ``param_placements`` — parameter/buffer fully qualified name → placements.
  ``input_placements`` — one entry per flattened user input (``None`` for non-tensors);
  ``output_placements`` — one per flattened graph output, after its redistribution.
  In a joint training graph the gradient of a parameter is delivered in that parameter's
  placement, and a tangent input in the placement of the output it belongs to.
* ``graph_inputs`` — what feeds each tensor placeholder the plan places, in graph order: a
  :class:`GraphInput` whose ``role`` is ``input`` (``index``: its position among the flattened
  user inputs, as in ``input_placements``), ``param``, ``buffer`` or ``constant`` (``fqn``: the
  fully qualified name), or ``tangent`` (``index``: the user output it is the gradient seed
  of). A parameter or buffer placeholder that nothing reads (another name of a tied
  parameter) is absent, as it is from ``placements``.
* ``graph_outputs`` — one per flattened graph output, as ``output_placements`` (``None`` for a
  non-tensor): a :class:`GraphOutput` whose ``role`` is ``output`` (``index``: its position
  among the user outputs), ``grad`` (``grad_of``: the fqn of the parameter or buffer) or
  ``buffer_mutation`` (``fqn``: the buffer the model updates in place, such as a BatchNorm's
  running statistics in training; delivered in the buffer's placement, and written back).
* Mesh arithmetic: :meth:`Mesh.shard_factor` (into how many pieces a placement splits a dim)
  and :func:`~planner.mesh.as_mesh` (a ``DeviceMesh`` or a tuple of sizes as a ``Mesh``).
* ``trace_guards`` — torch-syntax conditions over the trace's symbol names that inputs must
  satisfy for the plan to be valid: the user's constraints (translated to trace symbols) and,
  under ``divisibility="assume"``, the obligations that were assumed rather than proved. The
  lowering reads these; ``guards`` are the same conditions over the user's ``Dim`` names
  (``Eq(Mod(batch, 4), 0)``), for people.
* ``names`` — the :class:`~planner.dim_names.DimNames` of the trace: each ``Dim`` name's
  trace expression and the batch symbol; every text the plan shows speaks these names.
* ``trace_sizes`` — each plain ``Dim``'s name → the size the graph was traced at (its symbol's
  hint): :class:`lowering.ParallelModule` given the plan traces the model at these sizes, so it
  lowers the graph the plan was made from (``plan_module`` traces at the covering example,
  :mod:`planner.trace_hint`, not at the example as given).
* ``proofs`` — one :class:`ShardProof` per (node, dim, mesh axes) the plan shards: the
  symbolic size, the obligation ``Eq(Mod(size, m), 0)`` and how it is justified (a proof's
  method, ``guard``, or ``uneven`` when padding was accepted). The lowering runs an ``uneven``
  split of a data-dependent size (method ``data-dependent``: the size is one unbacked symbol,
  split into ``torch.chunk``'s pieces, each rank's computed when the program runs), and refuses
  any other ``uneven`` one.
* ``pruned`` — each candidate strategy that was dropped, and why.
* ``cost`` (expected seconds and bytes per device), ``batch_costs`` (cost at each batch point
  beside that point's own optimum: the regret), ``stats`` (solver statistics).
* ``options`` — the :class:`~planner.options.PlanOptions` the plan was made with, as JSON
  values (:meth:`~planner.options.PlanOptions.to_dict`): a record for readers, not read back
  into options (strategy providers and a cost model appear by name).

Placements as text (tables, JSON): :func:`~planner.placements.format_placements` and
:func:`~planner.placements.parse_placements` (``S(0),R``).

JSON (``to_json``/``from_json``) is versioned and deterministic: keys sorted, floats printed
by ``repr`` after rounding to 12 significant digits, wall-clock timings left out unless asked
for, so the same inputs give byte-identical JSON in separate processes. Version 2 added
``graph_inputs`` and ``graph_outputs``; version 3, memory as the program's peak, with the batch
point and node where it is reached; version 4, ``trace_guards`` (the guards over trace symbols)
and ``dim_names`` (the ``Dim`` names and the batch symbol) where ``guards`` and ``dims`` were,
later ``trace_sizes`` (read as empty where absent); ``from_json`` reads version 4 only.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from planner.dim_names import DimNames
from planner.mesh import Mesh
from planner.placements import Placement, Placements, format_placements, parse_placement, parse_placements

__all__ = [
    "PLAN_FORMAT",
    "PLAN_VERSION",
    "CollectiveKind",
    "GraphInput",
    "GraphOutput",
    "CollectiveStep",
    "Redistribution",
    "ShardProof",
    "PrunedStrategy",
    "Alternative",
    "Decision",
    "MemoryBreakdown",
    "MEMORY_PARTS",
    "format_bytes",
    "CostBreakdown",
    "BatchCost",
    "SolverStats",
    "Plan",
]

PLAN_FORMAT = "planner.Plan"
PLAN_VERSION = 4

CollectiveKind = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "chunk", "to_partial"]
InputRole = Literal["input", "param", "buffer", "constant", "tangent"]
OutputRole = Literal["output", "grad", "buffer_mutation"]


MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")
"""What a device's memory holds, as :class:`MemoryBreakdown` names it."""
PART_NAMES = {"optimizer": "optimizer states"}  # how messages name a part, where it differs from its field


def format_bytes(value: float, *, up: bool = False) -> str:
    """``value`` bytes in decimal units to 4 significant digits (``70.43 kB``, ``1.5 GB``);
    ``up``: rounded up, so a budget of the printed size holds ``value``."""
    unit, size = next(((u, b) for u, b in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if abs(value) >= b), ("B", 1.0))
    scaled = value / size
    if up and scaled > 0:
        step = 10.0 ** (math.floor(math.log10(scaled)) - 3)
        scaled = math.ceil(round(scaled / step, 6)) * step
    return f"{scaled:.4g} {unit}"


def _num(x: float) -> float:
    """Round to 12 significant digits so JSON text does not depend on summation order noise."""
    return float(f"{x:.12g}")


@dataclass(frozen=True)
class GraphInput:
    """A tensor placeholder of the planned graph and what feeds it.

    ``role``: ``input`` (``index`` is its position among the flattened user inputs),
    ``param`` / ``buffer`` / ``constant`` (``fqn`` is its fully qualified name), or
    ``tangent`` (``index`` is the user output it is the gradient seed of).
    """

    name: str
    role: InputRole
    index: int | None = None
    fqn: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "index": self.index, "fqn": self.fqn}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GraphInput:
        return cls(d["name"], d["role"], d["index"], d["fqn"])


@dataclass(frozen=True)
class GraphOutput:
    """A tensor output of the planned graph: user output ``index``, the gradient of ``grad_of``, or
    (``buffer_mutation``) the new value of buffer ``fqn``, which the running program writes back."""

    role: OutputRole
    index: int | None = None
    grad_of: str | None = None
    fqn: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "index": self.index, "grad_of": self.grad_of, "fqn": self.fqn}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GraphOutput:
        return cls(d["role"], d["index"], d["grad_of"], d.get("fqn"))


@dataclass(frozen=True)
class CollectiveStep:
    """One change of one mesh axis's placement.

    ``kind`` and the tensor dims involved:

    * ``all_gather``: ``S(d) → R``, gathers along dim ``d``;
    * ``all_reduce``: ``P → R``;
    * ``reduce_scatter``: ``P → S(d)``, scatters along dim ``d``;
    * ``all_to_all``: ``S(d) → S(e)``, splits dim ``e`` and concatenates dim ``d``;
    * ``chunk``: ``R → S(d)``, a local slice (no communication);
    * ``to_partial``: ``R → P``, local: the value becomes a partial sum over the axis (the
      rank at coordinate 0 of the axis keeps it, the others hold zeros). Needed when a
      replicated bias joins a partial matmul output (row-parallel ``addmm``).

    ``cost`` is the expected seconds of this step at the plan's batch distribution.
    """

    axis: int
    kind: CollectiveKind
    src: Placement
    dst: Placement
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "kind": self.kind,
            "src": format_placements((self.src,)),
            "dst": format_placements((self.dst,)),
            "cost": _num(self.cost),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CollectiveStep:
        return cls(d["axis"], d["kind"], parse_placement(d["src"]), parse_placement(d["dst"]), d["cost"])


@dataclass(frozen=True)
class Redistribution:
    """Operand ``operand`` of ``consumer`` moves from ``src`` (its producer's placement) to ``dst``."""

    consumer: str
    operand: int
    producer: str
    src: Placements
    dst: Placements
    steps: tuple[CollectiveStep, ...]
    cost: float

    @property
    def collectives(self) -> tuple[CollectiveKind, ...]:
        return tuple(s.kind for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "operand": self.operand,
            "producer": self.producer,
            "src": format_placements(self.src),
            "dst": format_placements(self.dst),
            "steps": [s.to_dict() for s in self.steps],
            "cost": _num(self.cost),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Redistribution:
        return cls(
            d["consumer"],
            d["operand"],
            d["producer"],
            parse_placements(d["src"]),  # type: ignore[arg-type]
            parse_placements(d["dst"]),  # type: ignore[arg-type]
            tuple(CollectiveStep.from_dict(s) for s in d["steps"]),
            d["cost"],
        )

    def __str__(self) -> str:
        steps = ", ".join(f"{s.kind}@{s.axis}" for s in self.steps)
        return f"{self.producer} -> {self.consumer}[{self.operand}]: {format_placements(self.src)} => {format_placements(self.dst)} ({steps})"


@dataclass(frozen=True)
class ShardProof:
    """Why dim ``dim`` of ``node``'s output may be split; ``node`` reads ``consumer[k]`` for
    operand ``k`` of ``consumer`` as redistributed for it (``output[k]`` for graph outputs).

    ``status`` is ``proved`` (``method`` names the shapecore layer that proved it), ``guard``
    (assumed; the obligation is in the plan's guards) or ``uneven`` (refuted or unknown and
    accepted with padding under ``divisibility="uneven"``, or, with the method
    ``data-dependent``, a data-dependent size split into ``torch.chunk``'s pieces under any policy).
    """

    node: str
    dim: int
    size: str
    mesh_axes: tuple[str, ...]
    obligation: str
    status: Literal["proved", "guard", "uneven"]
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "dim": self.dim,
            "size": self.size,
            "mesh_axes": list(self.mesh_axes),
            "obligation": self.obligation,
            "status": self.status,
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShardProof:
        return cls(d["node"], d["dim"], d["size"], tuple(d["mesh_axes"]), d["obligation"], d["status"], d["method"])


@dataclass(frozen=True)
class PrunedStrategy:
    """A candidate strategy of ``node`` that was dropped before solving, and why."""

    node: str
    strategy: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "strategy": self.strategy, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrunedStrategy:
        return cls(d["node"], d["strategy"], d["reason"])


@dataclass(frozen=True)
class Alternative:
    """Another strategy of a node and how much more the plan would cost with it alone changed."""

    strategy: str
    delta: float

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "delta": _num(self.delta)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Alternative:
        return cls(d["strategy"], d["delta"])


@dataclass(frozen=True)
class Decision:
    """The strategy chosen for one node: its rule, its cost, and the runners-up.

    ``strategy`` is ``outputs <- operands`` in placement text; ``compute`` the node's expected
    compute seconds; ``incoming`` the expected seconds of redistributing its operands;
    ``alternatives`` the other surviving strategies with the change in total plan cost if only
    this node switched (cheapest first; recorded on the first instance of identical layers
    only); ``shared_with`` the node whose decision it shares
    (the first instance of an identical layer, the producer it follows, the parameter its
    gradient is tied to); ``same_candidates_as`` the node with the same signature whose
    pruning log in ``Plan.pruned`` also applies to this one.

    ``rule`` is one rule name (every axis), or one per mesh axis joined by ``/``. It is part
    of the plan's contract with the lowering, not only its explanation: on an axis whose rule is
    :data:`~planner.PER_TOKEN` (or ``PER_TOKEN + "+experts"``) the lowering runs the node on each
    rank's own tokens (:mod:`planner.problem.per_token`).
    """

    node: str
    op: str
    strategy: str
    rule: str
    provider: str
    compute: float
    incoming: float
    alternatives: tuple[Alternative, ...] = ()
    shared_with: str = ""
    same_candidates_as: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "strategy": self.strategy,
            "rule": self.rule,
            "provider": self.provider,
            "compute": _num(self.compute),
            "incoming": _num(self.incoming),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "shared_with": self.shared_with,
            "same_candidates_as": self.same_candidates_as,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(
            d["node"], d["op"], d["strategy"], d["rule"], d["provider"], d["compute"], d["incoming"],
            tuple(Alternative.from_dict(a) for a in d["alternatives"]), d["shared_with"], d["same_candidates_as"],
        )


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device at the plan's peak: the program step (graph ``node``) and batch
    ``point`` where the storages live at once hold the most, split by what they hold."""

    parameters: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    point: Mapping[str, int] = field(default_factory=dict)
    node: str = ""

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def __str__(self) -> str:
        """``70.43 kB per device at batch=24, node mm_5 (activations 45.44 kB, parameters 24.99 kB)``."""
        where = ", ".join([f"{k}={v}" for k, v in sorted(self.point.items())] + ([f"node {self.node}"] if self.node else []))
        parts = sorted(((getattr(self, part), PART_NAMES.get(part, part)) for part in MEMORY_PARTS), reverse=True)
        listed = ", ".join(f"{name} {format_bytes(value)}" for value, name in parts if value)
        return f"{format_bytes(self.total)} per device" + (f" at {where}" if where else "") + (f" ({listed})" if listed else "")

    def to_dict(self) -> dict[str, Any]:
        return {**{part: _num(getattr(self, part)) for part in MEMORY_PARTS}, "point": dict(sorted(self.point.items())),
                "node": self.node}


@dataclass(frozen=True)
class CostBreakdown:
    """Expected seconds per step (at the batch distribution) and bytes per device."""

    compute: float = 0.0
    communication: float = 0.0
    memory: MemoryBreakdown = field(default_factory=MemoryBreakdown)
    memory_budget: float | None = None

    @property
    def total(self) -> float:
        return self.compute + self.communication

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute": _num(self.compute),
            "communication": _num(self.communication),
            "memory": self.memory.to_dict(),
            "memory_budget": self.memory_budget,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CostBreakdown:
        return cls(d["compute"], d["communication"], MemoryBreakdown(**d["memory"]), d["memory_budget"])


@dataclass(frozen=True)
class BatchCost:
    """The plan's cost at one batch point beside the optimum solved for that point alone.

    ``optimum`` is that optimum when ``optimum_exact``, else a lower bound on it, so
    :attr:`regret` never understates. ``optimum_source`` says how it was found: ``"mip"`` (the
    point's own ILP), ``"lp relaxation"`` (exact when the relaxation's optimum is a plan) or
    ``"partial lp relaxation"`` (the relaxation stopped at its time limit: a weaker bound, see
    :meth:`planner.ilp.IlpModel.lower_bound`).
    """

    values: Mapping[str, int]
    weight: float
    cost: float
    optimum: float | None = None
    optimum_exact: bool = False
    optimum_source: str | None = None

    @property
    def regret(self) -> float | None:
        """``cost / optimum`` (1.0 is optimal): exact when ``optimum_exact``, else an upper bound."""
        if self.optimum is None:
            return None
        return self.cost / self.optimum if self.optimum > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": dict(sorted(self.values.items())),
            "weight": _num(self.weight),
            "cost": _num(self.cost),
            "optimum": None if self.optimum is None else _num(self.optimum),
            "optimum_exact": self.optimum_exact,
            "optimum_source": self.optimum_source,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BatchCost:
        return cls(d["values"], d["weight"], d["cost"], d["optimum"], d["optimum_exact"], d.get("optimum_source"))


_TIMINGS = ("build_seconds", "solve_seconds", "regret_seconds")


@dataclass(frozen=True)
class SolverStats:
    """How the plan was found.

    ``objective_kind`` is ``expected``, ``regret`` or ``worst-regret``; ``objective`` the expected cost (seconds)
    of the plan, ``bound`` the solver's lower bound on it and ``gap`` the relative gap of the
    problem solved; ``decision_nodes`` the one-hot decisions after clustering and merging.
    ``build_seconds`` (reading the graph, deciding obligations, building the problem and the
    model), ``solve_seconds`` (the plan's solve) and ``regret_seconds`` (the per-point optima)
    are wall-clock and not part of the default JSON (they would break byte-identical output).
    """

    solver: str
    objective_kind: str
    status: str
    graph_nodes: int
    decision_nodes: int
    variables: int
    constraints: int
    objective: float
    bound: float | None
    gap: float | None
    clusters: int = 0
    clustered_nodes: int = 0
    merged_followers: int = 0
    build_seconds: float = 0.0
    solve_seconds: float = 0.0
    regret_seconds: float = 0.0

    def to_dict(self, *, timings: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _TIMINGS and not timings:
                continue
            out[f.name] = _num(value) if isinstance(value, float) else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SolverStats:
        return cls(**d)


_COSTLIEST = 5
_WIDTH = 100
_LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.)")


def _names(fqns: list[str]) -> list[str]:
    """Parameter names, those of identical layers folded: ``layers.*.mlp.fc1.weight (x32)``."""
    folded = Counter(_LAYER_INDEX.sub("*", fqn) for fqn in fqns)
    return [name if n == 1 else f"{name} (x{n})" for name, n in folded.items()]


def _placements_map(d: Mapping[str, Placements]) -> dict[str, str]:
    return {k: format_placements(v) for k, v in sorted(d.items())}


@dataclass(frozen=True)
class Plan:
    """Placements per node, redistributions per edge, and the guards and proofs they rely on."""

    mesh: Mesh
    placements: dict[str, Placements]
    tuple_placements: dict[str, tuple[Placements | None, ...]]
    redistributions: tuple[Redistribution, ...]
    param_placements: dict[str, Placements]
    input_placements: tuple[Placements | None, ...]
    output_placements: tuple[Placements | None, ...]
    trace_guards: tuple[str, ...]
    proofs: tuple[ShardProof, ...]
    pruned: tuple[PrunedStrategy, ...]
    decisions: dict[str, Decision]
    cost: CostBreakdown
    batch_costs: tuple[BatchCost, ...]
    stats: SolverStats
    names: DimNames = field(default_factory=DimNames)
    divisibility: str = "prove"
    graph_inputs: tuple[GraphInput, ...] = ()
    graph_outputs: tuple[GraphOutput | None, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    runtime_asserts: tuple[str, ...] = ()
    """Conditions on data-dependent sizes (``u0 <= 1024``, ``Eq(u0 + u1, 12*batch)``), over the
    user's ``Dim`` names as :attr:`guards`: no entry check can see them, so the lowered program
    checks each where the size is computed (from the trace's own asserts), before any collective
    reads it."""
    shared_layers: str = ""
    """Which blocks of a run of repeated ones :func:`~planner.api.plan_module` copied rather than
    traced, or why none were (``Traced.shared_layers``); empty for a model with no such run, or a
    plan of a given graph."""
    trace_sizes: dict[str, int] = field(default_factory=dict)
    """Each plain ``Dim``'s name → the size the graph was traced at: where the lowering traces the
    model again to lower the same graph (empty for a plan made by hand)."""

    # -- queries ----------------------------------------------------------------------------

    def operand_placements(self, consumer: str, operand: int, producer_placements: Placements | None = None) -> Placements:
        """Placements operand ``operand`` of ``consumer`` must have (after any redistribution).

        Without a redistribution that is the producer's placement, which the caller passes
        as ``producer_placements`` (the plan does not store the graph's edges).
        """
        for r in self.redistributions:
            if r.consumer == consumer and r.operand == operand:
                return r.dst
        if producer_placements is None:
            raise KeyError(
                f"operand {operand} of {consumer} is not redistributed; pass its producer's placements "
                f"(plan.placements[producer]) to read them"
            )
        return producer_placements

    @property
    def guards(self) -> tuple[str, ...]:
        """What inputs must satisfy, over the user's ``Dim`` names (``trace_guards`` over the trace's symbols)."""
        return tuple(self.names.readable(g) for g in self.trace_guards)

    @property
    def worst_regret(self) -> float | None:
        regrets = [b.regret for b in self.batch_costs if b.regret is not None]
        return max(regrets) if regrets else None

    def readable(self, text: str) -> str:
        """``text`` (a guard, an obligation, a size) with the trace's symbols written as the user's
        ``Dim`` names: ``Eq(Mod(s72, 4), 0)`` reads ``Eq(Mod(batch, 4), 0)``."""
        return self.names.readable(text)

    def explain(self, node: str | None = None) -> str:
        """Why ``node`` got its placement: its rule, cost, redistributions, proofs and runners-up.

        Without ``node``: the table of every node's placement, rule and costs.
        """
        if node is None:
            return self._table()
        if node not in self.decisions:
            known = ", ".join(sorted(self.decisions)[:20])
            raise KeyError(f"no decision recorded for node {node!r}; nodes with decisions include: {known}")
        d = self.decisions[node]
        lines = [f"{node} ({d.op}): {d.strategy}  [rule {d.rule} from {d.provider}]"]
        lines.append(f"  compute {d.compute:.4g} s, incoming redistribution {d.incoming:.4g} s (expected per step)")
        if d.shared_with:
            lines.append(f"  shares its decision with: {d.shared_with}")
        for r in self.redistributions:
            if r.consumer == node:
                lines.append(f"  operand {r.operand} from {r.producer}: {format_placements(r.src)} => {format_placements(r.dst)} "
                             f"via {', '.join(f'{s.kind} on {self.mesh.axis_names[s.axis]}' for s in r.steps) or 'nothing'} "  # type: ignore[index]
                             f"({r.cost:.4g} s)")
        for p in self.proofs:
            if p.node == node:
                lines.append(f"  dim {p.dim} (size {p.size}) split over {'x'.join(p.mesh_axes)}: {p.obligation} {p.status} ({p.method})")
        if d.alternatives:
            lines.append("  alternatives (change in total expected cost if only this node switched):")
            for a in d.alternatives:
                lines.append(f"    {a.strategy}: {a.delta:+.4g} s")
        elif d.shared_with and d.shared_with in self.decisions and self.decisions[d.shared_with].alternatives:
            lines.append(f"  alternatives: see {d.shared_with}, which decides for it")
        else:
            lines.append("  no other strategy survived pruning")
        source = d.same_candidates_as or node
        for p in self.pruned:
            if p.node == source:
                lines.append(f"  pruned {p.strategy}: {p.reason}")
        return self.readable("\n".join(lines))

    # -- text -------------------------------------------------------------------------------

    def _table(self) -> str:
        rows = [("node", "op", "placement", "rule", "compute s", "reshard in s")]
        for name, d in self.decisions.items():
            placed = self.placements.get(name)
            text = format_placements(placed) if placed is not None else " | ".join(
                format_placements(p) for p in self.tuple_placements.get(name, ())
            )
            rows.append((name, d.op, text, d.rule, f"{d.compute:.3g}", f"{d.incoming:.3g}" if d.incoming else ""))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    def __str__(self) -> str:
        """A summary: placements of parameters, inputs and outputs, redistributions, guards, costs per batch size."""
        stats = self.stats
        out = [f"Plan on mesh {self.mesh} ({stats.solver}: {stats.status}, {stats.graph_nodes} graph nodes, "
               f"{stats.decision_nodes} decisions" + (f", gap {stats.gap:.3g}" if stats.gap else "") + ")"]
        if self.param_placements:
            out.append("parameters:")
            by_placement: dict[str, list[str]] = {}
            for fqn, ps in sorted(self.param_placements.items()):
                by_placement.setdefault(format_placements(ps), []).append(fqn)
            for text, fqns in by_placement.items():
                names = _names(fqns)
                out.append(f"  {text}:" + (" " + ", ".join(names) if len(", ".join(names)) <= _WIDTH else "\n    " + "\n    ".join(names)))
        out.append("inputs: " + ", ".join(f"{k}: {format_placements(p)}" for k, p in enumerate(self.input_placements) if p is not None))
        shown = ([(o.index, p) for o, p in zip(self.graph_outputs, self.output_placements) if o is not None and o.role == "output"]
                 if self.graph_outputs else list(enumerate(self.output_placements)))
        out.append("outputs: " + ", ".join(f"{k}: {format_placements(p)}" for k, p in shown if p is not None))
        if self.redistributions:
            kinds = Counter(s.kind for r in self.redistributions for s in r.steps)
            total = sum(r.cost for r in self.redistributions)
            out.append(f"redistributions: {len(self.redistributions)} ("
                       + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f"), {total:.4g} s expected per step")
            for r in sorted(self.redistributions, key=lambda r: -r.cost)[:_COSTLIEST]:
                out.append(f"  {r}  {r.cost:.3g} s")
            if len(self.redistributions) > _COSTLIEST:
                out.append(f"  ... {len(self.redistributions) - _COSTLIEST} more (plan.redistributions)")
        else:
            out.append("redistributions: none")
        out.append("guards: " + ("; ".join(self.guards) if self.guards else "none"))
        if self.runtime_asserts:
            out.append("runtime asserts: " + "; ".join(self.runtime_asserts))
        if self.shared_layers:
            out.append(f"shared layers: {self.shared_layers}")
        unbacked = self.options.get("unbacked_sizes") or {}
        if unbacked:
            split = {name: {"split unevenly" if p.status == "uneven" else "proved and split evenly"
                            for p in self.proofs if re.search(rf"\b{name}\b", p.size)} or {"kept whole"}
                     for name in sorted(unbacked)}
            out.append("data-dependent sizes: " + ", ".join(f"{name} costed at {e}" for name, e in sorted(unbacked.items()))
                       + "; a dim of one is split evenly only with a proof, else unevenly (torch.chunk's pieces) or kept "
                       "whole: " + ", ".join(f"{name} {' and '.join(sorted(how))}" for name, how in split.items()))
        by_status = Counter(p.status for p in self.proofs)
        out.append("sharded dims: " + (", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none")
                   + f"; {len(self.pruned)} strategies pruned")
        c = self.cost
        out.append(f"cost: compute {c.compute:.4g} s + communication {c.communication:.4g} s = {c.total:.4g} s expected per step")
        for b in self.batch_costs:
            point = ", ".join(f"{k}={v}" for k, v in sorted(b.values.items()))
            weaker = " (the LP relaxation stopped early)" if b.optimum_source == "partial lp relaxation" else ""
            regret = "" if b.optimum is None else (f", optimum {b.optimum:.4g} s, regret {b.regret:.3f}" if b.optimum_exact
                                                   else f", optimum ≥ {b.optimum:.4g} s{weaker}, regret ≤ {b.regret:.3f}")
            out.append(f"  at {point} (weight {b.weight:.3g}): {b.cost:.4g} s{regret}")
        out.append(f"memory: {c.memory}" + (f"; budget {format_bytes(c.memory_budget)}" if c.memory_budget else ""))
        out.append("every node's placement: plan.explain(); why one node's: plan.explain(node)")
        return self.readable("\n".join(out))

    # -- JSON -------------------------------------------------------------------------------

    def to_dict(self, *, timings: bool = False) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "mesh": self.mesh.to_dict(),
            "divisibility": self.divisibility,
            "dim_names": self.names.to_dict(),
            "placements": _placements_map(self.placements),
            "tuple_placements": {k: [format_placements(p) for p in v] for k, v in sorted(self.tuple_placements.items())},
            "redistributions": [r.to_dict() for r in self.redistributions],
            "param_placements": _placements_map(self.param_placements),
            "input_placements": [format_placements(p) for p in self.input_placements],
            "output_placements": [format_placements(p) for p in self.output_placements],
            "graph_inputs": [i.to_dict() for i in self.graph_inputs],
            "graph_outputs": [None if o is None else o.to_dict() for o in self.graph_outputs],
            "trace_guards": list(self.trace_guards),
            "runtime_asserts": list(self.runtime_asserts),
            "shared_layers": self.shared_layers,
            "trace_sizes": dict(sorted(self.trace_sizes.items())),
            "proofs": [p.to_dict() for p in self.proofs],
            "pruned": [p.to_dict() for p in self.pruned],
            "decisions": [d.to_dict() for d in self.decisions.values()],
            "cost": self.cost.to_dict(),
            "batch_costs": [b.to_dict() for b in self.batch_costs],
            "stats": self.stats.to_dict(timings=timings),
            "options": self.options,
        }

    def to_json(self, *, timings: bool = False, indent: int | None = 1) -> str:
        """Versioned, deterministic JSON; ``timings=True`` adds the wall-clock build/solve seconds."""
        return json.dumps(self.to_dict(timings=timings), indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """Read a plan written by :meth:`to_json`."""
        d = json.loads(text)
        if d.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a plan document (format {d.get('format')!r}, expected {PLAN_FORMAT!r})")
        if d.get("version") != PLAN_VERSION:
            raise ValueError(f"plan JSON version {d.get('version')!r} is not supported; this planner reads version {PLAN_VERSION}: "
                             "plan the model again with this version to write one")

        def pmap(m: Mapping[str, str]) -> dict[str, Placements]:
            return {k: parse_placements(v) for k, v in m.items()}  # type: ignore[misc]

        decisions = [Decision.from_dict(x) for x in d["decisions"]]
        return cls(
            mesh=Mesh.from_dict(d["mesh"]),
            placements=pmap(d["placements"]),
            tuple_placements={k: tuple(parse_placements(p) for p in v) for k, v in d["tuple_placements"].items()},
            redistributions=tuple(Redistribution.from_dict(r) for r in d["redistributions"]),
            param_placements=pmap(d["param_placements"]),
            input_placements=tuple(parse_placements(p) for p in d["input_placements"]),
            output_placements=tuple(parse_placements(p) for p in d["output_placements"]),
            trace_guards=tuple(d["trace_guards"]),
            proofs=tuple(ShardProof.from_dict(p) for p in d["proofs"]),
            pruned=tuple(PrunedStrategy.from_dict(p) for p in d["pruned"]),
            decisions={x.node: x for x in decisions},
            cost=CostBreakdown.from_dict(d["cost"]),
            batch_costs=tuple(BatchCost.from_dict(b) for b in d["batch_costs"]),
            stats=SolverStats.from_dict(d["stats"]),
            names=DimNames.from_dict(d["dim_names"]),
            divisibility=d["divisibility"],
            graph_inputs=tuple(GraphInput.from_dict(i) for i in d["graph_inputs"]),
            graph_outputs=tuple(None if o is None else GraphOutput.from_dict(o) for o in d["graph_outputs"]),
            options=dict(d["options"]),
            runtime_asserts=tuple(d.get("runtime_asserts", ())),
            shared_layers=d.get("shared_layers", ""),
            trace_sizes={name: int(size) for name, size in d.get("trace_sizes", {}).items()},
        )
