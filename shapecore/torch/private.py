"""Every private torch name the project uses, and every name that differs between the torch
releases it supports: the one place to check on an upgrade.

Checked against each release in :data:`CHECKED_TORCH_VERSIONS` (``pyproject.toml`` admits
their minor versions, ``torch>=2.11,<2.16``). A name is private when any part of its path
starts with an underscore: a module (``torch._inductor``), a class or function
(``_ShardingPlaceholder``), an attribute (``op._schema``) or a keyword argument
(``_init_backend=``). No module of ``shapecore``, ``planner``, ``lowering`` or ``bench`` uses one
except through this module (``tests/shapecore/torch/test_private.py`` checks the source).

Public names that differ between those releases have one function each below, which uses
what the installed torch has (by looking, not by its version string); no other module uses the
names in :data:`VERSIONED` (checked likewise):

* functional collectives (``torch.distributed._functional_collectives``): ``all_gather_single``
  and ``reduce_scatter_single`` are new in 2.13; 2.11 and 2.12 have ``all_gather_tensor`` and
  ``reduce_scatter_tensor``, which 2.13 keeps, deprecated (a ``FutureWarning`` outside a
  compile). 2.11's ``all_gather_tensor`` refuses a non-contiguous input; 2.12 dropped that check.
* ``torch.distributed``: ``all_gather_single`` and ``reduce_scatter_single`` are new in 2.13;
  2.11 and 2.12 have ``all_gather_into_tensor`` and ``reduce_scatter_tensor``, which 2.13
  keeps, deprecated (a ``FutureWarning``).
* DTensor's whole-mesh view rules (``aten.view``, ``aten._unsafe_view``) raise at the first
  input placement they cannot view without redistribution, refusing every other one with it:
  through 2.11 at a flattened dim that is sharded after the first one, 2.12 on at one that does
  not split evenly. :func:`whole_mesh_strategies` asks such a rule about each placement alone.
* ``ExportedProgram.run_decompositions`` through 2.13 warns ``isinstance(treespec, LeafSpec) is
  deprecated`` (a ``FutureWarning`` from its own deep copy of the program's call graph, about
  torch's own pytree internals; 2.14 no longer): :func:`run_decompositions` hides that warning alone.

Importing this module imports nothing from torch: each name in :data:`NAMES` is resolved on
first use (``from shapecore.torch.private import tree_flatten``), each function below imports
what it needs when called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "CHECKED_TORCH_VERSIONS",
    "NAMES",
    "VERSIONED",
    "all_gather_single",
    "dist_all_gather_single",
    "dist_reduce_scatter_single",
    "device_mesh_without_process_group",
    "dtensor_placed_like",
    "dtensor_local",
    "dtensor_redistribute_logger",
    "evaluate_on_symints",
    "joint_graph_with_export_shapes",
    "set_joint_calling_convention",
    "make_fx_over_real_tensors",
    "inner_compile_reporting_strides",
    "op_schema",
    "reduce_scatter_single",
    "register_process_group",
    "run_decompositions",
    "sharding_propagator",
    "tensor_tables",
    "warm_up_inductor",
    "whole_mesh_strategies",
]

CHECKED_TORCH_VERSIONS = ("2.11.0", "2.12.0", "2.13.0", "2.14.1", "2.15.0")
"""The torch releases every name here was checked against: each resolves on each release."""

VERSIONED = ("all_gather_single", "all_gather_tensor", "reduce_scatter_single", "reduce_scatter_tensor",
             "all_gather_into_tensor", "run_decompositions")
"""torch's names that some supported release lacks or deprecates: used only through the functions below."""

