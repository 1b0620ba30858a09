"""shapecore.torch: the torch front end, the one place where the project meets torch's internals.

Importing it imports no torch (each function does when called), and ``import shapecore``
does not import it. Modules:

* :mod:`~shapecore.torch.tracing` — :func:`trace_export`, :func:`trace_compile`,
  :func:`trace_make_fx` (each returns a :class:`Traced`) and :func:`trace_for_planning`, the
  graph the planner plans and the lowering lowers (decomposed export, or the joint
  forward+backward graph), and :func:`backend_neutral`, under which the lowering retraces and
  compiles it;
* :mod:`~shapecore.torch.shape_env` — torch's ShapeEnv as shapecore's (:func:`from_torch`,
  :func:`torch_guards`, :func:`symbol_ranges`) and shapecore's symbols in a torch ShapeEnv
  (:func:`to_torch_symbols`);
* :mod:`~shapecore.torch.expressions` — expressions both ways (:func:`map_expr`,
  :func:`to_torch`), traced sizes as expressions (:func:`size_expr`) and back (:func:`to_symint`);
* :mod:`~shapecore.torch.suggest` — specs that export: :func:`suggest_dynamic_shapes` (a rejected
  ``dynamic_shapes`` corrected, every guard proved under it, checked by exporting) and
  :func:`suggest_spec` (the same from guards alone, as ``shapecore suggest`` reads them);
* :mod:`~shapecore.torch.fake` — the ShapeEnv of traced values (:func:`shape_env_of`,
  :func:`graph_shape_env`);
* :mod:`~shapecore.torch.private` — every private torch name the project uses, checked
  against one torch release; nothing else in the project touches them.
"""

from shapecore.torch.expressions import UnmappableExpressionError, map_expr, size_expr, to_symint, to_torch
from shapecore.torch.fake import graph_shape_env, shape_env_of
from shapecore.torch.shape_env import TorchSymbols, from_torch, symbol_ranges, to_torch_symbols, torch_guards
from shapecore.torch.suggest import Suggestion, suggest_dynamic_shapes, suggest_spec
from shapecore.torch.tracing import (DataDependentBranchError, Traced, backend_neutral, trace_compile, trace_export,
                                     trace_for_planning, trace_make_fx)

__all__ = [
    "DataDependentBranchError",
    "Suggestion",
    "Traced",
    "TorchSymbols",
    "UnmappableExpressionError",
    "backend_neutral",
    "from_torch",
    "graph_shape_env",
    "map_expr",
    "shape_env_of",
    "size_expr",
    "suggest_dynamic_shapes",
    "suggest_spec",
    "symbol_ranges",
    "to_symint",
    "to_torch",
    "to_torch_symbols",
    "torch_guards",
    "trace_compile",
    "trace_export",
    "trace_for_planning",
    "trace_make_fx",
]
