"""Tracing: one front end each (torch.export, the joint forward+backward graph, torch.compile,
make_fx), handed over to shapecore as a :class:`Traced`.

:func:`trace_export`, :func:`trace_compile` and :func:`trace_make_fx` run one front end and
return the FX graph (``meta["val"]`` symbolic fake tensors), torch's ShapeEnv, shapecore's
(:func:`~shapecore.torch.from_torch`), the sources and (export) the user's ``Dim`` names.

:func:`trace_for_planning` is the graph the planner plans and the lowering lowers: a
``torch.export`` trace (dynamic dims from ``dynamic_shapes`` only) decomposed to core ATen ops
except the composite ops the planner's built-in rules understand whole (:data:`KEEP_WHOLE`:
attention, normalizations, activations); or, for training, the joint forward+backward graph
(``aot_export_joint_with_descriptors``) traced once, straight from the model, over inputs made
symbolic as ``torch.export`` makes them (the same symbols, ranges, ``Dim`` names and
constraint checks), whose inputs and outputs carry descriptors (parameter, user input,
tangent; gradient, user output); a tied parameter is read through the input of its first
name, with one gradient. A run of repeated blocks (a decoder's layers) is traced for its first
few and the rest copied, when the model is checked to compute them alike
(:mod:`shapecore.torch.repeated`). torch's ShapeEnv is handed to shapecore after the trace, so
every guard is included.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import sympy

from shapecore.env import ShapeEnv
from shapecore.errors import ShapecoreError
from shapecore.torch.expressions import map_expr
from shapecore.torch.fake import graph_shape_env
from shapecore.torch.private import run_decompositions
from shapecore.torch.repeated import TRACED_BLOCKS, check_blocks, repeated_blocks, replicate, truncated
from shapecore.torch.shape_env import first_sources, from_torch, range_origins, source_name, torch_guards

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram
    from torch.fx import GraphModule
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

__all__ = ["Traced", "KEEP_WHOLE", "DataDependentBranchError", "backend_neutral", "trace_export", "trace_compile",
           "trace_make_fx", "trace_for_planning"]


class DataDependentBranchError(ValueError):
    """The model's forward branches on a value only the data decides (torch's
    ``GuardOnDataDependentSymNode``), named at the model's source line, with what to change."""


def _is_model_code(filename: str) -> bool:
    """Whether ``filename`` is the model's (not torch's, this project's, the standard library's or generated code)."""
    import importlib.util
    import os
    import sysconfig

    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)

    def under(root: str) -> bool:
        return path.startswith(os.path.realpath(root) + os.sep)

    paths = sysconfig.get_paths()
    if under(paths["stdlib"]) and not (under(paths["purelib"]) or under(paths["platlib"])):
        return False
    packages = (importlib.util.find_spec(name) for name in ("torch", "shapecore", "planner", "lowering"))
    return not any(under(root) for spec in packages if spec is not None for root in spec.submodule_search_locations or ())


_LIBRARY_BRANCHES = {  # a library file whose data-dependent branch its own release fixed: what to do instead
    ("transformers", "integrations", "moe.py"):
        "transformers before 5.23 computes a mixture of experts' grouped product backward on the CPU "
        "(grouped_mm_fallback) as a Python loop that branches on each expert's routed count: upgrade transformers to "
        "5.23 or later, where that backward is one custom op",
}
_GENERIC_ADVICE = (
    "Make the control flow independent of the data: a transformers mixture of experts takes "
    "experts_implementation=\"grouped_mm\" or \"batched_mm\" in its config (not \"eager\"); in your own code, state "
    "what always holds with torch._check(...) before the branch, or take it the same way for every size with "
    "torch.fx.experimental.symbolic_shapes.guard_or_false(...) (or guard_or_true)")


def _advice(filename: str) -> str:
    """What to change for a data-dependent branch in ``filename``."""
    import os

    parts = tuple(os.path.normpath(filename).split(os.sep))
    return next((advice for ending, advice in _LIBRARY_BRANCHES.items() if parts[-len(ending):] == ending),
                _GENERIC_ADVICE)


