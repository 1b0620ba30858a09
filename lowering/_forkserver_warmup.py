"""Preloaded by :func:`lowering.launch`'s forkserver: work every rank would otherwise repeat.

Importing this module imports Inductor's compiler and detects the CPU's vector ISA the way
Inductor does before its first compile (it builds and loads a probe with the C++ compiler,
seconds of work). Ranks forked from the forkserver inherit the cached answer. Nothing here
starts a thread, so forking afterwards stays safe for CPU ranks. The import may initialize CUDA
(Inductor asks whether a GPU is there), which a forked child cannot use: ranks that use CUDA are
spawned instead, without this preload.
"""

from shapecore.torch.private import warm_up_inductor

warm_up_inductor()
