"""Repeated layers traced once: the joint graph of a model with a run of identical blocks, built
from a trace of its first :data:`TRACED_BLOCKS` blocks, after checking that the model computes
every other block as it computes the one copied.

A decoder's blocks (an ``nn.ModuleList`` whose children have one structure: the same classes,
parameter and buffer shapes) trace to the same region of the joint graph, each reading the
previous one's output: tracing all of them costs one block's trace per block (about 1 CPU s for a
LLaMA-3 block), which is most of a planning call. :func:`repeated_blocks` finds such a run: the
whole list, or its longest run of consecutive alike blocks among blocks of other structures
(DeepSeek-V3's 29 MoE layers after its 3 dense ones), which are traced as they are and count as
outside the run, those after it renamed to stand where the whole model has them (only the
longest run of the longest list is shared: the other runs are traced as they are).
:func:`truncated` leaves the run's first :data:`TRACED_BLOCKS` blocks in the model while it is traced,
and :func:`replicate` builds the joint graph of all the blocks from that trace: the first and the
last block as traced, the two middle ones checked alike node for node (ops, shapes, module paths,
and what each node reads: its own block's nodes and parameters, the neighbouring blocks' nodes at
the same places, the same nodes outside; a node of a block made of outside values alone and
read by other blocks counts as outside, as torch 2.15 reads a graph input's size in the first
block that needs it where 2.11 to 2.14 read it before the blocks), and the second middle one
copied for every block in between, with its parameters' inputs, gradients and module paths renamed. The result is the graph
the whole model traces to, node for node (names too, as FX numbers them: each copy moves the
per-name counters on by the step between the two middle blocks; tested against the full trace).

What makes that sound is :func:`check_blocks`, run before the trace. The model's forward runs
twice on the meta device (no memory, no arithmetic), under export's compiling state as the trace
runs it: with the traced blocks only, and with every block. Each call of a torch function or tensor
method is recorded (which block makes it; its arguments, a tensor named by the call that made it,
its parameter or its input; its outputs' metadata), and so is each block's call (its arguments)
and what it returns. The run with every block must be the traced run with the middle block's
records repeated for each block in between (its parameters renamed, what it reads of the previous
block read of the previous copy): the same calls on the same tensors, around the blocks too. A
block's attributes may differ from block to block (transformers' ``layer_idx``) only where nothing
reads them: every attribute of a block's modules whose value is not the same in all blocks after
the first is watched while the model runs, and one read refuses the run (Gemma-3's attention type
per layer is read; ``layer_idx`` is not, without a KV cache).

So every block the trace stands for runs the same code on the same arguments, reading the same
attribute values: each computes as the middle block does, size comparisons included (the guards
they record are the same). That is also why the blocks between the traced ones do not run in the
check: each replays the middle block's records as its own and returns the likes of its outputs,
so the check costs two runs of four blocks, and what it compares are the calls around them. What
is left assumed: the forward between the blocks does not compare sizes with a block's index (at
the trace's sizes such a comparison may go one way for every block while the guards it records do
not); no block, nor the forward, keeps state across block calls other than in the modules'
attributes (a global counter) or reads an attribute other than as one (``vars(self)``); and a
forward that treats a block apart on the trace's fake tensors does so on the meta device too.

A run that fails the check, or whose traced blocks do not repeat as :func:`replicate` requires,
is traced whole, and the reason is kept (``Traced.shared_layers``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch
    from torch.fx import GraphModule, Node

__all__ = ["TRACED_BLOCKS", "RepeatedBlocks", "repeated_blocks", "check_blocks", "truncated", "replicate"]

TRACED_BLOCKS = 4
"""Blocks traced of a run: the first, two middle ones (checked alike) and the last."""

_MIDDLE = 2
"""The traced block copied for the blocks between the traced ones."""

_SUFFIX = re.compile(r"(.*)_(\d+)$")  # FX's node names: base_number


class _NotRepeating(Exception):
    pass


class _Place(NamedTuple):
    """Where a run's blocks are named: the list at ``path``, the run's block ``k`` at index ``start + k``;
    the blocks after the run's traced ones stand ``moved`` further on in the whole model."""

    path: str
    start: int = 0
    moved: int = 0


