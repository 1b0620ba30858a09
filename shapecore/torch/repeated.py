"""Repeated layers traced once: the joint graph of a model with a run of identical blocks, built
from a trace of its first :data:`TRACED_BLOCKS` blocks.

A decoder's blocks (an ``nn.ModuleList`` whose children are of one class, with equal
configuration, parameter and buffer shapes, and no hooks) trace to the same region of the
joint graph, each reading the previous one's output: tracing all of them costs one block's
trace per block (about 1 CPU s for a LLaMA-3 block), which is most of a planning call.
:func:`repeated_blocks` finds such a run, :func:`truncated` leaves its first
:data:`TRACED_BLOCKS` blocks in the model while it is traced, and :func:`replicate` builds the
joint graph of all the blocks from that trace: the first and the last block as traced, the two
middle ones checked alike node for node (ops, shapes, module paths, and what each node reads:
its own block's nodes and parameters, the neighbouring blocks' nodes at the same places, the
same nodes outside; a node of a block made of outside values alone and read by other blocks
counts as outside, as torch 2.15 reads a graph input's size in the first block that needs it
where 2.11 to 2.14 read it before the blocks), and the second middle one copied for every
block in between, with its parameters' inputs, gradients and module paths renamed. The result
is the graph the whole model traces to, node for node (names too, as FX numbers them: each
copy moves the per-name counters on by the step between the two middle blocks; tested against
the full trace).

A block whose configuration differs from the others' (HF's ``layer_idx``, an attention type per
layer) makes the run not alike: such models are traced whole.

What is assumed, and why it is opt-in (``trace_for_planning(share_layers=True)``): that the
model's own forward calls each block in the run alike, as it calls the traced ones (the same
arguments, nothing between calls that depends on the block's index); blocks that are not alike
as modules are never shared. When the traced blocks do not repeat as required,
:func:`replicate` says why and the model is traced whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.fx import GraphModule, Node

__all__ = ["TRACED_BLOCKS", "RepeatedBlocks", "repeated_blocks", "truncated", "replicate"]

TRACED_BLOCKS = 4
"""Blocks traced of a run: the first, two middle ones (checked alike) and the last."""

_SUFFIX = re.compile(r"(.*)_(\d+)$")  # FX's node names: base_number


@dataclass(frozen=True)
class RepeatedBlocks:
    """A run of ``count`` alike blocks: the ``nn.ModuleList`` at ``path`` in the model."""

    path: str
    blocks: Any
    count: int


def _summary(value: Any, seen: set[int]) -> Any:
    """What of a module's state decides its trace: classes, configuration values, tensors' metadata."""
    import torch

    if isinstance(value, torch.nn.Module):
        if id(value) in seen:
            raise _NotAlike("a module reached twice")
        seen.add(id(value))
        return (type(value), tuple((name, _summary(v, seen)) for name, v in sorted(vars(value).items())))
    if isinstance(value, torch.Tensor):
        if id(value) in seen:
            raise _NotAlike("a tensor shared")
        seen.add(id(value))
        return ("tensor", type(value), tuple(value.shape), value.dtype, value.layout, value.requires_grad)
    if isinstance(value, dict):
        return (type(value), tuple((k, _summary(v, seen)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return (type(value), tuple(_summary(v, seen) for v in value))
    return value  # a function (a hook) compares as itself: blocks hooked apart are not alike


class _NotAlike(Exception):
    pass


def _alike(first: Any, other: Any) -> bool:
    try:
        return bool(_summary(first, set()) == _summary(other, set()))
    except _NotAlike:
        return False
    except Exception:  # a configuration value that does not compare (an array): not provably alike
        return False


def repeated_blocks(model: torch.nn.Module, *, at_least: int = TRACED_BLOCKS + 2) -> RepeatedBlocks | None:
    """The longest ``nn.ModuleList`` in ``model`` of at least ``at_least`` alike blocks, none of
    whose parameters or buffers is used anywhere else; None when there is none."""
    import torch

    uses: dict[int, int] = {}
    for _, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        uses[id(tensor)] = uses.get(id(tensor), 0) + 1
    best: RepeatedBlocks | None = None
    for path, module in model.named_modules():
        if not path or not isinstance(module, torch.nn.ModuleList) or len(module) < at_least:
            continue
        if best is not None and len(module) <= best.count:
            continue
        blocks = list(module)
        owned = [t for b in blocks for _, t in (*b.named_parameters(remove_duplicate=False), *b.named_buffers(remove_duplicate=False))]
        if any(uses.get(id(t), 0) != 1 for t in owned) or not all(_alike(blocks[0], b) for b in blocks[1:]):
            continue
        best = RepeatedBlocks(path, module, len(blocks))
    return best


@contextlib.contextmanager
def truncated(run: RepeatedBlocks, count: int = TRACED_BLOCKS) -> Iterator[None]:
    """``run``'s list holds its first ``count`` blocks only, under their own names, inside the context."""
    tail = list(run.blocks)[count:]
    del run.blocks[count:]
    try:
        yield
    finally:
        run.blocks.extend(tail)


