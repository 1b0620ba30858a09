"""Cost model: seconds for compute and collectives, bytes per device, at every batch point.

Every quantity is a vector over the plan's batch points (:mod:`planner.batches`); the
planner minimizes its expectation. The default :class:`AlphaBetaCostModel`:

* **collectives** — alpha-beta with ring factors on the link the mesh axis runs over. With
  ``n`` ranks on the axis, latency ``a`` (each collective's launch included) and bandwidth
  ``B`` (bytes/s per device): ``all_gather`` ``(n-1)·a + (n-1)/n · out/B``; ``reduce_scatter``
  ``(n-1)·a + (n-1)/n · in/B``; ``all_reduce`` ``2(n-1)·a + 2(n-1)/n · S/B``; ``all_to_all``
  ``(n-1)·a + (n-1)/n · S/B``; a local ``chunk`` or ``to_partial`` is one op: its launch
  (:attr:`Hardware.launch`; its bytes are not priced, as Inductor often fuses the slice or the
  mask into the op that reads it). ``out``/``in``/``S`` are local bytes per device. So every
  step has a fixed cost, and among placements that move the same bytes the plan takes the one
  with fewer steps. A step over a mesh axis of size 1 is nothing (the lowering emits no op for
  it) and costs 0; the planner never places anything but ``Replicate`` on such an axis.
  Mesh axes are laid out innermost-last: the last axes whose sizes multiply to at most
  ``devices_per_node`` use the intra-node link, the others the inter-node link. A
  :class:`Hardware` measured by :func:`planner.calibrate` carries its own figures per mesh axis
  and collective (:class:`LinkCost`); they replace the link's on a mesh of the shape measured.
* **compute** — roofline on local shapes: ``max(flops / peak, bytes moved / memory bandwidth)``,
  with flops of matrix products, attention and convolution counted exactly and one flop per
  output element otherwise; views and layout ops are free.
* **memory** (bytes per device) — what each node's outputs hold while live: parameters,
  their gradients and ``optimizer_states`` copies (training graphs), and activations for
  every other storage; when each is live, and so the peak, is :mod:`planner.problem.liveness`'s.

:class:`Hardware` holds the constants; ``"h100-nvlink"`` (8 GPUs per NVLink node, InfiniBand
between nodes), ``"h100-ib"`` (every axis over InfiniBand) and ``"cpu-gloo"`` (gloo over TCP
loopback, ranks sharing a CPU: measured by :func:`planner.calibrate` on such a host) are presets; pass a ``Hardware`` for other machines, or measure one with
:func:`planner.calibrate` (``Hardware.save``/``Hardware.load`` keep it as JSON).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from planner.graph import GraphNode
from planner.mesh import Mesh
from planner.plan import CollectiveKind

__all__ = ["Hardware", "LinkCost", "HARDWARE_PRESETS", "resolve_hardware", "LocalTensor", "CostModel", "AlphaBetaCostModel", "FREE_OPS"]


HARDWARE_FORMAT = "planner.Hardware"


@dataclass(frozen=True)
class LinkCost:
    """Measured alpha-beta figures of collective ``kind`` on mesh axis ``axis`` (of ``size`` ranks):
    ``latency`` seconds per hop, ``bandwidth`` bytes/s per device, as the cost model's formulas use them."""

    axis: int
    size: int
    kind: CollectiveKind
    latency: float
    bandwidth: float


