"""A fresh Inductor cache for one benchmark run, removed when the run exits.

Fresh so that a timing never depends on what an earlier run compiled; removed so that runs do
not pile their compiled programs up in the temporary directory.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def use_fresh_inductor_cache(prefix: str) -> str:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` (inherited by the ranks this process launches) at a new
    directory named ``prefix…``, removed at exit; return it."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    return path
