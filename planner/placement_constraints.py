"""Placement constraints: what the user requires of a plan's placements (``PlanOptions.placement_constraints``).

* :class:`Pin` — a node's output takes given placements, on every mesh axis or on one;
* :class:`ForbidShard` / :class:`RequireShard` — a ``Dim`` is never / always split on a mesh
  axis (a tensor dim is *of* the Dim when its size mentions the Dim's symbol: ``batch``,
  ``batch*seq``);
* :class:`MinShards` — a node's output is split into at least ``ways`` pieces ("parameters
  sharded at least 8-way", the fully sharded pattern);
* :class:`ExpertParallel` — every grouped product of stacked experts ``(E, ...)`` the planner
  can run expert-parallel splits its experts by the expert dim on a mesh axis (the expert dim
  has no ``Dim`` name, so :class:`RequireShard` cannot name it).

A *target* names nodes: ``"inputs"``, ``"outputs"``, ``"parameters"``, ``"buffers"``,
``"input:K"`` / ``"output:K"`` (position among the flattened user inputs / outputs), or a
pattern (:func:`fnmatch.fnmatchcase`) matched against a parameter's or buffer's qualified name
and against FX node names (``"layers.*.mlp.fc1.weight"``, ``"mm_3"``); or a predicate called
with a :class:`NodeInfo`. A constraint whose target matches no node is an error naming it.

On a mesh axis of size 1 every placement is ``Replicate`` (one rank's piece is the whole): a
``Pin`` there asks for ``Replicate``, and ``RequireShard`` on it holds for every placement.

The planner removes every decision choice that breaks a constraint before it solves, so the
ILP and the greedy baseline both obey them; a constrained node neither follows its producer
nor shares its decision with layers that are not constrained alike. When no choice is left,
:class:`PlacementConflict` names the constraint and what it conflicts with: another
constraint (the pair), or the node's own strategies (with why the one it needs was pruned).
"""

from __future__ import annotations

import abc
import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy

from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.mesh import Mesh
from planner.placements import (Codes, Placement, canonical, code_shard_axes, encode, format_codes, parse_placement,
                                parse_placements)
from planner.strategies.builtin import EXPERT_PARALLEL_OPS, splits_experts
from shapecore.errors import ShapecoreError

if TYPE_CHECKING:
    from planner.divisibility import Divisibility
    from planner.problem.model import Candidate

__all__ = ["NodeInfo", "PlacementConstraint", "Pin", "ForbidShard", "RequireShard", "MinShards", "ExpertParallel",
           "PlacementConflict", "Target"]


@dataclass(frozen=True)
class NodeInfo:
    """What a target predicate sees of a node.

    ``role``: ``input``, ``output``, ``param``, ``buffer``, ``constant``, ``tangent``, ``grad``
    (a parameter's gradient, delivered as an output), ``buffer_mutation`` (a buffer's new value,
    delivered as an output), ``op`` or ``getitem``; ``index``: the position among user inputs or
    outputs; ``fqn``: a parameter's or buffer's name (for ``grad``, its parameter's; for
    ``buffer_mutation``, its buffer's); ``shape``: the output's sizes as text over the trace's symbols.
    """

    name: str
    role: str
    op: str
    fqn: str | None
    index: int | None
    shape: tuple[str, ...]


Target = str | Callable[[NodeInfo], bool]

_KEYWORDS = {"inputs": "input", "outputs": "output", "parameters": "param", "buffers": "buffer"}
_INDEXED = re.compile(r"^(input|output):(\d+)$")


class PlacementConflict(ShapecoreError, ValueError):
    """No plan satisfies the placement constraints: ``constraints`` names the one or two at odds,
    ``node`` where they meet. It pickles with these fields, as every shapecore error does (it
    crosses ``lowering.launch`` from a rank intact), provided its constraints pickle: a target
    given as a lambda does not."""

    def __init__(self, message: str, constraints: tuple[PlacementConstraint, ...], node: str) -> None:
        super().__init__(message)
        self.constraints = constraints
        self.node = node


