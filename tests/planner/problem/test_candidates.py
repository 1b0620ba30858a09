"""Step 1 of the decision problem: each node's candidates are the proposals the divisibility policy
allows, priced at every batch point; what it drops is logged with the reason, and an op no
provider covers is replicated."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from planner import Mesh
from planner.placements import R_CODE, shard_code
from planner.problem import MEMORY_PARTS
from tests.planner.problems import problem_of


class _Nothing:
    """A strategy provider that covers nothing."""

    name = "nothing"

    def strategies(self, node, graph, mesh):
        return None


def test_every_candidate_passes_the_divisibility_policy_and_fits_its_node(problem):
    n = len(problem.points)
    for node in problem.graph:
        candidates = problem.candidates[node.name]
        assert candidates
        for c in candidates:
            assert len(c.outputs) == len(node.outputs) and len(c.inputs) == len(node.operands)
            for meta, codes in zip(node.outputs, c.outputs):
                if meta is not None and codes is not None:
                    assert problem.allowed(meta, codes), (node.name, codes)
            for k, codes in enumerate(c.inputs):
                assert problem.allowed(problem.graph.operand_meta(node, k), codes), (node.name, k, codes)
            assert c.compute.shape == (n,) and (c.compute >= 0).all()
            assert set(c.memory) <= set(MEMORY_PARTS) and all(v.shape == (n,) for v in c.memory.values())
            if node.role != "op":
                assert not c.compute.any()  # only ops compute


def test_placeholders_may_take_every_non_partial_placement_that_divides(problem):
    mesh_ndim = problem.mesh.ndim
    for node in problem.graph:
        if node.role not in ("input", "param", "buffer"):
            continue
        options = [R_CODE] + [shard_code(d) for d in range(node.output.ndim)]
        allowed = {codes for codes in itertools.product(options, repeat=mesh_ndim) if problem.allowed(node.output, codes)}
        assert {c.outputs[0] for c in problem.candidates[node.name]} == allowed, node.name


def test_a_getitem_takes_one_of_its_elements_placements(problem):
    getitems = [node for node in problem.graph if node.role == "getitem"]
    for node in getitems:
        elements = {c.outputs[node.index] for c in problem.candidates[node.source]}
        assert {c.outputs[0] for c in problem.candidates[node.name]} == elements


def test_what_the_policy_drops_is_logged_with_the_dim_its_size_and_the_reason():
    problem = problem_of(nn.Linear(6, 3), torch.randn(4, 6), Mesh((2,)), constraints=(), divisibility="prove")
    (addmm,) = [n for n in problem.graph if n.target == "aten.addmm.default"]
    kept = {c.outputs[0] for c in problem.candidates[addmm.name]}
    assert (shard_code(1),) not in kept  # 3 output features do not split 2 ways
    reasons = [reason for _, reason in problem.pruned[addmm.name]]
    assert any("dim 1 (size 3) over axis0" in reason for reason in reasons), reasons
    (x,) = problem.graph.inputs
    assert any("(size s" in reason for _, reason in problem.pruned[x]), "the unconstrained batch is not proved to divide"


def test_an_op_no_provider_covers_is_replicated_and_named():
    with pytest.warns(UserWarning, match=r"no strategy provider covers aten.addmm.default, aten.permute.default; "
                                         r"planned replicated \(2 node\(s\) such as permute, addmm\)"):
        problem = problem_of(nn.Linear(4, 4), torch.randn(8, 4), Mesh((2,)), strategies=[_Nothing()])
    ops = [n for n in problem.graph if n.role == "op"]
    assert problem.uncovered == {n.name: n.target for n in ops}
    for node in ops:
        (only,) = problem.candidates[node.name]
        assert only.provider == "fallback" and only.outputs == ((R_CODE,),) and set(only.inputs) == {(R_CODE,)}
