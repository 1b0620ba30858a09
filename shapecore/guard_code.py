"""Guard sets as straight-line Python: generated once with :func:`shapecore.python_str`, compiled once.

:func:`compile_guards` returns a function that checks every guard in order and returns the
first one that does not hold, or ``None`` when all hold. Its semantics are
:func:`shapecore.holds`, guard by guard: a zero divisor (or a float overflow) means the guard
does not hold, and ``And``/``Or`` evaluate every part (:func:`shapecore.python_str` prints them
``&``/``|``: Python's ``and``/``or`` would skip some, and so skip a division by zero), so the
function agrees with ``holds`` on every input.

Calling convention. ``sources`` maps each symbol name to the Python expression that reads its
value, e.g. ``{"s0": "x.size()[0]", "s1": "x.size()[1]"}``; the function takes, as keyword
arguments, the free names of those expressions (here ``x``). Without ``sources`` every symbol
reads itself, so the function takes the symbols as keywords: ``check(s0=16, s1=4)`` or
``check(**values)``. Each symbol's source is evaluated once per call. A symbol counts when the
guard text names it, even if parsing folded it away (``Eq(s1, s1)`` is True, yet the function
takes ``s1``).

>>> check = compile_guards(["Eq(Mod(s0, 8), 0)", "s0 >= 16"])
>>> check(s0=24) is None, str(check(s0=8))
(True, 's0 >= 16')
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import sympy

from shapecore.operations import FLOAT_FUNCTIONS
from shapecore.parsing import named_symbols
from shapecore.printing import PYTHON_NAMESPACE, python_str
from shapecore.reasoner import ExprLike, as_claim
from shapecore.rewrite import divisors, symbols_of
from shapecore.validation import guard_list

__all__ = ["compile_guards", "CompiledGuards"]


class CompiledGuards(Protocol):
    """The function :func:`compile_guards` returns (a plain Python function with attributes)."""

    guards: tuple[sympy.Basic, ...]
    parameters: tuple[str, ...]
    source: str

    def __call__(self, **inputs: object) -> sympy.Basic | None: ...


def _free_names(source: str, symbol: str) -> list[str]:
    """The names a source expression reads (its free variables), in order of appearance."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"source {source!r} of {symbol} is not a Python expression: {error.msg}") from None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in PYTHON_NAMESPACE and not hasattr(builtins, node.id):
            found.append(node.id)
    return list(dict.fromkeys(found))


def _generate(
    claims: list[sympy.Basic], sources: Mapping[str, str], name: str, named: frozenset[str] = frozenset()
) -> tuple[str, list[str]]:
    """``(source code of the function, its parameters)``; ``named``: symbols the text names besides."""
    used = {s.name for c in claims for s in symbols_of(c)}
    missing = sorted(s for s in used if s not in sources)
    if missing:
        raise ValueError(
            f"the guards mention {', '.join(missing)}, which has no source; "
            f"pass sources={{{missing[0]!r}: 'x.size()[0]', ...}} or leave sources out to take symbols as arguments"
        )
    used = sorted(used | (named & sources.keys()))
    local = {s: f"_v_{s}" for s in used}
    parameters = list(dict.fromkeys(p for s in used for p in _free_names(sources[s], s)))
    lines = [f"def {name}({'*, ' + ', '.join(parameters) if parameters else ''}):"]
    lines += [f"    {local[s]} = {sources[s]}" for s in used]
    for i, claim in enumerate(claims):
        test = f"if not ({python_str(claim, local)}): return _guard{i}"
        if divisors(claim) or claim.has(*FLOAT_FUNCTIONS, sympy.Float):
            lines += ["    try:", f"        {test}", "    except ArithmeticError:", f"        return _guard{i}"]
        else:
            lines.append(f"    {test}")
    lines.append("    return None")
    return "\n".join(lines) + "\n", parameters


def compile_guards(guards: Iterable[ExprLike], sources: Mapping[str, str] | None = None) -> CompiledGuards:
    """One Python function checking ``guards`` in order (see the module docstring).

    The function returns None when every guard holds, else the first guard (as given, parsed)
    that does not; it has attributes ``guards``, ``parameters`` and ``source`` (the code).
    Raises ValueError when a guard mentions a symbol without a source.
    """
    guards = guard_list(guards, "guards")
    claims = [as_claim(g) for g in guards]
    named = frozenset(s.name for g in guards if isinstance(g, str) for s in named_symbols(g))
    if sources is None:
        sources = {name: name for name in sorted(named | {s.name for c in claims for s in symbols_of(c)})}
    code, parameters = _generate(claims, sources, "check_guards", named)
    namespace: dict[str, object] = dict(PYTHON_NAMESPACE)
    namespace.update({f"_guard{i}": claim for i, claim in enumerate(claims)})
    exec(compile(code, "<shapecore.compile_guards>", "exec"), namespace)
    function = namespace["check_guards"]
    function.guards = tuple(claims)  # type: ignore[attr-defined]
    function.parameters = tuple(parameters)  # type: ignore[attr-defined]
    function.source = code  # type: ignore[attr-defined]
    return function  # type: ignore[return-value]


def compile_predicate(claims: Iterable[sympy.Basic]) -> Callable[[Mapping[str, object]], bool]:
    """A function of an assignment (name → value): whether every claim holds there."""
    claims = list(claims)
    check = compile_guards(claims, {s.name: f"values[{s.name!r}]" for c in claims for s in symbols_of(c)})
    if not check.parameters:  # no symbols: the claims are constants
        constant = check() is None
        return lambda values: constant
    return lambda values: check(values=values) is None