@dataclass(frozen=True)
class RepeatedBlocks:
    """A run of ``count`` blocks of one structure in the ``nn.ModuleList`` ``blocks`` at ``path`` in
    the model, from its block ``start`` (the blocks before and after it, of other structures, are
    traced as they are: DeepSeek-V3's dense layers before its MoE ones).

    ``varying`` names the attributes (``(submodule path in the block, attribute)``) whose values
    are not the same in every block of the run after its first: the forward must not read them
    (:func:`check_blocks`)."""

    path: str
    blocks: Any
    count: int
    varying: tuple[tuple[str, str], ...] = ()
    start: int = 0

    @property
    def members(self) -> list[Any]:
        """The run's blocks."""
        return list(self.blocks)[self.start:self.start + self.count]

    @property
    def place(self) -> _Place:
        """Where the run's blocks are named, traced and in the whole model."""
        return _Place(self.path, self.start, self.count - TRACED_BLOCKS)

    def shared(self) -> str:
        """Which blocks a trace of this run copies: a line for the plan."""
        middle, last = self.start + _MIDDLE, self.start + self.count - 1  # at least TRACED_BLOCKS + 2: two or more copied
        end = len(self.blocks) - 1
        return (f"{self.path}: blocks 0-{middle} and {last}{f'-{end}' if end > last else ''} traced, {middle + 1}-{last - 1} "
                f"copied from block {middle} (each checked to compute as block {middle} does)")


_MODULE_STATE = frozenset({"_parameters", "_buffers", "_modules"})  # compared as structure


def _structure(block: torch.nn.Module) -> tuple[Any, ...]:
    """What a block's trace is made of: its modules' classes, its parameters' and buffers' metadata."""
    def tensors(named: Iterator[tuple[str, Any]]) -> tuple[Any, ...]:
        return tuple((name, type(t), tuple(t.shape), t.dtype, t.layout, t.requires_grad) for name, t in named)

    return (tuple((name, type(module)) for name, module in block.named_modules(remove_duplicate=False)),
            tensors(block.named_parameters(remove_duplicate=False)), tensors(block.named_buffers(remove_duplicate=False)))


def _attributes(block: torch.nn.Module) -> dict[tuple[str, str], Any]:
    """Every attribute of the block's modules but their parameters, buffers and submodules."""
    return {(prefix, name): value for prefix, module in block.named_modules(remove_duplicate=False)
            for name, value in vars(module).items() if name not in _MODULE_STATE}


_PLAIN = (int, float, complex, str, bytes, bool, type(None), enum.Enum)
_MISSING = object()  # an attribute some blocks lack


