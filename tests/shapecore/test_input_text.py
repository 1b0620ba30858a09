"""input_text: offsets, line:column and JSON paths point at the text they name."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecore.errors import GuardInputError
from shapecore.input_text import JsonInput, LocatedText, format_path

_KEYS = st.text("abxyz_\"\\é", min_size=1, max_size=4)
documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text("ab \"\\\n", max_size=4)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)),
    max_leaves=8,
)


def _paths(value, path=()):
    yield path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _paths(child, (*path, key))


@settings(max_examples=60, deadline=None)
@given(document=documents, indent=st.sampled_from([None, 1, 2]))
def test_the_offset_of_a_path_is_where_its_value_is_written(document, indent):
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    source = JsonInput(text, "doc.json")
    decoder = json.JSONDecoder()
    for path, value in _paths(document):
        assert decoder.raw_decode(text, source.offset(path))[0] == value, path


@given(lines=st.lists(st.text("ab ", max_size=5), min_size=1, max_size=5), data=st.data())
def test_line_column_counts_from_one(lines, data):
    text = "\n".join(lines)
    offset = data.draw(st.integers(0, len(text)))
    line, column = LocatedText(text, "f").line_column(offset)
    assert line == text.count("\n", 0, offset) + 1
    assert column == offset - (text.rfind("\n", 0, offset) + 1) + 1


def test_a_value_of_the_wrong_kind_is_named_by_path_and_place():
    text = '{"symbols": [{"hint": 8}, {"hint": "seven"}]}'
    source = JsonInput(text, "env.json")
    with pytest.raises(GuardInputError, match=r'^env\.json:1:36: symbols\[1\]\.hint: expected an integer, got "seven"$'):
        source.value(("symbols", 1, "hint"), "an integer")
    assert text[35:].startswith('"seven"')


def test_unknown_and_missing_fields_are_errors():
    source = JsonInput('{"a": 1, "bb": 2}', "d")
    with pytest.raises(GuardInputError, match="unknown field 'bb'; expected a"):
        source.fields((), ["a"])
    with pytest.raises(GuardInputError, match="the document: missing field 'c'"):
        source.value(("c",), "an integer")
    assert source.value(("c",), "an integer", default=None) is None


@pytest.mark.parametrize("text, token", [('{"a": NaN}', "NaN"), ("[1, -Infinity]", "-Infinity")])
def test_what_json_has_not_is_refused_at_its_place(text, token):
    with pytest.raises(GuardInputError, match=f"invalid JSON: {token}") as info:
        JsonInput(text, "d")
    assert text[info.value.column - 1 :].startswith(token)


def test_format_path():
    assert format_path(("symbols", 3, "hint")) == "symbols[3].hint"
    assert format_path(()) == "the document"
