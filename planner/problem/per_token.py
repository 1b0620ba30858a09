"""Per-token regions: a mixture of experts' routing chain, which each rank may run on its own tokens.

A routed MoE layer (transformers' ``grouped_mm_experts_forward``) sorts *every* routed row of the
batch by expert id, gathers the rows by the sort's permutation, runs one grouped product per expert
with offsets counted from the sorted ids, and scatters the results back to their tokens. A sort
of a split tensor is not the split of the sorted tensor, so the sort alone only replicates. The
chain as a whole, though, is per-token work: each token's result depends on that token's rows,
its experts and the (replicated) weights only. A :class:`Region` is such a chain recognised
exactly; on a mesh axis that splits its tokens evenly every rank may run the chain on its own
tokens (the rule :data:`PER_TOKEN`), and what leaves the region is the split of what one device
computes. The planner offers each region every set of such axes (:func:`per_token_choices`; a
``RequireShard`` of its tokens makes its axis part of every set) beside running it as one device
would, and weighs them by cost: its nodes propose both forms, and all of a region's nodes take one
set (:func:`per_token_rule_axes` of their rules), the per-token placement on those axes and never
on another.

**The pattern** (``T`` tokens, ``k`` experts per token, ``n = T·k`` routed rows, ``E`` experts;
anything else leaves no region, and the sort keeps its refusal):

* ``ids = view(topk(scores [T, E], k).indices [T, k], [n])``; ``sort(ids)`` ascending (``ids``
  lie in ``[0, E)``): its values ``sorted`` and its permutation ``perm`` (row ``i`` is routed row
  ``perm[i]``, and routed row ``j`` is token ``j // k``'s);
* the **rows**: ``X[perm]`` of an ``[n, ...]`` tensor, ``X[perm // k]`` of a ``[T, ...]`` one,
  ``B[sorted]`` of a per-expert table ``[E, ...]`` (the experts' biases, as GPT-OSS's),
  ``Z`` scattered at ``inv`` (``index_put(zeros [n, ...], [inv], X [n, ...], accumulate)``, so
  ``Z[i] = X[perm[i]]``), and what row-wise ops make of rows: elementwise ops of rows alone (and
  0-dim tensors), views, splits, slices (and their backward), cats, sums and (un)squeezes keeping
  dim 0, copies, and transformers' grouped product
  ``grouped_mm_fallback(rows, weight [E, ...], offsets)`` and its backward's rows, and
  ``torch._grouped_mm(rows, weight [E, K, N], offsets)``; the **rows transposed** (``[K, n]``,
  ``transpose``/``t``/``permute`` of 2-D rows), read only as the first operand of
  ``torch._grouped_mm``'s weight gradient ``_grouped_mm(rows transposed, rows [n, N], offsets)``;
* ``offsets = cumsum(histc(sorted, E, 0, E - 1))``, read only as the grouped products' offsets;
  ``inv = index_put(empty_like(perm), [perm], arange(n))``, read only as an index (an inference
  trace writes ``empty_permuted([n], [0])`` and ``arange(0, n)``, and ``perm // k`` as a floor ``div``);
* what leaves it: rows back in routed order (``Y[inv]``, or ``index_put(zeros [n, ...], [perm], Y,
  accumulate)``), summed per token (``index_put(zeros [T, ...], [perm // k], Y, accumulate)``), and
  the grouped backwards' weight gradients ``[E, ...]``, a per-expert table's gradient
  (``index_put(zeros [E, ...], [sorted], Y, accumulate)``); zeros made for it, which are zeros on every rank.

Every other tensor of the region is read only inside it.

**Why the region equals the one-device program.** Each row tensor satisfies ``Y[i] = g(perm[i])``
for a function ``g`` of one routed row: of that row's inputs, its token's, its expert id and the
weights. Gathers by ``perm`` and ``perm // k`` and the scatter by ``inv`` (a permutation, since
``perm`` is) give such rows, and row-wise ops keep them. The grouped product gives row ``i`` the
expert whose offsets enclose ``i``; with the rows sorted ascending by ids in ``[0, E)`` and the
offsets their cumulative counts, that is ``sorted[i]``, row ``perm[i]``'s own expert, so it is
row-wise too. Leaving, ``Y[inv][j] = g(j)``, ``perm``'s scatter gives ``g(j)`` at ``j`` and the
per-token sum is ``Σ g(j)`` over token ``t``'s rows ``j``: functions of a token's own rows. A rank
holding tokens ``[r·T/m, (r+1)·T/m)`` (``m`` divides ``T``, proved or a guard of the plan, never an
uneven split) holds their routed rows ``[r·n/m, (r+1)·n/m)`` (routed row ``j`` is token
``j // k``'s), sorts and counts those alone and computes the same ``g`` of each: what leaves is
the one-device result's piece. A per-expert table gathered by ``sorted`` gives row ``i`` its
expert's entry, a function of the row too (the table whole on every rank, or split by the expert
dim, below). The weight gradient is a sum over routed rows per expert (column
``i`` of the rows transposed is row ``i``, split alike: ``Shard(1)``), and so is a table's
gradient scattered by ``sorted``: the ranks' sums add up to them, ``Partial``. Inside the region the ranks' tensors are their own
program's (a rank's sorted rows are not a piece of the sorted rows), so nothing inside is
redistributed: every region node takes the per-token placement on such an axis, never another.
A grouped product may also split its experts over that axis (:data:`PER_TOKEN_EXPERTS`): each
rank dispatches all its own sorted rows to their expert's rank and combines the results back, a
function of each row as before, and each expert's weight gradient sums every rank's rows on its
owner.

**Per-expert tables split by the expert dim** (:class:`Table`). A table's gather ``B[sorted]`` and
its gradient's scatter may split the table by the expert dim over any mesh axis of size ``n``
(:func:`per_token_proposals`; rule :data:`PER_TOKEN_EXPERTS` where the region runs per token there,
``experts`` where it runs as one device would, its sorted ids and rows then split in blocks): rank
``r`` holds experts ``[r·E/n, (r+1)·E/n)``'s entries. Either way a rank's ids are sorted ascending
(its own, or a block of the sorted ones), so it counts its rows per expert, sends the counts to the
experts' ranks and receives each row's entry back in its rows' order
(:mod:`lowering.expert_tables`): the same entry as from the whole table. The gradient's rows go
to their expert's rank, which sums them per expert: across the axis every row reaches its expert
once, so that is the expert's whole gradient (``Shard(0)``, no ``Partial`` on that axis). Each form
is sound alone, so it is no tie to the grouped products': each node weighs it by itself, and
:class:`~planner.ExpertParallel` leaves a table only that form on its axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import sympy

from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.placements import P_CODE, R_CODE, decode, shard_code
from planner.strategies.base import Strategy
from planner.strategies.builtin import EXPERTS, is_pointwise

if TYPE_CHECKING:
    from planner.problem.model import Problem

__all__ = ["PER_TOKEN", "PER_TOKEN_EXPERTS", "PerToken", "Region", "Table", "expert_table_axes", "find_regions",
           "per_token_choices", "per_token_proposals", "per_token_rule_axes", "tie_regions"]

PER_TOKEN = "per_token"
"""The rule name of a region's node on a mesh axis where each rank runs the region on its own tokens."""

