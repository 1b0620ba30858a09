"""Progress of long work: a line now and then on how far it got, and a wall-clock time limit.

Long work (reading a guard file, ``explain``'s digest, :func:`shapecore.simplify`'s steps)
calls :meth:`Progress.step` as it goes. The first report comes after ``quiet_s`` (so short
runs print nothing), then one every ``every_s``. ``time_limit_s`` is a wall-clock limit on the
whole work (the command line's ``--timeout``): once it has passed, :meth:`step` answers False
and the caller stops at that step with what it has shown so far; each caller documents what
that is and keeps it sound.

Not to be confused with :mod:`shapecore.budget`, which bounds z3's work within one call
(``timeout_ms``: a deterministic count of z3's resource units, with a wall-clock backstop):
a time limit here stops Python's own work too, and an answer it cuts short depends on the
machine's speed and load.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Progress"]


class Progress:
    """Where long work stands, reported through ``report`` (say, a line on stderr), and its
    time limit.

    >>> p = Progress(time_limit_s=3600)
    >>> p.step("reading", 10, 100)
    True
    >>> p.describe()
    'reading: 10 of 100'
    """

    def __init__(self, report: Callable[[str], None] | None = None, *, time_limit_s: float | None = None,
                 quiet_s: float = 2.0, every_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.time_limit_s = time_limit_s
        self.timed_out = False
        self.stage = ""
        self.done = 0
        self.total: int | None = None
        self._report = report
        self._every_s = every_s
        self._clock = clock
        self._start = clock()
        self._next_report = self._start + quiet_s

    def step(self, stage: str, done: int, total: int | None = None) -> bool:
        """Record that ``done`` of ``total`` items of ``stage`` are done (reporting it when a
        report is due); returns whether to go on: False once the time limit has passed (then
        :meth:`describe` keeps saying where the work was when it did)."""
        if self.timed_out:
            return False
        self.stage, self.done, self.total = stage, done, total
        now = self._clock()
        if self._report is not None and now >= self._next_report:
            self._report(f"{self.describe()} ({now - self._start:.1f} s)")
            self._next_report = now + self._every_s
        if self.time_limit_s is not None and now - self._start >= self.time_limit_s:
            self.timed_out = True
        return not self.timed_out

    def describe(self) -> str:
        """How far the work got: ``deciding: 1,200 of 3,170``."""
        counted = f"{self.done:,}" if self.total is None else f"{self.done:,} of {self.total:,}"
        return f"{self.stage}: {counted}"
