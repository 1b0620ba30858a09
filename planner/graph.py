"""The planner's view of an FX graph: tensors with symbolic shapes, operands, and roles.

:func:`read_graph` turns a ``GraphModule`` (an export graph, a joint forward+backward graph
from ``aot_export_joint_with_descriptors``, or any FX graph of aten ops whose ``meta["val"]``
are fake tensors) into a :class:`PlanGraph`:

* each node whose value is a tensor, or a tuple/list holding tensors, becomes a
  :class:`GraphNode` with its output shapes as shapecore expressions (torch's sympy mapped by
  :func:`shapecore.torch.map_expr`, so symbols keep torch's names);
* nodes whose value is not a tensor (``sym_size``, SymInt arithmetic) are not planned;
* every element of the graph's output becomes a *sink* (``output:k``): a pseudo-node with one
  operand, so delivering an output in some placement is an edge like any other. A sink is a
  user output (``output_index``), a gradient (``grad_of``) or the new value of a buffer the
  model updates in place (``fqn``: a BatchNorm's running statistics in training); an in-place
  update of a parameter or a user input is refused;
* placeholders get a role: ``param``/``buffer`` (with the fully qualified name), ``input``
  (flattened user input index), ``tangent`` (the output it is the gradient for) or
  ``constant``, read from AOT descriptors (``meta["desc"]``), from an ``ExportedProgram``'s
  signature, or else every placeholder is a user input;
* a parameter or buffer placeholder that nothing reads is left out: ``torch.export`` and AOT
  lift every name of a tied parameter (GPT-2's ``lm_head.weight`` and ``wte.weight``) and route
  all reads to one of them, so the others would be planned, placed and counted in memory a
  second time for one tensor. The one read keeps the tensor's single placement and gradient.

Operand ``k`` of a node is the ``k``-th tensor-valued node met when flattening ``(args, kwargs)``
in order (:func:`tensor_operands`): a node reading one producer twice has two operands.

A node whose output shares an operand's storage (a view, an in-place or ``out=`` op, as its
ATen schema's alias annotations say, and ``_unsafe_view``) names that operand in ``alias_of``;
a ``getitem`` of such a tuple (``split``, ``unbind``) aliases it too. Memory is counted per
storage (:mod:`planner.problem.liveness`), so an alias allocates nothing.

:func:`input_roles` and :func:`output_roles` state the roles as the plan records them
(:class:`~planner.plan.GraphInput`, :class:`~planner.plan.GraphOutput`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sympy

from planner.plan import GraphInput, GraphOutput

__all__ = ["TensorMeta", "GraphNode", "PlanGraph", "read_graph", "tensor_operands", "op_name", "input_roles",
           "output_roles"]

Role = Literal["op", "getitem", "input", "param", "buffer", "tangent", "constant", "sink"]
Phase = Literal["forward", "backward"]


@dataclass(frozen=True)
class TensorMeta:
    """Shape (shapecore expressions), dtype name and bytes per element of one tensor."""

    shape: tuple[sympy.Basic, ...]
    dtype: str
    itemsize: int

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class GraphNode:
    """One planned node: an op, a placeholder, a ``getitem`` of a multi-output op, or a sink.

    ``outputs`` has one entry per output (one for a single tensor; ``None`` for a non-tensor
    element of a tuple); ``is_tuple`` tells the two apart. ``operands`` names the producers of
    the tensor operands in order. For a ``getitem``, ``operands`` is empty and ``source`` /
    ``index`` name the tuple it reads. A sink ``output:k`` (``k``: position among the
    flattened outputs) reads one operand; its ``index`` is that operand's position among the
    ``output`` node's tensor operands; a sink's ``fqn`` names the buffer it is the new value of.
    ``alias_of`` names the node whose storage the output shares (a view or an in-place result),
    or is None when the node allocates its own. ``read_as_scalar``: the outputs (by index) an op
    with no tensor result reads into Python numbers (``item``, ``tolist``: ``_local_scalar_dense``),
    which every rank must read whole and alike: they are replicated.
    """

    name: str
    role: Role
    target: str
    outputs: tuple[TensorMeta | None, ...]
    is_tuple: bool = False
    operands: list[str] = field(default_factory=list)
    fx: Any = None
    fqn: str | None = None
    input_index: int | None = None
    output_index: int | None = None
    grad_of: str | None = None
    source: str | None = None
    index: int | None = None
    phase: Phase = "forward"
    module_path: str = ""
    alias_of: str | None = None
    read_as_scalar: frozenset[int] = frozenset()

    @property
    def output(self) -> TensorMeta:
        """The only output of a single-tensor node."""
        meta = self.outputs[0]
        assert meta is not None and not self.is_tuple, self.name
        return meta


@dataclass
class PlanGraph:
    """Planned nodes in graph order, the graph's inputs and outputs, and who reads whom."""

    nodes: dict[str, GraphNode]
    inputs: list[str | None]
    outputs: list[str | None]
    users: dict[str, list[tuple[str, int]]]
    fx_node_count: int
    hints: dict[str, int] = field(default_factory=dict)

    def __iter__(self) -> Iterator[GraphNode]:
        return iter(self.nodes.values())

    def __getitem__(self, name: str) -> GraphNode:
        return self.nodes[name]

    def operand_meta(self, node: GraphNode, k: int) -> TensorMeta:
        producer = self.nodes[node.operands[k]]
        return producer.output

    def is_training(self) -> bool:
        return any(n.phase == "backward" for n in self.nodes.values())


