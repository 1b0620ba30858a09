"""lowering: plans become per-rank programs, compiled once by Inductor, run on torch.distributed.

Public API:

* :func:`parallelize` / :class:`ParallelModule` — trace, plan, lower and compile a model on
  this rank: a ``torch.nn.Module`` with DTensor parameters (plain ones on a mesh of one device),
  called with the global inputs (or DTensors of them), returning DTensors; with
  ``training=True`` a loss computed from its outputs backpropagates into its parameters;
* :func:`lower` → :class:`LocalProgram` — a plan's per-rank FX graph, with the collectives it
  emitted; :func:`compile_program` → :class:`CompiledProgram`;
* :func:`launch` — run ``fn(rank)`` on local processes with the default group initialized;
  :func:`preload` — modules its CPU ranks' forkserver imports once, for every rank;
* errors: :class:`GuardViolation`, :class:`InputError`, :class:`RankMismatch`, :class:`LoweringError`,
  :class:`LaunchTimeout`, :class:`RankFailure`.

Importing this package does not import torch; the submodules do when used.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from lowering.errors import GuardViolation, InputError, LoweringError, RankMismatch
from lowering.launch import LaunchTimeout, RankFailure, launch, preload

if TYPE_CHECKING:
    from lowering.compile import CompiledProgram, compile_program
    from lowering.lower import LocalProgram, lower
    from lowering.parallel import ParallelModule, parallelize

__all__ = [
    "CompiledProgram",
    "GuardViolation",
    "InputError",
    "LaunchTimeout",
    "LocalProgram",
    "LoweringError",
    "ParallelModule",
    "RankFailure",
    "RankMismatch",
    "compile_program",
    "launch",
    "lower",
    "parallelize",
    "preload",
]

_LAZY = {
    "CompiledProgram": "lowering.compile",
    "compile_program": "lowering.compile",
    "LocalProgram": "lowering.lower",
    "lower": "lowering.lower",
    "ParallelModule": "lowering.parallel",
    "parallelize": "lowering.parallel",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lowering' has no attribute {name!r}")


class _Package(types.ModuleType):
    """This package's module type. Loading a submodule binds it on its package under its own
    name, which would make ``lowering.lower`` the module ``lowering/lower.py`` instead of the
    public function once anything imported that module; a public name keeps its object (the
    module's own names are imported with ``from lowering.lower import ...``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
