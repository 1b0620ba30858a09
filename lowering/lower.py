"""``lower(gm, plan) -> LocalProgram``: the per-rank FX graph of a plan.

The global graph (``meta["val"]`` symbolic fake tensors, as the planner read it) is replayed
node by node on local fake tensors whose sizes are polynomials in the local symbols of
:mod:`lowering.localize`, and the replay is traced by ``make_fx`` into the local graph. Each
node goes through these steps, one class each:

1. **Sizes** (:class:`_LocalShapes`): a node's local shape is its global shape over the local
   symbols, each dim divided by the number of pieces its placement splits it into.
2. **Operands** (:class:`_Redistributor`): an operand the plan redistributes gets the plan's
   :class:`~planner.CollectiveStep` list, in order, as functional collectives
   (:mod:`lowering.collectives`), and nothing else does: :attr:`LocalProgram.collectives`
   lists what was emitted, edge by edge.
3. **Shape arguments** (:class:`_ShapeArguments`): the size of ``view``/``reshape``/
   ``_unsafe_view``/``expand``, of the ``new_*`` ops (``new_empty_strided`` too, with dense
   strides) and of the factory ops (``zeros``, ``ones``, ``full``, ``empty``, ``empty_strided``,
   ``empty_permuted``) becomes the node's local output shape;
   ``arange`` split across ranks starts at this rank's offset; ``view`` becomes ``reshape``,
   because a local tensor's strides can differ from the traced global one's (a split head
   dim, say) where its values cannot.
   A model traced on the meta device (its weights never allocated) has its factory ops'
   ``device=meta`` replaced by the mesh's device.
4. **Scalars** (:meth:`_Replay._global_scalar`): a SymInt read off a tensor (``sym_size``,
   ``sym_numel``, ``sym_stride``) is the *global* value written over the local symbols
   (``s0 = 4*b0``); SymInt arithmetic on it stays global, so scalars computed from sizes keep
   their meaning.
5. **Batch statistics**: a training batch norm whose input the plan splits on the batch
   computes its statistics across the ranks (:mod:`lowering.sync_norm`); **expert
   parallelism**: a grouped product of experts whose stacked experts the plan splits by the
   expert dim runs its rows through their expert's rank (:mod:`lowering.expert_parallel`),
   a per-expert table split with it riding on that exchange where it can
   (:mod:`lowering.expert_fusion`: the table op computes nothing then);
   **per-token regions**: on the mesh axes where the plan's rule for a node is
   :data:`planner.PER_TOKEN` (a mixture of experts' routing chain, each rank on its own tokens:
   :mod:`planner.problem.per_token`), its tensors are the rank's own program's, not pieces: no
   dim is refused as split there, an ``arange`` gives the local positions, and expert
   parallelism dispatches over the other axes, or over that axis all of each rank's own sorted
   rows (``PER_TOKEN_EXPERTS``).
6. **Checks** (:class:`_Checks`): ops that need a dim whole (``cat``, ``split``, ``softmax`` …)
   are refused when the plan splits that dim, and every node's local shape is checked against
   its plan placement, so a plan the lowering cannot honour is a
   :class:`~lowering.errors.LoweringError` here, never a wrong number later.

The local graph's inputs are the local symbols (ints), the global graph's tensor placeholders
in order (each as this rank's piece; one that nothing reads and the plan does not place, such
as another name of a tied parameter, is left out), and this rank's mesh coordinate as an int64
tensor (``chunk`` steps and split ``arange`` read it, so the graph text is the same on every
rank and one compile can be shared through Inductor's cache); its outputs are the global
graph's outputs (flattened) in the plan's output placements.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch.distributed.tensor import Shard

from lowering.collectives import all_reduce_over, apply_steps, local_shard
from lowering.errors import LoweringError
from lowering.expert_fusion import find_folds
from lowering.expert_parallel import ExpertRun, FoldedTable, expert_parallel
from lowering.expert_tables import EXPERT_TABLES
from lowering.localize import LocalSymbol, Localizer, choose_multipliers, make_symbols
from lowering.mesh_groups import MeshGroups, mesh_groups
from lowering.sync_norm import SYNCED_BATCH_NORMS, synced_batch_norm
from planner import Mesh, Plan, Redistribution, expert_table_axes, per_token_rule_axes
from shapecore import ShapeEnv, prove
from shapecore.torch import (TorchSymbols, backend_neutral, from_torch, graph_shape_env, size_expr, to_symint,
                             to_torch_symbols)
from shapecore.torch.private import op_schema, tree_flatten

if TYPE_CHECKING:
    from torch.fx import GraphModule, Node

__all__ = ["EmittedCollective", "LocalInput", "LocalProgram", "lower"]


@dataclass(frozen=True)
class EmittedCollective:
    """One step of a redistribution as emitted into the local graph."""

    consumer: str
    operand: int
    producer: str
    axis: int
    kind: str


@dataclass(frozen=True)
class LocalInput:
    """A tensor placeholder of the global graph: its name, placements, global and local shapes."""

    name: str
    placements: tuple[Any, ...]
    global_shape: tuple[sympy.Basic, ...]
    local_shape: tuple[sympy.Basic, ...]
    dtype: Any


@dataclass
class LocalProgram:
    """A plan lowered for this rank: ``graph_module(*symbol_values, *local_tensors, coordinate)``.

    ``example_inputs`` are the local symbols' SymInts and fake tensors of the torch ShapeEnv
    the graph was traced in (``torch_symbols``); ``env`` is shapecore's ShapeEnv of the trace's
    global symbols with the plan's guards as facts: what a call's global sizes must satisfy.
    """

    graph_module: GraphModule
    plan: Plan
    localizer: Localizer
    inputs: tuple[LocalInput, ...]
    output_placements: tuple[Any, ...]
    collectives: tuple[EmittedCollective, ...]
    example_inputs: list[Any]
    torch_symbols: TorchSymbols
    env: ShapeEnv
    groups: MeshGroups

    @property
    def symbols(self) -> tuple[LocalSymbol, ...]:
        return self.localizer.symbols

    @functools.cached_property
    def coordinate(self) -> torch.Tensor:
        """This rank's mesh coordinate, the program's last input (on the mesh's device, made once:
        a copy to an accelerator at every call would wait for it)."""
        return torch.tensor(self.groups.coordinate, dtype=torch.int64, device=self.groups.device)

    def __call__(self, symbol_values: Sequence[int], tensors: Sequence[torch.Tensor]) -> list[Any]:
        """Run the local graph eagerly (no compile)."""
        return list(self.graph_module(*symbol_values, *tensors, self.coordinate))


# -- ops whose arguments need care ---------------------------------------------------------------


_aten = torch.ops.aten
_SIZE_ARGUMENT = {  # op -> index of its size argument (the output's shape)
    _aten.view.default: 1, _aten.reshape.default: 1, _aten._unsafe_view.default: 1, _aten.expand.default: 1,
    _aten.new_zeros.default: 1, _aten.new_ones.default: 1, _aten.new_empty.default: 1, _aten.new_full.default: 1,
    _aten.zeros.default: 0, _aten.ones.default: 0, _aten.full.default: 0, _aten.empty.memory_format: 0,
    _aten.empty_strided.default: 0, _aten.new_empty_strided.default: 1, _aten.slice_backward.default: 1,
    _aten.select_backward.default: 1, _aten.empty_permuted.default: 0,
}
_WHOLE_DIM = {  # op -> indices of its dim arguments, whose dims must not be split
    _aten.cat.default: (1,), _aten.split.Tensor: (2,), _aten.split_with_sizes.default: (2,), _aten.chunk.default: (2,),
    _aten.narrow.default: (1,), _aten.select.int: (1,), _aten.unbind.int: (1,), _aten._softmax.default: (1,),
    _aten.softmax.int: (1,), _aten._log_softmax.default: (1,), _aten.log_softmax.int: (1,), _aten.cumsum.default: (1,),
    _aten.sort.default: (1,), _aten.index_select.default: (1,), _aten.gather.default: (1,), _aten.flip.default: (1,),
    _aten.roll.default: (2,), _aten.topk.default: (2,), _aten.slice.Tensor: (1,),
}
_INDEXED = (_aten.gather.default, _aten.index_select.default)
"""Ops whose dim argument is whole in their input only: an index split along it splits the output alike."""
_VIEWS = (_aten.view.default, _aten._unsafe_view.default)
_READS_VALUE = (_aten._local_scalar_dense.default, _aten.item.default)
_READS_SIZE = (_aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int, _aten.sym_storage_offset.default)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _unchanged(value: Any) -> Any:
    return value


def _placements(plan: Plan, name: str) -> tuple[Any, ...]:
    if name not in plan.placements:
        raise LoweringError(f"the plan has no placement for node {name}; was it made for this graph?")
    return tuple(plan.placements[name])


def _per_token_axes(plan: Plan, name: str) -> frozenset[int]:
    """The mesh axes on which the plan runs node ``name`` per token (rule ``PER_TOKEN`` there, or
    ``PER_TOKEN_EXPERTS``): each rank runs the routing chain on its own tokens, its tensors its own
    program's, not pieces."""
    decision = plan.decisions.get(name)
    return frozenset() if decision is None else per_token_rule_axes(decision.rule, plan.mesh.ndim)


