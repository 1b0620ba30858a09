"""Progress: reports after a quiet start, then now and then; a time limit that stays passed."""

import itertools

from shapecore.progress import Progress


def ticking(step: float = 1.0):
    """A clock that advances ``step`` seconds each time it is read."""
    return map(lambda k: k * step, itertools.count()).__next__


def test_reports_come_after_the_quiet_start_then_every_so_often():
    lines = []
    progress = Progress(lines.append, quiet_s=3, every_s=2, clock=ticking())  # reads 0 at the start
    for done in range(1, 9):
        assert progress.step("reading", done, 8)  # reads 1, 2, ..., 8
    assert lines == ["reading: 3 of 8 (3.0 s)", "reading: 5 of 8 (5.0 s)", "reading: 7 of 8 (7.0 s)"]


def test_without_a_report_or_a_limit_it_always_goes_on():
    progress = Progress(clock=ticking(1000))
    assert all(progress.step("digesting", k) for k in range(100))
    assert not progress.timed_out and progress.describe() == "digesting: 99"


def test_the_time_limit_stops_the_work_and_stays_passed():
    progress = Progress(time_limit_s=3, clock=ticking())
    answers = [progress.step("z3 on group 1 of 2", k, 10) for k in range(6)]
    assert answers == [True, True, False, False, False, False] and progress.timed_out
    assert progress.describe() == "z3 on group 1 of 2: 2 of 10"  # where it was when the limit passed
    big = Progress(time_limit_s=3, clock=ticking())
    big.step("deciding (round 1)", 1234, 56789)
    assert big.describe() == "deciding (round 1): 1,234 of 56,789"
