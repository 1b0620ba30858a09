"""Marks the tests of shapecore's torch-free core ``torch_free``.

``import shapecore`` never imports torch (``test_env.py`` checks it), so a test whose module
imports nothing of torch, the planner, the lowering or ``shapecore.torch``, nor a test helper that
does, has the same outcome whichever torch is installed. CI runs the whole suite on one torch
release and, on the next, every test but these (``tox.ini``): ~1,500 tests that would only run
again. A module is read for such imports anywhere in it (in a function too); one that names any
is not marked.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent.parent
# in code or in the text of code a test runs elsewhere (``python -c``): conservative, prose counts too
_TORCH = re.compile(r"\b(?:import|from)\s+(?:torch|planner|lowering)\b|\bshapecore\.torch\b")


def _helpers(tree: ast.AST) -> list[Path]:
    """The modules under ``tests/`` that ``tree`` imports (``from tests.a import b``: ``a``, and ``a/b`` if a module)."""
    found = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            if name.startswith("tests."):
                base = _TESTS.parent.joinpath(*name.split("."))
                found += [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()]
    return found


@functools.cache
def torch_free(path: Path) -> bool:
    """Whether the module at ``path`` imports no torch, planner, lowering nor ``shapecore.torch``,
    directly or through a module under ``tests/`` it imports."""
    text = path.read_text()
    return not _TORCH.search(text) and all(torch_free(h) for h in _helpers(ast.parse(text)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        path = Path(item.path).resolve()
        if path.parent == here and torch_free(path):
            item.add_marker(pytest.mark.torch_free)