def node_info(node: GraphNode) -> NodeInfo:
    role: str = node.role
    index = node.input_index
    fqn = node.fqn
    if node.role == "sink":
        role, index, fqn = (("grad", None, node.grad_of) if node.grad_of else ("buffer_mutation", None, node.fqn)
                            if node.fqn else ("output", node.output_index, None))
    elif node.role == "tangent":
        index = node.output_index
    shape = () if node.is_tuple or node.outputs[0] is None else tuple(str(s) for s in node.output.shape)
    return NodeInfo(node.name, role, node.target, fqn, index, shape)


def _target_text(target: Target) -> str:
    return repr(target) if isinstance(target, str) else getattr(target, "__qualname__", type(target).__name__)


def _check_target(target: Any) -> None:
    if not (isinstance(target, str) and target) and not callable(target):
        raise TypeError(f"a placement constraint's target must be a name, a pattern or a predicate on planner.NodeInfo, "
                        f"got {target!r}")


def _axis_index(mesh: Mesh, axis: str | int, constraint: PlacementConstraint) -> int:
    if isinstance(axis, int) and not isinstance(axis, bool):
        if not 0 <= axis < mesh.ndim:
            raise ValueError(f"{constraint}: mesh axis {axis} is out of range for the {mesh.ndim}-axis mesh {mesh}")
        return axis
    try:
        return mesh.axis(axis)
    except KeyError:
        raise ValueError(f"{constraint}: no mesh axis named {axis!r}; the mesh is {mesh}") from None


class PlacementConstraint(abc.ABC):
    """Base of the constraints: which nodes it applies to, and whether a candidate obeys it."""

    targeted = True
    """True when it names nodes (it then keeps them out of shared decisions)."""

    def bind(self, mesh: Mesh, dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()) -> None:
        """Resolve mesh axes and Dim names (an error naming the constraint when one is unknown);
        ``data_dependent``: the trace's data-dependent (unbacked) symbols."""

    def own_decision(self, node: GraphNode, graph: PlanGraph) -> bool:
        """Whether ``node`` of ``graph``, which the constraint applies to, keeps a decision of its
        own (never follows its producer's placement): every node a targeted constraint names does."""
        return self.targeted

    @abc.abstractmethod
    def applies_to(self, info: NodeInfo) -> bool:
        """Whether the constraint speaks about the node ``info`` describes."""

    @abc.abstractmethod
    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        """Whether ``candidate`` (a strategy for ``node``) obeys the constraint."""

    def _matches(self, target: Target, info: NodeInfo) -> bool:
        if callable(target):
            return bool(target(info))
        if target in _KEYWORDS:
            return info.role == _KEYWORDS[target]
        m = _INDEXED.match(target)
        if m:
            return info.role == m.group(1) and info.index == int(m.group(2))
        if info.role in ("param", "buffer", "constant") and info.fqn and fnmatch.fnmatchcase(info.fqn, target):
            return True
        return info.role not in ("grad", "buffer_mutation") and fnmatch.fnmatchcase(info.name, target)


def _single(node: GraphNode) -> bool:
    return not node.is_tuple and node.outputs[0] is not None


