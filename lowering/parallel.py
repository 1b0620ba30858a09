"""``parallelize``: a model planned, lowered and compiled once for this rank.

``ParallelModule(model, example_inputs, dynamic_shapes=..., mesh=...)`` runs on every rank
(under ``torchrun``, ``lowering.launch`` or any launcher that initializes the default process
group): trace (``torch.export`` through :mod:`shapecore.torch_bridge`) → plan (on rank 0,
broadcast as JSON, so every rank runs the same plan; a planning error is raised on every
rank) → :func:`~lowering.lower.lower` → one Inductor compile with the local symbols dynamic.

A call takes this rank's pieces of the user inputs (:meth:`ParallelModule.shard_inputs`
cuts them from the global inputs), runs :class:`~lowering.entry.EntryCheck` (agreement
across ranks, then the guards), and runs the compiled program. When the compiled program's
own assumptions (:attr:`~lowering.compile.CompiledProgram.guards`) do not hold for a call,
a program specialized to that call's sizes is compiled and kept: :attr:`compile_count`
counts every compile, so "one compile for every batch size" is observable.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from lowering.collectives import apply_steps, gather_steps, local_shard
from lowering.compile import CompiledProgram, compile_program
from lowering.entry import EntryCheck, InputSpec
from lowering.errors import LoweringError
from lowering.lower import LocalProgram, lower
from lowering.mesh_groups import mesh_groups
from planner.mesh import Mesh
from planner.plan import Plan

__all__ = ["ParallelModule", "parallelize"]


def _as_mesh(mesh: Any) -> Mesh:
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, (tuple, list)):
        return Mesh(tuple(mesh))
    return Mesh.from_device_mesh(mesh)


def _plan_on_rank_zero(gm: Any, traced: Any, mesh: Mesh, options: Mapping[str, Any]) -> Plan:
    """Rank 0 plans; everyone gets its JSON (or its error, raised on every rank)."""
    import torch.distributed as dist

    message: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            import planner

            plan = planner.plan(gm, mesh, shape_env=traced.env, exported=traced.exported, **options)
            message = [("plan", plan.to_json())]
        except Exception as error:  # noqa: BLE001 - re-raised on every rank below
            message = [("error", f"{type(error).__name__}: {error}")]
            if dist.get_world_size() == 1:
                raise
    dist.broadcast_object_list(message, src=0)
    kind, body = message[0]
    if kind == "error":
        raise LoweringError(f"planning failed on rank 0: {body}")
    return Plan.from_json(body)


class ParallelModule:
    """A model's local program on this rank; call it with this rank's pieces of the inputs."""

    def __init__(self, model: Any, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                 plan: Plan | None = None, dynamic: bool = True, **plan_options: Any) -> None:
        import torch

        from planner.graph import read_graph
        from shapecore.torch_bridge import trace_export

        self.mesh = _as_mesh(mesh)
        self.groups = mesh_groups(self.mesh)
        self.traced = trace_export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        gm = self.traced.graph_module
        self.plan = plan if plan is not None else _plan_on_rank_zero(gm, self.traced, self.mesh, plan_options)
        self.program: LocalProgram = lower(gm, self.plan, groups=self.groups)
        self._in_spec = self.traced.exported.call_spec.in_spec
        self._out_spec = self.traced.exported.call_spec.out_spec
        graph = read_graph(gm, exported=self.traced.exported)
        state = {**dict(model.named_parameters()), **dict(model.named_buffers()), **self.traced.exported.constants}
        self._feed: list[Any] = []  # per program input: a local tensor (params) or the user input's index
        user: dict[int, InputSpec] = {}
        for local_input in self.program.inputs:
            node = graph[local_input.name]
            if node.role == "input":
                assert node.input_index is not None
                self._feed.append(node.input_index)
                user[node.input_index] = InputSpec(local_input.name, local_input.placements,
                                                   local_input.global_shape, local_input.dtype)
            elif node.fqn in state:
                with torch.no_grad():
                    self._feed.append(local_shard(state[node.fqn].detach(), local_input.placements, self.groups))
            else:
                raise LoweringError(f"graph input {local_input.name} ({node.role}) is neither a user input nor a "
                                    "parameter, buffer or constant of the model")
        self._user_count = len(graph.inputs)
        specs = [user.get(i, InputSpec(f"input {i}", None, (), None)) for i in range(self._user_count)]
        env = self._guard_env()
        names = {**self.traced.sources, **{symbol: dim for dim, symbol in self.traced.dims.items()}}
        self.entry = EntryCheck(specs, self.mesh.shape, env, names)
        self.dynamic = dynamic
        self._variants: list[CompiledProgram] = []
        if dynamic:
            self._variants.append(compile_program(self.program))

    def _guard_env(self) -> Any:
        env = self.traced.env
        from shapecore import ShapeEnv

        checked = ShapeEnv.from_json(env.to_json())
        for guard in self.plan.guards:
            checked.add_fact(guard)
        return checked

    # -- properties --------------------------------------------------------------------------------

    @property
    def compile_count(self) -> int:
        """How many programs Inductor compiled on this rank (1 while every call fits the first)."""
        return len(self._variants)

    @property
    def compile_seconds(self) -> float:
        return sum(v.seconds for v in self._variants)

    # -- inputs and outputs ---------------------------------------------------------------------

    def _flatten_inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        from torch.utils._pytree import tree_flatten

        flat, spec = tree_flatten((tuple(args), dict(kwargs)))
        if spec != self._in_spec:
            raise TypeError(f"the inputs' structure {spec} differs from the traced one {self._in_spec}")
        return flat

    def shard_inputs(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """This rank's pieces of the global inputs (as positional arguments for a call)."""
        flat = self._flatten_inputs(args, kwargs)
        pieces = [x if spec.placements is None else local_shard(x, spec.placements, self.groups)
                  for x, spec in zip(flat, self.entry.specs)]
        from torch.utils._pytree import tree_unflatten

        local_args, local_kwargs = tree_unflatten(pieces, self._in_spec)
        if local_kwargs:
            raise TypeError("keyword inputs are not supported by shard_inputs; pass them positionally")
        return tuple(local_args)

    def gather_outputs(self, local_outputs: Any) -> Any:
        """The global outputs, reassembled on every rank from each rank's local outputs (a collective)."""
        from torch.utils._pytree import tree_flatten, tree_unflatten

        flat, _ = tree_flatten(local_outputs)
        full = []
        for x, placements in zip(flat, self.plan.output_placements):
            if placements is None:
                full.append(x)
            else:
                full.append(apply_steps(x, gather_steps(placements), placements, _replicated(len(placements)),
                                        self.groups, where="gather_outputs"))
        return tree_unflatten(full, self._out_spec)

    # -- calling ----------------------------------------------------------------------------------

    def _variant(self, values: Mapping[str, int]) -> CompiledProgram:
        broken: list[Any] = []
        for variant in self._variants:
            failed = variant.accepts(values)
            if not failed:
                return variant
            broken += failed
        if self._variants and self.dynamic:
            warnings.warn(f"recompiling for {dict(values)}: the compiled program assumes "
                          f"{', '.join(map(str, dict.fromkeys(broken)))}", stacklevel=3)
        variant = compile_program(self.program, values=values)
        self._variants.append(variant)
        return variant

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils._pytree import tree_unflatten

        flat = self._flatten_inputs(args, kwargs)
        global_values = self.entry.check(flat)
        values = self.program.localizer.local_values(global_values)
        variant = self._variant(values)
        tensors = [flat[f] if isinstance(f, int) else f for f in self._feed]
        outputs = variant.run([values[s.name] for s in self.program.symbols], tensors)
        return tree_unflatten(outputs, self._out_spec)


def _replicated(n: int) -> tuple[Any, ...]:
    from torch.distributed.tensor import Replicate

    return (Replicate(),) * n


def parallelize(model: Any, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any,
                **plan_options: Any) -> ParallelModule:
    """Trace, plan, lower and compile ``model`` for this rank (call on every rank)."""
    return ParallelModule(model, example_inputs, dynamic_shapes=dynamic_shapes, mesh=mesh, **plan_options)
