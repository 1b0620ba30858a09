"""default_providers: the built-in rules are asked first, DTensor's registered strategies give breadth."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from planner import BuiltinProvider, DTensorProvider, Mesh, StrategyProvider
from planner.strategies import default_providers
from tests.planner.problems import problem_of


class _CumulativeRows(nn.Module):
    """A linear layer (the built-in rules cover it) then a cumulative sum (only DTensor has a rule for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).cumsum(1)


def test_the_built_in_rules_come_first_and_every_call_gives_a_list_of_its_own():
    providers = default_providers()
    assert [type(p) for p in providers] == [BuiltinProvider, DTensorProvider]
    assert all(isinstance(p, StrategyProvider) for p in providers)
    providers.clear()
    assert len(default_providers()) == 2


@pytest.mark.parametrize("op, provider", [("aten.addmm.default", "builtin"), ("aten.cumsum.default", "dtensor")])
def test_each_op_gets_the_strategies_of_the_first_provider_that_has_any(op, provider):
    problem = problem_of(_CumulativeRows(), torch.randn(8, 8), Mesh((2,)))
    (node,) = [n for n in problem.graph if n.target == op]
    assert {c.provider for c in problem.candidates[node.name]} == {provider}
