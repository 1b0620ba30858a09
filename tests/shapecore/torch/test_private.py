"""torch's private names and the names that differ between releases: all behind
shapecore.torch.private, each resolving on the torch releases it was checked against."""

from __future__ import annotations

import ast
import contextlib
import pathlib
import re
import subprocess
import sys
import tomllib
import types
import warnings
from unittest import mock

import pytest
import torch
from packaging.requirements import Requirement

from shapecore.torch import private

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ("shapecore", "planner", "lowering", "bench")
THE_DOOR = ROOT / "shapecore" / "torch" / "private.py"
OTHER_LIBRARIES = ("_print", "_SubParsersAction", "_assume_defined")
"""Private names of other libraries the project uses: sympy's printer dispatch (``_print``,
``_print_<Class>``), argparse's subparsers' action, sympy's list of the assumptions it deduces."""
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


def versioned_torch_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each name of ``private.VERSIONED`` that ``tree`` reads as an attribute
    (``dist.all_gather_single``) or imports from torch."""
    uses = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in private.VERSIONED:
            uses.append((n.lineno, f".{n.attr}"))
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "torch":
            uses += [(n.lineno, f"{n.module}: {a.name}") for a in n.names if a.name in private.VERSIONED]
    return sorted(uses)


def test_the_check_finds_every_use_of_a_name_that_differs_between_releases():
    code = '''
from torch.distributed import all_gather_into_tensor
from shapecore.torch.private import all_gather_single, functional_collectives as funcol
import torch.distributed as dist
dist.all_gather_single(out, x)
funcol.reduce_scatter_tensor(x, "sum", 0, group)
fine = all_gather_single(x, 0, group), funcol.all_reduce(x, "sum", group), dist.all_gather_object(out, x)
'''
    assert versioned_torch_uses(ast.parse(code)) == [
        (2, "torch.distributed: all_gather_into_tensor"), (5, ".all_gather_single"), (6, ".reduce_scatter_tensor")]


def test_no_module_uses_a_name_that_differs_between_releases_but_the_one_that_picks():
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")) if p != THE_DOOR]
    found = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in files
             for line, what in versioned_torch_uses(ast.parse(p.read_text(), str(p)))]
    assert not found, "use these through shapecore.torch.private's functions:\n" + "\n".join(found)


def test_pyproject_admits_the_checked_releases_and_no_other_minor_version():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    minors = sorted({tuple(map(int, v.split(".")[:2])) for v in private.CHECKED_TORCH_VERSIONS})
    (major, lowest), highest = minors[0], minors[-1][1]
    outside = [f"{major}.{lowest - 1}.0", f"{major}.{highest + 1}.0"]
    for extra in ("torch", "planner"):
        [torch_requirement] = [r for r in map(Requirement, extras[extra]) if r.name == "torch"]
        assert all(torch_requirement.specifier.contains(v) for v in private.CHECKED_TORCH_VERSIONS), extra
        assert not any(torch_requirement.specifier.contains(v) for v in outside), extra
    assert minors == [(major, m) for m in range(lowest, highest + 1)], "a minor version in the range is unchecked"


def test_every_private_name_resolves_on_the_torch_it_was_checked_against():
    assert torch.__version__.split("+")[0] in private.CHECKED_TORCH_VERSIONS, (
        f"torch {torch.__version__} is installed; check every name in shapecore/torch/private.py against it "
        f"and add it to CHECKED_TORCH_VERSIONS")
    for name, (*_, purpose) in private.NAMES.items():
        assert getattr(private, name) is not None and purpose, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        private.nothing_here  # noqa: B018


def test_importing_the_front_end_does_not_import_torch():
    code = "import sys, shapecore.torch, shapecore.torch.private; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _Lacking(types.ModuleType):
    """``module`` as an older torch has it: without the names ``lacking``, with ``older`` in place of its own."""

    def __init__(self, module: types.ModuleType, lacking: set[str], older: dict[str, object]) -> None:
        super().__init__(module.__name__)
        self.module, self.lacking, self.older = module, lacking, older

    def __getattr__(self, name: str) -> object:
        if name in self.lacking:
            raise AttributeError(name)
        return self.older[name] if name in self.older else getattr(self.module, name)


@contextlib.contextmanager
def _torch_before_2_13():
    """The installed torch as 2.11 has its collectives: no ``*_single`` names (in
    ``torch.distributed`` or its functional collectives), and a functional ``all_gather_tensor``
    that refuses a non-contiguous input."""
    import torch.distributed as dist
    from torch.distributed import _functional_collectives as funcol

    def all_gather_tensor_of_2_11(x, gather_dim, group, tag=""):
        if not x.is_contiguous():
            raise AssertionError("Tensor must be contiguous for all_gather_tensor")
        return funcol.all_gather_tensor(x, gather_dim, group, tag)

    singles = {"all_gather_single", "reduce_scatter_single"}
    with (mock.patch.object(torch, "distributed", _Lacking(dist, singles, {})),
          mock.patch.object(dist, "_functional_collectives",
                            _Lacking(funcol, singles, {"all_gather_tensor": all_gather_tensor_of_2_11})),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore", FutureWarning)  # 2.13 on deprecates the names 2.11 has
        yield all_gather_tensor_of_2_11


def _collectives_agree_with_their_definitions(rank: int) -> int:
    import torch.distributed as dist
    from torch.distributed import _functional_collectives as funcol

    world, group = dist.get_world_size(), dist.group.WORLD

    def piece(r: int) -> torch.Tensor:  # (3, 4): every rank's differs
        return torch.arange(12, dtype=torch.float32).reshape(4, 3).t() * (r + 1) + r

    def ready(t: torch.Tensor) -> torch.Tensor:
        return t.wait() if isinstance(t, funcol.AsyncCollectiveTensor) else t

    pieces = [piece(r) for r in range(world)]
    total = sum(pieces)
    checked = 0
    for torch_of in (contextlib.nullcontext, _torch_before_2_13):
        with torch_of() as all_gather_tensor_of_2_11, warnings.catch_warnings():
            x = pieces[rank]
            assert not x.is_contiguous()
            if all_gather_tensor_of_2_11 is None:
                warnings.simplefilter("error", FutureWarning)  # the installed torch's own names, none deprecated
            else:
                assert not hasattr(torch.distributed, "all_gather_single")
                with pytest.raises(AssertionError, match="must be contiguous"):
                    all_gather_tensor_of_2_11(x, 0, group)
            for dim in (0, 1):
                torch.testing.assert_close(ready(private.all_gather_single(x, dim, group)), torch.cat(pieces, dim))
            torch.testing.assert_close(ready(private.reduce_scatter_single(x, "sum", 1, group)),
                                       total.chunk(world, 1)[rank])
            gathered = torch.empty(world * 12)
            private.dist_all_gather_single(gathered, x.contiguous().flatten())
            torch.testing.assert_close(gathered, torch.cat([p.flatten() for p in pieces]))
            scattered = torch.empty(12 // world)
            private.dist_reduce_scatter_single(scattered, x.contiguous().flatten())
            torch.testing.assert_close(scattered, total.flatten().chunk(world)[rank])
            checked += 1
    return checked


@pytest.mark.slow  # gloo ranks
def test_collectives_give_the_same_pieces_through_the_names_of_every_release():
    from lowering.launch import launch

    assert launch(_collectives_agree_with_their_definitions, 2, timeout=120) == [2, 2]


def _placed(shape: tuple[int, ...], placements: list[tuple[object, ...]]):
    """DTensor's candidates for a ``shape`` float tensor on a (2,) mesh: an ``OpStrategy`` of ``placements``."""
    mesh = private.device_mesh_without_process_group((2,), None)
    meta = private.DTensorMeta(torch.Size(shape), torch.empty(shape).stride(), torch.float32)
    return private.OpStrategy([private.OpSpec(private.DTensorSpec(mesh, ps, meta)) for ps in placements])


