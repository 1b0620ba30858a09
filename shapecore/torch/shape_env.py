"""ShapeEnvs across the bridge: what torch's knows, as a shapecore ShapeEnv; shapecore's symbols in torch's.

:func:`from_torch` copies a torch ``ShapeEnv`` into a shapecore :class:`~shapecore.ShapeEnv`:
symbols with torch's names, hints (``backed_var_to_val``), exact ranges (``var_to_range``;
``int_oo`` is open), first source and size-likeness; then, through the env's own verbs so that
contradictions are caught, replacements and divisibility as facts, torch's guards as guards,
deferred runtime asserts as runtime asserts, and last the caller's own facts (a plan's
guards). shapecore's ShapeEnv holds integer symbols only: a float symbol torch specialized (a
module's ``eps`` read as ``zf33 := 1e-5``) is replaced by its value, another one is left out,
and a guard or fact that still mentions one is rejected. State that shapecore finds
contradictory raises :class:`~shapecore.ConstraintError` naming the torch entry.
:func:`torch_guards` and :func:`symbol_ranges` read those parts alone.

The other way, :func:`to_torch_symbols` makes a torch ShapeEnv holding one dynamic symbol per
shapecore name, with a fake mode to trace over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy

from shapecore import functions as F
from shapecore.env import ShapeEnv
from shapecore.errors import ConstraintError, DataDependentError, ShapecoreError
from shapecore.torch.expressions import map_expr, size_expr, torch_symbols

if TYPE_CHECKING:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

__all__ = ["from_torch", "torch_guards", "symbol_ranges", "range_origins", "first_sources", "source_name", "TorchSymbols",
           "to_torch_symbols"]


def _bound(value: sympy.Basic) -> int | None:
    """A range end as an int, or None when torch leaves it open (``int_oo``, ``-int_oo``)."""
    from shapecore.torch.private import int_oo

    if isinstance(value, sympy.Integer):
        return int(value)
    if value in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    raise ShapecoreError(f"torch's range bound {value} is not an integer")


def symbol_ranges(shape_env: TorchShapeEnv) -> dict[str, tuple[int | None, int | None]]:
    """Each integer symbol's range in ``shape_env`` by name: ``(lo, hi)``, None for an open end."""
    return {s.name: (_bound(r.lower), _bound(r.upper)) for s, r in shape_env.var_to_range.items() if s.is_integer}


def range_origins(shape_env: TorchShapeEnv) -> dict[str, tuple[str, str]]:
    """Where torch set each integer symbol's range, by name: ``(lower, upper)``.

    Each is the place torch recorded for that end (``_subclasses/fake_impls.py:1811 in conv``),
    led by the guard recorded there when one was (``guard s77 < 16 at ...``), so an error about
    a value outside the range can say which op or line narrowed it.
    """
    guards: dict[str, str] = {}
    for guard in shape_env.guards:
        guards.setdefault(str(guard.sloc), str(guard.expr))

    def origin(sloc: Any) -> str:
        where = str(sloc).strip()
        guard = guards.get(str(sloc))
        return f"guard {guard} at {where}" if guard else where

    return {s.name: (origin(r.lower), origin(r.upper)) for s, r in shape_env.var_to_range_sloc.items() if s.is_integer}


def source_name(source: Any) -> str:
    """The text of a torch ``Source`` (``L['x'].size()[0]``)."""
    name = source.name
    return name() if callable(name) else name


def first_sources(shape_env: TorchShapeEnv) -> dict[str, str]:
    """Each symbol's first source in ``shape_env``, by name."""
    return {s.name: source_name(srcs[0]) for s, srcs in shape_env.var_to_sources.items() if srcs}


def _recording(what: str, torch_expr: sympy.Basic, record: Callable[[], Any]) -> Any:
    try:
        return record()
    except ConstraintError as exc:
        raise ConstraintError(
            f"torch's ShapeEnv {what} {torch_expr} contradicts the rest of its state for shapecore: {exc}"
        ) from exc


class _Translator:
    """torch's expressions over one torch ShapeEnv, as shapecore expressions over integer symbols.

    Float symbols torch specialized (a constant replacement, e.g. a LayerNorm's ``eps`` read as
    ``zf33``) are substituted by their value first; an expression that still mentions a float
    symbol is rejected, since shapecore's ShapeEnv holds integer symbols only.
    """

    def __init__(self, shape_env: TorchShapeEnv) -> None:
        self.symbols = list(torch_symbols(shape_env).values())
        self.floats = {s for s in self.symbols if not s.is_integer}
        self.fixed = {
            s: value for s, value in shape_env.replacements.items() if s in self.floats and value.is_Number
        }

    def __call__(self, what: str, torch_expr: sympy.Basic) -> sympy.Basic:
        expr = map_expr(torch_expr.xreplace(self.fixed) if self.fixed else torch_expr)
        floats = sorted(s.name for s in expr.free_symbols if not s.is_integer)
        if floats:
            raise ShapecoreError(
                f"torch's {what} {torch_expr} mentions float symbol {', '.join(floats)}; shapecore's ShapeEnv holds "
                f"integer symbols only: specialize float inputs (torch._dynamo.config.specialize_float = True)"
            )
        return expr


