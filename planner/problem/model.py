"""The decision problem's data, and the questions solvers and the plan's assembly ask of it.

A :class:`Problem` (built by :func:`~planner.problem.build_problem`) holds each node's
:class:`Candidate` strategies, the one-hot decisions (:class:`Group`) nodes share with the
candidate each node picks per choice, and the :class:`EdgeClass` lists of edges between
groups. It answers: a tensor's per-device shape under a placement (:meth:`Problem.local`),
the divisibility verdicts a placement relies on (:meth:`Problem.verdicts`), the cheapest
redistribution between two placements (:meth:`Problem.moves`, shortest paths in the tensor's
:class:`~planner.resharding.StateGraph` under the weights being optimized), the peak memory
of an assignment (:meth:`Problem.peak_memory`, storages live step by step:
:mod:`planner.problem.liveness`), and the true cost of an assignment (:meth:`Problem.evaluate`,
walking every node and edge of the graph, independent of the grouping, so the solvers'
objective can be checked against it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.batches import BatchPoints
from planner.cost import CostModel, LocalTensor
from planner.dim_names import DimNames
from planner.divisibility import Divisibility, Verdict
from planner.graph import PlanGraph, TensorMeta
from planner.mesh import Mesh
from planner.placements import Codes, canonical, code_shard_axes, format_codes
from planner.plan import MEMORY_PARTS, CollectiveKind, MemoryBreakdown
from planner.problem.liveness import Liveness
from planner.resharding import StateGraph
from planner.strategies.base import Strategy
from shapecore import int_symbol

__all__ = ["Candidate", "InnerEdges", "Group", "EdgeClass", "Problem", "Evaluation", "PeakMemory", "MEMORY_PARTS"]


Move = tuple[int, CollectiveKind, int, int, np.ndarray]
"""One step of a redistribution: (mesh axis, collective, code before, code after, cost vector)."""


@dataclass
class Candidate:
    """A surviving strategy: as proposed, as codes, and its costs (vectors over batch points)."""

    strategy: Strategy
    provider: str
    outputs: tuple[Codes | None, ...]
    inputs: tuple[Codes, ...]
    compute: np.ndarray
    memory: dict[str, np.ndarray]


@dataclass
class InnerEdges:
    """Edges inside one group over one tensor shape: per choice, the placement given and needed."""

    meta: TensorMeta
    given: tuple[Codes, ...]
    needed: tuple[Codes, ...]
    count: int = 0


@dataclass
class Group:
    """One one-hot decision with ``choices`` options, shared by ``nodes``.

    ``compute`` and ``memory`` are ``[choices, points]`` sums over the nodes; ``inner`` the
    edges between its own nodes (priced per choice).
    """

    root: str
    choices: int
    nodes: list[str] = field(default_factory=list)
    compute: np.ndarray | None = None
    memory: np.ndarray | None = None
    inner: dict[tuple, InnerEdges] = field(default_factory=dict)


@dataclass
class EdgeClass:
    """``count`` edges over tensors like ``meta`` that share one linearization.

    ``rows`` lists (placement, producer-group choices giving it); ``cols`` lists (placement,
    consumer-group choices needing it).
    """

    meta: TensorMeta
    producer_group: int
    consumer_group: int
    rows: list[tuple[Codes, list[int]]]
    cols: list[tuple[Codes, list[int]]]
    count: int = 0
    edges: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass
class PeakMemory:
    """Bytes per device at each batch point's peak: per part (:data:`MEMORY_PARTS`), and the
    program step (an index into :attr:`Liveness.steps`) where it is reached; ``timeline``: the
    ``[steps, points]`` bytes live at every step."""

    parts: dict[str, np.ndarray]
    steps: np.ndarray
    timeline: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return sum(self.parts.values(), np.zeros(len(self.steps)))


@dataclass
class Evaluation:
    """The true cost of an assignment: per-point vectors of compute and communication, and the
    peak memory (``memory``: its parts at each point's peak step)."""

    compute: np.ndarray
    communication: np.ndarray
    memory: dict[str, np.ndarray]
    peak_steps: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.compute + self.communication


@dataclass
class Problem:
    """Everything a solver needs, and the bookkeeping to turn its answer into a plan."""

    graph: PlanGraph
    mesh: Mesh
    points: BatchPoints
    cost_model: CostModel
    divisibility: Divisibility
    training: bool
    liveness: Liveness
    names: DimNames = field(default_factory=DimNames)
    """The trace's ``Dim`` names, which messages speak."""
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    pruned: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    pick: dict[str, list[int]] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    edge_classes: list[EdgeClass] = field(default_factory=list)
    uncovered: dict[str, str] = field(default_factory=dict)
    constrained: set[str] = field(default_factory=set)
    allowed_candidates: dict[str, set[int]] = field(default_factory=dict)
    agreements: list[list[tuple[int, tuple]]] = field(default_factory=list)
    """Decisions that must agree: each a list of (group, a key per choice) whose groups take choices
    of one key in every plan (a per-token region's nodes: one set of per-token axes,
    :func:`~planner.problem.per_token.tie_regions`)."""
    shared: dict[str, str] = field(default_factory=dict)
    clusters: int = 0
    clustered_nodes: int = 0
    merged_followers: int = 0
    _locals: dict[tuple, LocalTensor] = field(default_factory=dict, repr=False)
    _verdicts: dict[tuple, list] = field(default_factory=dict, repr=False)
    _state_graphs: dict[TensorMeta, StateGraph] = field(default_factory=dict, repr=False)
    _move_costs: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)
    _spans: list[tuple[str, int, int, int, bool]] | None = field(default=None, repr=False)

    # -- shapes and obligations -------------------------------------------------------------

    def local(self, meta: TensorMeta, codes: Codes) -> LocalTensor:
        """``meta``'s per-device shape under ``codes`` (ceil for uneven splits)."""
        key = (meta, codes)
        found = self._locals.get(key)
        if found is None:
            dims = []
            for d, size in enumerate(meta.shape):
                factor = 1
                for a in code_shard_axes(codes, d):
                    factor *= self.mesh.shape[a]
                dims.append(np.ceil(self.points.size(size) / factor))
            found = self._locals[key] = LocalTensor(tuple(dims), meta.itemsize, len(self.points))
        return found

    def verdicts(self, meta: TensorMeta, codes: Codes) -> list[tuple[int, tuple[int, ...], Verdict]]:
        """The divisibility verdict for every sharded dim of ``meta`` under ``codes``."""
        key = (meta, codes)
        found = self._verdicts.get(key)
        if found is None:
            found = []
            for code in sorted({c for c in codes if c >= 2}):
                d = code - 2
                if d >= meta.ndim:
                    raise ValueError(f"placement {format_codes(codes)} shards dim {d} of a {meta.ndim}-d tensor")
                axes = code_shard_axes(codes, d)
                m = 1
                for a in axes:
                    m *= self.mesh.shape[a]
                found.append((d, axes, self.divisibility.check(meta.shape[d], m)))
            self._verdicts[key] = found
        return found

    def allowed(self, meta: TensorMeta, codes: Codes) -> bool:
        """Whether a tensor like ``meta`` may be placed as ``codes``: canonical (nothing but ``R``
        on a mesh axis of size 1) and every split allowed by the divisibility policy."""
        return canonical(codes, self.mesh.shape) == codes and all(v.allowed for _, _, v in self.verdicts(meta, codes))

    def keep_choices(self, g: int, kept: Sequence[int]) -> None:
        """Drop every choice of group ``g`` but ``kept`` (in their order), for each of its nodes."""
        group = self.groups[g]
        for name in group.nodes:
            self.pick[name] = [self.pick[name][c] for c in kept]
        group.choices = len(kept)

    # -- redistribution ---------------------------------------------------------------------

    def state_graph(self, meta: TensorMeta) -> StateGraph:
        found = self._state_graphs.get(meta)
        if found is None:
            data_dependent = {int_symbol(name) for name in self.points.unbacked or ()}
            found = self._state_graphs[meta] = StateGraph(
                meta.ndim, self.mesh.ndim, lambda s: self.allowed(meta, s),
                lambda s: self.local(meta, s).nbytes, self.cost_model.collective_seconds,
                lambda d: not meta.shape[d].free_symbols & data_dependent,
            )
        return found

    def moves(self, meta: TensorMeta, src: Codes, dst: Codes, weights: np.ndarray) -> list[Move]:
        """The cheapest redistribution of a tensor like ``meta`` from ``src`` to ``dst`` under ``weights``."""
        if src == dst:
            return []
        graph = self.state_graph(meta)
        arcs = graph.path(src, dst, weights)
        if arcs is None:
            raise ValueError(f"no redistribution from {format_codes(src)} to {format_codes(dst)} for a tensor of shape {meta.shape}")
        out = []
        for a in arcs:
            i, j, axis, kind = graph.arcs[a]
            out.append((axis, kind, graph.states[i][axis], graph.states[j][axis], graph.costs[a]))
        return out

    def move_cost(self, meta: TensorMeta, src: Codes, dst: Codes, weights: np.ndarray) -> np.ndarray:
        """Cost vector of :meth:`moves`."""
        key = (meta, src, dst, weights.tobytes())
        found = self._move_costs.get(key)
        if found is None:
            found = np.zeros(len(self.points))
            for move in self.moves(meta, src, dst, weights):
                found = found + move[4]
            self._move_costs[key] = found
        return found

    # -- reading an assignment --------------------------------------------------------------

    def chosen(self, choices: Sequence[int], name: str) -> Candidate:
        """The candidate node ``name`` takes when each group ``g`` takes choice ``choices[g]``."""
        return self.candidates[name][self.pick[name][choices[self.group_of[name]]]]

    def output_codes(self, choices: Sequence[int], name: str) -> Codes:
        return self.chosen(choices, name).outputs[0]  # type: ignore[return-value]

    def peak_memory(self, choices: Sequence[int]) -> PeakMemory:
        """Peak bytes per device of the assignment at every batch point, storages live step by step
        (the plan's redistribution buffers count as activations)."""
        n = len(self.points)
        timelines = {}
        for part in MEMORY_PARTS:
            sizes = {}
            for holder in self.liveness.holders:
                value = self.chosen(choices, holder).memory.get(part)
                if value is not None:
                    sizes[holder] = np.broadcast_to(value, (n,))
            timelines[part] = self.liveness.timeline(sizes, n, self._plan_storages(choices) if part == "activations" else ())
        total = sum(timelines.values(), np.zeros((len(self.liveness.steps), n)))
        steps = np.argmax(total, axis=0)
        points = np.arange(n)
        return PeakMemory({part: timelines[part][steps, points] for part in MEMORY_PARTS}, steps, total)

    def peak_breakdown(self, choices: Sequence[int]) -> MemoryBreakdown:
        """The assignment's peak as a plan reports it: at the batch point where it is largest."""
        peak = self.peak_memory(choices)
        k = int(np.argmax(peak.total))
        return MemoryBreakdown(**{part: float(value[k]) for part, value in peak.parts.items()},
                               point=dict(self.points.labels[k]), node=self.liveness.steps[int(peak.steps[k])])

    def reshard_spans(self) -> list[tuple[str, int, int, int, bool]]:
        """Where a redistribution would hold a storage: (consumer, operand, first step, last step,
        ``source``) — the buffer in the needed placement, or (``source``) a returned gradient's
        unreduced storage (:mod:`planner.problem.liveness`). Plan-independent; cached."""
        if self._spans is not None:
            return self._spans
        live = self.liveness
        last = len(live.steps) - 1
        found = []
        for node in self.graph:
            for k, producer in enumerate(node.operands):
                if node.role == "sink":
                    found.append((node.name, k, last, last, False))
                    if node.grad_of is not None:
                        found.append((node.name, k, live.step[live.root[producer]], last, True))
                    continue
                step = live.step[node.name]
                found.append((node.name, k, step, live.reach[node.name] if node.alias_of == producer else step, False))
        self._spans = found
        return found

    def _plan_storages(self, choices: Sequence[int]) -> list[tuple[int, int, np.ndarray]]:
        """(first step, last step, bytes) of each storage the plan's redistributions hold."""
        out = []
        for consumer, k, first, last, source in self.reshard_spans():
            node = self.graph.nodes[consumer]
            producer = node.operands[k]
            src, dst = self.output_codes(choices, producer), self.chosen(choices, consumer).inputs[k]
            if src != dst:
                out.append((first, last, self.local(self.graph.nodes[producer].output, src if source else dst).nbytes))
        return out

    def evaluate(self, choices: Sequence[int], weights: np.ndarray | None = None) -> Evaluation:
        """True cost of the assignment (redistributions routed for ``weights``), walking every node and edge."""
        weights = self.points.weights if weights is None else weights
        n = len(self.points)
        compute, communication = np.zeros(n), np.zeros(n)
        for node in self.graph:
            cand = self.chosen(choices, node.name)
            compute += cand.compute
            for k, producer in enumerate(node.operands):
                src = self.output_codes(choices, producer)
                if src != cand.inputs[k]:
                    communication += self.move_cost(self.graph.nodes[producer].output, src, cand.inputs[k], weights)
        peak = self.peak_memory(choices)
        return Evaluation(compute, communication, peak.parts, peak.steps)

    def live_memory(self, step: int) -> list[np.ndarray]:
        """Per group, ``[choices, points]`` bytes its nodes hold live at program ``step``: the
        coefficients of the memory at ``step`` as a linear function of the choices."""
        n = len(self.points)
        out = [np.zeros((group.choices, n)) for group in self.groups]
        for holder in self.liveness.live(step):
            candidates = self.candidates[holder]
            picked = [sum(candidates[i].memory.values(), np.zeros(n)) for i in self.pick[holder]]
            out[self.group_of[holder]] += np.stack(picked)
        return out

    def group_costs(self, g: int, weights: np.ndarray) -> np.ndarray:
        """``[choices, points]`` cost of group ``g``'s choices: its nodes' compute and its inner
        edges (routed for ``weights``)."""
        group = self.groups[g]
        total = group.compute.copy()  # type: ignore[union-attr]
        for inner in group.inner.values():
            for c in range(group.choices):
                if inner.given[c] != inner.needed[c]:
                    total[c] += inner.count * self.move_cost(inner.meta, inner.given[c], inner.needed[c], weights)
        return total

    def group_cost(self, g: int, weights: np.ndarray) -> np.ndarray:
        """Expected cost of each choice of group ``g`` under ``weights``."""
        return self.group_costs(g, weights) @ weights