def _is_program_input(plan: Plan, placeholder: Node) -> bool:
    """Whether a tensor placeholder is an input of the local program: all are but unplanned ones nothing reads."""
    return bool(placeholder.users) or placeholder.name in plan.placements


# -- global sizes --------------------------------------------------------------------------------


class _GlobalShapes:
    """Global sizes of the trace as shapecore expressions (replacements applied), each read once."""

    def __init__(self) -> None:
        self._cache: dict[Any, sympy.Basic] = {}

    def expr(self, value: Any) -> sympy.Basic:
        if isinstance(value, int):
            return sympy.Integer(value)
        expr = value.node.expr
        if expr not in self._cache:
            self._cache[expr] = size_expr(value)
        return self._cache[expr]

    def shape(self, tensor: Any) -> tuple[sympy.Basic, ...]:
        return tuple(self.expr(s) for s in tensor.shape)


def _sharded_symbols(gm: GraphModule, plan: Plan, shapes: _GlobalShapes) -> set[str]:
    found: set[str] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        placed = plan.placements.get(node.name)
        values, placements = ([value], [placed]) if placed is not None else (
            list(value) if isinstance(value, (tuple, list)) else [], list(plan.tuple_placements.get(node.name, ())))
        for v, ps in zip(values, placements):
            if ps is None or not _is_tensor(v):
                continue
            for d in range(v.dim()):
                if plan.mesh.shard_factor(ps, d) > 1:
                    found |= {s.name for s in shapes.expr(v.shape[d]).free_symbols}
    return found


