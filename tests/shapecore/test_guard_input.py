"""Reading guard sets: plain lines, TORCH_LOGS=dynamic logs, ShapeEnv JSON, the corpus; located errors."""

import glob
import json
import os

import pytest

from shapecore import Progress, ShapeEnv, parse
from shapecore.guard_input import GuardInputError, read_guard_set
from tests.corpus import CORPUS

# Lines of a real TORCH_LOGS=dynamic run (torch 2.13, export with x, y: {0: 8*d}, .item(),
# torch._check, nonzero), with the "for more info" advice cut; other log lines in between.
PREFIX = "I1122 20:36:51.474000 26737 torch/fx/experimental/symbolic_shapes.py:{}] "
LOG = "\n".join(PREFIX.format(n) + line for n, line in [
    (4058, "create_env"),
    (5743, "create_symbol s77 = 64 for L['x'].size()[0] [16, 4000] (_export/non_strict_utils.py:221 in fakify)"),
    (5743, "create_symbol s17 = 64 for L['y'].size()[0] [16, 4000] (_export/non_strict_utils.py:221 in fakify)"),
    (5743, "create_symbol s40 = 8 for d [2, 500] (export/dynamic_shapes.py:575 in _process_equalities)"),
    (5330, "create_unbacked_symint u0 [-int_oo, int_oo] (_subclasses/fake_impls.py:1233 in local_scalar_dense)"),
    (1448, "compute_unbacked_bindings [u0]"),
    (8081, "runtime_assert u0 >= 0 [guard added] (mp/sc/logprobe.py:6 in forward)"),
    (8081, "runtime_assert u0 <= s77 [guard added] (mp/sc/logprobe.py:7 in forward)"),
    (8249, "could not evaluate Eq(u0, 0) due to data dependency, it was assumed to be False with no runtime "
           "assertions (utils/_stats.py:29 in wrapper) "),
    (5330, "create_unbacked_symint u1 [-int_oo, int_oo] (_subclasses/fake_impls.py:1278 in nonzero)"),
    (8777, "constrain_symbol_range u1 [0, 4000]"),
    (8081, "eval Eq(Mod(s77, 8), 0) [guard added] (_prims_common/__init__.py:1118 in infer_size)"),
    (8081, "eval [guard suppressed] 32*((s77//8)) <= 4*s77 [guard added] (utils/_stats.py:29 in wrapper)"),
    (5889, "produce_guards"),
    (8081, "eval Eq(s77, 8*s40) [guard added] (_export/non_strict_utils.py:584 in produce_guards_and_solve_constraints)"),
    (7674, "set_replacement s77 = 8*s40 (solve) VR[16, 4000]"),
    (8081, "runtime_assert u0 <= 8*s40 [guard added] (_ops.py:875 in __call__)"),
])

# torch.export's error for torch.arange(n // 3, n) with n = Dim("n", min=3, max=10000)
VIOLATION = """UserError: Constraints violated (n)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of n = L['x'].size()[0] in the specified range 3 <= n <= 10000 satisfy the generated guard L['x'].size()[0] >= (L['x'].size()[0] // 3).
  - Not all values of n = L['x'].size()[0] in the specified range 3 <= n <= 10000 satisfy the generated guard L['x'].size()[0] + (-1)*(L['x'].size()[0] // 3) >= 2.
  - Not all values of n = L['x'].size()[0] in the specified range 3 <= n <= 10000 satisfy the generated guard (L['x'].size()[0] + (-1)*(L['x'].size()[0] // 3)) != 1.
Suggested fixes:
  _n = Dim('_n', max=3333)
  n = 3*_n - 1
"""


def at(text, where):
    """The text at ``file:line:column``."""
    line, column = (int(p) for p in where.rsplit(":", 2)[1:])
    return text.split("\n")[line - 1][column - 1:]


def test_plain_lines_skip_blanks_and_comments():
    text = "# guards from a run\nEq(Mod(s0, 8), 0)\n\n    s0 % 16 == 0 and s1 >= 2   # python syntax\n"
    guards = read_guard_set(text, "g.txt")
    assert guards.format == "text"
    assert [g.expr for g in guards.guards] == [parse("Eq(Mod(s0, 8), 0)"), parse("Eq(Mod(s0, 16), 0) & (s1 >= 2)")]
    assert [g.where for g in guards.guards] == ["g.txt:2:1", "g.txt:4:5"]


