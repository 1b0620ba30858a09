"""Step 2 of :func:`~planner.problem.build_problem`: one-hot decisions shared by several nodes.

Units (:func:`~planner.clustering.find_units`: a node, or the ``j``-th nodes of identical
layers) are taken in graph order. A unit joins its *leader*'s group when every choice of that
group leaves it exactly one candidate (its ``pick``); otherwise it opens a group of its own,
whose choices are its representative's candidates. The leader of

* a ``getitem`` is the tuple it reads (it takes its element's placement);
* a parameter's gradient is the parameter, a buffer's new value the buffer, a user output its
  tangent (*tying*);
* an elementwise or layout op, with ``merge_followers``, is its first operand's producer
  (*following*), unless that operand is broadcast or smaller than the op's output, or a
  placement constraint names the op, or it is a node of a per-token region weighed per set of
  axes (``Problem.constrained`` holds both: they decide on their own).

A unit's leaders must be aligned (member ``i`` led by member ``i`` of one unit); a getitem or
tied unit whose leaders are not is split into single nodes, each decided on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from planner.clustering import Unit, find_units
from planner.graph import TensorMeta
from planner.placements import R_CODE, Codes, format_codes
from planner.problem.model import Candidate, Group

if TYPE_CHECKING:
    from planner.problem.model import Problem

__all__ = ["add_groups"]

Link = tuple[Unit, str]
"""A unit's leading unit and how it leads: ``element``, ``tie`` or ``follower``."""


def add_groups(problem: Problem, signatures: Mapping[str, tuple], *, cluster: bool, merge_followers: bool) -> None:
    """Fill ``problem.groups``, ``group_of``, ``pick`` and ``shared`` (and the clustering counts)."""
    leaders = _Leaders(problem, merge_followers=merge_followers)
    units = find_units(problem.graph, signatures, enabled=cluster)
    unit_of: dict[str, Unit] = {name: u for u in units for name in u.members}
    link_of: dict[int, Link] = {}
    for unit in units:
        if (found := leaders.of(unit, unit_of)) is not None:
            link_of[id(unit)] = found
    group_of_unit: dict[int, int] = {}
    pending = list(reversed(units))
    while pending:
        unit = pending.pop()
        link = link_of.get(id(unit))
        if link is None and len(unit.members) > 1 and leaders.must_follow(unit.representative):
            pending.extend(reversed(_split(unit, unit_of, link_of, leaders)))
            continue
        group_of_unit[id(unit)] = _join(problem, unit, link, group_of_unit)


def _split(unit: Unit, unit_of: dict[str, Unit], link_of: dict[int, Link], leaders: _Leaders) -> list[Unit]:
    """``unit``'s members as single units, each linked to its own leader."""
    singles = [Unit([name]) for name in unit.members]
    for single in singles:
        unit_of[single.members[0]] = single
        if (found := leaders.of(single, unit_of)) is not None:
            link_of[id(single)] = found
    return singles


def _join(problem: Problem, unit: Unit, link: Link | None, group_of_unit: dict[int, int]) -> int:
    """Put ``unit``'s members in its leader's group, or in a new one; the group's index."""
    rep = unit.representative
    mapping = _mapping(problem, unit, link, group_of_unit) if link is not None else None
    if mapping is None:
        g = len(problem.groups)
        problem.groups.append(Group(rep, len(problem.candidates[rep])))
        mapping = list(range(len(problem.candidates[rep])))
    else:
        g = group_of_unit[id(link[0])]  # type: ignore[index]
        if link[1] == "follower":  # type: ignore[index]
            problem.merged_followers += len(unit.members)
    for name in unit.members:
        problem.group_of[name] = g
        problem.pick[name] = mapping
        problem.groups[g].nodes.append(name)
    if len(unit.members) > 1:
        problem.clusters += 1
        problem.clustered_nodes += len(unit.members)
        for name in unit.members[1:]:
            problem.shared[name] = rep
    return g


