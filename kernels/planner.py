"""The planner of ``conv3d_bwd``: candidates, capacity checks, analytic costs, the pick.

Pure Python, no NKI import. For a geometry, dtype, target and LNC degree it enumerates candidate
plans (strategy for sharing dy, method per gradient, bands, tap grouping, buffering), rejects
those that break an SBUF / PSUM / instruction limit (with the reason), estimates the others with
the cost figures of nkisim's model (``kernels/costs.py``) by walking the loops the kernel runs
(``kernels/schedule.py``), and picks the cheapest. Deterministic.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

from . import dx_dpairs as dpairs
from . import dx_toeplitz as toeplitz
from . import pw_shared as pw
from .costs import TARGET_FIGURES, CostSheet, TargetFigures, compose_ns, flow_shop_ns
from .dw_head import head_wait_ns
from .dx_pairs import (
    BANK_FP32,
    DXT_BUFS,
    block_groups,
    ci_tile_t,
    copies_made,
    copy_shift,
    pair_axes,
    pairs_possible,
    phase_stage_elems,
    phase_tap_sets,
    tap_steps,
)
from .errors import Conv3dBwdInputError, Conv3dBwdPlanError
from .geometry import ConvGeom, ceil_div, validate
from .schedule import (
    FILTER_RUN_CI_MAX,
    MOVING_MAX,
    PMAX,
    AxisBand,
    axis_bands,
    axis_covered,
    border_slabs,
    box_block_sizes,
    box_blocks,
    dw_x_extent,
    dw_x_fill,
    dw_x_stage_elems,
    dx_packs,
    dx_phase_work,
    dx_stage_elems,
    n_tiles,
    needs_stage,
    region_fits,
    row_stack_roles,
    tile_sizes,
)
from .xt_rows import (
    DMA_TRANSPOSE_EFFICIENCY,
    dyt_runs,
    valid_range,
    xt_columns,
    xt_dma_bufs,
    xt_dma_cost,
    xt_dma_setup_cost,
    xt_fill,
    xt_window,
    zero_by_memset,
)

PSUM_BANK_BYTES = 2048
PSUM_BANKS = 8
PSUM_TRANSPOSE_BANKS = 3   # the kernel's shared pool for PE transposes (filters, dy^T, x^T, dw store)
PSUM_DX_BANKS = 2          # dx accumulation banks (one block accumulates while the other is evicted)


def psum_transpose_banks(p: Plan) -> int:
    """The shared PE-transpose pool: one bank less when dx and dw share the PSUM (shared-dy)."""
    return PSUM_TRANSPOSE_BANKS - (1 if p.strategy is Strategy.SHARED_DY else 0)


def pw_shared_on(p: Plan) -> bool:
    """shared_dy with dw:dma_gemm: the pointwise kernel of ``nki_pw_shared`` (dx, dw, db from one dy load,
    dw's dy^T by PE transposes, x^T by DMA transposes)."""
    return bool(p.strategy is Strategy.SHARED_DY and p.dw_method is DwMethod.DMA_GEMM and p.compute_dx)


def db_on_dw(p: Plan) -> bool:
    """db folds on the dy^T tiles of dw (ones-vector matmuls; one PSUM bank)."""
    return bool(p.compute_db and p.compute_dw and p.db_method is DbMethod.FOLD and not p.db_ones)


def dyt_dma_legal(g: ConvGeom, p: Plan) -> bool:
    """Row-mode dw streaming its own dy (per gradient) may take dy^T by dma_transpose from HBM (2-byte
    dtypes, NC-v3+): no dy box, no PE transposes, no evictions (``Plan.dw_dyt_dma``). Box mode too
    (session 6, ``dyt_box_dma_legal``)."""
    return bool(p.compute_dw and p.strategy is Strategy.PER_GRADIENT
                and (xt_dma_legal(g, p) or dyt_box_dma_legal(g, p)))


def dyt_box_dma_legal(g: ConvGeom, p: Plan) -> bool:
    """Box-mode dw (tap_pack / tap_gemm): a position tile of whole W rows (W_out <= 128) is, per d plane,
    one contiguous run of dy, so its dy^T ``[positions, C_out tile]`` is one 2-D ``dma_transpose`` per
    (C_out tile, d plane) (2-byte dtypes, NC-v3+) instead of PE transposes and evictions."""
    return (p.dw_method in (DwMethod.TAP_PACK, DwMethod.TAP_GEMM) and filters_by_dma(g, p)
            and g.axes[2].o <= PMAX)


DYT_DMA_BUFS = 2   # dy^T tiles of dw_dyt_dma: a chunk's transfer runs while the one before is in use


def dw_head_split_legal(g: ConvGeom, p: Plan) -> bool:
    """``dw_head_split`` (``kernels/dw_head.py``): row-mode x-stationary dw with x^T and dy^T by DMA, one
    (kd, kh) pair per bundle (the head pair moves first), no ones slot, no row stacking, the first C_in
    tile's zero rows not by one whole-tile memset (tiny C_in: its bundles are filled whole), no merged
    bundles (``dw_xt_merge``)."""
    return bool(p.dw_dyt_dma and dyt_dma_legal(g, p) and p.dw_x_stationary and p.dw_xt_dma
                and not p.dw_row_stack and not p.db_ones and not p.dw_xt_merge and dw_xs_bundle(g, p) == 1
                and not zero_by_memset(g, min(p.dw_ci_tile, p.dw_ci_range, g.c_in)))


def dw_head_split_on(g: ConvGeom, p: Plan) -> bool:
    return p.dw_head_split and dw_head_split_legal(g, p)


def filters_by_dma(g: ConvGeom, p: Plan) -> bool:
    """dx filters transposed by dma_transpose (2-byte dtypes, NC-v3+) instead of on the PE."""
    return g.dtype_bytes == 2 and p.target != "trn1"


def xt_dma_legal(g: ConvGeom, p: Plan) -> bool:
    """Row-mode dw x^T may come by dma_transpose from HBM (2-byte dtypes, NC-v3+; like the filters)."""
    return p.dw_method is DwMethod.ROW_PACK and filters_by_dma(g, p)


def dpairs_illegal(g: ConvGeom, p: Plan) -> str:
    """'' when ``dx_dphase_pairs`` can run: phase gather, stride 2 along D, C_in <= 64 in one tile,
    no region packing, dx^T, toeplitz or C_in-outer groups."""
    why = dpairs.dpairs_domain(g)
    if why:
        return why
    if p.dx_method is not DxMethod.PHASE_GATHER or p.dx_regions != 1 or p.dx_transposed or p.dx_ci_outer \
            or p.dx_ci_tile < g.c_in:
        return "needs dx:phase_gather with one C_in tile, no regions, dx^T or C_in-outer groups"
    return ""


def _dpair_slot_count(g: ConvGeom, p: Plan) -> int:
    """The stationary slots of the D-phase pairs over every band of the plan's dx items."""
    w_band = axis_bands(g.axes[2], g.axes[2].n)[0]
    return len(dpairs.dpair_slots(g, sorted({(bd, bh, w_band) for _b, bd, bh in dx_items(g, p)},
                                             key=lambda t: (t[0].i0, t[1].i0))))


def row_stack_legal(p: Plan) -> bool:
    """Row stacking (``dw_row_stack``) runs on x-stationary's bundle ring filled by ``xT dma``."""
    return p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma


def dw_row_chunk_rows(g: ConvGeom, p: Plan, items: list) -> list[list[int]]:
    """Per dw item (box), the rows of its <= 128-row chunks (DwState._add_rows' order)."""
    return [[cd * ch for _st, (cd, ch, _one) in box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)]
            if d1 > d0 and h1 > h0 else [] for _b, (d0, d1), (h0, h1) in items]


def _row_stack_useful(g: ConvGeom, p: Plan) -> bool:
    """Some chunk of program 0 would stack (two 64-row chunks in a row)."""
    items = dw_program_items(g, p, 0)
    return "upper" in row_stack_roles([n for rows in dw_row_chunk_rows(g, p, items) for n in rows])


def dw_own_taps(g: ConvGeom, p: Plan, pid: int) -> tuple[int, int] | None:
    """Under the LNC2 tap split: the contiguous taps [lo, hi) program ``pid`` owns (whole (kd, kh)
    pairs in row mode, whole tap groups in box mode); None for the position split."""
    if p.dw_split != "taps" or p.lnc == 1 or p.strategy is Strategy.SHARED_DY:
        return None   # shared-dy feeds dw the bands of its own program: positions only
    unit = 1 if dw_tap_fine_on(g, p) else dw_tap_unit(g, p)
    units = ceil_div(g.taps, unit)
    per = ceil_div(units, p.lnc)
    return min(g.taps, pid * per * unit), min(g.taps, (pid + 1) * per * unit)


def dw_columns_legal(g: ConvGeom, p: Plan) -> bool:
    """LNC2 dw split by W output columns (``dw_split="columns"``): row-mode x-stationary dw with x^T by
    DMA, per gradient. Each program runs every (d, h) row chunk -- so two 64-row chunks still stack on
    K = 128 (down_s2: the batch split left each program one 64-row chunk, K = 64) -- for its half of the
    W columns (matmul steps, dy^T columns, db columns), its x^T tiles filled only over the x columns
    those read; the partials are combined like the positions split."""
    return (p.lnc == 2 and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma and g.axes[2].o >= 2)


def dw_columns_on(g: ConvGeom, p: Plan) -> bool:
    return p.dw_split == "columns" and dw_columns_legal(g, p)


def dw_columns(g: ConvGeom, p: Plan, pid: int) -> tuple[int, int]:
    """The W output columns [lo, hi) program ``pid``'s dw runs: its contiguous half under the columns
    split, else all."""
    wo = g.axes[2].o
    if not dw_columns_on(g, p):
        return 0, wo
    per = ceil_div(wo, p.lnc)
    return min(wo, pid * per), min(wo, (pid + 1) * per)


def dw_program_items(g: ConvGeom, p: Plan, pid: int) -> list:
    """The dw boxes program ``pid`` runs: every box under the taps and columns splits, else its half."""
    if dw_own_taps(g, p, pid) is not None or dw_columns_on(g, p):
        return dw_items(g, p)
    return _split(dw_items(g, p), p.lnc, pid)


def dx_ci_split_legal(g: ConvGeom, p: Plan) -> bool:
    """LNC2 dx split by C_in groups: per gradient with dw (db folds in dw, so no dx band feeds
    another section), C_in-outer gather dx with at least two groups. Each program runs every
    (batch, band) item for its half of the C_in tiles: it loads only its half of the filters."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dx_ci_outer and p.dx_regions == 1 and p.dx_method is not DxMethod.TOEPLITZ
            and not dx_t_active(p) and n_tiles(g.c_in, p.dx_ci_tile) >= 2)


def dx_band_early_legal(g: ConvGeom, p: Plan) -> bool:
    """LNC2, per gradient, gather dx after a streaming dw whose finish is not deferred: dx's first dy band
    loads before dw's last finish, so it does not queue behind dw's stores (FIFO DMA bandwidth), and
    GpSimd (idle during dw) places it, so the placement does not queue behind dw's evictions on VectorE:
    the PE starts dx as soon as dw's matmuls end."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and not dw_defer_finish(g, p)
            and p.dx_regions == 1 and p.dx_method is not DxMethod.TOEPLITZ and not dx_t_active(p)
            and not p.dx_dphase_pairs)


def dx_band_early_on(g: ConvGeom, p: Plan) -> bool:
    return p.dx_band_early and dx_band_early_legal(g, p)


def dx_program_items(g: ConvGeom, p: Plan, pid: int) -> list:
    """The dx (batch, band) items program ``pid`` runs: every item under the C_in split, else its half.
    D-phase pairs at LNC2: the items band-major (each program's half alternates batches), because a
    band's two half-plane stores (64 partitions, half the DMA engines each) are ordered after every
    earlier store of the same batch (their element spans interleave in dx); stores of two batches
    overlap, so a program's store chain is not one batch's whole dx (down_s2: 4 x 2.9 us)."""
    if dx_ci_split_on(g, p):
        return dx_items(g, p)
    items = dx_items(g, p)
    if p.lnc == 2 and p.dx_dphase_pairs:
        items = sorted(items, key=lambda it: (it[1].i0, it[2].i0, it[0]))
    return _split(items, p.lnc, pid)


def dx_ci_split_on(g: ConvGeom, p: Plan) -> bool:
    """The plan asks for the LNC2 C_in split of dx and the geometry allows it (else the item split)."""
    return p.dx_ci_split and dx_ci_split_legal(g, p)


def dw_tap_fine_legal(g: ConvGeom, p: Plan) -> bool:
    """The LNC2 taps split may cut at any tap: box mode (a program's last tap group is shorter), or row
    mode x-stationary with one tap per stationary chunk (C_in tile 128: a (kd, kh) pair cut between the
    programs has its x^T built by both, each running its own kw taps). Per gradient only (taps split)."""
    if p.lnc != 2 or p.dw_split != "taps" or p.strategy is not Strategy.PER_GRADIENT:
        return False
    if p.dw_method in (DwMethod.TAP_GEMM, DwMethod.TAP_PACK):
        return True
    return p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and dw_xs_slots(g, p) == 1 \
        and dw_xs_bundle(g, p) == 1


def dw_tap_fine_on(g: ConvGeom, p: Plan) -> bool:
    return p.dw_tap_fine and dw_tap_fine_legal(g, p)


def dw_tap_fine_helps(g: ConvGeom, p: Plan) -> bool:
    """The single-tap split balances the programs better than whole units. Offered for C_in tiles of 128
    only: with C_in 64 (down_s2) the box-mode taps-split candidates are estimated 11-16 % low, and the
    fine twin tied the pick's estimate while modelling 52 us against 44."""
    unit = dw_tap_unit(g, p)
    return (dw_tap_fine_legal(g, p) and p.dw_ci_tile >= PMAX
            and ceil_div(ceil_div(g.taps, unit), 2) * unit > ceil_div(g.taps, 2))


def db_taps_local(g: ConvGeom, p: Plan) -> bool:
    """LNC2 taps split with db folded on dw's dy^T: db is whole on ``dw_db_program`` (every position runs on
    both programs, db on one), so that program stores it right after dw -- no exchange, and no store behind
    dx's last one at the end (nor an add behind dx's evictions on VectorE)."""
    return (p.lnc == 2 and db_on_dw(p) and p.dw_method is not DwMethod.DMA_GEMM
            and dw_own_taps(g, p, 0) is not None)


def dw_db_program(g: ConvGeom, p: Plan) -> int:
    """Under the LNC2 tap split every program sees every position, so db folds on one program only:
    the one with fewer taps (program 1 when the tap units do not split evenly), else program 0."""
    own = [dw_own_taps(g, p, q) for q in range(p.lnc)]
    if p.lnc == 2 and own[0] is not None and own[1][1] - own[1][0] < own[0][1] - own[0][0]:
        return 1
    return 0


def dw_defer_finish(g: ConvGeom, p: Plan) -> bool:
    """LNC2 positions split, per gradient, with dx: dw's exchange is issued right after its
    accumulation and the adds, casts, transposes and stores run after dx, so the rendezvous overlaps
    dx instead of stalling the in-order PE between the sections. One pass and one C_in range only
    (the accumulators and received halves stay live through dx)."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and dw_own_taps(g, p, 0) is None
            and p.dw_ci_range >= g.c_in and len(dw_tap_passes(g, p, 0)) == 1
            # x-stationary exchanges its own accumulator (_finish_xs): deferred with the columns split
            # (its adds and casts on VectorE/GpSimd would otherwise hold dx's first band placement)
            and (not p.dw_x_stationary or dw_columns_on(g, p)))


def dw_fused_exchange(g: ConvGeom, p: Plan) -> bool:
    """LNC2 positions split: the other program's partials of every C_out tile are received at once and
    added in the final cast (no separate fp32 add pass); with more than two C_out tiles one receive
    buffer is reused per tile and added in place (SBUF)."""
    return (p.lnc == 2 and dw_own_taps(g, p, 0) is None and n_tiles(g.c_out, PMAX) <= 2
            and not p.dw_x_stationary)


def dw_tap_passes(g: ConvGeom, p: Plan, pid: int) -> list[tuple[int, int]]:
    """The tap ranges [lo, hi) program ``pid`` runs one after the other (dy and x streamed once per
    pass) so that one pass's fp32 accumulators fit SBUF; one pass unless ``dw_tap_range`` is set."""
    lo, hi = dw_own_taps(g, p, pid) or (0, g.taps)
    step = p.dw_tap_range if 0 < p.dw_tap_range < hi - lo else hi - lo
    return [(t, min(hi, t + step)) for t in range(lo, hi, step)] if step > 0 else [(lo, hi)]


def dw_tap_unit(g: ConvGeom, p: Plan) -> int:
    """Taps that stay in one pass: whole (kd, kh) pairs in row mode, whole tap groups in box mode."""
    return g.axes[2].k if p.dw_method is DwMethod.ROW_PACK else p.dw_tap_group


def dw_stage_rows(p: Plan, rows: tuple[int, int]) -> tuple[int, int]:
    """Output rows of the largest x band dw loads at once (row mode loads one <=128-row chunk)."""
    if p.dw_method is DwMethod.ROW_PACK:
        return min(rows[0], PMAX), min(rows[1], PMAX)
    return rows


@lru_cache(maxsize=4096)
def dw_direct(g: ConvGeom, p: Plan) -> bool:
    """dw evicts its PSUM accumulators straight to the output dtype: one output box, one PSUM group per
    accumulator (row mode: at most 128 rows, or two 64-row chunks in one stacked pass), one program."""
    if (p.lnc != 1 and dw_own_taps(g, p, 0) is None) or not p.compute_dw:
        return False
    items = [it for it in dw_items(g, p) if it[1][1] > it[1][0] and it[2][1] > it[2][0]]
    if len(items) != 1:   # row stacking: every row chunk in one stacked matmul pass folds once too
        rows = [n for r in dw_row_chunk_rows(g, p, items) for n in r] if p.dw_row_stack else []
        return bool(rows) and sum(1 for role in row_stack_roles(rows) if role != "lower") == 1
    _b, (d0, d1), (h0, h1) = items[0]
    if p.dw_method is DwMethod.ROW_PACK:
        return (d1 - d0) * (h1 - h0) <= PMAX
    return True