def _layer(path: str, name: str) -> int | None:
    """The block index in a dotted name under ``path`` (``layers.3.attention`` -> 3), else None."""
    if not name.startswith(path + "."):
        return None
    head = name[len(path) + 1:].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _stack_layer(path: str, stack: Any) -> int | None:
    for name, _ in (stack or {}).values():
        found = _layer(path, name)
        if found is not None:
            return found
    return None


def _renamed(path: str, name: str, layer: int) -> str:
    head, _, rest = name[len(path) + 1:].partition(".")
    return f"{path}.{layer}" + (f".{rest}" if rest else "")


def _renamed_stack(path: str, stack: dict[str, Any], layer: int) -> dict[str, Any]:
    out = {}
    for key, (name, cls) in stack.items():
        if _layer(path, name) is not None:
            new = _renamed(path, name, layer)
            key = key[: len(key) - len(name)] + new if key.endswith(name) else key
            name = new
        out[key] = (name, cls)
    return out


def _renamed_desc(path: str, desc: Any, layer: int) -> Any:
    """A parameter's or buffer's descriptor (or a gradient's, through ``grad_of``) for block ``layer``."""
    if desc is None:
        return None
    if hasattr(desc, "grad_of"):
        return dataclasses.replace(desc, grad_of=_renamed_desc(path, desc.grad_of, layer))
    return dataclasses.replace(desc, target=_renamed(path, desc.target, layer))


def _desc_layer(path: str, desc: Any) -> int | None:
    desc = getattr(desc, "grad_of", desc)
    target = getattr(desc, "target", None)
    return _layer(path, target) if isinstance(target, str) else None


def _val_key(val: Any) -> Any:
    shape = getattr(val, "shape", None)
    if shape is not None:
        return (str(tuple(shape)), str(val.stride()) if hasattr(val, "stride") else None, str(getattr(val, "dtype", None)))
    return str(val)


