"""Expert parallelism on 2 gloo ranks, and over one axis of a (2, 2) mesh: a routed top-2 MoE
whose 4 stacked experts are split by the expert dim, tokens dispatched and combined with
data-dependent all_to_alls, compiled once by Inductor for every routing, equal to one device in
the output, the loss and every gradient."""

import functools

import pytest
import torch
import torch.nn.functional as F

from lowering import launch
from lowering.expert_dispatch import COUNTS_ERROR, combine, dispatch
from planner import Mesh

DIM, EXPERTS, K, RANKS = 8, 4, 2, 2


def _routed(x, gate, experts, skew=None):
    """A top-``K`` MoE: the token copies sorted by expert, run by ``experts(rows, counts)``, weighted and added back."""
    weights, chosen = (x @ gate).topk(K, -1)
    order = chosen.flatten().argsort(stable=True)
    counts = F.one_hot(chosen.flatten(), EXPERTS).sum(0)
    token = order // K
    out = experts(x[token], counts if skew is None else counts + skew)
    out = out * weights.softmax(-1).flatten()[order, None]
    return torch.zeros_like(x).index_add(0, token, out)


def _one_device(rows, counts, w):
    return torch.cat([piece @ w[e] for e, piece in enumerate(rows.split(counts.tolist()))])


def _expert_parallel(rows, counts, w_local, group):
    dispatched = dispatch(rows, counts, RANKS, group)
    pieces = dispatched.tokens.split(dispatched.counts)
    return combine(torch.cat([piece @ w_local[e] for e, piece in enumerate(pieces)]), dispatched)


def _gate() -> torch.Tensor:
    """A gate under which a token with a negative first feature goes to experts 0 and 1 only (rank 0's)."""
    gate = torch.randn(DIM, EXPERTS, generator=torch.Generator().manual_seed(1)) * 0.1
    gate[0] = torch.tensor([-3.0, -3.0, 3.0, 3.0])
    return gate


def _tokens(rows: int, rank: int, to_rank_0: bool) -> torch.Tensor:
    x = torch.randn(rows, DIM, generator=torch.Generator().manual_seed(10 * rows + rank))
    if to_rank_0:
        x[:, 0] = -2.0 - x[:, 0].abs()
    return x


BATCHES = ((3, 5, False), (6, 6, True), (8, 2, False), (4, 7, True))  # rows on rank 0, on rank 1, rank 1 receives none


def _count_compiles(counter):
    from torch._inductor.compile_fx import compile_fx

    def backend(gm, example):
        counter.append(gm)
        return compile_fx(gm, example)

    return backend


def _training(rank):
    import torch.distributed as dist

    torch._dynamo.config.capture_scalar_outputs = True
    group = dist.group.WORLD.group_name
    w = torch.randn(EXPERTS, DIM, DIM, generator=torch.Generator().manual_seed(2)) * 0.3
    local = EXPERTS // RANKS
    gate = _gate().requires_grad_()
    w_local = w[rank * local:(rank + 1) * local].clone().requires_grad_()
    compiles = []
    step = torch.compile(lambda x, gate, w_local: _routed(x, gate, functools.partial(_expert_parallel, w_local=w_local,
                                                                                        group=group)),
                         backend=_count_compiles(compiles), dynamic=True, fullgraph=True)
    errors, received = [], []
    for rows_0, rows_1, to_rank_0 in BATCHES:
        xs = [_tokens(rows, r, to_rank_0).requires_grad_() for r, rows in enumerate((rows_0, rows_1))]
        out = step(xs[rank], gate, w_local)
        out.square().sum().backward()
        dist.all_reduce(gate.grad)  # the gate is replicated: data parallel over the ranks' tokens
        w_one, gate_one = w.clone().requires_grad_(), _gate().requires_grad_()
        x_one = [x.detach().clone().requires_grad_() for x in xs]
        expected = _routed(torch.cat(x_one), gate_one, functools.partial(_one_device, w=w_one))
        expected.square().sum().backward()
        mine = slice(0, rows_0) if rank == 0 else slice(rows_0, rows_0 + rows_1)
        pairs = [(out, expected[mine]), (xs[rank].grad, x_one[rank].grad), (gate.grad, gate_one.grad),
                 (w_local.grad, w_one.grad[rank * local:(rank + 1) * local])]
        errors.append(max(float((a - b).abs().max()) / (1 + float(b.abs().max())) for a, b in pairs))
        received.append(int(w_local.grad.abs().sum() > 0))
        gate.grad = w_local.grad = None
    return errors, len(compiles), received