def _all_symbols(gm: GraphModule, shapes: _GlobalShapes) -> set[str]:
    found: set[str] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        for v in value if isinstance(value, (tuple, list)) else [value]:
            if _is_tensor(v):
                for s in v.shape:
                    found |= {x.name for x in shapes.expr(s).free_symbols}
            elif isinstance(v, torch.SymInt):
                found |= {x.name for x in shapes.expr(v).free_symbols}
    return found


def lower(gm: GraphModule, plan: Plan, *, groups: MeshGroups | None = None) -> LocalProgram:
    """The local program of ``plan`` for this rank (``groups``: defaults to the plan mesh's groups).

    Raises :class:`~lowering.errors.LoweringError` when the plan cannot be honoured exactly.
    """
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

    torch_env = graph_shape_env(gm)  # None: the trace has no symbolic sizes
    shapes = _GlobalShapes()
    env = from_torch(torch_env if torch_env is not None else TorchShapeEnv(), facts=plan.trace_guards)
    for proof in plan.proofs:
        if proof.status == "uneven" and not _is_data_dependent_symbol(env, proof.size):
            raise LoweringError(f"the plan splits dim {proof.dim} of {proof.node} (size {plan.readable(proof.size)}) unevenly; the "
                                "lowering splits unevenly only a data-dependent size (one unbacked symbol, which each "
                                "rank cuts as torch.chunk does): plan with divisibility='prove' or 'assume'")
    groups = groups or mesh_groups(plan.mesh)
    sharded = _sharded_symbols(gm, plan, shapes)
    backed = {name for name in _all_symbols(gm, shapes) if env.symbols[name].kind != "unbacked"}
    multipliers = {name: 1 for name in backed}  # a data-dependent size has no local symbol: the program cuts its pieces
    multipliers.update(choose_multipliers(env, sharded & backed, plan.mesh.size))
    localizer = Localizer(make_symbols(multipliers, env.hints))
    replay = _Replay(gm, plan, localizer, groups, shapes)
    local_gm, example_inputs = replay.trace()
    if localizer.inexact:
        warnings.warn("local sizes that are not polynomials in the local symbols (Inductor may guard on them): "
                      + "; ".join(localizer.inexact.values()), stacklevel=2)
    return LocalProgram(
        graph_module=local_gm, plan=plan, localizer=localizer, inputs=replay.inputs,
        output_placements=tuple(plan.output_placements), collectives=tuple(replay.redistributor.emitted),
        example_inputs=example_inputs, torch_symbols=replay.symbols, env=env, groups=groups,
    )


def _is_data_dependent_symbol(env: ShapeEnv, size: str) -> bool:
    """Whether ``size`` (a proof's size text) is one data-dependent symbol of ``env``."""
    return size in env.symbols and env.symbols[size].kind == "unbacked"


# -- 1. sizes ----------------------------------------------------------------------------------------


class _LocalShapes:
    """A global shape over the local symbols, each dim divided by the pieces its placement splits it into."""

    def __init__(self, shapes: _GlobalShapes, localizer: Localizer, mesh: Mesh) -> None:
        self.shapes, self.localizer, self.mesh = shapes, localizer, mesh

    def shape(self, value: Any, placements: Sequence[Any] | None) -> tuple[sympy.Basic | None, ...]:
        """The local shape; ``None`` for a data-dependent dim, whose size (whole, or this rank's
        ``torch.chunk`` piece of it) only the running program knows."""
        shape = self.shapes.shape(value)
        factors = [1] * len(shape) if placements is None else [self.mesh.shard_factor(placements, d) for d in range(len(shape))]
        local: list[sympy.Basic | None] = []
        for e, k in zip(shape, factors):
            if not self.localizer.defines(e):
                if k != 1 and not e.is_Symbol:
                    raise LoweringError(f"the plan splits a dim of data-dependent size {e} {k} ways; only a dim whose "
                                        "size is one data-dependent symbol can be split (into torch.chunk's pieces)")
                local.append(None)
            else:
                local.append(self.localizer.value(e) if placements is None else self.localizer.extent(e, k))
        return tuple(local)


# -- 2. operands -------------------------------------------------------------------------------------


