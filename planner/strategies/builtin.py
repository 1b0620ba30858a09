"""Built-in, symbolic-aware sharding rules for the core aten ops.

Each rule is written for one mesh axis (:class:`~planner.strategies.base.AxisRule`) and
reads shapes as shapecore expressions, so a view from ``[s0, 4, 64]`` to ``[4*s0, 64]`` is
understood symbolically (the flattened dim may be split exactly where ``s0`` is). Covered:

* matrix products: ``mm``, ``addmm``, ``bmm``, ``baddbmm`` (rows, columns, batch, and the
  contraction dim giving a ``Partial`` output; a bias joins a partial output as ``Partial``);
* grouped products of experts: ``_grouped_mm`` in its four layouts, and transformers'
  ``grouped_mm_fallback`` and its backward (columns and contraction; never the rows the
  offsets cut: see :func:`_grouped_rules`); ``_grouped_mm`` only where each
  piece keeps the 16-byte strides its kernels require; ``grouped_mm_fallback``, its
  backward and ``_grouped_mm``'s experts' layouts (``[S, K] @ [E, K, N]`` with offsets, the
  forward and its rows' gradient, and the weight gradient's ``[K, S] @ [S, N]``) also split
  the experts over one mesh axis, expert parallelism (``experts``: the
  rows split alike, each rank's rows dispatched to their expert's rank and the results
  combined back by the lowering, :mod:`lowering.expert_dispatch`; its all_to_alls priced);
* layout: ``t``, ``transpose``, ``permute``, ``view``/``_unsafe_view``/``reshape`` (which
  covers ``flatten``/``unflatten``/``squeeze``/``unsqueeze`` after decomposition), ``expand``,
  ``slice``, ``select``;
* elementwise ops (``torch.Tag.pointwise``: ``gelu``, ``silu``, their backwards, arithmetic…;
  and ``floor_divide``, which torch does not tag) with broadcasting; ``add``/``sub`` of partials and ``mul``/``div`` of a partial by a
  replicated tensor stay partial, and so does a copy but one that rounds to an integer or a mask;
* ``_softmax``/``_safe_softmax``/``_log_softmax`` and their backwards; ``layer_norm``/``native_layer_norm``,
  ``rms_norm``/``_fused_rms_norm`` and their backwards; batch norm (below); ``embedding`` and its
  backward; ``index_select``; advanced indexing, ``index`` and ``index_put`` (a split index
  gathers rows, or, accumulating, adds them into a partial result), and ``scatter``/``scatter_add``/
  ``scatter_reduce`` off their dim (``scatter_add`` along it too, into a partial result), which
  torch 2.11's DTensor does not cover; ``index_add`` likewise (no DTensor rule up to 2.14); ``sum``/``mean``;
  ``cat``, ``stack``, ``split``/``split_with_sizes``/``chunk``/``unbind``; the scaled-dot-product-attention family
  (batch and heads); ``convolution`` and its backward; pooling (``max_pool``/``avg_pool`` over 1, 2
  or 3 spatial dims, adaptive average pooling over 2 or 3, and the backwards of those over 2 or 3: the batch and the channels,
  which DTensor covers only from torch 2.12); factory ops and ``fill`` (split as its operand).

Batch norm (``_native_batch_norm_legit_no_training``, ``_native_batch_norm_legit_functional``,
``native_batch_norm_backward``) splits channels (statistics and affine parameters split with
them), or, with running statistics (eval), any other dim with no communication. Computing
batch statistics (training), it may split the batch when it all-reduces the statistics over
the ranks that hold the batch (``batch_sync``, exact; the lowering emits the all-reduces, the
planner prices them); the DTensor rule offers only channels or replicate.

An op none of these match is left to the next provider.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

from planner.graph import GraphNode, PlanGraph, TensorMeta
from planner.mesh import Mesh
from planner.placements import Partial, Placement, Replicate, Shard, shard_factor
from planner.strategies.base import AxisRule, Strategy, expand

__all__ = ["BuiltinProvider", "EXPERTS", "EXPERT_PARALLEL_OPS", "is_pointwise", "splits_experts"]

R = Replicate()
P = Partial()

RuleFn = Callable[[GraphNode, PlanGraph], "list[AxisRule] | None"]
_RULES: dict[str, RuleFn] = {}


def _rule(*names: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        for name in names:
            _RULES[name] = fn
        return fn

    return register


def _packet(target: str) -> str:
    """``mm`` for ``aten.mm.default``; another namespace's op keeps it: ``transformers.grouped_mm_fallback``."""
    parts = target.split(".")
    if len(parts) >= 2 and parts[0] == "aten":
        return parts[1]
    return ".".join(parts[:2]) if len(parts) >= 3 else target


def _overload(target: str) -> str:
    parts = target.split(".")
    return parts[2] if len(parts) >= 3 else "default"