class _Regions:
    """The traced graph cut into blocks: each block's forward and backward nodes, its parameters."""

    def __init__(self, gm: GraphModule, path: str) -> None:
        self.path = path
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.output = gm.graph.output_node()
        self.label: dict[Node, tuple[int, str] | None] = {}
        previous: tuple[int, str] | None = None
        runs: list[tuple[int, str] | None] = []
        for node in self.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if "fwd_nn_module_stack" in node.meta:
                layer, part = _stack_layer(path, node.meta["fwd_nn_module_stack"]), "backward"
                label = None if layer is None else (layer, part)
            elif "nn_module_stack" in node.meta:
                layer = _stack_layer(path, node.meta["nn_module_stack"])
                label = None if layer is None else (layer, "forward")
            else:  # made by autograd between modules (a gradient's accumulation): where it stands
                label = previous
            self.label[node] = label
            previous = label
            if not runs or runs[-1] != label:
                runs.append(label)
        want = [(k, "forward") for k in range(TRACED_BLOCKS)] + [(k, "backward") for k in reversed(range(TRACED_BLOCKS))]
        if [r for r in runs if r is not None] != want:
            raise _NotRepeating("the traced blocks' nodes are not in one run per block, forward then backward")
        self.blocks: list[list[Node]] = [[] for _ in range(TRACED_BLOCKS)]
        for node in self.nodes:
            label = self.label.get(node)
            if label is not None:
                self.blocks[label[0]].append(node)
        self.block_of = {n: k for k, nodes in enumerate(self.blocks) for n in nodes}
        self.params: list[dict[Node, str]] = [{} for _ in range(TRACED_BLOCKS)]
        for node in self.placeholders:
            layer = _desc_layer(path, node.meta.get("desc"))
            if layer is not None:
                self.params[layer][node] = node.meta["desc"].target.split(".", 2 + path.count("."))[-1]
                self.block_of[node] = layer
        if len({tuple(p.values()) for p in self.params}) != 1:
            raise _NotRepeating("the traced blocks' parameters differ")
        # made of outside values alone and read by other blocks (an input's size, read where torch 2.15
        # first needs it): outside to every block, out of its block's nodes so the blocks still align
        self.shared = {n for n in self.block_of if n.op != "placeholder"
                       and all(self.block_of.get(a) is None for a in n.all_input_nodes)
                       and any(self.block_of.get(u, self.block_of[n]) != self.block_of[n] for u in n.users)}
        self.blocks = [[n for n in nodes if n not in self.shared] for nodes in self.blocks]
        self.index = [{n: i for i, n in enumerate(nodes)} for nodes in self.blocks]
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        for node in self.block_of:
            if free_unbacked_symbols(node.meta.get("val")):
                raise _NotRepeating(f"{node.name} has a data-dependent size: each block would have its own")

    def output_blocks(self) -> list[int | None]:
        """The block of each output: a gradient's is its primal's, a user output's (and a mutated buffer's) None."""
        primals = [p for p in self.placeholders if not p.name.startswith("tangents")]
        first = len(self.output.args[0]) - len(primals)  # the user's outputs, then one gradient per primal
        return [None] * first + [self.block_of.get(p) for p in primals]

    def reference(self, block: int, arg: Node) -> tuple[Any, ...]:
        """What ``arg`` is to a node of ``block``: one of its own nodes or parameters, a neighbour's node, or
        outside (a node of a block made of outside values alone and read by other blocks is outside too)."""
        owner = self.block_of.get(arg)
        if owner is None or arg in self.shared:
            return ("outside", arg)
        if arg in self.params[owner]:
            if owner != block:
                raise _NotRepeating(f"block {block} reads another block's parameter ({arg.name})")
            return ("param", self.params[owner][arg])
        if owner - block not in (-1, 0, 1):
            raise _NotRepeating(f"block {block} reads block {owner}'s {arg.name}")
        return ({-1: "previous", 0: "own", 1: "next"}[owner - block], self.index[owner][arg])

    def signature(self, block: int) -> list[Any]:
        from torch.fx.node import map_arg

        out = []
        for node in self.blocks[block]:
            args = map_arg((node.args, node.kwargs), lambda a: self.reference(block, a))  # type: ignore[arg-type,return-value]
            stacks = tuple(str(_renamed_stack(self.path, node.meta.get(k) or {}, 0))
                           for k in ("nn_module_stack", "fwd_nn_module_stack"))
            out.append((node.op, node.target, str(args), _val_key(node.meta.get("val")), stacks,
                        node.meta.get("partitioner_tag"), node.meta.get("autograd_backward")))
        return out


class _NotRepeating(Exception):
    pass


