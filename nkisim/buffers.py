"""NKI memory regions (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ...) as enum members."""
from __future__ import annotations

from enum import Enum


class MemoryRegion(Enum):
    """Where a tensor lives. ``hbm`` is an alias of ``private_hbm`` (the nki.language page)."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"
    hbm = "private_hbm"  # noqa: PIE796 - the documented alias


def is_hbm(buffer: MemoryRegion) -> bool:
    return buffer in (MemoryRegion.private_hbm, MemoryRegion.shared_hbm)


def is_on_chip(buffer: MemoryRegion) -> bool:
    return buffer in (MemoryRegion.sbuf, MemoryRegion.psum)


def is_psum(buffer: MemoryRegion) -> bool:
    return buffer is MemoryRegion.psum


def is_sbuf(buffer: MemoryRegion) -> bool:
    return buffer is MemoryRegion.sbuf
