"""The shapecore command line: answers, exit codes and error messages."""

import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys

import pytest
import z3

from shapecore import cli, holds, parse
from shapecore.cli import main
from tests.corpus import CORPUS


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


def test_prove_compares_floats_with_big_ints_exactly(capsys):
    assert main(["prove", "5e17 <= 499999999999999999"]) == 1
    assert "refuted" in capsys.readouterr().out


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


# -- simplify / check / explain ------------------------------------------------------------------

ARANGE = "s77 >= ((s77//3))\nNe(s77 - ((s77//3)), 0)\ns77 - ((s77//3)) >= 2\nNe(s77 - ((s77//3)), 1)\n"
VIEW8 = "Eq(Mod(16*s77, 128), 0)\nEq(16*s77, 128*((s77//8)))\nNe(s77, 8)\nEq(Mod(s77, 8), 0)\ns77 >= 2\n"


@pytest.fixture
def guard_file(tmp_path):
    def write(text, name="guards.txt"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def guard_lines(out):
    return [line for line in out.splitlines() if line and not line.startswith("#")]


def test_simplify_drops_the_arange_guards_on_their_range(guard_file, capsys):
    path = guard_file(ARANGE)
    assert main(["simplify", path, "--range", "s77=3..10000"]) == 0
    assert guard_lines(capsys.readouterr().out) == []
    assert main(["simplify", path]) == 0  # without the range one guard is needed
    assert guard_lines(capsys.readouterr().out) == ["s77 - ((s77//3)) >= 2"]


def test_simplify_json_is_one_object(guard_file, capsys):
    assert main(["simplify", guard_file(VIEW8), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["guards", "dropped", "rewritten", "contradiction", "ranges", "backstop_fired", "timed_out"]
    assert document["guards"] == ["s77 >= 16", "Eq(Mod(s77, 8), 0)"] and document["backstop_fired"] is False
    assert document["timed_out"] is False
    assert all(set(d) == {"guard", "reason"} and d["reason"] for d in document["dropped"])
    assert document["contradiction"] is None and document["ranges"] == {"s77": [16, None]}


def test_simplify_says_when_the_wall_clock_backstop_fired(monkeypatch, capsys):
    """With more z3 units than fit in the time, only the backstop stops z3: the answer then depends on the
    machine's load, and the command says so (stderr in text, a field in JSON)."""
    monkeypatch.setattr("shapecore.budget.RLIMIT_PER_MS", 10**9)
    guards = "x*x*x + y*y*y != z*z*z\nx >= 1\ny >= 1\nz >= 1\nx*y > 3\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(guards))
    assert main(["simplify", "-", "--timeout-ms", "100"]) == 0
    captured = capsys.readouterr()
    assert "Ne(x**3 + y**3, z**3)" in captured.out and "wall-clock backstop fired" in captured.err
    monkeypatch.setattr("sys.stdin", io.StringIO(guards))
    assert main(["simplify", "-", "--timeout-ms", "100", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["backstop_fired"] is True


def test_simplify_rewrites_and_assumes(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("Ne(Mod(1, FloorDiv(s0, 2)), 0)\n"))
    assert main(["simplify", "-", "--assume", "s0 > 2", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["guards"] == ["s0 >= 4"]
    assert document["rewritten"] == [{"guard": "Ne(Mod(1, (s0//2)), 0)", "as": "s0 >= 4"}]


def test_simplify_explain_has_a_row_per_input_guard(guard_file, capsys):
    path = guard_file(VIEW8)
    assert main(["simplify", path, "--explain"]) == 0
    out = capsys.readouterr().out
    rows = out.split("\n\n", 1)[1].splitlines()
    assert rows[0].split() == ["where", "guard", "outcome", "why"]
    assert len(rows) == 1 + len(VIEW8.splitlines())
    assert rows[3].startswith(f"{path}:3:1") and "merged into s77 >= 16" in rows[3]
    assert "kept" in rows[4]


def test_simplify_python_format_uses_the_sources(capsys):
    assert main(["simplify", os.path.join(CORPUS, "compile_view8.json"), "--format", "python"]) == 0
    lines = guard_lines(capsys.readouterr().out)
    assert "L['x'].size()[0] % 8 == 0" in lines and "L['x'].size()[0] >= 16" in lines


def test_simplify_reports_a_contradiction_with_exit_1(guard_file, capsys):
    assert main(["simplify", guard_file("s0 >= 5\ns1 >= 0\ns0 <= 3\n")]) == 1
    out = capsys.readouterr().out
    assert "contradiction" in out and guard_lines(out) == ["s0 >= 5", "s0 <= 3"]


def test_check_lists_the_failing_guards(guard_file, capsys):
    path = guard_file(VIEW8)
    assert main(["check", path, "s77=64"]) == 0
    assert "all 5 conditions hold" in capsys.readouterr().out
    assert main(["check", path, "s77=8"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:3:1: Ne(s77, 8)" in out and "Eq(Mod(s77, 8), 0)" not in out


def test_check_prints_each_failing_guard_once_where_it_first_appears(guard_file, capsys):
    """A trace repeats its guards, and two spellings may parse to one guard: each fails once, at its first line."""
    path = guard_file("s0 > 2\ns0 % 4 == 0\ns0 <= 100\ns0 > 2\nEq(Mod(s0, 4), 0)\ns0 > 2\n")
    assert main(["check", path, "s0=1"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "2 of 3 conditions fail for s0=1:",
        f"  {path}:1:1: s0 > 2  (3 times)",
        f"  {path}:2:1: Eq(Mod(s0, 4), 0)  (2 times)",
    ]
    assert main(["check", path, "s0=8"]) == 0
    assert capsys.readouterr().out == "all 3 conditions hold\n"


def test_explain_summarizes_each_symbol(capsys):
    assert main(["explain", os.path.join(CORPUS, "export_view8_derived.json")]) == 0
    out = capsys.readouterr().out
    assert "s6  (source k, hint 8)" in out and "range        [2, 512]" in out
    assert "s77  (source L['x'].size()[0], hint 64)" in out and "replaced by  8*s6" in out


def test_explain_lists_each_distinct_guard_once_with_its_count(guard_file, capsys):
    path = guard_file("s0 >= 2\nEq(Mod(s0, 8), 0)\ns0 >= 2\ns0 <= s1\ns0 >= 2\n")
    assert main(["explain", path]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "s0", "  range        [8, inf]", "  divisible    s0 % 8 == 0",
        f"  guards       {path}:1:1: s0 >= 2  (3 times)", f"               {path}:2:1: Eq(Mod(s0, 8), 0)",
        f"               {path}:4:1: s0 <= s1",
        "s1", "  range        [-inf, inf]", f"  guards       {path}:4:1: s0 <= s1",
    ]


def test_long_work_reports_its_progress_on_stderr(guard_file, monkeypatch, capsys):
    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 0)  # every step is long enough to report
    path = guard_file(VIEW8)
    assert main(["simplify", path]) == 0
    out, err = capsys.readouterr()
    assert guard_lines(out) == ["s77 >= 16", "Eq(Mod(s77, 8), 0)"]
    lines = err.splitlines()
    assert lines[0].startswith("shapecore simplify: normalizing: 0 of 5 (")
    assert any(line.startswith("shapecore simplify: digesting: ") for line in lines)
    assert main(["explain", path]) == 0
    assert "shapecore explain: digesting distinct guards: 0 of 5 (" in capsys.readouterr().err


def test_timeout_gives_a_sound_partial_answer(guard_file, capsys):
    path = guard_file(VIEW8)
    assert main(["simplify", path, "--timeout", "1e-9"]) == 3
    out, err = capsys.readouterr()
    kept = [parse(line) for line in guard_lines(out)]
    assert out.startswith("# 5 of 5 guards kept (0 dropped, 0 rewritten); --timeout fired: maybe not minimal")
    inputs = [parse(line) for line in VIEW8.splitlines()]
    assert all(all(holds(g, {"s77": v}) for g in inputs) == all(holds(g, {"s77": v}) for g in kept) for v in range(-40, 200))
    assert err.startswith("shapecore simplify: --timeout 1e-09 fired (normalizing: 0 of 5): ") and err.count("\n") == 1
    assert "the guards it has not shown redundant are kept, so the result is equivalent to the input" in err
    assert main(["simplify", path, "--timeout", "1e-9", "--format", "json"]) == 3
    assert json.loads(capsys.readouterr().out)["timed_out"] is True
    assert main(["explain", path, "--timeout", "1e-9"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("# --timeout fired: what the first 0 of 5 distinct guards imply is printed")
    assert "  range        [-inf, inf]" in out and f"{path}:3:1: Ne(s77, 8)" in out
    assert err.startswith("shapecore explain: --timeout 1e-09 fired (digesting distinct guards: 0 of 5): ")


@pytest.mark.parametrize(
    "argv, text, message",
    [
        (["simplify"], "s0 >= 2\n  Eq(Mod(s0, 8)\n", ":2:5: syntax error"),
        (["simplify"], '{"format": "shapecore.ShapeEnv",\n "version": 1,}', ":2:15: invalid JSON"),
        (["check"], "s0 >= 2\n", "mentions s0, which has no value; pass s0=VALUE"),
        (["explain"], "Foo(s0)\n", ":1:1: unknown function 'Foo'"),
    ],
)
def test_malformed_guard_files_exit_2_with_location(guard_file, argv, text, message):
    path = guard_file(text)
    result = run(*argv, path, *(["s1=3"] if argv == ["check"] else []))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bad_values_and_missing_files_exit_2(guard_file):
    result = run("check", guard_file("s0 >= 2\n"), "s0=two")
    assert result.returncode == 2 and "s0=two:1:4: the value must be an integer" in result.stderr
    missing = run("simplify", "/nonexistent/guards.txt")
    assert missing.returncode == 2 and "/nonexistent/guards.txt:1:1: cannot read" in missing.stderr
    assert "Traceback" not in result.stderr + missing.stderr


@pytest.mark.parametrize("command", ["simplify", "check", "explain", "suggest"])
def test_new_subcommands_have_help_with_examples(command):
    result = run(command, "--help")
    assert result.returncode == 0 and "examples:" in result.stdout and f"shapecore {command} " in result.stdout


def _extras_only() -> set[str]:
    """The top-level modules of what shapecore's extras bring (torch, mip, hypothesis, ...)."""
    names = {re.match(r"[\w.-]+", r).group() for r in importlib.metadata.requires("shapecore") if "extra ==" in r}
    return {name.replace("-", "_") for name in names} - {"shapecore"}


def test_the_cli_runs_with_shapecore_s_own_dependencies_alone(guard_file):
    blocked = _extras_only()
    assert {"torch", "numpy", "mip", "highspy", "hypothesis"} <= blocked
    path = guard_file(ARANGE)
    commands = [["prove", "n - n//3 >= 2", "--range", "n=3..10000"], ["simplify", path, "--range", "s77=3..10000"],
                ["check", path, "s77=16"], ["explain", path], ["simplify", os.path.join(CORPUS, "compile_view8.json")],
                ["suggest", EXPORT_ERROR]]
    code = (f"import sys\nfor name in {sorted(blocked)!r}:\n    sys.modules[name] = None  # importing it fails\n"
            f"from shapecore.cli import main\nprint([main(argv) for argv in {commands!r}], file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr.splitlines()[-1] == "[0, 0, 0, 0, 0, 0]", result.stderr


# -- suggest ----------------------------------------------------------------------------------------

# an export error: batch from x.view(batch // 4, 4, -1) on x of shape (batch, 3), and dy that must equal dx
EXPORT_ERROR = os.path.join(os.path.dirname(__file__), "..", "data", "export_error_view_by_quarter.txt")


def test_suggest_reads_an_export_error_and_proves_its_suggestion(guard_file, capsys):
    assert main(["suggest", EXPORT_ERROR, "--hint", "batch=8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == ["Suggested fixes:", "  _batch = Dim('_batch', min=2)", "  batch = 4*_batch", "  dy = dx"]
    assert "  _batch: min=2  (forced by Ne((batch//4), 1); rejected min=0: fails at batch=4, dx=0, dy=0)" in out
    assert out[-1] == "Proved: all 4 guards hold under the suggestion."


def test_suggest_reads_a_log_and_exits_3_on_a_guard_no_spec_states(guard_file, capsys):
    prefix = "I1126 18:02:22.957000 21241 torch/fx/experimental/symbolic_shapes.py:{}] "
    log = prefix.format(5743) + "create_symbol s0 = 6 for L['x'].size()[0] [2, int_oo] (fakify)\n"
    log += prefix.format(5743) + "create_symbol s1 = 9 for L['y'].size()[0] [2, int_oo] (fakify)\n"
    log += prefix.format(8081) + "eval s0 <= s1 [guard added] (in f)\n"
    assert main(["suggest", guard_file(log)]) == 3
    out = capsys.readouterr().out
    assert "Not proved under the suggestion (1 of 1 guards):\n  s0 <= s1" in out


@pytest.mark.parametrize("argv, message", [
    (["--hint", "zz=3"], "--hint zz=3: no dim zz in "),
    (["--hint", "batch=x"], "batch=x:1:7: the value must be an integer"),
])
def test_suggest_refuses_bad_hints_in_one_line(argv, message):
    result = run("suggest", EXPORT_ERROR, *argv)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.splitlines()) == 1


def test_suggest_without_guards_exits_2(guard_file):
    result = run("suggest", guard_file("# only a comment\n"))
    assert result.returncode == 2 and "no guard found" in result.stderr and len(result.stderr.splitlines()) == 1


# -- plugin subcommands ----------------------------------------------------------------------------


def _plugin(tmp_path, name: str, value: str, requires: list[str]) -> importlib.metadata.EntryPoint:
    """The ``shapecore.commands`` entry point ``name = value`` of an installed distribution ``tourist``."""
    info = tmp_path / "tourist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tourist\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "entry_points.txt").write_text(f"[shapecore.commands]\n{name} = {value}\n")
    (entry_point,) = importlib.metadata.PathDistribution(info).entry_points
    return entry_point


def test_a_plugin_without_its_extra_exits_2_naming_the_extra(tmp_path, monkeypatch, capsys):
    requires = ["sympy>=1.13", 'no-such-distribution-x>=1; extra == "big-extra"', 'sympy; extra == "Big.Extra"',
                'no-such-distribution-y; extra == "other"']
    plugin = _plugin(tmp_path, "tour", "no_such_module:register [big_extra]", requires)
    monkeypatch.setattr(cli, "_plugins", lambda: {"tour": plugin})
    assert main(["tour", "--help"]) == 2
    assert capsys.readouterr().err == ("shapecore tour: needs tourist's big_extra extra, which is not installed "
                                       "(missing no-such-distribution-x): pip install 'tourist[big_extra]'\n")


def register_tour(subparsers) -> None:
    """A plugin's ``register``: the subcommand ``tour``, which succeeds."""
    subparsers.add_parser("tour").set_defaults(run=lambda args: 0)


def test_a_plugin_with_its_extra_installed_runs(tmp_path, monkeypatch):
    plugin = _plugin(tmp_path, "tour", f"{__name__}:register_tour [big]", ['sympy>=1.13; extra == "big"'])
    monkeypatch.setattr(cli, "_plugins", lambda: {"tour": plugin})
    assert main(["tour"]) == 0
