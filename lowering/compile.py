"""Inductor compile of a :class:`~lowering.lower.LocalProgram`, and the conditions it relies on.

``compile_program(program)`` hands the local graph and its example inputs (the local symbols
as SymInts of the program's own ShapeEnv, the local tensors as fake tensors whose sizes are
polynomials in them) straight to Inductor's ``compile_fx``: no Dynamo, so nothing re-derives
the shapes and the only symbols Inductor sees are the local ones.

What the compiled code assumes is read back from that ShapeEnv afterwards: each symbol's
range (backed symbols are assumed ``>= 2``) and every guard recorded while tracing and
compiling (Inductor guards on size hints, e.g. to pick a reduction strategy), except those
shapecore proves from the ranges alone. They are returned as
:attr:`CompiledProgram.guards`, over the local symbol names; the caller checks them on every
call and compiles again when they fail (Dynamo would do the same through its guards).
``values=`` compiles a program specialized to fixed local symbol values instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from lowering.lower import LocalProgram

__all__ = ["CompiledProgram", "compile_program"]


@dataclass
class CompiledProgram:
    """A compiled local program: ``run(symbol_values, tensors)`` returns the flat outputs.

    ``guards`` (over the local symbol names) must hold for ``run`` to be valid; a program
    specialized to ``values`` has the guards ``Eq(b, value)``.
    """

    run: Callable[[Sequence[int], Sequence[Any]], list[Any]]
    guards: tuple[sympy.Basic, ...]
    seconds: float
    values: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        from shapecore import compile_guards

        names = sorted({s.name for guard in self.guards for s in guard.free_symbols})
        self._check = compile_guards(self.guards, {name: f"values[{name!r}]" for name in names})

    def first_broken(self, values: Mapping[str, int]) -> sympy.Basic | None:
        """The first guard that ``values`` (local symbol name -> int) break, or None when all hold."""
        return self._check(values=values) if self._check.parameters else self._check()


def _assumptions(program: LocalProgram) -> tuple[sympy.Basic, ...]:
    """Ranges of the local symbols, then the recorded guards the ranges do not already imply."""
    from shapecore import int_symbol, prove
    from shapecore.torch import symbol_ranges, torch_guards

    names = program.torch_symbols.names  # local ShapeEnv symbol name -> local symbol name (s51 -> b0)
    shape_env = program.torch_symbols.shape_env
    rename = {int_symbol(t): int_symbol(b) for t, b in names.items()}
    ranges = {names[t]: r for t, r in symbol_ranges(shape_env).items() if t in names}
    found: list[sympy.Basic] = []
    for name, (lo, hi) in sorted(ranges.items()):
        if lo is not None:
            found.append(sympy.Ge(int_symbol(name), lo))
        if hi is not None:
            found.append(sympy.Le(int_symbol(name), hi))
    for guard in torch_guards(shape_env):
        claim = guard.xreplace(rename)
        if not prove(claim, ranges=ranges).proved:
            found.append(claim)
    return tuple(dict.fromkeys(found))


def _static_inputs(program: LocalProgram, values: Mapping[str, int]) -> list[Any]:
    import torch

    from shapecore import evaluate
    from shapecore.torch.private import FakeTensorMode

    with FakeTensorMode():
        tensors = [torch.empty([int(evaluate(e, values)) for e in i.local_shape], dtype=i.dtype) for i in program.inputs]
        coordinate = torch.empty(program.plan.mesh.ndim, dtype=torch.int64)
    return [values[s.name] for s in program.symbols] + tensors + [coordinate]


def compile_program(program: LocalProgram, *, values: Mapping[str, int] | None = None) -> CompiledProgram:
    """Compile ``program`` with Inductor: dynamic in the local symbols, or specialized to ``values``."""
    from shapecore import int_symbol
    from shapecore.torch.private import compile_fx

    start = time.perf_counter()
    if values is None:
        compiled = compile_fx(program.graph_module, list(program.example_inputs))
        guards = _assumptions(program)
    else:
        compiled = compile_fx(program.graph_module, _static_inputs(program, values))
        guards = tuple(sympy.Eq(int_symbol(name), value) for name, value in sorted(values.items()))
    seconds = time.perf_counter() - start

    coordinate = program.coordinate

    def run(symbol_values: Sequence[int], tensors: Sequence[Any]) -> list[Any]:
        return list(compiled(*symbol_values, *tensors, coordinate))

    return CompiledProgram(run, guards, seconds, dict(values) if values is not None else None)