@dataclass(frozen=True)
class Hardware:
    """Per-device constants: peak FLOP/s (16-bit and 32-bit), memory bandwidth and size, links.

    ``mesh_shape`` and ``links`` are set by :func:`planner.calibrate`: the mesh it measured and
    one :class:`LinkCost` per (mesh axis, collective); on a mesh of that shape they price the
    collectives, on any other the intra/inter-node figures do.
    """

    name: str
    flops: float
    flops_fp32: float
    memory_bandwidth: float
    memory: float
    intra_bandwidth: float
    intra_latency: float
    inter_bandwidth: float
    inter_latency: float
    devices_per_node: int
    mesh_shape: tuple[int, ...] | None = None
    links: tuple[LinkCost, ...] = ()
    launch: float = 5e-6
    """Seconds a local step of a redistribution (``chunk``, ``to_partial``) costs before it moves a
    byte: one op's launch. A collective's launch is part of its latency."""

    def link(self, mesh_shape: Sequence[int], axis: int, kind: str) -> LinkCost | None:
        """The measured figures of ``kind`` on ``axis`` when measured on a mesh of ``mesh_shape``, else None."""
        if self.mesh_shape is None or tuple(mesh_shape) != self.mesh_shape:
            return None
        return next((c for c in self.links if c.axis == axis and c.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON values; :meth:`from_dict` gives back an equal ``Hardware`` (floats round-trip exactly)."""
        data = dataclasses.asdict(self)
        data["mesh_shape"] = None if self.mesh_shape is None else list(self.mesh_shape)
        return {"format": HARDWARE_FORMAT, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hardware:
        if data.get("format") != HARDWARE_FORMAT:
            raise ValueError(f"not a hardware document (format {data.get('format')!r}, expected {HARDWARE_FORMAT!r})")
        optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - optional - set(data))
        if missing:
            raise ValueError(f"hardware document lacks {', '.join(missing)}")
        fields = {k: data[k] for k in names if k in data}
        fields["mesh_shape"] = None if data.get("mesh_shape") is None else tuple(data["mesh_shape"])
        fields["links"] = tuple(LinkCost(**link) for link in data.get("links", ()))
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Hardware:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` (through a temporary file: never half-written)."""
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Hardware:
        """A ``Hardware`` saved by :meth:`save`."""
        with open(path) as f:
            return cls.from_json(f.read())


HARDWARE_PRESETS: dict[str, Hardware] = {
    "h100-nvlink": Hardware("h100-nvlink", 989e12, 67e12, 3.35e12, 80e9, 450e9, 5e-6, 50e9, 10e-6, 8),
    "h100-ib": Hardware("h100-ib", 989e12, 67e12, 3.35e12, 80e9, 50e9, 10e-6, 50e9, 10e-6, 1),
    # calibrate((2,)) on a 2-core x86 host, 2 gloo ranks, other work running, medians of three runs:
    # collectives as a program issues them (0.22 ms a hop; this preset had 0.05 ms), throughput
    # with both ranks computing at once (fp32 23 GFLOP/s; this preset had 100)
    "cpu-gloo": Hardware("cpu-gloo", 1.1e11, 2.3e10, 1.8e10, 16e9, 1.8e9, 2.2e-4, 1.8e9, 2.2e-4, 1 << 20),
}


def resolve_hardware(hardware: str | Hardware) -> Hardware:
    """A preset by name, or the given :class:`Hardware`."""
    if isinstance(hardware, Hardware):
        return hardware
    if hardware not in HARDWARE_PRESETS:
        raise ValueError(f"unknown hardware preset {hardware!r}; presets: {', '.join(HARDWARE_PRESETS)} (or pass a Hardware)")
    return HARDWARE_PRESETS[hardware]


@dataclass(frozen=True)
class LocalTensor:
    """A tensor's per-device shape at every batch point (``dims[d][k]``), bytes per element,
    and the number of batch points."""

    dims: tuple[np.ndarray, ...]
    itemsize: int
    points: int

    @property
    def numel(self) -> np.ndarray:
        out = np.ones(self.points)
        for d in self.dims:
            out = out * d
        return out

    @property
    def nbytes(self) -> np.ndarray:
        return self.numel * self.itemsize


@runtime_checkable
class CostModel(Protocol):
    """What the planner asks of a cost model (vectors are per batch point)."""

    def compute_seconds(self, node: GraphNode, operands: Sequence[LocalTensor], outputs: Sequence[LocalTensor | None]) -> np.ndarray: ...

    def collective_seconds(self, kind: CollectiveKind, axis: int, before: np.ndarray, after: np.ndarray) -> np.ndarray: ...

    def memory_bytes(self, node: GraphNode, outputs: Sequence[LocalTensor | None], *, training: bool, held: bool) -> dict[str, np.ndarray]: ...


FREE_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "unsqueeze", "squeeze", "alias",
    "detach", "slice", "select", "narrow", "as_strided", "_reshape_alias", "lift_fresh_copy", "getitem",
})


def _packet(target: str) -> str:
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else target


