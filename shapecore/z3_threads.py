"""shapecore's z3 work and Python's garbage collection in other threads, kept apart.

z3's Python objects give their z3 counterparts back in ``__del__`` (``Z3_dec_ref``,
``Z3_del_context``), and a z3 context must not be used by two threads at once. Every z3 call
goes through ctypes, which releases the GIL while z3 runs. So when another thread of the
program (a progress bar's monitor, a data loader, a logging thread) runs Python's cyclic
garbage collector while shapecore is inside z3, the collector may free z3 objects of the very
context shapecore is using, at the same moment: z3's bookkeeping breaks, and the process
crashes or its heap is corrupted, to be detected much later somewhere else ("malloc():
unaligned tcache chunk detected"). Measured: a thread running ``gc.collect()`` in a loop beside
z3 checks on one context whose expressions sit in reference cycles crashed one run in eight
within 5 s, and two of four within 40 s; ``lowering``'s ranks have such a thread (tqdm's
monitor, which Inductor's compile starts).

:func:`exclusive` holds one re-entrant lock while shapecore uses z3, and a ``gc.callbacks``
hook holds the same lock for every collection, in whichever thread it runs: a collection
waits until shapecore's z3 work is done, and shapecore's z3 work waits until a running
collection ends. A collection that shapecore's own allocations start inside
:func:`exclusive` runs at once (the lock is re-entrant). A long-lived solver session
(:class:`~shapecore.z3backend.Z3Session`, a Reasoner's) gives its z3 objects back inside
:func:`exclusive` too, whichever thread drops it. Not covered: z3 objects that another thread
holds and drops itself (shapecore never hands its z3 objects out), and a collection that waited
:data:`COLLECTION_WAITS_AT_MOST` seconds (it then runs).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["COLLECTION_WAITS_AT_MOST", "exclusive", "held"]

COLLECTION_WAITS_AT_MOST = 10.0
"""Seconds a collection waits for shapecore's z3 work before it runs anyway: a bound, so that a
program whose daemon thread is stopped inside z3 at exit does not hang in its last collections."""

_LOCK = threading.RLock()
_collecting = threading.local()  # whether this thread's running collection holds the lock
_inside = threading.local()  # how deep this thread is in exclusive()


def _around_collection(phase: str, info: dict[str, Any]) -> None:
    """The ``gc.callbacks`` hook: hold the lock from a collection's start to its stop."""
    if phase == "start":
        _collecting.held = not sys.is_finalizing() and _LOCK.acquire(timeout=COLLECTION_WAITS_AT_MOST)
    elif getattr(_collecting, "held", False):  # not after a start without the lock, nor one before the hook
        _collecting.held = False
        _LOCK.release()


gc.callbacks.append(_around_collection)


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Use z3 within this block: no garbage collection runs meanwhile in another thread."""
    with _LOCK:
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            yield
        finally:
            _inside.depth -= 1


def held() -> bool:
    """Whether this thread is inside :func:`exclusive`."""
    return getattr(_inside, "depth", 0) > 0
