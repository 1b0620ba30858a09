"""The entry check: agree on the inputs across ranks, bind the symbols, check the guards.

Run at every call of a parallel program, before any of its collectives:

1. **Agreement** (the only communication): each rank encodes its inputs' structure and local
   shapes as one fixed-length int64 vector (its length is fixed by the trace, so even a rank
   with malformed inputs takes part), and one ``all_gather_single`` on the default group
   shares them. From then on every rank decides on the same table, so every rank raises the
   same error or none does.
2. **Binding**: a dim of global size ``e`` split into ``k`` pieces that holds ``n`` locally
   has global size ``k·n``; dims whose ``e`` is a symbol (or ``c·s + d``) bind it, and every
   dim is then checked against its ``e``.
3. **Guards**: everything a shapecore ShapeEnv holding the trace's contract (symbol ranges,
   torch's guards) and the plan's guards says inputs must satisfy (``produce_guards``),
   compiled once into straight-line Python (:func:`shapecore.compile_guards`), is checked at
   the bound values; the first condition broken raises :class:`GuardViolation` naming it (in
   the user's ``Dim`` names) and the values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from lowering.errors import GuardViolation, RankMismatch
from planner.placements import format_placements, shard_factor

__all__ = ["InputSpec", "EntryCheck"]

_OK, _COUNT, _NOT_TENSOR, _NDIM, _DTYPE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class InputSpec:
    """A user input of the program: its name, placements, global shape and dtype."""

    name: str
    placements: tuple[Any, ...] | None
    global_shape: tuple[sympy.Basic, ...]
    dtype: Any


class EntryCheck:
    """Checks one call's inputs on every rank; returns the global symbol values.

    ``env``: a shapecore ShapeEnv over the trace's symbols whose ``produce_guards`` lists what
    inputs must satisfy (the trace's contract and the plan's guards); ``names``: symbol name ->
    the name to show the user (their ``Dim`` name or the input dim it is read from).
    """

    def __init__(self, specs: Sequence[InputSpec], mesh_shape: Sequence[int], env: Any,
                 names: Mapping[str, str]) -> None:
        from shapecore import compile_guards

        self.specs = tuple(specs)
        self.mesh_shape = tuple(mesh_shape)
        self.replacements = {s.name: e for s, e in env.replacements.items()}
        contract = env.produce_guards({name: name for name in env.symbols})
        self._guards = compile_guards(contract, {name: f"values[{name!r}]" for name in env.symbols})
        self.names = dict(names)
        self._length = 2 + sum(len(s.global_shape) for s in self.specs if s.placements is not None)
        self._linear_forms: dict[tuple[sympy.Basic, sympy.Symbol], tuple[sympy.Basic, sympy.Basic] | None] = {}

    # -- 1. agreement ----------------------------------------------------------------------------

    def _encode(self, inputs: Sequence[Any]) -> list[int]:
        import torch

        if len(inputs) != len(self.specs):
            return [_COUNT, len(inputs)] + [0] * (self._length - 2)
        row = [_OK, 0]
        for i, (spec, value) in enumerate(zip(self.specs, inputs)):
            if spec.placements is None:
                continue
            if not isinstance(value, torch.Tensor):
                return [_NOT_TENSOR, i] + [0] * (self._length - 2)
            if value.dim() != len(spec.global_shape):
                return [_NDIM, i * 1000 + value.dim()] + [0] * (self._length - 2)
            if value.dtype != spec.dtype:
                return [_DTYPE, i] + [0] * (self._length - 2)
            row += list(value.shape)
        return row

    def _agree(self, inputs: Sequence[Any]) -> list[int]:
        """Every rank's encoded row, after one all-gather; raises RankMismatch (identically everywhere)."""
        import torch
        import torch.distributed as dist

        row = torch.tensor(self._encode(inputs), dtype=torch.int64)
        world = dist.get_world_size() if dist.is_initialized() else 1
        if world > 1:
            table = torch.empty(world * self._length, dtype=torch.int64)
            dist.all_gather_single(table, row)
            rows = table.view(world, self._length).tolist()
        else:
            rows = [row.tolist()]
        problems = [self._describe(rank, r) for rank, r in enumerate(rows) if r[0] != _OK]
        if problems:
            raise RankMismatch("inputs rejected before any collective: " + "; ".join(problems))
        if any(r != rows[0] for r in rows[1:]):
            raise RankMismatch(self._disagreement(rows))
        return rows[0][2:]

    def _describe(self, rank: int, row: list[int]) -> str:
        code, detail = row[0], row[1]
        if code == _COUNT:
            return f"rank {rank} passed {detail} inputs, the program takes {len(self.specs)}"
        if code == _NDIM:
            i, ndim = divmod(detail, 1000)
            return (f"rank {rank}: input {self.specs[i].name} has {ndim} dims, the program expects "
                    f"{len(self.specs[i].global_shape)}")
        spec = self.specs[detail]
        if code == _NOT_TENSOR:
            return f"rank {rank}: input {spec.name} is not a tensor"
        return f"rank {rank}: input {spec.name} has the wrong dtype (the program expects {spec.dtype})"

    def _disagreement(self, rows: list[list[int]]) -> str:
        lines = []
        offset = 2
        for spec in self.specs:
            if spec.placements is None:
                continue
            n = len(spec.global_shape)
            shapes = [tuple(r[offset:offset + n]) for r in rows]
            if len(set(shapes)) > 1:
                per_rank = ", ".join(f"rank {rank} {list(s)}" for rank, s in enumerate(shapes))
                lines.append(f"input {spec.name} ({format_placements(spec.placements)}): {per_rank}")
            offset += n
        return ("ranks disagree on their local input shapes (every rank must pass its own piece of the same "
                "global inputs, e.g. from ParallelModule.shard_inputs): " + "; ".join(lines))

    # -- 2. binding --------------------------------------------------------------------------------

    def _global_dims(self, local: list[int]) -> list[tuple[InputSpec, int, sympy.Basic, int]]:
        dims, offset = [], 0
        for spec in self.specs:
            if spec.placements is None:
                continue
            for d, e in enumerate(spec.global_shape):
                dims.append((spec, d, e, local[offset + d] * shard_factor(spec.placements, self.mesh_shape, d)))
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
            pieces = shard_factor(spec.placements, self.mesh_shape, d)
            split = f" ({pieces} local pieces of {n // pieces}, {format_placements(spec.placements)})" if pieces > 1 else ""
            raise GuardViolation(
                f"input {spec.name} dim {d} has global size {n}{split}, but the program was traced for {self._show(e)}"
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

    # -- 3. guards ---------------------------------------------------------------------------------

    def _show(self, expr: sympy.Basic) -> str:
        from shapecore import int_symbol

        return str(expr.xreplace({int_symbol(k): int_symbol(v) for k, v in self.names.items()}))

    def _values(self, values: Mapping[str, int]) -> str:
        return ", ".join(f"{self.names.get(k, k)} = {v}" for k, v in sorted(values.items()))

    def _with_replaced(self, values: dict[str, int]) -> dict[str, int]:
        """``values`` with the symbols the trace replaced by expressions of bound ones (``s1 := 2*s0``)."""
        from shapecore import evaluate

        full = dict(values)
        for name, expression in self.replacements.items():
            if name not in full and {s.name for s in expression.free_symbols} <= set(full):
                full[name] = evaluate(expression, full)
        return full

    def check(self, inputs: Sequence[Any]) -> dict[str, int]:
        """Global symbol values of this call; raises RankMismatch or GuardViolation on every rank alike."""
        values = self._bind(self._global_dims(self._agree(inputs)))
        guard = self._guards(values=self._with_replaced(values)) if self._guards.parameters else self._guards()
        if guard is not None:
            involved = {s.name for s in guard.free_symbols}
            shown = self._show(guard)
            raise GuardViolation(
                f"inputs break the guard {shown} that the plan relies on: "
                f"{self._values({k: v for k, v in values.items() if k in involved})}",
                guard=shown, values={self.names.get(k, k): v for k, v in values.items()})
        return values