def op_name(target: Any) -> str:
    """``aten.mm.default`` for an OpOverload, ``getitem`` for ``operator.getitem``, else a name."""
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None)
    text = str(target)
    if text.startswith("aten.") or "." in text and not text.startswith("<"):
        return text
    return name or text


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def tensor_operands(fx_node: Any) -> list[Any]:
    """The tensor-valued FX nodes among ``fx_node``'s inputs, in flattened ``(args, kwargs)`` order, repeats kept."""
    from torch.fx.node import Node, map_arg

    found: list[Any] = []

    def visit(n: Node) -> Node:
        if _is_tensor(n.meta.get("val")):
            found.append(n)
        return n

    map_arg((fx_node.args, fx_node.kwargs), visit)
    return found


class _Shapes:
    """Maps torch SymInt sizes to shapecore expressions, once per distinct expression."""

    def __init__(self) -> None:
        self._cache: dict[Any, sympy.Basic] = {}

    def size(self, s: Any) -> sympy.Basic:
        if isinstance(s, int):
            return sympy.Integer(s)
        expr = s.node.expr
        found = self._cache.get(expr)
        if found is None:
            from shapecore.torch import map_expr

            found = self._cache[expr] = map_expr(expr)
        return found

    def meta(self, value: Any) -> TensorMeta | None:
        if not _is_tensor(value):
            return None
        return TensorMeta(tuple(self.size(s) for s in value.shape), str(value.dtype).removeprefix("torch."), value.dtype.itemsize)