PER_TOKEN_EXPERTS = f"{PER_TOKEN}+{EXPERTS}"
"""The rule of a grouped product of a region on such an axis that it also splits its experts over
(expert parallelism borrowing the data-parallel axis): each rank's own sorted rows, all of them,
go to their expert's rank and back; the experts' weight gradient is then whole on its owner."""

S0 = shard_code(0)
_SORTS = ("aten.sort.default", "aten.sort.stable")
_VIEWS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
_COPIES = ("aten._to_copy.default", "aten.clone.default", "aten.alias.default", "aten.detach.default",
           "aten.contiguous.default")
_ZEROS = ("aten.new_zeros.default", "aten.zeros.default", "aten.zeros_like.default")
_GROUPED = "transformers.grouped_mm_fallback.default"
_GROUPED_BACKWARD = "transformers.grouped_mm_fallback_backward.default"
_GROUPED_MM = "aten._grouped_mm.default"
_PRODUCTS = (_GROUPED, _GROUPED_BACKWARD, _GROUPED_MM)

_TRANSPOSES = ("aten.transpose.int", "aten.t.default", "aten.permute.default")

_INNER = frozenset({"sorted", "perm", "token_of", "rows", "rows_t", "counts", "offsets", "scratch", "positions", "inv"})
"""Kinds of tensor read only inside the region (the rest, zeros and what leaves, any node may read)."""
_PLACED = {"counts": R_CODE, "offsets": R_CODE, "partial": P_CODE, "rows_t": shard_code(1), "expert_zeros": R_CODE}
"""A kind's placement on a per-token axis, when not ``Shard(0)``."""


