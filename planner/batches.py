"""Batch points: the symbol values at which symbolic sizes are costed, with their weights.

A plan is costed not at one example size but at a distribution of sizes: ``batch_sizes`` is

* ``None`` — one point, every symbol at its hint (the example input);
* a sequence of ints, or a mapping int → weight — values of *the batch symbol*
  (:attr:`~planner.dim_names.DimNames.batch`: the root symbol of the first dynamic dim of the
  first user input);
* a sequence of mappings (or ``(mapping, weight)`` pairs) — values by symbol or ``Dim`` name.

Symbols a point does not name keep their hint; symbols defined through the trace's
replacements (``s77 := 4*s26``) follow their definition. A data-dependent (unbacked) size
(``nonzero``, masking, routing) has no hint: it takes the expectation the user gives for it
(``PlanOptions.unbacked_sizes``: an int or an expression over Dim names and symbols, in torch's
or Python's syntax: ``"batch // 4"``; given for one of the sizes the facts equate, it holds for
all of them), else its share of a total the trace splits among routed sizes (counts that sum to
``tokens·k`` over ``E`` experts: ``tokens·k // E`` each, :mod:`planner.routed_sizes`), else by
default half of
the largest backed size at the point (recorded as that expression over the Dim names:
``batch // 2``, ``Max(batch, seq) // 2``, which ``unbacked_sizes`` accepts back), clamped to
its value range; ``BatchPoints.unbacked`` states what each one was costed at. Weights are normalized to sum to 1,
so the objective is the expected cost. Every point must satisfy the trace's guards and the
user's constraints (checked exactly; a point that breaks one is an error naming it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from planner.dim_names import DimNames
from planner.routed_sizes import shares
from shapecore import FloorDiv, Max, ShapeEnv, evaluate, extend_assignment, holds, parse, python_str

__all__ = ["BatchPoints", "BatchSizes"]

BatchSizes = Sequence[int] | Mapping[int, float] | Sequence[Mapping[str, int] | tuple[Mapping[str, int], float]] | None


@dataclass
class BatchPoints:
    """``values[k]`` maps every root symbol to its value at point ``k``; ``labels[k]`` is what
    the user named (by Dim name where known); ``weights`` sum to 1."""

    values: list[dict[str, int]]
    labels: list[dict[str, int]]
    weights: np.ndarray
    replacements: dict[sympy.Symbol, sympy.Basic]
    unbacked: dict[str, str] | None = None
    """Each unbacked symbol's expectation, as text (the user's, or the default used)."""

    def __post_init__(self) -> None:
        self._cache: dict[sympy.Basic, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.values)

    def size(self, expr: sympy.Basic) -> np.ndarray:
        """``expr`` evaluated at every point, as float64."""
        found = self._cache.get(expr)
        if found is None:
            if expr.is_Integer:
                found = np.full(len(self.values), float(int(expr)))
            else:
                resolved = expr.xreplace(self.replacements) if self.replacements else expr
                found = np.array([float(evaluate(resolved, v)) for v in self.values])
            self._cache[expr] = found
        return found

    def expected(self, vector: np.ndarray) -> float:
        return float(np.dot(self.weights, vector))

    def single(self, k: int) -> BatchPoints:
        """Point ``k`` alone, with weight 1."""
        return BatchPoints([self.values[k]], [self.labels[k]], np.ones(1), self.replacements, self.unbacked)

    @classmethod
    def build(
        cls,
        batch_sizes: BatchSizes,
        env: ShapeEnv,
        shape_symbols: Sequence[str],
        names: DimNames,
        constraints: Sequence[sympy.Basic] = (),
        *,
        origins: Mapping[str, tuple[str, str]] | None = None,
        unbacked_sizes: Mapping[str, int | str] | None = None,
    ) -> BatchPoints:
        """Points from ``batch_sizes`` (see the module docstring), checked against the env and constraints.

        ``shape_symbols``: the root symbols the graph's shapes mention; ``names``: the ``Dim``
        names points may use, and the batch symbol plain ints bind; ``origins``: symbol → where its range's (lower, upper) end was set, named in errors.
        """
        replacements = env.replacements
        hints = env.hints
        roots = sorted({s.name for name in shape_symbols
                        for s in sympy.Symbol(name, integer=True).xreplace(replacements).free_symbols})
        unbacked = [s for s in roots if env.symbols[s].kind == "unbacked"]
        roots = [s for s in roots if s not in unbacked]
        expectations = _expectations(unbacked, roots, env, names, unbacked_sizes or {})
        dims = names.symbols
        raw = _normalize(batch_sizes)
        if raw and any(isinstance(v, int) for v, _ in raw):
            if names.batch is None:
                raise ValueError("batch_sizes were given but the graph has no symbolic size; trace with a dynamic batch dim")
            raw = [({names.batch: v}, w) for v, w in raw]  # type: ignore[misc]
        if not raw:
            raw = [({}, 1.0)]
        values, labels, weights = [], [], []
        for given, weight in raw:
            point = {name: hints[name] for name in roots if name in hints}
            label = {}
            for name, value in given.items():  # type: ignore[union-attr]
                symbol = dims.get(name, name)
                if symbol not in env.symbols:
                    raise ValueError(
                        f"batch point {dict(given)} names {name!r}, which is neither a Dim name ({', '.join(dims) or 'none'}) "
                        f"nor a symbol of the trace ({', '.join(env.symbols)})"
                    )
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"batch point value for {name!r} must be an int, got {value!r}")
                point[symbol] = value
                label[names.name_of(symbol)] = value
            if not label:
                label = {names.name_of(s): v for s, v in point.items()}
            for name, expectation in expectations.items():
                point[name] = _expected_value(name, expectation, point, env)
            _check_point(point, env, constraints, label, names, origins or {})
            values.append(point)
            labels.append(label)
            weights.append(float(weight))
        w = np.array(weights)
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"batch size weights must be nonnegative with a positive sum, got {weights}")
        stated = {k: str(unbacked_sizes[k]) if unbacked_sizes and k in unbacked_sizes else python_str(names.to_names(v))
                  for k, v in expectations.items()}
        return cls(values, labels, w / w.sum(), dict(replacements), stated)


def _expectations(unbacked: Sequence[str], roots: Sequence[str], env: ShapeEnv, names: DimNames,
                  given: Mapping[str, int | str]) -> dict[str, sympy.Basic]:
    """Each unbacked symbol's expected value as an expression over the backed ``roots`` (see the module docstring)."""
    backed = [sympy.Symbol(name, integer=True) for name in roots]
    half_of_largest = FloorDiv(Max(*backed), 2) if backed else sympy.Integer(0)
    for name in given:
        if name not in env.symbols or env.symbols[name].kind != "unbacked":
            raise ValueError(f"unbacked_sizes names {name!r}, which is no data-dependent symbol of the trace "
                             f"(those are: {', '.join(unbacked) or 'none'})")
        defined = env.replacements.get(sympy.Symbol(name, integer=True))
        if defined is not None:  # costed through its definition: an expectation of its own would be ignored
            others = sorted(s.name for s in defined.free_symbols if s.name in unbacked)
            raise ValueError(f"unbacked_sizes names {name!r}, which the trace defines as "
                             f"{python_str(names.to_names(defined))}: give "
                             + (f"the expectation of {', '.join(others)} instead" if others else "no expectation for it"))
    routed = shares(env, unbacked)
    twins = _twins(unbacked, env)
    out: dict[str, sympy.Basic] = {}
    for name in unbacked:
        alike = twins[name]
        user = next((names.to_trace(parse(str(given[n]))) for n in [name, *alike] if n in given), None)
        share = next((routed[n] for n in [name, *alike] if n in routed), None)
        out[name] = user if user is not None else share if share is not None else half_of_largest
    return out