def test_a_repeated_guard_keeps_each_place_and_a_long_read_reports_progress():
    text = "s0 >= 2\n" + "  Ne(s0, 5)  # again\ns0 >= 2\n" * 20_000
    lines = []
    guards = read_guard_set(text, "g.txt", Progress(lines.append, quiet_s=0, every_s=0))
    assert len(guards.guards) == 40_001 and {g.expr for g in guards.guards} == {parse("s0 >= 2"), parse("Ne(s0, 5)")}
    assert [g.where for g in guards.guards[-3:]] == ["g.txt:39999:1", "g.txt:40000:3", "g.txt:40001:1"]
    assert [line.split(" (")[0] for line in lines] == [f"reading: {k * 1024:,} of 40,002" for k in range(1, 40)]
    lines.clear()
    log = read_guard_set(PREFIX.format(1) + "eval s0 >= 2 [guard added]\n" + "other\n" * 2_000, "run.log", Progress(
        lines.append, quiet_s=0, every_s=0))
    assert log.format == "log" and len(log.guards) == 1 and [line.split(" (")[0] for line in lines] == [
        "reading: 1,024 of 2,002"]


def test_malformed_line_is_located():
    with pytest.raises(GuardInputError) as caught:
        read_guard_set("s0 >= 2\n  Eq(Mod(s0, 8)\n", "g.txt")
    assert str(caught.value).startswith("g.txt:2:5: ")
    with pytest.raises(GuardInputError, match=r"^g.txt:1:1: expected a claim"):
        read_guard_set("s0 + 1\n", "g.txt")


def test_log_lines_are_picked_out():
    guards = read_guard_set(LOG, "run.log")
    assert guards.format == "log"
    assert [(g.kind, str(g.expr)) for g in guards.guards] == [
        ("runtime_assert", "u0 >= 0"),
        ("runtime_assert", "u0 <= s77"),
        ("range", "u1 >= 0"),
        ("range", "u1 <= 4000"),
        ("guard", "Eq(Mod(s77, 8), 0)"),
        ("guard", "Eq(s77, 8*s40)"),
        ("replacement", "Eq(s77, 8*s40)"),
        ("runtime_assert", "u0 <= 8*s40"),
    ]
    assert guards.ranges == {"s77": (16, 4000), "s17": (16, 4000), "s40": (2, 500), "u0": (None, None), "u1": (None, None)}
    assert guards.sources == {"s77": "L['x'].size()[0]", "s17": "L['y'].size()[0]", "s40": "d"}
    assert guards.hints == {"s77": 64, "s17": 64, "s40": 8}
    for guard in guards.guards:
        if guard.kind in ("guard", "runtime_assert"):
            assert at(LOG, guard.where).startswith(str(guard.expr) + " [guard added]")
    assert at(LOG, guards.guards[6].where).startswith("s77 = 8*s40 (solve)")


def test_export_violations_are_read_in_terms_of_the_dim():
    guards = read_guard_set(VIOLATION, "err.txt")
    assert [str(g.expr) for g in guards.guards] == ["n >= ((n//3))", "n - ((n//3)) >= 2", "Ne(n - ((n//3)), 1)"]
    assert guards.ranges == {"n": (3, 10000)}
    assert guards.sources == {"n": "L['x'].size()[0]"}
    assert at(VIOLATION, guards.guards[0].where).startswith("L['x'].size()[0] >= (L['x']")


def test_shape_env_json_guards_and_assumptions():
    env = ShapeEnv()
    s0 = env.create_symbol(64, source="x.size()[0]", max=4096)
    env.create_symbol(16, source="x.size()[1]")
    env.add_fact("Eq(Mod(s1, 4), 0)")
    env.evaluate_expr("Eq(Mod(s0, 8), 0)")
    env.evaluate_expr(s0 > 32)
    text = env.to_json()
    guards = read_guard_set(text, "env.json")
    assert guards.format == "shapeenv"
    assert [str(g.expr) for g in guards.guards] == [str(g) for g in env.guards]
    assert {str(a.expr) for a in guards.assumptions} == {"s0 >= 2", "s0 <= 4096", "s1 >= 2", "Eq(Mod(s1, 4), 0)"}
    assert guards.sources == {"s0": "x.size()[0]", "s1": "x.size()[1]"} and guards.hints == {"s0": 64, "s1": 16}
    for guard in guards.guards:
        assert at(text, guard.where).startswith(json.dumps(str(guard.expr))[1:])


