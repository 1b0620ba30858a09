"""The one map between the user's ``Dim`` names and the trace's symbols, and the batch symbol.

A trace names its sizes ``s0``, ``s77``, ``u0``; the user wrote ``Dim("batch")``. A
:class:`DimNames` is built once where the trace is taken (:func:`~planner.api.trace_module`,
or :func:`~planner.api.plan` from the ``dims`` it is given), travels on the
:class:`~planner.plan.Plan` (and its JSON) to the lowering's entry check, and answers both ways:

* Dim name → trace expression (:meth:`DimNames.to_trace`), for what the user writes: constraints,
  batch points, expected data-dependent sizes. A derived Dim (``8*k``) maps to its expression.
* trace symbol → Dim name (:meth:`DimNames.name_of`, :meth:`DimNames.to_names`,
  :meth:`DimNames.readable`), for what the user reads: guards, messages, the plan's summary.
  Only a plain Dim names a symbol; a Dim name that is itself another symbol of the map, or that
  does not read back as a name (``if``, ``Mod``), is not shown (``s1`` read back must mean one
  thing), and when torch made two Dims one symbol the last given names it.

``batch`` is *the batch symbol*: the trace symbol a plain int in ``batch_sizes`` binds, the
root symbol of the first dynamic dim of the first user input (chosen from ``dynamic_shapes``
before the trace by :func:`~planner.trace_hint.batch_dim`, or from a given graph's inputs).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sympy

from shapecore import ShapecoreError, int_symbol, parse

__all__ = ["DimNames"]

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class DimNames:
    """``Dim`` name → its expression over the trace's symbols, and the batch symbol."""

    exprs: dict[str, sympy.Basic] = field(default_factory=dict)
    """Every ``Dim`` name (derived ones too) → its expression over trace symbols (``s0``, ``8*s0``)."""
    batch: str | None = None
    """The trace symbol plain ints in ``batch_sizes`` bind (None: no dynamic user input)."""

    @classmethod
    def of(cls, dims: DimNames | Mapping[str, str | sympy.Basic] | None, *, batch: str | None = None) -> DimNames:
        """``dims`` as a :class:`DimNames` (a mapping's values: symbol names or expressions);
        ``batch`` fills in the batch symbol where ``dims`` has none."""
        if isinstance(dims, DimNames):
            return dims if dims.batch is not None or batch is None else DimNames(dims.exprs, batch)
        exprs = {name: int_symbol(v) if isinstance(v, str) else sympy.sympify(v) for name, v in (dims or {}).items()}
        return cls(exprs, batch)

    def extended(self, dims: Mapping[str, str | sympy.Basic] | None) -> DimNames:
        """These names and ``dims`` (which win where both name a ``Dim``)."""
        return DimNames({**self.exprs, **DimNames.of(dims).exprs}, self.batch) if dims else self

    # -- Dim name → trace -----------------------------------------------------------------------------

    @cached_property
    def symbols(self) -> dict[str, str]:
        """Each plain ``Dim``'s name → its trace symbol's name."""
        return {name: e.name for name, e in self.exprs.items() if isinstance(e, sympy.Symbol)}

    def to_trace(self, expr: sympy.Basic) -> sympy.Basic:
        """``expr`` (over Dim names and trace symbols) with every Dim name replaced by its expression."""
        return expr.xreplace({int_symbol(name): e for name, e in self.exprs.items()})

    # -- trace → Dim name -----------------------------------------------------------------------------

    @cached_property
    def shown(self) -> dict[str, str]:
        """Trace symbol name → the ``Dim`` name shown for it (see the module docstring)."""
        named = {s.name for e in self.exprs.values() for s in e.free_symbols}
        return {symbol: name for name, symbol in self.symbols.items()
                if (name == symbol or name not in named) and _reads_as_itself(name)}

    def name_of(self, symbol: str) -> str:
        """The ``Dim`` name shown for trace symbol ``symbol``, or ``symbol`` itself."""
        return self.shown.get(symbol, symbol)

    def to_names(self, expr: sympy.Basic) -> sympy.Basic:
        """``expr`` with each named trace symbol written as its ``Dim`` name."""
        return expr.xreplace({int_symbol(s): int_symbol(name) for s, name in self.shown.items()})

    def readable(self, text: str) -> str:
        """``text`` (a guard, an obligation, a message) with each named trace symbol written as its
        ``Dim`` name: ``Eq(Mod(s72, 4), 0)`` reads ``Eq(Mod(batch, 4), 0)``."""
        if not self._pattern:
            return text
        return self._pattern.sub(lambda m: self.shown[m.group(1)], text)

    @cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        renamed = sorted((s for s, name in self.shown.items() if s != name), key=len, reverse=True)
        return re.compile(r"\b(" + "|".join(map(re.escape, renamed)) + r")\b") if renamed else None

    # -- JSON -----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"exprs": {name: str(e) for name, e in sorted(self.exprs.items())}, "batch": self.batch}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DimNames:
        return cls({name: parse(text) for name, text in d["exprs"].items()}, d["batch"])


def _reads_as_itself(name: str) -> bool:
    """Whether ``name`` written in a guard parses back as the integer symbol ``name``."""
    if not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
        return False
    try:
        return parse(f"{name} + 0") == int_symbol(name)
    except ShapecoreError:
        return False