def cast_group(g: ConvGeom, width: int | None = None) -> int:
    """Taps of the fp32 dw accumulator cast together at the end (~1024 elements per copy)."""
    return max(1, min(g.taps, 1024 // max(width or g.c_in, g.c_out)))


def dw_out_bufs(g: ConvGeom, width: int) -> int:
    """dw output tiles ([ci, cast group, C_out]) in flight at the end. Each waits for its store DMA
    before reuse: with two, the evictions (and the PE's transposes behind them) waited for the
    stores of many small groups (wide channels). Four when a tile is at most 2 KB per partition."""
    return 4 if cast_group(g, width) * g.c_out * g.dtype_bytes <= 2048 else 2


def dw_acc_banks(co_chunk: int, n_co: int) -> int:
    """PSUM banks of the dw accumulators: the live chunk plus one, so a chunk's eviction overlaps."""
    return min(co_chunk, n_co) + 1


XS_MAX_BANKS = 3   # PSUM banks of one x-stationary accumulation group (the ring holds one more)


def dw_xs_slots(g: ConvGeom, p: Plan) -> int:
    """x-stationary dw: taps per stationary operand, each ``dw_ci_tile`` partitions of the output
    (M = taps x ci <= 128): within one tap group (box mode), within one kw row (row mode: the kw taps
    of one (kd, kh) at once; ``dw_xs_bundle`` adds the rows of several (kd, kh))."""
    unit = g.axes[2].k if p.dw_method is DwMethod.ROW_PACK else p.dw_tap_group
    return max(1, min(unit, PMAX // p.dw_ci_tile))


def dw_xs_bundle(g: ConvGeom, p: Plan) -> int:
    """Row mode, x-stationary: the (kd, kh) pairs whose x^T share one tile [rows, pairs, cols, ci], so
    that a stationary can take the same kw taps of several pairs (a uniform stride between them):
    m = 128 // ci taps fit M; K_w <= m: m // K_w whole kw rows per stationary; else the K_w mod m
    leftover taps of m // leftover pairs together."""
    if p.dw_method is not DwMethod.ROW_PACK:
        return 1
    m = max(1, PMAX // p.dw_ci_tile)
    kw = g.axes[2].k
    r = kw if kw <= m else kw % m
    return max(1, min(g.axes[0].k * g.axes[1].k, m // r if r else 1))


def dw_xs_per_bank(g: ConvGeom) -> int:
    """x-stationary accumulators [(tap, ci), C_out] fp32 per PSUM bank."""
    return max(1, PSUM_BANK_BYTES // (4 * g.c_out))


def dw_xs_fits(g: ConvGeom) -> bool:
    """The x-stationary orientation serves C_out <= 512 (one moving operand, one PSUM bank)."""
    return g.c_out * 4 <= PSUM_BANK_BYTES


def dw_xs_row_chunks(g: ConvGeom, p: Plan, pair0: int, n_pairs: int) -> list[tuple[int, int, int]]:
    """Row mode: the stationary chunks (first tap, pairs, kw taps) of the ``n_pairs`` (kd, kh) pairs of
    one x^T bundle from flat pair ``pair0``: taps ``first + b * K_w + j`` (b < pairs, j < kw taps)."""
    kw = g.axes[2].k
    m = max(1, PMAX // p.dw_ci_tile)
    out = []
    if kw <= m:
        q = m // kw
        return [((pair0 + b) * kw, min(q, n_pairs - b), kw) for b in range(0, n_pairs, q)]
    r = kw % m
    for b in range(n_pairs):
        out += [((pair0 + b) * kw + k0, 1, m) for k0 in range(0, kw - r, m)]
    if r:
        q = m // r
        out += [((pair0 + b) * kw + kw - r, min(q, n_pairs - b), r) for b in range(0, n_pairs, q)]
    return out


def dw_xs_bundles(g: ConvGeom, p: Plan, span: tuple[int, int]) -> list[tuple[int, int]]:
    """Row mode: (first flat pair, pairs) of the x^T bundles of a pass (whole pairs); ``dw_xt_merge``:
    a bundle also ends where the next pair has another kd or H-padding class (``xt_merge_bundles``)."""
    kw = g.axes[2].k
    lo, hi = span[0] // kw, ceil_div(span[1], kw)
    nb = dw_xs_bundle(g, p)
    if p.dw_xt_merge:
        return xt_merge_bundles(g, lo, hi, nb)
    return [(q, min(nb, hi - q)) for q in range(lo, hi, nb)]


def _h_class(g: ConvGeom, kh: int) -> tuple[int, int]:
    """The output rows [lo, hi) of the whole H axis whose x row for tap kh is inside x: two kh with the
    same class have the same clipped rows in every row chunk (the clipped rows are at the chunk ends)."""
    ah = g.axes[1]
    return valid_range(kh * ah.r - ah.lo, ah.s, ah.o, ah.n)


def xt_merge_bundles(g: ConvGeom, lo: int, hi: int, nb: int) -> list[tuple[int, int]]:
    """``Plan.dw_xt_merge``: flat pairs [lo, hi) cut into bundles of at most ``nb`` consecutive pairs
    with one kd and one H-padding class, so that each run of rows of a bundle is ONE 4-D transpose
    (``xt_bundle_groups``: src [ci, pairs, columns, rows], the pairs one dilated H step apart) where
    per-pair bundles took one transfer per pair (down_s2: each transfer holds a DMA queue ~2 us, of
    which 1.3 us is start latency, so the queues bound dw)."""
    kh_n = g.axes[1].k
    out: list[tuple[int, int]] = []
    for q in range(lo, hi):
        if out:
            q0, n = out[-1]
            if n < nb and q0 // kh_n == q // kh_n and _h_class(g, q0 % kh_n) == _h_class(g, q % kh_n):
                out[-1] = (q0, n + 1)
                continue
        out.append((q, 1))
    return out


def xt_merge_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_xt_merge``: row-mode x-stationary with ``xT dma`` (no db ones slot, no fine taps split),
    C_in not tiny (``zero_by_memset`` already merges), under the LNC2 columns split, and some bundle of
    the class cut holds two pairs or more. Only the columns split: its x^T windows are half as wide,
    so a merged transfer (two pairs) still moves as many bytes as one full-width pair; with full-width
    tiles the merged transfers (~4.5 us each at 16 partitions) hold a bundle's fill longer than the
    queues gain (down_s2 LNC1, measured: shared-dy 35.3 -> 40.9 us, per gradient 44.9 -> 45.3, and
    estimated lower: a mis-pick; LNC2 taps split 29.4 vs columns 26.5)."""
    if not (p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma and not p.db_ones
            and not p.dw_tap_fine and dw_xs_bundle(g, p) >= 2 and not zero_by_memset(g, p.dw_ci_tile)
            and dw_columns_on(g, p)):
        return False
    return any(n >= 2 for _q, n in xt_merge_bundles(g, 0, g.axes[0].k * g.axes[1].k, dw_xs_bundle(g, p)))


def dw_xs_chunks(g: ConvGeom, p: Plan, span: tuple[int, int]) -> list[tuple[int, int, int]]:
    """(first tap, blocks, taps per block) of the stationary chunks of a pass, in accumulator order:
    box mode, ``dw_xs_slots`` consecutive taps of a tap group (one block); row mode, per x^T bundle
    ``dw_xs_row_chunks``. Passes start at whole units (tap groups / pairs)."""
    if p.dw_method is DwMethod.ROW_PACK:   # (a fine split's span may cut a pair: its own taps only)
        return [ch for q, n in dw_xs_bundles(g, p, span) for ch in dw_xs_row_chunks(g, p, q, n)
                if span[0] <= ch[0] < span[1]]
    lo, hi = span
    m = dw_xs_slots(g, p)
    out = []
    for t0 in range(lo, hi, p.dw_tap_group):
        end = min(hi, t0 + p.dw_tap_group)
        out += [(t, 1, min(m, end - t)) for t in range(t0, end, m)]
    return out


def dw_xs_group_banks(g: ConvGeom, p: Plan) -> int:
    """PSUM banks of one x-stationary accumulation group (box: a tap group; row: a batch of the
    chunks of one x^T bundle, at most ``XS_MAX_BANKS``)."""
    if p.dw_method is DwMethod.ROW_PACK:
        units = len(dw_xs_row_chunks(g, p, 0, dw_xs_bundle(g, p)))
    else:
        units = ceil_div(p.dw_tap_group, dw_xs_slots(g, p))
    return min(XS_MAX_BANKS, ceil_div(units, dw_xs_per_bank(g)))


def dw_xs_fold_runs(chunks: list[tuple[int, int, int]], per_bank: int,
                    alone: int | None = None) -> list[tuple[int, int, int, int]]:
    """(bank, first unit, units, taps per unit) of the fold copies of one accumulation group: the
    consecutive units of one bank with the same tap count fold in one instruction (unit ``alone``, the
    db ones chunk whose fold takes one more partition, in its own)."""
    runs: list[tuple[int, int, int, int]] = []
    for u, (_t, nb, tn) in enumerate(chunks):
        b = u // per_bank
        if runs and runs[-1][0] == b and runs[-1][3] == nb * tn and alone not in (u, runs[-1][1] + runs[-1][2] - 1):
            bb, u0, k, taps = runs[-1]
            runs[-1] = (bb, u0, k + 1, taps)
        else:
            runs.append((b, u, 1, nb * tn))
    return runs


def db_ones_chunk(g: ConvGeom, p: Plan, span: tuple[int, int]) -> tuple[int, int, int] | None:
    """``Plan.db_ones``: the stationary chunk (first tap, pairs, kw taps) of the pass ``span`` that also
    takes the bundle tile's ones slot (the slot after the bundle's last pair, all ones), so its matmuls
    put ``sum over positions of dy^T`` (= db's partial) on the M rows after its own: the last chunk that
    ends at its bundle's last pair with room for one more pair's ``taps x ci`` rows on M. None: no room
    (row-mode x-stationary only)."""
    if p.dw_method is not DwMethod.ROW_PACK or not p.dw_x_stationary:
        return None
    kw = g.axes[2].k
    out = None
    for q, n in dw_xs_bundles(g, p, span):
        for t, nb, tn in dw_xs_row_chunks(g, p, q, n):
            if span[0] <= t < span[1] and t // kw + nb == q + n and (nb + 1) * tn * p.dw_ci_tile <= PMAX:
                out = (t, nb, tn)
    return out


def db_ones_span(g: ConvGeom, p: Plan) -> tuple[int, int]:
    """The tap pass whose DwState folds db (the first pass of the program that folds db)."""
    return dw_tap_passes(g, p, dw_db_program(g, p))[0]


def db_ones_legal(g: ConvGeom, p: Plan) -> bool:
    """db:fold with dw (row-mode x-stationary) and a chunk with room for the ones slot; not under the LNC2
    columns split (its deferred finish adds the other program's partial in the casts, past db's row)."""
    return bool(p.compute_db and p.compute_dw and p.db_method is DbMethod.FOLD and not dw_columns_on(g, p)
                and db_ones_chunk(g, p, db_ones_span(g, p)) is not None)


class Strategy(str, Enum):
    SHARED_DY = "shared_dy"        # one dy band load serves dx, dw and db
    PER_GRADIENT = "per_gradient"  # each gradient streams dy itself


class DxMethod(str, Enum):
    GEMM = "gemm"                  # 1x1x1, unit stride, no padding: plain GEMM over C_out
    GATHER_S1 = "gather_s1"        # stride 1: implicit GEMM over shifted dy windows, one PSUM bank
    PHASE_GATHER = "phase_gather"  # stride > 1: per-phase gather (sub-pixel decomposition)
    TOEPLITZ = "toeplitz"          # tiny C_in: U_d x U_h output positions on M, block-Toeplitz filters


class DwMethod(str, Enum):
    GEMM = "gemm"                  # 1x1x1, unit stride, no padding: plain GEMM over positions
    TAP_GEMM = "tap_gemm"          # one tap per matmul, positions on partitions (PE transposes)
    TAP_PACK = "tap_pack"          # several taps' x windows side by side on the moving axis
    ROW_PACK = "row_pack"          # (d, h) rows on partitions; kw taps are free offsets of one x^T
    DMA_GEMM = "dma_gemm"          # 1x1x1 GEMM with dy^T and x^T brought by DMA transposes (2-byte dtypes)


class DbMethod(str, Enum):
    FOLD = "fold"                  # reduce the dy already in SBUF for dx or dw
    STANDALONE = "standalone"      # its own pass over dy


def all_method_names() -> set[str]:
    """Every strategy and method name the planner can choose."""
    names = {f"strategy:{s.value}" for s in Strategy}
    names |= {f"dx:{m.value}" for m in DxMethod}
    names |= {f"dw:{m.value}" for m in DwMethod}
    names |= {f"db:{m.value}" for m in DbMethod}
    return names


@dataclass(frozen=True)
class Candidate:
    """One line of the planner's table: a described candidate and its fate."""

    label: str
    feasible: bool
    reason: str                  # why rejected, or '' when feasible
    estimated_us: float | None
    sbuf_bytes: int
    psum_banks: int


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def replace(obj, /, **changes):
    """``dataclasses.replace`` for the planner's frozen records (no ``__post_init__``, no init-less fields):
    a copy of the instance dict with ``changes``. Planning makes ~10^4 plan variants per problem and
    the stdlib version re-runs ``__init__`` over every field of each."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = frozenset(f.name for f in dataclasses.fields(obj))
    if not changes.keys() <= names:
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(changes.keys() - names)}")
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(frozen=True)
class Plan:
    """A complete, executable plan: the kernel follows it field by field."""

    # the problem
    dy_shape: tuple[int, ...]
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: tuple[int, int, int]
    padding: tuple[int, ...]
    dilation: tuple[int, int, int]
    dtype: str
    target: str
    lnc: int
    compute_dx: bool
    compute_dw: bool
    compute_db: bool
    # the choices
    strategy: Strategy
    dx_method: DxMethod | None
    dw_method: DwMethod | None
    db_method: DbMethod | None
    dx_band: tuple[int, int]          # input rows per band (D, H); W is never banded
    dw_band: tuple[int, int]          # output rows per band (D, H) when dw streams dy itself
    dx_ci_tile: int
    dx_ci_outer: bool                 # filters one C_in tile at a time (dy reloaded per tile)
    dw_ci_tile: int
    dw_tap_group: int                 # taps side by side on the matmul's moving axis
    dw_co_chunk: int                  # C_out tiles whose PSUM accumulators are live together
    dw_ci_range: int                  # C_in channels whose fp32 accumulators live at once (dy streamed per range)
    dy_bufs: int                      # dy band buffers (prefetch depth)
    dw_tap_range: int = 0             # taps whose fp32 accumulators live at once (0: all; dy, x streamed per pass)
    dx_regions: int = 1               # dx bands stacked on the partitions (block-diagonal filters)
    filters_first: bool = False       # dx's first filter group loads before dw runs (per-gradient)
    dw_split: str = "positions"       # LNC2 dw split: "positions" (partials combined), "taps", "channels", "columns"
    dw_x_stationary: bool = False     # dw with x^T stationary (taps x ci on M), dy^T moving: dw[(tap, ci), co]
    dx_transposed: bool = False       # dx^T: positions on the stationary side (nki_dx_t, stride 1)
    dx_pair_copies: int = 0           # dx^T: shifted dy copies pairing taps on K (C_out <= 64)
    dx_prefetch: bool = False         # dx^T: the first band (and its copies) loads during dw's last row chunk
    dx_toeplitz: tuple[int, int] = (1, 1)   # dx:toeplitz: phase positions (U_d, U_h) stacked on M
    dx_toeplitz_pair: int = -1        # dx:toeplitz: axis (0 d, 1 h) whose offset pairs share K = 2 C_out; -1 none
    dx_toeplitz_merge: tuple[bool, bool] = (False, False)   # dx:toeplitz: the axis' stride phases share M
    dx_toeplitz_w: int = 0            # dx:toeplitz: U_w w positions on M, one PSUM quadrant each (0: none)
    dw_xt_dma: bool = False           # row-mode dw x^T by dma_transpose from HBM (2-byte, NC-v3+)
    dw_row_stack: bool = False        # row-mode dw: two 64-row chunks stacked on K = 128 (x-stationary, xT dma)
    dx_dphase_pairs: bool = False     # dx:phase_gather with the two D stride phases on M (dx_dpairs)
    dw_interleave: bool = False       # per gradient: dw's boxes issued between dx's items (dx:toeplitz)
    db_ones: bool = False             # db:fold inside dw's x-stationary matmuls (a ones slot on M; db_ones_chunk)
    dw_dyt_dma: bool = False          # row-mode per-gradient dw: dy^T by dma_transpose from HBM (no dy box, no PE)
    dw_tap_fine: bool = False         # LNC2 taps split at single taps (box mode), not whole tap groups
    dx_ci_split: bool = False         # LNC2 dx split by C_in groups (ci-outer): every item, half the filters
    dx_band_early: bool = False       # LNC2: dx's first dy band loads before dw's last finish (its stores)
    pw_db_scalar: bool = False        # shared-dy pointwise: db by ScalarE activation reduces of dy, not PE ones-matmuls
    pw_dyt_dma: int = 0               # shared-dy pointwise: one dy^T sub-tile in N by dma_transpose (0: all on the PE)
    pw_dyt_late: bool = False         # shared-dy pointwise: pw_dyt_dma only from the program's middle step on
    dx_inside_dw: bool = False        # per gradient, dx^T: dx runs in dw's last row pass, under its x^T loads
    dx_inside_boxes: bool = False     # dx inside dw: one dx item in each of dw's row passes (whole-pass x^T ring)
    dw_xt_merge: bool = False         # x-stationary xT dma: bundles of one kd and H-padding class, 4-D transposes
    dx_between_bundles: bool = False  # per gradient, D-phase pairs: dx's groups run between dw's x^T bundles
    dw_head_split: bool = False       # dw's first row pass: dy^T and the first x^T by column pieces (dw_head)
    # what it costs
    sbuf_bytes: int = 0
    psum_banks: int = 0
    estimated_us: float = 0.0
    engine_us: tuple[tuple[str, float], ...] = ()
    label: str = ""
    candidates: tuple[Candidate, ...] = field(default=(), compare=False, repr=False)
    alternatives: tuple[Plan, ...] = field(default=(), compare=False, repr=False)

    # --- derived ---------------------------------------------------------------------------
    def geometry(self) -> ConvGeom:
        return validate(self.dy_shape, self.x_shape, self.w_shape, self.stride, self.padding,
                        self.dilation, self.dtype)

    def methods(self) -> set[str]:
        out = {f"strategy:{self.strategy.value}"}
        if self.dx_method is not None:
            out.add(f"dx:{self.dx_method.value}")
        if self.dw_method is not None:
            out.add(f"dw:{self.dw_method.value}")
        if self.db_method is not None:
            out.add(f"db:{self.db_method.value}")
        return out

    def feasible_candidates(self) -> tuple[Plan, ...]:
        """Every feasible alternative (the pick included), each a full Plan, cheapest first."""
        return self.alternatives or (self,)

    def tiles(self) -> dict:
        return {"dx_band": list(self.dx_band), "dw_band": list(self.dw_band), "dx_ci_tile": self.dx_ci_tile,
                "dx_ci_outer": self.dx_ci_outer, "dw_ci_tile": self.dw_ci_tile,
                "dw_tap_group": self.dw_tap_group, "dw_co_chunk": self.dw_co_chunk, "dy_bufs": self.dy_bufs,
                "dw_ci_range": self.dw_ci_range, "dw_tap_range": self.dw_tap_range, "dx_regions": self.dx_regions,
                "filters_first": self.filters_first, "dw_split": self.dw_split,
                "dw_x_stationary": self.dw_x_stationary, "dx_transposed": self.dx_transposed, "dx_pair_copies": self.dx_pair_copies, "dx_prefetch": self.dx_prefetch, "dx_toeplitz": list(self.dx_toeplitz), "dx_toeplitz_pair": self.dx_toeplitz_pair,
                "dx_toeplitz_merge": list(self.dx_toeplitz_merge), "dx_toeplitz_w": self.dx_toeplitz_w,
                "dw_xt_dma": self.dw_xt_dma, "dw_row_stack": self.dw_row_stack,
                "dx_dphase_pairs": self.dx_dphase_pairs, "dw_interleave": self.dw_interleave,
                "dw_tap_fine": self.dw_tap_fine, "dx_ci_split": self.dx_ci_split, "dx_band_early": self.dx_band_early,
                "pw_db_scalar": self.pw_db_scalar, "pw_dyt_dma": self.pw_dyt_dma, "pw_dyt_late": self.pw_dyt_late,
                "dx_inside_dw": self.dx_inside_dw, "dx_inside_boxes": self.dx_inside_boxes, "dw_xt_merge": self.dw_xt_merge,
                "dx_between_bundles": self.dx_between_bundles,
                "db_ones": self.db_ones, "dw_dyt_dma": self.dw_dyt_dma,
                "dw_head_split": self.dw_head_split}

    def to_dict(self) -> dict:
        """JSON-ready: strategy, methods, tiles, estimated_us, candidates."""
        return {
            "strategy": self.strategy.value,
            "methods": sorted(self.methods()),
            "dx": self.dx_method.value if self.dx_method else None,
            "dw": self.dw_method.value if self.dw_method else None,
            "db": self.db_method.value if self.db_method else None,
            "tiles": self.tiles(),
            "label": self.label,
            "estimated_us": self.estimated_us,
            "engine_us": dict(self.engine_us),
            "sbuf_bytes": self.sbuf_bytes,
            "psum_banks": self.psum_banks,
            "target": self.target, "lnc": self.lnc, "dtype": self.dtype,
            "candidates": [
                {"label": c.label, "feasible": c.feasible, "reason": c.reason, "estimated_us": c.estimated_us,
                 "sbuf_bytes": c.sbuf_bytes, "psum_banks": c.psum_banks} for c in self.candidates],
        }

    def explain(self) -> str:
        """A readable table of the candidates, why each was rejected or what it costs, and the pick."""
        g = self.geometry()
        head = (f"conv3d_bwd plan: B={g.batch} C_in={g.c_in} C_out={g.c_out} in={g.in_size} "
                f"k={g.kernel} stride={self.stride} pad={self.padding} dil={self.dilation} "
                f"{self.dtype} {self.target} lnc={self.lnc} grads="
                + ",".join(n for n, on in (("dx", self.compute_dx), ("dw", self.compute_dw),
                                           ("db", self.compute_db)) if on))
        # the label column is as wide as the longest label, so the other columns line up
        lw = max([77] + [len(c.label) for c in self.candidates])
        lines = [head, f"{'candidate':<{lw + 1}} {'est us':>10} {'SBUF B':>8} {'banks':>5}  status"]
        for c in self.candidates:
            est = f"{c.estimated_us:10.2f}" if c.estimated_us is not None else f"{'-':>10}"
            status = "ok" if c.feasible else f"rejected: {c.reason}"
            mark = "*" if c.label == self.label else " "
            lines.append(f"{mark}{c.label:<{lw}} {est} {c.sbuf_bytes:8d} {c.psum_banks:5d}  {status}")
        lines.append(f"pick: {self.label}  ({self.estimated_us:.2f} us estimated; "
                     + ", ".join(f"{e} {u:.2f}" for e, u in self.engine_us) + ")")
        return "\n".join(lines)


# ------------------------------------------------------------------------------- forcing

_forced: list[Plan] = []
_forced_lock = threading.Lock()


@contextlib.contextmanager
def forced_plan(plan: Plan) -> Iterator[Plan]:
    """Within the block the kernel follows ``plan`` instead of planning (same geometry required)."""
    if not isinstance(plan, Plan):
        raise Conv3dBwdInputError(f"plan={plan!r}: must be a kernels.planner.Plan")
    with _forced_lock:
        _forced.append(plan)
    try:
        yield plan
    finally:
        with _forced_lock:
            _forced.remove(plan)


def current_forced_plan() -> Plan | None:
    """The innermost forced plan (module-wide, so both LNC programs' threads see it)."""
    with _forced_lock:
        return _forced[-1] if _forced else None


# ------------------------------------------------------------------------------- budgets


def _dx_dy_extent(g: ConvGeom, band: tuple[int, int]) -> tuple[int, int, int]:
    """The largest dy buffer extent (D, H, W) over the dx bands."""
    ext = []
    for a in range(2):
        ext.append(max((b.extent for b in axis_bands(g.axes[a], band[a])), default=0))
    ext.append(axis_bands(g.axes[2], g.axes[2].n)[0].extent)
    return ext[0], ext[1], ext[2]


def _own_rows(g: ConvGeom, band: tuple[int, int]) -> tuple[int, int]:
    return tuple(max((b.own1 - b.own0 for b in axis_bands(g.axes[a], band[a])), default=0)
                 for a in range(2))  # type: ignore[return-value]


@dataclass(frozen=True)
class _Budget:
    sbuf: int
    psum: int
    parts: tuple[tuple[str, int], ...]


def _budget(g: ConvGeom, p: Plan) -> _Budget:
    """Live SBUF bytes per partition and PSUM banks of the plan's biggest phase (the kernel's pools)."""
    ds = g.dtype_bytes
    n_co = n_tiles(g.c_out, PMAX)
    W, Wo = g.axes[2].n, g.axes[2].o
    phase_sbuf: dict[str, int] = {}
    psum_dx = psum_dw = 0
    parts: list[tuple[str, int]] = []
    if p.compute_dx:
        ci_res = p.dx_ci_tile if p.dx_ci_outer else g.c_in
        filt = n_co * g.taps * ci_res * ds if p.dx_regions == 1 else g.taps * PMAX * ds
        stage = 3 * _filter_group(g, p) * g.c_out * ds
        ext = _dx_dy_extent(g, p.dx_band)
        dyb = p.dy_bufs * n_co * ext[0] * ext[1] * ext[2] * ds
        plane = 2 * p.dx_band[0] * p.dx_band[1] * W * ds
        if p.dx_method is DxMethod.TOEPLITZ:   # W^T plus its tap grids; planes of (u, ci) partitions
            grids, plane = toeplitz.sbuf_bytes(g, p.dx_band, p.dx_toeplitz, p.dx_toeplitz_merge, p.dx_toeplitz_w)
            filt += grids
        parts += [("filters", filt), ("dx dy band", dyb), ("dx plane", plane)]
        stage = 2 * dx_stage_elems(g, p.dx_band) * ds
        if p.dx_ci_outer and p.dx_regions == 1 and g.c_in > p.dx_ci_tile:
            filt *= 2                                       # the next group's filters prefetch
        wstage = 3 * _filter_group(g, p) * g.c_out * ds   # the filter staging ring (load_filters_t)
        if p.dx_regions > 1:
            wstage = 3 * max(1, min(g.taps, PSUM_BANK_BYTES // (PMAX * ds))) * PMAX * ds
        if dx_t_active(p):
            plane, extra = _dx_t_sbuf(g, p, ext)
            parts += [("dx^T copies and tiles", extra)]
            dyb += extra
        if p.dx_dphase_pairs and not dpairs.dpairs_domain(g):   # planes of half the D rows; the slot tiles
            plane = 2 * ceil_div(p.dx_band[0], 2) * p.dx_band[1] * W * ds
            extra = n_co * max(1, _dpair_slot_count(g, p)) * PMAX * ds
            parts += [("dx D-phase pair filters", extra)]
            filt += extra
        phase_sbuf["dx"] = filt + wstage + dyb + plane + stage + (4 * n_co * 4 if p.compute_db else 0)
        psum_dx = PSUM_DX_BANKS
    if pw_shared_on(p):   # dx:gemm's pools (counted above) plus dw's rings, planes and outputs
        extra = max(pw.sbuf_bytes(g, p.dx_band, p.lnc, [pw.chunk_of(g, it) for it in dx_program_items(g, p, q)],
                                  p.dy_bufs) for q in range(p.lnc))
        parts += [("shared-dy dw rings, planes, outputs", extra)]
        phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + extra
        psum_dw = pw.psum_banks(g, db_on_dw(p) and not p.pw_db_scalar)
    elif p.compute_dw and p.dw_method is DwMethod.DMA_GEMM:
        by_pos = p.lnc == 2 and p.dw_split == "positions"
        mine = max(len(c_) for c_ in _gemm_dma_chunks(g, 1 if by_pos else p.lnc))
        blocks = ceil_div(g.c_out, MOVING_MAX)
        dw_total = 3 * g.c_out * ds + 3 * max(1, mine) * PMAX * ds + 2 * g.c_out * ds + (4 * n_co * 4 if p.compute_db else 0)
        if by_pos:   # two fp32 partials, two received halves (fp32) and two output halves
            dw_total += 2 * g.c_out * 4 + 2 * ceil_div(g.c_out, 2) * (4 + ds)
        parts += [("dw dy^T/x^T rings", dw_total)]
        phase_sbuf["dw"] = dw_total
        psum_dw = max(1, mine) * blocks + (1 if db_on_dw(p) else 0)
    elif p.compute_dw:
        if p.strategy is Strategy.SHARED_DY:
            rows = _own_rows(g, p.dx_band)
            dyb = 0
        else:
            rows = p.dw_band
            dyb = 0 if p.dw_dyt_dma else p.dy_bufs * n_co * rows[0] * rows[1] * Wo * ds
        xw = dw_x_extent(g.axes[2], Wo)
        if p.dw_method is DwMethod.ROW_PACK:
            cap = (min(rows[0], PMAX), min(rows[1], PMAX))
            dyt = (DYT_DMA_BUFS if p.dw_dyt_dma else 1) * Wo * g.c_out * ds
            xb = 2 * dw_x_extent(g.axes[0], cap[0]) * dw_x_extent(g.axes[1], cap[1]) * xw * ds
            slots = dw_xs_bundle(g, p) if p.dw_x_stationary else 1   # x-stationary: a ring of bundle tiles
            slots += 1 if p.db_ones else 0   # (db_ones: each bundle tile's ones slot)
            xt = 2 * slots * xw * p.dw_ci_tile * ds
            if p.dw_xt_dma:   # no x band; the x^T ring (dw_xt_ring tiles) and its zero-row source
                # (xT merged: a bundle's zero rows of every slot in one DMA)
                xb, xt = 0, (dw_xt_ring(g, p) * slots + (slots if p.dw_xt_merge else 1)) * xw * p.dw_ci_tile * ds
        else:
            npos = _dw_pos_tiles(rows, Wo)
            dyt = max(1, npos) * g.c_out * ds
            xb = 2 * dw_x_extent(g.axes[0], rows[0]) * dw_x_extent(g.axes[1], rows[1]) * xw * ds
            xt = 4 * p.dw_tap_group * p.dw_ci_tile * ds
        width = p.dw_ci_range
        # taps of one pass (the whole filter unless dw runs in tap passes)
        span = max(hi - lo for lo, hi in dw_tap_passes(g, p, 0)) if p.dw_tap_range else g.taps
        acc = n_co * span * width * 4
        store = 3 * n_co * cast_group(g, width) * width * ds + dw_out_bufs(g, width) * cast_group(g, width) * g.c_out * ds
        # LNC2 positions split: the other program's partial of this one's half of the taps, per C_out tile
        other = ((n_co if dw_fused_exchange(g, p) else 1) * ceil_div(span, 2) * width * 4
                 if (p.lnc == 2 and p.dw_split != "taps") else 0)
        if p.dw_x_stationary:   # [(tap-slot, ci), C_in tiles x chunks, C_out]: one cast tile per C_in tile
            units = n_tiles(width, p.dw_ci_tile) * _xs_max_chunks(g, p)
            acc = units * g.c_out * 4
            store = 0 if dw_direct(g, p) else 2 * _xs_max_chunks(g, p) * g.c_out * ds
            other = acc if (p.lnc == 2 and p.dw_split != "taps") else 0
        db = 4 * n_co * 4 if p.compute_db else 0
        xstage = 0 if p.dw_xt_dma else 2 * dw_x_stage_elems(g, dw_stage_rows(p, rows)) * ds
        dw_total = dyb + dyt + xb + xt + acc + db + xstage
        dw_pools = dw_total   # dw's own pools (not dx's first filters or prefetched band, counted with dx)
        parts += [("dw dyT", dyt), ("dw x band", xb), ("dw xT", xt), ("dw fp32 acc", acc)]
        if dyb:
            parts.append(("dw dy band", dyb))
        if p.strategy is Strategy.SHARED_DY:   # dw's pools live through the whole dx section
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + dw_total
        else:
            phase_sbuf["dw"] = dw_total
        if p.filters_first and p.compute_dx:
            first = (n_co * g.taps * (p.dx_ci_tile if p.dx_ci_outer else g.c_in) * ds if p.dx_regions == 1
                     else g.taps * PMAX * ds)
            if p.dx_method is DxMethod.TOEPLITZ:
                first += toeplitz.sbuf_bytes(g, p.dx_band, p.dx_toeplitz, p.dx_toeplitz_merge, p.dx_toeplitz_w)[0]
            if p.dx_dphase_pairs and not dpairs.dpairs_domain(g):   # the slot tiles (and W^T when built on the PE)
                first += n_co * max(1, _dpair_slot_count(g, p)) * PMAX * ds
            phase_sbuf["dw"] = phase_sbuf.get("dw", 0) + first
            dw_total += first
        if dx_prefetched(p):   # dx^T's first band (and its pools) arrives during dw
            dw_total += _dx_t_prefetch_sbuf(g, p)
            phase_sbuf["dw"] = phase_sbuf.get("dw", 0) + _dx_t_prefetch_sbuf(g, p)
        # the store runs while every dw pool (and, per gradient, dw's dy ring) is still live
        phase_sbuf["dw store"] = dw_total + store + other
        if p.dw_interleave:   # dw's boxes run between dx's items: its pools live through dx
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + dw_total
        elif dx_inside_dw_on(g, p) or dx_between_on(g, p):   # dx runs in dw's last pass: dw's pools live through dx
            if p.dx_inside_boxes:   # dx's pools (suspended between its items) live through dw's finish too
                phase_sbuf["dw store"] += phase_sbuf.get("dx", 0)
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + dw_pools
        if dx_band_early_on(g, p):   # dx's dy band ring (and its staging) is already loaded
            ext = _dx_dy_extent(g, p.dx_band)
            early = (p.dy_bufs * n_co * ext[0] * ext[1] * ext[2] + 2 * dx_stage_elems(g, p.dx_band)) * ds
            phase_sbuf["dw store"] += early
        if dw_defer_finish(g, p):   # the accumulators and the received halves stay live through dx
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + acc + other
        psum_dw = dw_acc_banks(p.dw_co_chunk, n_co) + (1 if db_on_dw(p) else 0)
        if p.dw_x_stationary:
            psum_dw = dw_xs_group_banks(g, p) + 1 + (1 if db_on_dw(p) else 0)
    if p.compute_db and p.db_method is DbMethod.STANDALONE:
        phase_sbuf["db"] = 2 * min(_db_chunk(g), g.batch * Wo * g.axes[0].o * g.axes[1].o) * ds + 4 * n_co * 4
    sbuf = max(phase_sbuf.values(), default=0)
    psum = psum_transpose_banks(p) + (psum_dx + psum_dw if (p.strategy is Strategy.SHARED_DY or _dw_dx_merged(g, p))
                                   else max(psum_dx, psum_dw))
    return _Budget(sbuf, psum, tuple(parts))


def _xs_max_chunks(g: ConvGeom, p: Plan) -> int:
    """Stationary chunks of the largest tap pass (x-stationary accumulator columns per C_in tile)."""
    spans = dw_tap_passes(g, p, 0) if p.dw_tap_range else [(0, g.taps)]
    return max(len(dw_xs_chunks(g, p, sp)) for sp in spans)


def _db_chunk(g: ConvGeom) -> int:
    return 8192 // g.dtype_bytes


def filter_group(g: ConvGeom, p: Plan) -> int:
    """Taps whose filter transposes share one PSUM bank (dtype-sized PSUM tiles); the staging tile
    [ci, taps, C_out] stays <= 8 KiB per partition."""
    per = p.dx_ci_tile * g.dtype_bytes
    return max(1, min(g.taps, PSUM_BANK_BYTES // per, 8192 // (g.c_out * g.dtype_bytes)))


_filter_group = filter_group


def _dw_pos_tiles(rows: tuple[int, int], wo: int) -> int:
    return len(box_blocks((0, 0, 0), (rows[0], rows[1], wo), PMAX)) if min(rows) > 0 else 0


# ------------------------------------------------------------------------------- cost estimate


def _split(items: list, lnc: int, pid: int) -> list:
    """The contiguous share of ``items`` that program ``pid`` of ``lnc`` runs (the kernel's split)."""
    per = ceil_div(len(items), lnc)
    return items[pid * per:(pid + 1) * per]


def dx_items(g: ConvGeom, p: Plan) -> list[tuple[int, AxisBand, AxisBand]]:
    bd = axis_bands(g.axes[0], p.dx_band[0])
    bh = axis_bands(g.axes[1], p.dx_band[1])
    return [(b, d, h) for b in range(g.batch) for d in bd for h in bh]


def dw_items(g: ConvGeom, p: Plan) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """(batch, (od0, od1), (oh0, oh1)) output boxes that dw (and a folded db) reduce over."""
    if p.strategy is Strategy.SHARED_DY:
        return [(b, (d.own0, d.own1), (h.own0, h.own1)) for b, d, h in dx_items(g, p)]
    od, oh = g.axes[0].o, g.axes[1].o
    return [(b, (d0, min(od, d0 + p.dw_band[0])), (h0, min(oh, h0 + p.dw_band[1])))
            for b in range(g.batch) for d0 in range(0, od, p.dw_band[0]) for h0 in range(0, oh, p.dw_band[1])]


def _estimate(g: ConvGeom, p: Plan, hw: TargetFigures) -> tuple[float, dict[str, float]]:
    """Modelled time (under LNC2 the later program's, as nkisim's makespan) and program 0's per-engine
    busy time."""
    c, fill = _estimate_sheet(g, p, hw)
    # dx inside dw's boxes: each box's x^T transfers are issued a whole pass ahead of the matmuls that read
    # them, under the box's dx items, so the merged body stalls less than the generic share says
    loss = {"dx": BOXES_LOSS} if p.dx_inside_boxes and dx_inside_dw_on(g, p) else None
    total = compose_ns(_sections(c, g, p), section_order(g, p), fill, hw, c.steps, c.steps_head, loss, c.flow)
    for pid in range(1, p.lnc):   # the split is uneven (tap units, db on one program, odd item counts)
        c1, fill1 = _estimate_sheet(g, p, hw, pid)
        total = max(total, compose_ns(_sections(c1, g, p), section_order(g, p), fill1, hw, c1.steps,
                                      c1.steps_head, loss, c1.flow))
    return total / 1000.0, {e: v / 1000.0 for e, v in c.busy.items()}


def _pw_flow(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, chunks: list, items: list,
             filters: tuple[float, float], db: str, head: float) -> None:
    """The shared-dy GEMM kernel's body as a DMA -> PE flow shop of its steps (``pw_shared.flow_steps``):
    dx's band work per chunk (``_dx_band_sheet``: PE, store), the filters with the first step; the first
    step's loads the fill charges (``head``) are not counted again."""
    # the first step runs C_out tile outer when the filters come per (C_out tile, tap) (nki_pw_shared)
    co_major = filters_by_dma(g, p) and g.c_in > FILTER_RUN_CI_MAX
    dx_work = []
    for _b, bd, bh in items:
        sheet = _dx_band_sheet(g, hw.name, p.dx_ci_tile, bd, bh)
        dx_work.append((sheet.busy["tensor"], sheet.busy["dma"]))
    c.flow_shop(pw.flow_steps(lambda: CostSheet(hw), g, chunks, dx_work, filters, db, p.pw_dyt_dma,
                              p.pw_dyt_late), head, pw.first_parts(g, co_major))


def section_order(g: ConvGeom, p: Plan) -> list[str]:
    """The kernel's sections in issue order (conv3d_bwd.py); shared_dy runs dx and dw's boxes as one."""
    if p.strategy is Strategy.SHARED_DY:
        return ["dx_filters", "dx+dw", "dx_tail", "dw_finish", "db", "db_store"]
    if p.filters_first and p.compute_dw and not filters_after_first_chunk(g, p):
        # issued before dw: ahead of dw's first loads in the DMA queues
        head, dx = ["dx_filters", "dw"], ["dx_prefetch", "dx", "dx_tail"]
    else:
        head, dx = ["dw"], ["dx_filters", "dx_prefetch", "dx", "dx_tail"]
    if dw_defer_finish(g, p):   # LNC2: dw's adds, casts and stores after dx
        return [*head, *dx, "dw_finish", "db", "db_store"]
    return [*head, "dw_finish", *dx, "db", "db_store"]


def _estimate_sheet(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0) -> tuple[CostSheet, float]:
    """Program ``pid``'s busy time per engine and kernel section (``CostSheet.section``), and the fill (ns):
    the latencies no busy time covers (first loads, exposed waits, LNC2 rendezvous)."""
    c = CostSheet(hw)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    W, Wo = g.axes[2].n, g.axes[2].o
    fill = 2 * hw.dma_fixed_ns
    dw_head = 0.0
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dw_method is not DwMethod.DMA_GEMM:
        # dw runs first: the PE waits for its first dy box and x (band or x^T tile)
        dw_head = _dw_head_ns(g, p, hw, pid)
        fill += dw_head
        if p.dw_head_split:   # the pipeline's first-step loads (section_ns) overlap the pieces: what it
            dw_head = _dw_head_ns(g, replace(p, dw_head_split=False), hw, pid)   # credits is the unsplit head
    # (dx's first filter group is the "dx_filters" lead section: compose_ns charges what the sections
    # before it do not hide; with dx first -- shared_dy, dx only -- all of it)
    if p.compute_dx:
        c.section("dx_filters")
        ci_tiles = tile_sizes(g.c_in, p.dx_ci_tile)
        items = dx_program_items(g, p, pid)
        if dx_ci_split_on(g, p):   # this program's C_in tiles
            ci_tiles = _split(ci_tiles, p.lnc, pid)
        grp = _filter_group(g, p)
        before_filters = dict(c.busy)   # (shared-dy pointwise: the filters join its first step's flow)
        if p.dx_regions > 1 and g.c_out < PMAX // p.dx_regions:   # dy ring zeroed once (gaps between regions)
            ext = _dx_dy_extent(g, p.dx_band)
            c.compute("gpsimd", ext[0] * ext[1] * ext[2], 0, 1.0, p.dy_bufs, op="memset")
        if p.dx_regions > 1:   # block-diagonal filters: a DMA per region and tap group, [128, 128] transposes
            grp = max(1, min(g.taps, PSUM_BANK_BYTES // (PMAX * ds)))
            c.compute("gpsimd", grp * PMAX, 0, 1.0, 3, op="memset")
            c.dma(g.c_in * g.c_out * ds * grp, g.c_out * ds, ceil_div(g.taps, grp) * p.dx_regions)
            c.transpose(PMAX, PMAX, fp32, g.taps)
            c.evict(grp * PMAX, two, ceil_div(g.taps, grp))
            ci_tiles = []
        for i, ci in enumerate(ci_tiles):   # filters: per tap a DMA, per (co tile, tap group) transposes + evict
            # C_in-outer: later groups load while the group before them computes (part of dx)
            # (shared-dy pointwise issues them inside its body, behind the first step's dy)
            c.section("dx+dw" if pw_shared_on(p) else "dx_filters" if i == 0 or not p.dx_ci_outer else "dx")
            if filters_by_dma(g, p):   # dma_transpose from HBM at 90 % of the bandwidth
                c.busy["dma"] += g.taps * ci * g.c_out * ds / (hw.dma_bytes_per_ns * hw.dma_transpose_efficiency)
                continue
            c.dma(ci * g.c_out * ds * grp, g.c_out * ds, ceil_div(g.taps, grp))
            c.transpose(ci, co_t, fp32, g.taps * n_co)
            c.evict(grp * ci, two, n_co * ceil_div(g.taps, grp))
        filters = (c.busy["dma"] - before_filters["dma"], c.busy["tensor"] - before_filters["tensor"])
        c.section("dx+dw" if p.strategy is Strategy.SHARED_DY else "dx")
        reloads = len(ci_tiles) if p.dx_ci_outer else 1
        loads = CostSheet(hw)   # one pass of dy band loads, charged once per reload
        if reloads:
            fills = []
            for _b, bd, bh in items:
                bw = axis_bands(g.axes[2], W)[0]
                bands3 = (bd, bh, bw)
                ext = [b_.extent for b_ in bands3]
                if min(ext) <= 0:
                    fills.append(None)
                    continue
                o = g.out_size
                valid = [(max(b_.q0, 0), min(b_.q1, o[a])) for a, b_ in enumerate(bands3)]
                lo = [max(v0 - b_.q0, 0) for (v0, _v), b_ in zip(valid, bands3)]
                hi = [max(lo[a], valid[a][1] - bands3[a].q0) for a in range(3)]
                fills.append((lo, hi, ext, valid))
                if p.compute_db and p.db_method is DbMethod.FOLD and not p.compute_dw:
                    own = (bd.own1 - bd.own0) * (bh.own1 - bh.own0) * Wo
                    loads.compute("vector", own, 1, 1.0, n_co, op="tensor_reduce")
                    loads.compute("vector", 1, 1, 1.0, n_co, op="tensor_tensor")
            shared = _shared_region_fills(g, p, items, fills)
            if fills and fills[0] is not None and (p.strategy is Strategy.SHARED_DY or not p.compute_dw) \
                    and not pw_shared_on(p):   # (shared-dy pointwise: its first step, below)
                head = _dx_head_ns(g, hw, *fills[0])   # dx runs first: its first dy band
                if p.dx_dphase_pairs and filters_by_dma(g, p):
                    # the slot tiles come by a few 3-D transposes (``slot_runs``) issued with the first band:
                    # both are in flight from the start and the first group needs only its slots' runs, so
                    # the later of the two counts, not their sum (down_s2 LNC1 shared dy: head 2.9 us
                    # modelled, 3.8 summed)
                    head = max(0.0, head - g.taps * g.c_in * g.c_out * ds / (hw.dma_bytes_per_ns * hw.dma_transpose_efficiency))
                fill += head
            held = dx_bands_held(g, p, pid)
            for i, f in enumerate(fills):
                if f is not None:
                    # a shared pack fill: its first region pays the memsets and placement
                    _cost_fill(loads, g, n_co, co_t, *f, fill_work=shared.get(i, True),
                               held=(items[i][0], tuple(f[3])) in held)
            first_place = _first_band_placement(g, hw, fills)
            if first_place and dx_band_early_legal(g, p):
                if p.dx_band_early:   # GpSimd places the first band (once), not VectorE
                    c.busy["vector"] -= n_co * first_place[0]
                    c.busy["gpsimd"] += n_co * first_place[1]
                else:   # dw runs first: the placement queues behind dw's last evictions on VectorE, exposed
                    fill += n_co * first_place[0]
        for _ in range(reloads):
            c.add(loads)
        if dx_t_active(p):
            _estimate_dx_t(c, g, p, hw, items)
            if dx_prefetched(p):   # loaded during dw: a lead that dw's idle DMA time hides (compose_ns)
                c.exposed("dx_prefetch", _dx_t_fill_ns(g, p, hw, items))
            else:
                fill += _dx_t_fill_ns(g, p, hw, items)
        elif p.dx_method is DxMethod.TOEPLITZ:
            tzm = p.dx_toeplitz_merge
            if p.dx_toeplitz_w:
                toeplitz.estimate_grids_w(c, g, p.dx_toeplitz, tzm, p.dx_toeplitz_w, p.dx_toeplitz_pair,
                                          toeplitz.fast_grid(g, p))
            else:
                toeplitz.estimate_grids(c, g, p.dx_toeplitz, p.dx_toeplitz_pair, tzm)
            if items and p.dx_toeplitz_w:   # the first block's split pairs run during the first copy
                e, nb, _copy = toeplitz.first_block_expansion(g, hw.name, p.dx_toeplitz, tzm, p.dx_toeplitz_w,
                                                                p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band),
                                                                items[0][1], items[0][2])
                c.matmul(PMAX, nb, g.dtype == "fp32", e)
                toeplitz.first_band_adjust(c, g, p, _dx_dy_extent(g, p.dx_band), items[0][1], items[0][2])
                fill += max(0.0, toeplitz.first_copy_ns(g, hw, p.dx_toeplitz, p.dx_toeplitz_pair,
                                                        _dx_dy_extent(g, p.dx_band), items[0][1], items[0][2], tzm)
                            - 2 * e * max(64, nb) / hw.tensor_ghz)
            elif items:
                fill += toeplitz.first_copy_ns(g, hw, p.dx_toeplitz, p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band),
                                               items[0][1], items[0][2], tzm)
                fill += toeplitz.store_tail_ns(g, hw, p.dx_toeplitz, p.dx_band, items[-1][1], items[-1][2], tzm)
            for _b, bd, bh in items:
                if p.dx_toeplitz_w:
                    c.add(toeplitz.band_sheet_w(g, hw.name, p.dx_toeplitz, p.dx_band, bd, bh, p.dx_toeplitz_pair,
                                                _dx_dy_extent(g, p.dx_band), tzm, p.dx_toeplitz_w))
                else:
                    c.add(toeplitz.band_sheet(g, hw.name, p.dx_toeplitz, p.dx_band, bd, bh, p.dx_toeplitz_pair,
                                              _dx_dy_extent(g, p.dx_band), tzm))
        elif p.dx_dphase_pairs:
            _estimate_dpairs(c, g, p, hw, items)
        elif p.dx_regions == 1 and dx_ci_split_on(g, p):
            for _b, bd, bh in items:
                _estimate_dx_band(c, g, None, bd, bh, ci_tiles, n_co, fp32, two, W)
        elif p.dx_regions == 1:
            for _b, bd, bh in items:
                c.add(_dx_band_sheet(g, hw.name, p.dx_ci_tile, bd, bh))
        else:   # one band's compute per pack; its store once per region
            for pack in dx_packs(g, items, p.dx_regions):
                _b, bd, bh = pack[0]
                c.add(_dx_band_sheet(g, hw.name, PMAX, bd, bh, True))
                rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
                c.dma(g.c_in * rows * W * ds, (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W)
                      * ds, len(pack) - 1)
        if items and p.dx_method is not DxMethod.TOEPLITZ and not pw_shared_on(p):
            # (toeplitz: its store_tail_ns, in the fill; shared-dy pointwise: a step's store, below)
            c.exposed("dx_tail", _dx_tail_ns(g, p, hw, items[-1]))
    if p.compute_dw:
        c.section("dx+dw" if p.strategy is Strategy.SHARED_DY else "dw")
    if pw_shared_on(p):   # dw's share of the shared-dy pointwise kernel (dx:gemm is charged above)
        chunks = [pw.chunk_of(g, it) for it in dx_program_items(g, p, pid)]
        head = pw.head_ns(g, hw, chunks)
        fill += head
        db_where = ("scalar" if p.pw_db_scalar else "pe") if db_on_dw(p) else ""
        pw.estimate_dw(c, g, chunks, db_where, p.lnc, p.pw_dyt_dma, p.pw_dyt_late)
        if p.compute_dx:
            _pw_flow(c, g, p, hw, chunks, dx_program_items(g, p, pid), filters, db_where, head)
        nb, run = pw.store_tail_bytes(g, chunks)
        c.exposed("dx_tail", _lone_dma_ns(hw, nb, run, min(PMAX, g.c_in)) - hw.dma_fixed_ns if nb else 0.0)
        if p.lnc == 2:   # the reduce-scatter of dw:dma_gemm's positions split, under the last dx steps
            half = ceil_div(g.c_out, 2)
            ci_t = min(PMAX, g.c_in)
            mine = n_tiles(g.c_in, PMAX) * len(pw.lay_of(g).shifts)   # per tap and C_in tile
            c.compute("vector", g.c_out, 1, 1.0, mine, op="tensor_copy")
            c.dma(ci_t * half * 4, half * 4, mine)
            c.compute("vector", half, 2, 1.0, mine, op="tensor_tensor")
            c.dma(ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, mine)
            # the exchange (a rendezvous), the last add and store, beyond what runs after the last send
            # window's matmuls: the own columns' dw, the held-back dx steps and their store (charged above)
            ex = _lone_dma_ns(hw, ci_t * half * 4, half * 4, ci_t) * (1 if db_on_dw(p) else 0.5)
            add = (max(64, 2 * half) + 60) / hw.vector_ghz
            last = _lone_dma_ns(hw, ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, ci_t)
            after = pw.dx_tail_pe_ns(g, hw, chunks) + pw.own_after_send_pe_ns(g, hw, chunks, pid)
            fill += max(0.0, ex + add + last - after - (_lone_dma_ns(hw, nb, run, min(PMAX, g.c_in)) if nb else 0.0))
    elif p.compute_dw and p.dw_method is DwMethod.DMA_GEMM:
        npos = g.axes[0].o * g.axes[1].o * Wo
        by_pos = p.lnc == 2 and p.dw_split == "positions"
        tiles_ = g.batch * ceil_div(npos, PMAX)
        mine = len(_gemm_dma_chunks(g, 1 if by_pos else p.lnc)[0 if by_pos else pid])
        if by_pos:   # half the position tiles; per C_in tile a reduce-scatter of the C_out halves
            tiles_ = ceil_div(tiles_, 2)
            half = ceil_div(g.c_out, 2)
            ci_t = min(PMAX, g.c_in)
            c.compute("vector", g.c_out, 1, 1.0, mine, op="tensor_copy")           # PSUM -> fp32 partial
            c.dma(ci_t * half * 4, half * 4, mine)                                  # the exchange
            c.compute("vector", half, 2, 1.0, mine, op="tensor_tensor")             # add into the output dtype
            c.dma(ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, mine)       # program 0's half: the larger
            # pipelined over the C_in tiles: the last tile's exchange (a rendezvous) is exposed
            fill += _lone_dma_ns(hw, ci_t * half * 4, half * 4, ci_t)
        blocks = [min(MOVING_MAX, g.c_out - s_) for s_ in range(0, g.c_out, MOVING_MAX)]
        eff = hw.dma_transpose_efficiency   # dma_transpose from HBM (nkisim.cost)
        c.busy["dma"] += tiles_ * (min(PMAX, npos) * (g.c_out + mine * PMAX) * ds) / (hw.dma_bytes_per_ns * eff)
        for cn in blocks:
            c.matmul(PMAX, cn, fp32, tiles_ * mine)
        if db_on_dw(p):
            c.matmul(co_t, 1, fp32, tiles_ * n_co)
        if not by_pos:
            c.evict(sum(blocks), two, mine)
            c.dma(min(PMAX, g.c_in) * g.c_out * ds, g.c_out * ds, mine)
    elif p.compute_dw:
        items = dw_items(g, p) if p.dw_split == "taps" else dw_program_items(g, p, pid)
        wcols = dw_columns(g, p, pid)   # W output columns of this program (LNC2 columns split: its half)
        own0 = dw_own_taps(g, p, pid)
        chunk = min(p.dw_co_chunk, n_co)
        n_chunks = ceil_div(n_co, chunk)
        xpad = any(a.k > 1 or a.lo or a.hi or a.s > 1 for a in g.axes)
        bank = PSUM_BANK_BYTES // ds
        # a box's cost depends on its rows, its x fill, the C_in tiles and the number of taps in the pass
        # (not on which taps): shared by every C_in range and tap pass of the same shape
        cache: dict = {}
        last_sheet = None   # the last item's dw work (shared_dy row stacking: flushed after dx's last band)
        for r0 in range(0, g.c_in, p.dw_ci_range):
            width = min(p.dw_ci_range, g.c_in - r0)
            ci_tiles = tile_sizes(width, p.dw_ci_tile)
            for pi, span in enumerate(dw_tap_passes(g, p, pid)):
                c.section("dx+dw" if p.strategy is Strategy.SHARED_DY else "dw")
                if p.dw_xt_dma:
                    xt_dma_setup_cost(c, g, p.dw_ci_tile, dw_xs_bundle(g, p) if p.dw_x_stationary else 1)
                # db_ones: the chunk whose stationary takes the ones slot (the db program's first pass)
                ones = (db_ones_chunk(g, p, span) if p.db_ones and r0 == 0 and pi == 0
                        and (own0 is None or dw_db_program(g, p) == pid) else None)
                if ones is not None:   # the ones slot of every bundle tile, once, when dw's state is made:
                    # ahead of dw's first x^T zero-row memsets on GpSimd, so exposed at dw's start (dilated_d2,
                    # C_in 64: 3 x 4.4k elements, head 8.9 -> 15.4 us; the stem's 3 x 207 elements: ~0.3 us)
                    ones_sheet = CostSheet(hw)
                    ones_sheet.compute("gpsimd", dw_x_extent(g.axes[2], Wo) * p.dw_ci_tile, 0, 1.0,
                                       xt_dma_bufs(p) if p.dw_xt_dma else 2, op="memset")
                    c.add(ones_sheet)
                    fill += ones_sheet.busy["gpsimd"]
                # row stacking: each item's chunk roles (a "lower" chunk's matmuls run with the next chunk's)
                chunk_rows = dw_row_chunk_rows(g, p, items) if p.dw_method is DwMethod.ROW_PACK else []
                roles = row_stack_roles([n for r in chunk_rows for n in r]) if p.dw_row_stack else None
                role_at = 0
                box_items = dx_box_items(g, p, pid) if p.dx_inside_boxes and dx_inside_dw_on(g, p) else []
                for it, (_b, (d0, d1), (h0, h1)) in enumerate(items):
                    if it < len(box_items) and box_items[it]:   # the boxes that run dx items: one body with dx
                        c.section("dw_in")
                    item_roles = ()
                    if roles is not None:
                        item_roles = tuple(roles[role_at:role_at + len(chunk_rows[it])])
                        role_at += len(chunk_rows[it])
                    rows = (d1 - d0, h1 - h0)
                    if rows[0] <= 0 or rows[1] <= 0:
                        continue
                    _x0, xext, xlo, xhi = dw_x_fill(g, (d0, d1), (h0, h1))
                    key = (rows, tuple(xlo), tuple(xhi), tuple(xext), d0 == 0, h0 == 0,
                           span if p.dw_xt_dma else span[1] - span[0], tuple(ci_tiles), item_roles, wcols, ones)
                    if key not in cache:
                        cache[key] = CostSheet(hw)
                        _estimate_dw_item(cache[key], g, p, (d0, d1), (h0, h1), ci_tiles, chunk, n_chunks, xpad,
                                          bank, span, item_roles, wcols, ones)
                    c.add(cache[key])
                    last_sheet = cache[key]
                    if p.dw_method is DwMethod.ROW_PACK and p.strategy is not Strategy.SHARED_DY:
                        # the x^T tiles its row passes stream (a stacked pair is one pass): section_ns's steps
                        tiles = (len(dw_xs_bundles(g, p, span)) if p.dw_x_stationary
                                 else max(1, (span[1] - span[0]) // g.kernel[2]))
                        c.pipeline_steps((len(chunk_rows[it]) - item_roles.count("lower")) * len(ci_tiles) * tiles)
                        c.pipeline_head(dw_head)
                    if p.strategy is not Strategy.SHARED_DY and not p.dw_dyt_dma:
                        c.dma(co_t * rows[0] * rows[1] * Wo * ds, (rows[1] * Wo if rows[1] == g.axes[1].o else Wo) * ds, n_co)
                    if db_on_dw(p) and r0 == 0 and pi == 0 and (own0 is None or dw_db_program(g, p) == pid):
                        # ones-vector matmuls per dy^T column, one add per tile (tap split: one program)
                        cols = ((len(chunk_rows[it]) - item_roles.count("lower")) * (wcols[1] - wcols[0])
                                if p.dw_method is DwMethod.ROW_PACK
                                else sum(cnt for _s, cnt in box_block_sizes((0, 0, 0), (rows[0], rows[1], Wo), PMAX)))
                        c.matmul(co_t, 1, fp32, cols * n_co)
                        c.compute("vector", 1, 2, 1.0, n_co, op="tensor_tensor")
                c.section("dw_finish")
                if p.strategy is Strategy.SHARED_DY and p.dw_row_stack and last_sheet is not None:
                    # the waiting chunk's pass is flushed in finish, after dx's last band: dx's last store
                    # runs beside it (the last item's dw PE work), not after everything
                    c.waits["dx_tail"] = max(0.0, c.waits.get("dx_tail", 0.0) - last_sheet.busy["tensor"])
                if p.dw_x_stationary:
                    xs_fill = (_estimate_xs_finish_shared if _shared_stacked_xs(p) else _estimate_xs_finish)(
                        c, g, p, hw, width, span, pid)
                    if p.strategy is Strategy.SHARED_DY or p.compute_dx:
                        # a trail: shared_dy at the end, beside dx's last store; per gradient, the finish has
                        # no PE work, so the in-order PE goes on with dx while the LNC2 exchange, the adds and
                        # the stores run (unet3d LNC2: dx's matmuls start right after dw's last one)
                        c.exposed("dw_finish", xs_fill)
                    else:
                        fill += xs_fill
                    continue
                # finalize: (LNC2) exchange + add, cast, transposes, stores
                n_span = span[1] - span[0]
                own = dw_own_taps(g, p, pid)
                # the reduce-scatter: program 0 stores the first ceil(n/2) taps, program 1 the rest
                taps_here = n_span if own is not None else (ceil_div(n_span, p.lnc) if pid == 0
                                                            else n_span - ceil_div(n_span, p.lnc))
                grp = cast_group(g, width)
                fused = dw_fused_exchange(g, p)   # the add of the other's partial is the cast
                if p.lnc == 2 and own is None:
                    ex = _dw_exchange_ns(c, g, hw, co_t, n_co, taps_here, width, grp, fused, dw_defer_finish(g, p))
                    if p.strategy is Strategy.SHARED_DY:   # at the end, beside dx's last store: a trail
                        c.exposed("dw_finish", ex)
                    else:
                        fill += ex
                for t0 in range(0, taps_here, grp):
                    tn = min(grp, taps_here - t0)
                    for k in range(n_co if not dw_direct(g, p) else 0):
                        c.compute("vector" if k % 2 == 0 else "gpsimd", tn * width, 2 if fused else 1, 1.0, 1,
                                  op="tensor_tensor" if fused else "tensor_copy")
                for ci in tile_sizes(width, PMAX):
                    c.transpose(co_t, ci, fp32, taps_here * n_co)
                    c.evict(g.c_out, two, taps_here * max(1, ceil_div(g.c_out * ds, PSUM_BANK_BYTES)))
                    c.dma(ci * g.c_out * ds * grp, g.c_out * ds, ceil_div(taps_here, grp))

    if p.compute_db:
        c.section("db" if p.db_method is DbMethod.STANDALONE else "db_store")
        if p.db_method is DbMethod.STANDALONE:
            npos = g.axes[0].o * g.axes[1].o * Wo
            chunk = _db_chunk(g)
            per_b = ceil_div(npos, chunk)
            per = ceil_div(g.batch, p.lnc)
            bs = max(0, min(g.batch, (pid + 1) * per) - min(g.batch, pid * per))
            c.dma(co_t * min(chunk, npos) * ds, min(chunk, npos) * ds, bs * per_b * n_co)
            c.compute("vector", min(chunk, npos), 1, 1.0, bs * per_b * n_co, op="tensor_reduce")
            c.compute("vector", 1, 1, 1.0, bs * per_b * n_co, op="tensor_tensor")
        if p.db_ones:   # one row [1, C_out] of dw's accumulator
            c.dma(g.c_out * 4, g.c_out * 4, 1)
        else:
            c.dma(co_t * 4, 4, n_co)
    if p.dw_interleave:
        _interleaved_flow(c, g, p)
    return c, fill


def _interleaved_flow(c: CostSheet, g: ConvGeom, p: Plan) -> None:
    """dw-interleaved (dx:toeplitz with dw's boxes between dx's items, one body): the body's loads -- dx's
    bands and dw's x^T bundles and dy^T by DMA -- stream ahead of the PE through the item and bundle rings,
    so its DMA is an even pipeline of dw's x^T tiles (``c.steps``' "dw"), not a stall share: it costs the PE
    the first step's loads beyond dw's head, which the fill charges (stem LNC1: no PE gap > 0.2 us in the
    body, the DMA share charged 5.2 us)."""
    secs = _sections(c, g, p)
    n = c.steps.get("dw", 0)
    if "dx" not in secs or n <= 0:
        return
    b = secs["dx"]
    even = [([(b["dma"] / n, k)], b["tensor"] / n, 0.0) for k in range(n)]
    c.flow["dx"] = flow_shop_ns(even, 1, c.hw.dma_fixed_ns) - c.steps_head.get("dw", 0.0)


def dx_inside_dw_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_inside_dw``: dx^T with its first band prefetched, after a streaming row-mode x-stationary dw
    with x^T by DMA, one tap pass, one C_in range, no row stacking and no deferred finish. The kernel
    runs dx in dw's last row pass, after that pass's first x^T bundles (the ring's worth) are issued and
    before its matmuls: dw is DMA-bound on its x^T transfers and dx PE-bound, so they overlap. dx's first
    band is then prefetched during dw's first box (not its last) and dw's dy boxes load one box ahead,
    so that neither queues behind the other section's DMA (FIFO). One dx item per program: with more,
    the later bands' loads and copies queue behind dw's transfers (unet3d_c64 LNC2 76.7 -> 82.7 us)."""
    return (dx_prefetched(p) and p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma
            and not p.dw_row_stack and not p.dw_interleave and p.dw_ci_range >= g.c_in
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


def _inside_boxes_variants(g: ConvGeom, p: Plan) -> list[Plan]:
    """``dx_inside_boxes`` twins of ``p``: with its dx band, and with the biggest smaller D band (whole H)
    that gives every program more dx items than dw boxes, so that every box runs one (unet3d_c64 LNC2:
    dx band 4x32 runs one item in the second of two boxes, 73.4 us; 2x32 one in the first and two in the
    second, 70.6 us)."""
    q = replace(p, dx_inside_dw=True, dx_inside_boxes=True)
    if not dx_inside_dw_legal(g, q):
        return []
    out = [q]
    for d in _band_options(g.axes[0].n):
        if d >= p.dx_band[0] or p.dx_band[1] != g.axes[1].n:
            continue
        qb = replace(q, dx_band=(d, g.axes[1].n))
        if all(len(dx_program_items(g, qb, k)) > len(dw_program_items(g, qb, k)) for k in range(p.lnc)):
            if dx_inside_dw_legal(g, qb):
                out.append(qb)
            break
    return out


# ``dx_inside_boxes``: the stall-share factor of the body that merges dx with dw's boxes (SECTION_LOSS is
# 0.125). Fitted on unet3d_c64 LNC1/LNC2 and dilated_d2 LNC1 (session 6): nkisim shows the PE nearly never
# waiting inside that body (unet3d LNC2: 1.9 us of gaps in 58 us), as the transfers are a pass ahead
BOXES_LOSS = 0.06


def dw_xt_ring(g: ConvGeom, p: Plan) -> int:
    """The x^T (bundle) tiles of row-mode ``xT dma`` dw: ``xt_dma_bufs``; with dx inside dw's boxes, one per
    bundle of a pass (every x^T of the pass is issued before the box's dx item)."""
    if p.dx_inside_dw and p.dx_inside_boxes and p.dw_x_stationary:
        kd_n, kh_n, _kw = g.kernel
        return max(xt_dma_bufs(p), -(-kd_n * kh_n // dw_xs_bundle(g, p)))
    return xt_dma_bufs(p)


def dx_inside_dw_on(g: ConvGeom, p: Plan) -> bool:
    return p.dx_inside_dw and dx_inside_dw_legal(g, p)


def dx_between_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_between_bundles``: per gradient D-phase-pairs dx after a streaming row-mode x-stationary dw
    with x^T by DMA in one tap pass and one C_in range whose finish is deferred past dx (LNC2 columns /
    positions split): dw is DMA-bound on its x^T transfers, so dx's PE work (its groups, ``dx_dpairs_steps``)
    runs in the gaps between dw's bundles; half of it runs after dw's pass, under dw's exchange. Only with
    ``dw_xt_merge`` (down_s2 LNC2: merged 26.5 -> 25.5 us; the unmerged twin models 28.4 -> 26.9 but is
    estimated 26.5, below the merged pair's 27.7: the estimate does not see the queue-bound x^T
    transfers that the merge relieves, so offering it mis-picks)."""
    return bool(p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dx_dphase_pairs
                and p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma
                and p.dw_xt_merge and p.filters_first and not p.dx_inside_dw and not p.dw_interleave
                and p.dw_ci_range >= g.c_in
                and len(dw_tap_passes(g, p, 0)) == 1 and dw_defer_finish(g, p))


def dx_between_on(g: ConvGeom, p: Plan) -> bool:
    return p.dx_between_bundles and dx_between_legal(g, p)


def dx_bands_held(g: ConvGeom, p: Plan, pid: int) -> set:
    """``dx_between_bundles``: the dy rows (batch, ((d0, d1), (h0, h1), (0, W_out))) of dw's boxes on program
    ``pid``, which dx's bands of exactly those rows read from SBUF instead of loading them again
    (``DxSteps.resident``): every box of the one pass stays in its dy pool buffer (boxes <= ``dy_bufs``)."""
    if not dx_between_on(g, p) or p.dw_dyt_dma:
        return set()
    boxes = dw_program_items(g, p, pid)
    if len(boxes) > p.dy_bufs:
        return set()
    return {(b, (tuple(od), tuple(oh), (0, g.axes[2].o))) for b, od, oh in boxes}


def _dw_dx_merged(g: ConvGeom, p: Plan) -> bool:
    """dw's and dx's pools and PSUM banks are live together (dw-interleaved, dx inside dw)."""
    return p.dw_interleave or dx_inside_dw_on(g, p) or dx_between_on(g, p)


def dw_interleave_ok(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_interleave``: per gradient, dx:toeplitz with dw streaming its own dy (row or box mode)."""
    return bool(p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
                and p.dx_method is DxMethod.TOEPLITZ and p.dw_method is not DwMethod.DMA_GEMM)


def _sections(c: CostSheet, g: ConvGeom, p: Plan) -> dict[str, dict[str, float]]:
    """The busy time per section of a cost sheet; with ``dw_interleave`` dw's boxes run between dx's
    items (``dx_inside_dw``: dx runs in dw's last row pass; ``dx_inside_boxes``: in every box but the
    first, charged to "dw_in"), so the two bodies are one section (dw's DMA
    and GpSimd work under dx's PE stream) -- as the kernel and the budget decide it (``_dw_dx_merged``)."""
    secs = c.section_busy()
    inside = "dw_in" if p.dx_inside_boxes else "dw"   # dx inside dw's boxes: all but the first box
    if _dw_dx_merged(g, p) and inside in secs and "dx" in secs:
        dw = secs.pop(inside)
        secs["dx"] = {e: secs["dx"][e] + dw[e] for e in dw}
    return secs


def _dw_exchange_ns(c: CostSheet, g: ConvGeom, hw: TargetFigures, co_t: int, n_co: int, half: int, width: int,
                    grp: int, fused: bool, deferred: bool = False) -> float:
    """The LNC2 positions split's reduce-scatter (mirrors DwState._exchange_halves): one sendrecv per
    C_out tile of ``half`` taps of fp32 partials, charged to the DMA (and, unfused, the in-place adds
    to VectorE); returns its exposed time. It is a rendezvous of both programs on the critical path:
    the PE (in order) waits for it and for the first add (fused: the first add-cast) before its dw^T
    transposes can go on. Deferred past dx (``dw_defer_finish``), only the first add is exposed: it
    waits for dx's last evictions on VectorE and the transposes wait for it."""
    nbytes = co_t * half * width * 4
    c.dma(nbytes, half * width * 4, n_co)
    add = half * width if not fused else min(grp, half) * width
    if not fused:
        c.compute("vector", add, 2, 1.0, n_co, op="tensor_tensor")
    if deferred:
        return (max(64.0, 2.0 * add) + 60.0) / hw.vector_ghz
    return 2 * hw.dma_fixed_ns + n_co * (_lone_dma_ns(hw, nbytes, half * width * 4, co_t) - hw.dma_fixed_ns) \
        + (1 if fused else n_co) * (max(64.0, 2.0 * add) + 60.0) / hw.vector_ghz


def _lone_dma_ns(hw: TargetFigures, nbytes: float, run_bytes: float, partitions: int) -> float:
    """One transfer alone on the queues (nkisim): start latency, then its bytes at the share of the
    16 DMA engines its partitions reach (ceil(P / 8) of them)."""
    run = max(1.0, min(run_bytes, nbytes))
    rate = min(16, ceil_div(max(1, partitions) * 16, PMAX)) / 16
    return hw.dma_fixed_ns + nbytes / (hw.dma_bytes_per_ns * hw.descriptor_efficiency(run)) / rate


def dx_last_by_blocks(g: ConvGeom, p: Plan, work: tuple) -> bool:
    """Gather dx (``nki_dx.run_dx``): the program's last plane is stored block by block, each block right
    after its eviction, so the kernel's dx tail is the last block's store, not the plane's (vae3d: 128 of
    512 KB, the tail after the last eviction 2.9 -> 1.8 us). Unit strides (a block is a box of the plane
    and of dx), one band per plane (no regions), a band of one phase with taps and more than one block."""
    return (p.dx_regions == 1 and all(a.s == 1 for a in g.axes) and len(work) == 1 and bool(work[0].taps)
            and len(work[0].blocks) > 1)


def _dx_tail_ns(g: ConvGeom, p: Plan, hw: TargetFigures, item: tuple) -> float:
    """The dx tail beyond the fill's DMA latency: the last block's store (``dx_last_by_blocks``, the last
    C_in tile's plane), else the last band's stores (``_dx_store_tail_ns``)."""
    _b, bd, bh = item
    work = dx_phase_work(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]))
    if not p.dx_transposed and not p.dx_dphase_pairs and dx_last_by_blocks(g, p, work):
        (_jd, _jh, _jw), (nd, nh, nw) = work[0].blocks[-1]
        ci = tile_sizes(g.c_in, p.dx_ci_tile)[-1]
        run = (nh * nw if nw == g.axes[2].n else nw) * g.dtype_bytes
        return _lone_dma_ns(hw, ci * nd * nh * nw * g.dtype_bytes, run, ci) - hw.dma_fixed_ns
    return _dx_store_tail_ns(g, hw, bd, bh, 2 * g.c_in if _dpair_one_store(g, p, item) else 0,
                             _dpair_last_rows(g, p, item))


def _dpair_one_store(g: ConvGeom, p: Plan, item: tuple) -> bool:
    """D-phase pairs: the band plane of ``item`` stores with one 128-partition DMA (``dx_dpairs.one_store``)."""
    if not p.dx_dphase_pairs:
        return False
    _b, bd, bh = item
    return dpairs.one_store(g, dpairs.band_halves(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0])))


def _dpair_last_rows(g: ConvGeom, p: Plan, item: tuple) -> int:
    """D-phase pairs: the D rows per phase a program's last band stores one by one
    (``dx_dpairs.dpair_last_by_rows``), else 1 (one store)."""
    if not p.dx_dphase_pairs:
        return 1
    _b, bd, bh = item
    halves = dpairs.band_halves(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]))
    return halves[0][1] if dpairs.dpair_last_by_rows(g, halves) else 1


def _dx_store_tail_ns(g: ConvGeom, hw: TargetFigures, bd: AxisBand, bh: AxisBand, partitions: int = 0,
                      split: int = 1) -> float:
    """The last dx band's store after its last eviction, beyond the fill's DMA latency: one DMA per
    C_in tile (<= 128 partitions) sharing the bandwidth, each at its partitions' share of the DMA
    engines (down_s2: a 64-channel plane of 1 MB on half the engines, ~6 us after the PE is done)."""
    W = g.axes[2].n
    ds = g.dtype_bytes
    rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
    run = (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W) * ds
    tiles = tile_sizes(g.c_in, PMAX)
    eff = hw.descriptor_efficiency(run)
    total = g.c_in * rows * W * ds / (hw.dma_bytes_per_ns * eff)
    if partitions:   # one store of every channel on ``partitions`` partitions (D-phase pairs' one store;
        # ``split``: its D rows one by one, the last row's store is the tail)
        return _lone_dma_ns(hw, g.c_in * rows * W * ds / split, run, partitions) - hw.dma_fixed_ns
    slowest = max(_lone_dma_ns(hw, ci * rows * W * ds, run, ci) for ci in tiles) - hw.dma_fixed_ns
    return max(total, slowest)


def _dx_head_ns(g: ConvGeom, hw: TargetFigures, lo: list[int], hi: list[int], ext: list[int],
                valid: list[tuple[int, int]]) -> float:
    """dx runs first: how long its PE waits for the first dy band beyond the fill's DMA latency (every
    C_out tile, since a block's matmuls accumulate over all of them; one lone DMA each at the share of
    the 16 DMA engines its partitions reach), plus the staged placement of a padded band."""
    n = [hi[a] - lo[a] for a in range(3)]
    if min(n) <= 0:
        return 0.0
    ds = g.dtype_bytes
    elems = n[0] * n[1] * n[2]
    o = g.out_size
    run = n[2] * (n[1] * (n[0] if n[1] == o[1] else 1) if n[2] == o[2] else 1)
    staged = needs_stage(lo, hi, ext)
    ns = 0.0
    for co in tile_sizes(g.c_out, PMAX):
        ns += _lone_dma_ns(hw, co * elems * ds, (elems if staged else run) * ds, co) - hw.dma_fixed_ns
    if staged:   # the placement copy (VectorE, 4x mode for 2-byte SBUF->SBUF), per C_out tile
        sp = CostSheet(hw).copy_speedup("vector", ds == 2, False, True)
        ns += n_tiles(g.c_out, PMAX) * (max(64.0, elems / sp) + 60.0) / hw.vector_ghz
    return ns


def _dw_head_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0) -> float:
    """Per-gradient dw (it runs first): how long program 0's PE waits before its first dw matmul, beyond
    the fill's DMA latency: the first box's dy (the whole box of C_out tile 0, on which the dy^T transposes
    start) and then ``_dw_first_x_wait_ns``. Large when a box is big (temporal_k311's 16x16-row boxes)."""
    first = _dw_first_box(g, p, pid)
    if first is None:
        return 0.0
    if dw_head_split_on(g, p):   # the PE trails the column pieces of the first dy^T and x^T
        return _dw_head_split_ns(g, p, hw, pid, first)
    dy_ns = _dw_first_dyt_dma_ns(g, hw, first, p) if p.dw_dyt_dma else _dw_first_dy_ns(g, hw, first)
    return max(0.0, dy_ns - hw.dma_fixed_ns) + _dw_first_x_wait_ns(g, p, hw, pid)


def _dw_head_split_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int, first: tuple) -> float:
    """``dw_head_split``: dw_head.head_wait_ns for the program's first row chunk, taps and columns."""
    (d0, d1), (h0, h1) = first
    (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
    span = dw_tap_passes(g, p, pid)[0]
    w_lo, w_hi = dw_columns(g, p, pid)
    a, e = xt_window(g, w_lo, w_hi)
    ci = min(p.dw_ci_tile, p.dw_ci_range, g.c_in)
    return head_wait_ns(g, hw.dma_bytes_per_ns, hw.tensor_ghz, (d0, h0, cd, ch), span, w_hi - w_lo, e - a, ci)


def _dw_first_dyt_dma_ns(g: ConvGeom, hw: TargetFigures, box: tuple[tuple[int, int], tuple[int, int]],
                         p: Plan | None = None) -> float:
    """``dw_dyt_dma``: the first row chunk's dy^T (C_out tile 0) by dma_transpose, alone on the queues
    (its rows' share of the DMA engines, the slowest run); box mode: the first position tile's, every
    C_out tile (a matmul step takes all of them), one transfer per d plane."""
    (d0, d1), (h0, h1) = box
    if p is not None and dyt_box_dma_legal(g, p):
        (nd, nh, nw), _cnt = box_block_sizes((0, 0, 0), (d1 - d0, h1 - h0, g.axes[2].o), PMAX)[0]
        bw = hw.dma_bytes_per_ns * DMA_TRANSPOSE_EFFICIENCY
        plane = nh * nw * g.c_out * g.dtype_bytes
        return hw.dma_fixed_ns + max(nd * plane / bw, plane / (bw * min(16, ceil_div(nh * nw * 16, PMAX)) / 16))
    (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
    row = g.axes[2].o * min(PMAX, g.c_out) * g.dtype_bytes
    bw = hw.dma_bytes_per_ns * DMA_TRANSPOSE_EFFICIENCY
    runs = dyt_runs(g.axes[1].o, d0, h0, cd, ch)
    slowest = max(n * row / (bw * min(16, ceil_div(n * 16, PMAX)) / 16) for _p, _r, n in runs)
    return hw.dma_fixed_ns + max(cd * ch * row / bw, slowest)


def _dw_first_box(g: ConvGeom, p: Plan, pid: int = 0) -> tuple[tuple[int, int], tuple[int, int]] | None:
    items = [it for it in dw_program_items(g, p, pid) if it[1][1] > it[1][0] and it[2][1] > it[2][0]]
    return (items[0][1], items[0][2]) if items else None


def _dw_first_dy_ns(g: ConvGeom, hw: TargetFigures, box: tuple[tuple[int, int], tuple[int, int]]) -> float:
    """The first dw box's dy load (C_out tile 0), alone on the queues."""
    (d0, d1), (h0, h1) = box
    wo = g.axes[2].o
    co_t = min(PMAX, g.c_out)
    rows = (d1 - d0) * (h1 - h0)
    run = (rows if h1 - h0 == g.axes[1].o else 1) * wo * g.dtype_bytes
    return _lone_dma_ns(hw, co_t * rows * wo * g.dtype_bytes, run, co_t)


def _dw_first_x_wait_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0) -> float:
    """Per-gradient dw: how long program 0's PE waits for the x of its first box and C_in tile after that
    box's dy has landed and been transposed: an x band (staged: plus the VectorE placement) or, with
    ``xT dma``, the transfers of its first x^T tile (x-stationary: bundle) -- no x band is loaded then.
    A lone DMA gets ceil(P/8) of the 16 DMA engines. Large when one box spans the whole x at few
    partitions (down_s2: C_in 64, stride 2), small elsewhere: the busy-time sum misses it."""
    first = _dw_first_box(g, p, pid)
    if first is None:
        return 0.0
    (d0, d1), (h0, h1) = first
    ds = g.dtype_bytes
    wo = g.axes[2].o
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    dy_ns = _dw_first_dyt_dma_ns(g, hw, first, p) if p.dw_dyt_dma else _dw_first_dy_ns(g, hw, first)
    pe = CostSheet(hw)   # the dy^T transposes of the first box (row mode: its first <= 128-row chunk)
    ci = min(p.dw_ci_tile, p.dw_ci_range, g.c_in)
    if p.dw_method is DwMethod.ROW_PACK:
        (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
        if not p.dw_dyt_dma:
            pe.transpose(co_t, cd * ch, g.dtype == "fp32", wo * n_co)
        d1, h1 = d0 + cd, h0 + ch
    else:
        for (nd, nh, nw), cnt in box_block_sizes((0, 0, 0), (d1 - d0, h1 - h0, wo), PMAX):
            if not p.dw_dyt_dma:   # (box-mode dyT dma: no PE transposes)
                pe.transpose(co_t, nd * nh * nw, g.dtype == "fp32", n_co * cnt)
    if p.dw_xt_dma and p.dw_method is DwMethod.ROW_PACK:
        x_ns = _first_xt_tile_ns(g, p, hw, ci, (d0, h0, d1 - d0, h1 - h0))
    else:
        _x0, ext, lo, hi = dw_x_fill(g, (d0, d1), (h0, h1))
        if any(h <= lo_ for lo_, h in zip(lo, hi)):
            return 0.0
        n = [hi[a] - lo[a] for a in range(3)]
        elems = n[0] * n[1] * n[2]
        x_run = n[2] * (n[1] * (n[0] if n[1] == g.axes[1].n else 1) if n[2] == g.axes[2].n else 1)
        staged = needs_stage(lo, hi, ext)
        x_ns = _lone_dma_ns(hw, ci * elems * ds, (elems if staged else x_run) * ds, ci)
        if staged:   # the placement copy (VectorE, 4x mode for 2-byte SBUF->SBUF)
            sp = CostSheet(hw).copy_speedup("vector", ds == 2, False, True)
            x_ns += (max(64.0, elems / sp) + 60.0) / hw.vector_ghz
    return max(0.0, x_ns - dy_ns - pe.busy["tensor"])


def _first_xt_tile_ns(g: ConvGeom, p: Plan, hw: TargetFigures, ci: int, chunk: tuple[int, int, int, int]) -> float:
    """``xT dma``: the first x^T tile of a row chunk (x-stationary: the first bundle of (kd, kh) pairs)
    lands after the DMA latency and its slowest transfer (dma_transpose at 90 %, at its rows' share of
    the DMA engines), all of its transfers sharing the bandwidth."""
    kw_n = g.kernel[2]
    pairs = dw_xs_bundles(g, p, (0, g.taps))[0][1] if p.dw_x_stationary else 1
    _xw, lo, hi = xt_columns(g)
    bw = hw.dma_bytes_per_ns * DMA_TRANSPOSE_EFFICIENCY
    total = slowest = 0.0
    for q in range(pairs):
        kd, kh, _kw = g.tap_coords(q * kw_n)
        for run in xt_fill(g, *chunk, kd, kh).transposes:
            moved = run.rows * (hi - lo) * ci * g.dtype_bytes
            total += moved
            slowest = max(slowest, moved / (bw * min(16, ceil_div(run.rows * 16, PMAX)) / 16))
    return hw.dma_fixed_ns + max(total / bw, slowest)


@lru_cache(maxsize=8192)
def _dx_band_sheet(g: ConvGeom, target: str, ci_tile: int, bd: AxisBand, bh: AxisBand,
                   packed: bool = False) -> CostSheet:
    """The cost of one dx band (cached across candidates: many share their bands); ``packed``: the
    block-diagonal form (one 128-row tile, one 128-partition C_out tile)."""
    c = CostSheet(TARGET_FIGURES[target])
    ci_tiles = [PMAX] if packed else tile_sizes(g.c_in, ci_tile)
    _estimate_dx_band(c, g, None, bd, bh, ci_tiles, 1 if packed else n_tiles(g.c_out, PMAX),
                      g.dtype == "fp32", g.dtype_bytes == 2, g.axes[2].n)
    return c


def _estimate_dx_band(c: CostSheet, g: ConvGeom, p: Plan | None, bd: AxisBand, bh: AxisBand, ci_tiles: list[int],
                      n_co: int, fp32: bool, two: bool, W: int) -> None:
    """The dx compute and store of one band (mirrors nki_dx.run_dx's inner loops)."""
    ds = g.dtype_bytes
    work = dx_phase_work(g, (bd, bh, axis_bands(g.axes[2], W)[0]), with_blocks=False)
    zero = [w for w in work if not w.taps]
    for ci in ci_tiles:
        for w in zero:
            c.compute("gpsimd", w.positions, 0, 1.0, 1, op="memset")
        for w in work:
            if not w.taps:
                continue
            for (nd, nh, nw), count in box_block_sizes(w.j0, w.j1, MOVING_MAX):
                n = nd * nh * nw
                c.matmul(ci, n, fp32, len(w.taps) * n_co * count)
                c.evict(n, two, count, contiguous=(g.axes[2].s == 1))
        rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
        c.dma(ci * rows * W * ds, (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W) * ds)


def _fold_cost(c: CostSheet, g: ConvGeom, p: Plan, n: int, count: int) -> None:
    """Folding ``count`` PSUM accumulators of ``n`` elements (mirrors DwState._fold)."""
    if dw_direct(g, p):
        c.evict(n, g.dtype_bytes == 2, count)
    else:   # the first box copies, later boxes add (two streams): counted as adds
        c.compute("vector", n, 2, 1.0, count, op="tensor_tensor")


def _estimate_dw_item(c: CostSheet, g: ConvGeom, p: Plan, od: tuple[int, int], oh: tuple[int, int],
                      ci_tiles: list[int], chunk: int, n_chunks: int, xpad: bool, bank: int,
                      span: tuple[int, int], roles: tuple[str, ...] = (),
                      wcols: tuple[int, int] | None = None, ones: tuple[int, int, int] | None = None) -> None:
    """dw of one output box (mirrors DwState.add_box), without its dy load and db fold; ``roles``:
    its row chunks' roles under ``dw_row_stack``; ``wcols``: the W output columns run (row mode);
    ``ones``: the db_ones chunk (row mode)."""
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    Wo = g.axes[2].o
    rows = (od[1] - od[0], oh[1] - oh[0])
    if p.dw_method is DwMethod.ROW_PACK:
        _estimate_rows(c, g, p, (od, oh), ci_tiles, chunk, n_chunks, xpad, bank, span, roles, wcols, ones)
        return
    sizes = [(s_[0] * s_[1] * s_[2], cnt) for s_, cnt in box_block_sizes((0, 0, 0), (rows[0], rows[1], Wo), PMAX)]
    G = p.dw_tap_group
    t_lo, t_hi = span
    groups = [min(G, t_hi - t) for t in range(t_lo, t_hi, G)]
    for npos, cnt in sizes:       # dy^T once per position tile
        if p.dw_dyt_dma:   # by dma_transpose from HBM (90 %), per C_out tile and d plane
            c.busy["dma"] += cnt * npos * g.c_out * ds / (c.hw.dma_bytes_per_ns * DMA_TRANSPOSE_EFFICIENCY)
            continue
        c.transpose(co_t, npos, fp32, n_co * cnt)
        c.evict(g.c_out, two, max(1, ceil_div(g.c_out * ds, PSUM_BANK_BYTES)) * cnt)
    x0, xext, xlo, xhi = dw_x_fill(g, od, oh)
    for ci in ci_tiles:
        _cost_fill(c, g, 1, ci, xlo, xhi, xext, [(x0[a] + xlo[a], x0[a] + xhi[a]) for a in range(3)], x_side=True)
        if p.dw_x_stationary:
            _estimate_xs_groups(c, g, p, ci, sizes, span)
            continue
        for gs in groups:
            for npos, cnt in sizes:
                c.transpose(ci, npos, fp32, gs * cnt * n_chunks)
                c.evict(gs * ci, two, cnt * n_chunks)
                c.matmul(co_t, gs * ci, fp32, n_co * cnt)
            _fold_cost(c, g, p, gs * ci, n_co)


def _estimate_xs_groups(c: CostSheet, g: ConvGeom, p: Plan, ci: int, sizes: list[tuple[int, int]],
                        span: tuple[int, int]) -> None:
    """Box-mode x-stationary dw of one C_in tile (mirrors DwState.add_box): per tap group and position
    tile the x^T transposes, then one matmul per stationary chunk (M = taps x ci, N = C_out)."""
    fp32 = g.dtype == "fp32"
    two = g.dtype_bytes == 2
    chunks = dw_xs_chunks(g, p, span)
    per_bank = dw_xs_per_bank(g)
    for t0 in range(span[0], span[1], p.dw_tap_group):
        gs = min(p.dw_tap_group, span[1] - t0)
        grp = [ch for ch in chunks if t0 <= ch[0] < t0 + gs]
        for npos, cnt in sizes:
            c.transpose(ci, npos, fp32, gs * cnt)
            c.evict(gs * ci, two, cnt)
            for _t, _nb, tn in grp:
                c.matmul(tn * ci, g.c_out, fp32, cnt)
        for _b, _u0, k, _tn in dw_xs_fold_runs(grp, per_bank):
            _fold_cost(c, g, p, k * g.c_out, 1)


def _estimate_xs_finish(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, width: int,
                        span: tuple[int, int], pid: int = 0) -> float:
    """The end of an x-stationary pass (mirrors DwState._finish_xs): LNC2 exchange and add of this
    program's chunks, one cast per C_in tile, stores straight into dw. Returns the exposed fill (ns)."""
    ds = g.dtype_bytes
    chunks = dw_xs_chunks(g, p, span)
    cis = tile_sizes(width, p.dw_ci_tile)
    own = dw_own_taps(g, p, pid)
    half = ceil_div(len(chunks), p.lnc)
    mine = chunks if (own is not None or p.lnc == 1) else (chunks[:half] if pid == 0 else chunks[half:])
    fill = 0.0
    if p.lnc == 2 and own is None:
        win = xs_exchange_window(len(chunks), len(cis))
        sent = len(cis) * len(chunks) if win is None else win[1]   # chunks sent (one C_in tile: a window)
        nbytes = sent * g.c_out * 4 * PMAX
        if dx_between_on(g, p):   # issued before dx's steps that follow dw's pass: it runs under them
            c.section("dx")
        c.dma(nbytes, sent * g.c_out * 4, 1)
        c.section("dw_finish")
        add = len(cis) * (len(mine) * g.c_out * 2 + 60) / hw.vector_ghz
        if dw_defer_finish(g, p):
            # deferred past dx: the exchange runs under dx; the add is the cast, on GpSimd (VectorE's
            # queue holds dx's evictions; GpSimd's is free, so it runs under dx)
            c.compute("gpsimd", len(mine) * g.c_out, 2, 1.0, len(cis), op="tensor_tensor")
            fill += add / 2
        else:
            c.compute("vector", len(mine) * g.c_out, 2, 1.0, len(cis), op="tensor_tensor")
            fill += 2 * hw.dma_fixed_ns + nbytes / hw.dma_bytes_per_ns + add
    for ci in cis:
        if not dw_direct(g, p) and not (p.lnc == 2 and own is None and dw_defer_finish(g, p)):
            c.compute("vector", len(mine) * g.c_out, 1, 1.0, 1, op="tensor_copy")
        for n_taps, count in _xs_stores(g, p, mine):
            c.dma(n_taps * ci * g.c_out * ds, g.c_out * ds, count)
    return fill


def _shared_stacked_xs(p: Plan) -> bool:
    """shared_dy, LNC1, x-stationary dw with row stacking (down_s2's pick): the waiting chunk's pass is
    flushed in the finish, after dx's last band, and the chunks done before it are cast and stored under its
    matmuls."""
    return p.strategy is Strategy.SHARED_DY and p.lnc == 1 and p.dw_x_stationary and p.dw_row_stack


def _estimate_xs_finish_shared(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, width: int,
                               span: tuple[int, int], pid: int = 0) -> float:
    """``_estimate_xs_finish`` where it runs under the last item's dw (``_shared_stacked_xs``): the casts and
    stores of every store run but the last are charged to the body (in its idle DMA time: down_s2 LNC1,
    13 stores from 27.7 to 33.9 us, the last matmul at 33.4), the last run's share stays the trail."""
    sheet = CostSheet(hw)
    xs_fill = _estimate_xs_finish(sheet, g, p, hw, width, span, pid)
    runs = sum(count for _n, count in _xs_stores(g, p, dw_xs_chunks(g, p, span)))
    last = 1.0 / max(1, runs)
    c.section("dx+dw")
    c.add(sheet.scaled(1.0 - last))
    c.section("dw_finish")
    c.add(sheet.scaled(last))
    return xs_fill


def xs_exchange_window(n_chunks: int, n_ci_tiles: int) -> tuple[int, int] | None:
    """LNC2 x-stationary exchange (DwState._send_xacc): (chunks, chunks sent) when each program sends
    only the ceil(n/2) chunks covering the other's share (one C_in tile: the window is contiguous);
    None: the whole accumulator."""
    if n_ci_tiles != 1 or n_chunks < 2:
        return None
    return n_chunks, ceil_div(n_chunks, 2)


def _xs_stores(g: ConvGeom, p: Plan, chunks: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(taps, count) of the store DMAs of one C_in tile (mirrors DwState._finish_xs)."""
    out: dict[int, int] = {}
    for _i, _t0, nb, tn, _single in xs_store_runs(chunks):
        if nb > 1 and tn < g.kernel[2] and p.dw_xt_merge:   # one store per pair (``_store_pairs_apart``)
            out[tn] = out.get(tn, 0) + nb
            continue
        out[nb * tn] = out.get(nb * tn, 0) + 1
    return sorted(out.items())


def xs_store_runs(chunks: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int, bool]]:
    """(first chunk index, first tap, blocks, taps per block, single) of the x-stationary store DMAs:
    single-tap chunks of consecutive taps store together (``single``: [ci, taps, C_out], taps in
    ``taps per block``); any other chunk, [(block, tap, ci), C_out], alone."""
    runs: list[tuple[int, int, int, int, bool]] = []
    for i, (t, nb, tn) in enumerate(chunks):
        one = nb == 1 and tn == 1
        if one and runs and runs[-1][4] and runs[-1][1] + runs[-1][3] == t:
            i0, t0, _nb, k, _ = runs[-1]
            runs[-1] = (i0, t0, 1, k + 1, True)
        else:
            runs.append((i, t, nb, tn, one))
    return runs


def _shared_region_fills(g: ConvGeom, p: Plan, items: list, fills: list) -> dict[int, bool]:
    """Item index -> whether it pays the memsets and placement, for the region packs whose loads
    share them (mirrors DyBands.load_regions / nki_common.packed_fill_shared); others are absent."""
    out: dict[int, bool] = {}
    if p.dx_regions <= 1 or g.c_out * p.dx_regions != PMAX:
        return out
    index = {id(item): i for i, item in enumerate(items)}
    for pack in dx_packs(g, items, p.dx_regions):
        idx = [index[id(item)] for item in pack]
        fs = [fills[i] for i in idx]
        if len(pack) != p.dx_regions or any(f is None for f in fs):
            continue
        lo0, hi0 = fs[0][0], fs[0][1]
        if all(f[0] == lo0 and f[1] == hi0 for f in fs) and all(h > l_ for l_, h in zip(lo0, hi0)):
            out.update({i: k == 0 for k, i in enumerate(idx)})
    return out


def _first_band_staged(g: ConvGeom, p: Plan) -> bool:
    """Whether program 0's first dx band is loaded through a staging tile (placed by a compute engine)."""
    items = dx_program_items(g, p, 0)
    if not items:
        return False
    _b, bd, bh = items[0]
    bands3 = (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0])
    ext = [b_.extent for b_ in bands3]
    if min(ext) <= 0:
        return False
    valid = [(max(b_.q0, 0), min(b_.q1, g.out_size[a])) for a, b_ in enumerate(bands3)]
    lo = [max(v0 - b_.q0, 0) for (v0, _v), b_ in zip(valid, bands3)]
    hi = [max(lo[a], valid[a][1] - bands3[a].q0) for a in range(3)]
    return not any(h_ <= l_ for l_, h_ in zip(lo, hi)) and needs_stage(lo, hi, ext)


def _first_band_placement(g: ConvGeom, hw: TargetFigures, fills: list) -> tuple[float, float] | None:
    """The staged placement of the first dx band (one C_out tile): ns on VectorE (2x/4x copy modes) and on
    GpSimd; None when the band is not staged."""
    f = fills[0] if fills else None
    if f is None:
        return None
    lo, hi, ext, _valid = f
    if any(h_ <= l_ for l_, h_ in zip(lo, hi)) or not needs_stage(lo, hi, ext):
        return None
    elems = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    vec, gps = CostSheet(hw), CostSheet(hw)
    vec.compute("vector", elems, 1, vec.copy_speedup("vector", g.dtype_bytes == 2, False, True), 1, op="tensor_copy")
    gps.compute("gpsimd", elems, 1, 1.0, 1, op="tensor_copy")
    return vec.busy["vector"], gps.busy["gpsimd"]


def _cost_fill(c: CostSheet, g: ConvGeom, count: int, parts: int, lo: list[int], hi: list[int], ext: list[int],
               valid: list[tuple[int, int]], x_side: bool = False, fill_work: bool = True,
               held: bool = False) -> None:
    """``count`` loads of a zero-padded buffer (mirrors nki_common.load_padded); without
    ``fill_work`` only the DMA (a region whose pack shares the memsets and placement); ``held``: the rows
    are in SBUF already (``dx_bands_held``): the memsets and one placement copy, no DMA (``place_padded``)."""
    ds = g.dtype_bytes
    for n_slab in border_slabs(lo, hi, ext) if fill_work else ():
        c.compute("gpsimd", n_slab, 0, 1.0, count, op="memset")
    if any(h_ <= l_ for l_, h_ in zip(lo, hi)):
        return
    n = [hi[a] - lo[a] for a in range(3)]
    if held:
        c.compute("vector", n[0] * n[1] * n[2], 1, c.copy_speedup("vector", ds == 2, False, True), count,
                  op="tensor_copy")
        return
    full = [g.axes[a].n if x_side else g.axes[a].o for a in range(3)]
    # HBM side: the innermost run of full rows/planes
    run = n[2]
    if n[2] == full[2]:
        run *= n[1]
        if n[1] == full[1]:
            run *= n[0]
    elems = n[0] * n[1] * n[2]
    staged = needs_stage(lo, hi, ext)
    sbuf_run = elems if staged or not needs_stage(lo, hi, ext) else n[2]
    c.dma(parts * elems * ds, min(run, sbuf_run) * ds, count)
    if staged and fill_work:
        c.compute("vector", elems, 1, c.copy_speedup("vector", ds == 2, False, True), count, op="tensor_copy")


def _estimate_rows(c: CostSheet, g: ConvGeom, p: Plan, box: tuple[tuple[int, int], tuple[int, int]],
                   ci_tiles: list[int], chunk: int, n_chunks: int, xpad: bool, bank: int,
                   span: tuple[int, int], roles: tuple[str, ...] = (),
                   wcols: tuple[int, int] | None = None, ones: tuple[int, int, int] | None = None) -> None:
    """The row-mode dw of one output box (mirrors DwState._add_rows); ``roles`` (``dw_row_stack``): a
    "lower" chunk's matmuls, folds and x^T latency are charged with its partner's (the "upper" one);
    ``wcols``: the W output columns [lo, hi) run (LNC2 columns split), default all; ``ones``: the db_ones
    chunk (C_in tile 0: one more pair's rows on M, folded alone)."""
    (d_base, d_end), (h_base, h_end) = box
    rows = (d_end - d_base, h_end - h_base)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    w_lo, w_hi = wcols or (0, g.axes[2].o)
    Wo = w_hi - w_lo   # matmul steps, dy^T columns
    xwin = xt_window(g, w_lo, w_hi) if Wo < g.axes[2].o else None   # the x^T columns filled
    kw_n = g.kernel[2]
    xw = dw_x_extent(g.axes[2], g.axes[2].o)
    gk = p.dw_tap_group
    kgroups = [min(gk, kw_n - k) for k in range(0, kw_n, gk)]
    for ck, (st, (cd, ch, _one)) in enumerate(box_blocks((0, 0, 0), (rows[0], rows[1], 1), PMAX)):
        nrows = cd * ch
        lower = bool(roles) and roles[ck] == 'lower'
        if p.dw_dyt_dma:   # dy^T by dma_transpose from HBM, per C_out tile and run of rows
            runs = len(dyt_runs(g.axes[1].o, d_base + st[0], h_base + st[1], cd, ch))
            c.busy["dma"] += nrows * Wo * g.c_out * ds / (c.hw.dma_bytes_per_ns * DMA_TRANSPOSE_EFFICIENCY)
            c.counts["dma_transpose"] = c.counts.get("dma_transpose", 0) + runs * n_co
        else:   # PE transposes and their evictions
            c.transpose(co_t, nrows, fp32, Wo * n_co)
            if g.c_out <= bank:
                per_bank = bank // g.c_out
                for w0 in range(0, Wo, per_bank):
                    c.evict(min(per_bank, Wo - w0) * g.c_out, two, 1)
            else:
                c.evict(co_t, two, Wo * n_co)
        x0, xext, xlo, xhi = dw_x_fill(g, (d_base + st[0], d_base + st[0] + cd), (h_base + st[1], h_base + st[1] + ch))
        for i_ci, ci in enumerate(ci_tiles):
            pairs = (span[1] - span[0]) // kw_n   # whole (kd, kh) pairs per pass
            one = ones if i_ci == 0 else None

            def m_of(t, nb, tn, one=one, ci=ci):   # M of a chunk (the ones chunk: one more pair's rows)
                return (nb + (1 if one is not None and t == one[0] else 0)) * tn * ci

            if p.dw_xt_dma and p.dw_x_stationary:   # one ring tile per bundle: its DMAs, its matmuls' PE time
                for q, n in dw_xs_bundles(g, p, span):
                    bundle_pe = sum(max(min(64, m_of(t, nb, tn)), g.c_out) for t, nb, tn in
                                    dw_xs_row_chunks(g, p, q, n)) * Wo * (4 if fp32 else 1)
                    xt_dma_cost(c, g, p.dw_ci_tile, ci, (d_base + st[0], h_base + st[1], cd, ch),
                                (q * kw_n, (q + n) * kw_n), bundle_pe / c.hw.tensor_ghz, one_tile=True,
                                latency=not lower, window=xwin, bufs=xt_dma_bufs(p), merge=p.dw_xt_merge)
            elif p.dw_xt_dma:   # the PE work of one tile: its matmuls (every kw group and C_out tile)
                tile_pe = sum(max(min(64, co_t), kn * ci) for kn in kgroups) * n_co * Wo * (4 if fp32 else 1)
                xt_dma_cost(c, g, p.dw_ci_tile, ci, (d_base + st[0], h_base + st[1], cd, ch), span,
                            tile_pe / c.hw.tensor_ghz)
            else:
                _cost_fill(c, g, 1, ci, xlo, xhi, xext, [(x0[a] + xlo[a], x0[a] + xhi[a]) for a in range(3)],
                           x_side=True)
                cols = max(1, bank // ci)
                c.transpose(ci, nrows, fp32, pairs * xw)
                for c0 in range(0, xw, cols):
                    c.evict(min(cols, xw - c0) * ci, two, pairs)
            if p.dw_x_stationary:   # per bundle: stationary chunks (pairs x kw taps x ci), moving dy^T [rows, C_out]
                if lower:
                    continue
                fine = dw_tap_fine_on(g, p)   # the span may cut a pair: the bundles of the span, its taps
                for q, n in dw_xs_bundles(g, p, span if fine else (0, pairs * kw_n)):
                    bundle = [ch for ch in dw_xs_row_chunks(g, p, q, n) if not fine or span[0] <= ch[0] < span[1]]
                    for t, nb, tn in bundle:
                        c.matmul(m_of(t, nb, tn), g.c_out, fp32, Wo)
                    for batch in _xs_row_batches(g, bundle):
                        alone = next((u for u, ch in enumerate(batch) if one is not None and ch[0] == one[0]), None)
                        for _b, _u0, k, _tn in dw_xs_fold_runs(batch, dw_xs_per_bank(g), alone):
                            _fold_cost(c, g, p, k * g.c_out, 1)
                continue
            for kn in kgroups:
                c.matmul(co_t, kn * ci, fp32, pairs * n_co * Wo)
                _fold_cost(c, g, p, kn * ci, pairs * n_co)


def _xs_row_batches(g: ConvGeom, row: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """The chunks of one x^T bundle in batches whose accumulators fit ``XS_MAX_BANKS`` banks."""
    per = dw_xs_per_bank(g) * XS_MAX_BANKS
    return [row[i:i + per] for i in range(0, len(row), per)]


# ------------------------------------------------------------------------------- enumeration


def _band_options(n: int) -> list[int]:
    out = []
    b = n
    while b >= 1:
        if b not in out:
            out.append(b)
        if b == 1:
            break
        b = ceil_div(b, 2)
    return out


def _label(p: Plan) -> str:
    parts = [p.strategy.value]
    if p.dx_method:
        parts.append(f"dx:{p.dx_method.value}[band {p.dx_band[0]}x{p.dx_band[1]}, ci {p.dx_ci_tile}"
                     + (", ci-outer" if p.dx_ci_outer else "")
                     + (f", {p.dx_regions} regions" if p.dx_regions > 1 else "")
                     + (f", dx^T pairs x{p.dx_pair_copies}" if p.dx_transposed else "")
                     + (", D-phase pairs" if p.dx_dphase_pairs else "")
                     + (", band prefetch" if p.dx_prefetch else "")
                     + (f", U {p.dx_toeplitz[0]}x{p.dx_toeplitz[1]}" if p.dx_method is DxMethod.TOEPLITZ else "")
                     + (f", {''.join(a for a, m in zip('dh', p.dx_toeplitz_merge) if m)} phases on M"
                        if p.dx_method is DxMethod.TOEPLITZ and any(p.dx_toeplitz_merge) else "")
                     + (f", W {p.dx_toeplitz_w} on M" if p.dx_method is DxMethod.TOEPLITZ and p.dx_toeplitz_w else "")
                     + (f", K pairs {'dhw'[p.dx_toeplitz_pair]}" if p.dx_method is DxMethod.TOEPLITZ
                        and p.dx_toeplitz_pair >= 0 else "")
                     + (", ci split" if p.dx_ci_split else "")
                     + (", early band" if p.dx_band_early else "")
                     + (", filters first" if p.filters_first else "") + "]")
    if p.dw_interleave:
        parts.append("dw-interleaved")
    if p.dx_inside_dw:
        parts.append("dx inside dw boxes" if p.dx_inside_boxes else "dx inside dw")
    if p.dx_between_bundles:
        parts.append("dx between bundles")
    if p.dw_method:
        band = "" if p.strategy is Strategy.SHARED_DY else f"band {p.dw_band[0]}x{p.dw_band[1]}, "
        band += f"{p.dw_split} split, " if (p.lnc == 2 and p.dw_split != "positions") else ""
        rng = f", ci-range {p.dw_ci_range}" if p.dw_ci_range < p.x_shape[1] else ""
        rng += f", taps/pass {p.dw_tap_range}" if p.dw_tap_range else ""
        xs = "x-stationary, " if p.dw_x_stationary else ""
        band += "fine taps, " if p.dw_tap_fine else ""
        rng += ", xT dma" if p.dw_xt_dma else ""
        rng += ", dyT dma" if p.dw_dyt_dma else ""
        rng += ", head split" if p.dw_head_split else ""
        rng += ", rows stacked" if p.dw_row_stack else ""
        rng += ", xT merged" if p.dw_xt_merge else ""
        rng += f", dy^T 1/{p.pw_dyt_dma} dma" + (" late" if p.pw_dyt_late else "") if p.pw_dyt_dma else ""
        parts.append(f"dw:{p.dw_method.value}[{xs}{band}G{p.dw_tap_group}, ci {p.dw_ci_tile}{rng}]")
    if p.db_method:
        parts.append(f"db:{p.db_method.value}" + ("[ScalarE]" if p.pw_db_scalar else "")
                     + ("[ones row]" if p.db_ones else ""))
    parts.append(f"dy x{p.dy_bufs}")
    return " ".join(parts)


def _check(g: ConvGeom, p: Plan, hw: TargetFigures) -> tuple[str, _Budget]:
    """'' when the plan fits the target, else the first limit it breaks."""
    b = _budget(g, p)
    if p.dw_method is not None and p.dw_tap_group * p.dw_ci_tile > MOVING_MAX:
        return (f"dw moving free {p.dw_tap_group}x{p.dw_ci_tile} = {p.dw_tap_group * p.dw_ci_tile} "
                f"exceeds {MOVING_MAX}"), b
    if p.dw_xt_dma and not xt_dma_legal(g, p):
        return (f"dw_xt_dma needs dw:row_pack, a 2-byte dtype and trn2/trn3 (dma_transpose), got "
                f"{p.dw_method.value if p.dw_method else None}, {g.dtype}, {p.target}"), b
    if p.dx_dphase_pairs and (why := dpairs_illegal(g, p)):
        return f"dx_dphase_pairs: {why}", b
    if p.dw_row_stack and not row_stack_legal(p):
        return "dw_row_stack needs dw:row_pack with dw_x_stationary and dw_xt_dma", b
    if p.dw_head_split and not dw_head_split_legal(g, p):
        return ("dw_head_split needs x-stationary row-mode dw with xT dma and dyT dma, one pair per bundle, "
                "no ones slot, no row stacking, C_in columns above the tiny-C_in memset"), b
    if p.dw_dyt_dma and not dyt_dma_legal(g, p):
        return ("dw_dyt_dma needs per-gradient dw:row_pack (or box mode with W_out <= 128), a 2-byte dtype "
                "and trn2/trn3 (dma_transpose)"), b
    if p.db_ones and not db_ones_legal(g, p):
        return "db_ones needs db:fold with row-mode x-stationary dw and a stationary chunk with room on M", b
    if b.sbuf > hw.sbuf_usable:
        big = max(b.parts, key=lambda kv: kv[1]) if b.parts else ("?", 0)
        return (f"SBUF {b.sbuf} B per partition exceeds {hw.sbuf_usable} B usable "
                f"(largest: {big[0]} {big[1]} B)"), b
    if b.psum > hw.psum_banks:
        return f"PSUM {b.psum} banks exceed {hw.psum_banks}", b
    return "", b


def _dx_method(g: ConvGeom) -> DxMethod:
    """The gather family's name for the geometry (dx:toeplitz variants are added beside it)."""
    if g.pointwise:
        return DxMethod.GEMM
    if all(a.s == 1 for a in g.axes):
        return DxMethod.GATHER_S1
    return DxMethod.PHASE_GATHER


gather_dx_method = _dx_method


def _base(g: ConvGeom, dy_shape, x_shape, w_shape, stride, padding, dilation, target, lnc,
          cdx, cdw, cdb) -> dict:
    return {"dy_shape": tuple(dy_shape), "x_shape": tuple(x_shape), "w_shape": tuple(w_shape),
                "stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation), "dtype": g.dtype,
                "target": target, "lnc": lnc, "compute_dx": cdx, "compute_dw": cdw, "compute_db": cdb}


def _first_fits(make, options, hw: TargetFigures, g: ConvGeom, keep: int = 2) -> list:
    """The first ``keep`` options whose plan (built by ``make``) fits; else the last one tried."""
    out, tried = [], None
    for opt in options:
        tried = opt
        if not _check(g, make(opt), hw)[0]:
            out.append(opt)
            if len(out) >= keep:
                break
    return out or ([tried] if tried is not None else [])


def _enumerate(g: ConvGeom, base: dict, hw: TargetFigures) -> list[Plan]:
    """Candidate plans: strategy x dw method x db method x (dx tiling, dw tiling) that fit first."""
    cdx, cdw, cdb = base["compute_dx"], base["compute_dw"], base["compute_db"]
    n_co = n_tiles(g.c_out, PMAX)
    dw_ci = min(PMAX, g.c_in)
    gmax = max(1, min(g.taps, MOVING_MAX // dw_ci))
    if g.pointwise or g.taps == 1:
        dw_opts = [(DwMethod.GEMM if g.pointwise else DwMethod.TAP_GEMM, 1)]
    else:
        dw_opts = [(DwMethod.TAP_GEMM, 1)] + ([(DwMethod.TAP_PACK, gmax)] if gmax > 1 else [])
    dw_opts.append((DwMethod.ROW_PACK, max(1, min(g.axes[2].k, MOVING_MAX // dw_ci))))
    if g.pointwise and g.dtype_bytes == 2 and hw.name != "trn1":   # dma_transpose: 2-byte, NC-v3+
        dw_opts.append((DwMethod.DMA_GEMM, 1))
    elif not pw.shared_gemm_domain(g) and g.dtype_bytes == 2 and hw.name != "trn1" and cdx:
        dw_opts.append((DwMethod.DMA_GEMM, 1))   # K_d x 1 x 1: the shared-dy GEMM kernel only
    dw_opts = [(m, G_, False) for m, G_ in dw_opts]
    if not g.pointwise and dw_xs_fits(g):   # x^T stationary: box mode (tap groups) and row mode
        slots = max(1, PMAX // dw_ci)
        gx = max(1, min(g.taps, MOVING_MAX // dw_ci, slots * dw_xs_per_bank(g) * XS_MAX_BANKS))
        dw_opts += [(DwMethod.TAP_PACK if gx > 1 else DwMethod.TAP_GEMM, gx, True),
                    (DwMethod.ROW_PACK, max(1, min(g.axes[2].k, slots)), True)]
    if not cdw:
        dw_opts = [(None, 1, False)]
    dbs: list[DbMethod | None] = [None]
    if cdb:
        dbs = [DbMethod.FOLD, DbMethod.STANDALONE] if (cdx or cdw) else [DbMethod.STANDALONE]
    strategies = [Strategy.SHARED_DY, Strategy.PER_GRADIENT] if (cdx and cdw) else [Strategy.PER_GRADIENT]
    full = (g.axes[0].n, g.axes[1].n)
    dx_bands = [(d, g.axes[1].n) for d in _band_options(g.axes[0].n)] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:]]
    dw_bands = [(d, g.axes[1].o) for d in _band_options(g.axes[0].o)] + \
        [(1, h) for h in _band_options(g.axes[1].o)[1:]]
    ci_opts = [(dw_ci, False), (dw_ci, True)] + [(t, True) for t in (64, 32, 16, 8, 4, 2, 1) if t < dw_ci]
    ranges = [g.c_in] + [r for r in (512, 256, 128) if r < g.c_in] + ([dw_ci] if dw_ci < min(128, g.c_in) else [])
    ranges = [r for r in ranges if r % dw_ci == 0 or r == g.c_in]

    def plan(strat, dw_m, G, db, dxb, ci_tile, ci_outer, dwb, rng, cdx_=cdx, cdw_=cdw, taps=0) -> Plan:
        b = dict(base, compute_dx=cdx_, compute_dw=cdw_)
        return Plan(**b, strategy=strat, dx_method=_dx_method(g) if cdx_ else None,
                    dw_method=dw_m if cdw_ else None, db_method=db, dx_band=dxb, dw_band=dwb,
                    dx_ci_tile=ci_tile, dx_ci_outer=ci_outer, dw_ci_tile=dw_ci, dw_tap_group=G,
                    dw_co_chunk=min(n_co, 2 if strat is Strategy.SHARED_DY else 3), dw_ci_range=rng,
                    dy_bufs=2, dw_tap_range=taps, dw_x_stationary=xs and cdw_)   # xs: the loop's dw option

    plans: list[Plan] = []
    for dw_m, G, xs in dw_opts:
        # dx tilings that fit alone (the per-gradient dx section)
        dx_cfgs = [(full, dw_ci, False)]
        if cdx:
            dx_cfgs = []
            fitting = 0
            for ci_tile, ci_outer in ci_opts:
                fits = _first_fits(lambda band, t=ci_tile, o=ci_outer, m=dw_m, gg=G: plan(
                    Strategy.PER_GRADIENT, m, gg, None, band, t, o, full, g.c_in, cdw_=False),
                    dx_bands, hw, g)
                dx_cfgs += [(band, ci_tile, ci_outer) for band in fits]
                if not _check(g, plan(Strategy.PER_GRADIENT, dw_m, G, None, fits[0], ci_tile, ci_outer, full,
                                      g.c_in, cdw_=False), hw)[0]:
                    fitting += 1
                    # keep the C_in-outer variant too when it exists: smaller filter residency lets
                    # the filters load before dw
                    if fitting >= 2 or len(ci_opts) < 2 or g.c_in <= dw_ci:
                        break
        dw_cfgs = [((g.axes[0].o, g.axes[1].o), g.c_in, 0)]
        if cdw and dw_m is not DwMethod.DMA_GEMM:
            dw_cfgs = _dw_tilings(g, hw, dw_bands, ranges, lambda band, r, taps, m=dw_m, gg=G: plan(
                Strategy.PER_GRADIENT, m, gg, None, full, dw_ci, False, band, r, cdx_=False, taps=taps))
        for strat in strategies:
            if dw_m is DwMethod.DMA_GEMM and not g.pointwise and strat is not Strategy.SHARED_DY:
                continue   # (nki_dw_gemm is 1x1x1 only)
            for db in dbs:
                if strat is Strategy.SHARED_DY:
                    # the shared-dy GEMM kernel with a D kernel: one chunk per batch (the taps cross D planes)
                    # (LNC2: also half of each batch's D planes per item, so a program takes half a batch)
                    bands = ([full] + ([(ceil_div(g.axes[0].n, 2), g.axes[1].n)] if base["lnc"] == 2 and g.axes[0].n > 1
                                       else []) if dw_m is DwMethod.DMA_GEMM and not g.pointwise else dx_bands)
                    shared = _first_fits(lambda band, st=strat, m=dw_m, gg=G, d=db: plan(st, m, gg, d, band, dw_ci, False,
                                                           (g.axes[0].o, g.axes[1].o), g.c_in),
                                         bands, hw, g)
                    for band in shared:
                        p = plan(strat, dw_m, G, db, band, dw_ci, False, (g.axes[0].o, g.axes[1].o), g.c_in)
                        if db is not DbMethod.FOLD or _fold_ok(g, p):
                            # shared-dy pointwise (nki_pw_shared) has no dx variants
                            plans += _pw_variants(p) if pw_shared_on(p) else _with_regions(g, p, hw)
                    continue
                for dxb, ci_tile, ci_outer in dx_cfgs:
                    for dwb, rng, taps in dw_cfgs:
                        p = plan(strat, dw_m, G, db, dxb, ci_tile, ci_outer, dwb, rng, taps=taps)
                        if db is not DbMethod.FOLD or _fold_ok(g, p):
                            plans += _with_regions(g, p, hw)
    return plans


# (N, late): one dy^T sub-tile in N by DMA, everywhere or (late) only from the program's middle step on
_PW_DYT_DMA = ((2, False), (4, False), (1, True), (2, True), (4, True))


def _pw_variants(p: Plan) -> list[Plan]:
    """Shared-dy pointwise: db folded on the PE (ones-vector matmuls on dy^T) or by ScalarE activation reduces
    of the natural dy tiles (the PE is the bottleneck there; the dy^T evictions move to VectorE)."""
    out = [p]
    if db_on_dw(p):
        out.append(replace(p, pw_db_scalar=True))
    return out + [replace(q, pw_dyt_dma=k, pw_dyt_late=late) for q in out for k, late in _PW_DYT_DMA]


def _dw_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ranges: list[int], make) -> list:
    """(band, C_in range, taps per pass) of per-gradient dw: the C_in ranges largest first, the first
    that fits kept; only when none fits with every tap in one pass (the fp32 accumulators of a big
    filter, taps x C_out x 4 B per partition), tap passes: for each C_in range the fewest passes
    that fit (dy and x are streamed once per pass), from the two largest ranges that have one."""
    out = []
    for rng in ranges:
        fits = _first_fits(lambda band, r=rng: make(band, r, 0), bands, hw, g)
        out += [(band, rng, 0) for band in fits]
        if not _check(g, make(fits[0], rng, 0), hw)[0]:
            return out
    unit = dw_tap_unit(g, make(bands[0], ranges[0], 0))
    units = ceil_div(g.taps, unit)
    tap_opts = sorted({ceil_div(units, n) * unit for n in range(2, units + 1)} - {g.taps}, reverse=True)
    found = []
    for rng in ranges:
        for taps in tap_opts:
            fits = [b for b in _first_fits(lambda band, r=rng, t=taps: make(band, r, t), bands, hw, g)
                    if not _check(g, make(b, rng, taps), hw)[0]]
            if fits:
                found += [(band, rng, taps) for band in fits]
                break
        if len({r for _b, r, _t in found}) >= 2:
            break
    return found or out


def _toeplitz_variants(g: ConvGeom, p: Plan, hw: TargetFigures | None) -> list[Plan]:
    """dx:toeplitz variants of ``p`` (tiny C_in), with the plan's dx band and with the largest band
    that fits (its (u, ci) planes are far smaller than the gather's), each with its best (U_d, U_h)."""
    if toeplitz.toeplitz_domain(g):
        return []
    bands = [(d, g.axes[1].n) for d in _band_options(g.axes[0].n)] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:]]
    bands = bands[:bands.index(p.dx_band)] if p.dx_band in bands else []
    def variant(b: tuple[int, int], u: tuple[int, int], m: tuple[bool, bool]) -> Plan:
        return replace(p, dx_method=DxMethod.TOEPLITZ, dx_band=b, dx_toeplitz=u, dx_toeplitz_merge=m,
                       dx_toeplitz_pair=toeplitz.pair_axis(g, u, m))
    larger = [b for b in bands if hw is not None and toeplitz.toeplitz_options(g, b)
              and not _check(g, variant(b, *toeplitz.toeplitz_options(g, b)[0]), hw)[0]]
    out = [variant(b, u, m) for b in larger[:1] + [p.dx_band] for u, m in toeplitz.toeplitz_options(g, b)]
    # W positions on M too (PSUM quadrants), with the same bands
    for b in larger[:1] + [p.dx_band]:
        for u, m, uw in toeplitz.toeplitz_w_options(g, b):
            q = replace(p, dx_method=DxMethod.TOEPLITZ, dx_band=b, dx_toeplitz=u, dx_toeplitz_merge=m, dx_toeplitz_w=uw,
                        dx_toeplitz_pair=toeplitz.pair_axis_w(g, u, m, uw))
            if hw is None or not _check(g, q, hw)[0]:
                out.append(q)
    return out


def _with_regions(g: ConvGeom, p: Plan, hw: TargetFigures | None = None) -> list[Plan]:
    """The plan, plus its dx region-packed variants when the channels leave the array half empty;
    per gradient, dx's first filters load before dw when SBUF allows it."""
    out = [p]
    if p.compute_dx and not p.dx_ci_outer:
        out += [replace(p, dx_regions=r) for r in (2, 4) if region_fits(g.c_in, g.c_out, r)]
        out += _toeplitz_variants(g, p, hw)
        out += _lnc2_packed_bands(g, p)
    if hw is not None:
        out += _dx_t_variants(g, p, hw)
    if p.compute_dx and not dpairs_illegal(g, q_ := replace(p, dx_dphase_pairs=True, dx_ci_tile=g.c_in)):
        out.append(q_)
    if xt_dma_legal(g, p):   # row-mode x^T by DMA transpose (with either dw orientation): both variants stay
        out += [replace(q, dw_xt_dma=True) for q in out]
        out += _xt_dma_full_rows(g, out, hw)
        # and dy^T by DMA too (per gradient): no dy box, no dy^T PE transposes or evictions
        out += [q2 for q in out if q.dw_xt_dma and dyt_dma_legal(g, q)
                and (hw is None or not _check(g, q2 := replace(q, dw_dyt_dma=True), hw)[0])]
        # and the first row pass's dy^T and x^T by column pieces (kernels/dw_head.py)
        out += [q2 for q in out if dw_head_split_legal(g, q2 := replace(q, dw_head_split=True))]
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT and dyt_box_dma_legal(g, p):
        # box-mode dw's dy^T by DMA too (session 6)
        out += [q2 for q in out if dyt_dma_legal(g, q2 := replace(q, dw_dyt_dma=True))
                and (hw is None or not _check(g, q2, hw)[0])]
    if hw is not None and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT:
        out = [q2 if not _check(g, q2 := replace(q, filters_first=True), hw)[0] else q for q in out]
        # dx^T's first band loads during dw's last row chunk when its pools fit beside dw's
        out = [q2 if dx_prefetched(q2 := replace(q, dx_prefetch=True)) and not _check(g, q2, hw)[0] else q
               for q in out]
        # dx^T run inside dw's last row pass
        out += [q2 for q in out if dx_inside_dw_legal(g, q2 := replace(q, dx_inside_dw=True))
                and not _check(g, q2, hw)[0]]
        # or dx items inside dw's boxes, each box's whole x^T pass issued first (its own dx band, and the
        # biggest smaller one whose items reach every box)
        out += [q2 for q in out if not q.dx_inside_dw for q2 in _inside_boxes_variants(g, q)
                if not _check(g, q2, hw)[0]]
        # dx:toeplitz with dw's boxes between its items (the fast dw variants: x-stationary, xT dma)
        out += [q2 for q in out if dw_interleave_ok(g, q) and q.dw_x_stationary and q.dw_xt_dma
                and not _check(g, q2 := replace(q, dw_interleave=True), hw)[0]]
    if p.lnc == 2 and p.compute_dw and p.strategy is Strategy.PER_GRADIENT and g.taps >= 2 \
            and p.dw_method is not DwMethod.DMA_GEMM:
        split = [replace(q, dw_split="taps") for q in out]
        # a program's own taps may fit in one pass where the whole filter needed tap passes
        out += [q1 if q.dw_tap_range and hw is not None and not _check(g, q1 := replace(q, dw_tap_range=0), hw)[0]
                else q for q in split]
    if p.lnc == 2:   # dw split by W columns: every row chunk on both programs (they stack), half the columns
        out += [q2 for q in out if q.dw_split == "positions"
                and dw_columns_legal(g, q2 := replace(q, dw_split="columns"))]
    if p.lnc == 2 and p.dw_method is DwMethod.DMA_GEMM:   # C_in tiles per program, or positions
        out += [replace(q, dw_split="channels") for q in out]
    if p.lnc == 2:   # single-tap dw split where whole units split unevenly; dx split by C_in groups
        out += [replace(q, dw_tap_fine=True) for q in out if dw_tap_fine_helps(g, q)]
        out += [replace(q, dx_ci_split=True) for q in out if dx_ci_split_legal(g, q)]
        # like filters first, it replaces its twin where it is legal and fits (it only moves work off
        # the critical path); with filters first, only where the first band is staged (else no gain)
        out = [q2 if (dx_band_early_legal(g, q) and (not q.filters_first or _first_band_staged(g, q))
                      and hw is not None and not _check(g, q2 := replace(q, dx_band_early=True), hw)[0]) else q
               for q in out]
    # row stacking where a program's row chunks pair up (LNC2: a taps split keeps every batch on both)
    # (not with dyT dma: vae3d LNC2's stacked 2x32 twin modelled 65.9 us against 58.6 for the unstacked
    # 4x32 one at the same estimate, the stacked chunks' dy^T transposes it saves being off the critical path)
    out += [replace(q, dw_row_stack=True) for q in out
            if row_stack_legal(q) and _row_stack_useful(g, q) and not q.dw_dyt_dma]
    # db inside dw's x-stationary matmuls where a stationary chunk has room for the ones slot
    if hw is not None:
        out += [q2 for q in out if db_ones_legal(g, q) and not _check(g, q2 := replace(q, db_ones=True), hw)[0]]
    # x^T bundles cut by kd and H-padding class: one 4-D transpose per run of rows of a bundle
    if hw is not None:
        out += [q2 for q in out if xt_merge_legal(g, q2 := replace(q, dw_xt_merge=True)) and not _check(g, q2, hw)[0]]
    # D-phase-pairs dx between dw's x^T bundles
    if hw is not None:
        out += [q2 for q in out if dx_between_legal(g, q2 := replace(q, dx_between_bundles=True))
                and not _check(g, q2, hw)[0]]
    # the columns split exists to keep 64-row chunks stacked on K = 128: only its stacked plans stay
    # (dilated_d2, 128-row chunks: it only duplicates dy and the x^T halo, 50.2 vs 48.5 us for the taps split)
    return [q for q in out if (q.dw_split != "columns" or q.dw_row_stack)
            and (not q.dx_inside_dw or dx_inside_dw_legal(g, q))]


def _xt_dma_full_rows(g: ConvGeom, plans: list[Plan], hw: TargetFigures | None) -> list[Plan]:
    """Per gradient, row-mode dw with x^T by DMA holds no x band, so a dw band that had to stay small
    for the x band (the stem's 7x7 halo: 2x32 rows, K = 64 on the PE) can grow: the variant of each
    such ``xT dma`` plan with the largest dw band of at most 128 (d, h) rows that fits (whole H rows)."""
    if hw is None:
        return []
    ho = g.axes[1].o
    rows = [(d, ho) for d in _band_options(g.axes[0].o) if d * ho <= PMAX]
    out = []
    for q in plans:
        if not (q.dw_xt_dma and q.compute_dw and q.strategy is Strategy.PER_GRADIENT and q.dw_tap_range == 0
                and q.dw_band[1] == ho and q.dw_band[0] * ho < PMAX):
            continue
        for band in rows:
            if band[0] <= q.dw_band[0]:
                break
            q2 = replace(q, dw_band=band)
            if not _check(g, q2, hw)[0]:
                out.append(q2)
                break
    return out


def _lnc2_packed_bands(g: ConvGeom, p: Plan) -> list[Plan]:
    """LNC2 region packing: each program packs only its own dx items, so a band split that gives a
    program fewer than R items leaves its dx unpacked (dilated_d2: two D bands, one per program,
    ran at LNC1's packed PE time). The region variant with the dx band halved (D first, then H)
    until program 0 holds R items; the estimate weighs the smaller bands' extra halo."""
    if p.lnc != 2:
        return []
    out = []
    for r in (2, 4):
        if not region_fits(g.c_in, g.c_out, r):
            continue
        band = p.dx_band
        while len(_split(dx_items(g, replace(p, dx_band=band)), p.lnc, 0)) < r:
            if band[0] > 1:
                band = (ceil_div(band[0], 2), band[1])
            elif band[1] > 1:
                band = (band[0], ceil_div(band[1], 2))
            else:
                break
        if band != p.dx_band and len(_split(dx_items(g, replace(p, dx_band=band)), p.lnc, 0)) >= r:
            out.append(replace(p, dx_band=band, dx_regions=r))
    return out


def _gemm_dma_chunks(g: ConvGeom, lnc: int) -> list[list[int]]:
    """C_in tiles per program of dw:dma_gemm (mirrors nki_dw_gemm.gemm_dma_chunks)."""
    n_ci = ceil_div(g.c_in, PMAX)
    per = ceil_div(n_ci, lnc)
    return [list(range(q * per, min(n_ci, (q + 1) * per))) for q in range(lnc)]


def _fold_ok(g: ConvGeom, p: Plan) -> bool:
    """db can fold on a dy load only when those loads cover every dy row."""
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT:
        return True
    if p.compute_dw or p.compute_dx:
        return axis_covered(g.axes[0], p.dx_band[0]) and axis_covered(g.axes[1], p.dx_band[1]) \
            and axis_covered(g.axes[2], g.axes[2].n)
    return False


def plan_conv3d_bwd(dy_shape, x_shape, w_shape, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                    dtype="bf16", target="trn2", lnc=1, compute_dx=True, compute_dw=True,
                    compute_db=True) -> Plan:
    """Enumerate, check, cost and pick (see the module docstring)."""
    g = validate(dy_shape, x_shape, w_shape, stride, padding, dilation, dtype,
                 compute_dx=compute_dx, compute_dw=compute_dw, compute_db=compute_db)
    if target not in TARGET_FIGURES:
        raise Conv3dBwdInputError(f"target={target!r}: must be one of {sorted(TARGET_FIGURES)}")
    if lnc not in (1, 2):
        raise Conv3dBwdInputError(f"lnc={lnc!r}: must be 1 or 2")
    if lnc == 2 and target == "trn1":
        raise Conv3dBwdInputError("lnc=2 with target='trn1': LNC2 needs trn2 or later")
    base = _base(g, dy_shape, x_shape, w_shape, stride, padding, dilation, target, lnc,
                 bool(compute_dx), bool(compute_dw), bool(compute_db))
    return _plan_cached(g, tuple(base.items()))


@lru_cache(maxsize=16)
def _plan_cached(g: ConvGeom, base_items: tuple) -> Plan:
    """The pick for a validated problem. Cached: the kernel (once per LNC program), the harness and the
    bench ask for the same problem's plan again and again, and planning costs and checks thousands of
    candidates (0.3-1.5 s). Plans are frozen, so sharing one is safe. A plan holds its alternatives
    (0.6-9 MiB for the bench shapes), hence the small bound: the repeats come back to back."""
    return _plan(g, dict(base_items))


def clear_plan_cache() -> None:
    """Forget every cached plan (for code that patches the planner's functions, e.g. tests)."""
    _plan_cached.cache_clear()


def _plan(g: ConvGeom, base: dict) -> Plan:
    """Enumerate, check, cost and pick."""
    target = base["target"]
    hw = TARGET_FIGURES[target]
    records: list[Candidate] = []
    if base["compute_dx"] and (why := toeplitz.toeplitz_domain(g)):   # the method's domain, named once
        records.append(Candidate("dx:toeplitz (any tiling)", False, why, None, 0, 0))
    feasible: list[Plan] = []
    seen = set()
    for p in _enumerate(g, base, hw):
        lab = _label(p)
        if lab in seen:
            continue
        seen.add(lab)
        reason, b = _check(g, p, hw)
        if reason:
            records.append(Candidate(lab, False, reason, None, b.sbuf, b.psum))
            continue
        est, eng = _estimate(g, p, hw)
        p = replace(p, sbuf_bytes=b.sbuf, psum_banks=b.psum, estimated_us=est,
                    engine_us=tuple(eng.items()), label=lab)
        records.append(Candidate(lab, True, "", est, b.sbuf, b.psum))
        feasible.append(p)
    if not feasible:
        why = "; ".join(f"{r.label}: {r.reason}" for r in records[:6])
        raise Conv3dBwdPlanError(f"no plan fits {target} for this geometry: {why}")
    feasible.sort(key=lambda q: (round(q.estimated_us, 6), q.label))
    records_t = tuple(records)
    alts = tuple(replace(q, candidates=records_t) for q in feasible)
    best = alts[0]
    return replace(best, candidates=records_t, alternatives=alts)


# ------------------------------------------------------------------------------- dx^T (nki_dx_t)


def dx_t_active(p: Plan) -> bool:
    """The plan runs dx^T: its flag, without the options dx^T does not combine with (region packing,
    C_in-outer filter groups: a plan edited to those runs the classic gather; dx:toeplitz, which a plan
    edited to it runs instead -- its ``dx inside dw`` / ``band prefetch`` flags then fall away too)."""
    return (p.dx_transposed and p.dx_regions == 1 and not p.dx_ci_outer
            and p.dx_method is not DxMethod.TOEPLITZ)


def filters_after_first_chunk(g: ConvGeom, p: Plan) -> bool:
    """Per gradient with ``filters_first``: dx's filters (by DMA alone: 2-byte, NC-v3+, no region packing,
    not dx:toeplitz's tap grids) are issued after dw's first row chunk's loads instead of before dw
    (the first dw matmuls wait for those loads, not for filters that dx needs much later)."""
    return (p.filters_first and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and filters_by_dma(g, p) and p.dx_regions == 1
            and p.dx_method is not DxMethod.TOEPLITZ)


def dx_prefetched(p: Plan) -> bool:
    """dx^T's first band is loaded during dw (the kernel runs ``plan.dx_prefetch`` only here)."""
    return (p.dx_prefetch and dx_t_active(p) and p.compute_dx and p.compute_dw
            and p.strategy is Strategy.PER_GRADIENT and p.dw_method is not DwMethod.DMA_GEMM)


def _dx_t_prefetch_sbuf(g: ConvGeom, p: Plan) -> int:
    """Bytes per partition of dx^T's band pools live during dw when prefetched: the dy band ring, the
    shifted copies' pools and the band staging ring (mirrors DxTPrefetch: DyBands + DxTBands)."""
    if not dx_prefetched(p):
        return 0
    ds = g.dtype_bytes
    ext = _dx_dy_extent(g, p.dx_band)
    ring = p.dy_bufs * n_tiles(g.c_out, PMAX) * ext[0] * ext[1] * ext[2] * ds
    copies = max(0, _dx_t_copies(g, p) - 1) * p.dy_bufs * ext[0] * ext[1] * ext[2] * ds
    return ring + copies + 2 * dx_stage_elems(g, p.dx_band) * ds


def _dx_t_copies(g: ConvGeom, p: Plan) -> int:
    """Shifted dy copies the kernel makes (copies that pair no tap are not made)."""
    return copies_made(g, p.dx_pair_copies)


def _dx_t_sbuf(g: ConvGeom, p: Plan, ext: tuple[int, int, int]) -> tuple[int, int]:
    """(dx planes, shifted dy copies + dx^T tiles) bytes per partition of dx^T (mirrors run_dx_t's pools)."""
    ds = g.dtype_bytes
    ci_t = ci_tile_t(g)
    slots = max(1, BANK_FP32 // ci_t)
    plane = 2 * n_tiles(ci_t, PMAX) * p.dx_band[0] * p.dx_band[1] * g.axes[2].n * ds
    copies = max(0, _dx_t_copies(g, p) - 1) * p.dy_bufs * ext[0] * ext[1] * ext[2] * ds
    stage = 2 * n_tiles(ci_t, PMAX) * phase_stage_elems(g, p.dx_band) * ds if any(a.s > 1 for a in g.axes) else 0
    return plane, copies + DXT_BUFS * slots * ci_t * ds + stage


def _dx_t_variants(g: ConvGeom, p: Plan, hw: TargetFigures) -> list[Plan]:
    """dx^T variants of ``p`` (all filters resident): tap pairs over 1..3 shifted copies when
    C_out <= 64, else (stride 1 only) positions on M alone (when C_in < 128 leaves the classic M
    short); each on the largest dx band that fits."""
    if not p.compute_dx or p.dx_ci_outer or p.dx_regions != 1 or _dx_method(g) is DxMethod.GEMM:
        return []
    if pairs_possible(g):
        opts = list(range(1, len(pair_axes(g)) + 1))
    elif (g.c_in < PMAX or g.c_out <= PMAX // 2) and _dx_method(g) is DxMethod.GATHER_S1:
        # (strided without pairs: the phase placements and short phase groups stall more than
        # M = 128 saves; down_s2 measured 79.6 us against 76.5 with the classic gather)
        opts = [0]
    else:
        return []
    bands = [p.dx_band] + [(d, g.axes[1].n) for d in _band_options(g.axes[0].n) if d < p.dx_band[0]] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:] if p.dx_band[0] > 1 or h < p.dx_band[1]]
    out = []
    for n in opts:
        q = replace(p, dx_transposed=True, dx_pair_copies=n, dx_ci_tile=min(PMAX, g.c_in))
        for band in bands:
            qb = replace(q, dx_band=band)
            if not _check(g, qb, hw)[0]:
                out.append(qb)
                break
        else:
            out.append(q)   # listed (and rejected with its reason)
    return out


def _estimate_dpairs(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, items: list) -> None:
    """D-phase pairs: the slot tiles (memset, one SBUF->SBUF DMA per tap) and every band's matmuls,
    evictions and two stores (mirrors nki_dx_dpairs.run_dx_dpairs)."""
    ds = g.dtype_bytes
    n_co = n_tiles(g.c_out, PMAX)
    slots = _dpair_slot_count(g, p)
    if g.c_in < dpairs.HALF:   # gap columns: the whole slot tiles
        c.compute("gpsimd", slots * PMAX, 0, 1.0, n_co, op="memset")
    else:   # the halves no tap fills
        c.compute("gpsimd", dpairs.HALF, 0, 1.0, n_co * (2 * slots - g.taps), op="memset")
    if not filters_by_dma(g, p):   # W^T (charged with the filters) copied into the slots; else DMA-transposed there
        c.dma(min(PMAX, g.c_out) * g.c_in * ds, g.c_in * ds, g.taps * n_co)
    for _b, bd, bh in items:
        c.add(_dpair_band_sheet(g, hw.name, bd, bh))


@lru_cache(maxsize=4096)
def _dpair_band_sheet(g: ConvGeom, target: str, bd: AxisBand, bh: AxisBand) -> CostSheet:
    """One band of the D-phase pairs (cached)."""
    c = CostSheet(TARGET_FIGURES[target])
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    n_co = n_tiles(g.c_out, PMAX)
    W = g.axes[2].n
    w_band = axis_bands(g.axes[2], W)[0]
    halves = set()
    for grp in dpairs.dpair_groups(g, (bd, bh, w_band)):
        ref = grp.lo if grp.lo is not None else grp.hi
        halves |= {side for side, pw in ((0, grp.lo), (1, grp.hi)) if pw is not None}
        if not grp.steps:
            c.compute("gpsimd", (ref.j1[0] - ref.j0[0]) * (ref.j1[1] - ref.j0[1]) * (ref.j1[2] - ref.j0[2]), 0, 1.0,
                      1, op="memset")
            continue
        m = dpairs.HALF + g.c_in if grp.hi is not None else g.c_in
        for _st, (nd, nh, nw) in ref.blocks:
            c.matmul(m, nd * nh * nw, fp32, len(grp.steps) * n_co)
            c.evict(nd * nh * nw, ds == 2, 1, contiguous=(g.axes[2].s == 1))
    nh_in = bh.i1 - bh.i0
    rows = ceil_div(bd.i1 - bd.i0, 2)
    run = (nh_in * W if nh_in == g.axes[1].n else W) * ds
    one = dpairs.one_store(g, dpairs.band_halves(g, (bd, bh, w_band)))
    c.dma(g.c_in * rows * nh_in * W * ds * (2 if one else 1), run, 1 if one else len(halves))
    return c


def _estimate_dx_t(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, items: list) -> None:
    """dx^T compute, copies and stores of this program's items (mirrors nki_dx_t.run_dx_t)."""
    ds = g.dtype_bytes
    pairs = sum(1 for taps in phase_tap_sets(g) for s_ in tap_steps(g, p.dx_pair_copies, taps) if s_.b is not None)
    if pairs:   # filters of tap b under tap a's (SBUF->SBUF)
        c.dma(g.c_out * g.c_in * ds, g.c_in * ds, pairs)
    ext = _dx_dy_extent(g, p.dx_band)
    for _b, bd, bh in items:
        c.add(_dx_t_band_sheet(g, hw.name, p.dx_pair_copies, filters_by_dma(g, p), ext, bd, bh))


def _dx_t_fill_ns(g: ConvGeom, p: Plan, hw: TargetFigures, items: list) -> float:
    """The first band's shifted copies, which no earlier band's matmuls hide (later bands are made
    one band ahead): copy bytes at the full DMA bandwidth (two half-range transfers per copy)."""
    if not items or not dx_t_active(p):
        return 0.0
    _b, bd, bh = items[0]
    ext = _dx_dy_extent(g, p.dx_band)
    used = bd.extent * ext[1] * ext[2]
    n_copies = _dx_t_copies(g, p)
    nbytes = sum(g.c_out * used * g.dtype_bytes * (2 if k else 1) for k in range(n_copies))
    if dx_prefetched(p):
        # loaded during dw's last row chunk, whose DMA queues are busy with dw's own x^T transfers
        # (row-mode dw is DMA-heavy): the band's load and copies lengthen dw by their DMA time
        o = g.out_size
        rows = [max(0, min(b_.q1, o[a]) - max(b_.q0, 0)) for a, b_ in enumerate((bd, bh))]
        load = g.c_out * rows[0] * rows[1] * g.axes[2].o * g.dtype_bytes
        return (nbytes + load) / hw.dma_bytes_per_ns
    return nbytes / hw.dma_bytes_per_ns + (hw.dma_fixed_ns if n_copies else 0.0)


@lru_cache(maxsize=8192)
def _dx_t_band_sheet(g: ConvGeom, target: str, copies: int, by_dma: bool, tile_ext: tuple[int, int, int],
                     bd: AxisBand, bh: AxisBand) -> CostSheet:
    """One band of dx^T: shifted copies, matmuls, evictions, transposes back, stores (cached)."""
    hw = TARGET_FIGURES[target]
    c = CostSheet(hw)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    W = g.axes[2].n
    nd_in, nh_in = bd.i1 - bd.i0, bh.i1 - bh.i0
    rows = nd_in * nh_in
    run = (rows * W if nh_in == g.axes[1].n else nh_in * W) * ds
    bw = axis_bands(g.axes[2], W)[0]
    if min(bd.extent, bh.extent, bw.extent) <= 0:   # no dy: zero planes
        for ci in tile_sizes(g.c_in, PMAX):
            c.compute("gpsimd", rows * W, 0, 1.0, 1, op="memset")
            c.dma(ci * rows * W * ds, run)
        return c
    n_copies = copies_made(g, copies)
    used = bd.extent * tile_ext[1] * tile_ext[2]
    for k in range(n_copies):
        sh = copy_shift(g, k, tile_ext)
        if k:
            c.dma(g.c_out * used * ds, used * ds)
        if sh < used:
            c.dma(g.c_out * (used - sh) * ds, (used - sh) * ds)
    ci_t = ci_tile_t(g)
    slots = max(1, BANK_FP32 // ci_t)
    tbank = PSUM_BANK_BYTES // ds
    strided = any(a.s > 1 for a in g.axes)
    for w in dx_phase_work(g, (bd, bh, bw), with_blocks=False):
        npos = w.positions
        if not w.taps:
            c.compute("gpsimd", npos, 0, 1.0, len(tile_sizes(g.c_in, PMAX)), op="memset")
            continue
        n_mm = len(tap_steps(g, copies, w.taps)) * (1 if n_copies else n_tiles(g.c_out, PMAX))
        for grp in block_groups(tuple(w.j1[a] - w.j0[a] for a in range(3)), slots):
            nb, n = len(grp.blocks), grp.n
            for ci in tile_sizes(g.c_in, ci_t):
                c.matmul(n, ci, fp32, n_mm * nb)
                c.evict(nb * ci, two, 1)
                for cc in tile_sizes(ci, PMAX):
                    if by_dma:   # SBUF->SBUF dma_transpose at 50 % of the bandwidth
                        c.busy["dma"] += nb * n * cc * ds / (hw.dma_bytes_per_ns * 0.5)
                        c.count("dma_transpose", 1)
                        continue
                    per = max(1, tbank // n)
                    c.transpose(n, cc, fp32, nb)
                    for k0 in range(0, nb, per):
                        c.evict(min(per, nb - k0) * n, two, 1)
        if strided:   # the phase's strided placement into the plane (GpSimd), per 128 channels
            c.compute("gpsimd", npos, 1, 1.0, len(tile_sizes(g.c_in, PMAX)), op="tensor_copy")
    for ci in tile_sizes(g.c_in, PMAX):
        c.dma(ci * rows * W * ds, run)
    return c