def test_every_corpus_case_reads_with_locations():
    paths = sorted(glob.glob(os.path.join(CORPUS, "*.json")))
    assert len(paths) >= 20
    for path in paths:
        with open(path) as handle:
            text = handle.read()
        document = json.loads(text)
        guards = read_guard_set(text, path)
        replaced = {r["symbol"] for r in document["replacements"]}
        ranged = [s for s in document["symbols"] if s["kind"] == "backed" and s["name"] not in replaced]
        kinds = [g.kind for g in guards.guards]
        assert kinds.count("guard") == len(document["guards"])
        assert kinds.count("replacement") == len(document["replacements"])
        assert kinds.count("range") == len(ranged)
        assert kinds.count("runtime_assert") == len(document["runtime_asserts"])
        for guard, entry in zip(guards.guards, document["guards"]):
            assert guard.expr == parse(entry["str"])
            assert at(text, guard.where).startswith(json.dumps(entry["str"])[1:])
        for guard in guards.guards:
            if guard.kind == "range":
                assert at(text, guard.where).startswith('"range"')


def test_json_errors_are_located():
    with pytest.raises(GuardInputError, match=r"^x.json:2:16: invalid JSON"):
        read_guard_set('{"format": "shapecore.ShapeEnv",\n  "version": 1,}', "x.json")
    with pytest.raises(GuardInputError, match="unrecognized JSON"):
        read_guard_set('{"guards": []}', "x.json")
    corpus = '{"schema_version": 1, "symbols": [],\n "guards": [{"str": "s0 >= 2"}, {"str": "Eq(s0,, 1)"}]}'
    with pytest.raises(GuardInputError) as caught:
        read_guard_set(corpus, "c.json")
    assert str(caught.value).startswith("c.json:2:48: guards[1].str: syntax error")  # the second comma
    assert at(corpus, "c.json:2:48").startswith(", 1)")


def _corpus(**fields):
    return {"schema_version": 1, "symbols": [], "guards": [], **fields}


@pytest.mark.parametrize(
    "document, message",
    [
        (_corpus(symbols=[{"kind": "backed"}]), r"symbols\[0\]: missing field 'name'"),
        (_corpus(symbols={"s0": {}}), r"symbols: expected a list"),
        (_corpus(guards=["s0 > 2"]), r"guards\[0\]: expected an object, got \"s0 > 2\""),
        (_corpus(guards=[{"str": 3}]), r"guards\[0\].str: expected a string, got 3"),
        (_corpus(schema_version=2), "schema_version: corpus schema_version 2 is not supported"),
        (_corpus(replacements=[{"symbol": "a b", "str": "1"}]), r"replacements\[0\].symbol: expected a symbol name"),
        (_corpus(symbols=[{"name": "s0", "kind": "backed", "range": ["2"]}]), r"symbols\[0\].range: expected \[lower, upper\]"),
        (_corpus(symbols=[{"name": "s0", "kind": "backed", "hint": "8"}]), r"symbols\[0\].hint: expected an integer or null"),
        (_corpus(runtime_asserts=[{"str": "Eq(u0,, 1)"}]), r"runtime_asserts\[0\].str: syntax error"),
    ],
)
def test_malformed_corpus_json_is_located(document, message):
    # Wrong shapes used to raise AttributeError, KeyError or TypeError.
    with pytest.raises(GuardInputError, match=rf"^c.json:\d+:\d+: {message}"):
        read_guard_set(json.dumps(document, indent=1), "c.json")


def test_corpus_bounds_may_be_integers():
    document = _corpus(symbols=[{"name": "s0", "kind": "backed", "hint": 8, "range": [2, None]}])
    assert [str(g.expr) for g in read_guard_set(json.dumps(document), "c.json").guards] == ["s0 >= 2"]


def test_shape_env_json_is_read_by_the_one_checking_reader():
    # The CLI read ShapeEnv JSON without a version check; it now shares ShapeEnv.from_json's reader.
    env = ShapeEnv()
    env.create_symbol(8)
    document = json.loads(env.to_json())
    document["version"] = 99
    text = json.dumps(document, indent=2)
    with pytest.raises(GuardInputError, match=r"^env.json:3:14: version: ShapeEnv JSON version 99 is not supported"):
        read_guard_set(text, "env.json")
    with pytest.raises(GuardInputError, match=r"^<ShapeEnv JSON>:3:14: version: ShapeEnv JSON version 99"):
        ShapeEnv.from_json(text)