NAMES: dict[str, tuple[str, str | None, str]] = {
    # name: (module, attribute or None for the module itself, what the project uses it for)
    # -- symbolic expressions
    "sympy_functions": ("torch.utils._sympy.functions", None,
                        "torch's sympy classes (FloorDiv, Mod, PythonMod, …) that its guards are made of"),
    "int_oo": ("torch.utils._sympy.numbers", "int_oo", "torch's integer infinity, the open end of a symbol's range"),
    # -- fake tensors and tracing
    "check": ("torch", "_check", "a condition on sizes that traced code asserts at run time (uneven pieces' bounds)"),
    "detect_fake_mode": ("torch._guards", "detect_fake_mode", "the fake mode (and so the ShapeEnv) of traced values"),
    "FakeTensorMode": ("torch._subclasses.fake_tensor", "FakeTensorMode",
                       "fake tensors for the local replay and for Inductor's example inputs"),
    "ConstantSource": ("torch._dynamo.source", "ConstantSource", "the source of a symbol created by hand, by name"),
    "LocalSource": ("torch._dynamo.source", "LocalSource", "a symbol sourced like a Dynamo local (bench's torch peer)"),
    "aot_autograd": ("torch._dynamo.backends.common", "aot_autograd",
                     "a torch.compile backend that sees AOTAutograd's ATen graphs (trace_compile)"),
    "aot_export_joint_with_descriptors": ("torch._functorch.aot_autograd", "aot_export_joint_with_descriptors",
                                          "the joint forward+backward graph, inputs and outputs described"),
    "default_partition": ("torch._functorch.partitioners", "default_partition",
                          "a lowered joint graph split into forward and backward programs (saving, not recomputing)"),
    "OpOverload": ("torch._ops", "OpOverload", "the class of an ATen operator overload (a node's target)"),
    "compiling_state_context": ("torch._export.utils", "_compiling_state_context",
                                "export's compiling state around a run on the meta device that must take the "
                                "trace's paths (shapecore.torch.repeated.check_blocks)"),
    # -- pytrees (the inputs and outputs of a call)
    "tree_flatten": ("torch.utils._pytree", "tree_flatten", "a call's inputs or outputs as leaves and a spec"),
    "tree_unflatten": ("torch.utils._pytree", "tree_unflatten", "leaves back into a call's structure"),
    "tree_structure": ("torch.utils._pytree", "tree_structure", "the spec of a call's inputs, to compare calls"),
    "tree_leaves": ("torch.utils._pytree", "tree_leaves", "a call's inputs as leaves"),
    "tree_map": ("torch.utils._pytree", "tree_map", "a call's example inputs moved to the meta device"),
    "tree_flatten_with_path": ("torch.utils._pytree", "tree_flatten_with_path", "leaves with their paths, to name them"),
    "keystr": ("torch.utils._pytree", "keystr", "a leaf's path as text (``[0]['x']``)"),
    # -- DTensor's sharding rules (planner.strategies.dtensor)
    "ShardingPlaceholder": ("torch.distributed.tensor._ops.single_dim_strategy", "_ShardingPlaceholder",
                            "``Shard(d)`` in a single-mesh-dim strategy"),
    "DTensorSpec": ("torch.distributed.tensor._dtensor_spec", "DTensorSpec", "an operand's placements for a rule"),
    "DTensorMeta": ("torch.distributed.tensor._dtensor_spec", "TensorMeta", "an operand's shape, stride, dtype for a rule"),
    "OpSpec": ("torch.distributed.tensor._op_schema", "OpSpec", "one candidate placement of an operand"),
    "OpStrategy": ("torch.distributed.tensor._op_schema", "OpStrategy", "an operand's candidate placements"),
    # -- collectives and Inductor (lowering)
    "functional_collectives": ("torch.distributed._functional_collectives", None,
                               "collectives as traceable ops (all_reduce, all_to_all_single, AsyncCollectiveTensor; "
                               "gather and scatter through the functions below)"),
    "compile_fx": ("torch._inductor.compile_fx", "compile_fx", "Inductor's compile of an FX graph, without Dynamo"),
    "inductor_config": ("torch._inductor", "config",
                        "Inductor's options, patched around a compile (its pass bucketing all-reduces into one)"),
    "functorch_config": ("torch._functorch", "config",
                         "AOTAutograd's options: its cache off around a compile whose inner compile must run"),
    "symbolic_shapes_config": ("torch.fx.experimental", "_config",
                               "symbolic shapes' options: a compile reasoning size-obliviously (backed_size_oblivious)"),
}
"""Private names used as torch defines them: ``name: (module, attribute, purpose)``."""


def __getattr__(name: str) -> Any:
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute, _ = NAMES[name]
    found = importlib.import_module(module)
    value = found if attribute is None else getattr(found, attribute)
    globals()[name] = value
    return value


# -- private attributes and keyword arguments, each behind one function ------------------------------


