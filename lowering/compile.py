"""Inductor compile of a :class:`~lowering.lower.LocalProgram`, and the conditions it relies on.

``compile_program(program)`` hands the local graph and its example inputs (the local symbols
as SymInts of the program's own ShapeEnv, the local tensors as fake tensors whose sizes are
polynomials in them) straight to Inductor's ``compile_fx``: no Dynamo, so nothing re-derives
the shapes and the only symbols Inductor sees are the local ones.

Inductor compiles size-obliviously (``backed_size_oblivious``, as ``torch.export`` traces): a
choice it makes only for speed or precision at some sizes, asked of a local size that the
ranges do not decide, takes the general code instead of guarding on the example's size (its
CPU sum's chunked accumulation above 4096 elements guarded ``b0 <= 4096`` at a small example
and the converse at a large one, so one side of a range of batch sizes compiled again).
Independent all-reduces on one group, such as the gradients of replicated weights, are
bucketed into one (Inductor's ``bucket_all_reduces_fx``), as DDP buckets them: one collective's
latency per backward instead of one per weight. A graph with a ``cat`` whose size along its dim
is data-dependent (per-expert slices of routed tokens joined again) is compiled with Inductor's
pointwise cat: its default on the CPU, a destination buffer the pieces are written into, is
allocated before the slices' sizes are computed, and the compiled code fails with
``UnboundLocalError`` (pytorch/pytorch#191445, open; seen on 2.13).

What the compiled code assumes is read back from that ShapeEnv afterwards: each symbol's
range (backed symbols are assumed ``>= 2``) and every guard recorded while tracing and
compiling, except those shapecore proves from the ranges alone. They are returned as
:attr:`CompiledProgram.guards`, over the local symbol names; the caller checks them on every
call and compiles again when they fail (Dynamo would do the same through its guards).
``values=`` compiles a program specialized to fixed local symbol values instead.

A training program comes :func:`~lowering.partition.partition`-ed: its forward and its
backward are compiled (each once, over the same symbols, so one set of guards covers both);
:attr:`CompiledProgram.run` runs the forward, :attr:`CompiledProgram.backward` the backward.
The backward is compiled for the strides that Inductor reports its compiled forward returns
each saved value with, as AOTAutograd compiles a backward: they may differ from the graph's
(Inductor's decompositions and layout choices), and compiled code checks its inputs' strides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from lowering.errors import LoweringError
from lowering.lower import LocalProgram
from lowering.partition import Partitioned, example_values

__all__ = ["CompiledProgram", "compile_program"]


@dataclass
class CompiledProgram:
    """A compiled local program: ``run(symbol_values, tensors)`` returns the flat outputs.

    ``guards`` (over the local symbol names) must hold for ``run`` to be valid; a program
    specialized to ``values`` has the guards ``Eq(b, value)``. A partitioned program's ``run``
    is its forward (user outputs, then saved values) and ``backward(inputs)`` its backward.
    """

    run: Callable[[Sequence[int], Sequence[Any]], list[Any]]
    guards: tuple[sympy.Basic, ...]
    seconds: float
    values: Mapping[str, int] | None = None
    backward: Callable[[Sequence[Any]], list[Any]] | None = None

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


def _at(program: LocalProgram, values: Mapping[str, int], example: Sequence[Any]) -> list[Any]:
    """``example`` (a graph's traced inputs) with every local symbol set to its value in ``values``:
    ints for SymInts, fake tensors of the evaluated sizes and strides for tensors."""
    import torch

    from shapecore.torch.private import FakeTensorMode

    names = program.torch_symbols.names

    def number(n: Any) -> int:
        if not isinstance(n, torch.SymInt):
            return int(n)
        expr = n.node.expr
        return int(expr.xreplace({s: values[names[s.name]] for s in expr.free_symbols}))

    with FakeTensorMode():
        return [torch.empty_strided([number(n) for n in x.shape], [number(n) for n in x.stride()], dtype=x.dtype,
                                    device=x.device) if isinstance(x, torch.Tensor) else number(x) for x in example]


def _saved_as_returned(partitioned: Partitioned, forward_strides: Sequence[Any]) -> list[Any]:
    """The backward program's example inputs, each saved value with the strides that the compiled
    forward (``forward_strides``: per output of its compiled graph) returns it with.

    Inductor may return a forward output in other strides than the graph's, and a compiled
    program checks its inputs' strides: its decompositions change them (``cat`` of a tensor and
    an empty one becomes a ``clone`` that keeps its operand's layout, a transposed view in
    Phi-3's attention) and it may choose an output's layout. AOTAutograd compiles a backward for
    the strides the compiled forward reports likewise."""
    import torch

    from shapecore.torch.private import detect_fake_mode

    example = example_values(partitioned.backward)
    outputs = len(partitioned.forward.graph.output_node().args[0])
    if len(forward_strides) < outputs:
        raise LoweringError(f"Inductor's compiled forward returns {len(forward_strides)} values for the forward "
                            f"program's {outputs} outputs; the backward cannot be compiled for its saved values")
    with detect_fake_mode(example):
        for i, (kind, k) in enumerate(partitioned.backward_inputs):
            strides = forward_strides[partitioned.user_outputs + k] if kind == "saved" else None
            value = example[i]
            if strides is not None and isinstance(value, torch.Tensor):
                example[i] = torch.empty_strided(value.shape, strides, dtype=value.dtype, device=value.device)
    return example


def _cats_data_dependent_size(gm: Any) -> bool:
    """Whether a ``cat`` in ``gm`` has a data-dependent size along the dim it joins."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cat.default):
        value = node.meta.get("val")
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if isinstance(value, torch.Tensor) and free_unbacked_symbols(value.shape[dim]):
            return True
    return False


def compile_program(program: LocalProgram, *, values: Mapping[str, int] | None = None,
                    partitioned: Partitioned | None = None) -> CompiledProgram:
    """Compile ``program`` with Inductor (its forward and backward when ``partitioned``): dynamic in
    the local symbols, or specialized to ``values``."""
    from shapecore import int_symbol
    from shapecore.torch import backend_neutral
    from shapecore.torch.private import (compile_fx, functorch_config, inductor_config, inner_compile_reporting_strides,
                                         symbolic_shapes_config)

    def compiled(gm: Any, example: Sequence[Any], **options: Any) -> Any:
        # no guard from a convolution backend's choice (see backend_neutral) nor from a size hint; the
        # all-reduces bucketed (see the module docstring)
        with backend_neutral(), symbolic_shapes_config.patch(backed_size_oblivious=True), \
                inductor_config.patch(bucket_all_reduces_fx="all", force_pointwise_cat=_cats_data_dependent_size(gm)):
            return compile_fx(gm, list(example) if values is None else _at(program, values, example), **options)

    start = time.perf_counter()
    if partitioned is None:
        forward, backward = compiled(program.graph_module, program.example_inputs), None
    else:
        reports: list[Any] = []
        with functorch_config.patch(enable_autograd_cache=False):  # a hit of AOTAutograd's cache skips the report
            forward = compiled(partitioned.forward, example_values(partitioned.forward),
                               inner_compile=inner_compile_reporting_strides(reports))
        backward = compiled(partitioned.backward, _saved_as_returned(partitioned, reports[0]))
    if values is None:
        guards = _assumptions(program)
    else:
        guards = tuple(sympy.Eq(int_symbol(name), value) for name, value in sorted(values.items()))
    seconds = time.perf_counter() - start

    coordinate = program.coordinate

    def run(symbol_values: Sequence[int], tensors: Sequence[Any]) -> list[Any]:
        return list(forward(*symbol_values, *tensors, coordinate))

    def run_backward(inputs: Sequence[Any]) -> list[Any]:
        return list(backward(*inputs))

    return CompiledProgram(run, guards, seconds, dict(values) if values is not None else None,
                           None if backward is None else run_backward)