class Table(NamedTuple):
    """A per-expert table's gather by the sorted ids, or its gradient's scatter by them, on a mesh
    axis where the table is split by the expert dim: its placement codes there, the tensors it
    exchanges by ``all_to_all`` and those of the table's shape (as indices into its operands, then
    its outputs, as :attr:`~planner.strategies.base.Strategy.all_to_alls` counts them)."""

    outputs: tuple[int, ...]
    operands: tuple[int, ...]
    exchanged: tuple[int, ...]
    tables: tuple[int, ...]


_GATHER = Table((S0,), (S0, S0), (1, 2), (0,))
"""``B[sorted]`` with ``B`` split by the expert dim: the ids' counts exchanged (priced at the ids'
bytes, which bound them), each row's bias sent back by its expert's rank."""
_SCATTER = Table((S0,), (S0, S0, S0), (1, 2), (0, 3))
"""``index_put(zeros [E, ...], [sorted], rows, accumulate)`` into the experts' own pieces of the zeros:
the counts exchanged, each row sent to its expert's rank (summed there, per local expert)."""


@dataclass(frozen=True)
class Region:
    """A recognised routing chain: its sort, its ``tokens`` (``T``), each node's placements on a
    per-token axis, as codes (outputs, operands), and its per-expert tables' gathers and gradients'
    scatters, with their placements where the table is split by the expert dim."""

    sort: str
    tokens: sympy.Basic
    placements: dict[str, tuple[tuple[int | None, ...], tuple[int, ...]]]
    tables: dict[str, Table]


class PerToken(NamedTuple):
    """A region node's places: the sets of mesh axes its region may run per token on (``()``: as one
    device would), its placement codes on such an axis (one per output, ``None`` for a
    non-tensor one, and one per operand); for a per-expert table's gather or gradient's scatter,
    its codes where the table is split by the expert dim, and the axes where it must be
    (:class:`~planner.ExpertParallel`'s)."""

    choices: tuple[tuple[int, ...], ...]
    outputs: tuple[int | None, ...]
    operands: tuple[int, ...]
    table: Table | None = None
    table_axes: frozenset[int] = frozenset()


def expert_table_axes(rule: str, mesh_ndim: int) -> frozenset[int]:
    """The mesh axes on which a decision's ``rule`` splits its experts (``experts`` or
    :data:`PER_TOKEN_EXPERTS` there): for a per-expert table's gather or scatter, those splitting the table."""
    parts = rule.split("/")
    parts = parts * mesh_ndim if len(parts) == 1 else parts
    return frozenset(a for a, part in enumerate(parts) if part in (EXPERTS, PER_TOKEN_EXPERTS))


def per_token_rule_axes(rule: str, mesh_ndim: int, *, experts: bool | None = None) -> frozenset[int]:
    """The mesh axes on which a decision's ``rule`` (one part per axis joined by ``/``, or one for
    all) runs its node per token (:data:`PER_TOKEN` or :data:`PER_TOKEN_EXPERTS` there); with
    ``experts`` only those where it also splits its experts (True) or only those where not (False)."""
    if PER_TOKEN not in rule:
        return frozenset()
    parts = rule.split("/")
    parts = parts * mesh_ndim if len(parts) == 1 else parts
    wanted = {None: (PER_TOKEN, PER_TOKEN_EXPERTS), True: (PER_TOKEN_EXPERTS,), False: (PER_TOKEN,)}[experts]
    return frozenset(a for a, part in enumerate(parts) if part in wanted)


def _per_token_proposal(strategy: Strategy | None, outputs: tuple, operands: tuple, place: PerToken,
                       axes: tuple[int, ...]) -> tuple[Strategy, tuple, tuple]:
    """A proposal (a strategy or None for an all-replicated fallback, and its output and operand
    codes) with ``place``'s codes on the mesh ``axes``: the rule there is :data:`PER_TOKEN`, and the
    op's own collectives over them are dropped (each rank's tokens stay its own). A grouped product
    whose rule on such an axis is expert parallelism keeps it there (:data:`PER_TOKEN_EXPERTS`): its
    codes (the experts and their gradient split by the expert dim, the rows and offsets as per
    token) and its all_to_alls, each rank's own rows dispatched to their expert's rank."""
    ndim = len(next(c for c in (*outputs, *operands) if c is not None))
    parts = ["replicate"] * ndim if strategy is None else strategy.rule.split("/")
    parts = parts if len(parts) == ndim else [strategy.rule] * ndim  # type: ignore[union-attr]
    experts = {a for a in axes if parts[a] == EXPERTS}
    per_token = set(axes) - experts

    def placed(codes: tuple[int, ...] | None, mine: int | None) -> tuple[int, ...] | None:
        return None if codes is None else tuple(mine if a in per_token else c for a, c in enumerate(codes))  # type: ignore[misc]

    outputs = tuple(placed(c, m) for c, m in zip(outputs, place.outputs))
    operands = tuple(placed(c, m) for c, m in zip(operands, place.operands))
    rule = "/".join(PER_TOKEN if a in per_token else PER_TOKEN_EXPERTS if a in experts else part
                    for a, part in enumerate(parts))
    reduces = () if strategy is None else tuple((a, n) for a, n in strategy.all_reduces if a not in per_token)
    exchanged = () if strategy is None else tuple((a, k) for a, k in strategy.all_to_alls if a not in per_token)
    made = Strategy(tuple(None if c is None else decode(c) for c in outputs), tuple(decode(c) for c in operands),
                    rule, reduces, exchanged)
    return made, outputs, operands


