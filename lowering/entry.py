"""The entry check: inputs against the trace, global sizes agreed across ranks, guards checked.

A call's inputs are *global*: a plain tensor is the whole input (every rank passes the same
one), a ``DTensor`` is placed as the plan wants and its ``shape`` is the global one. Run at
every call of a parallel program, before any of its collectives, and before anything is cut:

1. **Fit** (local): the call's pytree structure against the traced one, then each tensor input
   against its spec (a tensor, its number of dims, its dtype; a DTensor's mesh, placements and
   local piece). Each problem is a sentence naming the input, what the program expects and what
   was given. Positional plain tensors or DTensors whose signature (every property this step
   reads) is that of one of the last 64 calls that fit are not checked again.
2. **Agreement** (the only communication): each rank encodes "fits or not" and its inputs'
   global sizes as one fixed-length int64 vector (its length is fixed by the trace, so even a
   rank with malformed inputs takes part), and one ``all_gather_single`` shares them. When some
   rank's inputs do not fit, one ``all_gather_object`` (every rank enters it: every rank sees
   the same flags) shares the sentences: the same problems on every rank raise
   :class:`InputError`, anything else :class:`RankMismatch` naming the ranks, as does a
   disagreement on the global sizes. Every rank decides on the same table, so every rank raises
   the same error or none does. The table is made of sizes the host knows (no tensor's values),
   and is exchanged on the CPU: on the default group when its backend takes CPU tensors (gloo),
   else on a gloo group over the same ranks (:func:`agreement_group`, made once), so a call on
   NCCL never waits for the GPU to read it back. One process agrees with itself: no exchange.
3. **Binding**: dims whose traced size is a symbol (or ``c·s + d``) bind it from the global
   size; every dim is then checked against its traced size. Steps 3 to 5 depend on the agreed
   sizes only: the values bound by sizes that passed them are kept (the last 64 such sizes),
   and a call with kept sizes skips them.
4. **Guards**: everything a shapecore ShapeEnv holding the trace's contract (symbol ranges,
   torch's guards) and the plan's guards says inputs must satisfy (``produce_guards``),
   compiled once into straight-line Python (:func:`shapecore.compile_guards`), is checked at
   the bound values; the first condition broken raises :class:`GuardViolation` naming it (in
   the user's ``Dim`` names) and the values.
5. **Even splits**: a dim the plan splits into ``k`` pieces needs a global size divisible by
   ``k``. The guards of a plan the planner made imply it; a plan given by hand may not, so it
   is checked here too: a :class:`GuardViolation`, never a truncated piece.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from lowering.errors import GuardViolation, InputError, RankMismatch
from planner import Mesh, format_placements

__all__ = ["InputSpec", "EntryCheck", "agreement_group", "device_problem"]

_KEPT_SIZES = 64
"""How many sets of agreed sizes the entry check keeps the outcome of."""


def _takes_cpu(backend: str) -> bool:
    """Whether a process group of ``backend`` takes CPU tensors (``cpu:gloo,cuda:nccl``: one is listed for cpu)."""
    import torch.distributed as dist

    per_device = [part.split(":", 1)[0] for part in backend.split(",") if ":" in part]
    return "cpu" in (per_device or dist.Backend.backend_capability.get(backend, []))


def device_problem(device: str, backend: str) -> str | None:
    """Why a model whose tensors are on ``device`` (a device type: ``cpu``, ``cuda``) cannot run on
    a default process group of ``backend`` (``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``), whose
    mesh is on the device :func:`~lowering.mesh_groups.device_type` names; or None."""
    import torch.distributed as dist

    from lowering.mesh_groups import device_type

    mesh = device_type(backend)
    if device == mesh:
        return None
    fitting = dist.Backend.default_device_backend_map.get(device)
    return (f"the model is on {device}, but the process group's backend {backend} runs the mesh on {mesh}: move the "
            f"model to {mesh}, or initialize the process group with a backend for {device}"
            + (f" (torch.distributed.init_process_group({fitting!r}))" if fitting else ""))


_SIDE_GROUPS: dict[Any, Any] = {}


def agreement_group(backend: str | None = None) -> Any:
    """The process group the entry check's agreement runs on: None (the default group) when the
    default group's ``backend`` (default: its own) takes CPU tensors, else a gloo group over every
    rank, made on first use and kept for the default group (a collective: call it on every rank)."""
    import torch.distributed as dist

    if _takes_cpu(backend or dist.get_backend()):
        return None
    if dist.group.WORLD not in _SIDE_GROUPS:
        _SIDE_GROUPS[dist.group.WORLD] = dist.new_group(backend="gloo")
    return _SIDE_GROUPS[dist.group.WORLD]


@dataclass(frozen=True)
class InputSpec:
    """A user input of the program: its name, placements, global shape and dtype.

    ``placements`` is None for an input that is not a tensor (it is not checked).
    """

    name: str
    placements: tuple[Any, ...] | None
    global_shape: tuple[sympy.Basic, ...]
    dtype: Any


def _describe(value: Any) -> str:
    """A short description of what a caller passed, for error messages."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        placed = format_placements(value.placements)
        return f"a DTensor of dtype {value.dtype}, global shape {list(value.shape)}, placed {placed}"
    if isinstance(value, torch.Tensor):
        return f"a {type(value).__name__} of dtype {value.dtype} and shape {list(value.shape)}"
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, dict):
        return f"a dict with keys {list(value)}"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:40]}{'…' if len(text) > 40 else ''})"


