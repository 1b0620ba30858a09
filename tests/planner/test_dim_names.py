"""DimNames: the one map between Dim names and trace symbols, read both ways, carried through JSON."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planner.dim_names import DimNames
from shapecore import int_symbol, parse


def test_guards_read_in_dim_names_and_symbols_are_replaced_whole():
    names = DimNames.of({"batch": "s7", "seq": "s77"}, batch="s7")
    assert names.readable("Eq(Mod(s7, 4), 0) & (s77 >= s70)") == "Eq(Mod(batch, 4), 0) & (seq >= s70)"
    assert names.name_of("s7") == "batch" and names.name_of("u0") == "u0"
    assert names.symbols == {"batch": "s7", "seq": "s77"} and names.batch == "s7"


def test_derived_dims_translate_to_their_expression_but_name_no_symbol():
    names = DimNames.of({"k": "s0", "8*k": parse("8*s0")})
    assert names.to_trace(parse("k <= 1024")) == parse("s0 <= 1024")
    assert names.symbols == {"k": "s0"} and names.shown == {"s0": "k"}


def test_a_dim_name_that_is_another_symbol_or_no_name_is_not_shown():
    names = DimNames.of({"s1": "s0", "seq": "s1"})  # reading "s1" back must mean one thing
    assert names.shown == {"s1": "seq"} and names.readable("s0 + s1") == "s0 + seq"
    assert DimNames.of({"if": "s0", "Mod": "s1"}).shown == {}  # found by hypothesis: Eq(Mod(if, 2), 0) does not parse


def test_extended_names_add_to_the_trace_and_keep_the_batch_symbol():
    names = DimNames.of({"batch": "s0"}, batch="s0").extended({"seq": "s1"})
    assert names == DimNames({"batch": int_symbol("s0"), "seq": int_symbol("s1")}, "s0")
    assert DimNames.of(names, batch="s1").batch == "s0"  # a batch symbol already chosen stays
    assert DimNames.of(DimNames.of({}), batch="s1").batch == "s1"


_NAMES = st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True).filter(lambda n: not n.startswith("s")),
                  min_size=1, max_size=4, unique=True)


@given(_NAMES, st.lists(st.integers(-5, 5), min_size=4, max_size=4), st.integers(1, 9))
def test_names_read_back_to_the_trace_exactly(dims, coefficients, divisor):
    names = DimNames.of({name: f"s{k}" for k, name in enumerate(dims)}, batch="s0")
    symbols = [f"s{k}" for k in range(len(dims))] + ["u0"]
    expr = parse(f"Eq(Mod({' + '.join(f'({c})*{s}' for c, s in zip(coefficients, symbols))}, {divisor}), 0)")
    named = names.to_names(expr)
    unshown = {f"s{k}" for k in range(len(dims)) if f"s{k}" not in names.shown}  # a keyword such as "if"
    assert {s.name for s in named.free_symbols} <= set(names.shown.values()) | unshown | {"u0"}
    assert names.to_trace(named) == expr
    assert parse(names.readable(str(expr))) == named
    assert DimNames.from_dict(names.to_dict()) == names