def replicate(gm: GraphModule, path: str, count: int, codegen: Callable[[Any, int, int, int], None]) -> GraphModule | str:
    """The joint graph of ``count`` blocks at ``path`` from ``gm``, a joint trace of the first
    :data:`TRACED_BLOCKS` (see the module docstring); or, when that trace's blocks do not repeat
    as required, a sentence saying why. ``codegen(graph, primals, tangents, outputs)`` gives the
    new graph ``gm``'s calling convention for its numbers of inputs and outputs."""
    import torch

    try:
        regions = _Regions(gm, path)
        for block in (0, TRACED_BLOCKS - 1):
            regions.signature(block)  # reads only its own block, its neighbours and outside
        if regions.signature(1) != regions.signature(2):
            return "the two middle blocks traced differently"
        for node in regions.nodes:
            if node.op != "output" and regions.label.get(node) is None:
                for arg in node.all_input_nodes:
                    if regions.block_of.get(arg) not in (None, 0, TRACED_BLOCKS - 1):
                        raise _NotRepeating(f"{node.name} outside the blocks reads a middle block's {arg.name}")
        for value, block in zip(regions.output.args[0], regions.output_blocks()):
            if isinstance(value, torch.fx.Node) and regions.block_of.get(value) not in (None, block):
                raise _NotRepeating(f"the output {value.name} is not its own block's gradient, nor made outside the "
                                    f"blocks (an output per block, such as each block's hidden state or buffer update)")
        return _build(gm, regions, count, codegen)
    except _NotRepeating as exc:
        return str(exc)


