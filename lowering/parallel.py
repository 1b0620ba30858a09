"""``parallelize``: a model planned, lowered and compiled once for this rank, as a ``torch.nn.Module``.

``ParallelModule(model, example_inputs, dynamic_shapes=..., mesh=...)`` runs on every rank
(under ``torchrun``, :func:`lowering.launch`, or any launcher that initializes the default
process group; a model on another device than the one the group's backend runs the mesh on, a
CUDA model on gloo or a CPU model on NCCL, is refused first, naming both devices):

1. check the plan options (an unknown or bad one is raised as itself on every rank before the
   model is touched), then trace through the planner's front door (:func:`planner.trace_module`,
   as :func:`planner.plan_module` does: :func:`shapecore.torch.trace_for_planning`'s decomposed
   ``torch.export`` graph, or with ``training=True`` a joint forward+backward graph), so the
   graph lowered is the graph planned. The trace is taken at the example inputs grown to the
   largest ``batch_sizes`` value of each ``Dim`` (:mod:`planner.trace_hint`), not at the
   example as given: the guards torch records there hold at every size the plan is costed
   for, and the lowering reads nothing else of the example but its structure and static
   sizes (which the growing keeps) and the hints, which only seed the local symbols' fake
   sizes (Inductor compiles size-obliviously, and what it assumes is checked at every call).
   With ``plan=`` the trace is taken at the sizes the plan records it was traced at
   (:attr:`planner.Plan.trace_sizes`), so the graph lowered is the one it was made from
   whatever ``batch_sizes`` are passed (a plan made by hand, which records none, is traced as
   above);
2. plan on rank 0 and broadcast the plan's JSON, so every rank runs the same plan (a planning
   error is raised as itself on every rank); ``plan=`` skips planning;
3. :func:`~lowering.lower.lower` the plan, and register the model's parameters and buffers
   (:mod:`lowering.state`) as DTensors on the plan's mesh, placed as the plan places them
   (plain tensors on a mesh of one device, where a DTensor would only add DTensor's dispatch to
   every optimizer op and gradient), under the model's own names: ``parameters()``, ``named_parameters()`` and ``state_dict()``
   are what an optimizer and ``torch.distributed.checkpoint`` take; a tied parameter
   (GPT-2's ``lm_head.weight`` is ``transformer.wte.weight``) is one parameter with one
   gradient. A training program is split (:mod:`lowering.partition`) into a forward and a
   backward program;
4. compile once with Inductor (a training program's forward and backward), the local symbols
   dynamic. When every rank would compile the same graph text, rank 0 compiles first and the
   others load its result from Inductor's cache.

A call takes the *global* user inputs: plain tensors (every rank passes the same ones) or
DTensors placed as the plan wants (:meth:`ParallelModule.shard_inputs` makes them, cutting
ahead of the call). It runs the :class:`~lowering.entry.EntryCheck` on the global sizes (one
agreement step across ranks, then the guards and the even splits: a batch that does not split
raises on every rank, and nothing is computed on a truncated one), then cuts this rank's
pieces and runs the compiled program. What calls at the same global sizes share (the local
symbol values, the compiled program serving them, the outputs' global shapes) is found once. It returns DTensors placed as the plan places the
outputs (``full_tensor()`` is the global value; combining them with plain tensors, such as
labels, needs DTensor's ``implicit_replication()``), or global tensors with
``global_outputs=True``. A call the compiled program's own assumptions
(:attr:`~lowering.compile.CompiledProgram.guards`) do not cover gets a program specialized to
its sizes, compiled then and kept: :attr:`ParallelModule.compile_count` counts every compile,
so "one compile for every batch size" is observable.

Training (``training=True``): in training mode with grad enabled, a call runs the forward
program inside an autograd function whose backward runs the backward program on the
gradients of the outputs, so any loss computed from the outputs backpropagates; parameter
gradients arrive as DTensors placed like their parameters (plain tensors on one device, as the
parameters are), and accumulate over calls.
Buffers the traced forward updates in place (a BatchNorm's running statistics and batch count,
traced in training mode) are updated in this module's buffers by every call, as the model's
forward updates its own.
``eval()`` or ``torch.no_grad()`` run the forward program only (the traced computation is
the same: dropout or batch statistics are fixed when tracing). :meth:`ParallelModule.init_weights`
initializes the weights as ``model.apply(fn)`` would on one device, keeping this rank's pieces.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from lowering.collectives import local_shard
from lowering.compile import CompiledProgram, compile_program
from lowering.entry import EntryCheck, InputSpec, agreement_group, device_problem
from lowering.errors import LoweringError
from lowering.lower import LocalProgram, lower
from lowering.mesh_groups import mesh_groups
from lowering.partition import Partitioned, partition
from lowering.state import contiguous_strides, init_weights, is_whole, register_state
from planner import DimNames, Plan, PlanOptions, as_mesh, options_from, trace_module
from shapecore.torch.private import tensor_tables

__all__ = ["ParallelModule", "parallelize"]


def _on_rank_zero(what: str, make: Any) -> Any:
    """``make()`` on rank 0, its (picklable) result broadcast; its error raised as itself on every rank."""
    import torch.distributed as dist

    message: list[Any] = [None]
    error: Exception | None = None
    if dist.get_rank() == 0:
        try:
            message = [("ok", make())]
        except Exception as failure:  # noqa: BLE001 - re-raised on every rank below
            if dist.get_world_size() == 1:
                raise
            error, message = failure, [("error", _sendable(failure))]
    dist.broadcast_object_list(message, src=0)
    kind, body = message[0]
    if kind == "error":
        _raise_from_rank(what, 0, body, error)
    return body


def _together(what: str, make: Callable[[], Any]) -> Any:
    """``make()`` on every rank, then one exchange of outcomes: if any rank failed, every rank raises
    the error of the first rank that failed, as itself.

    Keeps a rank from waiting forever in the next collective for a peer that already failed.
    """
    import torch.distributed as dist

    result, error = None, None
    try:
        result = make()
    except Exception as failure:  # noqa: BLE001 - shared with every rank below
        error = failure
    outcomes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(outcomes, None if error is None else _sendable(error))
    failed = [(rank, sent) for rank, sent in enumerate(outcomes) if sent is not None]
    if failed:
        rank, sent = failed[0]
        _raise_from_rank(what, rank, sent, error if rank == dist.get_rank() else None, cause=error)
    return result


def _sendable(error: Exception) -> tuple[bytes | None, str]:
    """``error`` as ranks exchange it: pickled when it comes back as itself (None otherwise), and as text."""
    import pickle

    try:
        payload: bytes | None = pickle.dumps(error)
        pickle.loads(payload)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - an error that does not pickle travels as text
        payload = None
    return payload, f"{type(error).__name__}: {error}"


def _raise_from_rank(what: str, rank: int, sent: tuple[bytes | None, str], own: Exception | None,
                     cause: Exception | None = None) -> None:
    """Raise the error rank ``rank`` sent (``own`` on that rank, its copy elsewhere), noting what
    failed where; one that does not pickle as a LoweringError with its text."""
    import pickle

    payload, text = sent
    if payload is None:
        raise LoweringError(f"{what} failed on rank {rank}: {text}") from (own or cause)
    error = own if own is not None else pickle.loads(payload)
    error.add_note(f"({what} failed on rank {rank})")
    if own is not None:
        raise error
    raise error from cause


def _named_state(model: Any) -> dict[str, tuple[str, Any]]:
    """Every name of each parameter and buffer -> (the name ``named_parameters()`` /
    ``named_buffers()`` list it under, the tensor). A tied parameter has several names; torch
    lifts each of them into a traced graph but lists the tensor once, under the first."""
    from itertools import chain

    first: dict[int, str] = {}
    return {name: (first.setdefault(id(t), name), t) for name, t in chain(
        model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))}


def _on_model_device(model: nn.Module, example_inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The example inputs on the meta device when the model is there (so it traces without
    allocating a weight), else as given."""
    from shapecore.torch.private import tree_map

    if not any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        return tuple(example_inputs)
    return tuple(tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, tuple(example_inputs)))