def test_a_view_rule_that_refuses_one_placement_still_answers_for_the_others():
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._op_schema import OpSchema

    view = torch.ops.aten.view.default
    rule = private.sharding_propagator().op_strategy_funcs[view]
    # (3, 4, 8) -> (12, 8) on 2 ranks: a piece of dim 0 (size 3) does not flatten; every release refuses the list
    args = (_placed((3, 4, 8), [(Replicate(),), (Shard(0),), (Shard(2),)]), [12, 8])
    with pytest.raises(RuntimeError, match="unevenly"):
        rule(OpSchema(view, args, {}))
    answers = {(tuple(s.input_specs[0].placements), tuple(s.output_specs.placements))
               for s in private.whole_mesh_strategies(rule, view, args, {})}
    assert answers == {((Replicate(),), (Replicate(),)), ((Shard(2),), (Shard(1),))}


def test_a_rule_that_answers_no_placement_or_has_several_operands_raises_its_own_error():
    from torch.distributed.tensor import Replicate

    def refuses(schema):
        raise RuntimeError("refused")

    one = _placed((4, 8), [(Replicate(),)])
    for args in ((one, [32]), (one, one)):
        with pytest.raises(RuntimeError, match="refused"):
            private.whole_mesh_strategies(refuses, torch.ops.aten.view.default, args, {})


def test_a_dtensor_placed_like_another_shares_its_spec_holds_the_piece_and_computes_as_from_local_makes_it():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        like = DTensor.from_local(torch.randn(4, 3), init_device_mesh("cpu", (1,)), [Shard(0)])
        piece = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
        placed = private.dtensor_placed_like(like, piece)
        expected = DTensor.from_local(piece, like.device_mesh, like.placements)
        assert type(placed) is DTensor and placed._spec is like._spec and placed._local_tensor is piece
        assert (placed.shape, placed.stride(), placed.requires_grad) == (expected.shape, expected.stride(), False)
        assert torch.equal((placed * 2 + 1).full_tensor(), (expected * 2 + 1).full_tensor())
    finally:
        dist.destroy_process_group()


def test_decomposing_an_exported_program_warns_nothing_about_torch_s_own_internals():
    exported = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decomposed = private.run_decompositions(exported, {})
    assert not [w for w in caught if "LeafSpec" in str(w.message)]  # torch 2.11–2.13 warn from their own deep copy
    x = torch.randn(3, 4)
    torch.testing.assert_close(decomposed.module()(x), exported.module()(x))
