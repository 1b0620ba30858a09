"""A per-expert table's rows per expert, counted from the sorted ids a rank holds (the split sizes
of its gather and of its gradient's scatter, :mod:`lowering.expert_tables`)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lowering.expert_tables import sorted_counts


@given(ids=st.lists(st.integers(-1, 5), max_size=12), experts=st.integers(1, 5))
def test_the_counts_of_sorted_ids_are_their_histogram_and_miss_those_out_of_range(ids, experts):
    """Against counting the ids one by one: each expert's count is exact, and ids outside
    ``[0, E)`` are counted nowhere (the counts then fall short of the rows, which the dispatch refuses)."""
    counts = sorted_counts(torch.tensor(sorted(ids), dtype=torch.int64), experts)
    assert counts.tolist() == [ids.count(e) for e in range(experts)]
