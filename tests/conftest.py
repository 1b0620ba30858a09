"""Test-wide settings and fixtures.

Hypothesis profiles, picked by ``HYPOTHESIS_PROFILE``: ``default`` locally; ``ci`` when
``CI=true`` (as CI services set it): the same examples, and a failing one is printed with its
reproduction blob (``@reproduce_failure``) so it can be replayed; ``thorough`` for long runs.
A test that hangs fails after pytest-timeout's ``timeout`` (``pyproject.toml``) instead of
holding the run.
"""

import contextlib
import os
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("default", max_examples=150, **_COMMON)
settings.register_profile("ci", max_examples=150, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "default"))


@contextlib.contextmanager
def _busy():
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.2)
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture
def busy_machine():
    """A context manager: while it is open, every core (and one more) spins in another
    process, so the code under test runs several times slower than on an idle machine."""
    return _busy