class _Redistributor:
    """Operands the plan redistributes go through its collective steps; :attr:`emitted` records them."""

    def __init__(self, plan: Plan, groups: MeshGroups) -> None:
        self.plan, self.groups = plan, groups
        self.redistributions: dict[tuple[str, int], Redistribution] = {(r.consumer, r.operand): r for r in plan.redistributions}
        self.emitted: list[EmittedCollective] = []
        self.coordinate: Any = None

    def start(self, coordinate: Any) -> None:
        """Begin a replay whose mesh coordinate (a traced tensor) is ``coordinate``."""
        self.emitted.clear()
        self.coordinate = coordinate

    def operand(self, consumer: str, k: int, producer: Node, local: Any, uneven: dict[int, Any] | None = None) -> Any:
        """Operand ``k`` of ``consumer`` (``local``, produced by ``producer``) as the consumer needs it
        (``uneven``: its data-dependent dims and their global sizes, see :func:`~lowering.collectives.apply_step`)."""
        r = self.redistributions.get((consumer, k))
        if r is None:
            return local
        if r.producer != producer.name:
            raise LoweringError(f"the plan redistributes operand {k} of {consumer} from {r.producer}, but the "
                                f"graph reads {producer.name} there; the plan was made for another graph")
        placed = self._producer_placements(producer)
        if placed is not None and tuple(placed) != tuple(r.src):
            raise LoweringError(f"{r}: the plan places {producer.name} as {placed}, not {r.src}")
        for step in r.steps:
            self.emitted.append(EmittedCollective(consumer, k, producer.name, step.axis, step.kind))
        return apply_steps(local, r.steps, r.src, r.dst, self.groups, where=str(r), coordinate=self.coordinate,
                           uneven=uneven)

    def placements(self, consumer: str, k: int, producer: Node) -> tuple[Any, ...] | None:
        """The placements operand ``k`` of ``consumer`` has when the consumer reads it (None: unplaced)."""
        r = self.redistributions.get((consumer, k))
        return tuple(r.dst) if r is not None else self._producer_placements(producer)

    def _producer_placements(self, producer: Node) -> tuple[Any, ...] | None:
        placed = self.plan.placements.get(producer.name)
        return None if placed is None else tuple(placed)


# -- 3. shape arguments ------------------------------------------------------------------------------


class _ShapeArguments:
    """Shape arguments become the node's local shape; a split ``arange`` starts at this rank's offset."""

    def __init__(self, plan: Plan, shapes: _GlobalShapes, local: _LocalShapes, localizer: Localizer,
                 data_dependent: dict[sympy.Basic, Any]) -> None:
        self.plan, self.shapes, self.local, self.localizer = plan, shapes, local, localizer
        self.data_dependent = data_dependent

    def localize(self, node: Node, args: list[Any], symint: Callable[[sympy.Basic], Any], coordinate: Any
                 ) -> tuple[Any, list[Any], Callable[[Any], Any]]:
        """The op to call, its arguments with shape arguments localized, and what to apply to its result."""
        target, adjust = node.target, _unchanged
        value = node.meta.get("val")
        if node.target in _SIZE_ARGUMENT and _is_tensor(value):
            index = _SIZE_ARGUMENT[node.target]
            local = self._size_argument(node, self._held(value, _placements(self.plan, node.name)), symint)
            args[index] = local
            if node.target in (_aten.empty_strided.default, _aten.new_empty_strided.default):
                args[index + 1] = self._dense_strides(value, local)
        elif str(node.target).startswith("aten.arange."):
            target, args, adjust = self._arange(node, args, symint, coordinate)
        if target in _VIEWS:  # local strides may differ from the trace's: copy where a view cannot
            target = _aten.reshape.default
        return target, args, adjust

    def _held(self, value: Any, placements: tuple[Any, ...]) -> tuple[Any, ...]:
        """The local shape, a data-dependent dim kept whole as the local program's own value of
        its size where one was held already (a routed count read off a replicated tensor, or a
        tensor with that dim whole), else ``None``."""
        shape = self.local.shape(value, placements)
        mesh = self.plan.mesh
        return tuple(self.data_dependent.get(self.shapes.expr(value.shape[d]), None) if e is None
                     and mesh.shard_factor(placements, d) == 1 else e for d, e in enumerate(shape))

    def _size_argument(self, node: Node, shape: tuple[Any, ...], symint: Callable[[sympy.Basic], Any]) -> list[Any]:
        """The local shape as a size argument. A data-dependent dim is its local value where one is
        held (:meth:`_held`); one that is not (``None``) is ``-1`` in a view, which infers it from
        the other dims, when it is the only one, and in an expand that keeps the operand's dim (one
        it broadcasts from 1 has no local size to write)."""
        unknown = [d for d, e in enumerate(shape) if e is None]
        if node.target == _aten.expand.default:
            refused = [d for d in unknown if not self._expand_keeps(node, d)]
        else:
            refused = unknown if len(unknown) > 1 or node.target not in (*_VIEWS, _aten.reshape.default) else []
        if refused:
            raise LoweringError(f"{node.name} ({node.target}) takes a size with data-dependent dims {refused}, which "
                                "the lowering cannot write over the local symbols")
        return [-1 if e is None else symint(e) if isinstance(e, sympy.Basic) else e for e in shape]

    def _expand_keeps(self, node: Node, d: int) -> bool:
        """Whether ``expand`` keeps dim ``d`` of its output from its operand's (no broadcast there)."""
        out, operand = node.meta["val"], node.args[0].meta["val"]
        j = d - (out.dim() - operand.dim())
        return j >= 0 and self.shapes.expr(operand.shape[j]) == self.shapes.expr(out.shape[d])

    def _dense_strides(self, value: Any, local: list[Any]) -> list[Any]:
        order = sorted(range(value.dim()), key=lambda d: (self.shapes.expr(value.stride()[d]).sort_key(), -d))
        strides: list[Any] = [0] * value.dim()
        running: Any = 1
        for d in order:
            strides[d] = running
            running = running * local[d]
        return strides

    def _arange(self, node: Node, args: list[Any], symint: Callable[[sympy.Basic], Any], coordinate: Any
                ) -> tuple[Any, list[Any], Callable[[Any], Any]]:
        """This rank's piece of a split ``arange``: the first values, shifted by the piece's offset."""
        placements = _placements(self.plan, node.name)
        mesh = self.plan.mesh
        pieces = mesh.shard_factor(placements, 0)
        if pieces == 1:
            return node.target, args, _unchanged
        start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
        length = symint(self.localizer.extent(self.shapes.expr(node.meta["val"].shape[0]), pieces))
        own = _per_token_axes(self.plan, node.name)  # each rank's own positions there
        offset = [a for a, p in enumerate(placements) if p == Shard(0) and a not in own]
        if not offset:
            return _aten.arange.start_step, [start, start + length * step, step], _unchanged
        piece: Any = 0
        for a in offset:  # outer axis first
            piece = piece * mesh.shape[a] + coordinate.select(0, a)
        return (_aten.arange.start_step, [start, start + length * step, step],
                lambda local: local + (piece * length * step).to(local.dtype))


