"""One Inductor cache for the whole lowering test session, shared by ranks, tests and xdist
workers (they inherit the variable), fresh per session so timings do not depend on earlier
runs, and removed when the process that made it exits."""

import atexit
import os
import shutil
import tempfile

if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="shapecore-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