@contextlib.contextmanager
def _branches_named() -> Iterator[None]:
    """Turn torch's error for a branch on data-dependent values into :class:`DataDependentBranchError`."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        yield
    except GuardOnDataDependentSymNode as error:
        frames, tb = [], error.__traceback__
        while tb is not None:
            frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
            tb = tb.tb_next
        model = [f for f in frames if _is_model_code(f[0])]
        where = f"{model[-1][0]}:{model[-1][1]}" if model else "an unknown line of the model"
        line = linecache.getline(*model[-1]).strip() if model else ""
        condition = str(error.cond) if hasattr(error, "cond") else str(error).splitlines()[0]
        raise DataDependentBranchError(
            f"the forward branches on {condition}, a value only the data decides (a count of routed tokens, say), at "
            f"{where}" + (f": {line}" if line else "") + ". One trace cannot hold for every input there. "
            + _advice(model[-1][0] if model else "")
        ) from error


@dataclass(frozen=True)
class Traced:
    """One trace handed over to shapecore.

    ``graph_module`` is the FX graph whose ``meta["val"]`` are symbolic fake tensors (None when
    export failed and the failure was returned). ``torch_guards`` are torch's recorded guards
    mapped to shapecore, in order (``env.guards`` omits those the rest of the state implies).
    ``sources`` maps a symbol name to the first source torch knows it by (``L['x'].size()[0]``);
    ``range_origins`` to where torch set the two ends of its range (:func:`~shapecore.torch.shape_env.range_origins`).
    Export only: ``dims`` maps each user ``Dim`` name that is a single symbol to that symbol's
    name, ``dim_exprs`` every ``Dim`` name (derived ones such as ``8*k`` too) to its expression
    over symbols; ``exported`` is the ``ExportedProgram`` (None for a joint graph) and ``error``
    the text of the "Constraints violated" error when it was returned instead of raised.
    ``shared_layers`` (a training trace for planning): which blocks of a run of repeated ones were
    copied rather than traced, or why none were; '' when there is no run (:func:`trace_for_planning`).
    """

    graph_module: GraphModule | None
    torch_env: TorchShapeEnv
    env: ShapeEnv
    torch_guards: list[sympy.Basic]
    sources: dict[str, str]
    range_origins: dict[str, tuple[str, str]] = field(default_factory=dict)
    dims: dict[str, str] = field(default_factory=dict)
    dim_exprs: dict[str, sympy.Basic] = field(default_factory=dict)
    exported: ExportedProgram | None = None
    error: str | None = None
    shared_layers: str = ""


def _trace_shape_env(gm: GraphModule) -> TorchShapeEnv:
    shape_env = graph_shape_env(gm)
    if shape_env is None:
        raise ShapecoreError(
            "the traced graph has no symbolic fake tensors: nothing was traced with dynamic shapes "
            "(mark a dimension dynamic, or pass dynamic_shapes / tracing_mode='symbolic')"
        )
    return shape_env


def _traced(gm: GraphModule | None, shape_env: TorchShapeEnv, timeout_ms: int, **extra: Any) -> Traced:
    return Traced(
        graph_module=gm,
        torch_env=shape_env,
        env=from_torch(shape_env, timeout_ms=timeout_ms),
        torch_guards=torch_guards(shape_env),
        sources=first_sources(shape_env),
        range_origins=range_origins(shape_env),
        **extra,
    )


# -- torch.export ---------------------------------------------------------------------------------


def _user_dims(dynamic_shapes: Any) -> list[Any]:
    """Every ``torch.export.Dim`` in a ``dynamic_shapes`` spec, roots of derived dims included."""
    from torch.export import Dim

    found: list[Any] = []

    def walk(spec: Any) -> None:
        if isinstance(spec, Dim):
            found.append(spec)
            root = getattr(spec, "root", None)
            if root is not None:
                walk(root)
        elif isinstance(spec, Mapping):
            for value in spec.values():
                walk(value)
        elif isinstance(spec, (list, tuple)):
            for value in spec:
                walk(value)

    walk(dynamic_shapes)
    return found


def _resolve(shape_env: TorchShapeEnv, symbol: sympy.Symbol) -> sympy.Basic:
    """``symbol`` through torch's replacements, as a shapecore expression."""
    expr: sympy.Basic = symbol
    for _ in range(len(shape_env.replacements) + 1):
        replaced = expr.xreplace(shape_env.replacements)
        if replaced == expr:
            break
        expr = replaced
    return map_expr(expr)


def _dim_expressions(shape_env: TorchShapeEnv, dynamic_shapes: Any) -> dict[str, sympy.Basic]:
    names = {d.__name__ for d in _user_dims(dynamic_shapes)}
    debug_names = shape_env.source_name_to_debug_name
    result: dict[str, sympy.Basic] = {}
    for symbol, sources in shape_env.var_to_sources.items():
        for source in sources:
            name = source_name(source)
            dim = name if name in names else debug_names.get(name)
            if dim in names and dim not in result:
                result[dim] = _resolve(shape_env, symbol)
    return result


_EXPORT_FAILURE_MODES = ("raise", "return")