def _create_symbols(env: ShapeEnv, shape_env: TorchShapeEnv, symbols: Sequence[sympy.Symbol]) -> None:
    hints = shape_env.backed_var_to_val
    ranges = symbol_ranges(shape_env)
    sources = first_sources(shape_env)
    size_like = {s.name for s in shape_env.size_like}
    unbacked = []
    for symbol in symbols:
        lo, hi = ranges.get(symbol.name, (None, None))
        if symbol in hints:
            _recording(
                "symbol", symbol,
                lambda: env.create_symbol(int(hints[symbol]), name=symbol.name, source=sources.get(symbol.name),
                                          min=lo, max=hi),
            )
        else:
            unbacked.append((symbol, lo, hi))
    for symbol, lo, hi in sorted(unbacked, key=lambda entry: entry[0].name):
        _recording(
            "symbol", symbol,
            lambda: env.create_unbacked_symbol(name=symbol.name, min=lo, max=hi, size_like=symbol.name in size_like,
                                               source=sources.get(symbol.name)),
        )


def _add_guard(env: ShapeEnv, guard: sympy.Basic, torch_guard: sympy.Basic) -> None:
    try:
        result = _recording("guard", torch_guard, lambda: env.evaluate_expr(guard))
    except DataDependentError:
        _recording("guard", torch_guard, lambda: env.defer_runtime_assert(guard, "guard recorded by torch"))
        return
    if result is not True:
        raise ConstraintError(
            f"torch's guard {torch_guard} is false for shapecore under the hints and the rest of torch's "
            f"state (ranges, replacements, divisibility, earlier guards)"
        )


def torch_guards(shape_env: TorchShapeEnv) -> list[sympy.Basic]:
    """torch's recorded guards (``shape_env.guards``) as shapecore expressions, in order.

    Guards about specialized float symbols (``Eq(zf33, 1.0e-5)``) become ``True`` and are left out.
    """
    translate = _Translator(shape_env)
    mapped = (translate("guard", g.expr) for g in shape_env.guards)
    return [g for g in mapped if g is not sympy.true]


def from_torch(shape_env: TorchShapeEnv, *, facts: Iterable[str | sympy.Basic] = (), timeout_ms: int = 1000) -> ShapeEnv:
    """A shapecore :class:`~shapecore.ShapeEnv` holding what torch's ``shape_env`` knows, and ``facts``.

    Symbols keep torch's names, hints, exact ranges and first source. Then, in this order:
    replacements as facts ``Eq(symbol, expr)``, divisibility as facts ``Eq(Mod(a, b), 0)``,
    torch's guards through :meth:`~shapecore.ShapeEnv.evaluate_expr` (a guard the earlier
    state already implies is not recorded again; one on an unbacked symbol becomes a runtime
    assert), deferred runtime asserts through :meth:`~shapecore.ShapeEnv.defer_runtime_assert`,
    and last ``facts`` (guard texts or expressions over torch's symbol names, such as a plan's
    guards) through :meth:`~shapecore.ShapeEnv.add_fact`.
    Float symbols are not created: those torch specialized are replaced by their value, and
    anything that mentions another one is rejected.

    Raises :class:`~shapecore.torch.UnmappableExpressionError` for an expression shapecore cannot
    represent, :class:`~shapecore.ShapecoreError` for a float symbol in a guard or fact, and
    :class:`~shapecore.ConstraintError` when torch's state (or a fact) is contradictory for shapecore.
    """
    translate = _Translator(shape_env)
    env = ShapeEnv(timeout_ms=timeout_ms)
    _create_symbols(env, shape_env, [s for s in translate.symbols if s not in translate.floats])
    for symbol, replacement in shape_env.replacements.items():
        if replacement != symbol and symbol not in translate.fixed:
            torch_fact = sympy.Eq(symbol, replacement, evaluate=False)
            fact = translate("replacement", torch_fact)
            _recording("replacement", torch_fact, lambda: env.add_fact(fact))
    for term in shape_env.divisible:
        fact = sympy.Eq(translate("divisibility", term), 0)
        _recording("divisibility", term, lambda: env.add_fact(fact))
    for guard in shape_env.guards:
        _add_guard(env, translate("guard", guard.expr), guard.expr)
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            claim = translate("runtime assert", ra.expr)
            _recording("runtime assert", ra.expr, lambda: env.defer_runtime_assert(claim, ra.msg or ""))
    for extra in facts:
        env.add_fact(extra)
    return env


# -- shapecore -> torch -------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchSymbols:
    """shapecore names as symbols of a fresh torch ShapeEnv, with a fake mode to trace over it.

    ``symints[name]`` is the SymInt standing for ``name``; ``names`` maps each torch symbol's
    name back to the shapecore name (``s0`` -> ``b0``).
    """

    shape_env: TorchShapeEnv
    fake_mode: Any
    symints: dict[str, Any]
    names: dict[str, str]

    def expr(self, size: int | Any) -> sympy.Basic:
        """A size of this env (an int or a SymInt) as a shapecore expression over the shapecore names."""
        return size_expr(size).xreplace({F.int_symbol(t): F.int_symbol(n) for t, n in self.names.items()})


def to_torch_symbols(hints: Mapping[str, int]) -> TorchSymbols:
    """A torch ShapeEnv with one dynamic backed symbol per name of ``hints`` (hinted with its
    value, sourced ``ConstantSource(name)``), in order, and a ``FakeTensorMode`` over it.

    Hints of 0 and 1 get specialized by torch: give names that must stay symbolic hints of 2 or more.
    """
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

    from shapecore.torch.private import ConstantSource, FakeTensorMode

    shape_env = TorchShapeEnv()
    symints, names = {}, {}
    for name, hint in hints.items():
        source = ConstantSource(name)
        symbol = shape_env.create_symbol(hint, source, dynamic_dim=DimDynamic.DYNAMIC)
        symints[name] = shape_env.create_symintnode(symbol, hint=hint, source=source)
        names[symbol.name] = name
    return TorchSymbols(shape_env, FakeTensorMode(shape_env=shape_env), symints, names)
