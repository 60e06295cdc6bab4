"""Pure-Python pieces every method folder shares: PSUM bank packing and the pool budget check."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # (the NKI bodies import their spec, and so this module: it stays free of the cost model)
    from ..costs import TargetFigures


def bank_packs(widths: list[int], bank: int) -> list[list[int]]:
    """Consecutive items (their indices) packed into PSUM banks of ``bank`` elements."""
    packs: list[list[int]] = []
    used = bank
    for i, w in enumerate(widths):
        if used + w > bank:
            packs.append([])
            used = 0
        packs[-1].append(i)
        used += w
    return packs


def pool_check(method: str, why: str, parts: dict[str, int], sbuf: int, psum: int,
               hw: TargetFigures) -> tuple[str, int, int, dict[str, int]]:
    """(reason or '', SBUF bytes per partition, PSUM banks, SBUF bytes by pool) of a method's pools:
    ``why`` (the method's own class rule, '' when it applies) first, then SBUF, then PSUM."""
    if why:
        return f"{method}: {why}", sbuf, psum, parts
    if sbuf > hw.sbuf_usable:
        big = max(parts.items(), key=lambda kv: kv[1])
        return (f"SBUF {sbuf} B per partition exceeds {hw.sbuf_usable} B usable (largest: {big[0]} {big[1]} B)",
                sbuf, psum, parts)
    if psum > hw.psum_banks:
        return f"PSUM {psum} banks exceed {hw.psum_banks}", sbuf, psum, parts
    return "", sbuf, psum, parts
