"""The repository stands on its own: no file it tracks names a path on the machine it was written on,
and every module with logic has a test module of its own, mirroring its path."""

import ast
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A directory beside the checkout (where the design notes and corpus once lived) or a home or
# work directory of the machine the code was written on: none exists on a user's machine.
MACHINE_PATH = re.compile(r"\.\./shared\b|(?<![\w.])/(?:work|home|Users|root)/")


def _tracked_files() -> list[str]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listing.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_outside_the_repository():
    files = _tracked_files()
    assert "pyproject.toml" in files and "docs/architecture.md" in files
    found = []
    for name in files:
        if name == "tests/test_repository.py":  # states the pattern
            continue
        try:
            with open(os.path.join(ROOT, name), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError):  # binary, or deleted in the work tree
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "paths that exist only on the machine this was written on:\n" + "\n".join(found)


PACKAGES = ("shapecore", "planner", "lowering")
# Modules with logic that have no mirrored test module, each with the reason. An entry that is no
# longer needed (the module got its mirror, or lost its logic, or is gone) fails the test below.
UNMIRRORED: dict[str, str] = {}


def _has_logic(path: str) -> bool:
    """Whether the module defines a function or a class."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body)


def _mirror(module: str) -> str:
    """The test module of ``module`` (a path under the repository): ``planner/problem/groups.py`` ->
    ``tests/planner/problem/test_groups.py``; a package's ``__init__.py`` -> ``test_<package>.py`` beside
    its submodules' tests."""
    folder, name = os.path.split(module)
    stem = os.path.basename(folder) if name == "__init__.py" else name.removesuffix(".py")
    return os.path.join("tests", folder, f"test_{stem}.py")


def _modules_with_logic() -> list[str]:
    found = []
    for package in PACKAGES:
        for folder, subfolders, files in os.walk(os.path.join(ROOT, package)):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                if name.endswith(".py") and _has_logic(path):
                    found.append(os.path.relpath(path, ROOT))
    return found


def test_every_module_with_logic_has_a_mirrored_test_module():
    modules = _modules_with_logic()
    assert "planner/problem/groups.py" in modules and "lowering/__init__.py" in modules
    assert _mirror("planner/problem/groups.py") == "tests/planner/problem/test_groups.py"
    assert _mirror("lowering/__init__.py") == "tests/lowering/test_lowering.py"
    missing = [f"{m}: {_mirror(m)}" for m in modules if m not in UNMIRRORED and not os.path.exists(os.path.join(ROOT, _mirror(m)))]
    assert not missing, "modules with logic and no test module of their own (write one, or exempt the module "\
                        "in UNMIRRORED with the reason):\n" + "\n".join(missing)
    stale = [m for m in UNMIRRORED if m not in modules or os.path.exists(os.path.join(ROOT, _mirror(m)))]
    assert not stale, "exempt modules that now have a mirrored test module or no logic; drop them from UNMIRRORED: " + ", ".join(stale)
