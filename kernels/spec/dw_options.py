"""dw's options: when each applies, the LNC2 splits (taps, positions), tap passes and buffers."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..geometry import ConvGeom, ceil_div
from ..schedule import PMAX, box_blocks, n_tiles
from ..xt_rows import zero_by_memset
from .dw_xs import db_ones_chunk, dw_xs_bundle
from .dx_options import filters_by_dma
from .items import _split, dw_items
from .record import DbMethod, DwMethod, Plan, Strategy


def dyt_dma_legal(g: ConvGeom, p: Plan) -> bool:
    """Row-mode dw streaming its own dy (per gradient) may take dy^T by dma_transpose from HBM (2-byte
    dtypes, NC-v3+): no dy box, no PE transposes, no evictions (``Plan.dw_dyt_dma``). Box mode too
    (``dyt_box_dma_legal``)."""
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
    (kd, kh) pair per bundle (the head pair moves first), no ones slot, the first C_in tile's zero rows not
    by one whole-tile memset (tiny C_in: its bundles are filled whole)."""
    return bool(p.dw_dyt_dma and dyt_dma_legal(g, p) and p.dw_x_stationary and p.dw_xt_dma
                and not p.db_ones and dw_xs_bundle(g, p) == 1
                and not zero_by_memset(g, min(p.dw_ci_tile, p.dw_ci_range, g.c_in)))


def dw_head_split_on(g: ConvGeom, p: Plan) -> bool:
    return p.dw_head_split and dw_head_split_legal(g, p)


def xt_dma_legal(g: ConvGeom, p: Plan) -> bool:
    """Row-mode dw x^T may come by dma_transpose from HBM (2-byte dtypes, NC-v3+; like the filters)."""
    return p.dw_method is DwMethod.ROW_PACK and filters_by_dma(g, p)


def dw_row_chunk_rows(g: ConvGeom, p: Plan, items: list) -> list[list[int]]:
    """Per dw item (box), the rows of its <= 128-row chunks (DwState._add_rows' order)."""
    return [[cd * ch for _st, (cd, ch, _one) in box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)]
            if d1 > d0 and h1 > h0 else [] for _b, (d0, d1), (h0, h1) in items]


def dw_own_taps(g: ConvGeom, p: Plan, pid: int) -> tuple[int, int] | None:
    """Under the LNC2 tap split: the contiguous taps [lo, hi) program ``pid`` owns (whole (kd, kh)
    pairs in row mode, whole tap groups in box mode); None for the position split."""
    if p.dw_split != "taps" or p.lnc == 1 or p.strategy is Strategy.SHARED_DY:
        return None   # shared-dy feeds dw the bands of its own program: positions only
    unit = dw_tap_unit(g, p)
    units = ceil_div(g.taps, unit)
    per = ceil_div(units, p.lnc)
    return min(g.taps, pid * per * unit), min(g.taps, (pid + 1) * per * unit)


def dw_program_items(g: ConvGeom, p: Plan, pid: int) -> list:
    """The dw boxes program ``pid`` runs: every box under the taps split, else its half."""
    if dw_own_taps(g, p, pid) is not None:
        return dw_items(g, p)
    return _split(dw_items(g, p), p.lnc, pid)


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
    dx instead of stalling the in-order PE between the sections. One pass and one C_in and C_out range only
    (the accumulators and received halves stay live through dx). Not x-stationary: it exchanges its own
    accumulator (``_finish_xs``), whose adds and casts on VectorE/GpSimd would hold dx's first band placement."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dw_method is not DwMethod.DMA_GEMM and dw_own_taps(g, p, 0) is None
            and p.dw_ci_range >= g.c_in and len(dw_tap_passes(g, p, 0)) == 1 and not p.dw_co_pass
            and not p.dw_x_stationary)


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


W_BAND_METHODS = (DwMethod.GEMM, DwMethod.TAP_GEMM, DwMethod.TAP_PACK)


def dw_w_band_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_w_band``: box-mode dw streaming its own dy (per gradient) may split each box's W output
    columns into bands, each with the x columns its taps reach (the halo), so that a box whose whole-row
    x band does not fit SBUF still runs. The compositions that pace dx by dw's boxes (dw-interleaved,
    dx^T's band prefetch) and dy^T by DMA (whole W rows) are not built with it."""
    return bool(p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dw_method in W_BAND_METHODS
                and 0 < p.dw_w_band < g.axes[2].o and not p.dw_dyt_dma and not p.dw_interleave
                and not p.dx_prefetch)