class AlphaBetaCostModel:
    """The default cost model (see the module docstring)."""

    def __init__(self, hardware: str | Hardware, mesh: Mesh, *, optimizer_states: float = 2.0) -> None:
        self.hardware = resolve_hardware(hardware)
        self.mesh = mesh
        self.optimizer_states = optimizer_states
        self._links = self._axis_links()

    def _axis_links(self) -> list[tuple[float, float]]:
        """(latency, bandwidth) per mesh axis: innermost axes inside a node."""
        hw = self.hardware
        links: list[tuple[float, float]] = [(0.0, 0.0)] * self.mesh.ndim
        span = 1
        for axis in reversed(range(self.mesh.ndim)):
            span *= self.mesh.shape[axis]
            inside = span <= hw.devices_per_node
            links[axis] = (hw.intra_latency, hw.intra_bandwidth) if inside else (hw.inter_latency, hw.inter_bandwidth)
        return links

    def collective_seconds(self, kind: CollectiveKind, axis: int, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        n = self.mesh.shape[axis]
        if kind not in ("chunk", "to_partial", "all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
            raise ValueError(f"unknown collective {kind!r}")
        if n == 1:
            return np.zeros_like(before)
        hw = self.hardware
        if kind in ("chunk", "to_partial"):  # one local op, which Inductor may fuse into its reader
            return np.full_like(before, hw.launch)
        measured = hw.link(self.mesh.shape, axis, kind)
        latency, bandwidth = (measured.latency, measured.bandwidth) if measured else self._links[axis]
        ring = (n - 1) / n
        if kind == "all_gather":
            return (n - 1) * latency + ring * after / bandwidth
        if kind == "all_reduce":
            return 2 * (n - 1) * latency + 2 * ring * before / bandwidth
        return (n - 1) * latency + ring * before / bandwidth  # reduce_scatter, all_to_all

    def compute_seconds(self, node: GraphNode, operands: Sequence[LocalTensor], outputs: Sequence[LocalTensor | None]) -> np.ndarray:
        name = _packet(node.target)
        tensors = [t for t in outputs if t is not None]
        if name in FREE_OPS or not tensors:
            return np.zeros_like(tensors[0].numel if tensors else operands[0].numel)
        moved = sum((t.nbytes for t in list(operands) + tensors), np.zeros_like(tensors[0].numel))
        flops = self._flops(node, name, operands, tensors)
        itemsize = max([t.itemsize for t in tensors] + [t.itemsize for t in operands])
        peak = self.hardware.flops if itemsize <= 2 else self.hardware.flops_fp32
        return np.maximum(flops / peak, moved / self.hardware.memory_bandwidth)

    @staticmethod
    def _flops(node: GraphNode, name: str, operands: Sequence[LocalTensor], outputs: Sequence[LocalTensor]) -> np.ndarray:
        out = outputs[0]
        if name in ("mm", "addmm", "bmm", "baddbmm"):
            a = operands[-2]
            return 2.0 * out.numel * a.dims[-1]
        if "scaled_dot_product" in name:
            backward = "backward" in name
            q, k = (operands[1], operands[2]) if backward else (operands[0], operands[1])
            b, h, sq, d = q.dims[:4]
            work = 4.0 * b * h * sq * k.dims[2] * d
            return 2.5 * work if backward else work
        if name == "convolution":
            w = operands[1]
            return 2.0 * out.numel * math.prod(w.dims[1:]) if len(w.dims) > 1 else out.numel
        if name == "transformers.grouped_mm_fallback.default":  # [S, K] @ [E, K, N], each row through its expert
            return 2.0 * out.numel * operands[0].dims[-1]
        if name == "transformers.grouped_mm_fallback_backward.default":  # two such products per grad_out row
            return 4.0 * operands[3].numel * operands[0].dims[-1]
        if name == "_grouped_mm":  # torch's: rows through their expert; [M, K] @ [K, N] -> [E, M, N] cuts the contraction
            a = operands[0]
            return 2.0 * (out.dims[-2] * out.dims[-1] if len(a.dims) == len(operands[1].dims) == 2 else out.numel) * a.dims[-1]
        if name == "convolution_backward":
            w = operands[2]
            return 4.0 * operands[0].numel * math.prod(w.dims[1:])
        return out.numel.astype(float)

    def memory_bytes(self, node: GraphNode, outputs: Sequence[LocalTensor | None], *, training: bool, held: bool) -> dict[str, np.ndarray]:
        """Bytes per part that ``node``'s outputs hold while live (``held``: they are a storage
        of their own, not an alias of another node's nor a gradient counted with its parameter)."""
        size = sum((t.nbytes for t in outputs if t is not None), np.zeros(1))  # broadcasts to the points
        if node.role == "param":
            parts = {"parameters": size}
            if training:
                parts["gradients"] = size
                parts["optimizer"] = self.optimizer_states * size
            return parts
        if node.role in ("buffer", "constant"):
            return {"parameters": size}
        return {"activations": size} if held else {}