def evaluate_on_symints(expr: Any, values: dict[Any, Any]) -> Any:
    """torch's sympy ``expr`` evaluated with Python semantics at ``values`` (symbol -> int or SymInt).

    ``torch.utils._sympy.interp.sympy_interp`` with ``PythonReferenceAnalysis``: traced, SymInt
    arithmetic records the operations, so a local size becomes SymInt ops in the graph.
    """
    from torch.utils._sympy.interp import sympy_interp
    from torch.utils._sympy.reference import PythonReferenceAnalysis

    return sympy_interp(PythonReferenceAnalysis, values, expr)


def joint_graph_with_export_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                                   dynamic_shapes: Any) -> tuple[Any, Any]:
    """The joint forward+backward graph of ``model``, traced once over fake inputs whose sizes
    ``dynamic_shapes`` makes symbolic exactly as ``torch.export`` does; the graph and its ShapeEnv.

    torch.export's non-strict steps before and after its own trace
    (``torch._export.non_strict_utils.make_fake_inputs`` and
    ``produce_guards_and_solve_constraints``) around ``aot_export_joint_with_descriptors``
    (the caller records which module made each node), traced in export's compiling state
    (``torch._export.utils._compiling_state_context``: ``torch.compiler.is_compiling()`` and
    ``is_exporting()`` true, so a model skips eager-only data-dependent checks as it does under
    ``torch.export``, such as transformers' packed-sequence check). A guard that narrows a
    ``Dim`` raises torch.export's ``UserError`` (``torch._dynamo.exc``) as export does.
    """
    import contextlib

    from torch._dynamo.exc import UserError, UserErrorType
    from torch._export.non_strict_utils import make_fake_inputs, produce_guards_and_solve_constraints
    from torch._export.utils import _compiling_state_context
    from torch._functorch.aot_autograd import aot_export_joint_with_descriptors
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
    from torch.utils._sympy.value_ranges import ValueRangeError

    fake_mode, fake_args, fake_kwargs, equalities, signature, dynamic_shapes = make_fake_inputs(
        model, args, kwargs, dynamic_shapes)
    with contextlib.ExitStack() as stack:
        stack.enter_context(fake_mode)
        stack.enter_context(_compiling_state_context())
        joint = aot_export_joint_with_descriptors(stack, model, tuple(fake_args), fake_kwargs or None)
    try:
        produce_guards_and_solve_constraints(fake_mode, joint.graph_module, dynamic_shapes, equalities, signature)
    except (ConstraintViolationError, ValueRangeError) as exc:
        raise UserError(UserErrorType.CONSTRAINT_VIOLATION, str(exc)) from exc
    return joint.graph_module, fake_mode.shape_env


def set_joint_calling_convention(graph: Any, primals: int, tangents: int, outputs: int, *, like: Any) -> None:
    """Give ``graph`` the calling convention of ``like``, a joint graph (``forward(self, primals,
    tangents)`` returning the user's outputs and one gradient per primal: FX's ``_PyTreeCodeGen``,
    read as ``like._codegen``), for its own numbers of primals, tangents and outputs."""
    from torch.utils._pytree import tree_structure

    def specs(primals: int, tangents: int, outputs: int) -> tuple[Any, Any]:  # outputs: user's, then a gradient per primal
        return (tree_structure(([0] * primals, [0] * tangents)),
                tree_structure((tuple([0] * (outputs - primals)), tuple([0] * primals))))

    codegen = like._codegen
    info = codegen.pytree_info
    names = [n.name for n in like.find_nodes(op="placeholder")]
    tangents_before = sum(1 for n in names if n.startswith("tangents"))
    if (info.in_spec, info.out_spec) != specs(len(names) - tangents_before, tangents_before,
                                              len(like.output_node().args[0])):
        raise ValueError(f"not a joint graph's calling convention: {info}")
    in_spec, out_spec = specs(primals, tangents, outputs)
    graph.set_codegen(type(codegen)(info._replace(in_spec=in_spec, out_spec=out_spec)))


