"""One Inductor cache for the whole lowering test session (ranks and tests share compiles),
fresh per session so timings do not depend on earlier runs."""

import os
import shutil
import tempfile

import pytest

_CACHE = tempfile.mkdtemp(prefix="shapecore-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _CACHE)


@pytest.fixture(scope="session", autouse=True)
def _inductor_cache():
    yield
    shutil.rmtree(_CACHE, ignore_errors=True)