class _Leaders:
    """Who leads a unit (see the module docstring)."""

    def __init__(self, problem: Problem, *, merge_followers: bool) -> None:
        self.problem = problem
        self.graph = problem.graph
        self.merge_followers = merge_followers
        self.params = {n.fqn: n.name for n in self.graph if n.role in ("param", "buffer")}
        self.tangents = {n.output_index: n.name for n in self.graph if n.role == "tangent"}

    def must_follow(self, name: str) -> bool:
        """getitems and tied outputs must take their leader's placement."""
        node = self.graph.nodes[name]
        tied = (node.grad_of or node.fqn) is not None or (node.output_index is not None and node.output_index in self.tangents)
        return node.role == "getitem" or (node.role == "sink" and tied)

    def of(self, unit: Unit, unit_of: Mapping[str, Unit]) -> Link | None:
        """The unit that leads ``unit`` and how, or None."""
        graph = self.graph
        node = graph.nodes[unit.representative]
        if node.role == "getitem":
            return _aligned(unit, [graph.nodes[m].source for m in unit.members], unit_of, "element")  # type: ignore[misc]
        if node.role == "sink" and (node.grad_of or node.fqn):
            tensors = [graph.nodes[m].grad_of or graph.nodes[m].fqn for m in unit.members]
            if all(t in self.params for t in tensors):
                return _aligned(unit, [self.params[t] for t in tensors], unit_of, "tie")  # type: ignore[index]
            return None
        if node.role == "sink" and node.output_index is not None:
            if all(graph.nodes[m].output_index in self.tangents for m in unit.members):
                return _aligned(unit, [self.tangents[graph.nodes[m].output_index] for m in unit.members], unit_of, "tie")  # type: ignore[index]
            return None
        if self.merge_followers and node.role == "op" and node.operands and not node.is_tuple \
                and node.name not in self.problem.constrained:
            first = graph.nodes[node.operands[0]].output
            if len(node.operands) > 1 and first.shape != node.output.shape:
                return None  # following a broadcast operand would pin the op to its placement
            if self._bytes(node.output) > self._bytes(first):
                return None  # (expand, upcast) resharding its smaller input may be the better move
            return _aligned(unit, [graph.nodes[m].operands[0] for m in unit.members], unit_of, "follower")
        return None

    def _bytes(self, meta: TensorMeta) -> float:
        """Size of a tensor like ``meta`` at the largest batch point."""
        return float(self.problem.local(meta, (R_CODE,) * self.problem.mesh.ndim).nbytes.max())


def _aligned(unit: Unit, leaders: list[str], unit_of: Mapping[str, Unit], how: str) -> Link | None:
    """The leaders' unit, if member ``i`` of ``unit`` is led by member ``i`` of it (or ``unit`` is single)."""
    lead = unit_of[leaders[0]]
    if lead is unit:
        return None
    if len(unit.members) == 1 or lead.members == leaders:
        return lead, how
    return None


def _mapping(problem: Problem, unit: Unit, link: Link, group_of_unit: Mapping[int, int]) -> list[int] | None:
    """``pick`` for ``unit`` over its leader group's choices, or None if some choice has no match."""
    lead, how = link
    if id(lead) not in group_of_unit:
        return None
    rep = problem.graph.nodes[unit.representative]
    mine = problem.candidates[rep.name]
    lead_rep = lead.representative
    lead_candidates = problem.candidates[lead_rep]
    if how == "element":
        index = {c.outputs[0]: i for i, c in enumerate(mine)}
        want = [lead_candidates[c].outputs[rep.index] for c in problem.pick[lead_rep]]  # type: ignore[index]
    elif how == "tie":
        index = {c.outputs[0]: i for i, c in enumerate(mine)}
        want = [lead_candidates[c].outputs[0] for c in problem.pick[lead_rep]]
    else:
        found = _follower_index(mine, strict=len(rep.operands) == 1)
        if found is None:
            return None
        index = found
        want = [lead_candidates[c].outputs[0] for c in problem.pick[lead_rep]]
    mapping = []
    for placement in want:
        choice = index.get(placement)  # type: ignore[arg-type]
        if choice is None:
            if how != "follower":
                raise AssertionError(f"{rep.name} cannot take the placement {format_codes(placement)} its {how} leader {lead_rep} chose")  # type: ignore[arg-type]
            return None
        mapping.append(choice)
    return mapping


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