class Pin(PlacementConstraint):
    """``target``'s output takes ``placements``: one per mesh axis (``"S(0),R"`` or a tuple of
    DTensor placements), or, with ``axis``, one placement on that axis (``"S(0)"``)."""

    def __init__(self, target: Target, placements: str | Placement | Sequence[Placement], *, axis: str | int | None = None) -> None:
        _check_target(target)
        self.target, self.axis = target, axis
        if axis is None:
            parsed = parse_placements(placements) if isinstance(placements, str) else tuple(placements)  # type: ignore[arg-type]
            if not parsed:
                raise ValueError(f"Pin({_target_text(target)}): placements must name one placement per mesh axis, got {placements!r}")
            self.codes: Codes = encode(parsed)
        else:
            one = parse_placement(placements) if isinstance(placements, str) else placements
            self.codes = encode((one,))  # type: ignore[arg-type]
        self._axis = 0
        self._codes = self.codes  # as bound to a mesh: canonical there

    def __str__(self) -> str:
        where = "" if self.axis is None else f", axis={self.axis!r}"
        return f"Pin({_target_text(self.target)}, {format_codes(self.codes)!r}{where})"

    def bind(self, mesh: Mesh, dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()) -> None:
        if self.axis is None:
            if len(self.codes) != mesh.ndim:
                raise ValueError(f"{self}: {len(self.codes)} placements for the {mesh.ndim}-axis mesh {mesh}; "
                                 "give one per axis, or one with axis=")
            self._codes = canonical(self.codes, mesh.shape)
        else:
            self._axis = _axis_index(mesh, self.axis, self)
            self._codes = canonical(self.codes, mesh.shape[self._axis:self._axis + 1])

    def applies_to(self, info: NodeInfo) -> bool:
        return self._matches(self.target, info)

    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        codes = candidate.outputs[0]
        return codes == self._codes if self.axis is None else codes[self._axis] == self._codes[0]  # type: ignore[index]


class MinShards(PlacementConstraint):
    """``target``'s output (default: every parameter) is split into at least ``ways`` pieces."""

    def __init__(self, ways: int, target: Target = "parameters") -> None:
        if isinstance(ways, bool) or not isinstance(ways, int) or ways < 1:
            raise ValueError(f"MinShards: ways must be a positive int, got {ways!r}")
        _check_target(target)
        self.ways, self.target = ways, target
        self._sizes: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"MinShards({self.ways}, {_target_text(self.target)})"

    def bind(self, mesh: Mesh, dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()) -> None:
        self._sizes = mesh.shape
        if self.ways > mesh.size:
            raise ValueError(f"{self}: the mesh {mesh} has {mesh.size} devices, fewer than {self.ways}")

    def applies_to(self, info: NodeInfo) -> bool:
        return self._matches(self.target, info)

    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        pieces = 1
        for axis, code in enumerate(candidate.outputs[0]):  # type: ignore[arg-type]
            if code >= 2:
                pieces *= self._sizes[axis]
        return pieces >= self.ways


class _DimOnAxis(PlacementConstraint):
    targeted = False
    _verb = ""

    def __init__(self, dim: str, axis: str | int) -> None:
        if not isinstance(dim, str) or not dim:
            raise TypeError(f"{type(self).__name__}: dim must be a Dim name, got {dim!r}")
        self.dim, self.axis = dim, axis
        self._symbols: frozenset[sympy.Symbol] = frozenset()
        self._axis = 0
        self._sizes: tuple[int, ...] = ()
        self._data_dependent = False

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.dim!r}, axis={self.axis!r})"

    def bind(self, mesh: Mesh, dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()) -> None:
        self._axis, self._sizes = _axis_index(mesh, self.axis, self), mesh.shape
        if self.dim not in dims:
            raise ValueError(f"{self}: {self.dim!r} is not a Dim name ({', '.join(dims) or 'none given'})")
        expr = dims[self.dim]
        expr = sympy.Symbol(expr, integer=True) if isinstance(expr, str) else expr
        self._symbols = frozenset(s for s in expr.free_symbols)
        self._data_dependent = bool(self._symbols) and {s.name for s in self._symbols} <= data_dependent

    @property
    def symbols(self) -> frozenset[sympy.Symbol]:
        """The symbols of the ``Dim`` (once bound to a graph's names)."""
        return self._symbols

    @property
    def mesh_axis(self) -> int:
        """The mesh axis as an index (once bound to a mesh)."""
        return self._axis

    def _has_dim(self, meta: TensorMeta | None) -> bool:
        return meta is not None and any(size.free_symbols & self._symbols for size in meta.shape)

    def _of_dim(self, meta: TensorMeta, codes: Codes) -> tuple[bool, bool]:
        """(meta has a dim of the Dim, codes split one of them on the axis)."""
        has = split = False
        for d, size in enumerate(meta.shape):
            if size.free_symbols & self._symbols:
                has = True
                split = split or self._axis in code_shard_axes(codes, d)
        return has, split

    def applies_to(self, info: NodeInfo) -> bool:
        return True

    def refusals(self, node: GraphNode, divisibility: Divisibility) -> list[str]:
        """Why each dim of the Dim in ``node``'s outputs may not be split on the axis alone (the
        divisibility verdicts that refuse it)."""
        found = []
        for meta in node.outputs:
            for d, size in enumerate(meta.shape if meta is not None else ()):
                if size.free_symbols & self._symbols:
                    verdict = divisibility.check(size, self._sizes[self._axis])
                    if not verdict.allowed:
                        found.append(f"dim {d} (size {size}): {verdict.reason}")
        return found


