"""The suite's own safety net: a test that hangs fails by itself instead of holding the run
(under ``pytest -n``, xdist then replaces the ended worker and the run goes on)."""

import os
import subprocess
import sys
import textwrap

PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")

STUCK = '''
import z3

def test_stuck_inside_z3():
    x, y, z = z3.Ints("x y z")
    solver = z3.Solver()
    solver.add(x >= 1, y >= 1, z >= 1, x * x * x + y * y * y == z * z * z)  # z3 never decides this
    solver.check()
'''


def test_a_test_stuck_inside_z3_fails_by_timeout(tmp_path):
    """With the project's pytest settings, only the limit shortened."""
    path = tmp_path / "test_stuck.py"
    path.write_text(textwrap.dedent(STUCK))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", PYPROJECT, "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "--timeout", "2", str(path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "+ Timeout +" in output and "test_stuck_inside_z3" in output, output