def per_token_proposals(strategy: Strategy | None, outputs: tuple, operands: tuple, place: PerToken,
                        axes: tuple[int, ...], mesh_shape: Sequence[int]) -> list[tuple[Strategy | None, tuple, tuple]]:
    """A proposal's forms with its region per token on the mesh ``axes``: the proposal as it is where
    there are none, else its :func:`_per_token_proposal`; for a per-expert table's gather or gradient's
    scatter (``place.table``) also, on each mesh axis of size above 1, the form with the table split
    by the expert dim there (rule :data:`PER_TOKEN_EXPERTS` on a per-token axis, ``experts`` on
    another: each rank holds its experts' entries and serves the rows routed to them, its
    all_to_alls priced) — the only forms where ``place.table_axes`` (:class:`~planner.ExpertParallel`)
    names axes."""
    made = _per_token_proposal(strategy, outputs, operands, place, axes) if axes else (strategy, outputs, operands)
    table = place.table
    if table is None:
        return [made]
    split = [a for a, size in enumerate(mesh_shape) if size > 1]
    forced = [a for a in split if a in place.table_axes]
    # the table split by the expert dim over one axis alone: the lowering serves E/n entries a rank
    codes = (*made[2], *made[1])
    alone = [a for a in forced or split if not any(codes[k][b] == S0 for k in table.tables for b in range(len(codes[k]))
                                                   if b != a)]
    return ([] if forced else [made]) + [_table_form(*made, table, a, a in axes) for a in alone]


def _table_form(strategy: Strategy | None, outputs: tuple, operands: tuple, table: Table, axis: int,
                per_token: bool) -> tuple[Strategy, tuple, tuple]:
    """A proposal of a table's gather or scatter with the table split by the expert dim on ``axis``
    (where the region runs per token, or not)."""
    def placed(codes: tuple[int, ...] | None, mine: int) -> tuple[int, ...] | None:
        return None if codes is None else (*codes[:axis], mine, *codes[axis + 1:])

    outputs = tuple(placed(c, m) for c, m in zip(outputs, table.outputs))
    operands = tuple(placed(c, m) for c, m in zip(operands, table.operands))
    ndim = len(operands[0])
    parts = ["replicate"] * ndim if strategy is None else strategy.rule.split("/")
    parts = parts if len(parts) == ndim else [strategy.rule] * ndim  # type: ignore[union-attr]
    parts[axis] = PER_TOKEN_EXPERTS if per_token else EXPERTS
    reduces = () if strategy is None else tuple((a, n) for a, n in strategy.all_reduces if a != axis)
    exchanged = () if strategy is None else tuple((a, k) for a, k in strategy.all_to_alls if a != axis)
    made = Strategy(tuple(None if c is None else decode(c) for c in outputs), tuple(decode(c) for c in operands),
                    "/".join(parts), reduces, exchanged + tuple((axis, k) for k in table.exchanged))
    return made, outputs, operands


def find_regions(graph: PlanGraph) -> list[Region]:
    """Every sort of ``graph`` that heads a per-token region (see the module docstring)."""
    return [region for node in graph if node.target in _SORTS and (region := _Builder(graph, node).build()) is not None]


def per_token_choices(region: Region, forced: Iterable[int], mesh_shape: Sequence[int],
                      even: Callable[[sympy.Basic, int], bool]) -> tuple[tuple[int, ...], ...]:
    """The sets of mesh axes ``region`` may run per token on: each set of axes of size above 1 that
    holds the ``forced`` ones (a ``RequireShard`` splits the tokens there) and whose sizes' product
    divides its token count ``T`` evenly (``even(tokens, ways)``: proved, or a guard of the plan).
    The empty set (the region run as one device would) is one unless some axis is forced; none at
    all when no forced set is even."""
    forced = frozenset(a for a in forced if mesh_shape[a] > 1)
    axes = [a for a, size in enumerate(mesh_shape) if size > 1]
    found = []
    for mask in range(1 << len(axes)):
        chosen = tuple(a for k, a in enumerate(axes) if mask >> k & 1)
        if forced <= set(chosen) and even(region.tokens, math.prod(mesh_shape[a] for a in chosen)):
            found.append(chosen)
    return tuple(found)


