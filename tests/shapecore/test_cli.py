"""The shapecore command line: answers, exit codes and error messages."""

import subprocess
import sys

import pytest
import z3

from shapecore.cli import main


def run(*argv):
    return subprocess.run([sys.executable, "-m", "shapecore.cli", *argv], capture_output=True, text=True)


def test_prove_exit_codes(capsys):
    facts = ["--assume", "Eq(Mod(b, 4), 0)", "--assume", "Eq(Mod(s, 2), 0)"]
    assert main(["prove", "Eq(Mod(b*s, 8), 0)", *facts]) == 0
    assert "proved (modular)" in capsys.readouterr().out
    assert main(["prove", "Eq(Mod(b*s, 16), 0)", *facts]) == 1
    out = capsys.readouterr().out
    assert "refuted" in out and "counterexample: b=" in out
    assert main(["prove", "n - n//3 >= 2", "--range", "n=3..10000"]) == 0


def test_prove_unknown_exits_3(capsys):
    code = main(["prove", "TruncToInt(IntTrueDiv(s0*s0, 3)) >= 0", "--range", "s0=0..", "--timeout-ms", "50"])
    out = capsys.readouterr().out
    assert code in (0, 3) and (("unknown" in out) == (code == 3))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["prove", "Eq(Mod(s0, 8)"], "<claim>:1:3: syntax error"),
        (["prove", "s0 > 1", "--assume", "Foo(s0)"], "--assume[1]:1:1: unknown function 'Foo'"),
        (["prove", "s0 > 1", "--range", "s0=3..x"], "bounds must be integers"),
        (["prove", "s0 > 1", "--range", "s0"], "expected NAME=LO..HI"),
        (["prove", "s0 + 1"], "expected a claim"),
    ],
)
def test_malformed_input_exits_2_without_traceback(argv, message):
    result = run(*argv)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_smtlib_output_is_a_checkable_script(capsys):
    assert main(["prove", "s0 >= 8", "--assume", "s0 % 8 == 0", "--assume", "s0 >= 1", "--smtlib"]) == 0
    solver = z3.Solver()
    solver.from_string(capsys.readouterr().out)
    assert solver.check() == z3.unsat


def test_help_has_examples():
    result = run("prove", "--help")
    assert result.returncode == 0 and "examples:" in result.stdout and "--range n=3..10000" in result.stdout
