"""Every benchmark under bench/ runs as its docstring says, ``python bench/NAME.py``, from any
directory and without PYTHONPATH: those that read the test suite's models or oracle (the
``tests`` package) put the repository root on their import path themselves (two did not, and
stopped at "No module named 'tests'")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
READING_TESTS = sorted(path.name for path in BENCH.glob("*.py") if "from tests" in path.read_text(encoding="utf-8"))


@pytest.mark.slow  # another interpreter each
@pytest.mark.parametrize("name", READING_TESTS)
def test_a_benchmark_reading_the_tests_package_starts_from_anywhere(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(BENCH / name), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: {name}")
