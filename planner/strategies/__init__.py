"""Strategy providers: who proposes what each node may do (see :mod:`planner.strategies.base`)."""

from planner.strategies.base import AxisRule, Strategy, StrategyProvider, expand
from planner.strategies.builtin import BuiltinProvider
from planner.strategies.dtensor import DTensorProvider

__all__ = ["AxisRule", "BuiltinProvider", "DTensorProvider", "Strategy", "StrategyProvider", "default_providers", "expand"]


def default_providers() -> list[StrategyProvider]:
    """The built-in rules first, DTensor's registered strategies for breadth."""
    return [BuiltinProvider(), DTensorProvider()]