def _twins(unbacked: Sequence[str], env: ShapeEnv) -> dict[str, list[str]]:
    """Each unbacked symbol's equals among ``unbacked`` by the trace's facts ``Eq(u4, u0)`` (transitively)."""
    group = {name: {name} for name in unbacked}
    for fact in env.facts:
        if isinstance(fact, sympy.Eq) and fact.lhs.is_Symbol and fact.rhs.is_Symbol:
            a, b = fact.lhs.name, fact.rhs.name
            if a in group and b in group and group[a] is not group[b]:
                merged = group[a] | group[b]
                for name in merged:
                    group[name] = merged
    return {name: sorted(group[name] - {name}) for name in unbacked}


def _expected_value(name: str, expectation: sympy.Basic, point: Mapping[str, int], env: ShapeEnv) -> int:
    """``expectation`` at ``point``, clamped to the symbol's value range."""
    value = int(evaluate(expectation, dict(point)))
    bounds = env.var_to_range.get(sympy.Symbol(name, integer=True))
    if bounds is not None:
        if value < bounds.lo:  # an end a finite value is beyond is finite itself: ±inf never converts
            value = math.ceil(bounds.lo)
        if value > bounds.hi:
            value = math.floor(bounds.hi)
    return value


def _normalize(batch_sizes: BatchSizes) -> list[tuple[Any, float]]:
    if batch_sizes is None:
        return []
    if isinstance(batch_sizes, Mapping):
        return [(int(k), float(v)) for k, v in batch_sizes.items()]
    out: list[tuple[Any, float]] = []
    for item in batch_sizes:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mapping):
            out.append((dict(item[0]), float(item[1])))
        elif isinstance(item, Mapping):
            out.append((dict(item), 1.0))
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append((item, 1.0))
        else:
            raise TypeError(f"batch_sizes entries must be ints, mappings, or (mapping, weight) pairs; got {item!r}")
    if len({isinstance(v, int) for v, _ in out}) > 1:
        raise TypeError("batch_sizes mixes ints and mappings; use one form")
    return out