# -- 6. checks ---------------------------------------------------------------------------------------


class _Checks:
    """Refuse a split the op needs whole; compare each local result's shape with its placement."""

    def __init__(self, plan: Plan, shapes: _GlobalShapes, local: _LocalShapes, redistributor: _Redistributor,
                 symbols: TorchSymbols, localizer: Localizer) -> None:
        self.plan, self.shapes, self.local, self.redistributor = plan, shapes, local, redistributor
        self.symbols, self.localizer = symbols, localizer

    def whole_dims(self, node: Node, args: list[Any], kwargs: dict[str, Any], operands: list[Node]) -> None:
        """Raise when ``node`` needs a dim whole that the plan splits in one of its operands."""
        short = str(node.target).split(".")[1]
        if node.target in _INDEXED:
            operands = operands[:1]
        own = _per_token_axes(self.plan, node.name)  # each rank's own tokens there: nothing is a piece
        for index in _WHOLE_DIM[node.target]:
            argument = op_schema(node.target).arguments[index]
            dim = args[index] if index < len(args) else kwargs.get(argument.name, argument.default_value)
            if dim is None:
                continue
            dims = dim if isinstance(dim, (list, tuple)) else [dim]
            for k, producer in enumerate(operands):
                placements = self.redistributor.placements(node.name, k, producer)
                ndim = producer.meta["val"].dim()
                for d in dims:
                    d = d % ndim if ndim else 0
                    if placements and any(isinstance(p, Shard) and p.dim == d and a not in own
                                          for a, p in enumerate(placements)):
                        if short == "slice" and self._full_slice(node, producer, d):
                            continue
                        raise LoweringError(
                            f"{node.name} ({node.target}) needs dim {d} of {producer.name} whole, but the plan splits "
                            f"it ({', '.join(map(str, placements))}); the planner's strategy for this op is wrong")

    def _full_slice(self, node: Node, producer: Node, dim: int) -> bool:
        value = node.meta["val"]
        return self.shapes.expr(value.shape[dim]) == self.shapes.expr(producer.meta["val"].shape[dim])

    def shape(self, node: Node, local: Any) -> None:
        """Raise when ``node``'s local result does not have the local shape of its plan placement."""
        value = node.meta.get("val")
        if _is_tensor(value):
            self._compare(node.name, value, local, self.plan.placements.get(node.name))
        elif isinstance(value, (tuple, list)) and node.name in self.plan.tuple_placements:
            for i, (v, ps) in enumerate(zip(value, self.plan.tuple_placements[node.name])):
                if _is_tensor(v) and ps is not None:
                    self._compare(f"{node.name}[{i}]", v, local[i], ps)

    def _compare(self, name: str, value: Any, local: Any, placements: Sequence[Any] | None) -> None:
        if placements is None:
            raise LoweringError(f"the plan has no placement for node {name}; was it made for this graph?")
        expected = self.local.shape(value, placements)
        actual = tuple(self.symbols.expr(s) for s in local.shape)
        if len(actual) != len(expected) or any(e is not None and not _same(a, e) for a, e in zip(actual, expected)):
            raise LoweringError(
                f"node {name}: the local result has shape {list(actual)} but placement "
                f"{', '.join(map(str, placements))} of global shape {list(self.shapes.shape(value))} needs "
                f"{list(expected)} (with {self.localizer!r})")


