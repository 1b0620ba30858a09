"""``parallelize``: a model planned, lowered and compiled once for this rank.

``ParallelModule(model, example_inputs, dynamic_shapes=..., mesh=...)`` runs on every rank
(under ``torchrun``, :func:`lowering.launch`, or any launcher that initializes the default
process group):

1. trace with the planner's own front end (:func:`shapecore.torch.trace_for_planning`: a
   decomposed ``torch.export`` graph, or with ``training=True`` a joint forward+backward
   graph), so the graph lowered is the graph planned;
2. plan on rank 0 and broadcast the plan's JSON, so every rank runs the same plan (a planning
   error is raised on every rank); ``plan=`` skips planning;
3. :func:`~lowering.lower.lower` the plan, cut the parameters into this rank's pieces (the
   plan's :attr:`~planner.Plan.graph_inputs` say which graph input is which parameter, user
   input or tangent, its :attr:`~planner.Plan.graph_outputs` which output is which gradient);
4. compile once with Inductor, the local symbols dynamic. When every rank would compile the
   same graph text, rank 0 compiles first and the others load its result from Inductor's
   cache.

A call takes the *global* user inputs: plain tensors (every rank passes the same ones) or
DTensors placed as the plan wants (:meth:`ParallelModule.shard_inputs` makes them, cutting
ahead of the call). It runs the :class:`~lowering.entry.EntryCheck` on the global sizes (one
agreement step across ranks, then the guards and the even splits: a batch that does not split
raises on every rank, and nothing is computed on a truncated one), then cuts this rank's
pieces and runs the compiled program. A plain tensor is always taken for the global input: a
rank's own piece goes in as a DTensor, which carries the global shape the check needs (so
``pm(*pm.shard_inputs(x))``, the two-step form, keeps working). A call the compiled program's own
assumptions (:attr:`~lowering.compile.CompiledProgram.guards`) do not cover gets a program
specialized to its sizes, compiled then and kept: :attr:`ParallelModule.compile_count`
counts every compile, so "one compile for every batch size" is observable.

Training (``training=True``): a call returns ``(outputs, grads)``, ``grads`` mapping each
parameter's name to this rank's piece of its gradient for the tangents ``ones_like(output)``
(the gradient of ``sum(outputs)``); :meth:`ParallelModule.gather_grads` reassembles them.
A tied parameter (GPT-2's ``lm_head.weight`` is ``transformer.wte.weight``) is one tensor
with one placement and one gradient, under the name ``model.named_parameters()`` gives it.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lowering.collectives import apply_steps, gather_steps, local_shard
from lowering.compile import CompiledProgram, compile_program
from lowering.entry import EntryCheck, InputSpec
from lowering.errors import LoweringError
from lowering.lower import LocalProgram, lower
from lowering.mesh_groups import mesh_groups
from planner import Plan, as_mesh

__all__ = ["ParallelModule", "parallelize"]


def _on_rank_zero(what: str, make: Any) -> Any:
    """``make()`` on rank 0, its (picklable) result broadcast; its error raised on every rank."""
    import torch.distributed as dist

    message: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            message = [("ok", make())]
        except Exception as error:  # noqa: BLE001 - re-raised on every rank below
            if dist.get_world_size() == 1:
                raise
            message = [("error", f"{type(error).__name__}: {error}")]
    dist.broadcast_object_list(message, src=0)
    kind, body = message[0]
    if kind == "error":
        raise LoweringError(f"{what} failed on rank 0: {body}")
    return body


def _together(what: str, make: Callable[[], Any]) -> Any:
    """``make()`` on every rank, then one exchange of outcomes: if any rank failed, every rank raises.

    Keeps a rank from waiting forever in the next collective for a peer that already failed.
    """
    import torch.distributed as dist

    result, error = None, None
    try:
        result = make()
    except Exception as failure:  # noqa: BLE001 - shared with every rank below
        error = failure
    outcomes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(outcomes, None if error is None else f"{type(error).__name__}: {error}")
    failed = [(rank, text) for rank, text in enumerate(outcomes) if text is not None]
    if failed:
        rank, text = failed[0]
        raise LoweringError(f"{what} failed on rank {rank}: {text}") from error
    return result


def _replicated(n: int) -> tuple[Any, ...]:
    from torch.distributed.tensor import Replicate

    return (Replicate(),) * n


def _named_state(model: Any) -> dict[str, tuple[str, Any]]:
    """Every name of each parameter and buffer -> (the name ``named_parameters()`` /
    ``named_buffers()`` list it under, the tensor). A tied parameter has several names; torch
    lifts each of them into a traced graph but lists the tensor once, under the first."""
    from itertools import chain

    first: dict[int, str] = {}
    return {name: (first.setdefault(id(t), name), t) for name, t in chain(
        model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))}


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


class ParallelModule:
    """A model's local program on this rank; call it with the global inputs (or DTensors of them).

    ``plan_options`` go to :func:`planner.plan` (``constraints``, ``batch_sizes``,
    ``hardware``, ``divisibility`` …); ``plan`` skips planning; ``dynamic=False`` compiles a
    program specialized to each distinct set of sizes instead (the peer for benchmarks);
    ``progress`` is called with the name of each construction phase as it starts.
    """

    def __init__(self, model: Any, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                 training: bool = False, plan: Plan | None = None, dynamic: bool = True,
                 progress: Callable[[str], None] | None = None, **plan_options: Any) -> None:
        import planner
        from shapecore.torch import trace_for_planning
        from shapecore.torch.private import tree_structure

        self.timings: dict[str, float] = {}
        """Seconds per construction phase on this rank: trace, plan, lower, compile."""
        self._progress = progress or (lambda phase: None)
        self._progress("trace")
        clock = time.perf_counter()
        self.mesh = as_mesh(mesh)
        self.groups = mesh_groups(self.mesh)
        self.training = training
        traced = _together("tracing", lambda: trace_for_planning(
            model, example_inputs, dynamic_shapes=dynamic_shapes, training=training))
        gm, exported, self.env = traced.graph_module, traced.exported, traced.env
        self.graph_module = gm
        dims = {**traced.dim_exprs, **plan_options.pop("dims", {})}
        clock = self._phase("trace", clock)
        if plan is None:
            plan = Plan.from_json(_on_rank_zero("planning", lambda: planner.plan(
                exported if exported is not None else gm, self.mesh, shape_env=self.env, dims=dims,
                **plan_options).to_json()))
        self.plan = plan
        clock = self._phase("plan", clock)
        self.program: LocalProgram = _together("lowering", lambda: lower(gm, plan, groups=self.groups))
        self._out_spec = exported.call_spec.out_spec if exported is not None else None
        state = _named_state(model)
        self._feed = self._feeds(state)
        self._grad_names = self._gradient_names(state)
        arguments, leaves = _leaf_names(model, example_inputs)
        self.entry = EntryCheck(self._specs(leaves), self.mesh.shape, self.program.env, self._display_names(dims),
                                structure=tree_structure(tuple(example_inputs)), arguments=arguments,
                                device_mesh=self.groups.device_mesh)
        self.dynamic = dynamic
        self._variants: list[CompiledProgram] = []
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
        """Per program input: ("tensor", this rank's piece), ("input", index) or ("tangent", output index)."""
        import torch

        roles = {i.name: i for i in self.plan.graph_inputs}
        feeds: list[tuple[str, Any]] = []
        for local_input in self.program.inputs:
            graph_input = roles.get(local_input.name)
            if graph_input is None:
                raise LoweringError(f"the plan does not say what feeds graph input {local_input.name}; "
                                    "was it made for this graph?")
            if graph_input.role == "input":
                feeds.append(("input", graph_input.index))
            elif graph_input.role == "tangent":
                feeds.append(("tangent", local_input))
            elif graph_input.fqn in state:
                with torch.no_grad():
                    piece = local_shard(state[graph_input.fqn][1].detach(), local_input.placements, self.groups)
                    feeds.append(("tensor", piece))
            else:
                raise LoweringError(f"graph input {local_input.name} ({graph_input.role} {graph_input.fqn}) is neither a "
                                    "user input, a tangent, nor a parameter or buffer of the model")
        return feeds

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

    def _display_names(self, dims: Mapping[str, Any]) -> dict[str, str]:
        names = {name: info.source for name, info in self.env.symbols.items() if info.source}
        names.update({str(expr): dim for dim, expr in dims.items() if getattr(expr, "is_Symbol", False)})
        return names

    def _compile_first(self, values: Mapping[str, int] | None = None) -> CompiledProgram:
        """Compile (specialized to ``values`` if given) on every rank; when every rank has the
        same graph text, rank 0 compiles first and the others load its result from the cache."""
        import torch.distributed as dist

        code = hashlib.sha256(self.program.graph_module.code.encode()).hexdigest()
        codes: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(codes, code)
        shared, rank = len(set(codes)) == 1, dist.get_rank()
        first = _together("compiling", lambda: compile_program(self.program, values=values)
                          if rank == 0 or not shared else None)
        if not shared:
            return first
        rest = _together("compiling", lambda: None if rank == 0 else compile_program(self.program, values=values))
        return first if rank == 0 else rest

    # -- properties ------------------------------------------------------------------------------

    @property
    def compile_count(self) -> int:
        """How many programs Inductor compiled on this rank (1 while every call fits the first)."""
        return len(self._variants)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling on this rank."""
        return sum(v.seconds for v in self._variants)

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
        import torch
        from torch.distributed.tensor import DTensor

        if (spec.placements is None or not isinstance(x, torch.Tensor) or isinstance(x, DTensor)
                or x.dim() != len(spec.global_shape)
                or any(n % self.mesh.shard_factor(spec.placements, d) for d, n in enumerate(x.shape))):
            return x
        return DTensor.from_local(local_shard(x, spec.placements, self.groups), self.groups.device_mesh,
                                  spec.placements, run_check=False, shape=x.shape, stride=x.stride())

    def _piece(self, x: Any, spec: InputSpec) -> Any:
        """This rank's piece of a checked input (a global tensor, or a DTensor placed as the plan wants)."""
        from torch.distributed.tensor import DTensor

        if isinstance(x, DTensor):
            return x.to_local()
        return x if spec.placements is None else local_shard(x, spec.placements, self.groups)

    def _gather(self, x: Any, placements: Any, what: str) -> Any:
        if placements is None:
            return x
        return apply_steps(x, gather_steps(placements), placements, _replicated(len(placements)), self.groups, where=what)

    def gather_outputs(self, local_outputs: Any) -> Any:
        """The global outputs, reassembled on every rank from the ranks' local outputs (a collective)."""
        from shapecore.torch.private import tree_flatten, tree_unflatten

        flat, spec = tree_flatten(local_outputs)
        outputs = self._user_outputs()
        if len(flat) != len(outputs):
            raise TypeError(f"got {len(flat)} outputs, the program has {len(outputs)}")
        full = [self._gather(x, self.plan.output_placements[k], f"gathering output {k}") for x, k in zip(flat, outputs)]
        return tree_unflatten(full, spec)

    def gather_grads(self, local_grads: Mapping[str, Any]) -> dict[str, Any]:
        """Full gradients on every rank from each rank's pieces (training; a collective)."""
        placements = {self._grad_names[fqn]: self.plan.output_placements[k] for k, fqn in self._grad_outputs()}
        return {fqn: self._gather(g, placements[fqn], f"gathering the gradient of {fqn}") for fqn, g in local_grads.items()}

    def _user_outputs(self) -> list[int]:
        """Positions of the user outputs among the program's outputs."""
        return [k for k, o in enumerate(self.plan.graph_outputs) if o is not None and o.role == "output"]

    def _grad_outputs(self) -> list[tuple[int, str]]:
        """(position among the program's outputs, parameter name in the graph) of each gradient."""
        return [(k, o.grad_of) for k, o in enumerate(self.plan.graph_outputs)
                if o is not None and o.role == "grad" and o.grad_of is not None]

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
                          f"{', '.join(map(str, dict.fromkeys(broken)))}", stacklevel=3)
        variant = self._compile_first(values)  # every rank gets here with the same values: safe to communicate
        self._variants.append(variant)
        return variant

    def _tangent(self, local_input: Any, global_values: Mapping[str, int]) -> Any:
        import torch

        from shapecore import evaluate

        shape = [int(evaluate(e, global_values)) for e in local_input.global_shape]
        return local_shard(torch.ones(shape, dtype=local_input.dtype), local_input.placements, self.groups)

    def __call__(self, *inputs: Any) -> Any:
        """Run on the global ``inputs`` (plain tensors, the same on every rank, or DTensors placed as
        the plan wants); checked on every rank before any collective."""
        from shapecore.torch.private import tree_leaves, tree_unflatten

        global_values = self.entry.check(inputs)
        pieces = [self._piece(x, s) for x, s in zip(tree_leaves(inputs), self.entry.specs)]
        values = self.program.localizer.local_values(global_values)
        variant = self._variant(values)
        tensors = []
        for kind, what in self._feed:
            tensors.append(what if kind == "tensor" else pieces[what] if kind == "input" else
                           self._tangent(what, global_values))
        outputs = variant.run([values[s.name] for s in self.program.symbols], tensors)
        user = [outputs[k] for k in self._user_outputs()]
        result = tree_unflatten(user, self._out_spec) if self._out_spec is not None else (
            user[0] if len(user) == 1 else tuple(user))
        if not self.training:
            return result
        grads = {self._grad_names[fqn]: outputs[k] for k, fqn in self._grad_outputs()}
        return result, grads


def parallelize(model: Any, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                **plan_options: Any) -> ParallelModule:
    """Trace, plan, lower and compile ``model`` for this rank (call it on every rank)."""
    return ParallelModule(model, example_inputs, dynamic_shapes=dynamic_shapes, mesh=mesh, **plan_options)