class BuiltinProvider:
    """The planner's own rules for core aten ops (see the module docstring)."""

    name = "builtin"

    def strategies(self, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> list[Strategy] | None:
        rule = _RULES.get(_packet(node.target))
        rules = rule(node, graph) if rule is not None else None
        if rules is None and is_pointwise(node):
            rules = _pointwise(node, graph)
        if rules is None:
            return None
        strategies = expand(rules, mesh)
        if _packet(node.target) == "_grouped_mm":
            strategies = [s for s in strategies if _grouped_mm_aligned(s, node, graph, mesh)]
        if any(r.name == EXPERTS for r in rules):  # the lowering dispatches over one mesh axis
            strategies = [s for s in strategies if s.rule.split("/").count(EXPERTS) <= 1]
        return strategies


# -- helpers ------------------------------------------------------------------------------------


def _args(node: GraphNode) -> tuple[Any, ...]:
    return tuple(node.fx.args)


def _kwarg(node: GraphNode, position: int, name: str, default: Any) -> Any:
    args = node.fx.args
    if len(args) > position:
        return args[position]
    return node.fx.kwargs.get(name, default)


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _metas(node: GraphNode, graph: PlanGraph) -> list[TensorMeta]:
    return [graph.operand_meta(node, k) for k in range(len(node.operands))]


def _is_one(size: sympy.Basic) -> bool:
    return size == 1


def _aligned(out: TensorMeta, operand: TensorMeta, d: int) -> Placement:
    """Placement an operand broadcast to ``out`` needs when ``out`` is sharded on ``d``."""
    j = d - (out.ndim - operand.ndim)
    if j < 0 or (_is_one(operand.shape[j]) and not _is_one(out.shape[d])):
        return R
    return Shard(j)


def _replicate_all(node: GraphNode) -> AxisRule:
    return AxisRule(tuple(None if m is None else R for m in node.outputs), (R,) * len(node.operands), "replicate")


def is_pointwise(node: GraphNode) -> bool:
    """Whether the node's op is tagged elementwise (``torch.Tag.pointwise``)."""
    import torch

    from shapecore.torch.private import OpOverload

    target = node.fx.target if node.fx is not None else None
    return isinstance(target, OpOverload) and torch.Tag.pointwise in target.tags


_LINEAR_UNARY = {"neg", "clone", "_to_copy", "alias", "detach", "contiguous", "lift_fresh_copy", "copy"}


def _pointwise(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    if node.is_tuple:
        return None
    out = node.output
    metas = _metas(node, graph)
    rules = [_replicate_all(node)]
    for d in range(out.ndim):
        rules.append(AxisRule((Shard(d),), tuple(_aligned(out, m, d) for m in metas), f"S{d}"))
    rules.extend(_partial_rules(node, metas))
    return rules


def _partial_rules(node: GraphNode, metas: Sequence[TensorMeta]) -> list[AxisRule]:
    """Rules under which an elementwise op maps partial sums to partial sums."""
    name, n = _packet(node.target), len(metas)
    overload = _overload(node.target)
    scalar_args = sum(1 for a in node.fx.args if isinstance(a, (int, float)) and not isinstance(a, bool))
    if n == 1 and name in _LINEAR_UNARY:
        return [AxisRule((P,), (P,), "partial")] if _keeps_sums(metas[0], node.output) else []
    if n == 1 and name in ("mul", "div") and overload == "Scalar":
        return [AxisRule((P,), (P,), "partial")]
    if n == 1 and name in ("mul", "div") and overload == "Tensor" and scalar_args == 1:
        return [AxisRule((P,), (P,), "partial")]
    if n == 2 and name in ("add", "sub") and overload == "Tensor":
        return [AxisRule((P,), (P, P), "partial")]
    if n == 2 and name == "mul" and overload == "Tensor":
        return [AxisRule((P,), (P, R), "partial"), AxisRule((P,), (R, P), "partial")]
    if n == 2 and name == "div" and overload == "Tensor":
        return [AxisRule((P,), (P, R), "partial")]
    return []


def _keeps_sums(src: TensorMeta, out: TensorMeta) -> bool:
    """Whether converting ``src`` to ``out``'s dtype keeps a sum of pieces the sum of their
    conversions: any conversion but rounding to an integer (1.5 + 1.5 is 3, 1 + 1 is 2) or to a
    mask (1 + -1 is 0, true or true is true)."""
    import torch

    if src.dtype == out.dtype or getattr(torch, out.dtype).is_floating_point:
        return True
    return out.dtype != "bool" and not getattr(torch, src.dtype).is_floating_point


# -- elementwise-like ---------------------------------------------------------------------------


@_rule("_to_copy", "copy", "alias", "detach", "lift_fresh_copy", "contiguous", "floor_divide")
def _copy_like(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return _pointwise(node, graph)


@_rule("full_like", "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "fill")
def _like(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``x``'s shape, values not read from ``x``: split as ``x`` is (``fill``'s 0-d value tensor whole)."""
    out = node.output
    value = (R,) * (len(node.operands) - 1)
    return [_replicate_all(node)] + [AxisRule((Shard(d),), (Shard(d), *value), f"S{d}") for d in range(out.ndim)]


@_rule("zeros", "ones", "full", "empty", "new_zeros", "new_ones", "new_full", "new_empty", "empty_strided",
       "new_empty_strided", "empty_permuted")
def _factory(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """Created directly as this rank's piece."""
    out = node.output
    operands = (R,) * len(node.operands)
    return [_replicate_all(node)] + [AxisRule((Shard(d),), operands, f"S{d}") for d in range(out.ndim)]


@_rule("arange", "scalar_tensor")
def _replicated_factory(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return [_replicate_all(node)]


# -- matrix products ----------------------------------------------------------------------------


def _matmul_rules(out: TensorMeta, batch: int, bias: TensorMeta | None) -> list[AxisRule]:
    """Rules for ``[*b, m, k] @ [*b, k, n] (+ bias)``; ``batch`` leading dims."""
    m, n = batch, batch + 1

    def with_bias(out_p: Placement, a: Placement, b: Placement, name: str) -> AxisRule:
        if bias is None:
            return AxisRule((out_p,), (a, b), name)
        bias_p = P if isinstance(out_p, Partial) else (R if isinstance(out_p, Replicate) else _aligned(out, bias, out_p.dim))
        return AxisRule((out_p,), (bias_p, a, b), name)

    rules = [
        with_bias(R, R, R, "replicate"),
        with_bias(Shard(m), Shard(m), R, "rows"),
        with_bias(Shard(n), R, Shard(batch + 1), "columns"),
        with_bias(P, Shard(batch + 1), Shard(batch), "contraction"),
        with_bias(P, P, R, "partial"),
        with_bias(P, R, P, "partial"),
    ]
    rules.extend(with_bias(Shard(d), Shard(d), Shard(d), f"batch{d}") for d in range(batch))
    return rules


@_rule("mm")
def _mm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return _matmul_rules(node.output, 0, None)


@_rule("bmm")
def _bmm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return _matmul_rules(node.output, 1, None)


@_rule("addmm")
def _addmm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    if len(node.operands) != 3:
        return None
    return _matmul_rules(node.output, 0, graph.operand_meta(node, 0))


@_rule("baddbmm")
def _baddbmm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    if len(node.operands) != 3:
        return None
    return _matmul_rules(node.output, 1, graph.operand_meta(node, 0))


# -- grouped matrix products (mixture of experts) -----------------------------------------------


def _grouped_rules(operands: int, rows: tuple[int, int] | None, columns: tuple[int, int] | None,
                   contraction: tuple[int, int] | None) -> list[AxisRule]:
    """Rules for a grouped product ``a @ b`` whose groups an offsets tensor (the third operand,
    always replicated) cuts along one dim: ``rows`` is (dim of ``a``, dim of the output) of the
    free rows, ``columns`` (dim of ``b``, dim of the output) of the free columns, ``contraction``
    (dim of ``a``, dim of ``b``) of the summed dim; the dim the offsets index is none of them
    (its rows belong to groups by global position: a piece of it is no group's) and neither is
    the group dim of a stacked operand (splitting it is expert parallelism, which needs the
    tokens dispatched to their expert's rank). Bilinear in ``a`` and ``b``: a partial operand
    times a replicated one is partial."""
    rest = (R,) * (operands - 2)
    rules = [AxisRule((R,), (R, R, *rest), "replicate"), AxisRule((P,), (P, R, *rest), "partial"),
             AxisRule((P,), (R, P, *rest), "partial")]
    if rows is not None:
        rules.append(AxisRule((Shard(rows[1]),), (Shard(rows[0]), R, *rest), "rows"))
    if columns is not None:
        rules.append(AxisRule((Shard(columns[1]),), (R, Shard(columns[0]), *rest), "columns"))
    if contraction is not None:
        rules.append(AxisRule((P,), (Shard(contraction[0]), Shard(contraction[1]), *rest), "contraction"))
    return rules


EXPERTS = "experts"
"""The rule name of expert parallelism (:data:`EXPERT_PARALLEL_OPS`)."""

EXPERT_PARALLEL_OPS = frozenset({"transformers.grouped_mm_fallback", "transformers.grouped_mm_fallback_backward",
                                 "aten._grouped_mm"})
"""The ops (``namespace.name``) that may split their stacked experts ``(E, ...)``, their operand
1, by the expert dim; ``_grouped_mm`` in its experts' forward layout only (:func:`splits_experts`)."""


def splits_experts(node: GraphNode, operands: Sequence[TensorMeta]) -> bool:
    """Whether the rules offer ``node`` (whose operands are ``operands``) expert parallelism: a
    product of rows ``[S, K]`` by stacked experts ``[E, K, N]`` cut by offsets, or the experts'
    weight gradient ``[K, S] @ [S, N]``, one product per expert's rows."""
    if _packet(node.target) == "_grouped_mm":
        return [m.ndim for m in operands] in ([2, 3, 1], [2, 2, 1])
    return _packet(node.target) in {"transformers.grouped_mm_fallback", "transformers.grouped_mm_fallback_backward"}


@_rule("transformers.grouped_mm_fallback")
def _grouped_mm_fallback(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """transformers' grouped product for experts: ``input [S, K]``, ``weight [E, K, N]``, ``offs
    [E]`` (expert ``e`` takes the rows ``offs[e-1]:offs[e]``) give ``[S, N]``. Expert parallel:
    ``input``'s rows and ``weight``'s experts split, ``offs`` whole; each rank's rows go to their
    expert's rank and back (the counts, ``input``'s rows and the output's exchanged)."""
    return _experts_forward_rules()


def _experts_forward_rules() -> list[AxisRule]:
    """The rules of rows ``[S, K]`` times stacked experts ``[E, K, N]`` cut by offsets ``[E]``,
    expert parallelism included (:func:`_grouped_mm_fallback`)."""
    return [*_grouped_rules(3, None, (2, 1), (1, 1)),
            AxisRule((Shard(0),), (Shard(0), Shard(0), R), EXPERTS, all_to_alls=(2, 0, 3))]


@_rule("transformers.grouped_mm_fallback_backward")
def _grouped_mm_fallback_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """Its backward: ``(input, weight, offs, grad_out [S, N])`` give ``grad_input [S, K]`` (rows of
    ``grad_out @ weight[e].T``) and ``grad_weight [E, K, N]`` (``input[rows e].T @ grad_out[rows e]``).
    Split on ``N`` (``weight``'s columns, with ``grad_out``'s), ``grad_input`` sums over it (partial)
    and ``grad_weight`` keeps it split; split on ``K``, both keep it; linear in ``grad_out`` alone;
    expert parallel: the rows and the experts split, ``input``'s and ``grad_out``'s rows sent to
    their expert's rank, ``grad_input``'s back, ``grad_weight`` the experts' own."""
    return [
        AxisRule((R, R), (R, R, R, R), "replicate"),
        AxisRule((P, Shard(2)), (R, Shard(2), R, Shard(1)), "columns"),
        AxisRule((Shard(1), Shard(1)), (Shard(1), Shard(1), R, R), "contraction"),
        AxisRule((P, P), (R, R, R, P), "partial"),
        AxisRule((Shard(0), Shard(0)), (Shard(0), Shard(0), R, Shard(0)), EXPERTS, all_to_alls=(2, 0, 3, 4)),
    ]


@_rule("_grouped_mm")
def _grouped_mm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``torch._grouped_mm(a, b, offs)`` in its four layouts: ``[S, K] @ [E, K, N]`` (the offsets
    cut ``S``: experts' forward), ``[E, M, K] @ [K, S]`` (they cut ``S``, the columns), ``[M, S] @
    [S, N]`` (they cut the contraction ``S``, one ``[M, N]`` product per group: the experts'
    weight gradient), and ``[E, M, K] @ [E, K, N]`` without offsets (``bmm``). The experts'
    forward layout is also expert parallel, as ``grouped_mm_fallback`` is, and so is their weight
    gradient: ``a``'s columns and ``b``'s rows (the experts' rows) split and sent to their
    expert's rank, which keeps its experts' gradients (``[E, K, N]`` split by the expert dim)."""
    a, b = graph.operand_meta(node, 0), graph.operand_meta(node, 1)
    n = len(node.operands)  # a bias (which torch does not take yet) would be a fourth
    if (a.ndim, b.ndim) == (2, 3) and n == 3:
        return _experts_forward_rules()
    layouts = {(3, 2): ((1, 0), None, (2, 0)), (2, 2): ((0, 1), (1, 2), None)}
    if (a.ndim, b.ndim) == (3, 3) and n == 2:
        return _matmul_rules(node.output, 1, None)
    if (a.ndim, b.ndim) not in layouts or n != 3:
        return None
    rules = _grouped_rules(n, *layouts[(a.ndim, b.ndim)])
    if (a.ndim, b.ndim) == (2, 2):  # the weight gradient: each rank's rows of both to their expert's rank
        rules.append(AxisRule((Shard(0),), (Shard(1), Shard(0), R), EXPERTS, all_to_alls=(2, 0, 1)))
    return rules


def _grouped_mm_aligned(strategy: Strategy, node: GraphNode, graph: PlanGraph, mesh: Mesh) -> bool:
    """Whether each piece ``_grouped_mm`` gets keeps its matrices' strides 16-byte aligned, as its
    kernels (and its meta function, which the lowering's replay runs) require: a split dim among
    the last two of ``a`` or ``b`` must be a number whose piece is a multiple of ``16 // itemsize``.
    A split by ``experts`` does not count: there the lowering runs each expert's own product."""
    experts = [rule == EXPERTS for rule in strategy.rule.split("/")]
    for k in (0, 1):
        meta = graph.operand_meta(node, k)
        pieces = tuple(R if dispatched else p for p, dispatched in zip(strategy.inputs[k], experts))
        for d in range(meta.ndim - 2, meta.ndim):
            ways = shard_factor(pieces, mesh.shape, d)
            if ways == 1:
                continue
            size = meta.shape[d]
            if not size.is_Integer or int(size) % (ways * max(1, 16 // meta.itemsize)):
                return False
    return True


# -- layout -------------------------------------------------------------------------------------


def _permutation_rules(node: GraphNode, perm: Sequence[int]) -> list[AxisRule]:
    """Output dim ``d`` is input dim ``perm[d]``."""
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    rules.extend(AxisRule((Shard(d),), (Shard(src),), f"S{d}") for d, src in enumerate(perm))
    return rules


@_rule("permute")
def _permute(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    return _permutation_rules(node, [_dim(d, ndim) for d in _args(node)[1]])


@_rule("t", "numpy_T")
def _t(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    return _permutation_rules(node, list(range(ndim))[::-1])


@_rule("transpose")
def _transpose(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    a, b = (_dim(d, ndim) for d in _args(node)[1:3])
    perm = list(range(ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return _permutation_rules(node, perm)


def _hint_value(expr: sympy.Basic, hints: dict[str, int]) -> int | None:
    if expr.is_Integer:
        return int(expr)
    try:
        value = expr.subs({s: hints[s.name] for s in expr.free_symbols})
    except KeyError:
        return None
    return int(value) if value.is_Integer else None


def view_groups(src: Sequence[sympy.Basic], dst: Sequence[sympy.Basic], hints: dict[str, int]) -> list[tuple[list[int], list[int]]] | None:
    """Pair runs of ``src`` dims with runs of ``dst`` dims of equal product (size-1 dims alone).

    Which side to extend is decided at the hints; a group closes only when the two products
    are symbolically equal, so the result is exact or ``None``.
    """
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if i < len(src) and _is_one(src[i]):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(dst) and _is_one(dst[j]):
            groups.append(([], [j]))
            j += 1
            continue
        if i >= len(src) or j >= len(dst):
            return None
        gi, gj = [i], [j]
        a, b = src[i], dst[j]
        i, j = i + 1, j + 1
        while sympy.expand(a - b) != 0:
            va, vb = _hint_value(a, hints), _hint_value(b, hints)
            if va is None or vb is None:
                return None
            if va <= vb and i < len(src):
                a, i = a * src[i], i + 1
                gi.append(i - 1)
            elif vb < va and j < len(dst):
                b, j = b * dst[j], j + 1
                gj.append(j - 1)
            else:
                return None
        groups.append((gi, gj))
    return groups


@_rule("view", "_unsafe_view", "reshape", "view_copy", "_reshape_alias", "squeeze", "unsqueeze", "flatten", "unflatten")
def _view(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    if len(node.operands) != 1:
        return None
    src, dst = graph.operand_meta(node, 0).shape, node.output.shape
    groups = view_groups(src, dst, graph.hints)
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    if groups is None:
        return rules
    for gi, gj in groups:
        if gi and gj:
            rules.append(AxisRule((Shard(gj[0]),), (Shard(gi[0]),), f"S{gj[0]}"))
    return rules


@_rule("expand", "expand_copy")
def _expand(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    out, src = node.output, graph.operand_meta(node, 0)
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    for d in range(out.ndim):
        j = d - (out.ndim - src.ndim)
        same = j >= 0 and sympy.expand(src.shape[j] - out.shape[d]) == 0
        rules.append(AxisRule((Shard(d),), (Shard(j) if same else R,), f"S{d}"))
    return rules


@_rule("slice", "narrow", "slice_copy")
def _slice(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    dim = _dim(_kwarg(node, 1, "dim", 0), ndim)
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    rules.extend(AxisRule((Shard(d),), (Shard(d),), f"S{d}") for d in range(ndim) if d != dim)
    if _whole(node, graph, dim):  # ``x[:, None]`` slices dim 0 whole: an alias, which any split keeps
        rules.append(AxisRule((Shard(dim),), (Shard(dim),), f"S{dim}"))
    return rules


def _whole(node: GraphNode, graph: PlanGraph, dim: int) -> bool:
    """Whether a step-1 ``slice`` (or its backward) keeps all of dim ``dim``: the sliced
    tensor's size there is the whole tensor's, symbolically."""
    name = _packet(node.target)
    if name not in ("slice", "slice_backward") or _kwarg(node, 4 if name == "slice" else 5, "step", 1) != 1:
        return False
    return sympy.expand(node.output.shape[dim] - graph.operand_meta(node, 0).shape[dim]) == 0


@_rule("slice_backward", "select_backward")
def _slice_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    dim = _dim(_args(node)[2], ndim)
    grad = graph.operand_meta(node, 0)
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    for d in range(ndim):
        if d == dim:
            continue
        src = d if grad.ndim == ndim or d < dim else d - 1  # select removed ``dim`` from the gradient
        rules.append(AxisRule((Shard(d),), (Shard(src),), f"S{d}"))
    if _whole(node, graph, dim):
        rules.append(AxisRule((Shard(dim),), (Shard(dim),), f"S{dim}"))
    return rules


@_rule("select")
def _select(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    src = graph.operand_meta(node, 0)
    dim = _dim(_args(node)[1], src.ndim)
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    for j in range(src.ndim):
        if j != dim:
            rules.append(AxisRule((Shard(j if j < dim else j - 1),), (Shard(j),), f"S{j}"))
    return rules


# -- reductions and normalizations --------------------------------------------------------------


@_rule("sum", "mean")
def _reduce(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    src = graph.operand_meta(node, 0)
    dims_arg = _kwarg(node, 1, "dim", None)
    keepdim = bool(_kwarg(node, 2, "keepdim", False))
    reduced = set(range(src.ndim)) if not dims_arg else {_dim(d, src.ndim) for d in (dims_arg if isinstance(dims_arg, (list, tuple)) else [dims_arg])}
    rules = [_replicate_all(node), AxisRule((P,), (P,), "partial")]
    out_dim = 0
    for j in range(src.ndim):
        if j in reduced:
            if _packet(node.target) == "sum":
                rules.append(AxisRule((P,), (Shard(j),), f"reduce{j}"))
            if keepdim:
                out_dim += 1
            continue
        rules.append(AxisRule((Shard(out_dim),), (Shard(j),), f"S{j}"))
        out_dim += 1
    return rules


def _same_shape_except(node: GraphNode, graph: PlanGraph, banned: set[int]) -> list[AxisRule]:
    """All tensors share the output's rank; shard any dim not in ``banned`` on all of them."""
    metas = _metas(node, graph)
    ndim = node.outputs[0].ndim  # type: ignore[union-attr]
    rules = [_replicate_all(node)]
    for d in range(ndim):
        if d in banned:
            continue
        outs = tuple(None if m is None else (Shard(d) if m.ndim == ndim else R) for m in node.outputs)
        rules.append(AxisRule(outs, tuple(Shard(d) if m.ndim == ndim else R for m in metas), f"S{d}"))
    return rules


@_rule("_softmax", "_safe_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data")
def _softmax(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    position = 2 if "backward" in node.target else 1
    return _same_shape_except(node, graph, {_dim(_args(node)[position], ndim)})


def _norm_rules(node: GraphNode, graph: PlanGraph, x: TensorMeta, normalized: int, stats: Sequence[int], grads_partial: bool) -> list[AxisRule]:
    """Shard a leading (non-normalized) dim of ``x``-shaped tensors; stats tensors (given by
    operand index) shard the same dim; other operands (weights) stay replicated, and weight
    gradients among the outputs become partial."""
    metas = _metas(node, graph)
    rules = [_replicate_all(node)]
    for d in range(x.ndim - normalized):
        inputs = tuple(Shard(d) if (m.ndim == x.ndim and k in stats) else R for k, m in enumerate(metas))
        outputs = tuple(
            None if m is None else (Shard(d) if m.ndim == x.ndim else (P if grads_partial else R)) for m in node.outputs
        )
        rules.append(AxisRule(outputs, inputs, f"S{d}"))
    return rules


@_rule("native_layer_norm")
def _layer_norm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    x = graph.operand_meta(node, 0)
    return _norm_rules(node, graph, x, len(_args(node)[1]), [0], grads_partial=False)


@_rule("native_layer_norm_backward")
def _layer_norm_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    x = graph.operand_meta(node, 1)
    normalized = len(_args(node)[2])
    # operands: grad_out, input, mean, rstd, [weight, bias]
    return _norm_rules(node, graph, x, normalized, [0, 1, 2, 3], grads_partial=True)


@_rule("rms_norm", "layer_norm")
def _composite_norm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    x = graph.operand_meta(node, 0)
    return _norm_rules(node, graph, x, len(_args(node)[1]), [0], grads_partial=False)


@_rule("_fused_rms_norm")
def _rms_norm(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    x = graph.operand_meta(node, 0)
    return _norm_rules(node, graph, x, len(_args(node)[1]), [0], grads_partial=False)


@_rule("_fused_rms_norm_backward")
def _rms_norm_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    x = graph.operand_meta(node, 1)
    normalized = len(_args(node)[2])
    # operands: grad_out, input, rstd, [weight]
    return _norm_rules(node, graph, x, normalized, [0, 1, 2], grads_partial=True)


# -- batch normalization ------------------------------------------------------------------------


def _channel_placement(m: TensorMeta | None, x: TensorMeta) -> Placement | None:
    """A per-channel tensor (``[C]``) splits with the channels; anything else (empty stats) stays whole."""
    if m is None:
        return None
    return Shard(0) if m.ndim == 1 and sympy.expand(m.shape[0] - x.shape[1]) == 0 else R


def _batch_norm_rules(node: GraphNode, graph: PlanGraph, x_operands: int, synced: bool) -> list[AxisRule]:
    """Batch-norm rules; the first ``x_operands`` operands are ``x``-shaped, the rest per-channel.

    ``synced``: the op computes batch statistics, so only the batch dim may split and the rule
    all-reduces them (``C + 1`` and ``C`` elements forward, ``2C + 1`` backward); otherwise any
    non-channel dim splits freely and per-channel outputs (weight gradients) become partial.
    """
    metas = _metas(node, graph)
    x = metas[0]
    rules = [_replicate_all(node)]
    if x.ndim < 2:
        return rules
    inputs = tuple(Shard(1) if k < x_operands else _channel_placement(m, x) for k, m in enumerate(metas))
    outputs = tuple(Shard(1) if m is not None and m.ndim == x.ndim else _channel_placement(m, x) for m in node.outputs)
    rules.append(AxisRule(outputs, inputs, "channels"))  # type: ignore[arg-type]
    channels = x.shape[1]
    for d in range(x.ndim):
        if d == 1 or (synced and d != 0):
            continue
        inputs = tuple(Shard(d) if k < x_operands else R for k in range(len(metas)))
        if synced:
            if not channels.is_Integer:
                continue
            outputs = tuple(None if m is None else (Shard(d) if m.ndim == x.ndim else R) for m in node.outputs)
            c = int(channels)
            reduces = (c + 1, c) if x_operands == 1 else (2 * c + 1,)
            rules.append(AxisRule(outputs, inputs, "batch_sync", reduces))  # type: ignore[arg-type]
        else:
            outputs = tuple(None if m is None else (Shard(d) if m.ndim == x.ndim else (P if x_operands == 2 else R))
                            for m in node.outputs)
            rules.append(AxisRule(outputs, inputs, f"S{d}"))  # type: ignore[arg-type]
    return rules


@_rule("_native_batch_norm_legit_no_training")
def _batch_norm_eval(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return _batch_norm_rules(node, graph, 1, synced=False)


@_rule("_native_batch_norm_legit_functional")
def _batch_norm_functional(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    return _batch_norm_rules(node, graph, 1, synced=bool(_args(node)[5]))


@_rule("native_batch_norm_backward")
def _batch_norm_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    # operands: grad_out, input, then per-channel weight, running stats, saved stats (those present)
    return _batch_norm_rules(node, graph, 2, synced=bool(_args(node)[7]))


# -- embedding ----------------------------------------------------------------------------------


@_rule("embedding")
def _embedding(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    out = node.output
    indices = graph.operand_meta(node, 1)
    rules = [_replicate_all(node), AxisRule((Shard(out.ndim - 1),), (Shard(1), R), "embedding_dim")]
    rules.extend(AxisRule((Shard(d),), (R, Shard(d)), f"S{d}") for d in range(indices.ndim))
    return rules


@_rule("embedding_dense_backward")
def _embedding_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    grad = graph.operand_meta(node, 0)
    indices = graph.operand_meta(node, 1)
    rules = [_replicate_all(node), AxisRule((Shard(1),), (Shard(grad.ndim - 1), R), "embedding_dim")]
    rules.extend(AxisRule((P,), (Shard(d), Shard(d)), f"S{d}") for d in range(indices.ndim))
    return rules


@_rule("index_select")
def _index_select(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``index_select(x, dim, index)``: the index split splits the output's ``dim`` alike (routed
    tokens: ``u0`` of them, split unevenly when not proved even); ``x`` split off ``dim`` splits
    the output there; linear in ``x`` (a partial ``x`` gathers to a partial output, as ``index``)."""
    x = graph.operand_meta(node, 0)
    dim = _dim(_args(node)[1], x.ndim)
    rules = [_replicate_all(node), AxisRule((P,), (P, R), "partial"), AxisRule((Shard(dim),), (R, Shard(0)), "index")]
    rules.extend(AxisRule((Shard(d),), (Shard(d), R), f"S{d}") for d in range(x.ndim) if d != dim)
    return rules


class _Indexing:
    """How ``x[indices]`` lays out its result, ``indices`` a list of index tensors or ``None``
    (advanced indexing, ``aten.index.Tensor``): the index tensors broadcast to one shape, which
    takes the place of the dims they index where those are adjacent and leads the result where
    they are not; each dim of ``x`` no tensor indexes is kept, in order."""

    def __init__(self, x: TensorMeta, indices: Sequence[Any], metas: Sequence[TensorMeta]) -> None:
        indexed = [i for i, index in enumerate(indices) if index is not None]
        adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
        self.metas = metas
        self.ndim = max(m.ndim for m in metas)
        """The broadcast shape's rank."""
        self.start = indexed[0] if adjacent else 0
        """The result's dim of broadcast dim 0."""
        kept = [d for d in range(x.ndim) if d not in indexed]
        self.kept = {d: (d if d < self.start else d - len(indexed) + self.ndim) if adjacent else self.ndim + k
                     for k, d in enumerate(kept)}
        """Each dim of ``x`` no tensor indexes -> its dim in the result."""
        self.rank = len(kept) + self.ndim
        """The result's rank."""

    def _dim(self, m: TensorMeta, j: int) -> int:
        """Index tensor ``m``'s dim at broadcast dim ``j`` (negative where ``m`` has none there)."""
        return j - self.ndim + m.ndim

    def index_placements(self, j: int) -> tuple[Placement, ...] | None:
        """The index tensors split along broadcast dim ``j`` (each broadcast there whole), or
        ``None`` where their sizes there are not provably one size above 1."""
        sizes = [m.shape[self._dim(m, j)] for m in self.metas if self._dim(m, j) >= 0]
        split = [size for size in sizes if not _is_one(size)]
        if not split or any(sympy.expand(size - split[0]) != 0 for size in split):
            return None
        return tuple(Shard(self._dim(m, j)) if self._dim(m, j) >= 0 and not _is_one(m.shape[self._dim(m, j)]) else R
                     for m in self.metas)


def _indexing(node: GraphNode, graph: PlanGraph) -> _Indexing | None:
    """The layout of an ``index``/``index_put`` node, or ``None`` where an index is a mask (its
    result's size is its count of true entries)."""
    x, indices = graph.operand_meta(node, 0), _args(node)[1]
    count = sum(index is not None for index in indices)
    metas = [graph.operand_meta(node, 1 + k) for k in range(count)]
    if not count or len(indices) > x.ndim or any(m.dtype in ("bool", "uint8") for m in metas):
        return None
    return _Indexing(x, indices, metas)


@_rule("index", "_unsafe_index")
def _index(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``x[indices]`` (advanced indexing): a dim of ``x`` no tensor indexes splits the result's
    alike (every index whole); a broadcast dim of the index tensors splits the result's alike,
    ``x`` whole (a gather of rows by a split index, as ``index_select``); linear in ``x``."""
    layout = _indexing(node, graph)
    if layout is None or layout.rank != node.output.ndim:
        return None
    indices = (R,) * len(layout.metas)
    rules = [_replicate_all(node), AxisRule((P,), (P, *indices), "partial")]
    rules.extend(AxisRule((Shard(o),), (Shard(d), *indices), f"S{o}") for d, o in layout.kept.items())
    for j in range(layout.ndim):
        split = layout.index_placements(j)
        if split is not None:
            rules.append(AxisRule((Shard(layout.start + j),), (R, *split), f"index{j}"))
    return rules


@_rule("index_put", "_unsafe_index_put")
def _index_put(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``x[indices] = values`` out of place (``+=`` with ``accumulate``), ``values`` broadcast to
    ``x[indices]``'s shape. A dim of ``x`` no tensor indexes splits the result alike (``values``
    with it, every index whole). Accumulating, the op is linear in ``x`` and ``values`` together,
    and a broadcast dim of the index tensors may split them and ``values`` alike with ``x``
    partial: each rank adds its own rows, the ranks' sum adds them all (``index``'s backward by
    rows). Not accumulating, a rank holding part of ``x`` or of the indices cannot tell what
    another rank writes where: neither is offered."""
    layout = _indexing(node, graph)
    if layout is None or len(node.operands) != 2 + len(layout.metas):
        return None
    values = graph.operand_meta(node, len(node.operands) - 1)
    if values.ndim > layout.rank:
        return None

    def aligned(o: int) -> Placement:  # values, broadcast to x[indices], where that is split on its dim o
        j = o - (layout.rank - values.ndim)
        return R if j < 0 or _is_one(values.shape[j]) else Shard(j)

    indices = (R,) * len(layout.metas)
    rules = [_replicate_all(node)]
    rules.extend(AxisRule((Shard(d),), (Shard(d), *indices, aligned(o)), f"S{d}") for d, o in layout.kept.items())
    if _kwarg(node, 3, "accumulate", False):
        rules.append(AxisRule((P,), (P, *indices, P), "partial"))
        for j in range(layout.ndim):
            split = layout.index_placements(j)
            if split is not None:
                rules.append(AxisRule((P,), (P, *split, aligned(layout.start + j)), f"index{j}"))
    return rules


@_rule("scatter", "scatter_add", "scatter_reduce")
def _scatter(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``scatter(x, dim, index, src or value)`` and its reducing kinds: ``x``'s element at
    ``index[i]`` along ``dim`` (``i`` elsewhere) takes ``src[i]``. A dim other than ``dim`` splits
    the result alike where ``x``, ``index`` and ``src`` have one size there (``index`` may be
    smaller: its pieces would not line up). ``scatter_add`` is linear in ``x`` and ``src``
    together, and splitting ``index`` and ``src`` along ``dim`` (one size there) with ``x`` partial
    adds each rank's own elements: the ranks' sum adds them all (``gather``'s backward)."""
    metas = _metas(node, graph)
    x, index = metas[0], metas[1]
    dim = _dim(_args(node)[1], x.ndim) if x.ndim else 0
    if any(m.ndim != x.ndim for m in metas):
        return None
    rules = [_replicate_all(node)]
    for d in range(x.ndim):
        if d != dim and all(sympy.expand(m.shape[d] - x.shape[d]) == 0 for m in metas):
            rules.append(AxisRule((Shard(d),), (Shard(d),) * len(metas), f"S{d}"))
    if _packet(node.target) == "scatter_add":
        rules.append(AxisRule((P,), (P, R, P), "partial"))
        if x.ndim and sympy.expand(index.shape[dim] - metas[2].shape[dim]) == 0:
            rules.append(AxisRule((P,), (P, Shard(dim), Shard(dim)), f"scatter{dim}"))
    return rules


@_rule("index_add")
def _index_add(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    """``index_add(x, dim, index, source, alpha)``: ``x`` with ``alpha * source``'s slice ``i``
    along ``dim`` added into its slice ``index[i]``. A dim other than ``dim`` splits the result
    alike where ``x`` and ``source`` have one size there (``index`` whole). Linear in ``x`` and
    ``source`` together (but for a mask, where adding is *or*), and splitting ``index`` and
    ``source`` along ``dim`` with ``x`` partial adds each rank's own slices: the ranks' sum adds
    them all (``index_select``'s backward). A piece of ``source`` or ``index`` is never offered
    with ``x`` whole (each rank's copy would be counted once per rank) or split along ``dim``
    (``index`` numbers its rows globally)."""
    x, index, source = _metas(node, graph)
    if x.ndim == 0 or index.ndim != 1 or source.ndim != x.ndim:
        return None
    dim = _dim(_args(node)[1], x.ndim)
    rules = [_replicate_all(node)]
    rules.extend(AxisRule((Shard(d),), (Shard(d), R, Shard(d)), f"S{d}")
                 for d in range(x.ndim) if d != dim and sympy.expand(source.shape[d] - x.shape[d]) == 0)
    if x.dtype != "bool":
        rules.append(AxisRule((P,), (P, R, P), "partial"))
        if sympy.expand(index.shape[0] - source.shape[dim]) == 0:
            rules.append(AxisRule((P,), (P, Shard(0), Shard(dim)), "index"))
    return rules


# -- concatenation and splitting ----------------------------------------------------------------


@_rule("cat")
def _cat(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    metas = _metas(node, graph)
    if any(m.ndim != ndim for m in metas):
        return None  # legacy empty-tensor cat
    dim = _dim(_kwarg(node, 1, "dim", 0), ndim)
    rules = [_replicate_all(node), AxisRule((P,), (P,) * len(metas), "partial")]
    rules.extend(AxisRule((Shard(d),), (Shard(d),) * len(metas), f"S{d}") for d in range(ndim) if d != dim)
    return rules


@_rule("split", "split_with_sizes", "chunk", "unsafe_split", "split_with_sizes_copy")
def _split(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    src = graph.operand_meta(node, 0)
    dim = _dim(_kwarg(node, 2, "dim", 0), src.ndim)
    outs = len(node.outputs)
    rules = [_replicate_all(node), AxisRule((P,) * outs, (P,), "partial")]
    rules.extend(AxisRule((Shard(d),) * outs, (Shard(d),), f"S{d}") for d in range(src.ndim) if d != dim)
    return rules


@_rule("unbind")
def _unbind(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    src = graph.operand_meta(node, 0)
    dim = _dim(_kwarg(node, 1, "dim", 0), src.ndim)
    outs = len(node.outputs)
    rules = [_replicate_all(node), AxisRule((P,) * outs, (P,), "partial")]
    rules.extend(AxisRule((Shard(j if j < dim else j - 1),) * outs, (Shard(j),), f"S{j}") for j in range(src.ndim) if j != dim)
    return rules


@_rule("stack")
def _stack(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    ndim = node.output.ndim
    dim = _dim(_kwarg(node, 1, "dim", 0), ndim)
    n = len(node.operands)
    rules = [_replicate_all(node), AxisRule((P,), (P,) * n, "partial")]
    rules.extend(AxisRule((Shard(j if j < dim else j + 1),), (Shard(j),) * n, f"S{j}") for j in range(ndim - 1))
    return rules


# -- attention and convolution ------------------------------------------------------------------


def _attention(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    metas = _metas(node, graph)
    query = next((m for m in metas if m.ndim == 4), None)
    if query is None:
        return None
    rules = [_replicate_all(node)]
    for d, name in ((0, "batch"), (1, "heads")):
        size = query.shape[d]

        def placed(m: TensorMeta | None) -> Placement | None:
            if m is None:
                return None
            return Shard(d) if m.ndim > d + 1 and sympy.expand(m.shape[d] - size) == 0 else R

        inputs = tuple(placed(m) for m in metas)
        # the key and value must follow the query (no grouped-query broadcast on a sharded dim)
        if sum(isinstance(p, Shard) for p in inputs[:3]) < min(3, len(inputs)):
            continue
        rules.append(AxisRule(tuple(placed(m) for m in node.outputs), inputs, name))  # type: ignore[arg-type]
    return rules


for _name in (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward",
    "scaled_dot_product_attention",
):
    _RULES[_name] = _attention


@_rule("convolution")
def _convolution(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    transposed = bool(_args(node)[6])
    groups = int(_args(node)[8])
    has_bias = len(node.operands) == 3
    rules = [_replicate_all(node)]

    def rule(out: Placement, x: Placement, w: Placement, bias: Placement, name: str) -> AxisRule:
        return AxisRule((out,), (x, w, bias) if has_bias else (x, w), name)

    rules.append(rule(Shard(0), Shard(0), R, R, "batch"))
    if not transposed:
        rules.append(rule(Shard(1), R, Shard(0), Shard(0), "out_channels"))
        if groups == 1:
            rules.append(rule(P, Shard(1), Shard(1), P, "in_channels"))
    return rules


@_rule("convolution_backward")
def _convolution_backward(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    transposed = bool(_args(node)[7])
    groups = int(_args(node)[9])
    if len(node.operands) != 3:
        return None
    gi, gw, gb = (m is not None for m in node.outputs)
    rules = [_replicate_all(node)]

    def outs(a: Placement, b: Placement, c: Placement) -> tuple[Placement | None, ...]:
        return (a if gi else None, b if gw else None, c if gb else None)

    rules.append(AxisRule(outs(Shard(0), P, P), (Shard(0), Shard(0), R), "batch"))
    if not transposed and groups == 1:
        rules.append(AxisRule(outs(P, Shard(0), Shard(0)), (Shard(1), R, Shard(0)), "out_channels"))
    return rules


_POOLS = {"max_pool1d_with_indices": 1, "avg_pool1d": 1, **{f"{op}{n}d{suffix}": n for n in (2, 3) for op, suffix in (
    ("max_pool", "_with_indices"), ("max_pool", "_with_indices_backward"), ("avg_pool", ""), ("avg_pool", "_backward"),
    ("_adaptive_avg_pool", ""), ("_adaptive_avg_pool", "_backward"))}}
"""Pooling ops (each tensor operand and output laid out ``[batch,] channels, *spatial``) -> spatial dims."""


def _pooling(node: GraphNode, graph: PlanGraph) -> list[AxisRule] | None:
    metas = _metas(node, graph)
    spatial = _POOLS[_packet(node.target)]
    ndim = metas[0].ndim
    if ndim not in (spatial + 1, spatial + 2) or any(m.ndim != ndim for m in (*metas, *node.outputs) if m is not None):
        return None
    rules = [_replicate_all(node)]
    for d, name in enumerate(("batch", "channels")[spatial + 2 - ndim:]):  # each pools within its own plane
        rules.append(AxisRule(tuple(None if m is None else Shard(d) for m in node.outputs), (Shard(d),) * len(metas), name))
    return rules


for _name in _POOLS:
    _RULES[_name] = _pooling
