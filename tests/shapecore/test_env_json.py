"""env_json: read_env_json gives back what ShapeEnv.to_json wrote, and names the place of an error."""

import json

import pytest
from hypothesis import given, settings

from shapecore import parse
from shapecore.env import JSON_FORMAT, JSON_VERSION
from shapecore.env_json import is_env_json, read_env_json
from shapecore.errors import GuardInputError
from shapecore.input_text import JsonInput
from shapecore.testing import shape_envs


@settings(max_examples=25, deadline=None)
@given(env=shape_envs())
def test_reads_back_the_symbols_and_the_log_to_json_wrote(env):
    text = env.to_json()
    written = json.loads(text)
    assert is_env_json(written)
    document = read_env_json(JsonInput(text, "env.json"))
    assert [(s.name, s.kind, s.hint, s.source) for s in document.symbols] == [
        (s["name"], s["kind"], s["hint"], s["source"]) for s in written["symbols"]
    ]
    assert [(e.kind, e.expr, e.msg) for e in document.log] == [
        (e["kind"], parse(e["expr"]), e.get("msg", "")) for e in written["log"]
    ]
    assert all(e.where.startswith("env.json:") for e in document.log)


@pytest.mark.parametrize("document", [[], {"format": "other"}, {"version": JSON_VERSION}, JSON_FORMAT])
def test_is_env_json_only_for_a_shape_env_document(document):
    assert not is_env_json(document)


def test_an_error_names_the_file_line_column_and_path():
    symbol = {"name": "s0", "kind": "backed", "hint": "seven"}
    text = json.dumps({"format": JSON_FORMAT, "version": JSON_VERSION, "symbols": [symbol], "log": []}, indent=1)
    with pytest.raises(GuardInputError, match=r'^env\.json:\d+:\d+: symbols\[0\]\.hint: expected an integer') as info:
        read_env_json(JsonInput(text, "env.json"))
    line = text.split("\n")[info.value.line - 1]
    assert line[info.value.column - 1 :].startswith('"seven"')
