"""The bridge between PyTorch's symbolic shapes and shapecore: expressions, ShapeEnvs, traces.

This is the only shapecore module that uses torch, and it imports torch lazily (inside the
functions that need it), so ``import shapecore`` and ``import shapecore.torch_bridge`` never
load torch.

Expressions (:func:`map_expr`, :func:`to_torch`) are rebuilt node by node, never through text:

* torch's ``FloorDiv CleanDiv CeilDiv Mod PythonMod ModularIndexing Max Min ToFloat IntTrueDiv
  FloatTrueDiv TruncToInt FloorToInt CeilToInt RoundToInt TruncToFloat`` map to the shapecore
  classes of the same name; ``PowByNatural`` maps to ``Pow``, ``Identity(x)`` to ``x``; sympy's
  ``Add Mul Pow Mod Max Min``, numbers, relations and ``And Or Not`` map to themselves.
  Values are preserved wherever torch defines them (torch's ``Mod`` is defined only for a
  nonnegative dividend and positive divisor, where it equals Python's ``%``). sympy's ``Add``,
  ``Mul`` and ``Pow`` with a float operand become shapecore's ``FloatAdd``, ``FloatMul`` and
  ``FloatPow`` (Python's float operations, one at a time, in the order of the arguments), and
  back (``FloatPow`` to torch's).
* Symbols keep their names: an integer symbol becomes ``int_symbol(name)``, torch's float
  symbols ``zf*``/``zuf*`` become ``float_symbol(name)``.
* Anything else (``Where``, ``LShift``, ``FloatPow``, ``OpaqueUnaryFn_*``, ``int_oo`` …) is
  rejected with :class:`UnmappableExpressionError`, naming the class and the expression.

:func:`from_torch` copies a torch ``ShapeEnv`` into a shapecore :class:`~shapecore.ShapeEnv`:
symbols with torch's names, hints (``backed_var_to_val``), exact ranges (``var_to_range``;
``int_oo`` is open), first source and size-likeness; then, through the env's own verbs so that
contradictions are caught, replacements and divisibility as facts, torch's guards as guards
and deferred runtime asserts as runtime asserts. shapecore's ShapeEnv holds integer symbols
only: a float symbol torch specialized (a module's ``eps`` read as ``zf33 := 1e-5``) is
replaced by its value, another one is left out, and a guard or fact that still mentions one is
rejected. State that shapecore finds contradictory raises :class:`~shapecore.ConstraintError`
naming the torch entry.

The trace helpers :func:`trace_export`, :func:`trace_compile` and :func:`trace_make_fx` run one
front end and return a :class:`Traced`: the FX graph (``meta["val"]`` symbolic fake tensors),
torch's ShapeEnv, shapecore's, the sources and (export) the user's ``Dim`` names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import sympy

from shapecore import functions as F
from shapecore.env import ShapeEnv
from shapecore.errors import ConstraintError, DataDependentError, ShapecoreError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram
    from torch.fx import GraphModule
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

__all__ = [
    "UnmappableExpressionError",
    "Traced",
    "map_expr",
    "to_torch",
    "from_torch",
    "torch_guards",
    "trace_export",
    "trace_compile",
    "trace_make_fx",
]


class UnmappableExpressionError(ShapecoreError, TypeError):
    """An expression node with no counterpart on the other side of the bridge."""

    def __init__(self, node: sympy.Basic, expr: sympy.Basic, direction: str) -> None:
        self.node_class = type(node).__name__
        self.expr = expr
        super().__init__(
            f"cannot map {self.node_class} ({node}) in {expr} {direction}: shapecore's vocabulary has no "
            f"{self.node_class}; rewrite the model so the shape does not need it, or drop this guard"
        )


# -- expressions: torch -> shapecore ------------------------------------------------------------

_RELATIONS: dict[type, Callable[..., sympy.Basic]] = {
    sympy.Equality: sympy.Eq,
    sympy.Unequality: sympy.Ne,
    sympy.StrictLessThan: sympy.Lt,
    sympy.LessThan: sympy.Le,
    sympy.StrictGreaterThan: sympy.Gt,
    sympy.GreaterThan: sympy.Ge,
}

_SAME_ON_BOTH_SIDES: dict[type, Callable[..., sympy.Basic]] = {
    sympy.Add: sympy.Add,
    sympy.Mul: sympy.Mul,
    sympy.Pow: sympy.Pow,
    sympy.And: sympy.And,
    sympy.Or: sympy.Or,
    sympy.Not: sympy.Not,
    **_RELATIONS,
}


def _identity(x: sympy.Basic) -> sympy.Basic:
    return x


@functools.cache
def _from_torch_table() -> dict[type, Callable[..., sympy.Basic]]:
    import torch.utils._sympy.functions as T

    table: dict[type, Callable[..., sympy.Basic]] = dict(_SAME_ON_BOTH_SIDES)
    # float arithmetic becomes Python's, one operation at a time (exact arithmetic stays sympy's)
    table.update({sympy.Add: F.add, sympy.Mul: F.mul, sympy.Pow: F.power})
    table.update({sympy.Mod: F.Mod, sympy.Max: F.Max, sympy.Min: F.Min})
    table.update(
        {
            T.FloorDiv: F.FloorDiv,
            T.CleanDiv: F.CleanDiv,
            T.CeilDiv: F.CeilDiv,
            T.Mod: F.Mod,
            T.PythonMod: F.PythonMod,
            T.ModularIndexing: F.ModularIndexing,
            T.Max: F.Max,
            T.Min: F.Min,
            T.PowByNatural: sympy.Pow,
            T.Identity: _identity,
            T.ToFloat: F.ToFloat,
            T.IntTrueDiv: F.IntTrueDiv,
            T.FloatTrueDiv: F.FloatTrueDiv,
            T.TruncToInt: F.TruncToInt,
            T.FloorToInt: F.FloorToInt,
            T.CeilToInt: F.CeilToInt,
            T.RoundToInt: F.RoundToInt,
            T.TruncToFloat: F.TruncToFloat,
        }
    )
    return table


def _map_atom(node: sympy.Basic, root: sympy.Basic) -> sympy.Basic:
    if isinstance(node, sympy.Symbol):
        if node.is_integer:
            return F.int_symbol(node.name)
        if F.FLOAT_SYMBOL_NAME.fullmatch(node.name):  # torch's unbacked floats carry no assumptions
            return F.float_symbol(node.name)
        raise UnmappableExpressionError(node, root, "from torch (a symbol neither integer nor named zf<n>/zuf<n>)")
    if isinstance(node, (sympy.Integer, sympy.Rational, sympy.Float)) and node.is_finite:
        return node
    if node is sympy.true or node is sympy.false:
        return node
    raise UnmappableExpressionError(node, root, "from torch")


def _printed_args(node: sympy.Basic) -> tuple[sympy.Basic, ...]:
    """``node``'s arguments in the order it prints them, which Python evaluates a float sum in."""
    if isinstance(node, sympy.Add):
        return tuple(node.as_ordered_terms())
    if isinstance(node, sympy.Mul):
        return tuple(node.as_ordered_factors())
    return node.args


