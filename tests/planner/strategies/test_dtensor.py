"""DTensor's registered strategies, as the provider proposes them, compute the op; nodes it has
no rule for are left to the next provider."""

from __future__ import annotations

import pytest

from planner import DTensorProvider, Mesh
from planner.graph import read_graph
from tests.planner.strategies.differential import CASES, check_all, real, trace


@pytest.mark.parametrize("case", ["mm", "broadcast", "softmax", "flatten"])
def test_dtensor_strategies_compute_the_op(case):
    fn, args = CASES[case]
    assert check_all(fn, args, DTensorProvider(), mesh=Mesh((2,))) > 0


def test_dtensor_provider_declines_what_it_does_not_know():
    gm, _ = trace(lambda x: x * 2, real(4))
    graph = read_graph(gm)
    placeholder = next(n for n in graph if n.role == "input")
    assert DTensorProvider().strategies(placeholder, graph, Mesh((2,))) is None