class EntryCheck:
    """Checks one call's global inputs on every rank; returns the global symbol values.

    ``env``: a shapecore ShapeEnv over the trace's symbols whose ``produce_guards`` lists what
    inputs must satisfy (the trace's contract and the plan's guards); ``names``: symbol name ->
    the name to show the user (their ``Dim`` name or the input dim it is read from).
    ``structure``: the pytree spec of the traced positional inputs (default: ``len(specs)``
    positional tensors) and ``arguments`` their names; ``device_mesh``: the mesh a DTensor
    input must be on; ``device``: the device type every tensor input must be on (None: any);
    ``group``: the process group to agree on (:func:`agreement_group`; None: the default group).
    """

    def __init__(self, specs: Sequence[InputSpec], mesh_shape: Sequence[int], env: Any,
                 names: Mapping[str, str], *, structure: Any = None, arguments: Sequence[str] | None = None,
                 device_mesh: Any = None, device: str | None = None, group: Any = None) -> None:
        import torch.distributed as dist

        from shapecore import compile_guards
        from shapecore.torch.private import tree_structure

        self.specs = tuple(specs)
        self.mesh = Mesh(tuple(mesh_shape))
        self.structure = structure if structure is not None else tree_structure(tuple(range(len(self.specs))))
        self.flat = self.structure == tree_structure(tuple(range(len(self.specs))))
        """Whether the traced inputs are positional leaves (no nested structure): a call's inputs that fit
        are then its leaves as given."""
        self.arguments = tuple(arguments) if arguments is not None else tuple(s.name for s in self.specs)
        self.device_mesh = device_mesh
        self.replacements = dict(env.replacements)
        contract = env.produce_guards({name: name for name in env.symbols})
        self._guards = compile_guards(contract, {name: f"values[{name!r}]" for name in env.symbols})
        self.names = dict(names)
        self._length = 1 + sum(len(s.global_shape) for s in self.specs if s.placements is not None)
        self._linear_forms: dict[tuple[sympy.Basic, sympy.Symbol], tuple[sympy.Basic, sympy.Basic] | None] = {}
        self.device = device
        self.group = group
        self._world = dist.get_world_size(group) if dist.is_initialized() else 1
        self._fitting: dict[tuple[Any, ...], list[int]] = {}
        """The signatures of the last positional tensor inputs that fit (:meth:`_signature`) -> their row
        of the agreement table: inputs of a kept signature fit without being checked again."""
        self._passed: dict[tuple[int, ...], dict[str, int]] = {}
        """Agreed sizes -> the symbol values they bound, for the last sizes that passed steps 3 to 5."""

    # -- 1. fit --------------------------------------------------------------------------------------

    def _fit(self, inputs: Sequence[Any]) -> tuple[list[str], list[Any]]:
        """What keeps this rank's ``inputs`` (the call's positional arguments) from fitting the program,
        and the inputs flattened."""
        from shapecore.torch.private import tree_flatten

        flat, structure = tree_flatten(tuple(inputs))
        if structure != self.structure:
            return [self._structure_problem(inputs)], flat
        return [p for p in (self._problem(spec, x) for spec, x in zip(self.specs, flat)) if p is not None], flat

    def _structure_problem(self, inputs: Sequence[Any]) -> str:
        from shapecore.torch.private import tree_structure

        expected = self.structure.children()
        if len(inputs) != len(expected):
            return (f"passed {len(inputs)} inputs, the program takes {len(expected)} "
                    f"({', '.join(self.arguments)})")
        first = 0  # index of the argument's first leaf
        for name, spec, value in zip(self.arguments, expected, inputs):
            if tree_structure(value) != spec:
                break
            first += spec.num_leaves
        wanted = self._expected(self.specs[first]) if spec.is_leaf() else (
            f"a {spec.type.__name__} of {spec.num_children} items")
        return f"input {name}: expected {wanted}, got {_describe(value)}"

    def _expected(self, spec: InputSpec) -> str:
        if spec.placements is None:
            return "a non-tensor value"
        shape = ", ".join(self._show(e) for e in spec.global_shape)
        return f"a tensor of dtype {spec.dtype} and global shape ({shape})"

    def _signature(self, inputs: Sequence[Any]) -> tuple[Any, ...] | None:
        """Everything step 1 reads of ``inputs`` when they are positional plain tensors or DTensors (each
        one's shape, dtype and device; a DTensor's mesh, placements and piece's shape), else None."""
        import torch
        from torch.distributed.tensor import DTensor

        from shapecore.torch.private import dtensor_local

        if not self.flat or len(inputs) != len(self.specs):
            return None
        signature: list[Any] = []
        for x in inputs:
            kind = type(x)
            if kind is torch.Tensor:
                signature.append((x.shape, x.dtype, x.device))
            elif kind is DTensor:
                signature.append((x.shape, x.dtype, x.device, x.device_mesh, x.placements, dtensor_local(x).shape))
            else:
                return None
        return tuple(signature)

    def _problem(self, spec: InputSpec, value: Any) -> str | None:
        import torch
        from torch.distributed.tensor import DTensor

        if spec.placements is None:
            return None
        if not isinstance(value, torch.Tensor):
            return f"input {spec.name}: expected {self._expected(spec)}, got {_describe(value)}"
        if value.dim() != len(spec.global_shape):
            return (f"input {spec.name}: expected {len(spec.global_shape)} dims ({self._expected(spec)}), "
                    f"got {value.dim()} dims ({_describe(value)})")
        if value.dtype != spec.dtype:
            return f"input {spec.name}: expected dtype {spec.dtype}, got {_describe(value)}"
        if self.device is not None and value.device.type != self.device:
            return f"input {spec.name}: expected a tensor on {self.device}, where the model is, got {_describe(value)} on {value.device}"
        if isinstance(value, DTensor):
            return self._dtensor_problem(spec, value)
        return None

    def _dtensor_problem(self, spec: InputSpec, value: Any) -> str | None:
        from shapecore.torch.private import dtensor_local

        assert spec.placements is not None
        if self.device_mesh is not None and value.device_mesh is not self.device_mesh and value.device_mesh != self.device_mesh:
            return (f"input {spec.name}: expected the global tensor or a DTensor on the module's mesh "
                    f"{self.device_mesh}, got a DTensor on {value.device_mesh}")
        if tuple(value.placements) != tuple(spec.placements):
            return (f"input {spec.name}: expected the global tensor or a DTensor placed "
                    f"{format_placements(spec.placements)}, got {_describe(value)}; pass value.full_tensor() or redistribute it")
        local = tuple(dtensor_local(value).shape)
        for d, n in enumerate(value.shape):
            pieces = self.mesh.shard_factor(spec.placements, d)
            if n % pieces == 0 and local[d] != n // pieces:
                return (f"input {spec.name}: a DTensor of global shape {list(value.shape)} placed "
                        f"{format_placements(spec.placements)} holds a "
                        f"local piece of shape {list(local)} on this rank; dim {d} needs {n // pieces}")
        return None

    # -- 2. agreement --------------------------------------------------------------------------------

    def _agree(self, inputs: Sequence[Any]) -> tuple[int, ...]:
        """The global sizes every rank passed, after one all-gather (on the CPU); raises InputError or
        RankMismatch (identically everywhere)."""
        import torch
        import torch.distributed as dist

        from shapecore.torch.private import dist_all_gather_single

        signature = self._signature(inputs)
        row = self._fitting.get(signature) if signature is not None else None
        problems: list[str] = []
        if row is None:
            problems, flat = self._fit(inputs)
            if problems:
                row = [1] + [0] * (self._length - 1)
            else:
                row = [0] + [n for spec, x in zip(self.specs, flat) if spec.placements is not None for n in x.shape]
                if signature is not None:
                    if len(self._fitting) == _KEPT_SIZES:
                        del self._fitting[next(iter(self._fitting))]  # the oldest
                    self._fitting[signature] = row
        world = self._world
        if world > 1:
            table = torch.empty(world * self._length, dtype=torch.int64)
            dist_all_gather_single(table, torch.tensor(row, dtype=torch.int64), group=self.group)
            rows = table.view(world, self._length).tolist()
        else:
            rows = [row]
        if any(r[0] for r in rows):
            every: list[Any] = [problems]
            if world > 1:
                every = [None] * world
                dist.all_gather_object(every, problems, group=self.group)
            raise self._rejection(every)
        if any(r != rows[0] for r in rows[1:]):
            raise RankMismatch(self._disagreement(rows))
        return tuple(rows[0][1:])

    @staticmethod
    def _rejection(problems: list[list[str]]) -> Exception:
        if all(p == problems[0] for p in problems[1:]):
            on = f" (on all {len(problems)} ranks)" if len(problems) > 1 else ""
            return InputError("; ".join(problems[0]) + on)
        described = [f"rank {rank}: {'; '.join(p)}" for rank, p in enumerate(problems) if p]
        return RankMismatch("inputs rejected before any collective: " + "; ".join(described))

    def _disagreement(self, rows: list[list[int]]) -> str:
        lines = []
        offset = 1
        for spec in self.specs:
            if spec.placements is None:
                continue
            n = len(spec.global_shape)
            shapes = [tuple(r[offset:offset + n]) for r in rows]
            if len(set(shapes)) > 1:
                per_rank = ", ".join(f"rank {rank} {list(s)}" for rank, s in enumerate(shapes))
                lines.append(f"input {spec.name}: {per_rank}")
            offset += n
        return ("ranks disagree on the global shapes of their inputs (every rank must pass the same global "
                "inputs, or DTensors of them as ParallelModule.shard_inputs makes): " + "; ".join(lines))

    # -- 3. binding --------------------------------------------------------------------------------

    def _global_dims(self, sizes: Sequence[int]) -> list[tuple[InputSpec, int, sympy.Basic, int]]:
        dims, offset = [], 0
        for spec in self.specs:
            if spec.placements is None:
                continue
            for d, e in enumerate(spec.global_shape):
                dims.append((spec, d, e, sizes[offset + d]))
            offset += len(spec.global_shape)
        return dims

    def _bind(self, dims: list[tuple[InputSpec, int, sympy.Basic, int]]) -> dict[str, int]:
        from shapecore import evaluate

        values: dict[str, int] = {}
        for plain_only in (True, False):  # plain symbols first, then c*s + d with s still free
            for _spec, _d, e, n in dims:
                free = [x for x in e.free_symbols if x.name not in values]
                if len(free) != 1 or (plain_only and not e.is_Symbol):
                    continue
                form = self._linear(e, free[0])
                if form is None:
                    continue
                c, rest = (evaluate(part, values) if part.free_symbols else int(part) for part in form)
                if c != 0 and (n - rest) % c == 0:
                    values[free[0].name] = (n - rest) // c
        for spec, d, e, n in dims:
            if {x.name for x in e.free_symbols} <= set(values) and evaluate(e, values) == n:
                continue
            raise GuardViolation(
                f"input {spec.name} dim {d} has global size {n}, but the program was traced for {self._show(e)}"
                + (f" with {self._values(values)}" if values else ""),
                guard=f"{spec.name}.size()[{d}] == {self._show(e)}",
                values={self.names.get(k, k): v for k, v in values.items()})
        return values

    def _linear(self, e: sympy.Basic, symbol: sympy.Symbol) -> tuple[sympy.Basic, sympy.Basic] | None:
        """``(c, rest)`` with ``e == c·symbol + rest``, or None; memoized, as it runs at every call."""
        key = (e, symbol)
        if key not in self._linear_forms:
            poly = sympy.Poly(e, symbol) if e.is_polynomial(symbol) else None
            self._linear_forms[key] = tuple(poly.all_coeffs()) if poly is not None and poly.degree() == 1 else None  # type: ignore[assignment]
        return self._linear_forms[key]

    # -- 4. guards and 5. even splits --------------------------------------------------------------

    def _show(self, expr: sympy.Basic) -> str:
        from shapecore import int_symbol

        return str(expr.xreplace({int_symbol(k): int_symbol(v) for k, v in self.names.items()}))

    def _values(self, values: Mapping[str, int]) -> str:
        return ", ".join(f"{self.names.get(k, k)} = {v}" for k, v in sorted(values.items()))

    def _with_replaced(self, values: dict[str, int]) -> dict[str, int]:
        """``values`` with the symbols the trace replaced by expressions of bound ones (``s1 := 2*s0``)."""
        from shapecore import extend_assignment

        return extend_assignment(values, self.replacements)  # type: ignore[return-value]

    def _check_splits(self, dims: list[tuple[InputSpec, int, sympy.Basic, int]], values: dict[str, int]) -> None:
        for spec, d, e, n in dims:
            assert spec.placements is not None
            pieces = self.mesh.shard_factor(spec.placements, d)
            if n % pieces == 0:
                continue
            involved = {s.name for s in e.free_symbols}
            shown = {k: v for k, v in values.items() if k in involved}
            raise GuardViolation(
                f"input {spec.name} dim {d} has global size {n}" + (f" ({self._values(shown)})" if shown else "")
                + f", which does not split into {pieces} equal pieces ({format_placements(spec.placements)}); "
                f"pass a size divisible by {pieces}",
                guard=f"Eq(Mod({self._show(e)}, {pieces}), 0)",
                values={self.names.get(k, k): v for k, v in values.items()})

    def check(self, inputs: Sequence[Any]) -> dict[str, int]:
        """Global symbol values of this call (``inputs``: its positional arguments, global tensors or
        DTensors); raises InputError, RankMismatch or GuardViolation on every rank alike."""
        sizes = self._agree(inputs)
        passed = self._passed.get(sizes)
        if passed is not None:
            return dict(passed)
        dims = self._global_dims(sizes)
        values = self._bind(dims)
        guard = self._guards(values=self._with_replaced(values)) if self._guards.parameters else self._guards()
        if guard is not None:
            involved = {s.name for s in guard.free_symbols}
            shown = self._show(guard)
            raise GuardViolation(
                f"inputs break the guard {shown} that the plan relies on: "
                f"{self._values({k: v for k, v in values.items() if k in involved})}",
                guard=shown, values={self.names.get(k, k): v for k, v in values.items()})
        self._check_splits(dims, values)
        if len(self._passed) == _KEPT_SIZES:
            del self._passed[next(iter(self._passed))]  # the oldest
        self._passed[sizes] = dict(values)
        return values