def _rebuild(expr: sympy.Basic, table: Mapping[type, Callable[..., sympy.Basic]],
             leaf: Callable[[sympy.Basic, sympy.Basic], sympy.Basic], direction: str) -> sympy.Basic:
    """``expr`` rebuilt bottom-up: each node through ``table[type(node)]``, atoms through ``leaf``."""
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(node: sympy.Basic) -> sympy.Basic:
        if node in memo:
            return memo[node]
        if not node.args:
            result = leaf(node, expr)
        else:
            build = table.get(type(node))
            if build is None:
                raise UnmappableExpressionError(node, expr, direction)
            result = build(*(visit(a) for a in _printed_args(node)))
        memo[node] = result
        return result

    return visit(expr)


def map_expr(expr: sympy.Basic) -> sympy.Basic:
    """torch's expression ``expr`` (from ``torch.utils._sympy``) as a shapecore expression.

    Raises :class:`UnmappableExpressionError` for a node class shapecore has no counterpart for.
    """
    return _rebuild(expr, _from_torch_table(), _map_atom, "from torch")


# -- expressions: shapecore -> torch ------------------------------------------------------------

_SIZE_NAME = re.compile(r"s\d+")


def _torch_symbol(name: str, known: Mapping[str, sympy.Symbol] | None) -> sympy.Symbol:
    if known is not None:
        try:
            return known[name]
        except KeyError:
            raise KeyError(
                f"symbol {name} is not in the torch ShapeEnv; it has: {', '.join(sorted(known)) or 'none'}"
            ) from None
    if F.FLOAT_SYMBOL_NAME.fullmatch(name):
        return sympy.Symbol(name, real=True)
    if _SIZE_NAME.fullmatch(name):
        return sympy.Symbol(name, integer=True, positive=True)
    return sympy.Symbol(name, integer=True)


