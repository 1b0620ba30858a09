"""The lowering package's own module: its public names resolve to the submodules that define them,
importing it does not import torch, and an unknown name is an AttributeError naming it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import lowering


@pytest.mark.parametrize("name", lowering.__all__)
def test_every_public_name_is_the_object_its_submodule_defines(name):
    value = getattr(lowering, name)
    module = importlib.import_module(value.__module__)
    assert module.__name__.startswith("lowering.") and getattr(module, name) is value


def test_lower_stays_the_function_once_its_submodule_is_loaded():
    from lowering.lower import lower  # loads lowering/lower.py, which binds itself on the package

    assert lowering.lower is lower and callable(lowering.lower)
    from lowering import lower as again

    assert again is lower


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'lowering' has no attribute 'parallelise'"):
        lowering.parallelise  # noqa: B018


@pytest.mark.slow  # another interpreter
def test_importing_the_package_does_not_import_torch():
    code = "import sys, lowering; print(sorted(m for m in ('torch', 'planner') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
