"""A lowered joint graph split into a forward and a backward program.

The local program of a training plan (:func:`~lowering.lower.lower` of a joint
forward+backward graph) computes the user outputs and the parameter gradients in one graph,
for tangents given up front. A training step needs the two halves apart: the forward program
runs in the call and returns the user outputs and what the backward needs (the saved
activations), the backward program runs when autograd reaches the outputs, with the
gradients of whatever loss the user computed as its tangents.

:func:`partition` does the split with AOTAutograd's own partitioner (``default_partition``:
it saves what the forward computed, recomputing nothing). The forward is the dataflow cone
of the user outputs, with every value of a multi-output op in it (the batch statistics that
BatchNorm's forward returns beside its output are read by its backward only): the lowering emits
an output's redistribution where the output node is, after the backward, so those nodes are
moved ahead first (every rank moves the same ones, so collectives keep one order on every rank).

A saved value that is only a view of a forward input (the transposed weight a linear layer's
backward multiplies by) is not returned by the forward: the backward takes the input itself and
takes the view again. Returned, it would be an output aliasing an input, which AOTAutograd's
runtime regenerates from the input at every call (about 15 µs each, a dozen per call of a small
decoder).

An unbacked symbol that a saved value's size or stride is an expression of (a routed piece's
``Max(0, Min(u0, …) - …)`` rows) is returned by the forward as a value of its own when no
input of the backward is that symbol: Inductor binds a program's symbols from its inputs and,
from torch 2.14, refuses an input whose size reads a symbol bound by none. AOTAutograd's
partitioner saves such a symbol itself when the joint graph has a node whose value it is
(``find_symbol_binding_fx_nodes``); a lowered program re-traced by ``make_fx`` may have none (the
routed rows' count lives only in a tensor's size), and a ``sym_size`` of that tensor is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lowering.errors import LoweringError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch.fx import GraphModule, Node

__all__ = ["Partitioned", "partition"]


@dataclass(frozen=True)
class Partitioned:
    """The two programs of a joint program.

    ``forward`` takes the joint program's inputs without the tangents (a local program's
    ``*symbols, *tensors, coordinate``) and returns the ``user_outputs`` user outputs, then the
    saved values;
    ``backward`` takes, per input, ``("saved", k)`` (the forward's saved value ``k``),
    ``("tangent", k)`` (the joint program's tangent ``k``, in input order) or ``("input", k)``
    (the forward's input ``k``) as :attr:`backward_inputs` lists, and returns the joint
    program's remaining outputs (the gradients) in order.
    """

    forward: GraphModule
    backward: GraphModule
    user_outputs: int
    backward_inputs: tuple[tuple[str, int], ...]


def _forward_nodes(outputs: list[Node]) -> set[Node]:
    """The dataflow cone of ``outputs``, and every ``getitem`` of a multi-output op in it: an op
    runs whole in the forward, so each of its values is the forward's, to save if the backward
    reads it (BatchNorm's saved mean and inverse std). Left to the backward, such a value would
    read an op the backward does not have."""
    import operator

    found: set[Node] = set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(node.all_input_nodes)
            stack.extend(user for user in node.users if user.target is operator.getitem)
    return found


def _forward_first(gm: GraphModule, user_outputs: int, tangents: set[int]) -> GraphModule:
    """A copy of ``gm`` with the cone of the first ``user_outputs`` outputs ahead of every other
    computation, tagged as forward, and the tangent placeholders (``tangents``: their positions
    among all inputs) named as the partitioner expects."""
    import torch.fx
    from torch.fx.node import Node, map_arg

    nodes = list(gm.graph.nodes)
    output = gm.graph.output_node()
    leaves = list(output.args[0])
    forward = _forward_nodes([x for x in leaves[:user_outputs] if isinstance(x, Node)])
    placeholders = [n for n in nodes if n.op == "placeholder"]
    order = placeholders + [n for n in nodes if n.op not in ("placeholder", "output") and n in forward] + [
        n for n in nodes if n.op not in ("placeholder", "output") and n not in forward]
    tangent_names = {placeholders[k]: f"tangents_{count}" for count, k in enumerate(sorted(tangents), start=1)}
    graph = torch.fx.Graph()
    copies: dict[Node, Node] = {}
    for node in order:
        if node in tangent_names:
            copies[node] = graph.placeholder(tangent_names[node])
            copies[node].meta = dict(node.meta)
        else:
            copies[node] = graph.node_copy(node, lambda n: copies[n])
        if node in forward and node.op != "placeholder":
            copies[node].meta["partitioner_tag"] = "is_forward"
    graph.output(map_arg(output.args[0], lambda n: copies[n]))
    return torch.fx.GraphModule(gm, graph)


def partition(joint: GraphModule, example_inputs: Sequence[Any], user_outputs: int, tangents: set[int]) -> Partitioned:
    """Split ``joint`` (a joint graph whose first ``user_outputs`` outputs are the user outputs,
    traced at ``example_inputs``) into forward and backward; ``tangents``: positions of the
    tangents among its inputs."""
    from shapecore.torch.private import default_partition

    forward, backward = default_partition(_forward_first(joint, user_outputs, tangents), list(example_inputs),
                                          num_fwd_outputs=user_outputs)
    _view_inputs_again(forward, backward, user_outputs)
    _save_unbound_symbols(forward, backward)
    saved = [n.name for n in forward.graph.output_node().args[0][user_outputs:]]
    forward_inputs = {n.name: k for k, n in enumerate(forward.graph.find_nodes(op="placeholder"))}
    tangent_order = {f"tangents_{count}": count - 1 for count in range(1, len(tangents) + 1)}
    inputs: list[tuple[str, int]] = []
    for node in backward.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in tangent_order:
            inputs.append(("tangent", tangent_order[node.name]))
        elif node.name in saved:
            inputs.append(("saved", saved.index(node.name)))
        elif node.name in forward_inputs:
            inputs.append(("input", forward_inputs[node.name]))
        else:
            raise LoweringError(f"the backward program reads {node.name}, which the forward neither saves nor is a "
                                "tangent; the joint graph cannot be split")
    return Partitioned(forward, backward, user_outputs, tuple(inputs))


def _view_chain(node: Node) -> list[Node] | None:
    """The view ops from a forward placeholder to ``node`` (placeholder first), when ``node`` is
    only views of it taken with constant arguments (no node among them, a symbol in a size list
    included); else None."""
    from torch.fx.node import Node, map_arg

    chain = [node]
    while node.op == "call_function":
        read: list[Node] = []
        map_arg((node.args[1:], node.kwargs), read.append)
        if not getattr(node.target, "is_view", False) or not isinstance(node.args[0], Node) or read:
            return None
        node = node.args[0]
        chain.append(node)
    return chain[::-1] if node.op == "placeholder" and len(chain) > 1 else None


def _view_inputs_again(forward: GraphModule, backward: GraphModule, user_outputs: int) -> None:
    """Make the backward take each forward input that a saved value is only a view of, and take the
    view itself, instead of the forward returning the view (see the module docstring)."""
    output = forward.graph.output_node()
    outputs = list(output.args[0])
    kept = outputs[:user_outputs]
    placeholders = {n.name: n for n in backward.graph.find_nodes(op="placeholder")}
    first = next(n for n in backward.graph.nodes if n.op != "placeholder")
    dropped: set[Node] = set()
    for value in outputs[user_outputs:]:
        chain = _view_chain(value) if value.name in placeholders else None
        if chain is None:
            kept.append(value)
            continue
        base, saved = chain[0], placeholders[value.name]
        if base.name not in placeholders:
            with backward.graph.inserting_before(first):
                placeholders[base.name] = backward.graph.placeholder(base.name)
            placeholders[base.name].meta = dict(base.meta)
        taken = placeholders[base.name]
        with backward.graph.inserting_before(first):
            for view in chain[1:]:
                taken = backward.graph.node_copy(view, lambda n, taken=taken: taken)
        saved.replace_all_uses_with(taken)
        backward.graph.erase_node(saved)
        dropped.update(chain[1:])
    output.args = (tuple(kept),)
    for view in reversed([n for n in forward.graph.nodes if n in dropped]):  # users first
        if not view.users:  # taken for the backward alone
            forward.graph.erase_node(view)
    forward.recompile()
    backward.graph.lint()
    backward.recompile()


def _sizes(values: Sequence[Any]) -> list[Any]:
    """The SymInts among ``values`` (example inputs), their tensors' sizes and strides: what
    Inductor binds a program's symbols from."""
    import torch

    sizes = [size for v in values if isinstance(v, torch.Tensor) for size in (*v.shape, *v.stride())]
    return [s for s in [*sizes, *values] if isinstance(s, torch.SymInt)]


def _unbound_symbols(values: Sequence[Any]) -> list[Any]:
    """The unbacked symbols that the sizes and strides of ``values`` (example inputs) read and none
    of them is."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    sizes = _sizes(values)
    bound = {s.node.expr for s in sizes if isinstance(s.node.expr, sympy.Symbol)}
    return sorted(set().union(*(free_unbacked_symbols(s) for s in sizes)) - bound, key=str)


def _symbol_node(forward: GraphModule, backward: GraphModule, symbol: Any) -> Node:
    """A node of ``forward`` whose value is ``symbol``: a SymInt node, or a ``sym_size`` inserted
    after a tensor that has a dim of that size (named apart from every node of both programs)."""
    import torch

    names = {n.name for graph in (forward.graph, backward.graph) for n in graph.nodes}
    for node in forward.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt) and value.node.expr == symbol:
            return node
        if isinstance(value, torch.Tensor):
            dim = next((d for d, size in enumerate(value.shape)
                        if isinstance(size, torch.SymInt) and size.node.expr == symbol), None)
            if dim is not None:
                name = next(f"{node.name}_size_{dim}_{k}" for k in range(len(names) + 1)
                            if f"{node.name}_size_{dim}_{k}" not in names)
                with forward.graph.inserting_after(node):
                    size_node = forward.graph.create_node("call_function", torch.ops.aten.sym_size.int, (node, dim),
                                                          name=name)
                size_node.meta["val"] = value.shape[dim]
                return size_node
    raise LoweringError(f"the backward program's inputs have sizes in {symbol}, which no value of the forward "
                        "program is; the joint graph cannot be split")


def _save_unbound_symbols(forward: GraphModule, backward: GraphModule) -> None:
    """Make the forward also save each unbacked symbol that the backward's inputs' sizes or strides
    read and no backward input binds (see the module docstring)."""
    unbound = _unbound_symbols(example_values(backward))
    if not unbound:
        return
    output = forward.graph.output_node()
    first = next(iter(backward.graph.nodes))
    saved = []
    for symbol in unbound:
        node = _symbol_node(forward, backward, symbol)
        saved.append(node)
        with backward.graph.inserting_before(first):
            placeholder = backward.graph.placeholder(node.name)  # the joint graph's names are unique to one node
        placeholder.meta = dict(node.meta)
    output.args = (tuple(output.args[0]) + tuple(saved),)
    forward.recompile()
    backward.recompile()


def example_values(gm: GraphModule) -> list[Any]:
    """The traced values of ``gm``'s placeholders (fake tensors, SymInts), in order."""
    return [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