@functools.cache
def _to_torch_table() -> dict[type, Callable[..., sympy.Basic]]:
    import torch.utils._sympy.functions as T

    def mod(p: sympy.Basic, q: sympy.Basic) -> sympy.Basic:
        # torch's Mod claims a nonnegative result: true of Python's % when the divisor is.
        return T.Mod(p, q) if q.is_nonnegative else T.PythonMod(p, q)

    def ceil_div(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
        # torch's CeilDiv rewrites itself to FloorDiv(a + b - 1, b), exact only for b > 0.
        return -T.FloorDiv(-a, b)

    table: dict[type, Callable[..., sympy.Basic]] = dict(_SAME_ON_BOTH_SIDES)
    table.update(
        {
            F.FloorDiv: T.FloorDiv,
            F.CleanDiv: T.CleanDiv,
            F.CeilDiv: ceil_div,
            F.Mod: mod,
            F.PythonMod: T.PythonMod,
            F.ModularIndexing: T.ModularIndexing,
            F.Max: T.Max,
            F.Min: T.Min,
            F.ToFloat: T.ToFloat,
            F.IntTrueDiv: T.IntTrueDiv,
            F.FloatTrueDiv: T.FloatTrueDiv,
            F.TruncToInt: T.TruncToInt,
            F.FloorToInt: T.FloorToInt,
            F.CeilToInt: T.CeilToInt,
            F.RoundToInt: T.RoundToInt,
            F.TruncToFloat: T.TruncToFloat,
            F.FloatAdd: sympy.Add,
            F.FloatMul: sympy.Mul,
            F.FloatPow: T.FloatPow,
        }
    )
    return table


def _torch_symbols(shape_env: TorchShapeEnv) -> dict[str, sympy.Symbol]:
    symbols = list(shape_env.var_to_range) + list(_torch_hints(shape_env))
    return {s.name: s for s in symbols}


def to_torch(
    expr: sympy.Basic,
    shape_env: TorchShapeEnv | None = None,
    *,
    symbols: Mapping[str, sympy.Symbol] | None = None,
) -> sympy.Basic:
    """shapecore's ``expr`` in ``torch.utils._sympy.functions`` classes, for torch to use.

    Symbols: torch's own symbol of that name from ``shape_env`` or ``symbols`` (name → torch
    symbol; a name missing from them raises ``KeyError``); when neither is given, ``s<n>`` is
    ``Symbol(name, integer=True, positive=True)`` (torch's backed sizes), ``zf*``/``zuf*`` are
    real and every other name is integer only.
    ``Mod`` becomes torch's ``Mod`` when its divisor is nonnegative under those assumptions (then
    Python's ``%`` is nonnegative, as torch's ``Mod`` claims) and ``PythonMod`` otherwise;
    ``CeilDiv(a, b)`` becomes ``-FloorDiv(-a, b)``; ``Pow`` stays sympy's. Values are preserved.
    torch simplifies as it builds, under its symbols' assumptions: a divisor that folds to zero
    there (``s0 // (0 // s0)``) raises ``ZeroDivisionError``.
    """
    known: dict[str, sympy.Symbol] | None = None
    if shape_env is not None or symbols is not None:
        known = _torch_symbols(shape_env) if shape_env is not None else {}
        known.update(symbols or {})

    def leaf(node: sympy.Basic, root: sympy.Basic) -> sympy.Basic:
        if isinstance(node, sympy.Symbol):
            return _torch_symbol(node.name, known)
        if isinstance(node, (sympy.Number, sympy.logic.boolalg.BooleanAtom)):
            return node
        raise UnmappableExpressionError(node, root, "to torch")

    return _rebuild(expr, _to_torch_table(), leaf, "to torch")


# -- ShapeEnv: torch -> shapecore ---------------------------------------------------------------


def _torch_hints(shape_env: TorchShapeEnv) -> Mapping[sympy.Symbol, sympy.Basic]:
    hints = getattr(shape_env, "backed_var_to_val", None)
    return hints if hints is not None else shape_env.var_to_val


def _bound(value: sympy.Basic) -> int | None:
    """A range end as an int, or None when torch leaves it open (``int_oo``, ``-int_oo``)."""
    from torch.utils._sympy.numbers import int_oo

    if isinstance(value, sympy.Integer):
        return int(value)
    if value in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    raise ShapecoreError(f"torch's range bound {value} is not an integer")


def _source_name(source: Any) -> str:
    name = source.name
    return name() if callable(name) else name


def _first_sources(shape_env: TorchShapeEnv) -> dict[str, str]:
    return {s.name: _source_name(srcs[0]) for s, srcs in shape_env.var_to_sources.items() if srcs}


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
        self.symbols = list(dict.fromkeys([*shape_env.var_to_range, *_torch_hints(shape_env)]))
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
    hints = _torch_hints(shape_env)
    sources = _first_sources(shape_env)
    size_like = {s.name for s in getattr(shape_env, "size_like", ())}
    unbacked = []
    for symbol in symbols:
        r = shape_env.var_to_range.get(symbol)
        lo, hi = (_bound(r.lower), _bound(r.upper)) if r is not None else (None, None)
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


def from_torch(shape_env: TorchShapeEnv, *, timeout_ms: int = 1000) -> ShapeEnv:
    """A shapecore :class:`~shapecore.ShapeEnv` holding what torch's ``shape_env`` knows.

    Symbols keep torch's names, hints, exact ranges and first source. Then, in this order:
    replacements as facts ``Eq(symbol, expr)``, divisibility as facts ``Eq(Mod(a, b), 0)``,
    torch's guards through :meth:`~shapecore.ShapeEnv.evaluate_expr` (a guard the earlier
    state already implies is not recorded again; one on an unbacked symbol becomes a runtime
    assert), deferred runtime asserts through :meth:`~shapecore.ShapeEnv.defer_runtime_assert`.
    Float symbols are not created: those torch specialized are replaced by their value, and
    anything that mentions another one is rejected.

    Raises :class:`UnmappableExpressionError` for an expression shapecore cannot represent,
    :class:`~shapecore.ShapecoreError` for a float symbol in a guard or fact, and
    :class:`~shapecore.ConstraintError` when torch's state is contradictory for shapecore.
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
    return env


# -- tracing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Traced:
    """One trace handed over to shapecore.

    ``graph_module`` is the FX graph whose ``meta["val"]`` are symbolic fake tensors (None when
    export failed and the failure was returned). ``torch_guards`` are torch's recorded guards
    mapped to shapecore, in order (``env.guards`` omits those the rest of the state implies).
    ``sources`` maps a symbol name to the first source torch knows it by (``L['x'].size()[0]``).
    Export only: ``dims`` maps each user ``Dim`` name that is a single symbol to that symbol's
    name, ``dim_exprs`` every ``Dim`` name (derived ones such as ``8*k`` too) to its expression
    over symbols; ``exported`` is the ``ExportedProgram`` and ``error`` the text of the
    "Constraints violated" error when it was returned instead of raised.
    """

    graph_module: GraphModule | None
    torch_env: TorchShapeEnv
    env: ShapeEnv
    torch_guards: list[sympy.Basic]
    sources: dict[str, str]
    dims: dict[str, str] = field(default_factory=dict)
    dim_exprs: dict[str, sympy.Basic] = field(default_factory=dict)
    exported: ExportedProgram | None = None
    error: str | None = None


def _shape_env_of(values: Sequence[Any]) -> TorchShapeEnv:
    from torch._guards import detect_fake_mode

    fake_mode = detect_fake_mode(list(values))
    if fake_mode is None or fake_mode.shape_env is None:
        raise ShapecoreError(
            "the traced graph has no symbolic fake tensors: nothing was traced with dynamic shapes "
            "(mark a dimension dynamic, or pass dynamic_shapes / tracing_mode='symbolic')"
        )
    return fake_mode.shape_env


def _placeholder_values(gm: GraphModule) -> list[Any]:
    return [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]


def _traced(gm: GraphModule | None, shape_env: TorchShapeEnv, timeout_ms: int, **extra: Any) -> Traced:
    return Traced(
        graph_module=gm,
        torch_env=shape_env,
        env=from_torch(shape_env, timeout_ms=timeout_ms),
        torch_guards=torch_guards(shape_env),
        sources=_first_sources(shape_env),
        **extra,
    )


def _user_dims(dynamic_shapes: Any) -> list[Any]:
    """Every ``torch.export.Dim`` in a ``dynamic_shapes`` spec, roots of derived dims included."""
    from torch.export import Dim

    found: list[Any] = []

    def walk(spec: Any) -> None:
        if isinstance(spec, Dim):
            found.append(spec)
            root = getattr(spec, "root", None)
            if root is not None:
                walk(root)
        elif isinstance(spec, Mapping):
            for value in spec.values():
                walk(value)
        elif isinstance(spec, (list, tuple)):
            for value in spec:
                walk(value)

    walk(dynamic_shapes)
    return found


def _resolve(shape_env: TorchShapeEnv, symbol: sympy.Symbol) -> sympy.Basic:
    """``symbol`` through torch's replacements, as a shapecore expression."""
    expr: sympy.Basic = symbol
    for _ in range(len(shape_env.replacements) + 1):
        replaced = expr.xreplace(shape_env.replacements)
        if replaced == expr:
            break
        expr = replaced
    return map_expr(expr)


def _dim_expressions(shape_env: TorchShapeEnv, dynamic_shapes: Any) -> dict[str, sympy.Basic]:
    names = {d.__name__ for d in _user_dims(dynamic_shapes)}
    debug_names = getattr(shape_env, "source_name_to_debug_name", {})
    result: dict[str, sympy.Basic] = {}
    for symbol, sources in shape_env.var_to_sources.items():
        for source in sources:
            name = _source_name(source)
            dim = name if name in names else debug_names.get(name)
            if dim in names and dim not in result:
                result[dim] = _resolve(shape_env, symbol)
    return result


_EXPORT_FAILURE_MODES = ("raise", "return")


def _constraint_violation(exc: BaseException) -> tuple[BaseException, TorchShapeEnv] | None:
    """The ConstraintViolationError behind ``exc`` and the ShapeEnv it was raised over, if any.

    torch raises it from ``produce_guards`` and keeps no reference to the ShapeEnv, so the env
    is found among the locals of the failing frames (innermost first).
    """
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for violation in chain:
        if not isinstance(violation, ConstraintViolationError):
            continue
        frames = []
        tb = violation.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in frame.f_locals.values():
                if isinstance(value, TorchShapeEnv):
                    return violation, value
    return None


def trace_export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    *,
    dynamic_shapes: Any,
    kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    on_constraint_violation: Literal["raise", "return"] = "raise",
    timeout_ms: int = 1000,
) -> Traced:
    """``torch.export.export(model, args, dynamic_shapes=...)`` handed over to shapecore.

    ``dims``/``dim_exprs`` of the result name the user's ``Dim`` objects (``Dim("batch")``,
    ``8*Dim("k")``). When export fails with "Constraints violated" (torch's guards narrow a
    ``Dim``'s range), ``on_constraint_violation="return"`` returns the trace anyway, with
    ``graph_module=None``, ``exported=None``, ``error`` set and the guards torch recorded, so
    shapecore can decide whether they really narrow the range; ``"raise"`` re-raises.
    """
    import torch

    if on_constraint_violation not in _EXPORT_FAILURE_MODES:
        raise ValueError(f"on_constraint_violation must be one of {_EXPORT_FAILURE_MODES}, got {on_constraint_violation!r}")
    try:
        exported = torch.export.export(model, args, kwargs=dict(kwargs or {}), dynamic_shapes=dynamic_shapes,
                                       strict=strict)
    except Exception as exc:
        found = _constraint_violation(exc) if on_constraint_violation == "return" else None
        if found is None:
            raise
        violation, shape_env = found
        return _export_traced(None, shape_env, dynamic_shapes, timeout_ms, exported=None, error=str(violation))
    gm = exported.graph_module
    return _export_traced(gm, _shape_env_of(_placeholder_values(gm)), dynamic_shapes, timeout_ms, exported=exported)


