"""The exceptions shapecore raises; each message names the culprit and the fix."""

from __future__ import annotations

__all__ = [
    "ShapecoreError",
    "ParseError",
    "UnboundSymbolError",
    "DataDependentError",
    "ConstraintError",
    "GuardInputError",
    "ArgumentError",
]


class ShapecoreError(Exception):
    """Base class of every error shapecore raises on purpose.

    Errors pickle with their message and fields (they cross process boundaries: a worker's
    error re-raised by multiprocessing, a rank's by ``lowering.launch``), whatever arguments
    their ``__init__`` takes.
    """

    def __reduce__(self) -> tuple:
        return (_rebuild, (type(self), self.args, vars(self)))


def _rebuild(cls: type[ShapecoreError], args: tuple, fields: dict) -> ShapecoreError:
    """``cls``'s error with ``args`` and ``fields``, made without calling its ``__init__`` again."""
    error = cls.__new__(cls, *args)
    error.__dict__.update(fields)
    return error


class ParseError(ShapecoreError, ValueError):
    """Guard text that does not parse: ``line:column: message`` (1-based), with the token."""

    def __init__(self, message: str, *, text: str, line: int, column: int, token: str) -> None:
        self.message = message
        self.text = text
        self.line = line
        self.column = column
        self.token = token
        super().__init__(f"{line}:{column}: {message}")


class UnboundSymbolError(ShapecoreError, KeyError):
    """An expression was evaluated without a value for one of its symbols."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(name)

    def __str__(self) -> str:
        return f"no value for symbol {self.name!r}: pass it in the assignment"


class DataDependentError(ShapecoreError, RuntimeError):
    """A decision needs the value of an unbacked symbol (no hint) and cannot be made statically.

    Attributes name the expression, the unbacked symbol, where it came from (``source``) and
    the facts that would settle it (``suggestions``, in guard syntax).
    """

    def __init__(self, expr: str, symbol: str, source: str | None, suggestions: list[str]) -> None:
        self.expr = expr
        self.symbol = symbol
        self.source = source
        self.suggestions = suggestions
        origin = f" (from {source})" if source else ""
        fixes = " or ".join(f"env.add_fact({s!r})" for s in suggestions)
        advice = (f"Add the fact that holds, e.g. {fixes}, or narrow" if suggestions
                  else f"Add a fact that fixes it (env.add_fact('Eq({symbol}, ...)')), or narrow")
        super().__init__(
            f"cannot decide {expr}: it depends on unbacked symbol {symbol}{origin}, which has no "
            f"hint, and the known facts do not settle it. {advice} its range with "
            f"env.constrain_range({symbol}, min=..., max=...)."
        )


class ConstraintError(ShapecoreError, ValueError):
    """A range, fact or hint contradicts what is already known (or, for a ShapeEnv entry on
    unbacked symbols, could not be shown consistent with it within the time budget)."""


class GuardInputError(ShapecoreError, ValueError):
    """Input text that cannot be read (a guard file, ShapeEnv JSON): ``where:line:column: message``."""

    def __init__(self, where: str, line: int, column: int, message: str) -> None:
        self.where, self.line, self.column, self.message = where, line, column, message
        super().__init__(f"{where}:{line}:{column}: {message}")


class ArgumentError(ShapecoreError, TypeError, ValueError):
    """An argument of a public function that cannot work, such as ``facts='x > 2'`` for ``['x > 2']``.

    The message names the argument, what was expected and what was given.
    """