def tie_regions(problem: Problem, region_of: Mapping[str, str]) -> None:
    """Make every region's nodes (``region_of``: node → its region's sort, for the regions offered
    more than one set of per-token axes) take one set: regions whose nodes share a decision
    (identical layers) are tied as one; a choice of a region node whose set some node of its tie
    cannot take is dropped (until every node offers the same sets); and where several remain, the
    tie is a :attr:`~planner.problem.Problem.agreements` entry the solvers keep (its key per choice:
    the node's per-token axes). Call once the groups' choices are final but for this."""
    ties: dict[str, str] = {}  # region -> a region it is tied to (union-find)

    def root(region: str) -> str:
        while ties.get(region, region) != region:
            region = ties[region]
        return region

    group_region: dict[int, str] = {}
    for name, region in region_of.items():
        mine, other = root(region), root(group_region.setdefault(problem.group_of[name], region))
        if mine != other:
            ties[mine] = other
    members: dict[str, list[str]] = {}
    for name, region in region_of.items():
        members.setdefault(root(region), []).append(name)
    for names in members.values():
        sorts = sorted({region_of[name] for name in names})
        tied = _agreeing(problem, names, sorts)
        if tied is not None:
            problem.agreements.append(tied)


def _agreeing(problem: Problem, names: list[str], sorts: list[str]) -> list[tuple[int, tuple]] | None:
    """Drop the choices of ``names``' groups (the nodes of the regions headed by ``sorts``) that
    leave them no common set of per-token axes; the agreement on the sets left, or None when one is left."""
    ndim = problem.mesh.ndim
    groups = list(dict.fromkeys(problem.group_of[name] for name in names))
    nodes = {g: [name for name in names if problem.group_of[name] == g] for g in groups}

    def keys(g: int) -> list[frozenset[int] | None]:  # None: the group's nodes differ at the choice
        found = []
        for c in range(problem.groups[g].choices):
            axes = {per_token_rule_axes(problem.candidates[name][problem.pick[name][c]].strategy.rule, ndim) for name in nodes[g]}
            found.append(axes.pop() if len(axes) == 1 else None)
        return found

    while True:
        common = set.intersection(*({k for k in keys(g) if k is not None} for g in groups))
        if not common:
            raise ValueError(f"the nodes of the routing chain of {', '.join(sorts)} may not all run per token on one "
                             "set of mesh axes (or all not): placement constraints ask some of them to run per token and "
                             "others not (a node's per-token placement is its region's); drop one of them")
        dropped = False
        for g in groups:
            keep = [c for c, k in enumerate(keys(g)) if k in common]
            if len(keep) < problem.groups[g].choices:
                problem.keep_choices(g, keep)
                dropped = True
        if not dropped:
            break
    if len(common) == 1:
        return None
    return [(g, tuple(keys(g))) for g in groups]


