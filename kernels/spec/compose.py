"""How the gradients are composed: shared dy, db on dw, dw interleaved with dx, and the order of the first
loads.
"""
from __future__ import annotations

from ..geometry import ConvGeom
from .dw_options import dw_defer_finish, dw_own_taps
from .dx_options import dx_t_active, filters_by_dma
from .record import DbMethod, DwMethod, DxMethod, Plan, Strategy

# db by ScalarE on dx's bands (``Plan.pw_db_scalar``, per gradient): elements per activation, the size of
# its discarded output tile
DB_SCALAR_CHUNK = 2048


def pw_shared_on(p: Plan) -> bool:
    """shared_dy with dw:dma_gemm: the pointwise kernel of ``nki_pw_shared`` (dx, dw, db from one dy load,
    dw's dy^T by PE transposes, x^T by DMA transposes)."""
    return bool(p.strategy is Strategy.SHARED_DY and p.dw_method is DwMethod.DMA_GEMM and p.compute_dx)


def db_on_dw(p: Plan) -> bool:
    """db folds on the dy^T tiles of dw (ones-vector matmuls; one PSUM bank)."""
    return bool(p.compute_db and p.compute_dw and p.db_method is DbMethod.FOLD and not p.db_ones)


def dx_band_early_legal(g: ConvGeom, p: Plan) -> bool:
    """LNC2, per gradient, gather dx after a streaming dw whose finish is not deferred: dx's first dy band
    loads before dw's last finish, so it does not queue behind dw's stores (FIFO DMA bandwidth), and
    GpSimd (idle during dw) places it, so the placement does not queue behind dw's evictions on VectorE:
    the PE starts dx as soon as dw's matmuls end."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and not dw_defer_finish(g, p)
            and p.dx_regions == 1 and p.dx_method is not DxMethod.TOEPLITZ and not dx_t_active(p)
            and not p.dx_dphase_pairs and not p.dw_interleave)   # (interleaved: dw's boxes run inside dx)


def dx_band_early_on(g: ConvGeom, p: Plan) -> bool:
    return p.dx_band_early and dx_band_early_legal(g, p)


def db_taps_local(g: ConvGeom, p: Plan) -> bool:
    """LNC2 taps split with db folded on dw's dy^T: db is whole on ``dw_db_program`` (every position runs on
    both programs, db on one), so that program stores it right after dw -- no exchange, and no store behind
    dx's last one at the end (nor an add behind dx's evictions on VectorE)."""
    return (p.lnc == 2 and db_on_dw(p) and p.dw_method is not DwMethod.DMA_GEMM
            and dw_own_taps(g, p, 0) is not None)


def dw_interleave_ok(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_interleave``: per gradient, dw streaming its own dy (row or box mode) with dx:toeplitz or the
    gather (with D-phase pairs or without; not dx^T, which runs its own loops).
    Not with dx's C_out chunks (their own band loop, without dw's boxes between), clipped dy bands
    (``dx_dy_clip``, legal only without dw-interleaving) or dw's C_out passes (``dw_co_pass``: whole dw
    passes, not one box stream)."""
    gather = (p.dx_method in (DxMethod.GATHER_S1, DxMethod.PHASE_GATHER, DxMethod.GEMM) and not dx_t_active(p)
              and not p.dx_band_early and not p.dx_ci_split and p.dx_regions == 1
              and not p.dx_co_chunk and not p.dx_dy_clip)
    return bool(p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
                and (p.dx_method is DxMethod.TOEPLITZ or gather) and p.dw_method in STREAMING_DW
                and not p.dw_co_pass)


def filters_after_first_chunk(g: ConvGeom, p: Plan) -> bool:
    """Per gradient with ``filters_first``: dx's filters (by DMA alone: 2-byte, NC-v3+, no region packing,
    not dx:toeplitz's tap grids) are issued after dw's first row chunk's loads instead of before dw
    (the first dw matmuls wait for those loads, not for filters that dx needs much later)."""
    return (p.filters_first and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and filters_by_dma(g, p) and p.dx_regions == 1
            and p.dx_method is not DxMethod.TOEPLITZ
            and not (p.dw_interleave and dw_interleave_ok(g, p)))   # (interleaved: dx and its filters lead)


# the dw methods that stream dy and x through ``DwState`` (the others run their own schedule, without hooks)
STREAMING_DW = frozenset({DwMethod.GEMM, DwMethod.TAP_GEMM, DwMethod.TAP_PACK, DwMethod.ROW_PACK})


def dx_prefetched(p: Plan) -> bool:
    """dx^T's first band is loaded during dw (the kernel runs ``plan.dx_prefetch`` only here)."""
    return (p.dx_prefetch and dx_t_active(p) and p.compute_dx and p.compute_dw
            and p.strategy is Strategy.PER_GRADIENT and p.dw_method in STREAMING_DW)