def _export_traced(gm: GraphModule | None, shape_env: TorchShapeEnv, dynamic_shapes: Any, timeout_ms: int,
                   **extra: Any) -> Traced:
    dim_exprs = _dim_expressions(shape_env, dynamic_shapes)
    dims = {name: expr.name for name, expr in dim_exprs.items() if isinstance(expr, sympy.Symbol)}
    return _traced(gm, shape_env, timeout_ms, dims=dims, dim_exprs=dim_exprs, **extra)


def trace_compile(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    dynamic: bool | None = True,
    fullgraph: bool = True,
    timeout_ms: int = 1000,
) -> Traced:
    """Run ``torch.compile(fn, dynamic=dynamic, fullgraph=fullgraph)(*args)`` and hand over its shapes.

    A backend records the ATen forward graph AOTAutograd produces (the first, if Dynamo splits
    ``fn`` into several graphs) and Dynamo's ShapeEnv; the
    ShapeEnv is copied after the call returns, so it holds every guard of the compile. Use
    ``dynamic=None`` with ``torch._dynamo.mark_dynamic(x, dim, min=..., max=...)`` on the inputs to
    choose the dynamic dimensions. Each call compiles afresh (a new backend misses Dynamo's cache),
    but Dynamo's recompile limit per function still applies.
    """
    import torch
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[GraphModule] = []

    def forward_compiler(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        if not graphs:
            graphs.append(gm)
        return gm.forward

    def backward_compiler(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return gm.forward

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=fullgraph)(*args)
    if not graphs:
        raise ShapecoreError(
            f"torch.compile produced no graph for {getattr(fn, '__name__', fn)!r}: it has no tensor operations, "
            f"or Dynamo hit its recompile limit for it (torch._dynamo.reset() clears Dynamo's caches)"
        )
    gm = graphs[0]
    return _traced(gm, _shape_env_of(_placeholder_values(gm)), timeout_ms)


def trace_make_fx(fn: Callable[..., Any], args: tuple[Any, ...], *, timeout_ms: int = 1000) -> Traced:
    """``make_fx(fn, tracing_mode="symbolic")(*args)`` handed over to shapecore.

    Every input dimension becomes a symbol (duck-sized: equal example sizes share one), and
    tensor inputs of one element read with ``.item()`` give backed symbols sourced ``inputN.item()``.
    Tensors ``fn`` closes over (a module's parameters) are allowed and become graph constants.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*args)
    return _traced(gm, _shape_env_of(_placeholder_values(gm)), timeout_ms)