def _build(gm: GraphModule, regions: _Regions, count: int, codegen: Callable[[Any, int, int, int], None]) -> GraphModule:
    import torch
    from torch.fx.node import map_arg

    path, last, middle = regions.path, TRACED_BLOCKS - 1, 2
    extra = count - TRACED_BLOCKS  # blocks made by copying the second middle one: 3 .. count - 2
    copies = range(middle + 1, middle + 1 + extra)

    def final(block: int) -> int:  # where a traced block stands among all
        return count - 1 if block == last else block

    # FX numbers names per base (mm, mm_1, ...), dead nodes included: each block moves the counters
    # on as the middle ones do, so the names are those of the full trace where the steps agree
    steps: dict[str, dict[str, int]] = {"forward": {}, "backward": {}}
    for a, b in zip(regions.blocks[1], regions.blocks[middle]):
        ma, mb = _SUFFIX.match(a.name), _SUFFIX.match(b.name)
        if ma and mb and ma.group(1) == mb.group(1):
            part = regions.label[a][1]  # type: ignore[index]
            step = int(mb.group(2)) - int(ma.group(2))  # the backward runs from the last block to the first
            steps[part].setdefault(ma.group(1), step if part == "forward" else -step)

    def name(node: Node, forwards: int, backwards: int) -> str:
        match = _SUFFIX.match(node.name)
        base, number = (match.group(1), int(match.group(2))) if match else (node.name, 0)
        number += forwards * steps["forward"].get(base, 0) + backwards * steps["backward"].get(base, 0)
        return f"{base}_{number}" if number else base

    graph = torch.fx.Graph()
    outside: dict[Node, Node] = {}
    blocks: dict[int, list[Any]] = {}
    params: dict[int, dict[str, Node]] = {}

    def resolve(layer: int | None, block: int | None, arg: Node) -> Node:
        """``arg`` as read by a node of traced ``block`` standing as block ``layer`` (None: outside)."""
        if block is None:
            owner = regions.block_of.get(arg)
            if owner is None:
                return outside[arg]
            layer, block = final(owner), owner
        kind, where = regions.reference(block, arg)
        if kind == "outside":
            return outside[arg]
        if kind == "param":
            return params[layer][where]  # type: ignore[index]
        made = blocks.get(layer + {"own": 0, "previous": -1, "next": 1}[kind])  # type: ignore[operator]
        found = None if made is None else made[where]
        if found is None:
            raise _NotRepeating(f"{arg.name} is read before its block is made")
        return found

    def emit(node: Node, block: int | None, layer: int | None, forwards: int, backwards: int) -> None:
        new = graph.create_node(node.op, node.target,
                                *map_arg((node.args, node.kwargs), lambda a: resolve(layer, block, a)),  # type: ignore[misc]
                                name=name(node, forwards, backwards))
        new.meta = dict(node.meta)
        if block is None or node in regions.shared:
            outside[node] = new
            return
        if layer != block:
            for key in ("nn_module_stack", "fwd_nn_module_stack"):
                if key in new.meta:
                    new.meta[key] = _renamed_stack(path, new.meta[key], layer)  # type: ignore[arg-type]
        blocks.setdefault(layer, [None] * len(regions.blocks[block]))[regions.index[block][node]] = new  # type: ignore[arg-type]

    numbers = {"primals": 0, "tangents": 0}

    def placeholder(node: Node, layer: int | None) -> None:
        kind = "tangents" if node.name.startswith("tangents") else "primals"
        numbers[kind] += 1
        new = graph.placeholder(f"{kind}_{numbers[kind]}")
        new.meta = dict(node.meta)
        if layer is None:
            outside[node] = new
            return
        new.meta["desc"] = _renamed_desc(path, node.meta["desc"], layer)
        params.setdefault(layer, {})[regions.params[regions.block_of[node]][node]] = new

    def ends_middle_run(items: list[Any], k: int, block_of: Callable[[Any], int | None]) -> bool:
        return block_of(items[k]) == middle and (k + 1 == len(items) or block_of(items[k + 1]) != middle)

    inputs = regions.placeholders
    for k, node in enumerate(inputs):
        block = regions.block_of.get(node)
        placeholder(node, None if block is None else final(block))
        if ends_middle_run(inputs, k, regions.block_of.get):
            run = _trailing_run(inputs[: k + 1], lambda p: regions.block_of.get(p) == middle)
            for layer in copies:
                for p in run:
                    placeholder(p, layer)

    body = [n for n in regions.nodes if n.op not in ("placeholder", "output")]
    forwards = backwards = 0
    for k, node in enumerate(body):
        label = regions.label[node]
        block = None if label is None else label[0]
        emit(node, block, None if block is None else final(block), forwards, backwards)
        if label is None or (k + 1 < len(body) and regions.label[body[k + 1]] == label):
            continue
        part = [n for n in regions.blocks[middle] if regions.label[n][1] == label[1]]  # type: ignore[index]
        if label == (middle, "forward"):
            for layer in copies:
                for n in part:
                    emit(n, middle, layer, layer - middle, 0)
            forwards = extra
        elif label == (last, "backward"):
            for layer in reversed(copies):
                for n in part:
                    emit(n, middle, layer, extra, count - 2 - layer)
            backwards = extra

    values, descs = list(regions.output.args[0]), list(regions.output.meta.get("desc") or [None] * len(regions.output.args[0]))
    of = dict(enumerate(regions.output_blocks()))
    new_values, new_descs = [], []
    for k, value in enumerate(values):
        block = of.get(k)
        layer = None if block is None else final(block)
        new_values.append(value if not isinstance(value, torch.fx.Node) else resolve(layer, block, value))
        new_descs.append(descs[k] if block is None or layer == block else _renamed_desc(path, descs[k], layer))  # type: ignore[arg-type]
        if ends_middle_run(list(range(len(values))), k, of.get):
            run = _trailing_run(list(range(k + 1)), lambda j: of.get(j) == middle)
            for layer in copies:
                for j in run:
                    value = values[j]
                    new_values.append(value if not isinstance(value, torch.fx.Node) else resolve(layer, middle, value))
                    new_descs.append(_renamed_desc(path, descs[j], layer))
    result = graph.output(new_values)
    result.meta = dict(regions.output.meta)
    result.meta["desc"] = new_descs
    codegen(graph, numbers["primals"], numbers["tangents"], len(new_values))
    made = torch.fx.GraphModule(gm, graph)
    made.meta.update(gm.meta)
    if hasattr(gm, "shape_env"):
        made.shape_env = gm.shape_env
    return made


def _trailing_run(items: list[Any], keep: Callable[[Any], bool]) -> list[Any]:
    run: list[Any] = []
    for item in reversed(items):
        if not keep(item):
            break
        run.append(item)
    return run[::-1]
