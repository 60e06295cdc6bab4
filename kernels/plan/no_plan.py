"""The planner's no-plan message: how many candidates were rejected and which rejection bounds the geometry.

A capacity rejection says by how much a candidate overshoots; the candidate that overshoots least
(typically the smallest tiles) is what bounds the geometry, so the message leads with it. Rejections
by a method's domain or a flag's legality are counted, not led with: they say nothing about size.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol


class _Record(Protocol):
    label: str
    feasible: bool
    reason: str
    sbuf_bytes: int
    psum_banks: int


def _kind(r: _Record, sbuf_usable: int, psum_banks: int) -> str:
    if r.reason.startswith("SBUF") and r.sbuf_bytes > sbuf_usable:
        return "SBUF"
    if r.reason.startswith("PSUM") and r.psum_banks > psum_banks:
        return "PSUM"
    return "domain or legality"


def bounding_rejection(records: Sequence[_Record], sbuf_usable: int, psum_banks: int) -> _Record | None:
    """The rejected candidate that misses the target's capacity by the least: SBUF bytes over first (the
    usual bound), else PSUM banks over, else the first rejection."""
    rejected = [r for r in records if not r.feasible]
    sbuf = [r for r in rejected if _kind(r, sbuf_usable, psum_banks) == "SBUF"]
    if sbuf:
        return min(sbuf, key=lambda r: (r.sbuf_bytes, r.label))
    psum = [r for r in rejected if _kind(r, sbuf_usable, psum_banks) == "PSUM"]
    if psum:
        return min(psum, key=lambda r: (r.psum_banks, r.label))
    return rejected[0] if rejected else None


def no_plan_message(target: str, records: Sequence[_Record], sbuf_usable: int, psum_banks: int) -> str:
    """``no plan fits <target>``: every rejected candidate counted (by kind), the bounding one first with
    its overshoot."""
    rejected = [r for r in records if not r.feasible]
    kinds = Counter(_kind(r, sbuf_usable, psum_banks) for r in rejected)
    counts = ", ".join(f"{n} by {k}" for k, n in kinds.most_common())
    head = f"no plan fits {target} for this geometry: all {len(rejected)} candidates rejected ({counts})"
    bound = bounding_rejection(records, sbuf_usable, psum_banks)
    if bound is None:
        return head
    kind = _kind(bound, sbuf_usable, psum_banks)
    if kind == "SBUF":
        over = f"{bound.sbuf_bytes - sbuf_usable} B per partition over the {sbuf_usable} B usable"
    elif kind == "PSUM":
        over = f"{bound.psum_banks - psum_banks} PSUM bank(s) over the {psum_banks}"
    else:
        return f"{head}; first: {bound.label}: {bound.reason}"
    return f"{head}; the closest, {over}: {bound.label}: {bound.reason}"
