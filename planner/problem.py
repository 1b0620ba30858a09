"""The decision problem: candidate strategies per node, shared decisions, priced edges.

:func:`build_problem` turns a :class:`~planner.graph.PlanGraph` into what every solver reads:

* **candidates** — per node, the strategies its provider proposed that survive the
  divisibility policy (each ``Shard`` of every output and operand is an obligation), with
  their compute seconds and bytes per device at every batch point. Placeholders and outputs
  may take any non-partial placement; a ``getitem`` takes its element's placement.
* **groups** — one one-hot decision each. A group's *choices* are its root unit's
  candidates; every node of the group picks one of its own candidates per choice
  (``pick[node][choice]``). Nodes join a group by being identical layers
  (:mod:`planner.clustering`), by being a ``getitem`` of a tuple (it must take its element's
  placement), by *tying* (a parameter's gradient is delivered in the parameter's placement;
  a user output in the placement of its tangent), or by *following* (an elementwise or
  layout op keeps the placement of its first operand's producer, when each of the
  producer's placements leaves it exactly one strategy and its output is no larger than
  that operand: no resharding between them, so any resharding happens after the op, on no
  more bytes than before it). Sharing restricts the plans considered; the objective is
  always the true cost of the plan chosen.
* **edges** — every (consumer, operand) pair, linked to its producer. An edge inside one
  group is priced into that group's choices. Edges across groups are collected into *edge
  classes*: edges over the same tensor shape whose producer-placement and consumer-need
  indicators are the same expressions share one linearization (identical layers share it,
  and so does an op reading one producer twice with the same needs).

Redistribution costs are shortest paths in the tensor's :class:`~planner.resharding.StateGraph`
under the weights being optimized. :meth:`Problem.evaluate` prices an assignment by walking
every node and edge of the graph, independent of the grouping, so the solvers' objective can
be checked against it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.batches import BatchPoints
from planner.clustering import Unit, find_units, node_signature
from planner.cost import CostModel, LocalTensor
from planner.divisibility import Divisibility, Verdict
from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.mesh import Mesh
from planner.placements import R_CODE, Codes, code_shard_axes, decode, encode, format_codes, shard_code
from planner.plan import CollectiveKind
from planner.resharding import StateGraph
from planner.strategies.base import Strategy, StrategyProvider

__all__ = ["Candidate", "Group", "EdgeClass", "Problem", "build_problem", "Evaluation", "MEMORY_PARTS"]

MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")

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
class Evaluation:
    """The true cost of an assignment: per-point vectors of compute, communication and memory."""

    compute: np.ndarray
    communication: np.ndarray
    memory: dict[str, np.ndarray]

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
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    pruned: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    pick: dict[str, list[int]] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    edge_classes: list[EdgeClass] = field(default_factory=list)
    uncovered: dict[str, str] = field(default_factory=dict)
    shared: dict[str, str] = field(default_factory=dict)
    clusters: int = 0
    clustered_nodes: int = 0
    merged_followers: int = 0
    _locals: dict[tuple, LocalTensor] = field(default_factory=dict, repr=False)
    _verdicts: dict[tuple, list] = field(default_factory=dict, repr=False)
    _state_graphs: dict[TensorMeta, StateGraph] = field(default_factory=dict, repr=False)
    _move_costs: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

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
        return all(v.allowed for _, _, v in self.verdicts(meta, codes))

    # -- redistribution ---------------------------------------------------------------------

    def state_graph(self, meta: TensorMeta) -> StateGraph:
        found = self._state_graphs.get(meta)
        if found is None:
            found = self._state_graphs[meta] = StateGraph(
                meta.ndim, self.mesh.ndim, lambda s: self.allowed(meta, s),
                lambda s: self.local(meta, s).nbytes, self.cost_model.collective_seconds,
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

    def evaluate(self, choices: Sequence[int], weights: np.ndarray | None = None) -> Evaluation:
        """True cost of the assignment (redistributions routed for ``weights``), walking every node and edge."""
        weights = self.points.weights if weights is None else weights
        n = len(self.points)
        compute, communication = np.zeros(n), np.zeros(n)
        memory = {part: np.zeros(n) for part in MEMORY_PARTS}
        for node in self.graph:
            cand = self.chosen(choices, node.name)
            compute += cand.compute
            for part, value in cand.memory.items():
                memory[part] += value
            for k, producer in enumerate(node.operands):
                src = self.output_codes(choices, producer)
                if src != cand.inputs[k]:
                    communication += self.move_cost(self.graph.nodes[producer].output, src, cand.inputs[k], weights)
        return Evaluation(compute, communication, memory)

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


# -- building -----------------------------------------------------------------------------------


def _all_codes(tensor_ndim: int, mesh_ndim: int, *, replicate_only: bool = False) -> list[Codes]:
    import itertools

    options = [R_CODE] if replicate_only else [R_CODE] + [shard_code(d) for d in range(tensor_ndim)]
    return [tuple(c) for c in itertools.product(options, repeat=mesh_ndim)]


class _Builder:
    def __init__(self, graph: PlanGraph, mesh: Mesh, points: BatchPoints, cost_model: CostModel, divisibility: Divisibility,
                 providers: Sequence[StrategyProvider], *, cluster: bool, merge_followers: bool, replicate_outputs: bool) -> None:
        self.graph = graph
        self.mesh = mesh
        self.points = points
        self.providers = providers
        self.merge_followers = merge_followers
        self.replicate_outputs = replicate_outputs
        self.cluster = cluster
        self.saved = self._saved_activations()
        self.params = {n.fqn: n.name for n in graph if n.role in ("param", "buffer")}
        self.tangents = {n.output_index: n.name for n in graph if n.role == "tangent"}
        self.problem = Problem(graph, mesh, points, cost_model, divisibility, graph.is_training())

    def _saved_activations(self) -> set[str]:
        saved = set()
        for node in self.graph:
            if node.phase == "forward" and node.role in ("op", "getitem"):
                if any(self.graph.nodes[user].phase == "backward" for user, _ in self.graph.users[node.name]):
                    saved.add(node.name)
        return saved

    # -- candidates -------------------------------------------------------------------------

    def candidates(self) -> None:
        signatures = {node.name: node_signature(node, self.graph, node.name in self.saved) for node in self.graph}
        self.signatures = signatures
        cache: dict[tuple, tuple[list[Candidate], list[tuple[str, str]]]] = {}
        for node in self.graph:
            key = signatures[node.name]
            if node.role == "getitem":
                key = key + (id(self.problem.candidates[node.source]),)  # type: ignore[index]
            if key not in cache:
                cache[key] = self._candidates_of(node)
            self.problem.candidates[node.name], pruned = cache[key]
            if pruned:
                self.problem.pruned[node.name] = pruned

    def _proposals(self, node: GraphNode) -> tuple[list[tuple[Strategy | None, tuple, tuple]], str]:
        """(strategy or None, output codes, input codes) proposals and who made them."""
        mesh_ndim = self.mesh.ndim
        if node.role in ("input", "param", "buffer", "constant", "tangent", "sink"):
            only_r = self.replicate_outputs and (node.role == "tangent" or (node.role == "sink" and not node.grad_of))
            codes = _all_codes(node.output.ndim, mesh_ndim, replicate_only=only_r)
            ins = (lambda c: (c,)) if node.role == "sink" else (lambda c: ())
            return [(None, (c,), ins(c)) for c in codes], "planner"
        if node.role == "getitem":
            source = self.problem.candidates[node.source]  # type: ignore[index]
            placements = list(dict.fromkeys(c.outputs[node.index] for c in source))  # type: ignore[index]
            return [(None, (p,), ()) for p in placements], "planner"
        for provider in self.providers:
            found = provider.strategies(node, self.graph, self.mesh)
            if found:
                out = []
                for s in found:
                    try:
                        out.append((s, tuple(None if p is None else encode(p) for p in s.outputs), tuple(encode(p) for p in s.inputs)))
                    except ValueError:
                        continue
                return out, provider.name
        self.problem.uncovered[node.name] = node.target
        r = (R_CODE,) * mesh_ndim
        return [(None, tuple(None if m is None else r for m in node.outputs), tuple(r for _ in node.operands))], "fallback"

    def _candidates_of(self, node: GraphNode) -> tuple[list[Candidate], list[tuple[str, str]]]:
        proposals, provider = self._proposals(node)
        operand_metas = [self.graph.operand_meta(node, k) for k in range(len(node.operands))]
        survivors: list[Candidate] = []
        pruned: list[tuple[str, str]] = []
        problem = self.problem
        seen: set[tuple] = set()
        for strategy, outs, ins in proposals:
            if (outs, ins) in seen:
                continue
            seen.add((outs, ins))
            text = _describe(outs, ins)
            reason = self._rejection(node, outs, ins, operand_metas)
            if reason is not None:
                pruned.append((text, reason))
                continue
            locals_out = [None if m is None or p is None else problem.local(m, p) for m, p in zip(node.outputs, outs)]
            locals_in = [problem.local(m, p) for m, p in zip(operand_metas, ins)]
            compute = problem.cost_model.compute_seconds(node, locals_in, locals_out) if node.role == "op" else np.zeros(len(self.points))
            memory = problem.cost_model.memory_bytes(node, locals_out, training=problem.training, saved=node.name in self.saved)
            if strategy is None:
                strategy = Strategy(tuple(None if p is None else decode(p) for p in outs), tuple(decode(p) for p in ins),
                                    "replicate" if provider == "fallback" else format_codes(outs[0]))
            survivors.append(Candidate(strategy, provider, outs, ins, compute, memory))
        if not survivors:
            raise ValueError(
                f"every strategy of node {node.name} ({node.target}) was pruned; first reason: {pruned[0][1] if pruned else 'none proposed'}"
            )
        return survivors, pruned

    def _rejection(self, node: GraphNode, outs: tuple, ins: tuple, operand_metas: list[TensorMeta]) -> str | None:
        if len(outs) != len(node.outputs) or len(ins) != len(operand_metas):
            return f"strategy has {len(outs)} outputs / {len(ins)} operands, node has {len(node.outputs)} / {len(operand_metas)}"
        checks = [(f"output {i}", m, p) for i, (m, p) in enumerate(zip(node.outputs, outs)) if m is not None and p is not None]
        checks += [(f"operand {k}", m, p) for k, (m, p) in enumerate(zip(operand_metas, ins))]
        for what, meta, codes in checks:
            if len(codes) != self.mesh.ndim:
                return f"{what} has {len(codes)} placements for a {self.mesh.ndim}-axis mesh"
            for d, axes, verdict in self.problem.verdicts(meta, codes):
                if not verdict.allowed:
                    names = "x".join(self.mesh.axis_names[a] for a in axes)  # type: ignore[index]
                    return f"{what} dim {d} (size {meta.shape[d]}) over {names}: {verdict.reason}"
        return None

    # -- groups -----------------------------------------------------------------------------

    def groups(self) -> None:
        problem, graph = self.problem, self.graph
        units = find_units(graph, self.signatures, enabled=self.cluster)
        unit_of: dict[str, Unit] = {name: u for u in units for name in u.members}
        leader: dict[int, tuple[Unit, str]] = {}
        for unit in units:
            found = self._leader(unit, unit_of)
            if found is not None:
                leader[id(unit)] = found
        group_index: dict[int, int] = {}
        pending = list(reversed(units))
        while pending:
            unit = pending.pop()
            rep = unit.representative
            link = leader.get(id(unit))
            if link is None and len(unit.members) > 1 and self._must_follow(rep):
                # its leaders are not aligned with its members: decide member by member
                singles = [Unit([name]) for name in unit.members]
                for single in singles:
                    unit_of[single.members[0]] = single
                    found = self._leader(single, unit_of)
                    if found is not None:
                        leader[id(single)] = found
                pending.extend(reversed(singles))
                continue
            mapping = self._mapping(unit, link, group_index) if link is not None else None
            if mapping is None:
                g = len(problem.groups)
                problem.groups.append(Group(rep, len(problem.candidates[rep])))
                mapping = list(range(len(problem.candidates[rep])))
            else:
                g = group_index[id(link[0])]  # type: ignore[index]
                if link[1] == "follower":  # type: ignore[index]
                    problem.merged_followers += len(unit.members)
            group_index[id(unit)] = g
            for name in unit.members:
                problem.group_of[name] = g
                problem.pick[name] = mapping
                problem.groups[g].nodes.append(name)
            if len(unit.members) > 1:
                problem.clusters += 1
                problem.clustered_nodes += len(unit.members)
                for name in unit.members[1:]:
                    problem.shared[name] = rep

    def _must_follow(self, name: str) -> bool:
        """getitems and tied outputs must take their leader's placement."""
        node = self.graph.nodes[name]
        tied = node.grad_of is not None or (node.output_index is not None and node.output_index in self.tangents)
        return node.role == "getitem" or (node.role == "sink" and tied)

    def _leader(self, unit: Unit, unit_of: dict[str, Unit]) -> tuple[Unit, str] | None:
        graph = self.graph
        node = graph.nodes[unit.representative]
        if node.role == "getitem":
            return self._aligned(unit, [graph.nodes[m].source for m in unit.members], unit_of, "element")  # type: ignore[misc]
        if node.role == "sink" and node.grad_of:
            if all(graph.nodes[m].grad_of in self.params for m in unit.members):
                return self._aligned(unit, [self.params[graph.nodes[m].grad_of] for m in unit.members], unit_of, "tie")  # type: ignore[index]
            return None
        if node.role == "sink" and node.output_index is not None:
            if all(graph.nodes[m].output_index in self.tangents for m in unit.members):
                return self._aligned(unit, [self.tangents[graph.nodes[m].output_index] for m in unit.members], unit_of, "tie")  # type: ignore[index]
            return None
        if self.merge_followers and node.role == "op" and node.operands and not node.is_tuple:
            first = graph.nodes[node.operands[0]].output
            if len(node.operands) > 1 and first.shape != node.output.shape:
                return None  # following a broadcast operand would pin the op to its placement
            if self._bytes(node.output) > self._bytes(first):
                return None  # (expand, upcast) resharding its smaller input may be the better move
            return self._aligned(unit, [graph.nodes[m].operands[0] for m in unit.members], unit_of, "follower")
        return None

    def _bytes(self, meta: TensorMeta) -> float:
        """Size of a tensor like ``meta`` at the largest batch point."""
        return float(self.problem.local(meta, (R_CODE,) * self.mesh.ndim).nbytes.max())

    @staticmethod
    def _aligned(unit: Unit, leaders: list[str], unit_of: dict[str, Unit], how: str) -> tuple[Unit, str] | None:
        """The leaders' unit, if member ``i`` of ``unit`` is led by member ``i`` of it (or ``unit`` is single)."""
        lead = unit_of[leaders[0]]
        if lead is unit:
            return None
        if len(unit.members) == 1 or lead.members == leaders:
            return lead, how
        return None

    def _mapping(self, unit: Unit, link: tuple[Unit, str], group_index: dict[int, int]) -> list[int] | None:
        """``pick`` for ``unit`` over its leader group's choices, or None if some choice has no match."""
        lead, how = link
        if id(lead) not in group_index:
            return None
        rep = self.graph.nodes[unit.representative]
        mine = self.problem.candidates[rep.name]
        lead_rep = lead.representative
        lead_candidates = self.problem.candidates[lead_rep]
        if how == "element":
            index = {c.outputs[0]: i for i, c in enumerate(mine)}
            want = [lead_candidates[c].outputs[rep.index] for c in self.problem.pick[lead_rep]]  # type: ignore[index]
        elif how == "tie":
            index = {c.outputs[0]: i for i, c in enumerate(mine)}
            want = [lead_candidates[c].outputs[0] for c in self.problem.pick[lead_rep]]
        else:
            index = self._follower_index(mine, strict=len(rep.operands) == 1)
            if index is None:
                return None
            want = [lead_candidates[c].outputs[0] for c in self.problem.pick[lead_rep]]
        mapping = []
        for placement in want:
            found = index.get(placement)
            if found is None:
                if how != "follower":
                    raise AssertionError(f"{rep.name} cannot take the placement {format_codes(placement)} its {how} leader {lead_rep} chose")
                return None
            mapping.append(found)
        return mapping

    @staticmethod
    def _follower_index(mine: list[Candidate], *, strict: bool) -> dict[Codes, int] | None:
        """First-operand placement → the one candidate a follower takes for it.

        A follower keeps its first operand as produced, so for each such placement it needs
        one candidate. An op with several operands may break a tie by taking the candidate
        whose output and operands all match that placement (elementwise, sharded alike);
        otherwise (and always for one operand, ``strict``) a tie means it stays a decision.
        """
        by_input: dict[Codes, list[int]] = {}
        for i, c in enumerate(mine):
            by_input.setdefault(c.inputs[0], []).append(i)
        index = {}
        for placement, options in by_input.items():
            if len(options) > 1 and not strict:
                options = [i for i in options if mine[i].outputs[0] == placement and all(p == placement for p in mine[i].inputs)]
            if len(options) != 1:
                return None
            index[placement] = options[0]
        return index

    # -- costs per group and edge classes ---------------------------------------------------

    def costs(self) -> None:
        problem, graph = self.problem, self.graph
        n = len(self.points)
        for group in problem.groups:
            group.compute = np.zeros((group.choices, n))
            group.memory = np.zeros((group.choices, n))
        classes: dict[tuple, EdgeClass] = {}
        for node in graph:
            group = problem.groups[problem.group_of[node.name]]
            cands = problem.candidates[node.name]
            picked = [cands[i] for i in problem.pick[node.name]]
            group.compute += np.stack([c.compute for c in picked])
            group.memory += np.stack([sum(c.memory.values(), np.zeros(n)) for c in picked])
            for k, producer in enumerate(node.operands):
                self._edge(node, k, producer, classes)
        problem.edge_classes = list(classes.values())

    def _edge(self, node: GraphNode, k: int, producer: str, classes: dict[tuple, EdgeClass]) -> None:
        problem = self.problem
        meta = self.graph.nodes[producer].output
        gp, gn = problem.group_of[producer], problem.group_of[node.name]
        given = tuple(problem.candidates[producer][i].outputs[0] for i in problem.pick[producer])
        needed = tuple(problem.candidates[node.name][i].inputs[k] for i in problem.pick[node.name])
        if gp == gn:
            if given != needed:
                inner = problem.groups[gn].inner.setdefault((meta, given, needed), InnerEdges(meta, given, needed))  # type: ignore[arg-type]
                inner.count += 1
            return
        rows, cols = _partition(given), _partition(needed)  # type: ignore[arg-type]
        key = (meta, gp, tuple((p, tuple(c)) for p, c in rows), gn, tuple((p, tuple(c)) for p, c in cols))
        found = classes.get(key)
        if found is None:
            found = classes[key] = EdgeClass(meta, gp, gn, rows, cols)
        found.count += 1
        found.edges.append((node.name, k, producer))