def _same(a: sympy.Basic, b: sympy.Basic) -> bool:
    if sympy.expand(a - b) == 0:
        return True
    return prove(sympy.Eq(a, b), ranges={s.name: (1, None) for s in (a - b).free_symbols}).proved


# -- the replay --------------------------------------------------------------------------------------


class _Replay:
    """Replays the global graph on local fake tensors under ``make_fx``, each node through the steps."""

    def __init__(self, gm: GraphModule, plan: Plan, localizer: Localizer, groups: MeshGroups,
                 shapes: _GlobalShapes) -> None:
        self.gm, self.plan, self.localizer, self.groups, self.shapes = gm, plan, localizer, groups, shapes
        self.symbols = to_torch_symbols({s.name: max(s.hint, 2) for s in localizer.symbols})
        self.local = _LocalShapes(shapes, localizer, plan.mesh)
        self.redistributor = _Redistributor(plan, groups)
        self.data_dependent: dict[sympy.Basic, Any] = {}
        """Each data-dependent size → its value in the local program: read off a replicated tensor
        (``item``, ``tolist``), or off the first tensor that holds it whole."""
        self.arguments = _ShapeArguments(plan, shapes, self.local, localizer, self.data_dependent)
        self.checks = _Checks(plan, shapes, self.local, self.redistributor, self.symbols, localizer)
        self.inputs = self._inputs()
        self.folds = find_folds(gm.graph, self._product_run, self._table_axis,
                                lambda consumer, k: (consumer, k) in self.redistributor.redistributions,
                                lambda name: plan.placements.get(name))
        self._sums: dict[str, Any] = {}  # a folded scatter's name -> the sums its product computed, this replay

    def _inputs(self) -> tuple[LocalInput, ...]:
        inputs = []
        for node in self.gm.graph.nodes:
            value = node.meta.get("val")
            if node.op == "placeholder" and _is_tensor(value) and _is_program_input(self.plan, node):
                placements = _placements(self.plan, node.name)
                inputs.append(LocalInput(node.name, placements, self.shapes.shape(value),
                                         self.local.shape(value, placements), value.dtype))
        return tuple(inputs)

    def trace(self) -> tuple[GraphModule, list[Any]]:
        """The local graph, and the example inputs it was traced with."""
        from torch.fx.experimental.proxy_tensor import make_fx

        names = [s.name for s in self.localizer.symbols]
        example_symbols = [self.symbols.symints[n] for n in names]
        device = self.groups.device  # the program runs there: Inductor compiles for the device it is traced on
        with self.symbols.fake_mode:
            example_tensors = [torch.empty([to_symint(e, self.symbols.symints) for e in i.local_shape], dtype=i.dtype,
                                           device=device) for i in self.inputs]
            example_tensors.append(torch.empty(self.plan.mesh.ndim, dtype=torch.int64, device=device))

        def local_program(*flat: Any) -> list[Any]:
            *tensors, coordinate = flat[len(names):]
            return self._run(dict(zip(names, flat[: len(names)])), tensors, coordinate)

        with backend_neutral():  # as the global graph was traced: no guard from a convolution backend's choice
            local_gm = make_fx(local_program, tracing_mode="fake")(*example_symbols, *example_tensors)
        local_gm.graph.eliminate_dead_code()
        local_gm.recompile()
        return local_gm, [*example_symbols, *example_tensors]

    def _run(self, symbols: dict[str, Any], tensors: list[Any], coordinate: Any) -> list[Any]:
        values: dict[Node, Any] = {}
        tensor_iter = iter(tensors)
        self.redistributor.start(coordinate)
        symint = functools.cache(lambda expr: to_symint(expr, symbols))
        self.data_dependent.clear()
        for node in self.gm.graph.nodes:
            value = node.meta.get("val")
            if node.op == "placeholder":
                if not _is_tensor(value):
                    values[node] = self._global_scalar(node, value, symint)
                elif _is_program_input(self.plan, node):
                    values[node] = next(tensor_iter)
            elif node.op == "get_attr":
                values[node] = self._attribute(node)
            elif node.op == "output":
                return self._outputs(node, values)
            elif node.op == "call_function":
                if node.name in self.folds.computed_elsewhere:
                    continue
                values[node] = self._call(node, values, symint, coordinate)
                self._hold_sizes(node, values[node])
            else:
                raise LoweringError(f"node {node.name} is a {node.op}; the lowering reads flat aten graphs")
        raise LoweringError("the graph has no output node")

    def _call(self, node: Node, values: dict[Node, Any], symint: Callable[[sympy.Basic], Any], coordinate: Any) -> Any:
        from torch.fx.node import map_arg

        if node.target in _READS_SIZE:
            value = node.meta.get("val")
            if isinstance(value, torch.SymInt) and not self.localizer.defines(self.shapes.expr(value)):
                # a data-dependent size of a whole dim: the local tensor's own
                return node.target(values[node.args[0]], *node.args[1:])
            return self._global_scalar(node, value, symint)
        folded = self._folded(node, values)
        if folded is not None:
            self.checks.shape(node, folded)
            return folded
        operands: list[Node] = []

        def fetch(arg: Node) -> Any:
            if _is_tensor(arg.meta.get("val")):
                k = len(operands)
                operands.append(arg)
                return self.redistributor.operand(node.name, k, arg, values[arg], self._uneven(arg))
            return values[arg]

        args, kwargs = map_arg((node.args, node.kwargs), fetch)
        if isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type == "meta":
            kwargs = {**kwargs, "device": self.groups.device}  # traced on meta
        target, args, adjust = self.arguments.localize(node, list(args), symint, coordinate)
        if node.target in _WHOLE_DIM and operands:
            self.checks.whole_dims(node, args, kwargs, operands)
        axes = self._synced_axes(node, args, operands)
        experts = self._expert_parallel(node, operands)
        table = self._expert_table(node)
        if axes:
            result = adjust(synced_batch_norm(target, args, kwargs, lambda t: all_reduce_over(t, axes, self.groups)))
        elif experts is not None:
            axis, expert = experts
            # where each rank routes its own tokens, its sorted rows are all its own: the block at 0
            block = coordinate.select(0, axis)
            block = block * 0 if axis in _per_token_axes(self.plan, node.name) else block
            result, sums = expert.run(args, self.groups.axis_size(axis), self.groups.group_name(axis), block,
                                      self._folded_table(node, values))
            if sums is not None:
                self._sums[self.folds.scatters[node.name].name] = sums
        elif table is not None:
            axis, run = table
            result = run(args, self.groups.axis_size(axis), self.groups.group_name(axis))
        else:
            result = adjust(target(*args, **kwargs))
        self.checks.shape(node, result)
        return result

    def _hold_sizes(self, node: Node, local: Any) -> None:
        """Note the data-dependent sizes ``node``'s result holds whole (its rows on every rank), or is."""
        value, placements = node.meta.get("val"), self.plan.placements.get(node.name)
        if node.target in _READS_VALUE and isinstance(value, torch.SymInt):
            self._read_whole(node)
            expr = self.shapes.expr(value)
            if expr.is_Symbol and not self.localizer.defines(expr):
                self.data_dependent.setdefault(expr, local)
            return
        if not _is_tensor(value) or placements is None:
            return
        for d, size in enumerate(value.shape):
            expr = self.shapes.expr(size)
            if (expr not in self.data_dependent and not self.localizer.defines(expr)
                    and self.plan.mesh.shard_factor(placements, d) == 1):
                self.data_dependent[expr] = local.shape[d]

    def _read_whole(self, node: Node) -> None:
        """Refuse a number read off a tensor (``item``, ``tolist``) that this rank does not hold
        whole and alike: the planner replicates what such a read takes."""
        for arg in node.all_input_nodes:
            placements = self.redistributor.placements(node.name, 0, arg) if _is_tensor(arg.meta.get("val")) else None
            if placements is not None and any(not p.is_replicate() for p in placements):
                raise LoweringError(f"{node.name} ({node.target}) reads a number off {arg.name}, which the plan places "
                                    f"as {placements}: each rank would read another value. Plan with a planner that "
                                    "replicates what such a read takes")

    def _uneven(self, producer: Node) -> dict[int, Any]:
        """``producer``'s data-dependent dims, each with its global size in the local program (None: not yet held)."""
        value = producer.meta.get("val")
        if not _is_tensor(value):
            return {}
        exprs = [self.shapes.expr(size) for size in value.shape]
        return {d: self.data_dependent.get(e) for d, e in enumerate(exprs) if not self.localizer.defines(e)}

    def _synced_axes(self, node: Node, args: list[Any], operands: list[Node]) -> tuple[int, ...]:
        """Mesh axes a batch norm with batch statistics must all-reduce them over: those that split
        its input on a dim other than the channels (the planner's ``batch_sync``)."""
        training = SYNCED_BATCH_NORMS.get(node.target)
        if training is None or not args[training]:
            return ()
        placements = self.redistributor.placements(node.name, 0, operands[0]) or ()
        return tuple(a for a, p in enumerate(placements) if isinstance(p, Shard) and p.dim != 1)

    def _fetched(self, consumer: Node, k: int, values: dict[Node, Any]) -> Any:
        """Operand ``k`` of ``consumer`` as it reads it: ``consumer.args[k]``, or its first element
        (a list of indices), where each argument before it holds one tensor (a table op's)."""
        arg = consumer.args[k] if not isinstance(consumer.args[k], (list, tuple)) else consumer.args[k][0]
        return self.redistributor.operand(consumer.name, k, arg, values[arg], self._uneven(arg))

    def _folded(self, node: Node, values: dict[Node, Any]) -> Any:
        """The value of a node a table fold computed (:mod:`lowering.expert_fusion`): an add, its
        product's result (the entries added); a gradient scatter, its base plus the sums per expert
        its product sent; None for any other node."""
        product = self.folds.sums.get(node.name)
        if product is not None:
            return values[product]
        sums = self._sums.pop(node.name, None)
        if sums is None:
            return None
        base = self._fetched(node, 0, values)
        return base + sums.to(base.dtype)

    def _folded_table(self, product: Node, values: dict[Node, Any]) -> FoldedTable | None:
        """The table folded into ``product``'s exchange: a gather's ids and entries, or a scatter's ids; or None."""
        gather = self.folds.gathers.get(product.name)
        if gather is not None:
            return FoldedTable(ids=self._fetched(gather, 1, values), entries=self._fetched(gather, 0, values))
        scatter = self.folds.scatters.get(product.name)
        return None if scatter is None else FoldedTable(ids=self._fetched(scatter, 1, values), entries=None)

    def _product_run(self, node: Node) -> tuple[int, int] | None:
        """The mesh axis a grouped product runs expert parallel over and the operand it sends; None: not one."""
        from torch.fx import Node as FxNode

        operands = [a for a in tree_flatten((node.args, node.kwargs))[0]
                    if isinstance(a, FxNode) and _is_tensor(a.meta.get("val"))]
        found = self._expert_parallel(node, operands) if node.op == "call_function" else None
        return None if found is None else (found[0], found[1].sent)

    def _table_axis(self, node: Node) -> int | None:
        """The mesh axis a per-expert table op splits its table over by the expert dim; None: not one."""
        found = self._expert_table(node) if node.op == "call_function" else None
        return None if found is None else found[0]

    def _expert_parallel(self, node: Node, operands: list[Node]) -> tuple[int, ExpertRun] | None:
        """The mesh axis a grouped product of experts splits its experts (operand 1) over by the
        expert dim (the weight gradient: its rows, operand 1, by the rows), its rows (operand 0, on
        the dim :func:`~lowering.expert_parallel.expert_parallel` names) split alike there only (the
        planner's ``experts``), and the op's expert-parallel run; or None."""
        found = expert_parallel(str(node.target), [o.meta["val"].ndim for o in operands])
        if found is None:
            return None
        weight = self.redistributor.placements(node.name, 1, operands[1]) or ()
        decision = self.plan.decisions.get(node.name)
        # per token alone, operand 1 split by dim 0 is the rank's own rows (the weight gradient's), not experts
        alone = per_token_rule_axes(decision.rule, self.plan.mesh.ndim, experts=False) if decision else frozenset()
        axes = [a for a, p in enumerate(weight) if p == Shard(0) and a not in alone]
        if not axes:
            return None
        rows = self.redistributor.placements(node.name, 0, operands[0]) or ()
        own = _per_token_axes(self.plan, node.name)  # the rows of each rank's own tokens there
        split = [a for a, p in enumerate(rows) if p == Shard(found.rows_dim) and a not in own]
        if len(axes) > 1 or split != [a for a in axes if a not in own]:
            raise LoweringError(f"{node.name} ({node.target}) splits its experts by the expert dim over mesh axes {axes} "
                                f"and its rows over {split}; expert parallelism dispatches the rows over the one axis "
                                "that splits both, or over an axis where each rank routes its own tokens")
        return axes[0], found

    def _expert_table(self, node: Node) -> tuple[int, Callable[..., Any]] | None:
        """The mesh axis over which the plan splits the per-expert table ``node`` gathers by the sorted
        ids, or scatters its gradient into, by the expert dim, and its run there
        (:mod:`lowering.expert_tables`); or None."""
        run = EXPERT_TABLES.get(str(node.target))
        decision = self.plan.decisions.get(node.name)
        if run is None or decision is None:
            return None
        axes = sorted(expert_table_axes(decision.rule, self.plan.mesh.ndim))
        if len(axes) > 1:
            raise LoweringError(f"{node.name} ({node.target}) splits its per-expert table by the expert dim over mesh "
                                f"axes {axes}; the lowering serves a table split over one axis")
        return (axes[0], run) if axes else None

    def _global_scalar(self, node: Node, value: Any, symint: Callable[[sympy.Basic], Any]) -> Any:
        """Step 4: a SymInt of the trace is its global value over the local symbols."""
        if isinstance(value, (int, bool, float)) or value is None:
            return value
        if isinstance(value, torch.SymInt):
            return symint(self.localizer.value(self.shapes.expr(value)))
        raise LoweringError(f"node {node.name} ({node.op} {node.target}) yields {type(value).__name__}, which "
                            "the lowering cannot rebuild from the local symbols")

    def _attribute(self, node: Node) -> Any:
        tensor = getattr(self.gm, str(node.target))
        if not _is_tensor(tensor):
            return tensor
        return local_shard(tensor, _placements(self.plan, node.name), self.groups)

    def _outputs(self, node: Node, values: dict[Node, Any]) -> list[Any]:
        """The flattened outputs; the output node is a consumer whose operands are its tensor leaves."""
        from torch.fx.node import Node as FxNode

        leaves, _ = tree_flatten(node.args[0])
        results, k = [], 0
        for leaf in leaves:
            if isinstance(leaf, FxNode) and _is_tensor(leaf.meta.get("val")):
                results.append(self.redistributor.operand(node.name, k, leaf, values[leaf], self._uneven(leaf)))
                k += 1
            else:
                results.append(values[leaf] if isinstance(leaf, FxNode) else leaf)
        return results
