"""Step 1 of :func:`~planner.problem.build_problem`: each node's candidate strategies.

A node's proposals come from the first strategy provider that answers for it; a placeholder
or an output may take any non-partial placement (only ``Replicate`` for a user output under
``replicate_outputs``); a ``getitem`` takes one of its element's placements; a node no provider
covers is replicated (and listed in ``Problem.uncovered``); a node read into Python numbers
(``GraphNode.read_as_scalar``) keeps only its replicated proposals; a node of a per-token region
(:mod:`planner.problem.per_token`) proposes each of its proposals once per set of mesh axes its
region may run per token on, with its per-token placement on those axes (rule ``per_token``
there; the empty set: the proposal as it is). Every proposal is first made
canonical (:func:`~planner.placements.canonical`): on a mesh axis of size 1 each placement is
``Replicate``, and the op's own collectives over such an axis are dropped, so a size-1 axis
places nothing and no redistribution ever steps on it; proposals that become equal are one.
A proposal survives when every
sharded dim of its outputs and operands passes the divisibility policy; it is then priced
(compute seconds, with the collectives the op itself performs: all-reduces, expert
parallelism's all_to_alls, and the bytes its outputs hold
per device when the node holds a storage of its own: :class:`~planner.problem.liveness.Liveness`)
at every batch point. Nodes with equal signatures
(:func:`~planner.clustering.node_signature`) share one list.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.placements import R_CODE, Codes, canonical, decode, encode, format_codes, shard_code
from planner.problem.model import Candidate
from planner.problem.per_token import PerToken, per_token_proposals, per_token_rule_axes
from planner.strategies.base import Strategy, StrategyProvider

if TYPE_CHECKING:
    from planner.problem.model import Problem

__all__ = ["add_candidates"]

Proposal = tuple[Strategy | None, tuple[Codes | None, ...], tuple[Codes, ...]]
"""(strategy, or None for the planner's own; output codes; operand codes)."""


def add_candidates(problem: Problem, providers: Sequence[StrategyProvider], signatures: Mapping[str, tuple], *,
                   replicate_outputs: bool, per_token: Mapping[str, PerToken] | None = None) -> None:
    """Fill ``problem.candidates`` (and ``pruned``, ``uncovered``) for every node, in graph order;
    a node of ``per_token`` proposes each proposal per set of axes it may run per token on."""
    per_token = per_token or {}
    cache: dict[tuple, tuple[list[Candidate], list[tuple[str, str]]]] = {}
    for node in problem.graph:
        key = signatures[node.name]
        if node.role == "getitem":  # its candidates follow its tuple's, which signatures do not see
            key = key + (id(problem.candidates[node.source]),)  # type: ignore[index]
        if key not in cache:
            proposals, provider = _proposals(problem, node, providers, replicate_outputs=replicate_outputs)
            if node.name in per_token and node.role == "op":
                place = per_token[node.name]
                proposals = [q for axes in place.choices for p in proposals
                             for q in per_token_proposals(*p, place, axes, problem.mesh.shape)]
            if node.read_as_scalar:
                r = (R_CODE,) * problem.mesh.ndim
                proposals = [p for p in proposals if all(p[1][k] in (None, r) for k in node.read_as_scalar)]
            cache[key] = _survivors(problem, node, proposals, provider, held=problem.liveness.holds(node.name))
        problem.candidates[node.name], pruned = cache[key]
        if pruned:
            problem.pruned[node.name] = pruned


def _proposals(problem: Problem, node: GraphNode, providers: Sequence[StrategyProvider], *,
               replicate_outputs: bool) -> tuple[list[Proposal], str]:
    """What may be proposed for ``node``, and who proposed it."""
    mesh_ndim = problem.mesh.ndim
    if node.role in ("input", "param", "buffer", "constant", "tangent", "sink"):
        only_r = replicate_outputs and (node.role == "tangent" or (node.role == "sink" and not (node.grad_of or node.fqn)))
        codes = _all_codes(node.output.ndim, mesh_ndim, replicate_only=only_r)
        ins = (lambda c: (c,)) if node.role == "sink" else (lambda c: ())
        return [(None, (c,), ins(c)) for c in codes], "planner"
    if node.role == "getitem":
        source = problem.candidates[node.source]  # type: ignore[index]
        placements = list(dict.fromkeys(c.outputs[node.index] for c in source))  # type: ignore[index]
        return [(None, (p,), ()) for p in placements], "planner"
    for provider in providers:
        found = provider.strategies(node, problem.graph, problem.mesh)
        if found:
            return _encoded(found), provider.name
    problem.uncovered[node.name] = node.target
    r = (R_CODE,) * mesh_ndim
    return [(None, tuple(None if m is None else r for m in node.outputs), tuple(r for _ in node.operands))], "fallback"


def _all_codes(tensor_ndim: int, mesh_ndim: int, *, replicate_only: bool = False) -> list[Codes]:
    """Every non-partial placement of a ``tensor_ndim``-d tensor on a ``mesh_ndim``-axis mesh."""
    options = [R_CODE] if replicate_only else [R_CODE] + [shard_code(d) for d in range(tensor_ndim)]
    return [tuple(c) for c in itertools.product(options, repeat=mesh_ndim)]


def _encoded(strategies: Sequence[Strategy]) -> list[Proposal]:
    """A provider's strategies as codes, leaving out those with placements the planner has no code for."""
    out: list[Proposal] = []
    for s in strategies:
        try:
            out.append((s, tuple(None if p is None else encode(p) for p in s.outputs), tuple(encode(p) for p in s.inputs)))
        except ValueError:
            continue
    return out


def _survivors(problem: Problem, node: GraphNode, proposals: list[Proposal], provider: str, *,
               held: bool) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The proposals the policy allows, priced; and (proposal, reason) for each one dropped."""
    operand_metas = [problem.graph.operand_meta(node, k) for k in range(len(node.operands))]
    survivors: list[Candidate] = []
    pruned: list[tuple[str, str]] = []
    seen: set[tuple] = set()
    for strategy, outs, ins in proposals:
        strategy, outs, ins = _canonical(problem.mesh.shape, strategy, outs, ins)
        per_token_axes = frozenset() if strategy is None else per_token_rule_axes(strategy.rule, problem.mesh.ndim)
        key = (outs, ins, per_token_axes)  # a region node's per-token and own proposals may place alike
        if key in seen:
            continue
        seen.add(key)
        reason = _rejection(problem, node, outs, ins, operand_metas)
        if reason is not None:
            pruned.append((_describe(outs, ins), reason))
            continue
        if strategy is None:
            strategy = Strategy(tuple(None if p is None else decode(p) for p in outs), tuple(decode(p) for p in ins),
                                "replicate" if provider == "fallback" else format_codes(outs[0]))  # type: ignore[arg-type]
        survivors.append(_priced(problem, node, strategy, provider, outs, ins, operand_metas, held=held))
    if not survivors:
        raise ValueError(
            f"every strategy of node {node.name} ({node.target}) was pruned; first reason: {pruned[0][1] if pruned else 'none proposed'}"
        )
    return survivors, pruned


def _canonical(shape: tuple[int, ...], strategy: Strategy | None, outs: tuple, ins: tuple) -> Proposal:
    """The proposal with ``R`` on the mesh axes of size 1, and without the op's collectives over them."""
    if 1 not in shape or any(p is not None and len(p) != len(shape) for p in (*outs, *ins)):
        return strategy, outs, ins  # nothing to do, or a misfit that _rejection names
    outs = tuple(None if p is None else canonical(p, shape) for p in outs)
    ins = tuple(canonical(p, shape) for p in ins)
    if strategy is not None:
        strategy = Strategy(tuple(None if p is None else decode(p) for p in outs), tuple(decode(p) for p in ins),
                            strategy.rule, tuple((axis, n) for axis, n in strategy.all_reduces if shape[axis] > 1),
                            tuple((axis, k) for axis, k in strategy.all_to_alls if shape[axis] > 1))
    return strategy, outs, ins


def _rejection(problem: Problem, node: GraphNode, outs: tuple, ins: tuple, operand_metas: list[TensorMeta]) -> str | None:
    """Why the policy (or the node's arity) rules the proposal out, or None."""
    mesh = problem.mesh
    if len(outs) != len(node.outputs) or len(ins) != len(operand_metas):
        return f"strategy has {len(outs)} outputs / {len(ins)} operands, node has {len(node.outputs)} / {len(operand_metas)}"
    checks = [(f"output {i}", m, p) for i, (m, p) in enumerate(zip(node.outputs, outs)) if m is not None and p is not None]
    checks += [(f"operand {k}", m, p) for k, (m, p) in enumerate(zip(operand_metas, ins))]
    for what, meta, codes in checks:
        if len(codes) != mesh.ndim:
            return f"{what} has {len(codes)} placements for a {mesh.ndim}-axis mesh"
        for d, axes, verdict in problem.verdicts(meta, codes):
            if not verdict.allowed:
                names = "x".join(mesh.axis_names[a] for a in axes)  # type: ignore[index]
                return f"{what} dim {d} (size {meta.shape[d]}) over {names}: {verdict.reason}"
    return None


def _priced(problem: Problem, node: GraphNode, strategy: Strategy, provider: str, outs: tuple, ins: tuple,
            operand_metas: list[TensorMeta], *, held: bool) -> Candidate:
    """The candidate with its compute seconds and bytes per device at every batch point."""
    locals_out = [None if m is None or p is None else problem.local(m, p) for m, p in zip(node.outputs, outs)]
    locals_in = [problem.local(m, p) for m, p in zip(operand_metas, ins)]
    cost_model = problem.cost_model
    compute = cost_model.compute_seconds(node, locals_in, locals_out) if node.role == "op" else np.zeros(len(problem.points))
    for axis, numel in strategy.all_reduces:  # collectives inside the op (batch norm's synced statistics)
        size = np.full(len(problem.points), float(numel * locals_in[0].itemsize))
        compute = compute + cost_model.collective_seconds("all_reduce", axis, size, size)
    exchanged = locals_in + locals_out
    for axis, k in strategy.all_to_alls:  # rows the op sends to their expert's rank and back (expert parallelism)
        size = exchanged[k].nbytes  # type: ignore[union-attr]
        compute = compute + cost_model.collective_seconds("all_to_all", axis, size, size)
    memory = cost_model.memory_bytes(node, locals_out, training=problem.training, held=held)
    return Candidate(strategy, provider, outs, ins, compute, memory)


def _describe(outs: tuple, ins: tuple) -> str:
    text = " | ".join(format_codes(p) for p in outs)
    return f"{text} <- {'; '.join(format_codes(p) for p in ins)}" if ins else text
