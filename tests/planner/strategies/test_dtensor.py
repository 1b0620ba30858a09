"""DTensor's registered strategies, as the provider proposes them, compute the op and use only
the placements plans have; nodes it has no rule for are left to the next provider."""

from __future__ import annotations

import pytest

from planner import DTensorProvider, Mesh
from planner.graph import read_graph
from planner.placements import Partial, Replicate, Shard
from tests.planner.strategies.differential import CASES, MESHES, check_all, real, trace


@pytest.mark.parametrize("case", ["mm", "broadcast", "softmax", "flatten"])
def test_dtensor_strategies_compute_the_op(case):
    fn, args = CASES[case]
    assert check_all(fn, args, DTensorProvider(), mesh=Mesh((2,))) > 0


def test_dtensor_provider_declines_what_it_does_not_know():
    gm, _ = trace(lambda x: x * 2, real(4))
    graph = read_graph(gm)
    placeholder = next(n for n in graph if n.role == "input")
    assert DTensorProvider().strategies(placeholder, graph, Mesh((2,))) is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_dtensor_strategies_use_only_placements_plans_have_and_fit_the_node(case):
    fn, args = CASES[case]
    gm, _ = trace(fn, *args)
    graph = read_graph(gm)
    provider = DTensorProvider()
    for node in graph:
        if node.role != "op":
            continue
        for mesh in MESHES:
            for s in provider.strategies(node, graph, mesh) or []:
                assert len(s.outputs) == len(node.outputs) and len(s.inputs) == len(node.operands), (node.target, s)
                for placements in [*s.outputs, *s.inputs]:
                    if placements is None:
                        continue
                    assert len(placements) == mesh.ndim
                    assert all(type(p) in (Shard, Replicate) or (type(p) is Partial and p.reduce_op == "sum")
                               for p in placements), (node.target, s)
