"""Malformed input through the installed ``shapecore`` command: exit 2, the place named, no traceback.

Exit codes are unambiguous (README): 0 proved, 1 refuted, 2 bad input, 3 unknown, 4 a bug in
shapecore. Each case below used to end in a traceback with exit 1 (which also means refuted),
or to be accepted silently.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore import ShapeEnv
from shapecore.cli import main

COMMAND = shutil.which("shapecore", path=os.path.dirname(sys.executable)) or shutil.which("shapecore")
BIG = 10**400  # beyond a float's range (~1.8e308)


def shapecore(*argv: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess:
    assert COMMAND, "the shapecore command is not installed: pip install -e ."
    return subprocess.run([COMMAND, *argv], input=stdin, capture_output=True, timeout=120)


def assert_refused(result: subprocess.CompletedProcess, message: str) -> None:
    stderr = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr and message in stderr, stderr


@pytest.fixture
def write(tmp_path):
    def write(content: str | bytes, name: str = "guards.txt") -> str:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    return write


# -- integers, sizes and nesting -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["prove", "2**10**10 > 1"], "<claim>:1:1: power too large"),  # was 28 s, then MemoryError
        (["prove", "s0 > 1", "--range", "s0=1e400.."], "--range s0=1e400..:1:4: bounds must be integers"),
        (["prove", "s0 > 1", "--range", f"s0={'9' * 4500}.."], "...:1:4: the value is too large: 4500 digits"),
        (["check", "-", f"s0={'9' * 4500}"], ":1:4: the value is too large"),
        (["prove", " + ".join(["s0"] * 5000) + " >= 0"], "<claim>:1:1: expression too deeply nested"),
        (["prove", " & ".join(["(s0 > 1)"] * 5000)], "<claim>:1:1: expression too deeply nested"),
        (["prove", "not " * 5000 + "s0 > 1"], "<claim>:1:1: expression too deeply nested"),
        (["prove", "-" * 5000 + "s0 > 1"], "<claim>:1:1: expression too deeply nested"),
        (["prove", "s0 > 1", "--assume", "s0" + "//2" * 200 + " > 0"], "--assume[1]:1:"),
        (["prove", "s0 > 1", "--range", "Max=1..2"], "--range Max=1..2:1:1: the name 'Max' cannot name a symbol"),
        (["prove", "s0 > 1", "--timeout-ms", "0"], "argument --timeout-ms: expected a positive integer, got 0"),
    ],
    ids=["power", "float-bound", "huge-bound", "huge-value", "sum", "and", "not", "minus", "nesting", "name", "timeout"],
)
def test_oversized_input_is_refused(argv, message):
    assert_refused(shapecore(*argv), message)


def test_big_integers_get_exact_answers():
    # Both raised OverflowError (exit 1, read as "refuted").
    proved = shapecore("prove", "s0 + 1 > 10**400", "--range", f"s0={BIG}..")
    assert proved.returncode == 0 and proved.stdout.startswith(b"proved"), proved.stderr
    refuted = shapecore("prove", "s0 <= 10**400", "--range", "s0=0..")
    assert refuted.returncode == 1 and b"counterexample: s0=" in refuted.stdout, refuted.stderr


def test_a_long_sum_gets_an_answer():
    proved = shapecore("prove", " + ".join(f"s{i}" for i in range(2000)) + " >= 0",
                       *(a for i in range(2000) for a in ("--range", f"s{i}=0..")))
    assert proved.returncode == 0 and proved.stdout.startswith(b"proved"), proved.stderr


# -- one line, exit 2: arguments that are not claims, and what argparse refuses --------------------


@pytest.mark.parametrize(
    "argv, line",
    [
        (["prove", "s0 + 1"], "shapecore prove: <claim>:1:1: expected a claim such as Eq(Mod(s0, 8), 0) or s0 >= 2, "
                              "got the integer expression s0 + 1"),
        (["prove", "s0 > 1", "--assume", "s0 >= 2", "--assume", "s0 + 1"],
         "shapecore prove: --assume[2]:1:1: expected a claim such as Eq(Mod(s0, 8), 0) or s0 >= 2, got the integer "
         "expression s0 + 1"),
        (["simplify", "-", "--assume", "Max(s0, 2)"], "shapecore simplify: --assume[1]:1:1: expected a claim"),
        (["prove", "s0 > 1", "--timeout-ms", "-5"],
         "shapecore prove: argument --timeout-ms: expected a positive integer, got -5; run 'shapecore prove --help'"),
        (["prove", "s0 > 1", "--timeout-ms", "abc"],
         "shapecore prove: argument --timeout-ms: expected a positive integer, got 'abc'; run 'shapecore prove --help'"),
        (["prove", "s0 > 1", "--timeout-ms"],
         "shapecore prove: argument --timeout-ms: expected one argument; run 'shapecore prove --help'"),
        (["simplify", "-", "--timeout", "nan"],
         "shapecore simplify: argument --timeout: expected a positive number of seconds, got nan; "
         "run 'shapecore simplify --help'"),
        (["explain", "-", "--timeout", "-1"], "shapecore explain: argument --timeout: expected a positive number of "
                                              "seconds, got -1; run 'shapecore explain --help'"),
        ([], "shapecore: the following arguments are required: COMMAND; run 'shapecore --help'"),
        (["proove", "s0 > 1"], "shapecore: argument COMMAND: invalid choice: 'proove' (choose from 'prove', "),
        (["prove", "s0 > 1", "--bogus"], "shapecore prove: unrecognized arguments: --bogus; run 'shapecore prove --help'"),
        (["prove", "s0 > 1", "s1 > 1"], "shapecore prove: unrecognized arguments: s1 > 1; run 'shapecore prove --help'"),
        (["check", "-"], "shapecore check: the following arguments are required: NAME=VALUE; run 'shapecore check --help'"),
        (["simplify", "-", "--format", "xml"], "shapecore simplify: argument --format: invalid choice: 'xml'"),
        (["prove", "s0 >\n\u2028 1 +"], "shapecore prove: <claim>:"),  # the text quoted has its line breaks escaped
        (["prove", "s0 > 1", "--range", "s0=1\r\n..x"], "shapecore prove: --range s0=1\\r\\n..x:1:"),
    ],
    ids=["claim", "assume", "assume-simplify", "negative-ms", "text-ms", "missing-ms", "nan-s", "negative-s",
         "no-command", "unknown-command", "unknown-option", "extra-argument", "missing-value", "choice", "line-breaks",
         "line-breaks-range"],
)
def test_refusals_are_one_line_exit_2_and_nothing_on_stdout(capsys, argv, line):
    # argparse printed its usage (2 to 4 lines) first; the other two named no place
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(line) and err.endswith("\n") and err.count("\n") == 1, err


def test_help_still_explains_each_command_and_both_time_limits(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("prove", "simplify", "check", "explain"):
        assert f"    {command} " in out
    assert "exit codes:" in out and "--timeout-ms MS" in out and "--timeout SECONDS" in out
    assert main(["simplify", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # as wrapped to the terminal's width
    assert "--timeout-ms MS z3's budget" in out and "--timeout SECONDS wall-clock limit" in out


# -- text that is not UTF-8 ------------------------------------------------------------------------


def test_arguments_that_are_not_utf8_are_refused():
    assert_refused(shapecore(b"prove", b"s0 > \xff"), "argument 2 ('s0 > \\xff') is not UTF-8 text")
    assert_refused(shapecore(b"prove", b"s0 > 1", b"--assume", b"\xc3("), "argument 4 ('\\xc3(') is not UTF-8 text")


def test_input_that_is_not_utf8_is_located(write):
    assert_refused(shapecore("simplify", "-", stdin=b"s0 > 1\n\xff\n"), "<stdin>:2:1: not UTF-8 text (byte 0xff")
    path = write(b"s0 > 1\ns1 \xe9 2\n")
    assert_refused(shapecore("check", path, "s0=1", "s1=2"), f"{path}:2:4: not UTF-8 text (byte 0xe9")


def test_lone_surrogates_in_json_strings_are_located(write):
    env = ShapeEnv()
    env.create_symbol(8)
    text = env.to_json().replace('"s0 >= 2"', '"s0 >= \\udcff"')
    assert_refused(shapecore("explain", write(text, "env.json")), "log[0].expr: character U+DCFF is not text")


# -- JSON of the wrong shape -----------------------------------------------------------------------


def _env_json(change) -> str:
    env = ShapeEnv()
    env.create_symbol(8, source="x.size()[0]")
    env.evaluate_expr("s0 > 4")
    document = json.loads(env.to_json())
    change(document)
    return json.dumps(document, indent=2)


@pytest.mark.parametrize(
    "text, message",
    [
        (_env_json(lambda d: d["symbols"][0].update(hint="seven")), ':8:15: symbols[0].hint: expected an integer, got "seven"'),
        (_env_json(lambda d: d["symbols"][0].pop("name")), ":5:5: symbols[0]: missing field 'name'"),
        (_env_json(lambda d: d["symbols"].__setitem__(0, "s0")), ':5:5: symbols[0]: expected an object, got "s0"'),
        (_env_json(lambda d: d.update(version=99)), ":3:14: version: ShapeEnv JSON version 99 is not supported"),
        (_env_json(lambda d: d["log"][1].update(kind="bogus")), ":19:15: log[1].kind: expected one of range, fact"),
        (_env_json(lambda d: d.pop("symbols")), ":1:1: the document: missing field 'symbols'"),
        (_env_json(lambda d: None).replace('"hint": 8', '"hint": NaN'), ":8:15: invalid JSON: NaN"),
        ('{"schema_version": 1, "symbols": [{"kind": "backed"}], "guards": []}', ":1:35: symbols[0]: missing field 'name'"),
        ('{"schema_version": 1, "guards": [3]}', ":1:34: guards[0]: expected an object, got 3"),
    ],
    ids=["hint", "name", "entry", "version", "kind", "missing", "nan", "corpus-name", "corpus-entry"],
)
@pytest.mark.parametrize("command", ["simplify", "explain"])
def test_malformed_json_is_located(write, command, text, message):
    path = write(text, "input.json")
    assert_refused(shapecore(command, path), path + message)


# -- exit codes stay unambiguous -------------------------------------------------------------------


@pytest.mark.parametrize("error", [TypeError("unsupported operand"), RecursionError("maximum recursion depth")])
def test_a_bug_exits_4_in_one_line(monkeypatch, capsys, error):
    # A TypeError used to exit 2 (bad input), any other exception 1 (refuted), with a traceback.
    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr("shapecore.cli.prove", broken)
    assert main(["prove", "s0 > 1"]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"shapecore prove: internal error: {type(error).__name__}: {error} (raised at ")
    assert "this is a bug in shapecore, not in the input" in err and len(err.splitlines()) == 1


# -- fuzz ------------------------------------------------------------------------------------------

_PIECES = [
    "s0", "s1", " ", "1", "-", "+", "*", "//", "%", "**", "(", ")", ",", "&", "|", "~", "not ", "and", ">=", "<",
    "==", "Eq(", "Mod(", "Max(", "FloorDiv(", "10**400", "2**10**10", "1e400", "9" * 4400, "\udcff", "é", "\x00",
    "#", "\n", "[", "]", "{", "}", '"', "lambda", "..", "=",
]
_texts = st.lists(st.sampled_from(_PIECES), max_size=14).map("".join)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["s0", "s0 > 2", "backed", "guard", "seven"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "kind", "hint", "expr", "str", "log", "symbols", "guards", "version", "msg"]), inner,
        max_size=4),
    max_leaves=10,
)
_json_documents = st.builds(
    lambda header, body: json.dumps({**header, **body}),
    st.sampled_from([{"format": "shapecore.ShapeEnv", "version": 1}, {"schema_version": 1, "guards": []}]),
    st.dictionaries(st.sampled_from(["symbols", "log", "guards", "replacements", "runtime_asserts", "version"]),
                    _json_values, max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    command=st.sampled_from(["prove", "simplify", "check", "explain"]),
    text=st.one_of(_texts, _json_documents),
    ranges=st.lists(st.builds("{}={}..{}".format, st.sampled_from(["s0", "s1", "x y", "Eq"]), _texts, _texts), max_size=2),
)
def test_fuzzed_input_never_crashes(command, text, ranges):
    """Whatever the input, the answer is an exit code with a meaning and never an internal error."""
    argv = [command, text] if command == "prove" else [command, "-"]
    if command == "check":
        argv.append("s0=3")
    if command in ("prove", "simplify"):
        argv += [a for r in ranges for a in ("--range", r)] + ["--timeout-ms", "50"]
    stdin = io.TextIOWrapper(io.BytesIO(text.encode("utf-8", "surrogateescape")), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with mock.patch("sys.stdin", stdin), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1, 2, 3), err.getvalue()
    if code == 2:
        assert err.getvalue().startswith("shapecore") and err.getvalue().count("\n") == 1, err.getvalue()
