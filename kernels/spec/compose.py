"""How the gradients are composed: shared dy, db on dw, dx inside dw's passes,
dw interleaved with dx, and the order of the first loads.
"""
from __future__ import annotations

from ..geometry import ConvGeom
from ..schedule import PMAX
from .dw_options import dw_defer_finish, dw_own_taps, dw_program_items, dw_tap_passes
from .dx_options import dx_program_items, dx_t_active, filters_by_dma
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


def dx_inside_dw_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_inside_dw``: dx^T with its first band prefetched, after a streaming row-mode x-stationary dw
    with x^T by DMA, one tap pass, one C_in range and no deferred finish. The kernel runs dx in dw's last
    row pass, after that pass's first x^T bundles (the ring's worth) are issued and before its matmuls: dw is DMA-bound on its x^T transfers and dx PE-bound, so they overlap. dx's first
    band is then prefetched during dw's first box (not its last) and dw's dy boxes load one box ahead,
    so that neither queues behind the other section's DMA (FIFO). One dx item per program: with more,
    the later bands' loads and copies queue behind dw's transfers."""
    return (dx_prefetched(p) and p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma
            and not p.dw_interleave and p.dw_ci_range >= g.c_in
            and len(dw_tap_passes(g, p, 0)) == 1 and not dw_defer_finish(g, p)
            and (dx_inside_boxes_legal(g, p) if p.dx_inside_boxes
                 else all(len(dx_program_items(g, p, q)) <= 1 for q in range(p.lnc))))


def dx_inside_boxes_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_inside_boxes`` (with ``dx_inside_dw``): each of dw's boxes is one row chunk (<= 128 rows)
    and runs one dx item after issuing its whole pass of x^T bundles (``dw_xt_ring`` tiles: the pass's
    transfers land under that item's matmuls, the next box's start as this pass's matmuls free the
    tiles). Item i runs in box i + 1 (the first box's transfers have nothing to hide under: dx's first
    band and filters are still loading), the items left after dw; so every program needs two boxes."""
    return (p.dw_band[0] * p.dw_band[1] <= PMAX
            and all(2 <= len(dw_program_items(g, p, q)) for q in range(p.lnc)))


def dx_box_items(g: ConvGeom, p: Plan, pid: int) -> list[int]:
    """``Plan.dx_inside_boxes``: how many of program ``pid``'s dx items run inside each of its dw boxes (in
    item order). The last item always runs after dw, under dw's finish (the LNC2 exchange, the adds and
    stores; inside the last box they were exposed at the end: unet3d LNC2 77.2 against 73.4 us); the others
    spread evenly, later boxes first (the first box's transfers start with dx's first band and filters,
    so an item there waits for them)."""
    n = len(dw_program_items(g, p, pid))
    m = max(0, len(dx_program_items(g, p, pid)) - 1)
    cuts = [j * m // n for j in range(n + 1)]
    return [cuts[j + 1] - cuts[j] for j in range(n)]


def dx_inside_dw_on(g: ConvGeom, p: Plan) -> bool:
    return p.dx_inside_dw and dx_inside_dw_legal(g, p)


def _dw_dx_merged(g: ConvGeom, p: Plan) -> bool:
    """dw's and dx's pools and PSUM banks are live together (dw-interleaved, dx inside dw)."""
    return p.dw_interleave or dx_inside_dw_on(g, p)


def dw_interleave_ok(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_interleave``: per gradient, dw streaming its own dy (row or box mode) with dx:toeplitz or the
    gather (with D-phase pairs or without; not dx^T or dx inside dw, which run their own loops).
    Not with dx's C_out chunks (their own band loop, without dw's boxes between), clipped dy bands
    (``dx_dy_clip``, legal only without dw-interleaving) or dw's C_out passes (``dw_co_pass``: whole dw
    passes, not one box stream)."""
    gather = (p.dx_method in (DxMethod.GATHER_S1, DxMethod.PHASE_GATHER, DxMethod.GEMM) and not dx_t_active(p)
              and not p.dx_inside_dw
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
