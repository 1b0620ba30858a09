"""Memory budgets that force sharded weights, derived from the planner's own figures, so a test
that means to lower sharded weights still does when the memory model changes.

A budget forces ``target`` (a placement-constraint target: ``"parameters"``, a parameter's
name, a predicate) to be sharded when some plan fits it and every plan keeping ``target``
replicated does not: it lies in the window from what the plan needing the least memory needs
to what the least-memory plan with ``target`` pinned replicated needs. Both ends are what the
planner reports when no plan fits (:class:`planner.MemoryBudgetError`, under a one-byte budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import planner
from planner.placement_constraints import Target
from shapecore.torch import trace_for_planning


def sharding_window(model: Any, example_inputs: Sequence[Any], *, dynamic_shapes: Any, mesh: Any, training: bool = False,
                    targets: Sequence[Target] = ("parameters",), **options: Any) -> tuple[float, float]:
    """``(fits, kept)`` bytes per device: the least memory any plan needs, and the least a plan
    keeping one of ``targets`` replicated needs, for ``model`` traced and planned as
    ``ParallelModule`` does with these arguments (``options``: its plan options)."""
    traced = trace_for_planning(model, example_inputs, dynamic_shapes=dynamic_shapes, training=training)
    mesh = planner.as_mesh(mesh)

    def least(*pins: planner.Pin) -> float:
        try:
            planner.plan(traced.exported if traced.exported is not None else traced.graph_module, mesh,
                         shape_env=traced.env, dims=traced.dim_exprs, memory_budget=1,
                         **{**options, "placement_constraints": [*options.get("placement_constraints", ()), *pins]})
        except planner.MemoryBudgetError as error:
            assert error.exact, str(error)  # the least, proved: the window's ends are sound
            return error.memory.total
        raise AssertionError("a plan fits in one byte per device")

    fits = least()
    kept = min(least(planner.Pin(target, ",".join("R" * mesh.ndim))) for target in targets)
    assert fits < kept, f"no memory budget forces {targets} to be sharded: keeping one replicated needs {kept} bytes, the least {fits}"
    return fits, kept


def sharding_budget(model: Any, example_inputs: Sequence[Any], **arguments: Any) -> float:
    """A memory budget (bytes per device) some plan fits and no plan keeping one of the
    ``targets`` replicated fits: the middle of the :func:`sharding_window`."""
    return sum(sharding_window(model, example_inputs, **arguments)) / 2