def _same(first: Any, other: Any) -> bool:
    """Whether two attribute values are provably the same to a forward that reads them: the same
    object, or plain values (numbers, strings, partial functions, containers of them) equal with
    their types; a tensor or any other object only as itself."""
    import torch

    if first is other:
        return True
    if type(first) is not type(other) or isinstance(first, (torch.Tensor, torch.nn.Module)):
        return False
    if isinstance(first, _PLAIN) or isinstance(first, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return bool(first == other)
    if isinstance(first, functools.partial):
        return _same(first.func, other.func) and _same(first.args, other.args) and _same(first.keywords, other.keywords)
    if isinstance(first, (list, tuple)):
        return len(first) == len(other) and all(_same(a, b) for a, b in zip(first, other))
    if isinstance(first, dict):
        return list(first) == list(other) and all(_same(first[k], other[k]) for k in first)
    if isinstance(first, (set, frozenset)):
        return all(isinstance(v, _PLAIN) for v in first) and first == other
    return False


def repeated_blocks(model: torch.nn.Module, *, at_least: int = TRACED_BLOCKS + 2) -> RepeatedBlocks | None:
    """The longest run of at least ``at_least`` consecutive blocks of one structure (module classes,
    parameter and buffer shapes) in an ``nn.ModuleList`` in ``model`` (the whole list, or some of
    its blocks between blocks of other structures), none of whose parameters or buffers is used
    anywhere else; None when there is none. Their attributes may differ (``RepeatedBlocks.varying``)."""
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
        structures = [_structure(b) for b in blocks]
        starts = [k for k in range(len(blocks)) if k == 0 or structures[k] != structures[k - 1]]
        start, end = max(zip(starts, [*starts[1:], len(blocks)]), key=lambda run: run[1] - run[0])
        blocks = blocks[start:end]
        if len(blocks) < at_least or (best is not None and len(blocks) <= best.count):
            continue
        owned = [t for b in blocks for _, t in (*b.named_parameters(remove_duplicate=False), *b.named_buffers(remove_duplicate=False))]
        if any(uses.get(id(t), 0) != 1 for t in owned) or len({id(b) for b in blocks}) != len(blocks):
            continue
        attributes = [_attributes(b) for b in blocks[1:]]
        keys = dict.fromkeys(key for a in attributes for key in a)
        varying = sorted(key for key in keys if key not in attributes[0]
                         or any(key not in other or not _same(attributes[0][key], other[key]) for other in attributes[1:]))
        best = RepeatedBlocks(path, module, len(blocks), tuple(varying), start)
    return best


# -- the check: every block computes as the copied one, on the meta device -----------------------------


class _Recorder:
    """A run of the model on the meta device, recorded: one entry per call of a torch function or
    tensor method and per block call or return, ``(block, what, arguments, outputs)``; a tensor is
    named by the call whose output it is (``("out", index, k)``), its parameter or buffer, or its
    place among the inputs; a value made elsewhere by its metadata (and its data when small), any
    other object as itself."""

    def __init__(self, names: dict[int, tuple[Any, ...]]) -> None:
        self.names = names
        self.records: list[tuple[Any, ...]] = []
        self.block: int | None = None
        self.quiet = False  # the check's own calls (a replayed block's outputs made) are not the model's
        self.outputs: dict[int, Any] = {}  # what each block returned
        self.made: dict[tuple[Any, ...], Any] = {}  # a call's output tensor by its name
        self.alive: list[Any] = []  # every object named by its id stays alive, so no id is reused

    def value(self, value: Any) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            name = self.names.get(id(value))
            if name is None:  # made outside the calls seen (torch.tensor(2.0))
                small = value.device.type != "meta" and value.numel() <= 64
                name = ("tensor", tuple(value.shape), value.dtype, str(value.device),
                        tuple(value.detach().flatten().tolist()) if small else id(value))
                self.names[id(value)] = name
                self.alive.append(value)
            return name
        if isinstance(value, (list, tuple)):
            return (type(value), tuple(self.value(v) for v in value))
        if isinstance(value, dict):
            return (type(value), tuple((k, self.value(v)) for k, v in value.items()))
        if isinstance(value, slice):
            return (slice, self.value(value.start), self.value(value.stop), self.value(value.step))
        if isinstance(value, _PLAIN) or value is Ellipsis or isinstance(
                value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return (type(value), value)
        self.alive.append(value)
        return ("object", id(value))

    def name(self, tensor: Any, name: tuple[Any, ...]) -> None:
        self.names[id(tensor)] = name
        self.made[name] = tensor
        self.alive.append(tensor)

    def called(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        import torch

        index = len(self.records)
        outputs = []
        for k, value in enumerate(out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(value, torch.Tensor):
                self.name(value, ("out", index, k))
                outputs.append((tuple(value.shape), value.stride(), value.dtype, value.requires_grad))
            else:
                outputs.append(self.value(value))
        self.records.append((self.block, func, self.value((args, kwargs)), tuple(outputs)))

    def enter(self, block: int, args: Any, kwargs: Any) -> None:
        self.block = block
        self.records.append((block, "call", self.value((args, kwargs)), ()))

    def leave(self, block: int, output: Any) -> None:
        self.records.append((block, "return", self.value(output), ()))
        self.outputs[block] = output
        self.block = None



def _spans(records: list[tuple[Any, ...]]) -> dict[int, tuple[int, int]]:
    """Where each block's records start and end, for the blocks whose records are in one piece."""
    spans: dict[int, tuple[int, int]] = {}
    pieces: dict[int, int] = {}
    for k, record in enumerate(records):
        block = record[0]
        if block is not None and (k == 0 or records[k - 1][0] != block):
            pieces[block] = pieces.get(block, 0) + 1
            spans[block] = (k, k + 1)
        elif block is not None:
            spans[block] = (spans[block][0], k + 1)
    return {block: span for block, span in spans.items() if pieces[block] == 1}


def _renamed_value(value: Any, place: _Place, layer: int | None, calls: Callable[[int], int]) -> Any:
    """A recorded value as block ``layer`` has it: parameters renamed to that block's, a call's
    output at ``calls(index)``."""
    if isinstance(value, tuple) and value:
        if value[0] == "out" and len(value) == 3:
            return ("out", calls(value[1]), value[2])
        if value[0] == "param" and len(value) == 2 and isinstance(value[1], str):
            return ("param", _after(place, value[1]) if layer is None else _renamed(place, value[1], layer))
        return tuple(_renamed_value(v, place, layer, calls) for v in value)
    return value


def _copied(start: int, end: int, before: int, c: int) -> Callable[[int], int]:
    """Where block :data:`_MIDDLE` + ``c`` reads what the middle block (records ``start:end``)
    reads at ``index``: its own calls moved on by ``c`` blocks, the previous block's (those of
    block :data:`_MIDDLE` - 1 from ``before``) the previous copy's, the rest where they are."""
    length = end - start

    def calls(index: int) -> int:
        if start <= index < end:
            return index + c * length
        if before <= index < before + length:
            return start + (c - 1) * length + index - before
        return index
    return calls


def _expected(records: list[tuple[Any, ...]], place: _Place, count: int) -> list[tuple[Any, ...]] | str:
    """The records of the run with ``count`` blocks that the traced run's records (``TRACED_BLOCKS``
    blocks) stand for: block :data:`_MIDDLE`'s repeated after it for every block in between, the last
    block renumbered; or why the traced run has no such form."""
    spans = _spans(records)
    if sorted(spans, key=lambda b: spans[b]) != list(range(TRACED_BLOCKS)):
        return "the traced blocks do not each run once, in order"
    (start, end), before = spans[_MIDDLE], spans[_MIDDLE - 1][0]
    extra = count - TRACED_BLOCKS
    shift = extra * (end - start)

    def after(index: int, last: bool) -> int:  # the last block reads the last copy, not block MIDDLE
        return index + shift if index >= end or (last and start <= index < end) else index

    expected = records[:end]
    for c in range(1, extra + 1):
        calls = _copied(start, end, before, c)
        expected += [(_MIDDLE + c, r[1], _renamed_value(r[2], place, _MIDDLE + c, calls), r[3]) for r in records[start:end]]
    for block, what, args, outputs in records[end:]:
        layer = None if block is None else count - 1
        args = _renamed_value(args, place, layer, functools.partial(after, last=block is not None))
        expected.append((layer, what, args, outputs))
    return expected


@contextlib.contextmanager
def _attribute_reads(watched: dict[int, frozenset[str]], modules: Sequence[Any],
                     reads: list[tuple[int, str]]) -> Iterator[None]:
    """Each read of an attribute named in ``watched[id(module)]`` of one of ``modules`` is appended
    to ``reads`` as ``(id(module), name)``, inside the context (their classes' ``__getattribute__``
    wrapped, then restored)."""
    names = frozenset().union(*watched.values()) if watched else frozenset()
    classes = list(dict.fromkeys(type(m) for m in modules if id(m) in watched))
    patched: list[tuple[type, Any]] = []

    def wrap(original: Any) -> Any:
        def __getattribute__(self: Any, name: str) -> Any:
            if name in names and name in watched.get(id(self), ()):
                reads.append((id(self), name))
            return original(self, name)
        return __getattribute__

    try:
        for cls in classes:
            patched.append((cls, cls.__dict__.get("__getattribute__")))
            cls.__getattribute__ = wrap(cls.__getattribute__)  # type: ignore[method-assign]
        yield
    finally:
        for cls, own in reversed(patched):
            if own is None:
                del cls.__getattribute__
            else:
                cls.__getattribute__ = own  # type: ignore[method-assign]


@contextlib.contextmanager
def _replayed(recorder: _Recorder, run: RepeatedBlocks) -> Iterator[None]:
    """Blocks :data:`_MIDDLE` + 1 to the last but one do not run inside the context: each records
    the middle block's calls as its own and returns what the middle block returned, as its own
    outputs. Called as the middle block was (the records say), a block of one structure whose
    differing attributes are never read computes as the middle block does; the calls around it
    are what the check reads."""
    from shapecore.torch.private import tree_map

    blocks = run.members

    def stub(c: int) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            import torch

            spans = _spans(recorder.records)
            if _MIDDLE not in spans or _MIDDLE - 1 not in spans:
                raise _NotRepeating(f"blocks {run.start + _MIDDLE - 1} and {run.start + _MIDDLE} do not each run once "
                                    f"before block {run.start + _MIDDLE + c}")
            (start, end), before = spans[_MIDDLE], spans[_MIDDLE - 1][0]
            calls = _copied(start, end, before, c)
            layer = _MIDDLE + c
            recorder.records += [(layer, r[1], _renamed_value(r[2], run.place, layer, calls), r[3])
                                 for r in recorder.records[start + 1:end - 1]]

            def output(value: Any) -> Any:
                if not isinstance(value, torch.Tensor):
                    return value
                name = recorder.names[id(value)]
                renamed = _renamed_value(name, run.place, layer, calls)
                if renamed == name or renamed in recorder.made:
                    return recorder.made.get(renamed, value)
                made = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta",
                                           requires_grad=value.requires_grad)
                recorder.name(made, renamed)
                return made
            recorder.quiet = True
            try:
                return tree_map(output, recorder.outputs[_MIDDLE])
            finally:
                recorder.quiet = False
        return forward

    replaced = [(block, block.__dict__.get("forward")) for block in blocks[_MIDDLE + 1:-1]]
    try:
        for c, (block, _) in enumerate(replaced, start=1):
            block.forward = stub(c)
        yield
    finally:
        for block, own in replaced:
            if own is None:
                del block.forward
            else:
                block.forward = own


def _recorded(model: torch.nn.Module, args: Sequence[Any], run: RepeatedBlocks, *,
              replay: bool, watched: dict[int, frozenset[str]]) -> tuple[list[tuple[Any, ...]], list[tuple[int, str]]]:
    """The records of ``model``'s forward over ``args`` on the meta device (:class:`_Recorder`),
    ``run``'s blocks labelled by their index (``replay``: the whole model, those between the traced
    ones replayed, :func:`_replayed`; else the model :func:`truncated`), and the reads of ``watched``
    attributes."""
    import torch

    from shapecore.torch.private import compiling_state_context

    names: dict[int, tuple[Any, ...]] = {}
    on_meta: dict[int, Any] = {}
    state: dict[str, Any] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(tensor) not in on_meta:
            on_meta[id(tensor)] = torch.empty_like(tensor, device="meta").requires_grad_(tensor.requires_grad)
            names[id(on_meta[id(tensor)])] = ("param", name)
        state[name] = on_meta[id(tensor)]
    inputs = []
    for k, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            value = torch.empty_like(value, device="meta").requires_grad_(value.requires_grad)
            names[id(value)] = ("input", k)
        inputs.append(value)
    recorder = _Recorder(names)

    class Recording(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not recorder.quiet:
                recorder.called(func, args, kwargs or {}, out)
            return out

    blocks = run.members if replay else run.members[:TRACED_BLOCKS]  # truncated: the blocks after the run follow
    hooks = []
    for k, block in enumerate(blocks):
        hooks.append(block.register_forward_pre_hook(lambda m, a, kw, k=k: recorder.enter(k, a, kw), with_kwargs=True))
        hooks.append(block.register_forward_hook(lambda m, a, out, k=k: recorder.leave(k, out)))
    reads: list[tuple[int, str]] = []
    try:
        with contextlib.ExitStack() as stack:
            if replay:
                stack.enter_context(_replayed(recorder, run))
            stack.enter_context(_attribute_reads(watched, [m for b in blocks for m in b.modules()], reads))
            stack.enter_context(compiling_state_context())
            stack.enter_context(Recording())
            output = torch.func.functional_call(model, state, tuple(inputs), tie_weights=True, strict=False)
            recorder.records.append((None, "return", recorder.value(output), ()))
    finally:
        for hook in hooks:
            hook.remove()
    return recorder.records, reads


def check_blocks(model: torch.nn.Module, args: Sequence[Any], run: RepeatedBlocks) -> str | None:
    """None when ``model``'s forward over ``args`` computes every block of ``run`` as a trace of its
    first :data:`TRACED_BLOCKS` blocks, replicated, stands for them (see the module docstring);
    else why not, naming the first block that differs."""
    blocks = run.members
    watched: dict[int, set[str]] = {}
    owner: dict[int, tuple[int, str]] = {}
    for k, block in enumerate(blocks[1:], start=1):
        modules = dict(block.named_modules(remove_duplicate=False))
        for prefix, name in run.varying:
            watched.setdefault(id(modules[prefix]), set()).add(name)
            owner[id(modules[prefix])] = (k, prefix)
    frozen = {k: frozenset(v) for k, v in watched.items()}
    try:
        full, reads = _recorded(model, args, run, replay=True, watched=frozen)
        with truncated(run):
            traced, _ = _recorded(model, args, run, replay=False, watched={})
    except _NotRepeating as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a model that does not run on the meta device is traced whole
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"its forward does not run on the meta device ({type(exc).__name__}: {text})"
    if reads:
        (_, prefix), name = owner[reads[0][0]], reads[0][1]
        values = [_attributes(block).get((prefix, name), _MISSING) for block in blocks[1:]]
        odd = next(k for k, value in enumerate(values, start=1) if not _same(value, values[0]))
        attribute = f"{prefix}.{name}" if prefix else name
        return f"block {run.start + odd}'s {attribute!r} differs from block {run.start + 1}'s, and the forward reads it"
    expected = _expected(traced, run.place, run.count)
    if isinstance(expected, str):
        return expected
    for ours, theirs in zip(expected, full):
        if ours != theirs:
            where = theirs[0] if theirs[0] is not None else ours[0]
            what = {"call": "the arguments it is called with", "return": "what it returns"}.get(
                theirs[1], f"a call of {getattr(theirs[1], '__name__', theirs[1])}")
            if where is None:
                return (f"the forward outside the blocks is not the same with {len(run.blocks)} blocks as with "
                        f"{len(run.blocks) - run.place.moved} ({what})")
            return f"block {run.start + where} is not called or computed as block {run.start + _MIDDLE} is ({what})"
    if len(expected) != len(full):
        return f"the forward with {len(run.blocks)} blocks does not end as with {len(run.blocks) - run.place.moved}"
    return None


@contextlib.contextmanager
def truncated(run: RepeatedBlocks, count: int = TRACED_BLOCKS) -> Iterator[None]:
    """``run``'s list holds the run's first ``count`` blocks only, with the blocks before and after
    the run, inside the context (the blocks after it numbered on from the run's last one held)."""
    every = list(run.blocks)
    del run.blocks[run.start + count:run.start + run.count]
    try:
        yield
    finally:
        del run.blocks[:]
        run.blocks.extend(every)


def _index(place: _Place, name: str) -> int | None:
    """The block index in a dotted name under ``place`` (``layers.3.attention`` -> 3), else None."""
    if not name.startswith(place.path + "."):
        return None
    head = name[len(place.path) + 1:].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _layer(place: _Place, name: str) -> int | None:
    """The traced run's block (counted from its first) of a dotted name under ``place``: ``layers.3.attention``
    -> 3 for a run from block 0, 1 for a run from block 2; None for a block before or after them."""
    index = _index(place, name)
    return index - place.start if index is not None and 0 <= index - place.start < TRACED_BLOCKS else None


def _stack_layer(place: _Place, stack: Any) -> int | None:
    for name, _ in (stack or {}).values():
        found = _layer(place, name)
        if found is not None:
            return found
    return None


def _reindexed(place: _Place, name: str, index: int) -> str:
    head, _, rest = name[len(place.path) + 1:].partition(".")
    return f"{place.path}.{index}" + (f".{rest}" if rest else "")


def _renamed(place: _Place, name: str, layer: int) -> str:
    """A name of one of the traced run's blocks as the run's block ``layer`` has it; any other name as it is."""
    return name if _layer(place, name) is None else _reindexed(place, name, place.start + layer)


def _after(place: _Place, name: str) -> str:
    """A name of a block after the traced run's as the whole model has it (``place.moved`` on); any other as it is."""
    index = _index(place, name)
    return name if index is None or index < place.start + TRACED_BLOCKS else _reindexed(place, name, index + place.moved)


def _renamed_stack(stack: dict[str, Any], rename: Callable[[str], str]) -> dict[str, Any]:
    out = {}
    for key, (name, cls) in stack.items():
        new = rename(name)
        if new != name:
            key = key[: len(key) - len(name)] + new if key.endswith(name) else key
            name = new
        out[key] = (name, cls)
    return out


def _renamed_desc(desc: Any, rename: Callable[[str], str]) -> Any:
    """A parameter's or buffer's descriptor (or a gradient's, through ``grad_of``) renamed; any other as it is."""
    if hasattr(desc, "grad_of"):
        return dataclasses.replace(desc, grad_of=_renamed_desc(desc.grad_of, rename))
    if not isinstance(getattr(desc, "target", None), str):
        return desc
    return dataclasses.replace(desc, target=rename(desc.target))


def _desc_layer(place: _Place, desc: Any) -> int | None:
    desc = getattr(desc, "grad_of", desc)
    target = getattr(desc, "target", None)
    return _layer(place, target) if isinstance(target, str) else None


def _val_key(val: Any) -> Any:
    shape = getattr(val, "shape", None)
    if shape is not None:
        return (str(tuple(shape)), str(val.stride()) if hasattr(val, "stride") else None, str(getattr(val, "dtype", None)))
    return str(val)


class _Regions:
    """The traced graph cut into blocks: each block's forward and backward nodes, its parameters."""

    def __init__(self, gm: GraphModule, place: _Place) -> None:
        self.place = place
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
                layer, part = _stack_layer(place, node.meta["fwd_nn_module_stack"]), "backward"
                label = None if layer is None else (layer, part)
            elif "nn_module_stack" in node.meta:
                layer = _stack_layer(place, node.meta["nn_module_stack"])
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
            layer = _desc_layer(place, node.meta.get("desc"))
            if layer is not None:
                self.params[layer][node] = node.meta["desc"].target.split(".", 2 + place.path.count("."))[-1]
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
                raise _NotRepeating(f"block {self.place.start + block} reads another block's parameter ({arg.name})")
            return ("param", self.params[owner][arg])
        if owner - block not in (-1, 0, 1):
            raise _NotRepeating(f"block {self.place.start + block} reads block {self.place.start + owner}'s {arg.name}")
        return ({-1: "previous", 0: "own", 1: "next"}[owner - block], self.index[owner][arg])

    def signature(self, block: int) -> list[Any]:
        from torch.fx.node import map_arg

        out = []
        for node in self.blocks[block]:
            args = map_arg((node.args, node.kwargs), lambda a: self.reference(block, a))  # type: ignore[arg-type,return-value]
            stacks = tuple(str(_renamed_stack(node.meta.get(k) or {}, functools.partial(_renamed, self.place, layer=0)))
                           for k in ("nn_module_stack", "fwd_nn_module_stack"))
            out.append((node.op, node.target, str(args), _val_key(node.meta.get("val")), stacks,
                        node.meta.get("partitioner_tag"), node.meta.get("autograd_backward")))
        return out


def replicate(gm: GraphModule, path: str, count: int, codegen: Callable[[Any, int, int, int], None], *,
              start: int = 0) -> GraphModule | str:
    """The joint graph of a run of ``count`` blocks ending the list at ``path`` from its block
    ``start`` (those before it are traced as they are) from ``gm``, a joint trace of the run's
    first :data:`TRACED_BLOCKS` (see the module docstring); or, when that trace's blocks do not
    repeat as required, a sentence saying why. ``codegen(graph, primals, tangents, outputs)`` gives the
    new graph ``gm``'s calling convention for its numbers of inputs and outputs."""
    import torch

    try:
        regions = _Regions(gm, _Place(path, start, count - TRACED_BLOCKS))
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

    place, last, middle = regions.place, TRACED_BLOCKS - 1, 2
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
        if block is None and place.moved:  # a block's after the run stands further on
            for key in ("nn_module_stack", "fwd_nn_module_stack"):
                if key in new.meta:
                    new.meta[key] = _renamed_stack(new.meta[key], functools.partial(_after, place))
        if block is None or node in regions.shared:
            outside[node] = new
            return
        if layer != block:
            for key in ("nn_module_stack", "fwd_nn_module_stack"):
                if key in new.meta:
                    new.meta[key] = _renamed_stack(new.meta[key], functools.partial(_renamed, place, layer=layer))  # type: ignore[arg-type]
        blocks.setdefault(layer, [None] * len(regions.blocks[block]))[regions.index[block][node]] = new  # type: ignore[arg-type]

    numbers = {"primals": 0, "tangents": 0}

    def placeholder(node: Node, layer: int | None) -> None:
        kind = "tangents" if node.name.startswith("tangents") else "primals"
        numbers[kind] += 1
        new = graph.placeholder(f"{kind}_{numbers[kind]}")
        new.meta = dict(node.meta)
        if layer is None:
            if "desc" in new.meta:
                new.meta["desc"] = _renamed_desc(new.meta["desc"], functools.partial(_after, place))
            outside[node] = new
            return
        new.meta["desc"] = _renamed_desc(node.meta["desc"], functools.partial(_renamed, place, layer=layer))
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
        new_descs.append(_renamed_desc(descs[k], functools.partial(_after, place)) if block is None
                         else descs[k] if layer == block else _renamed_desc(descs[k], functools.partial(_renamed, place, layer=layer)))
        if ends_middle_run(list(range(len(values))), k, of.get):
            run = _trailing_run(list(range(k + 1)), lambda j: of.get(j) == middle)
            for layer in copies:
                for j in run:
                    value = values[j]
                    new_values.append(value if not isinstance(value, torch.fx.Node) else resolve(layer, middle, value))
                    new_descs.append(_renamed_desc(descs[j], functools.partial(_renamed, place, layer=layer)))
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