class ForbidShard(_DimOnAxis):
    """No tensor dim of ``dim`` is split on mesh ``axis``: not in an output, not in an operand."""

    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        pairs = [(m, c) for m, c in zip(node.outputs, candidate.outputs) if m is not None and c is not None]
        pairs += list(zip(operand_metas, candidate.inputs))
        return not any(self._of_dim(meta, codes)[1] for meta, codes in pairs)


class RequireShard(_DimOnAxis):
    """Every output with a dim of ``dim`` is split along one such dim on mesh ``axis``.

    ``dim`` is a Dim name, or a data-dependent size's symbol (``u0``, as the plan's
    ``runtime_asserts`` name it). An op none of whose operands has a dim of ``dim`` creates the
    tensor that has one (a factory such as ``arange(batch)``, which only replicates; ``nonzero``,
    where a data-dependent size is born whole): its output is exempt, and the tensors computed
    from it are split (taking a piece of a replicated tensor is local), a data-dependent size
    unevenly unless proved even (see :mod:`planner.divisibility`). The inputs, which no op
    creates, are split. A mixture of experts' routing chain whose tokens it splits (evenly) runs
    per token on its axis, each rank on its own tokens (:mod:`planner.problem.per_token`)."""

    def own_decision(self, node: GraphNode, graph: PlanGraph) -> bool:
        """A tensor of the dim may not follow the exempt one it is computed from (a data-dependent
        size's every tensor, as a size may be born again: a slice of routed tokens)."""
        if not any(self._has_dim(m) for m in node.outputs):
            return False
        return self._data_dependent or any(self._creates(graph.nodes[name], graph) for name in node.operands)

    def _creates(self, node: GraphNode, graph: PlanGraph) -> bool:
        """Whether ``node`` is an op whose output has a dim of the dim and none of its operands does."""
        return (node.role == "op" and any(self._has_dim(m) for m in node.outputs)
                and not any(self._has_dim(graph.operand_meta(node, k)) for k in range(len(node.operands))))

    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        if self._sizes[self._axis] == 1:
            return True  # one piece is the whole: every placement splits the Dim "1 way"
        if (node.role == "op" or self._data_dependent) and not any(self._has_dim(m) for m in operand_metas):
            return True  # where a tensor of the dim is created
        for meta, codes in zip(node.outputs, candidate.outputs):
            if meta is not None and codes is not None:
                has, split = self._of_dim(meta, codes)
                if has and not split:
                    return False
        return True


class ExpertParallel(PlacementConstraint):
    """Every grouped product of experts (``transformers::grouped_mm_fallback`` and its backward,
    ``torch._grouped_mm`` of rows by stacked experts with offsets) splits its stacked experts ``(E, ...)`` by the expert dim on mesh ``axis``: each rank holds
    and computes ``E/n`` experts, its routed rows dispatched to their expert's rank and the
    results combined back (:mod:`lowering.expert_dispatch`). The experts' parameter (and its
    gradient) is then ``Shard(0)`` on ``axis``, and so are a routing chain's per-expert tables
    (GPT-OSS's experts' biases, gathered by the sorted ids: :mod:`planner.problem.per_token`), each
    rank serving its experts' entries to the rows routed to them. A graph with no such op is an error."""

    targeted = False

    def __init__(self, axis: str | int) -> None:
        self.axis = axis
        self._axis = 0
        self._sizes: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"ExpertParallel(axis={self.axis!r})"

    @property
    def mesh_axis(self) -> int:
        """The mesh axis as an index (once bound to a mesh)."""
        return self._axis

    def bind(self, mesh: Mesh, dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()) -> None:
        self._axis, self._sizes = _axis_index(mesh, self.axis, self), mesh.shape

    def applies_to(self, info: NodeInfo) -> bool:
        return info.role == "op" and ".".join(info.op.split(".")[:2]) in EXPERT_PARALLEL_OPS

    def allows(self, node: GraphNode, candidate: Candidate, operand_metas: Sequence[TensorMeta]) -> bool:
        return (self._sizes[self._axis] == 1 or not splits_experts(node, operand_metas)
                or self._axis in code_shard_axes(candidate.inputs[1], 0))