class _Builder:
    """Classifies the nodes a sort reaches; ``build`` gives the region, or None when any node misfits."""

    def __init__(self, graph: PlanGraph, sort: GraphNode) -> None:
        self.graph, self.sort = graph, sort
        self.kinds: dict[str, tuple[str | None, ...]] = {}
        self.tables: dict[str, Table] = {}
        self.items: dict[str, list[str]] = {}  # tuple node -> its getitems
        for node in graph:
            if node.role == "getitem":
                self.items.setdefault(node.source, []).append(node.name)  # type: ignore[arg-type]

    def build(self) -> Region | None:
        if not self._head():
            return None
        order = {name: i for i, name in enumerate(self.graph.nodes)}
        pending, done = {self.sort.name}, set()
        while pending:  # in graph order: a node's operands in the region are classified before it
            name = min(pending, key=order.__getitem__)
            pending.discard(name)
            done.add(name)
            node = self.graph.nodes[name]
            if name not in self.kinds:
                kinds = (self.kinds[node.source][node.index],) if node.role == "getitem" else self._classify(node)  # type: ignore[index]
                if kinds is None:
                    return None
                self.kinds[name] = kinds
            if any(kind in _INNER for kind in self.kinds[name]):
                pending.update(n for n in (*self._readers(name), *self.items.get(name, ())) if n not in done)
        if not self._closed():
            return None
        placements = {name: self._placements(self.graph.nodes[name]) for name in self.kinds
                      if self.graph.nodes[name].role != "getitem"}
        return Region(self.sort.name, self.tokens, placements, self.tables)

    # -- the head: topk ids, flattened, sorted ------------------------------------------------------

    def _head(self) -> bool:
        sort = self.sort
        if len(sort.operands) != 1 or _arg(sort, 1, "dim", -1) not in (0, -1) or _arg(sort, 2, "descending", False):
            return False
        ids = self.graph.nodes[sort.operands[0]]
        if ids.target not in _VIEWS or ids.output.ndim != 1:
            return False
        routed = self.graph.nodes[ids.operands[0]]
        if routed.role != "getitem" or routed.index != 1 or routed.output.ndim != 2:
            return False
        topk = self.graph.nodes[routed.source]  # type: ignore[index]
        if topk.target != "aten.topk.default" or _arg(topk, 2, "dim", -1) not in (-1, 1):
            return False
        scores = self.graph.operand_meta(topk, 0)
        tokens, k = routed.output.shape
        if scores.ndim != 2 or not scores.shape[1].is_Integer or not k.is_Integer or not _same(scores.shape[0], tokens):
            return False
        self.tokens, self.k, self.experts = tokens, int(k), int(scores.shape[1])
        self.rows = tokens * self.k
        if not _same(ids.output.shape[0], self.rows):
            return False
        self.kinds[sort.name] = ("sorted", "perm")
        return True

    # -- each reader ------------------------------------------------------------------------------------

    def _readers(self, name: str) -> list[str]:
        return list(dict.fromkeys(user for user, _ in self.graph.users.get(name, ())))

    def _kind(self, name: str) -> str | None:
        found = self.kinds.get(name)
        return None if found is None else found[0]

    def _classify(self, node: GraphNode) -> tuple[str | None, ...] | None:
        """The kinds of ``node``'s outputs as a region node, or None when it is none of the pattern's."""
        kinds = [self._kind(name) for name in node.operands]
        target = node.target
        if target in _COPIES and len(kinds) == 1 and kinds[0] in ("sorted", "rows"):
            return (kinds[0],)
        if target in _TRANSPOSES and kinds == ["rows"] and node.output.ndim == 2 and self._swaps(node):
            return ("rows_t",)
        if kinds == ["perm"] and node.fx.args[1:] == (self.k,) and (
                target == "aten.floor_divide.default"
                or target == "aten.div.Tensor_mode" and node.fx.kwargs.get("rounding_mode") == "floor"):
            return ("token_of",)
        if target == "aten.index.Tensor":
            return self._index(node, kinds)
        if target == "aten.histc.default" and kinds == ["sorted"] \
                and tuple(node.fx.args[1:]) == (self.experts, 0, self.experts - 1):
            return ("counts",)
        if target == "aten.cumsum.default" and kinds == ["counts"] and _arg(node, 1, "dim", None) in (0, -1):
            return ("offsets",)
        if target in _PRODUCTS:
            return self._grouped(node, kinds)
        if target == "aten.empty_like.default" and kinds == ["perm"]:
            return ("scratch",)
        if target in _ZEROS and node.output.ndim >= 1 and self._rows_of(node.output) is not None:
            return ("zeros",)
        if target in _ZEROS and self._per_expert(node.output):
            return ("expert_zeros",)
        if target == "aten.index_put.default":
            return self._index_put(node, kinds)
        scalars = [k for k, kind in enumerate(kinds) if kind is None and self.graph.operand_meta(node, k).ndim == 0]
        if "rows" in kinds and all(kind == "rows" or k in scalars for k, kind in enumerate(kinds)) \
                and self._row_wise(node, scalars):
            return ("rows",) * len(node.outputs)
        return None

    def _rows_of(self, meta: TensorMeta) -> str | None:
        """``routed`` or ``tokens`` for a tensor whose dim 0 is the routed rows or the tokens."""
        if meta.ndim == 0:
            return None
        if _same(meta.shape[0], self.rows):
            return "routed"
        return "tokens" if _same(meta.shape[0], self.tokens) else None

    def _index(self, node: GraphNode, kinds: list[str | None]) -> tuple[str, ...] | None:
        indices = node.fx.args[1]
        if len(indices) != 1 or indices[0] is None or len(kinds) != 2:
            return None
        source = self.graph.operand_meta(node, 0)
        if kinds == [None, "perm"] and self._rows_of(source) == "routed":
            return ("rows",)
        if kinds == [None, "token_of"] and self._rows_of(source) == "tokens":
            return ("rows",)
        if kinds == [None, "sorted"] and self._per_expert(source):  # row i's expert's bias: expert sorted[i]'s
            self.tables[node.name] = _GATHER
            return ("rows",)
        if kinds == ["rows", "inv"]:
            return ("leaves",)
        return None

    def _swaps(self, node: GraphNode) -> bool:
        """Whether a transpose of a 2-D tensor swaps its two dims (``t``, ``transpose(0, 1)``, ``permute([1, 0])``)."""
        if node.target == "aten.t.default":
            return True
        if node.target == "aten.permute.default":
            return [d % 2 for d in node.fx.args[1]] == [1, 0]
        return {d % 2 for d in node.fx.args[1:3]} == {0, 1}

    def _grouped(self, node: GraphNode, kinds: list[str | None]) -> tuple[str, ...] | None:
        if node.target == _GROUPED_MM and kinds == ["rows_t", "rows", "offsets"]:  # the weight gradient [E, K, N]
            return ("partial",) if node.output.ndim == 3 and _same(node.output.shape[0], self.experts) else None
        weight = self.graph.operand_meta(node, 1)
        if kinds[1] is not None or not weight.shape or not _same(weight.shape[0], self.experts):
            return None
        if node.target in (_GROUPED, _GROUPED_MM) and kinds == ["rows", None, "offsets"] and weight.ndim == 3:
            return ("rows",)
        if node.target == _GROUPED_BACKWARD and kinds == ["rows", None, "offsets", "rows"]:
            return ("rows", "partial")
        return None

    def _index_put(self, node: GraphNode, kinds: list[str | None]) -> tuple[str, ...] | None:
        """``index_put(self, [index], values, accumulate)`` building ``inv``, scattering in or out."""
        args = node.fx.args
        indices = args[1]
        accumulate = bool(args[3]) if len(args) > 3 else bool(node.fx.kwargs.get("accumulate", False))
        if len(indices) != 1 or indices[0] is None or len(kinds) != 3:
            return None
        base, _, values = node.operands
        if not accumulate:
            if kinds[1] == "perm" and (kinds[0] == "scratch" or self._scratch(base)) and self._positions(values):
                return ("inv",)
            return None
        if kinds[1:] == ["sorted", "rows"] and (kinds[0] == "expert_zeros" or self._expert_zeros(base)) \
                and self._per_expert(node.output) \
                and tuple(node.output.shape[1:]) == tuple(self.graph.operand_meta(node, 2).shape[1:]):
            self.tables[node.name] = _SCATTER
            return ("partial",)  # the experts' biases' gradient: each row's gradient summed on its expert
        if not self._zeros(base):
            return None
        rows_of = self._rows_of(node.output)
        value_rows = self._rows_of(self.graph.operand_meta(node, 2))
        if kinds[1:] == ["inv", None] and rows_of == "routed" and value_rows == "routed" \
                and _same_shape(node.output, self.graph.operand_meta(node, 2)):
            return ("rows",)
        if kinds[1:] == ["perm", "rows"] and rows_of == "routed" and _same_shape(node.output, self.graph.operand_meta(node, 2)):
            return ("leaves",)
        if kinds[1:] == ["token_of", "rows"] and rows_of == "tokens" \
                and tuple(node.output.shape[1:]) == tuple(self.graph.operand_meta(node, 2).shape[1:]):
            return ("leaves",)
        return None

    def _zeros(self, name: str) -> bool:
        """Whether ``name`` is a zeros tensor made for the region (taken in when the region reads it)."""
        node = self.graph.nodes[name]
        if node.target not in _ZEROS or self._rows_of(node.output) is None:
            return False
        self.kinds.setdefault(name, ("zeros",))
        return True

    def _per_expert(self, meta: TensorMeta | None) -> bool:
        """Whether ``meta``'s dim 0 is the experts and none of it the rows (a per-expert table: biases)."""
        return meta is not None and meta.ndim >= 1 and _same(meta.shape[0], self.experts) \
            and self._rows_of(meta) is None

    def _expert_zeros(self, name: str) -> bool:
        """Whether ``name`` is a zeros tensor of a per-expert table's shape (taken in when the region reads it)."""
        node = self.graph.nodes[name]
        if node.target not in _ZEROS or not self._per_expert(node.output):
            return False
        self.kinds.setdefault(name, ("expert_zeros",))
        return True

    def _scratch(self, name: str) -> bool:
        """Whether ``name`` is ``empty_permuted([n], [0])`` (``empty_like(perm)`` as an inference
        trace writes it) read by nothing else (taken in as ``scratch``)."""
        node = self.graph.nodes[name]
        if node.target != "aten.empty_permuted.default" or node.operands or node.output.ndim != 1 \
                or not _same(node.output.shape[0], self.rows) or len(self._readers(name)) != 1:
            return False
        self.kinds[name] = ("scratch",)
        return True

    def _positions(self, name: str) -> bool:
        """Whether ``name`` is ``arange(n)`` (or ``arange(0, n)``) read by nothing else (taken in:
        its values are each rank's own)."""
        node = self.graph.nodes[name]
        args = node.fx.args
        counting = node.target == "aten.arange.default" and len(args) == 1 \
            or node.target == "aten.arange.start_step" and len(args) == 2 and args[0] == 0 \
            and node.fx.kwargs.get("step", 1) == 1
        if not counting or node.operands or node.output.ndim != 1 or not _same(node.output.shape[0], self.rows):
            return False
        if len(self._readers(name)) != 1:
            return False
        self.kinds[name] = ("positions",)
        return True

    def _row_wise(self, node: GraphNode, scalars: Sequence[int] = ()) -> bool:
        """Whether ``node`` maps rows to rows one by one: every operand and output keeps dim 0 as the
        routed rows (elementwise ops with no broadcast over it, views, splits, slices, cats and sums
        off dim 0), but for the operands ``scalars`` of an elementwise op (0-dim: one value for every row)."""
        if scalars and not is_pointwise(node):
            return False
        metas = [self.graph.operand_meta(node, k) for k in range(len(node.operands)) if k not in scalars]
        if any(m is None or self._rows_of(m) != "routed" for m in (*metas, *node.outputs)):
            return False
        target = node.target
        ndim = node.outputs[0].ndim  # type: ignore[union-attr]
        if is_pointwise(node):
            return all(m.ndim == ndim for m in metas)
        if target in _VIEWS or target in _COPIES:
            return len(metas) == 1
        if target in ("aten.unsqueeze.default", "aten.squeeze.dim"):
            dim = node.fx.args[1]
            return dim % (ndim if target == "aten.unsqueeze.default" else metas[0].ndim) != 0
        if target in ("aten.split.Tensor", "aten.split_with_sizes.default"):
            return _arg(node, 2, "dim", 0) % metas[0].ndim != 0
        if target == "aten.cat.default":
            return _arg(node, 1, "dim", 0) % ndim != 0
        if target == "aten.slice.Tensor":  # GPT-OSS's interleaved gate and up: x[..., ::2]
            return len(metas) == 1 and _arg(node, 1, "dim", 0) % ndim != 0
        if target == "aten.slice_backward.default":
            return len(metas) == 1 and node.fx.args[2] % ndim != 0
        if target == "aten.sum.dim_IntList":
            dims = node.fx.args[1]
            return bool(dims) and all(d % metas[0].ndim != 0 for d in dims)
        return False

    # -- closure and placements -----------------------------------------------------------------------

    def _closed(self) -> bool:
        """Whether every tensor of an inner kind is read only by region nodes, the graph's outputs included."""
        outputs = set(self.graph.outputs)
        for name, kinds in self.kinds.items():
            if not any(kind in _INNER for kind in kinds):
                continue
            if name in outputs or any(user not in self.kinds for user in self._readers(name)):
                return False
        return True

    def _placements(self, node: GraphNode) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
        outputs = tuple(None if meta is None else _PLACED.get(kind, S0)  # type: ignore[arg-type]
                        for meta, kind in zip(node.outputs, self.kinds[node.name]))
        operands = []
        for k, name in enumerate(node.operands):
            kind = self._kind(name)
            if kind is not None:
                operands.append(_PLACED.get(kind, S0))
            elif node.target in _PRODUCTS and k == 1:
                operands.append(R_CODE)  # the experts' weights, whole on a per-token axis
            else:
                operands.append(S0 if self._rows_of(self.graph.operand_meta(node, k)) else R_CODE)
        return outputs, tuple(operands)


def _arg(node: GraphNode, position: int, name: str, default: object) -> object:
    args = node.fx.args
    return args[position] if len(args) > position else node.fx.kwargs.get(name, default)


def _same(a: sympy.Basic, b: sympy.Basic) -> bool:
    return sympy.expand(a - b) == 0


def _same_shape(a: TensorMeta | None, b: TensorMeta | None) -> bool:
    return a is not None and b is not None and a.ndim == b.ndim and all(_same(x, y) for x, y in zip(a.shape, b.shape))