def _device(model: nn.Module) -> str | None:
    """The device type of ``model``'s tensors (None: it has none off the meta device)."""
    from itertools import chain

    return next((t.device.type for t in chain(model.parameters(), model.buffers()) if not t.is_meta), None)


def _check_device(model: nn.Module) -> None:
    """Raise when the default process group cannot run collectives where ``model`` is."""
    import torch.distributed as dist

    device = _device(model)
    problem = None if device is None else device_problem(device, dist.get_backend())
    if problem is not None:
        raise LoweringError(problem)


def _leaf_names(model: Any, example_inputs: Sequence[Any]) -> tuple[list[str], list[str]]:
    """Names of the positional arguments (from ``forward``'s signature) and of each flattened input."""
    import inspect

    from shapecore.torch.private import keystr, tree_flatten_with_path

    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (AttributeError, TypeError, ValueError):
        parameters = []  # type: ignore[assignment]
    named = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    arguments = [named[i] if i < len(named) else f"input {i}" for i in range(len(example_inputs))]
    leaves, _ = tree_flatten_with_path(tuple(example_inputs))
    return arguments, [arguments[path[0].idx] + keystr(path[1:]) for path, _ in leaves]


_KEPT_SIZES = 64
"""How many sets of global sizes a ParallelModule keeps what a call at them needs for."""