def check_constraints(constraints: Any) -> tuple[PlacementConstraint, ...]:
    """``constraints`` as a tuple, or a TypeError naming the entry that is no constraint."""
    if isinstance(constraints, (str, PlacementConstraint)) or not isinstance(constraints, Sequence):
        raise TypeError(f"placement_constraints must be a list such as [planner.Pin('inputs', 'S(0)')], got {constraints!r}")
    for k, c in enumerate(constraints):
        if not isinstance(c, PlacementConstraint):
            raise TypeError(f"placement_constraints[{k}] must be a planner.Pin, ForbidShard, RequireShard, MinShards or ExpertParallel, got {c!r}")
    return tuple(constraints)


def constrained_nodes(nodes: Sequence[GraphNode], constraints: Sequence[PlacementConstraint], mesh: Mesh,
                      dims: Mapping[str, str | sympy.Basic], data_dependent: frozenset[str] = frozenset()
                      ) -> dict[str, tuple[int, ...]]:
    """Node name → indices of the constraints that apply to it (a targeted one: to single-tensor nodes);
    ``data_dependent``: the trace's data-dependent symbols.

    A targeted constraint that applies to no node is an error naming it.
    """
    if not constraints:
        return {}
    for c in constraints:
        c.bind(mesh, dims, data_dependent)
        if isinstance(c, RequireShard) and not any(c._has_dim(m) for node in nodes for m in node.outputs):
            sizes = sorted({s.name for node in nodes for m in node.outputs if m is not None for size in m.shape
                            for s in size.free_symbols if s.name in data_dependent})
            raise ValueError(f"{c}: no tensor of the graph has a dim of {c.dim!r}, so it requires nothing"
                             + (f"; the graph's data-dependent sizes are {', '.join(sizes)}" if sizes else ""))
    infos = [(node, node_info(node)) for node in nodes]
    for c in constraints:
        if isinstance(c, ExpertParallel) and not any(c.applies_to(info) for _, info in infos):
            raise ValueError(f"{c}: the graph has no grouped product of experts to split (ops: "
                             f"{', '.join(sorted(EXPERT_PARALLEL_OPS))}); experts computed otherwise (a loop over "
                             "per-expert slices) are not split by expert yet: compute them as one grouped product, "
                             "torch._grouped_mm(rows, weights, offs=counts.cumsum(0).to(torch.int32)) in bfloat16 "
                             "(transformers' MoE models, any dtype: experts_implementation=\"grouped_mm\"), or leave "
                             "ExpertParallel out to plan them data parallel")
    found: dict[str, tuple[int, ...]] = {}
    for k, c in enumerate(constraints):
        matched = [node.name for node, info in infos if (_single(node) or not c.targeted) and c.applies_to(info)]
        if c.targeted and not matched:
            params = sorted(info.fqn for _, info in infos if info.role == "param" and info.fqn)
            raise ValueError(f"placement constraint {c} matches no node; targets are 'inputs', 'outputs', 'parameters', "
                             f"'buffers', 'input:K', 'output:K', a parameter name such as {', '.join(params[:5]) or '(none)'}, "
                             "an FX node name, a pattern of either, or a predicate")
        for name in matched:
            found[name] = found.get(name, ()) + (k,)
    return found