def make_fx_over_real_tensors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``make_fx(fn, tracing_mode="symbolic")`` that lets ``fn`` close over real tensors (a
    module's parameters become graph constants): the private ``_allow_non_fake_inputs=True``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="symbolic", _allow_non_fake_inputs=True)


def op_schema(op: Any) -> Any:
    """The ``FunctionSchema`` of an ATen operator overload (``op._schema``): its argument names and defaults."""
    return op._schema


def sharding_propagator() -> Any:
    """DTensor's sharding propagator (``DTensor._op_dispatcher.sharding_propagator``): its tables
    ``op_single_dim_strategy_funcs`` and ``op_strategy_funcs`` hold the registered op rules."""
    from torch.distributed.tensor import DTensor

    return DTensor._op_dispatcher.sharding_propagator


def tensor_tables(module: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``module``'s own parameters and buffers by attribute name (``_parameters``, ``_buffers``):
    reading them there skips ``Module.__getattr__``, about 1 µs per tensor at every call."""
    return module._parameters, module._buffers


def dtensor_redistribute_logger() -> Any:
    """The logger of DTensor's redistribution (``torch.distributed.tensor._redistribute``), which
    advises flattening the mesh when two all_gathers run one after the other."""
    import logging

    return logging.getLogger("torch.distributed.tensor._redistribute")


def dtensor_placed_like(like: Any, local: Any) -> Any:
    """A DTensor holding ``local`` as this rank's piece, with the mesh, placements, global shape,
    strides and dtype of the DTensor ``like`` (its spec ``like._spec``), made as DTensor's own
    constructor makes it: ``DTensor.from_local`` builds a new spec through an autograd function,
    about ten times the cost, at every parameter's gradient of every step. DTensor's ``__new__``
    (``Tensor._dtensor__new__``, in every checked release) is called alone: ``DTensor.__init__``
    only calls ``Tensor.__init__``, behind a dynamo-disabling and an export wrapper that cost
    twice what ``__new__`` does (about 3 µs, at every gradient)."""
    import torch
    from torch.distributed.tensor import DTensor

    return torch.Tensor._dtensor__new__(DTensor, local, like._spec, requires_grad=False)


def dtensor_local(tensor: Any) -> Any:
    """This rank's piece of the DTensor ``tensor`` (its ``_local_tensor``), outside autograd:
    ``to_local()`` goes through an autograd function even under ``no_grad``, about 4 µs a
    tensor, at every parameter of every call."""
    return tensor._local_tensor


def device_mesh_without_process_group(shape: Sequence[int], axis_names: Sequence[str] | None) -> Any:
    """A CPU ``DeviceMesh`` of ``shape`` seen from rank 0 that creates no process group
    (``_init_backend=False, _rank=0``): DTensor's whole-mesh rules read only its shape."""
    import math

    import torch
    from torch.distributed.device_mesh import DeviceMesh

    ranks = torch.arange(math.prod(shape)).view(tuple(shape))
    names = tuple(axis_names) if axis_names is not None else None
    return DeviceMesh("cpu", ranks, mesh_dim_names=names, _init_backend=False, _rank=0)


def register_process_group(name: str, group: Any) -> None:
    """Make ``group`` reachable under ``name`` by the functional collectives
    (``torch._C._distributed_c10d._register_process_group``)."""
    from torch._C._distributed_c10d import _register_process_group

    _register_process_group(name, group)


def inner_compile_reporting_strides(reported: list[Any]) -> Callable[..., Any]:
    """Inductor's compile of one graph (``compile_fx_inner``, the ``inner_compile`` that
    ``compile_fx`` calls after AOTAutograd's trace) that appends to ``reported`` the strides of
    each output of the graph as the compiled code returns it (None for a non-tensor or where
    Inductor cannot express them).

    They are the expressions Inductor reports to AOTAutograd (``CompiledFxGraph.output_strides``,
    also on an FX graph cache hit), over the compiled graph's ShapeEnv, returned as its SymInts
    (``ShapeEnv.deserialize_symexpr``), or ints where the graph has none. AOTAutograd's own cache
    skips the inner compile: keep it off around the compile (``functorch_config``).
    """
    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import compile_fx_inner

    def inner_compile(gm: Any, example_inputs: Sequence[Any], **options: Any) -> Any:
        code = compile_fx_inner(gm, example_inputs, **options)
        mode = detect_fake_mode(example_inputs)
        env = mode.shape_env if mode is not None else None
        reported.append([None if exprs is None else
                         tuple(int(e) if env is None else env.deserialize_symexpr(e) for e in exprs)
                         for exprs in code.output_strides])
        return code

    return inner_compile


def warm_up_inductor() -> None:
    """Import Inductor's compiler and detect the CPU's vector ISA
    (``torch._inductor.cpu_vec_isa.pick_vec_isa``), as Inductor does before its first compile."""
    importlib.import_module(NAMES["compile_fx"][0])
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    pick_vec_isa()


# -- names that differ between the supported releases, each behind one function -----------------------


def all_gather_single(x: Any, gather_dim: int, group: Any) -> Any:
    """``x`` from every rank of ``group``, joined along ``gather_dim``: the functional collective
    ``all_gather_single`` (torch 2.13 on), ``all_gather_tensor`` before (2.11 requires a contiguous
    input; 2.13 keeps the old name, deprecated, with a ``FutureWarning``)."""
    from torch.distributed import _functional_collectives as funcol

    if hasattr(funcol, "all_gather_single"):
        return funcol.all_gather_single(x, gather_dim, group)
    return funcol.all_gather_tensor(x.contiguous(), gather_dim, group)


def reduce_scatter_single(x: Any, op: str, scatter_dim: int, group: Any) -> Any:
    """This rank's piece along ``scatter_dim`` of ``x`` reduced by ``op`` over ``group``: the
    functional collective ``reduce_scatter_single`` (torch 2.13 on), ``reduce_scatter_tensor``
    before (2.13 keeps the old name, deprecated, with a ``FutureWarning``)."""
    from torch.distributed import _functional_collectives as funcol

    if hasattr(funcol, "reduce_scatter_single"):
        return funcol.reduce_scatter_single(x, op, scatter_dim, group)
    return funcol.reduce_scatter_tensor(x, op, scatter_dim, group)


def dist_all_gather_single(output: Any, input: Any, group: Any = None) -> Any:
    """Fill ``output`` with ``input`` from every rank of ``group`` (the default group when None),
    in rank order: ``torch.distributed.all_gather_single`` (torch 2.13 on),
    ``all_gather_into_tensor`` before (2.13 keeps the old name, deprecated, with a ``FutureWarning``)."""
    import torch.distributed as dist

    gather = dist.all_gather_single if hasattr(dist, "all_gather_single") else dist.all_gather_into_tensor
    return gather(output, input, group=group)


def dist_reduce_scatter_single(output: Any, input: Any, group: Any = None) -> Any:
    """Fill ``output`` with this rank's piece of ``input`` summed over ``group``:
    ``torch.distributed.reduce_scatter_single`` (torch 2.13 on), ``reduce_scatter_tensor`` before
    (2.13 keeps the old name, deprecated, with a ``FutureWarning``)."""
    import torch.distributed as dist

    scatter = dist.reduce_scatter_single if hasattr(dist, "reduce_scatter_single") else dist.reduce_scatter_tensor
    return scatter(output, input, group=group)


def run_decompositions(exported: Any, table: dict[Any, Any]) -> Any:
    """``exported.run_decompositions(table)``, without the ``LeafSpec`` deprecation that torch 2.11–2.13
    warn from their own deep copy of the program's call graph (nothing a caller can act on)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        return exported.run_decompositions(table)


def whole_mesh_strategies(rule: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    """The ``OpSpec`` s DTensor's whole-mesh ``rule`` proposes for ``op`` called with ``args`` and
    ``kwargs``, whose tensors are ``OpStrategy`` s listing candidate placements; None when its
    answer is no ``OpStrategy``.

    A rule that raises on the whole list (a view rule at a placement it cannot view, see the
    module docstring; 2.11 refuses more of them than 2.12 on) is asked about each candidate of
    its tensor operand alone when it has one, and what it answers is kept: each answer is still
    the rule's own. Its error is raised when it answers none, or has several tensor operands.
    """
    from torch.distributed.tensor._op_schema import OpSchema, OpStrategy

    try:
        return getattr(rule(OpSchema(op, args, kwargs)), "strategies", None)
    except Exception:  # DTensor's rules raise freely (RuntimeError, AssertionError, …)
        operands = [i for i, a in enumerate(args) if isinstance(a, OpStrategy)]
        if len(operands) != 1:
            raise
        [i] = operands
        found, answered = [], False
        for candidate in args[i].strategies:
            alone = (*args[:i], OpStrategy([candidate]), *args[i + 1:])
            try:
                specs = getattr(rule(OpSchema(op, alone, kwargs)), "strategies", None)
            except Exception:
                continue
            answered = True
            found += specs or []
        if not answered:
            raise
        return found