def _constraint_violation(exc: BaseException) -> tuple[BaseException, TorchShapeEnv] | None:
    """The ConstraintViolationError behind ``exc`` and the ShapeEnv it was raised over, if any.

    torch raises it from ``produce_guards`` and keeps no reference to the ShapeEnv, so the env
    is found among the locals of the failing frames (innermost first).
    """
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for violation in chain:
        if not isinstance(violation, ConstraintViolationError):
            continue
        frames = []
        tb = violation.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in frame.f_locals.values():
                if isinstance(value, TorchShapeEnv):
                    return violation, value
    return None


def _export(model: torch.nn.Module, args: tuple[Any, ...], *, dynamic_shapes: Any, kwargs: Mapping[str, Any] | None = None,
            strict: bool = False) -> ExportedProgram:
    import torch

    return torch.export.export(model, args, kwargs=dict(kwargs or {}), dynamic_shapes=dynamic_shapes, strict=strict)


def trace_export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    *,
    dynamic_shapes: Any,
    kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    on_constraint_violation: Literal["raise", "return"] = "raise",
    timeout_ms: int = 1000,
) -> Traced:
    """``torch.export.export(model, args, dynamic_shapes=...)`` handed over to shapecore.

    ``dims``/``dim_exprs`` of the result name the user's ``Dim`` objects (``Dim("batch")``,
    ``8*Dim("k")``). When export fails with "Constraints violated" (torch's guards narrow a
    ``Dim``'s range), ``on_constraint_violation="return"`` returns the trace anyway, with
    ``graph_module=None``, ``exported=None``, ``error`` set and the guards torch recorded, so
    shapecore can decide whether they really narrow the range; ``"raise"`` re-raises.
    """
    if on_constraint_violation not in _EXPORT_FAILURE_MODES:
        raise ValueError(f"on_constraint_violation must be one of {_EXPORT_FAILURE_MODES}, got {on_constraint_violation!r}")
    try:
        exported = _export(model, args, dynamic_shapes=dynamic_shapes, kwargs=kwargs, strict=strict)
    except Exception as exc:
        found = _constraint_violation(exc) if on_constraint_violation == "return" else None
        if found is None:
            raise
        violation, shape_env = found
        return _export_traced(None, shape_env, dynamic_shapes, timeout_ms, exported=None, error=str(violation))
    gm = exported.graph_module
    return _export_traced(gm, _trace_shape_env(gm), dynamic_shapes, timeout_ms, exported=exported)


def _dims(dim_exprs: Mapping[str, sympy.Basic]) -> dict[str, str]:
    return {name: expr.name for name, expr in dim_exprs.items() if isinstance(expr, sympy.Symbol)}


def _export_traced(gm: GraphModule | None, shape_env: TorchShapeEnv, dynamic_shapes: Any, timeout_ms: int,
                   **extra: Any) -> Traced:
    dim_exprs = _dim_expressions(shape_env, dynamic_shapes)
    return _traced(gm, shape_env, timeout_ms, dims=_dims(dim_exprs), dim_exprs=dim_exprs, **extra)


# -- the planner's trace: export decomposed, or the joint forward+backward graph -----------------------

KEEP_WHOLE = (
    "scaled_dot_product_attention.default",
    "rms_norm.default",
    "layer_norm.default",
    "silu.default",
    "gelu.default",
)
"""ATen ops :func:`trace_for_planning` does not decompose: the planner's built-in rules shard them whole."""


def _decompositions() -> dict[Any, Any]:
    import torch

    table = torch.export.default_decompositions()
    for name in KEEP_WHOLE:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        table.pop(op, None)
    return table