def _describe(outs: tuple, ins: tuple) -> str:
    text = " | ".join(format_codes(p) for p in outs)
    return f"{text} <- {'; '.join(format_codes(p) for p in ins)}" if ins else text


def _partition(placements: Sequence[Codes]) -> list[tuple[Codes, list[int]]]:
    """Choices grouped by the placement they give, in order of first appearance."""
    out: dict[Codes, list[int]] = {}
    for c, p in enumerate(placements):
        out.setdefault(p, []).append(c)
    return list(out.items())


def build_problem(
    graph: PlanGraph,
    mesh: Mesh,
    points: BatchPoints,
    cost_model: CostModel,
    divisibility: Divisibility,
    providers: Sequence[StrategyProvider],
    *,
    cluster: bool = True,
    merge_followers: bool = True,
    replicate_outputs: bool = False,
) -> Problem:
    """Candidates, groups and edges for ``graph`` (see the module docstring)."""
    builder = _Builder(graph, mesh, points, cost_model, divisibility, providers, cluster=cluster,
                       merge_followers=merge_followers, replicate_outputs=replicate_outputs)
    builder.candidates()
    if builder.problem.uncovered:
        ops = sorted(set(builder.problem.uncovered.values()))
        warnings.warn(
            f"no strategy provider covers {', '.join(ops)}; planned replicated "
            f"({len(builder.problem.uncovered)} node(s) such as {', '.join(list(builder.problem.uncovered)[:5])})",
            stacklevel=3,
        )
    builder.groups()
    builder.costs()
    return builder.problem
