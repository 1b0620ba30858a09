"""shapecore: symbolic shape reasoning with PyTorch's vocabulary and Python's semantics.

The public API, importable without torch:

* :func:`parse` — guard text (torch's or Python's syntax) to an expression;
* :func:`prove` — proved / refuted (with a counterexample) / unknown, under facts and ranges;
* :func:`bound`, :func:`residue` — the range and residue class of an expression there;
* :class:`Reasoner` — a fact scope with the layered prover and its cache;
* :class:`ShapeEnv` — PyTorch's ShapeEnv verbs on top of a reasoner;
* :func:`evaluate`, :func:`holds` — exact evaluation; :func:`extend_assignment` — values of
  replaced symbols; :func:`torch_str`, :func:`python_str`;
* :class:`Progress` — how far long work got, and a wall-clock limit on it
  (``simplify(..., progress=...)``);
* the vocabulary (:class:`FloorDiv`, :class:`Mod`, …) and the errors.

Hypothesis strategies for property tests live in :mod:`shapecore.testing` (needs hypothesis).
"""

from shapecore.env import RuntimeAssert, ShapeEnv, SymbolInfo
from shapecore.errors import (
    ArgumentError,
    ConstraintError,
    DataDependentError,
    GuardInputError,
    ParseError,
    ShapecoreError,
    UnboundSymbolError,
)
from shapecore.evaluation import evaluate, extend_assignment, holds
from shapecore.functions import (
    CeilDiv,
    CeilToInt,
    CleanDiv,
    FloatTrueDiv,
    FloorDiv,
    FloorToInt,
    IntTrueDiv,
    Max,
    Min,
    Mod,
    ModularIndexing,
    PythonAnd,
    PythonMod,
    PythonOr,
    RoundToInt,
    ToFloat,
    TruncToFloat,
    TruncToInt,
    int_symbol,
)
from shapecore.guard_code import compile_guards
from shapecore.knowledge import creation_order
from shapecore.modular import ModularSet
from shapecore.parsing import parse
from shapecore.printing import python_str, torch_str
from shapecore.progress import Progress
from shapecore.proof import Proof
from shapecore.ranges import ValueRange
from shapecore.reasoner import Reasoner, bound, prove, residue
from shapecore.simplifier import Simplified, simplify

__all__ = [
    "ArgumentError",
    "CeilDiv",
    "CeilToInt",
    "CleanDiv",
    "ConstraintError",
    "DataDependentError",
    "FloatTrueDiv",
    "FloorDiv",
    "FloorToInt",
    "GuardInputError",
    "IntTrueDiv",
    "Max",
    "Min",
    "Mod",
    "ModularIndexing",
    "ModularSet",
    "ParseError",
    "Progress",
    "Proof",
    "PythonAnd",
    "PythonMod",
    "PythonOr",
    "Reasoner",
    "RoundToInt",
    "RuntimeAssert",
    "ShapeEnv",
    "ShapecoreError",
    "Simplified",
    "SymbolInfo",
    "ToFloat",
    "TruncToFloat",
    "TruncToInt",
    "UnboundSymbolError",
    "ValueRange",
    "bound",
    "compile_guards",
    "creation_order",
    "evaluate",
    "extend_assignment",
    "holds",
    "int_symbol",
    "parse",
    "prove",
    "python_str",
    "residue",
    "simplify",
    "torch_str",
]
