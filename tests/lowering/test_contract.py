"""The lowering reads the planner through its public contract only: the names ``planner`` exports."""

import ast
import pathlib

import planner

LOWERING = pathlib.Path(__file__).resolve().parents[2] / "lowering"


def planner_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) for each name of ``planner`` that ``tree`` imports or reads: a submodule
    (``planner.plan``), an imported name, or an attribute of ``import planner``."""
    found = []
    bound = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "planner":
                    found += [(n.lineno, a.name)] if a.name != "planner" else []
                    bound.add(a.asname or "planner")
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "planner":
            found += [(n.lineno, f"{n.module}.{a.name}") for a in n.names]
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound:
            found.append((n.lineno, f"planner.{n.attr}"))
    return sorted(found)


def test_the_check_sees_submodules_imported_names_and_attributes():
    code = "import planner\nimport planner.graph\nfrom planner import Plan\nfrom planner.plan import Mesh\nplanner.plan(1)\n"
    assert planner_names(ast.parse(code)) == [
        (2, "planner.graph"), (3, "planner.Plan"), (4, "planner.plan.Mesh"), (5, "planner.plan")]


def test_lowering_uses_only_what_planner_exports():
    exported = {f"planner.{name}" for name in planner.__all__}
    found = [f"{path.name}:{line}: {name}" for path in sorted(LOWERING.glob("*.py"))
             for line, name in planner_names(ast.parse(path.read_text())) if name not in exported]
    assert not found, "lowering reads planner internals (make them part of the Plan contract):\n" + "\n".join(found)