def dw_co_pass_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_co_pass``: box-mode dw streaming its own dy (per gradient) may run C_out in passes of whole
    C_out tiles, outermost: each pass holds the dy^T columns, fp32 accumulators and output staging of its
    tiles only, streams its dy boxes and rebuilds x^T, and stores its own C_out columns of dw. For a C_out
    whose dy^T (every C_out column per position tile) or dw staging does not fit SBUF. Not with db folded
    on dw's dy^T (db would be summed per pass), x-stationary (all of C_out on the moving axis) or what
    ``dw_w_band`` excludes (dy^T by DMA, the compositions that pace dx by dw's boxes)."""
    return bool(p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dw_method in W_BAND_METHODS
                and 0 < p.dw_co_pass < n_tiles(g.c_out, PMAX) and not p.dw_x_stationary
                and not (p.compute_db and p.db_method is DbMethod.FOLD) and not p.dw_dyt_dma
                and not p.dw_interleave and not p.dx_prefetch)


def dw_co_passes(g: ConvGeom, p: Plan) -> tuple[tuple[int, int], ...]:
    """The C_out channel ranges [co0, co1) of dw's passes: ``dw_co_pass`` tiles each, else all of C_out."""
    step = p.dw_co_pass * PMAX if p.dw_co_pass else g.c_out
    return tuple((c0, min(g.c_out, c0 + step)) for c0 in range(0, g.c_out, step))


def dw_w_bands(g: ConvGeom, p: Plan) -> tuple[tuple[int, int], ...]:
    """The W output column ranges [w0, w1) of each dw box: bands of ``dw_w_band`` columns, else all W."""
    wo = g.axes[2].o
    if not p.dw_w_band or p.dw_w_band >= wo:
        return ((0, wo),)
    return tuple((w0, min(wo, w0 + p.dw_w_band)) for w0 in range(0, wo, p.dw_w_band))


def dw_w_cols(g: ConvGeom, p: Plan) -> int:
    """W output columns of dw's largest box (its dy box, x band and position tiles)."""
    return min(p.dw_w_band, g.axes[2].o) if p.dw_w_band else g.axes[2].o


@lru_cache(maxsize=4096)
def dw_direct(g: ConvGeom, p: Plan) -> bool:
    """dw evicts its PSUM accumulators straight to the output dtype: one output box, one PSUM group per
    accumulator (row mode: at most 128 rows), one program."""
    if (p.lnc != 1 and dw_own_taps(g, p, 0) is None) or not p.compute_dw or len(dw_w_bands(g, p)) > 1:
        return False
    items = [it for it in dw_items(g, p) if it[1][1] > it[1][0] and it[2][1] > it[2][0]]
    if len(items) != 1:
        return False
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


def db_ones_span(g: ConvGeom, p: Plan) -> tuple[int, int]:
    """The tap pass whose DwState folds db (the first pass of the program that folds db)."""
    return dw_tap_passes(g, p, dw_db_program(g, p))[0]


def db_ones_legal(g: ConvGeom, p: Plan) -> bool:
    """db:fold with dw (row-mode x-stationary) and a chunk with room for the ones slot."""
    return bool(p.compute_db and p.compute_dw and p.db_method is DbMethod.FOLD
                and db_ones_chunk(g, p, db_ones_span(g, p)) is not None)


def xt_copy_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dw_xt_copy``: row-mode x-stationary with ``xT dma`` (its bundle fills per pair). The tile is
    held channel-major ``[rows, slots, ci, x columns]`` so each fill is a plain ``dma_copy`` of whole x row
    segments; the matmuls read the same ``(pair, tap, ci)`` stationary through a view with the ci stride
    outermost. Not with ``head split``: its column pieces (a few columns each) would make the copies' runs
    a few elements long."""
    return (p.dw_method is DwMethod.ROW_PACK and p.dw_x_stationary and p.dw_xt_dma
            and not p.dw_head_split)


def dw_co_pass_geoms(g: ConvGeom, p: Plan) -> tuple[ConvGeom, ...]:
    """The geometry of each of dw's C_out passes (``dw_co_passes``): ``g`` with that pass's C_out."""
    return tuple(replace(g, c_out=c1 - c0) for c0, c1 in dw_co_passes(g, p))
