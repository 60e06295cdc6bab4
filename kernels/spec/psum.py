"""PSUM capacity and the kernel's fixed PSUM pools."""
from __future__ import annotations

from .record import Plan, Strategy

PSUM_BANK_BYTES = 2048

PSUM_BANKS = 8

PSUM_TRANSPOSE_BANKS = 3   # the kernel's shared pool for PE transposes (filters, dy^T, x^T, dw store)

PSUM_DX_BANKS = 2          # dx accumulation banks (one block accumulates while the other is evicted)


def psum_transpose_banks(p: Plan) -> int:
    """The shared PE-transpose pool: one bank less when dx and dw share the PSUM (shared-dy)."""
    return PSUM_TRANSPOSE_BANKS - (1 if p.strategy is Strategy.SHARED_DY else 0)
