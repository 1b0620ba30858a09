"""Preloaded by :func:`lowering.launch`'s forkserver: work every rank would otherwise repeat.

Importing this module detects the CPU's vector ISA the way Inductor does before its first
compile (it builds and loads a probe with the C++ compiler, seconds of work). Ranks forked
from the forkserver inherit the cached answer. Nothing here starts a thread, so forking
afterwards stays safe.
"""

from torch._inductor.cpu_vec_isa import pick_vec_isa

pick_vec_isa()