def _check_point(point: Mapping[str, int], env: ShapeEnv, constraints: Sequence[sympy.Basic], label: Mapping[str, int],
                 names: DimNames, origins: Mapping[str, tuple[str, str]]) -> None:
    values = extend_assignment(point, env.replacements)
    for fact in list(env.facts) + list(env.guards) + list(constraints):
        if {s.name for s in fact.free_symbols} <= values.keys() and not holds(fact, values):
            raise ValueError(f"batch point {dict(label)} breaks {names.to_names(fact)}; "
                             "choose batch sizes the guards and constraints accept")
    for name, value in values.items():
        symbol = sympy.Symbol(name, integer=True)
        bounds = env.var_to_range.get(symbol)
        if bounds is not None and value not in bounds:
            shown = f"{names.name_of(name)} ({name})" if names.name_of(name) != name else name
            unbacked = {u for u, info in env.symbols.items() if info.kind == "unbacked"}
            if name in unbacked:  # from the sizes expected of the data
                expected = {u: v for u, v in point.items() if u in unbacked}
                derived = f" (= {names.to_names(env.replacements[symbol])})" if symbol in env.replacements else ""
                raise ValueError(f"batch point {dict(label)} expects the data-dependent sizes {expected}, which put "
                                 f"{shown}{derived} = {value} outside its range [{bounds.lo}, {bounds.hi}]: choose "
                                 "unbacked_sizes that keep every data-dependent size inside its range")
            origin = origins.get(name, ("", ""))[0 if value < bounds.lo else 1]
            why = f"; that end of the range was set by {origin}" if origin else ""
            raise ValueError(f"batch point {dict(label)} puts {shown}={value} outside its range [{bounds.lo}, {bounds.hi}]{why}. "
                             "The trace holds only there: trace at a size inside the batch sizes you plan for "
                             "(plan_module traces at the largest), or plan the sizes outside it separately")
