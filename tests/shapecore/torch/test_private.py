"""torch's private names: all behind shapecore.torch.private, each resolving on the torch it was checked against."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from shapecore.torch import private

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ("shapecore", "planner", "lowering", "bench")
THE_DOOR = ROOT / "shapecore" / "torch" / "private.py"
OTHER_LIBRARIES = ("_print", "_SubParsersAction")  # sympy's printer dispatch (_print, _print_<Class>); argparse's
_MODULE_PATH = re.compile(r"torch(\.\w+)+")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when it does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _defined(trees: list[ast.AST]) -> set[str]:
    """Every name the project itself defines or binds (its own private names are fine to use)."""
    names = set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                names.add(n.attr)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, ast.alias):
                names.add((n.asname or n.name).split(".")[0])
    return names


def private_torch_uses(tree: ast.AST, defined: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each private torch name ``tree`` uses: imported, reached through an
    attribute of torch or of a name bound to something of torch's, passed as a keyword to one of
    torch's callables, named as a module path in a string, or a private attribute the project
    does not define itself (``op._schema``)."""
    torch_names: dict[str, list[str]] = {"torch": ["torch"]}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "torch" and a.asname:
                    torch_names[a.asname] = a.name.split(".")
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "torch":
            for a in n.names:
                torch_names[a.asname or a.name] = [*n.module.split("."), a.name]
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            chain = _chain(n.value)
            if chain and chain[0] in torch_names:
                torch_names[n.targets[0].id] = torch_names[chain[0]] + chain[1:]

    def resolved(node: ast.AST) -> list[str] | None:
        chain = _chain(node)
        return torch_names[chain[0]] + chain[1:] if chain and chain[0] in torch_names else None

    uses = []
    outer = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            uses += [(n.lineno, a.name) for a in n.names
                     if a.name.split(".")[0] == "torch" and any(map(_private, a.name.split(".")))]
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "torch":
            if any(map(_private, n.module.split("."))) or any(_private(a.name) for a in n.names):
                uses.append((n.lineno, f"{n.module}: {', '.join(a.name for a in n.names)}"))
        elif isinstance(n, ast.Attribute) and id(n) not in outer:
            full = resolved(n)
            if full is not None and full[:2] != ["torch", "ops"] and any(map(_private, full[1:])):
                uses.append((n.lineno, ".".join(full)))
            elif full is None and _private(n.attr) and n.attr not in defined and not n.attr.startswith(OTHER_LIBRARIES):
                uses.append((n.lineno, f".{n.attr}"))
        elif isinstance(n, ast.Call) and resolved(n.func) is not None:
            uses += [(n.lineno, f"{'.'.join(resolved(n.func))}({k.arg}=…)") for k in n.keywords if k.arg and _private(k.arg)]
        elif (isinstance(n, ast.Constant) and isinstance(n.value, str) and _MODULE_PATH.fullmatch(n.value)
              and any(map(_private, n.value.split(".")))):
            uses.append((n.lineno, repr(n.value)))
    return sorted(set(uses))


def test_the_check_finds_every_kind_of_use():
    code = '''
import torch._inductor.compile_fx
from torch._guards import detect_fake_mode
from torch.distributed import _functional_collectives as funcol
from torch.distributed.tensor import DTensor
from torch.fx.experimental.proxy_tensor import make_fx
import torch.distributed as dist
x = torch._ops.OpOverload
y = DTensor._op_dispatcher
z = dist.distributed_c10d._get_default_group()
make_fx(f, _allow_non_fake_inputs=True)
schema = op._schema
PRELOAD = ["torch._inductor.compile_fx"]
aten = torch.ops.aten
fine = aten._softmax.default, torch.ops.aten._unsafe_view, self._own, "see torch._dynamo.config", printer._print(x)
'''
    found = [what for _, what in private_torch_uses(ast.parse(code), {"_own"})]
    assert found == [
        "torch._inductor.compile_fx", "torch._guards: detect_fake_mode", "torch.distributed: _functional_collectives",
        "torch._ops.OpOverload", "torch.distributed.tensor.DTensor._op_dispatcher",
        "torch.distributed.distributed_c10d._get_default_group", "torch.fx.experimental.proxy_tensor.make_fx"
        "(_allow_non_fake_inputs=…)", "._schema", "'torch._inductor.compile_fx'",
    ]


def test_no_module_touches_a_private_torch_name_but_the_one_behind_which_they_all_are():
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")) if p != THE_DOOR]
    trees = {p: ast.parse(p.read_text(), str(p)) for p in files}
    defined = _defined(list(trees.values()))
    found = [f"{p.relative_to(ROOT)}:{line}: {what}" for p, tree in trees.items()
             for line, what in private_torch_uses(tree, defined)]
    assert not found, "use these through shapecore.torch.private:\n" + "\n".join(found)


def test_every_private_name_resolves_on_the_torch_it_was_checked_against():
    assert torch.__version__.split("+")[0] == private.CHECKED_TORCH_VERSION, (
        f"torch {torch.__version__} is installed; check every name in shapecore/torch/private.py against it "
        f"and update CHECKED_TORCH_VERSION")
    for name, (*_, purpose) in private.NAMES.items():
        assert getattr(private, name) is not None and purpose, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        private.nothing_here  # noqa: B018


def test_importing_the_front_end_does_not_import_torch():
    code = "import sys, shapecore.torch, shapecore.torch.private; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