def _describe_node(node: GraphNode) -> str:
    info = node_info(node)
    if info.role in ("param", "buffer"):
        return f"{'parameter' if info.role == 'param' else 'buffer'} {info.fqn} (node {node.name})"
    if info.role == "grad":
        return f"the gradient of {info.fqn}"
    if info.role == "buffer_mutation":
        return f"the new value of buffer {info.fqn}"
    if info.role in ("input", "output"):
        return f"{info.role} {info.index} (node {node.name})"
    return f"node {node.name} ({node.target})"


def restrict_choices(problem: Any, found: Mapping[str, tuple[int, ...]], constraints: Sequence[PlacementConstraint]) -> None:
    """Drop every choice of every group that breaks a constraint on one of its nodes
    (``found``: :func:`constrained_nodes`) and record each constrained node's allowed candidates
    (``problem.allowed_candidates``); a group left with no choice is a :class:`PlacementConflict`."""
    graph = problem.graph
    for g, group in enumerate(problem.groups):
        allowed: dict[tuple[str, int], set[int]] = {}
        for name in group.nodes:
            node = graph.nodes[name]
            metas = [graph.operand_meta(node, k) for k in range(len(node.operands))]
            for k in found.get(name, ()):
                ok = {i for i, c in enumerate(problem.candidates[name]) if constraints[k].allows(node, c, metas)}
                problem.allowed_candidates[name] = problem.allowed_candidates.get(name, ok) & ok
                allowed[(name, k)] = {c for c in range(group.choices) if problem.pick[name][c] in ok}
                if not allowed[(name, k)]:
                    raise _alone(problem, group, node, constraints[k], ok)
        if not allowed:
            continue
        keep = set.intersection(*allowed.values())
        if not keep:
            raise _pair(problem, group, allowed, constraints)
        if len(keep) < group.choices:
            problem.keep_choices(g, sorted(keep))


def _alone(problem: Any, group: Any, node: GraphNode, constraint: PlacementConstraint, ok: set[int]) -> PlacementConflict:
    candidates = problem.candidates[node.name]
    what = _describe_node(node)
    if not ok:
        offered = ", ".join(sorted({format_codes(c.outputs[0]) for c in candidates if c.outputs[0] is not None}))
        pruned = "; ".join(f"{s}: {r}" for s, r in problem.pruned.get(node.name, [])[:3])
        refused = "; ".join(constraint.refusals(node, problem.divisibility)) if isinstance(constraint, RequireShard) else ""
        return PlacementConflict(problem.names.readable(
            f"placement constraint {constraint} conflicts with the strategies of {what}: it may take only {offered}"
            + (f" (pruned: {pruned})" if pruned else "") + (f"; it may not split {refused}" if refused else "")),
            (constraint,), node.name)
    leader = problem.graph.nodes[group.root]
    return PlacementConflict(
        f"placement constraint {constraint} on {what} conflicts with {_describe_node(leader)}, whose decision it shares "
        f"(a gradient takes its parameter's placement, an output its tangent's, a getitem its tuple's): no choice of "
        f"{leader.name} gives it a placement the constraint allows", (constraint,), node.name)


def _pair(problem: Any, group: Any, allowed: Mapping[tuple[str, int], set[int]],
          constraints: Sequence[PlacementConstraint]) -> PlacementConflict:
    items = list(allowed.items())
    for i, ((a, ka), sa) in enumerate(items):
        for (b, kb), sb in items[i + 1:]:
            if not sa & sb:
                where = _describe_node(problem.graph.nodes[a]) if a == b else (
                    f"{_describe_node(problem.graph.nodes[a])} and {_describe_node(problem.graph.nodes[b])}, which share one decision")
                return PlacementConflict(f"placement constraints {constraints[ka]} and {constraints[kb]} conflict on {where}: "
                                         "no placement satisfies both", (constraints[ka], constraints[kb]), a)
    names = ", ".join(str(constraints[k]) for k in dict.fromkeys(k for _, k in allowed))
    return PlacementConflict(f"placement constraints {names} together leave {_describe_node(problem.graph.nodes[group.root])} "
                             "no placement", tuple(constraints[k] for k in dict.fromkeys(k for _, k in allowed)), group.root)