def _held_piece(tensor: Any) -> Any:
    """This rank's piece of a parameter or buffer: a DTensor's local tensor, or the tensor itself
    (on a one-device mesh the module holds plain tensors)."""
    from shapecore.torch.private import dtensor_local

    return dtensor_local(tensor) if isinstance(tensor, DTensor) else tensor


@dataclass
class _Sized:
    """What every call at one set of global sizes shares: the local symbol values, the compiled
    variant that serves them, and each user output's global size."""

    values: dict[str, int]
    variant: CompiledProgram
    symbol_values: list[int]
    output_sizes: list[torch.Size]
    specs: list[Any]
    """Per user output, a DTensor of its global size holding no data (made on first use): its spec
    places each call's output, which ``DTensor.from_local`` would make anew."""


@dataclass
class _Call:
    """What one call runs: what calls at its sizes share, and the program's tensors."""

    sized: _Sized
    tensors: list[Any]
    """The forward program's tensor inputs (a training program's tangents left out)."""
    trainable: list[str]
    """Names of the parameters handed to autograd (in :class:`_Step`'s argument order)."""


class _Step(torch.autograd.Function):
    """A training call: the forward program now, the backward program when autograd reaches the
    outputs with the gradients of whatever loss was computed from them. Its arguments are the
    module and the call, then the parameters whose gradients it returns; it returns the user
    outputs as DTensors (their gradients arrive as DTensors)."""

    @staticmethod
    def forward(ctx: Any, module: ParallelModule, call: _Call, *parameters: Any) -> Any:
        assert module.partitioned is not None
        outputs = call.sized.variant.run(call.sized.symbol_values, call.tensors)
        ctx.module, ctx.call, ctx.parameters = module, call, parameters
        ctx.saved = outputs[module.partitioned.user_outputs:]
        return tuple(module._placed(module._update_buffers(outputs), call.sized))

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        module, call = ctx.module, ctx.call
        partitioned, backward = module.partitioned, call.sized.variant.backward
        assert partitioned is not None and backward is not None
        tangents = module._tangents(grads, call.sized.values)
        forward_inputs = [*call.sized.symbol_values, *call.tensors, module.program.coordinate]  # its order
        given = {"saved": ctx.saved, "tangent": tangents, "input": forward_inputs}
        inputs = [given[kind][k] for kind, k in partitioned.backward_inputs]
        ctx.saved = None
        return (None, None, *module._parameter_grads(backward(inputs), dict(zip(call.trainable, ctx.parameters))))


