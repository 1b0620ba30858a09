"""Peak memory per device as the program runs: which storages are live at each step.

The program runs the graph's nodes in order, one step each. A node allocates one storage for
its outputs, unless it is an alias (``GraphNode.alias_of``: a view, an in-place result, or a
``getitem`` of a tuple, which shares its tuple's storage): then it shares its base's storage
and allocates nothing. A storage is live from the step that allocates it to the last step
that reads it through any of its aliases, so a forward temporary dies at its last use and an
activation saved for backward lives until the backward's last read of it. Placeholders
(parameters, buffers, user inputs, tangents: the caller holds them) and storages the graph
returns live for the whole program.

A gradient the graph returns is counted with its parameter (the cost model's ``gradients``
part, with the ``optimizer`` states, for the whole program), so its own storage is not
counted again. Memory at a step is the sum over the storages live there; the peak is the
largest step.

A plan adds storages of its own (:meth:`~planner.problem.Problem.peak_memory`): the result of
each redistribution, allocated just before its consumer's step and live through it (through
the consumer's aliases' reads when the consumer is a view of it: an all-gathered weight whose
transpose is saved for backward lives until the backward); a gradient redistributed on its
way out, which keeps its unreduced storage live to the end. Only the last step's buffer of a
multi-step redistribution is counted.

Without those, the live set at a step does not depend on the plan, only the bytes do: "the
peak fits a budget" is one linear constraint per step over the placement choices, which is
what the ILP adds for the steps that bind (:mod:`planner.ilp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.graph import PlanGraph

__all__ = ["Liveness"]


@dataclass(frozen=True)
class Liveness:
    """Program steps (node names in order), and each held storage's first and last live step.

    ``holders`` names the nodes that hold a storage (the node that allocates it, a placeholder
    or a constant); ``start[i]``/``end[i]`` bound the live steps of ``holders[i]``, inclusive.
    """

    steps: tuple[str, ...]
    holders: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    held: frozenset[str]
    step: dict[str, int]
    root: dict[str, str]
    reach: dict[str, int]
    """Per node, the last step that reads it or an alias made from it (the last step when returned)."""

    @classmethod
    def of(cls, graph: PlanGraph) -> Liveness:
        """The liveness of ``graph``'s storages, in graph order."""
        steps = tuple(node.name for node in graph if node.role != "sink")
        step = {name: i for i, name in enumerate(steps)}
        last_step = len(steps) - 1
        root: dict[str, str] = {}
        base: dict[str, str] = {}
        for name in steps:
            node = graph.nodes[name]
            of = node.alias_of or (node.source if node.role == "getitem" else None)
            if of is not None:
                base[name] = of
            root[name] = root[of] if of is not None else name
        reach = {}
        for name in steps:
            node = graph.nodes[name]
            whole = node.target in ("placeholder", "get_attr")
            reach[name] = max([last_step if whole else step[name]] + [
                last_step if graph.nodes[user].role == "sink" else step[user] for user, _ in graph.users[name]])
        for name in reversed(steps):  # an alias keeps its base alive as long as it is read
            if name in base:
                reach[base[name]] = max(reach[base[name]], reach[name])
        gradients = {root[graph.nodes[name].operands[0]] for name in graph.outputs
                     if name is not None and graph.nodes[name].grad_of is not None}
        holders = tuple(name for name in steps if root[name] == name and name not in gradients)
        starts = np.array([0 if graph.nodes[h].target in ("placeholder", "get_attr") else step[h] for h in holders], dtype=int)
        ends = np.array([reach[h] for h in holders], dtype=int)
        return cls(steps, holders, starts, ends, frozenset(holders), step, root, reach)

    def holds(self, name: str) -> bool:
        """Whether node ``name`` holds a storage of its own (not an alias, not a returned gradient)."""
        return name in self.held

    def live(self, step: int) -> list[str]:
        """The holders whose storage is live at ``step``."""
        mask = (self.start <= step) & (step <= self.end)
        return [self.holders[i] for i in np.flatnonzero(mask)]

    def timeline(self, sizes: Mapping[str, np.ndarray], points: int,
                 extra: Sequence[tuple[int, int, np.ndarray]] = ()) -> np.ndarray:
        """``[steps, points]`` live bytes at every step, given each holder's bytes per point
        (holders missing from ``sizes`` count nothing) and ``extra`` storages (first step, last
        step, bytes per point)."""
        change = np.zeros((len(self.steps) + 1, points))
        for i, holder in enumerate(self.holders):
            size = sizes.get(holder)
            if size is not None:
                change[self.start[i]] += size
                change[self.end[i] + 1] -= size
        for first, last, size in extra:
            change[first] += size
            change[last + 1] -= size
        return np.cumsum(change[:-1], axis=0)