@pytest.mark.slow  # gloo ranks, two Inductor compiles per rank
def test_expert_parallel_training_equals_one_device_from_one_compile():
    results = launch(_training, RANKS, timeout=600)
    for errors, compiles, _ in results:
        assert max(errors) <= 1e-5, errors
        assert compiles == 1  # every batch size and routing, rank 1 receiving nothing included
    assert results[1][2] == [1, 0, 1, 0]  # the routings that send rank 1 nothing did so


def _inference(rank, mesh):
    """Experts split over the mesh's last axis ("ep"), replicated over the others (each group of
    "ep" peers routes its own tokens)."""
    from lowering.mesh_groups import mesh_groups

    torch._dynamo.config.capture_scalar_outputs = True
    groups = mesh_groups(mesh)
    axis = mesh.ndim - 1
    peer = groups.coordinate[axis]
    peers = [rank - peer + p for p in range(RANKS)]  # the global ranks of this rank's "ep" group
    w = torch.randn(EXPERTS, DIM, DIM, generator=torch.Generator().manual_seed(2)) * 0.3
    local = EXPERTS // RANKS
    gate, compiles = _gate(), []
    forward = torch.compile(lambda x, skew: _routed(x, gate, functools.partial(
        _expert_parallel, w_local=w[peer * local:(peer + 1) * local], group=groups.group_name(axis)), skew),
        backend=_count_compiles(compiles), dynamic=True, fullgraph=True)
    errors = []
    no_skew = torch.zeros(EXPERTS, dtype=torch.int64)
    with torch.no_grad():
        for rows_0, rows_1, to_rank_0 in BATCHES:
            xs = [_tokens(rows, r, to_rank_0) for r, rows in zip(peers, (rows_0, rows_1))]
            expected = _routed(torch.cat(xs), gate, functools.partial(_one_device, w=w))
            mine = slice(0, rows_0) if peer == 0 else slice(rows_0, rows_0 + rows_1)
            errors.append(float((forward(xs[peer], no_skew) - expected[mine]).abs().max()))
        skew = torch.tensor([0, 1, 0, 0]) if peer == 0 else no_skew  # the counts of "ep" rank 0 miss a row
        try:
            forward(_tokens(5, rank, False), skew)
            raised = ""
        except Exception as e:  # noqa: BLE001 - the test reports what each rank raised
            raised = str(e)
    return errors, len(compiles), raised, compiles[0].code


@pytest.mark.slow  # gloo ranks, an Inductor compile per rank
@pytest.mark.parametrize("mesh", [Mesh((2, 2), ("dp", "ep"))])  # the group of the whole world: training's test
def test_expert_parallel_inference_from_one_compile_and_bad_counts_fail_on_every_rank(mesh):
    results = launch(functools.partial(_inference, mesh=mesh), mesh.size, timeout=600)
    for errors, compiles, raised, _ in results:
        assert max(errors) <= 1e-5, errors
        assert compiles == 1
        assert COUNTS_ERROR in raised and "(the counts of rank 0 of the group)" in raised, raised  # no rank hangs
    assert len({code for *_, code in results}) == 1  # one graph for every rank: nothing in it depends on the rank


def test_experts_that_do_not_split_over_the_ranks_are_refused():
    with pytest.raises(ValueError, match="5 experts do not split over 2 ranks"):
        dispatch(torch.zeros(3, DIM), torch.tensor([1, 1, 1, 0, 0]), 2, "unused")
