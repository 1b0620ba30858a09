"""A corpus of small models whose ``dynamic_shapes`` spec ``torch.export`` rejects, for
:mod:`shapecore.torch.suggest`: divisibility from views and reshapes, ranges from slicing and
``narrow``, equal dims across inputs, dims derived through ``cat``, a dim the code specializes.

``CORPUS`` maps a name to a :class:`SpecCase`: the model, its example inputs (sizes of 2 or
more, with no accidental equalities) and the spec the user wrote (plain ``Dim`` objects). Each
model is a few ops, so exporting it takes a fraction of a second. :func:`program_runs` runs an
exported program at the smallest sizes a spec admits (and one more), against the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as TF
from torch import nn
from torch.export import Dim

from shapecore import evaluate


@dataclass(frozen=True)
class SpecCase:
    """One model, its example inputs and the rejected spec; ``fast`` cases run in the default suite."""

    name: str
    model: nn.Module
    args: tuple[Any, ...]
    spec: Callable[[], Any]
    fast: bool = False


class _Forward(nn.Module):
    def __init__(self, forward: Callable[..., Any], **buffers: torch.Tensor) -> None:
        super().__init__()
        self.fn = forward
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, *args: Any) -> Any:
        return self.fn(self, *args)


class _X(_Forward):
    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self, x)


class _XY(_Forward):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        return self.fn(self, x, y)


def _one(name: str) -> Callable[[], Any]:
    return lambda: {"x": {0: Dim(name)}}


def _two(a: str, b: str) -> Callable[[], Any]:
    return lambda: {"x": {0: Dim(a)}, "y": {0: Dim(b)}}


CORPUS: dict[str, SpecCase] = {}


def _case(name: str, model: nn.Module, args: tuple[Any, ...], spec: Callable[[], Any], fast: bool = False) -> None:
    CORPUS[name] = SpecCase(name, model, args, spec, fast)


r = torch.randn
# divisibility from views and reshapes
_case("view_by_quarter", _X(lambda m, x: x.view(x.shape[0] // 4, 4, -1)), (r(8, 3),), _one("batch"), fast=True)
_case("reshape_rows_of_6", _X(lambda m, x: x.reshape(-1, 6)), (r(4, 3),), _one("n"))
_case("reshape_by_4_and_6", _X(lambda m, x: (x.reshape(-1, 4).sum(), x.reshape(-1, 6).sum())), (r(24),), _one("n"))
_case("view_heads", _X(lambda m, x: x.view(x.shape[0], x.shape[1] // 8, 8)), (r(2, 16),),
      lambda: {"x": {1: Dim("seq")}})
_case("odd_length_pairs", _X(lambda m, x: torch.cat([x, x[:1]]).view(-1, 2)), (r(5),), _one("n"), fast=True)
_case("ratio_of_two_views", _XY(lambda m, x, y: x.view(-1, 2).sum(1) + y.view(-1, 3).sum(1)), (r(4), r(6)), _two("dx", "dy"),
      fast=True)
_case("view_then_narrow", _X(lambda m, x: x.view(-1, 4).narrow(0, 1, 2)), (r(16),), _one("n"))
_case("view_pairs_of_2_columns", _X(lambda m, x: x.view(-1, 4)), (r(6, 2),), _one("n"))
_case("unflatten_heads", _X(lambda m, x: x.unflatten(1, (-1, 4)).transpose(1, 2).flatten(1)), (r(2, 12),),
      lambda: {"x": {1: Dim("d")}})
_case("chunk_halves", _X(lambda m, x: x.chunk(2)[0] + x.chunk(2)[1]), (r(8),), _one("n"), fast=True)
# ranges from slicing and narrow
_case("narrow", _X(lambda m, x: x.narrow(0, 2, 3)), (r(8),), _one("n"), fast=True)
_case("slice_from_2", _X(lambda m, x: x[2:] * 2), (r(8),), _one("n"))
_case("slice_to_3", _X(lambda m, x: x[:3] + torch.ones(3)), (r(8),), _one("n"))
_case("positional_table", _X(lambda m, x: x + m.table[: x.shape[0]], table=torch.zeros(16, 4)), (r(8, 4),), _one("seq"))
# equal dims across inputs
_case("add_inputs", _XY(lambda m, x, y: x + y), (r(4), r(4)), _two("dx", "dy"), fast=True)
_case("matmul_inner", _XY(lambda m, x, y: x @ y), (r(3, 5), r(5, 2)), lambda: {"x": {1: Dim("k")}, "y": {0: Dim("k2")}})
# dims derived through cat
_case("cat_twice", _XY(lambda m, x, y: torch.cat([x, x]) + y), (r(4), r(8)), _two("dx", "dy"))
_case("cat_one_more", _XY(lambda m, x, y: torch.cat([x, x[:1]]) + y), (r(4), r(5)), _two("dx", "dy"), fast=True)
_case("cat_padding", _XY(lambda m, x, y: torch.cat([x, torch.zeros(2)]) + y), (r(4), r(6)), _two("dx", "dy"))
_case("first_half_then_cat", _XY(lambda m, x, y: torch.cat([x[: x.shape[0] // 2], y])), (r(8), r(3)), _two("dx", "dy"))
# relations no derived Dim states (torch checks them at run time)
_case("pool_then_add", _XY(lambda m, x, y: TF.avg_pool1d(x[None], 2)[0] + y), (r(3, 8), r(3, 4)),
      lambda: {"x": {1: Dim("n")}, "y": {1: Dim("m")}})
_case("every_other_then_add", _XY(lambda m, x, y: x[::2] + y), (r(8), r(4)), _two("dx", "dy"))
# a dim the code fixes
_case("specialized", _X(lambda m, x: x.view(8, 3)), (r(8, 3),), _one("n"))


# -- running an exported program at the sizes a spec admits ------------------------------------------


def dim_values(suggestion, root_values):
    """Each dim's value when the roots take ``root_values`` (asserted dims computed from the others)."""
    point = {name: fix.offset if fix.root is None else fix.coeff * root_values[fix.root] + fix.offset
             for name, fix in suggestion.dims.items() if fix.root not in suggestion.asserted}
    for name, value in suggestion.asserted.items():
        point[name] = evaluate(value, point | root_values)
    return point


