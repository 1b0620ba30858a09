"""The repository stands on its own: no file it tracks names a path on the machine it was written on."""

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
