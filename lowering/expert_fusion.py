"""Per-expert tables folded into their grouped products' exchanges.

GPT-OSS's experts add a bias per routed row from per-expert tables, ``add(grouped_mm(rows, W,
offs), B[ids])``, and in training scatter the bias gradient by the same ids,
``index_put(zeros, [ids], G, accumulate=True)``, where the product's backward sends the same
gradient ``G`` to the experts' ranks. With the products and the tables split by the expert dim
over one mesh axis, each table op lowered on its own exchanges counts and rows of its own
(:mod:`lowering.expert_tables`: two ``all_to_all`` per gather and per scatter). Folded, the
table rides on the product's exchange (:class:`~lowering.expert_parallel.FoldedTable`): the
expert's rank adds its experts' entries to the results before they go back, and sums per expert
the gradient rows it received; the table op itself computes nothing.

Folded only where that is the same computation: the add takes the product and the gather and
nothing else does (no redistribution between them, the same placement, the same shape); the
scatter's gradient is the very tensor the backward product sends (neither redistributed, sent
in its own dtype), and the ids are in the program before the product. That the ids give each
row the expert the offsets give it (both sorted, so the same count per expert) is checked on
every rank with the dispatch's verdict, before any row moves
(:data:`~lowering.expert_dispatch.DISAGREE_ERROR` on every rank where not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.fx import Graph, Node

__all__ = ["Folds", "find_folds"]

_ADD = "aten.add.Tensor"
_GATHER = "aten.index.Tensor"
_SCATTER = "aten.index_put.default"


@dataclass(frozen=True)
class Folds:
    """The tables folded into products, by node name: ``gathers``, product → the gather whose
    entries it adds to its results; ``sums``, add → the product that computed it; ``scatters``,
    product → the scatter that takes the sums per expert of the gradient rows it sends;
    ``computed_elsewhere``: the gathers, computed by their product."""

    gathers: Mapping[str, Node]
    sums: Mapping[str, Node]
    scatters: Mapping[str, Node]
    computed_elsewhere: frozenset[str]


def find_folds(graph: Graph, product_axis: Callable[[Node], tuple[int, int] | None],
               table_axis: Callable[[Node], int | None], redistributed: Callable[[str, int], bool],
               placement: Callable[[str], object]) -> Folds:
    """The folds of ``graph``'s nodes (see the module docstring): ``product_axis(node)`` gives the
    mesh axis a grouped product is run expert parallel over and the operand it sends (None: not
    one); ``table_axis(node)``, the axis a table op splits its table over (None: not split);
    ``redistributed(consumer, k)``, whether the plan redistributes that operand; ``placement(name)``,
    a node's placements."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    gathers: dict[str, Node] = {}
    sums: dict[str, Node] = {}
    scatters: dict[str, Node] = {}
    for node in graph.nodes:
        if str(node.target) == _ADD and len(node.args) == 2 and not node.kwargs:
            found = _gather_fold(node, product_axis, table_axis, redistributed, placement, order)
            if found is not None:
                product, gather = found
                gathers[product.name], sums[node.name] = gather, product
        elif str(node.target) == _SCATTER:
            product = _scatter_fold(node, product_axis, table_axis, redistributed, order, {*gathers, *scatters})
            if product is not None:
                scatters[product.name] = node
    return Folds(gathers, sums, scatters, frozenset(g.name for g in gathers.values()))


def _gather_fold(add: Node, product_axis: Callable[[Node], tuple[int, int] | None],
                 table_axis: Callable[[Node], int | None], redistributed: Callable[[str, int], bool],
                 placement: Callable[[str], object], order: Mapping[Node, int]) -> tuple[Node, Node] | None:
    """(product, gather) where ``add`` adds a product's results and a table's gather it can fold."""
    from torch.fx import Node

    if not all(isinstance(a, Node) for a in add.args) or any(redistributed(add.name, k) for k in (0, 1)):
        return None
    for product, gather in (add.args, add.args[::-1]):
        run = product_axis(product)
        # a forward sends its operand 0's rows, and its results come back as rows
        if (run is None or run[1] != 0 or str(gather.target) != _GATHER or table_axis(gather) != run[0]
                or len(product.users) != 1 or len(gather.users) != 1):
            continue
        shapes = {tuple(map(str, n.meta["val"].shape)) for n in (add, product, gather)}  # as the trace writes them
        inputs_first = all(order[i] < order[product] for i in gather.all_input_nodes)
        if len(shapes) == 1 and placement(product.name) == placement(gather.name) and inputs_first:
            return product, gather
    return None


def _scatter_fold(scatter: Node, product_axis: Callable[[Node], tuple[int, int] | None],
                  table_axis: Callable[[Node], int | None], redistributed: Callable[[str, int], bool],
                  order: Mapping[Node, int], taken: set[str]) -> Node | None:
    """The first product before ``scatter`` (a table's gradient scatter) that sends its gradient rows,
    into which it can fold (``taken``: products that fold a table already); None where there is none."""
    from torch.fx import Node

    args = scatter.args
    axis = table_axis(scatter)
    if (axis is None or len(args) != 4 or args[3] is not True or len(args[1]) != 1 or not isinstance(args[1][0], Node)
            or not isinstance(args[2], Node) or redistributed(scatter.name, 2)):
        return None
    ids, grad = args[1][0], args[2]
    for product in sorted(grad.users, key=order.__getitem__):
        run = product_axis(product)
        if run is None or run[0] != axis or product.name in taken or order[product] > order[scatter]:
            continue
        sent = run[1]
        operands = [a for a in product.args if isinstance(a, Node)]
        if (sent < len(operands) and operands[sent] is grad and not redistributed(product.name, sent)
                and operands[0].meta["val"].dtype == grad.meta["val"].dtype and order[ids] < order[product]):
            return product
    return None
