"""A per-expert table folded into its grouped product's exchange (:mod:`lowering.expert_fusion`,
:class:`~lowering.expert_parallel.FoldedTable`), run eagerly on one gloo rank in this process
against the one-device ops it replaces: the gather's entries added to each row's result, the
gradient scatter's sums per expert; ids that disagree with the offsets refused. GPT-OSS's layer on
2 ranks, its tables folded, is ``test_expert_parallel.py``'s bias test."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowering.expert_dispatch import DISAGREE_ERROR
from lowering.expert_parallel import FoldedTable, expert_parallel

K, N = 3, 2
FORWARD = expert_parallel("transformers.grouped_mm_fallback.default", (2, 3, 1))
BACKWARD = expert_parallel("transformers.grouped_mm_fallback_backward.default", (2, 3, 1, 2))
WEIGHT_GRADIENT = expert_parallel("aten._grouped_mm.default", (2, 2, 1))


def _routed(counts: list[int], seed: int) -> tuple[torch.Tensor, ...]:
    """Rows sorted by expert (``counts[e]`` for expert ``e``), stacked experts, their offsets and sorted ids."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(sum(counts), K, generator=generator)
    weight = torch.randn(len(counts), K, N, generator=generator)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    ids = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    return rows, weight, offs, ids


def _group() -> str:
    import torch.distributed as dist

    return dist.group.WORLD.group_name


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # one process group serves every example
@given(counts=st.lists(st.integers(0, 4), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_a_folded_table_is_the_gather_added_and_the_scatter_of_the_gradient(one_rank, counts, seed):
    rows, weight, offs, ids = _routed(counts, seed)
    entries = torch.randn(len(counts), N, generator=torch.Generator().manual_seed(seed + 1))
    grad = torch.randn(rows.size(0), N, generator=torch.Generator().manual_seed(seed + 2))
    products = torch.cat([piece @ weight[e] for e, piece in enumerate(rows.split(counts))])
    scattered = torch.zeros(len(counts), N).index_put((ids,), grad, accumulate=True)
    coordinate = torch.tensor(0)

    result, sums = FORWARD.run([rows, weight, offs], 1, _group(), coordinate, FoldedTable(ids, entries))
    torch.testing.assert_close(result, products + entries[ids])
    assert sums is None
    (grad_rows, grad_weight), sums = BACKWARD.run([rows, weight, offs, grad], 1, _group(), coordinate,
                                                  FoldedTable(ids, None))
    torch.testing.assert_close(sums, scattered)
    _, sums = WEIGHT_GRADIENT.run([rows.t(), grad, offs], 1, _group(), coordinate, FoldedTable(ids, None))
    torch.testing.assert_close(sums, scattered)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(0, 4), min_size=2, max_size=4).filter(lambda c: sum(c) > 0), data=st.data())
def test_ids_that_give_a_row_another_expert_than_the_offsets_are_refused(one_rank, counts, data):
    rows, weight, offs, ids = _routed(counts, 0)
    row = data.draw(st.integers(0, len(ids) - 1))
    other = data.draw(st.integers(0, len(counts) - 1).filter(lambda e: e != int(ids[row])))
    moved = ids.clone()
    moved[row] = other
    moved = moved.sort().values  # sorted still, one row's expert another
    with pytest.raises(ValueError, match="the ids of rank 0 of the group") as raised:
        FORWARD.run([rows, weight, offs], 1, _group(), torch.tensor(0), FoldedTable(moved, torch.zeros(len(counts), N)))
    assert DISAGREE_ERROR in str(raised.value)


def _graph(gather_users: int = 1, grad_dtype: torch.dtype = torch.float32):
    """``add(product(rows, w, offs), index(table, [ids]))`` and ``index_put(base, [ids], grad, True)``
    beside ``backward(rows, w, offs, grad)``, the gather read by ``gather_users`` nodes."""
    from torch.fx import Graph

    aten = torch.ops.aten
    graph = Graph()
    rows, w, offs, table, ids, base = (graph.placeholder(n) for n in ("rows", "w", "offs", "table", "ids", "base"))
    grad = graph.placeholder("grad")
    product = graph.call_function(aten.mm.default, (rows, w, offs), name="product")
    gather = graph.call_function(aten.index.Tensor, (table, [ids]), name="gather")
    add = graph.call_function(aten.add.Tensor, (product, gather), name="add")
    others = [graph.call_function(aten.neg.default, (gather,)) for _ in range(gather_users - 1)]
    backward = graph.call_function(aten.bmm.default, (rows, w, offs, grad), name="backward")
    scatter = graph.call_function(aten.index_put.default, (base, [ids], grad, True), name="scatter")
    graph.output((add, backward, scatter, *others))
    for node in graph.nodes:
        node.meta["val"] = torch.empty(4, 2, dtype=grad_dtype if node.name == "grad" else torch.float32)
    return graph


def _folds(graph, redistributed=frozenset()):
    from lowering.expert_fusion import find_folds

    runs = {"product": (0, 0), "backward": (0, 3)}  # the mesh axis, the operand sent
    return find_folds(graph, lambda n: runs.get(n.name), lambda n: 0 if n.name in ("gather", "scatter") else None,
                      lambda consumer, k: (consumer, k) in redistributed, lambda name: ("S(0)",))


def test_a_table_folds_only_where_its_product_computes_the_same_thing():
    """The gather into the product whose result alone it is added to, the scatter into the backward
    that sends its very gradient; not where the gather has another reader, an operand of the add or
    the gradient is redistributed, or the gradient would be sent in another dtype."""
    folds = _folds(_graph())
    assert {p: g.name for p, g in folds.gathers.items()} == {"product": "gather"}
    assert {a: p.name for a, p in folds.sums.items()} == {"add": "product"}
    assert {p: s.name for p, s in folds.scatters.items()} == {"backward": "scatter"}
    assert folds.computed_elsewhere == {"gather"}
    assert not _folds(_graph(gather_users=2)).gathers
    assert not _folds(_graph(), redistributed={("add", 1)}).gathers
    assert not _folds(_graph(), redistributed={("scatter", 2)}).scatters
    assert not _folds(_graph(), redistributed={("backward", 3)}).scatters
    assert not _folds(_graph(grad_dtype=torch.bfloat16)).scatters