def _module_path(fx_node: Any) -> str:
    """The dotted path of the innermost module that produced ``fx_node`` (forward or backward)."""
    stack = fx_node.meta.get("nn_module_stack") or fx_node.meta.get("fwd_nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else str(path)


def _phase(fx_node: Any) -> Phase:
    tag = fx_node.meta.get("partitioner_tag")
    if tag == "is_backward" or fx_node.meta.get("autograd_backward"):
        return "backward"
    return "forward"


def _signature_roles(exported: Any) -> dict[str, tuple[Role, str | None]]:
    """Placeholder name → (role, fqn) from an ``ExportedProgram``'s signature."""
    from torch.export.graph_signature import InputKind

    kinds = {
        InputKind.PARAMETER: "param",
        InputKind.BUFFER: "buffer",
        InputKind.USER_INPUT: "input",
        InputKind.CONSTANT_TENSOR: "constant",
    }
    roles: dict[str, tuple[Role, str | None]] = {}
    for spec in exported.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if name is not None:
            roles[name] = (kinds.get(spec.kind, "constant"), spec.target)  # type: ignore[assignment]
    return roles


def _descriptor_role(desc: Any) -> tuple[Role, str | None, int | None] | None:
    """(role, fqn, index) from an AOT input descriptor, or None when there is none."""
    if desc is None:
        return None
    kind = type(desc).__name__
    if kind == "ParamAOTInput":
        return "param", desc.target, None
    if kind == "BufferAOTInput":
        return "buffer", desc.target, None
    if kind == "PlainAOTInput":
        return "input", None, desc.idx
    if kind == "TangentAOTInput":
        output = getattr(desc, "output", None)
        return "tangent", None, getattr(output, "idx", None)
    return "constant", None, None


def _output_kind(desc: Any) -> tuple[str, str | None, int | None]:
    """(``output``, None, user output index), (``grad``, fqn of the parameter or buffer, None) or
    (``buffer_mutation``, fqn of the buffer, None) from an AOT output descriptor."""
    kind = type(desc).__name__
    if kind == "GradAOTOutput":
        return "grad", getattr(getattr(desc, "grad_of", None), "target", None), None
    if kind == "InputMutationAOTOutput":
        mutated = desc.mutated_input
        what = {"BufferAOTInput": "buffer", "ParamAOTInput": "parameter"}.get(type(mutated).__name__, "input")
        return _mutation(what, getattr(mutated, "target", None) or str(mutated))
    return "output", None, desc.idx if kind == "PlainAOTOutput" else None


def _signature_outputs(exported: Any) -> list[tuple[str, str | None, int | None]]:
    """What each output of an ``ExportedProgram``'s graph is, as :func:`_output_kind` says it."""
    from torch.export.graph_signature import OutputKind

    kinds: list[tuple[str, str | None, int | None]] = []
    user = 0
    for spec in exported.graph_signature.output_specs:
        if spec.kind == OutputKind.BUFFER_MUTATION:
            kinds.append(_mutation("buffer", spec.target))
        elif spec.kind in (OutputKind.PARAMETER_MUTATION, OutputKind.USER_INPUT_MUTATION):
            kinds.append(_mutation("parameter" if spec.kind == OutputKind.PARAMETER_MUTATION else "input", spec.target))
        else:
            kinds.append(("output", None, user))
            user += 1
    return kinds


def _mutation(what: str, target: str | None) -> tuple[str, str | None, int | None]:
    """A buffer's new value; any other in-place update of an input is refused by name."""
    if what != "buffer":
        raise ValueError(f"the model updates its {what} {target} in place; the planner plans in-place updates of "
                         "buffers only (running statistics): return the new value instead")
    return "buffer_mutation", target, None


def read_graph(gm: Any, *, exported: Any = None) -> PlanGraph:
    """The :class:`PlanGraph` of ``gm`` (``exported``: the ExportedProgram ``gm`` came from, for roles)."""
    shapes = _Shapes()
    roles = _signature_roles(exported) if exported is not None else {}
    nodes: dict[str, GraphNode] = {}
    inputs: list[str | None] = []
    outputs: list[str | None] = []
    user_input_count = 0
    fx_count = 0
    for fx_node in gm.graph.nodes:
        fx_count += 1
        value = fx_node.meta.get("val")
        if fx_node.op == "placeholder":
            role, fqn, index = _placeholder_role(fx_node, roles, user_input_count)
            if role == "input":
                index = user_input_count
                user_input_count += 1
                inputs.append(fx_node.name if _is_tensor(value) else None)
            if not _is_tensor(value) or (role in ("param", "buffer") and not fx_node.users):
                continue
            nodes[fx_node.name] = GraphNode(
                fx_node.name, role, "placeholder", (shapes.meta(value),), fx=fx_node, fqn=fqn,
                input_index=index if role == "input" else None, output_index=index if role == "tangent" else None,
                phase="backward" if role == "tangent" else "forward",
                module_path=fqn.rsplit(".", 1)[0] if fqn else "",
            )
        elif fx_node.op == "get_attr":
            if _is_tensor(value):
                nodes[fx_node.name] = GraphNode(
                    fx_node.name, "constant", "get_attr", (shapes.meta(value),), fx=fx_node, fqn=str(fx_node.target)
                )
        elif fx_node.op == "call_function":
            _read_call(fx_node, value, nodes, shapes)
        elif fx_node.op == "output":
            _read_output(fx_node, nodes, outputs, _signature_outputs(exported) if exported is not None else None)
        else:
            raise ValueError(
                f"node {fx_node.name} is a {fx_node.op}; the planner reads flat aten graphs "
                f"(placeholder, get_attr, call_function, output) — trace with torch.export or make_fx"
            )
    users: dict[str, list[tuple[str, int]]] = {name: [] for name in nodes}
    for node in nodes.values():
        for k, producer in enumerate(node.operands):
            users[producer].append((node.name, k))
    return PlanGraph(nodes, inputs, outputs, users, fx_count)


def _placeholder_role(fx_node: Any, roles: dict[str, tuple[Role, str | None]], next_input: int) -> tuple[Role, str | None, int | None]:
    described = _descriptor_role(fx_node.meta.get("desc"))
    if described is not None:
        return described
    if fx_node.name in roles:
        role, fqn = roles[fx_node.name]
        return role, (fqn if role in ("param", "buffer", "constant") else None), None
    return "input", None, next_input


_READS_VALUES = ("aten._local_scalar_dense.default", "aten.item.default", "aten.equal.default", "aten.is_nonzero.default")
"""Ops that read a tensor's values into a Python number (``item``, ``tolist``), not its sizes (``sym_size``)."""
_RETURN_ALIAS = re.compile(r"Tensor\((\w+)!?\)")
_STORAGE_REUSE = ("aten._unsafe_view.default",)  # no alias annotation, yet it returns its operand's storage


def _aliased_operand(fx_node: Any) -> str | None:
    """The name of the operand whose storage ``fx_node``'s output shares, per the op's schema."""
    from torch.fx.node import Node

    from shapecore.torch.private import OpOverload, op_schema

    target = fx_node.target
    if not isinstance(target, OpOverload):
        return None
    if op_name(target) in _STORAGE_REUSE:
        base = fx_node.args[0] if fx_node.args else None
        return base.name if isinstance(base, Node) else None
    schema = op_schema(target)
    returned = set(_RETURN_ALIAS.findall(str(schema).rsplit(") -> ", 1)[-1]))
    for k, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and returned & set(info.before_set):
            base = fx_node.args[k] if k < len(fx_node.args) else fx_node.kwargs.get(argument.name)
            if isinstance(base, Node):
                return base.name
    return None


def _read_call(fx_node: Any, value: Any, nodes: dict[str, GraphNode], shapes: _Shapes) -> None:
    target = op_name(fx_node.target)
    common = {"fx": fx_node, "phase": _phase(fx_node), "module_path": _module_path(fx_node)}
    if fx_node.target is operator.getitem:
        source, index = fx_node.args
        if source.name in nodes and nodes[source.name].is_tuple and _is_tensor(value):
            nodes[fx_node.name] = GraphNode(
                fx_node.name, "getitem", "getitem", (shapes.meta(value),), source=source.name, index=index,
                alias_of=nodes[source.name].alias_of, **common
            )
        return
    operands = [n.name for n in tensor_operands(fx_node)]
    missing = [name for name in operands if name not in nodes]
    if missing:
        raise ValueError(f"node {fx_node.name} reads {missing[0]}, a tensor the planner has not seen; is the graph in topological order?")
    alias_of = _aliased_operand(fx_node)
    alias_of = alias_of if alias_of in nodes else None
    if _is_tensor(value):
        nodes[fx_node.name] = GraphNode(fx_node.name, "op", target, (shapes.meta(value),), operands=operands,
                                        alias_of=alias_of, **common)
    elif isinstance(value, (tuple, list)) and any(_is_tensor(v) for v in value):
        metas = tuple(shapes.meta(v) for v in value)
        nodes[fx_node.name] = GraphNode(fx_node.name, "op", target, metas, is_tuple=True, operands=operands,
                                        alias_of=alias_of, **common)
    elif target in _READS_VALUES:  # the sizes and values the number decides must agree on every rank
        for name in operands:
            read = nodes[name]
            read.read_as_scalar |= {0}
            if read.role == "getitem":  # it takes its tuple's element: the tuple decides
                nodes[read.source].read_as_scalar |= {read.index}  # type: ignore[index, operator]


def _flatten_outputs(args: Any) -> list[Any]:
    from shapecore.torch.private import tree_flatten

    leaves, _ = tree_flatten(args)
    return leaves


def _read_output(fx_node: Any, nodes: dict[str, GraphNode], outputs: list[str | None],
                 signature: Sequence[tuple[str, str | None, int | None]] | None) -> None:
    from torch.fx.node import Node

    leaves = _flatten_outputs(fx_node.args[0])
    descs: Sequence[Any] = fx_node.meta.get("desc") or []
    user_index = 0
    operand = 0
    for k, leaf in enumerate(leaves):
        if k < len(descs) and descs[k] is not None:
            kind, fqn, plain_index = _output_kind(descs[k])
        elif signature is not None and k < len(signature):
            kind, fqn, plain_index = signature[k]
        else:
            kind, fqn, plain_index = "output", None, user_index
        if kind == "output":
            user_index += 1
        is_tensor = isinstance(leaf, Node) and _is_tensor(leaf.meta.get("val"))
        if not is_tensor:
            outputs.append(None)
            continue
        name = f"output:{k}"
        producer = nodes[leaf.name]
        nodes[name] = GraphNode(
            name, "sink", "output", producer.outputs, operands=[leaf.name], fx=fx_node, index=operand,
            output_index=plain_index if kind == "output" else None, grad_of=fqn if kind == "grad" else None,
            fqn=fqn if kind == "buffer_mutation" else None,
            phase="backward" if kind == "grad" else producer.phase, module_path=fqn.rsplit(".", 1)[0] if fqn else "",
        )
        operand += 1
        outputs.append(name)


def input_roles(graph: PlanGraph) -> tuple[GraphInput, ...]:
    """What feeds each planned placeholder of ``graph``, in graph order."""
    roles = []
    for node in graph:
        if node.target == "placeholder":
            index = node.input_index if node.role == "input" else node.output_index if node.role == "tangent" else None
            roles.append(GraphInput(node.name, node.role, index, node.fqn))  # type: ignore[arg-type]
    return tuple(roles)


def output_roles(graph: PlanGraph) -> tuple[GraphOutput | None, ...]:
    """Each flattened output of ``graph``: a user output, a gradient or a buffer's new value (None
    for a non-tensor)."""
    roles: list[GraphOutput | None] = []
    for name in graph.outputs:
        sink = None if name is None else graph.nodes[name]
        if sink is None:
            roles.append(None)
        elif sink.grad_of is not None:
            roles.append(GraphOutput("grad", None, sink.grad_of))
        elif sink.fqn is not None:
            roles.append(GraphOutput("buffer_mutation", fqn=sink.fqn))
        else:
            roles.append(GraphOutput("output", sink.output_index))
    return tuple(roles)