@contextlib.contextmanager
def _recording_module_stack(model: torch.nn.Module) -> Iterator[None]:
    """Every node traced while ``model``'s submodules run records them in ``meta["nn_module_stack"]``
    (``{key: (qualified name, class)}``, outermost first), as ``torch.export`` records them; the
    joint trace copies a forward node's stack to its backward nodes (``fwd_nn_module_stack``)."""
    import torch.fx.traceback as fx_traceback
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    names = {id(module): name for name, module in model.named_modules()}

    def enter(module: torch.nn.Module, args: Any) -> None:
        name = names.get(id(module))
        if name is not None:
            stack = dict(fx_traceback.current_meta.get("nn_module_stack") or {})
            stack[f"L__self__{name}"] = (name, f"{type(module).__module__}.{type(module).__qualname__}")
            fx_traceback.current_meta["nn_module_stack"] = stack

    def leave(module: torch.nn.Module, args: Any, output: Any) -> None:
        name = names.get(id(module))
        if name is not None:
            stack = dict(fx_traceback.current_meta.get("nn_module_stack") or {})
            stack.pop(f"L__self__{name}", None)
            if stack:
                fx_traceback.current_meta["nn_module_stack"] = stack
            else:
                fx_traceback.current_meta.pop("nn_module_stack", None)

    hooks = [register_module_forward_pre_hook(enter), register_module_forward_hook(leave)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        fx_traceback.current_meta.pop("nn_module_stack", None)


@contextlib.contextmanager
def backend_neutral() -> Iterator[None]:
    """CPU convolution backends (mkldnn, NNPACK) off while tracing or compiling.

    Fake convolution asks which backend the real one would take, only to pick its output's
    memory format, and that choice reads the batch size (NNPACK wants at least 16): the
    joint trace of a conv net at batch 8 would carry the guard ``s0 < 16`` and its plan
    could serve no larger batch (nor could a program compiled at that batch). The graph's
    ops are the same either way; at run time each call still picks its backend.
    """
    import torch

    mkldnn = torch.backends.mkldnn.flags(enabled=False, deterministic=None, allow_tf32=None, fp32_precision=None)
    with mkldnn, torch.backends.nnpack.flags(enabled=False):
        yield


def _read_tied_parameters_once(gm: GraphModule, model: torch.nn.Module) -> None:
    """Make ``gm`` (a joint graph) read each tied parameter through the input of its first name,
    with one gradient there: the sum of the gradients of all its names.

    AOT lifts every name of a tied parameter as its own input and differentiates each apart
    (GPT-2's ``lm_head.weight`` is ``transformer.wte.weight``: the head's gradient arrives at
    one input, the embedding's at the other), while one device accumulates both into the one
    tensor. The other names' inputs stay, unread (as ``torch.export`` leaves them), their
    gradients None.
    """
    import torch

    first: dict[int, str] = {}
    tied = {name: first.setdefault(id(p), name) for name, p in model.named_parameters(remove_duplicate=False)}
    if all(name == own for name, own in tied.items()):
        return  # nothing tied: the graph stays as traced (recompiling a large graph costs seconds)
    inputs = {getattr(n.meta.get("desc"), "target", None): n for n in gm.graph.find_nodes(op="placeholder")}
    output = gm.graph.output_node()
    leaves = list(output.args[0])
    grads = {getattr(getattr(d, "grad_of", None), "target", None): k for k, d in enumerate(output.meta.get("desc", ()))}
    for name, own in tied.items():
        if name == own or name not in inputs or own not in inputs:
            continue
        inputs[name].replace_all_uses_with(inputs[own])
        other = grads.get(name)
        if other is None or leaves[other] is None:
            continue
        into = grads[own]  # the same tensor: a gradient for one name is a gradient for every name
        if leaves[into] is None:
            leaves[into] = leaves[other]
        else:
            with gm.graph.inserting_before(output):
                total = gm.graph.call_function(torch.ops.aten.add.Tensor, (leaves[into], leaves[other]))
            total.meta["val"] = leaves[into].meta["val"] + leaves[other].meta["val"]
            leaves[into] = total
        leaves[other] = None
    output.args = (leaves, *output.args[1:])
    gm.recompile()


def _joint(model: torch.nn.Module, args: tuple[Any, ...], dynamic_shapes: Any,
           share_layers: bool | None) -> tuple[GraphModule, TorchShapeEnv, str]:
    """The joint graph, its ShapeEnv, and which blocks of a run of repeated ones were copied rather
    than traced, or why none were ('' when there is no such run or ``share_layers`` is False): the
    run traced once when :mod:`shapecore.torch.repeated` finds it and its check passes, else the
    whole model, with a warning when ``share_layers`` is True."""
    from shapecore.torch.private import joint_graph_with_export_shapes, set_joint_calling_convention

    run = repeated_blocks(model) if share_layers is not False else None
    shared = ""
    if run is None and share_layers:
        warnings.warn(f"share_layers: traced whole: {type(model).__name__} has no nn.ModuleList with {TRACED_BLOCKS + 2} "
                      f"or more consecutive blocks of one structure, none of whose parameters is used elsewhere", stacklevel=3)
    elif run is not None:
        why = check_blocks(model, args, run)
        if why is None:
            with truncated(run), _recording_module_stack(model):
                gm, shape_env = joint_graph_with_export_shapes(model, args, {}, dynamic_shapes)
            made = replicate(gm, run.path, run.count, functools.partial(set_joint_calling_convention, like=gm.graph),
                             start=run.start)
            if not isinstance(made, str):
                return made, shape_env, run.shared()
            why = made
        shared = f"none ({run.path}: {why})"
        if share_layers:
            warnings.warn(f"share_layers: traced whole: {run.path}: {why}", stacklevel=3)
    with _recording_module_stack(model):
        gm, shape_env = joint_graph_with_export_shapes(model, args, {}, dynamic_shapes)
    return gm, shape_env, shared


def trace_for_planning(model: torch.nn.Module, example_inputs: Sequence[Any], *, dynamic_shapes: Any,
                       training: bool = False, share_layers: bool | None = None) -> Traced:
    """The graph the planner plans and the lowering lowers (see the module docstring).

    ``graph_module`` is the decomposed export graph, ``exported`` its ``ExportedProgram`` (whose
    signature names the parameters); with ``training=True`` the joint forward+backward graph,
    and ``exported`` is None. ``dim_exprs`` name the ``Dim`` objects of ``dynamic_shapes``.
    A training trace takes a run of repeated blocks (a decoder's layers) for its first
    :data:`~shapecore.torch.repeated.TRACED_BLOCKS` and copies the rest, when the model is checked
    to compute every block as the one copied (:mod:`shapecore.torch.repeated`): the same graph, in a
    fraction of the time on a deep model; ``shared_layers`` says which blocks were copied, or why
    none of the run were ('' when the model has none). ``share_layers=False`` traces every block;
    ``True`` warns when no block could be shared. The forward trace is always taken whole
    (``share_layers=True`` is refused there). A forward that branches on a data-dependent value
    raises :class:`DataDependentBranchError`.
    """
    if share_layers and not training:
        raise ValueError("share_layers=True shares the blocks of the training (joint) trace: pass training=True too")
    shared = ""
    with backend_neutral(), _branches_named():
        if training:
            gm, shape_env, shared = _joint(model, tuple(example_inputs), dynamic_shapes, share_layers)
            _read_tied_parameters_once(gm, model)
            planned = None
        else:
            exported = _export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
            shape_env = _trace_shape_env(exported.graph_module)
            planned = run_decompositions(exported, _decompositions())
            gm = planned.graph_module
    dim_exprs = _dim_expressions(shape_env, dynamic_shapes)
    return _traced(gm, shape_env, 1000, dims=_dims(dim_exprs), dim_exprs=dim_exprs, exported=planned,
                   shared_layers=shared)


# -- torch.compile and make_fx ------------------------------------------------------------------------


def trace_compile(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    dynamic: bool | None = True,
    fullgraph: bool = True,
    timeout_ms: int = 1000,
) -> Traced:
    """Run ``torch.compile(fn, dynamic=dynamic, fullgraph=fullgraph)(*args)`` and hand over its shapes.

    A backend records the ATen forward graph AOTAutograd produces (the first, if Dynamo splits
    ``fn`` into several graphs) and Dynamo's ShapeEnv; the
    ShapeEnv is copied after the call returns, so it holds every guard of the compile. Use
    ``dynamic=None`` with ``torch._dynamo.mark_dynamic(x, dim, min=..., max=...)`` on the inputs to
    choose the dynamic dimensions. Each call compiles afresh (a new backend misses Dynamo's cache),
    but Dynamo's recompile limit per function still applies.
    """
    import torch

    from shapecore.torch.private import aot_autograd

    graphs: list[GraphModule] = []

    def forward_compiler(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        if not graphs:
            graphs.append(gm)
        return gm.forward

    def backward_compiler(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return gm.forward

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=fullgraph)(*args)
    if not graphs:
        raise ShapecoreError(
            f"torch.compile produced no graph for {getattr(fn, '__name__', fn)!r}: it has no tensor operations, "
            f"or Dynamo hit its recompile limit for it (torch._dynamo.reset() clears Dynamo's caches)"
        )
    gm = graphs[0]
    return _traced(gm, _trace_shape_env(gm), timeout_ms)


def trace_make_fx(fn: Callable[..., Any], args: tuple[Any, ...], *, timeout_ms: int = 1000) -> Traced:
    """``make_fx(fn, tracing_mode="symbolic")(*args)`` handed over to shapecore.

    Every input dimension becomes a symbol (duck-sized: equal example sizes share one), and
    tensor inputs of one element read with ``.item()`` give backed symbols sourced ``inputN.item()``.
    Tensors ``fn`` closes over (a module's parameters) are allowed and become graph constants.
    """
    from shapecore.torch.private import make_fx_over_real_tensors

    gm = make_fx_over_real_tensors(fn)(*args)
    return _traced(gm, _trace_shape_env(gm), timeout_ms)