class ParallelModule(nn.Module):
    """A model planned, lowered and compiled for this rank, as a module whose parameters and buffers
    are DTensors, plain tensors on a mesh of one device (see the module docstring).

    ``training=True`` traces the joint forward+backward graph, so a loss computed from the
    outputs backpropagates into the parameters; ``global_outputs=True`` returns plain global
    tensors instead of DTensors.

    Outputs are DTensors, and DTensor refuses an op mixing a DTensor with a plain tensor
    (PyTorch's convention), so a loss against plain labels takes one of: the global value
    (``F.cross_entropy(pm(x).full_tensor(), labels)``: an all-gather, differentiable, the loss
    computed whole on every rank); ``global_outputs=True`` (the same, built in); or the loss
    under ``torch.distributed.tensor.experimental.implicit_replication()``, which takes the
    labels as replicated and lets DTensor compute the loss on the output's pieces. ``options`` (a
    :class:`planner.PlanOptions`) and ``plan_options`` (its fields: ``constraints``, ``batch_sizes``,
    ``hardware``, ``memory_budget`` …) are :func:`planner.plan`'s, checked before the model is
    touched; ``dims`` names sizes for them beside the ``Dim`` names; ``plan`` skips planning (the model is
    traced at the sizes the plan was traced at, :attr:`planner.Plan.trace_sizes`);
    ``dynamic=False`` compiles a program specialized to each distinct set of sizes instead (the
    peer for benchmarks); ``share_layers`` is :func:`shapecore.torch.trace_for_planning`'s (a
    training trace takes a run of repeated blocks once when checked sound: the same graph, in a
    fraction of the time on a deep model; False traces every block); ``progress`` is called with the name of each construction phase as
    it starts.
    """

    def __init__(self, model: nn.Module, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                 training: bool = False, global_outputs: bool = False, plan: Plan | None = None,
                 dynamic: bool = True, share_layers: bool | None = None, progress: Callable[[str], None] | None = None,
                 dims: Mapping[str, Any] | None = None, options: PlanOptions | None = None,
                 **plan_options: Any) -> None:
        from shapecore.torch.private import tree_structure

        super().__init__()
        self.timings: dict[str, float] = {}
        """Seconds per construction phase on this rank: trace, plan, lower, compile."""
        self._progress = progress or (lambda phase: None)
        self._progress("trace")
        clock = time.perf_counter()
        self.mesh = as_mesh(mesh)
        self.groups = mesh_groups(self.mesh)
        checked = _together("checking the plan options", lambda: options_from(options, plan_options,
                                                                              caller="ParallelModule"))
        _together("checking the model's device", lambda: _check_device(model))
        self.global_outputs = global_outputs
        traced = _together("tracing", lambda: trace_module(
            model, _on_model_device(model, example_inputs), dynamic_shapes=dynamic_shapes, training=training,
            share_layers=share_layers, options=checked, trace_sizes=plan.trace_sizes if plan is not None else None))
        gm, exported, self.env = traced.traced.graph_module, traced.traced.exported, traced.traced.env
        self._hidden = (model, gm)  # not submodules: their tensors are not this module's
        clock = self._phase("trace", clock)
        if plan is None:
            plan = Plan.from_json(_on_rank_zero("planning", lambda: traced.plan(self.mesh, dims=dims).to_json()))
        self.plan = plan
        clock = self._phase("plan", clock)
        self.program: LocalProgram = _together("lowering", lambda: lower(gm, plan, groups=self.groups))
        self._out_spec = exported.call_spec.out_spec if exported is not None else None
        state = _named_state(model)
        _together("placing the parameters", lambda: register_state(self, model, plan.param_placements, self.groups))
        self._feed = self._feeds(state)
        self._owners = {what: self._owner(what) for kind, what in self._feed if kind in ("parameter", "buffer")}
        """Parameter or buffer name -> (the ``_parameters`` or ``_buffers`` table of the submodule holding
        it, its attribute there): read at every call (a dict lookup, not ``Module.__getattr__``)."""
        self._outputs = self._user_outputs()
        self._sized: dict[tuple[tuple[str, int], ...], _Sized] = {}
        self._grad_names = self._gradient_names(state)
        self._grad_positions = {self._grad_names[fqn]: k for k, fqn in self._grad_outputs()}
        """Parameter name -> position of its gradient among the program's outputs."""
        self._buffer_updates = self._updated_buffers(state)
        self._owners.update((name, self._owner(name)) for _, name in self._buffer_updates)
        self._output_shapes = self._global_output_shapes(gm)
        self.partitioned: Partitioned | None = None
        if training:
            self.partitioned = _together("splitting forward and backward", self._partition)
        arguments, leaves = _leaf_names(model, example_inputs)
        names = plan.names if plan.names.exprs else traced.names.extended(dims)  # a plan made by hand has none
        self.entry = EntryCheck(self._specs(leaves), self.mesh.shape, self.program.env, self._display_names(names),
                                structure=tree_structure(tuple(example_inputs)), arguments=arguments,
                                device_mesh=self.groups.device_mesh, device=_device(self),
                                group=agreement_group())
        self.dynamic = dynamic
        self._variants: list[CompiledProgram] = []
        self.train(training)
        clock = self._phase("lower", clock)
        if dynamic:
            self._variants.append(self._compile_first())
            self._phase("compile", clock)

    _NEXT = {"trace": "plan", "plan": "lower", "lower": "compile"}

    def _phase(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.timings[name] = now - since
        if name in self._NEXT and (name != "lower" or self.dynamic):
            self._progress(self._NEXT[name])
        return now

    # -- construction -------------------------------------------------------------------------------

    def _feeds(self, state: Mapping[str, tuple[str, Any]]) -> list[tuple[str, Any]]:
        """Per program input: ("parameter" or "buffer", its own name), ("input", index) or ("tangent", output index)."""
        roles = {i.name: i for i in self.plan.graph_inputs}
        parameters = {name for name, _ in self.named_parameters()}
        feeds: list[tuple[str, Any]] = []
        for local_input in self.program.inputs:
            graph_input = roles.get(local_input.name)
            if graph_input is None:
                raise LoweringError(f"the plan does not say what feeds graph input {local_input.name}; "
                                    "was it made for this graph?")
            if graph_input.role in ("input", "tangent"):
                feeds.append((graph_input.role, graph_input.index))
            elif graph_input.fqn in state:
                own = state[graph_input.fqn][0]
                feeds.append(("parameter" if own in parameters else "buffer", own))
            else:
                raise LoweringError(f"graph input {local_input.name} ({graph_input.role} {graph_input.fqn}) is neither a "
                                    "user input, a tangent, nor a parameter or buffer of the model")
        return feeds

    def _owner(self, name: str) -> tuple[dict[str, Any], str]:
        """The table (``_parameters`` or ``_buffers``) of the submodule holding parameter or buffer
        ``name``, and its attribute name there."""
        path, _, attribute = name.rpartition(".")
        parameters, buffers = tensor_tables(self.get_submodule(path))
        return (parameters if attribute in parameters else buffers), attribute

    def _gradient_names(self, state: Mapping[str, tuple[str, Any]]) -> dict[str, str]:
        """Gradient output's parameter name in the graph -> the parameter's own name (one per tensor)."""
        names: dict[str, str] = {}
        for _, fqn in self._grad_outputs():
            own = state[fqn][0] if fqn in state else fqn
            if own in names.values():
                raise LoweringError(f"the graph has two gradients for {own} (as {fqn} and another name of it); "
                                    "a tied parameter must be read through one graph input")
            names[fqn] = own
        return names

    def _updated_buffers(self, state: Mapping[str, tuple[str, Any]]) -> list[tuple[int, str]]:
        """(position among the program's outputs, the buffer's own name) of each buffer's new value
        (a BatchNorm's running statistics in training), checked to be placed as the buffer is."""
        updates = []
        for k, output in enumerate(self.plan.graph_outputs):
            if output is None or output.role != "buffer_mutation" or output.fqn is None:
                continue
            own = state[output.fqn][0] if output.fqn in state else output.fqn
            buffer, placed = self.get_buffer(own), tuple(self.plan.output_placements[k])
            if isinstance(buffer, DTensor) and placed != tuple(buffer.placements):  # one device: any placement is whole
                raise LoweringError(f"the plan delivers the new value of buffer {own} as {placed} but places the buffer "
                                    f"as {tuple(buffer.placements)}; was it made by this planner?")
            updates.append((k, own))
        return updates

    def _global_output_shapes(self, gm: Any) -> list[tuple[Any, ...]]:
        """Each user output's global shape, over the trace's symbols."""
        from torch.fx import Node

        from shapecore.torch import size_expr
        from shapecore.torch.private import tree_leaves

        leaves = [x for x in tree_leaves(gm.graph.output_node().args[0])]
        shapes = []
        for k in self._user_outputs():
            value = leaves[k].meta["val"] if isinstance(leaves[k], Node) else None
            if not isinstance(value, torch.Tensor):
                raise LoweringError(f"user output {k} of the traced graph is not a tensor")
            shapes.append(tuple(size_expr(n) if isinstance(n, torch.SymInt) else n for n in value.shape))
        return shapes

    def _partition(self) -> Partitioned:
        # the forward program's outputs (partition's "user outputs"): the buffers' new values and the user outputs
        forward = sorted([*self._user_outputs(), *(k for k, _ in self._buffer_updates)])
        if forward != list(range(len(forward))):
            raise LoweringError("the joint graph's user outputs and buffer updates are not its first outputs; it "
                                "cannot be split")
        symbols = len(self.program.symbols)
        tangents = {symbols + k for k, (kind, _) in enumerate(self._feed) if kind == "tangent"}
        return partition(self.program.graph_module, self.program.example_inputs, len(forward), tangents)

    def _specs(self, leaves: Sequence[str]) -> list[InputSpec]:
        count = len(self.plan.input_placements)
        if len(leaves) != count:
            raise LoweringError(f"the example inputs flatten to {len(leaves)} values but the traced graph takes "
                                f"{count} user inputs")
        by_name = {i.name: i for i in self.program.inputs}
        names = {i.index: i.name for i in self.plan.graph_inputs if i.role == "input"}
        specs = []
        for k, leaf in enumerate(leaves):
            name = names.get(k)
            if name is None:
                specs.append(InputSpec(leaf, None, (), None))
            else:
                i = by_name[name]
                specs.append(InputSpec(leaf, i.placements, i.global_shape, i.dtype))
        return specs

    def _display_names(self, names: DimNames) -> dict[str, str]:
        """Symbol name -> what the entry check calls it: its ``Dim`` name, else the input dim it is read from."""
        return {**{name: info.source for name, info in self.env.symbols.items() if info.source}, **names.shown}

    def _compile_first(self, values: Mapping[str, int] | None = None) -> CompiledProgram:
        """Compile (specialized to ``values`` if given) on every rank; when every rank has the
        same graph text, rank 0 compiles first and the others load its result from the cache."""
        import torch.distributed as dist

        code = hashlib.sha256(self.program.graph_module.code.encode()).hexdigest()
        codes: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(codes, code)
        shared, rank = len(set(codes)) == 1, dist.get_rank()

        def compile_here() -> CompiledProgram:
            return compile_program(self.program, values=values, partitioned=self.partitioned)

        first = _together("compiling", lambda: compile_here() if rank == 0 or not shared else None)
        if not shared:
            return first
        rest = _together("compiling", lambda: None if rank == 0 else compile_here())
        return first if rank == 0 else rest

    # -- properties ------------------------------------------------------------------------------

    @property
    def graph_module(self) -> Any:
        """The traced global graph (the joint forward+backward graph when built for training)."""
        return self._hidden[1]

    @property
    def compile_count(self) -> int:
        """How many programs Inductor compiled on this rank (1 while every call fits the first; a
        training program's forward and backward count as one)."""
        return len(self._variants)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling on this rank."""
        return sum(v.seconds for v in self._variants)

    # -- weights ----------------------------------------------------------------------------------

    def init_weights(self, fn: Callable[[nn.Module], None], *, seed: int | None = None) -> None:
        """Initialize every parameter and buffer with ``fn(module)``, called on each module of the
        original model as ``model.apply(fn)`` calls it (children first), each module's own
        tensors whole (CPU tensors, one module's at a time); this rank keeps its pieces.

        With ``seed`` (``torch.manual_seed(seed)`` first, the global RNG left as it was) or the
        same RNG state on every rank, the global tensors equal what ``model.apply(fn)`` gives on
        one device. Call it on every rank.
        """
        model = self._hidden[0]
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            init_weights(self, model, fn, self.groups)

    # -- inputs and outputs -----------------------------------------------------------------------

    def shard_inputs(self, *global_inputs: Any) -> tuple[Any, ...]:
        """The global inputs as DTensors placed as the plan wants, each holding this rank's piece
        (no communication): ``pm(*pm.shard_inputs(x))`` computes what ``pm(*x)`` does, with the
        cut made ahead of the call.

        It never raises for bad inputs: an input that does not fit the traced program, or does
        not split evenly, comes back unchanged, and the call refuses it on every rank alike
        with the input named (raising here, on some ranks only, would leave the others waiting).
        """
        from shapecore.torch.private import tree_flatten, tree_unflatten

        flat, spec = tree_flatten(global_inputs)
        if spec != self.entry.structure:
            return global_inputs
        return tuple(tree_unflatten([self._distribute(x, s) for x, s in zip(flat, self.entry.specs)], spec))

    def _distribute(self, x: Any, spec: InputSpec) -> Any:
        if (spec.placements is None or not isinstance(x, torch.Tensor) or isinstance(x, DTensor)
                or x.dim() != len(spec.global_shape)
                or any(n % self.mesh.shard_factor(spec.placements, d) for d, n in enumerate(x.shape))):
            return x
        return DTensor.from_local(local_shard(x, spec.placements, self.groups), self.groups.device_mesh,
                                  spec.placements, run_check=False, shape=x.shape, stride=x.stride())

    def _piece(self, x: Any, spec: InputSpec) -> Any:
        """This rank's piece of a checked input (a global tensor, or a DTensor placed as the plan wants)."""
        from shapecore.torch.private import dtensor_local

        if isinstance(x, DTensor):
            return dtensor_local(x)  # the program's inputs take no gradient: to_local's autograd function buys nothing
        return x if spec.placements is None else local_shard(x, spec.placements, self.groups)

    def _user_outputs(self) -> list[int]:
        """Positions of the user outputs among the program's outputs."""
        return [k for k, o in enumerate(self.plan.graph_outputs) if o is not None and o.role == "output"]

    def _grad_outputs(self) -> list[tuple[int, str]]:
        """(position among the program's outputs, parameter name in the graph) of each gradient."""
        return [(k, o.grad_of) for k, o in enumerate(self.plan.graph_outputs)
                if o is not None and o.role == "grad" and o.grad_of is not None]

    def _update_buffers(self, outputs: Sequence[Any]) -> list[Any]:
        """Write the buffers' new values among the program's ``outputs`` into this rank's pieces of
        the buffers (as the model's own forward updates them in place); return the user outputs."""
        with torch.no_grad():
            for k, name in self._buffer_updates:
                table, attribute = self._owners[name]
                buffer = table[attribute]
                _held_piece(buffer).copy_(outputs[k])
        return [outputs[k] for k in self._outputs]

    def _placed(self, local: Sequence[Any], sized: _Sized) -> list[Any]:
        """The user outputs' local pieces as DTensors of their global shapes, wrapped with a spec made
        once per size. The pieces carry no autograd history (the compiled program runs outside
        autograd; :class:`_Step` gives a training call's outputs theirs), so ``DTensor.from_local``'s
        autograd function would buy nothing."""
        from shapecore.torch.private import dtensor_placed_like

        placed = []
        mesh = self.groups.device_mesh
        for i, (piece, k, size) in enumerate(zip(local, self._outputs, sized.output_sizes)):
            placements = self.plan.output_placements[k]
            if sized.specs[i] is None:
                sized.specs[i] = DTensor.from_local(piece.new_empty(0), mesh, placements, run_check=False, shape=size,
                                                    stride=contiguous_strides(size))
            placed.append(dtensor_placed_like(sized.specs[i], piece))
        return placed

    def _wrap(self, placed: Sequence[Any]) -> Any:
        """The user outputs (DTensors, or global tensors with ``global_outputs``) in the traced structure."""
        from shapecore.torch.private import tree_unflatten

        wrapped = [out.full_tensor() if self.global_outputs else out for out in placed]
        if self._out_spec is not None:
            return tree_unflatten(wrapped, self._out_spec)
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    # -- autograd -------------------------------------------------------------------------------

    def _tangents(self, grads: Sequence[Any], values: Mapping[str, int]) -> list[Any]:
        """The backward program's tangents (in input order) from the gradients of the user outputs
        (DTensors; None: the loss did not use that output)."""
        from shapecore import evaluate
        from shapecore.torch.private import dtensor_local

        tangents = []
        for (kind, index), local_input in zip(self._feed, self.program.inputs):
            if kind != "tangent":
                continue
            grad = grads[index]
            if grad is None:
                shape = [int(evaluate(e, values)) for e in local_input.local_shape]
                tangents.append(torch.zeros(shape, dtype=local_input.dtype, device=self.groups.device))
                continue
            if tuple(grad.placements) != tuple(local_input.placements):
                grad = grad.redistribute(self.groups.device_mesh, local_input.placements)
            tangents.append(dtensor_local(grad).contiguous())
        return tangents

    def _parameter_grads(self, outputs: Sequence[Any], trainable: Mapping[str, Any]) -> list[Any]:
        """The gradients of the ``trainable`` parameters (name -> parameter) as DTensors placed like
        them (plain tensors on a mesh of one device, as the parameters are), from the backward
        program's outputs (the joint program's outputs after the user outputs)."""
        from shapecore.torch.private import dtensor_placed_like

        assert self.partitioned is not None
        offset = self.partitioned.user_outputs
        if is_whole(self.groups):  # every piece is the whole gradient (autograd casts one of another dtype)
            return [outputs[self._grad_positions[name] - offset] for name in trainable]
        grads = []
        for name, parameter in trainable.items():
            k = self._grad_positions[name]
            local, placed = outputs[k - offset], tuple(self.plan.output_placements[k])
            if placed == tuple(parameter.placements) and local.dtype == parameter.dtype:
                grads.append(dtensor_placed_like(parameter, local))  # as the parameter is: its spec serves
                continue
            grad = DTensor.from_local(local, self.groups.device_mesh, placed, run_check=False, shape=parameter.shape,
                                      stride=parameter.stride())
            grads.append(grad.redistribute(self.groups.device_mesh, parameter.placements))
        return grads

    # -- calling -----------------------------------------------------------------------------------

    def _variant(self, values: Mapping[str, int]) -> CompiledProgram:
        broken: list[Any] = []
        for variant in self._variants:
            failed = variant.first_broken(values)
            if failed is None:
                return variant
            broken.append(failed)
        if self.dynamic:
            warnings.warn(f"compiling again for {dict(values)}: the compiled program assumes "
                          f"{', '.join(map(str, dict.fromkeys(broken)))}", stacklevel=5)
        variant = self._compile_first(values)  # every rank gets here with the same values: safe to communicate
        self._variants.append(variant)
        return variant

    def forward(self, *inputs: Any) -> Any:
        """Run on the global ``inputs`` (plain tensors, the same on every rank, or DTensors placed as
        the plan wants); checked on every rank before any collective. Returns DTensors placed as
        the plan places the outputs (global tensors with ``global_outputs=True``). Built for
        training, in training mode and with grad enabled, the outputs carry autograd: a loss's
        ``backward()`` runs the backward program and accumulates the parameters' gradients."""
        from shapecore.torch.private import tree_leaves

        sized = self._at(self.entry.check(inputs))
        pieces = [self._piece(x, s) for x, s in zip(inputs if self.entry.flat else tree_leaves(inputs), self.entry.specs)]
        trainable: dict[str, Any] = {}
        tensors = []
        with torch.no_grad():
            for kind, what in self._feed:
                if kind == "input":
                    tensors.append(pieces[what])
                elif kind != "tangent":
                    table, attribute = self._owners[what]
                    tensor = table[attribute]
                    tensors.append(_held_piece(tensor))
                    if kind == "parameter" and tensor.requires_grad and what in self._grad_positions:
                        trainable[what] = tensor
        if self.partitioned is not None and self.training and torch.is_grad_enabled() and trainable:
            placed = _Step.apply(self, _Call(sized, tensors, list(trainable)), *trainable.values())
        else:
            placed = self._placed(self._update_buffers(sized.variant.run(sized.symbol_values, tensors)), sized)
        return self._wrap(placed)

    def _at(self, global_values: dict[str, int]) -> _Sized:
        """What calls at these global symbol values share (found once per set of values)."""
        from shapecore import evaluate

        key = tuple(sorted(global_values.items()))
        found = self._sized.get(key)
        if found is None:
            values = self.program.localizer.local_values(global_values)
            sizes = [torch.Size(int(evaluate(e, global_values)) if not isinstance(e, int) else e for e in shape)
                     for shape in self._output_shapes]
            found = _Sized(values, self._variant(values), [values[s.name] for s in self.program.symbols], sizes,
                           [None] * len(sizes))
            if len(self._sized) == _KEPT_SIZES:
                del self._sized[next(iter(self._sized))]  # the oldest
            self._sized[key] = found
        return found


def parallelize(model: nn.Module, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                **options: Any) -> ParallelModule:
    """Trace, plan, lower and compile ``model`` for this rank (call it on every rank); ``options``
    as :class:`ParallelModule` takes them (``training``, ``global_outputs``, ``plan``, plan options)."""
    return ParallelModule(model, example_inputs, dynamic_shapes=dynamic_shapes, mesh=mesh, **options)