def admitted_inputs(case, spec, root_values):
    """The case's example inputs resized to the dims ``spec`` gives when each root takes its value
    (``root_values`` by root name; a derived dim computed by its own function)."""
    sizes = {}
    for name, axes in spec.items():
        for axis, dim in axes.items():
            if isinstance(dim, Dim):
                root = getattr(dim, "root", None)
                sizes[(name, axis)] = dim.fn(root_values[root.__name__]) if root is not None else root_values[dim.__name__]
    names = list(spec)
    result = []
    for name, arg in zip(names, case.args):
        shape = [sizes.get((name, axis), size) for axis, size in enumerate(arg.shape)]
        result.append(torch.randn(shape))
    return tuple(result)


def smallest_points(spec):
    """Each root of ``spec`` at its min, and at one more: two points the spec admits."""
    roots = {}
    for axes in spec.values():
        for dim in axes.values():
            if isinstance(dim, Dim):
                root = getattr(dim, "root", None) or dim
                roots[root.__name__] = root.min
    return [roots, {k: v + 1 for k, v in roots.items()}]


def program_runs(exported, case, spec, suggestion):
    """Whether ``exported`` runs, and agrees with the model, at the points :func:`smallest_points` picks;
    a dim ``suggestion`` asserts from others (``m = n // 2``) takes that value."""
    for point in smallest_points(spec):
        if suggestion.asserted:
            point = point | {k: v for k, v in dim_values(suggestion, point).items() if k in suggestion.asserted}
        inputs = admitted_inputs(case, spec, point)
        try:
            got = exported.module()(*inputs)
        except Exception:  # noqa: BLE001 - a rejected input is the answer
            return False
        want = case.model(*inputs)
        if not all(torch.allclose(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(got),
                                                         torch.utils._pytree.tree_leaves(want))):
            return False
    return True


def dynamic_dims(spec):
    """Which dims of ``spec`` are dynamic (a static one admits a single size, whatever the count)."""
    return [(name, axis) for name, axes in spec.items() for axis, dim in axes.items() if isinstance(dim, Dim)]
