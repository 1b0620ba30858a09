"""Peak bytes of live tensor storages while a program runs (CPU has no allocator statistics)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shapecore.torch.private import tree_leaves


def _storage(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class LiveBytes(TorchDispatchMode):
    """Tracks every storage an op returns until the last tensor on it dies.

    ``held``: tensors the caller holds for the whole run (parameters, inputs); their storages
    count from the start, and an op returning a view of one allocates nothing. ``peak`` is the
    most bytes live at once, checked after every op.
    """

    def __init__(self, held: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self._tensors: dict[int, int] = {}  # storage pointer -> tensors alive on it
        self._bytes: dict[int, int] = {}
        for t in held:
            ptr, nbytes = _storage(t)
            self._bytes[ptr] = nbytes
            self._tensors[ptr] = 1  # never released: the caller holds it
        self.live = sum(self._bytes.values())
        self.peak = self.live

    def _release(self, ptr: int) -> None:
        self._tensors[ptr] -= 1
        if self._tensors[ptr] == 0:
            del self._tensors[ptr]
            self.live -= self._bytes.pop(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                ptr, nbytes = _storage(t)
                if ptr not in self._tensors:
                    self._tensors[ptr] = 0
                    self._bytes[ptr] = nbytes
                    self.live += nbytes
                self._tensors[ptr] += 1
                weakref.finalize(t, self._release, ptr)
        self.peak = max(self.peak, self.live)
        return out
