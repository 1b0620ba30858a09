"""The lowering tests' Inductor cache (one per test session, shared by ranks and xdist workers)."""

import tests.lowering.conftest  # noqa: F401 - sets TORCHINDUCTOR_CACHE_DIR on import
