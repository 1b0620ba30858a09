"""Divisibility: may this dim be split ``m`` ways? A proof obligation for shapecore.

Sharding dim ``d`` of a tensor over mesh axes whose sizes multiply to ``m`` is sound only if
every piece has the same size, i.e. ``Eq(Mod(size_d, m), 0)`` holds for every input the plan
will see. :class:`Divisibility` sends that obligation to one shapecore reasoner scope (the
trace's ranges, replacements, guards and runtime asserts, plus the user's constraints) and
applies the policy:

* ``"prove"`` — only proved obligations are allowed;
* ``"assume"`` — unknown ones are allowed too and become guards of the plan (refuted ones,
  which some valid input breaks, are never assumed);
* ``"uneven"`` — refuted and unknown ones are allowed, with padded (ceil) local sizes in the
  cost model; the lowering must then handle uneven shards.

A data-dependent (unbacked) size is known only when the program runs, so no guard at the
entry can stand in for its proof: under every policy a dim of it is split *evenly* only when
proved. A dim whose size is one data-dependent symbol (``u0``) may instead be split *unevenly*,
as ``torch.chunk`` and DTensor do: rank ``r`` of ``m`` gets
``min(ceil(u0/m), max(0, u0 - r*ceil(u0/m)))`` rows, a size each rank computes when the program
runs (:mod:`lowering.uneven`); its verdict is ``uneven`` with the method ``data-dependent``,
never ``proved``, and the cost model prices the largest piece at the expected size. A dim of
any other data-dependent size (``16*u0``, ``u0 + 1``) stays whole, proved or not: its pieces
would not be ``torch.chunk``'s pieces of what it was computed from (a view merging an unevenly
split ``u0`` with 16 features holds ``16*len_r`` elements per rank, not ``ceil(16*u0/m)``).

Answers are cached per ``(size, m)``; the reasoner caches per fact-set version, so one plan
queries one scope. Once the problem is built, :meth:`Divisibility.detach` keeps the verdicts and
lets go of the scope (the planner decides every candidate while building, inside
``env.assuming(constraints)``, so the caller's env is never copied nor changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sympy

from shapecore import Mod, ShapeEnv

__all__ = ["Policy", "Verdict", "Divisibility", "POLICIES"]

Policy = Literal["prove", "assume", "uneven"]
POLICIES: tuple[str, ...] = ("prove", "assume", "uneven")


@dataclass(frozen=True)
class Verdict:
    """What the policy makes of one obligation.

    ``obligation`` is the claim in torch syntax (``Eq(Mod(s0, 8), 0)``, unevaluated even for
    static sizes); ``allowed`` says whether the sharding may be used; ``status`` is how (``proved``,
    ``guard``, ``uneven``) or why not (``refuted``, ``unknown``); ``method`` is the proof's
    layer, and ``reason`` a sentence for the plan's pruning log.
    """

    obligation: str
    allowed: bool
    status: str
    method: str
    reason: str = ""


class Divisibility:
    """Decides sharding obligations under one fact scope and one policy."""

    def __init__(self, env: ShapeEnv, policy: Policy) -> None:
        if policy not in POLICIES:
            raise ValueError(f"divisibility must be one of {POLICIES}, got {policy!r}")
        self.env: ShapeEnv | None = env
        self.policy = policy
        self._cache: dict[tuple[sympy.Basic, int], Verdict] = {}

    def check(self, size: sympy.Basic, m: int) -> Verdict:
        """The verdict on splitting a dim of ``size`` into ``m`` equal pieces."""
        key = (size, m)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._decide(size, m)
        return found

    def detach(self) -> None:
        """Keep the verdicts decided so far and let go of the env (its fact scope is about to end)."""
        self.env = None

    def _decide(self, size: sympy.Basic, m: int) -> Verdict:
        claim = sympy.Eq(Mod(size, m), 0)
        obligation = f"Eq(Mod({size}, {m}), 0)"
        if m == 1:
            return Verdict(obligation, True, "proved", "trivial")
        if size.is_Integer:
            if int(size) % m == 0:
                return Verdict(obligation, True, "proved", "static")
            why = f"{obligation} is false: {size} is not a multiple of {m}"
            return Verdict(obligation, self.policy == "uneven", "uneven" if self.policy == "uneven" else "refuted", "static", why)
        if self.env is None:
            raise LookupError(
                f"the obligation {obligation} was not decided while the problem was built, and its fact scope "
                "has ended; decide every symbolic candidate before detach()"
            )
        data_dependent = sorted(s.name for s in size.free_symbols if self.env.symbols[s.name].kind == "unbacked")
        if data_dependent and not size.is_Symbol:
            return Verdict(obligation, False, "unknown", "none",
                           f"{size} is a data-dependent size that is not one symbol: a dim of it is kept whole (only a "
                           f"data-dependent symbol's dim is cut into pieces when the program runs)")
        proof = self.env.prove(claim)
        if proof.proved:
            return Verdict(obligation, True, "proved", proof.method)
        if data_dependent:
            verdict = "refuted" if proof.refuted else "unknown"
            return Verdict(obligation, True, "uneven", "data-dependent",
                           f"{obligation} is {verdict}; {size} is a data-dependent size, split unevenly as torch.chunk "
                           f"does: rank r of {m} gets min(ceil({size}/{m}), max(0, {size} - r*ceil({size}/{m}))) rows")
        if proof.refuted:
            example = ", ".join(f"{k}={v}" for k, v in sorted((proof.counterexample or {}).items()))
            why = f"{obligation} is refuted" + (f" (counterexample {example})" if example else "")
            if self.policy == "uneven":
                return Verdict(obligation, True, "uneven", proof.method, why)
            return Verdict(obligation, False, "refuted", proof.method, why)
        why = f"{obligation} is unknown ({proof.reason or 'not provable from the facts'})"
        if self.policy == "assume":
            return Verdict(obligation, True, "guard", "guard", why)
        if self.policy == "uneven":
            return Verdict(obligation, True, "uneven", "none", why)
        return Verdict(
            obligation, False, "unknown", "none",
            why + f"; add a constraint such as {obligation} or use divisibility='assume'",
        )
