"""dx phase gather with the two D stride phases on the PE's M axis (``Plan.dx_dphase_pairs``; the
loop lists and the layout are in ``dx_dpairs``).

Per C_out tile a stationary tile ``[co, slots, 128]``: slot (a, b) holds W_a^T on columns [0, ci) and
W_b^T on [64, 64 + ci), zeros elsewhere (built once: dma_transpose from HBM, or SBUF->SBUF DMAs from the resident W^T tiles). A
paired block accumulates both phases in one PSUM bank (phase 0 on partitions [0, 64), phase 1 on
[64, 128)) and is evicted by one copy into a plane whose lower partitions hold phase 0's D rows and
whose upper ones hold phase 1's; each half is stored with one DMA (D rows two apart in dx).
"""
import nki.isa as nisa
import nki.language as nl

from .dx_dpairs import (
    HALF,
    band_halves,
    dpair_groups,
    dpair_last_by_rows,
    dpair_slot_map,
    one_store,
    slot_runs,
)
from .nki_common import BANK_FP32, PMAX, Pool, band_slices
from .schedule import tiles


def dpair_filters(ctx, w_t=None):
    """The stationary slot tiles [co, slots, 128] per C_out tile: for 2-byte dtypes on NC-v3+ by
    dma_transpose straight from HBM into the slots (``w_t`` None), else SBUF->SBUF DMAs from the
    resident W^T tiles ``w_t``. Only the columns no tap fills are zeroed."""
    g = ctx.g
    ci = g.c_in
    slots = dpair_slot_map(g, ctx.plan)
    out = []
    for c, (co0, co_sz) in enumerate(tiles(g.c_out, PMAX)):
        pt = nl.ndarray((PMAX, max(1, len(slots)), PMAX), ctx.dtype, buffer=nl.sbuf, name=f"w_dpair{c}")
        if ci < HALF:   # gap columns in every slot
            nisa.memset(pt[:co_sz, :, :], 0.0, engine=nisa.engine.gpsimd)
        for (a, b), s in slots.items():
            for side, t in ((0, a), (1, b)):
                cols = slice(side * HALF, side * HALF + ci)
                if t is None:
                    if ci == HALF:
                        nisa.memset(pt[:co_sz, s, cols], 0.0, engine=nisa.engine.gpsimd)
                elif w_t is not None:
                    nisa.dma_copy(dst=pt[:co_sz, s, cols], src=w_t[c][:co_sz, t, :ci])
        if w_t is None:
            # one 3-D transpose per run of slots (src [ci, slots, co], the taps `step` apart in HBM):
            # a DMA per tap held one of the 16 queues ~1.3 us each (27 for down_s2: every queue for
            # the first 2.8 us, ahead of dw's x^T transfers)
            for side in (0, 1):
                cols = slice(side * HALF, side * HALF + ci)
                for s0, t0, step, n in slot_runs(slots, side):
                    src = ctx.filters.ap([[g.c_out, ci], [step * ci * g.c_out, n], [1, co_sz]],
                                         offset=t0 * ci * g.c_out + co0)
                    nisa.dma_transpose(dst=pt[:co_sz, s0:s0 + n, cols], src=src)
        out.append(pt)
    return out


def run_dx_dpairs(ctx, items, bands, pair_t, on_band, between=None):
    """dx of this program's (batch, D band, H band) items with the D phases paired on M; ``pair_t``:
    the slot tiles (``dpair_filters``); ``between``: as ``run_dx``'s (dw's boxes between the bands)."""
    g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
    ax = g.axes
    W = ax[2].n
    ci = g.c_in
    co_tiles = tiles(g.c_out, PMAX)
    slots = dpair_slot_map(g, plan)
    rows_d = -(-plan.dx_band[0] // 2)
    plane_pool = Pool(2, (PMAX, rows_d, plan.dx_band[1], W), dtype, nl.sbuf, "dx_plane")
    acc_pool = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_dx")
    # the next band's dy loads at this band's start and is placed after this band's dw work (``on_band``):
    # VectorE runs in order, so a placement issued at the next band's start would wait behind this band's
    # evictions and hold the PE's first work of that band (dy_bufs >= 2: the buffer's readers are issued)
    ahead = plan.dy_bufs >= 2
    loaded = {}
    for i_item, (b, bd, bh) in enumerate(items):
        bufs, places = loaded.pop(i_item, (None, []))
        if bufs is None:
            bufs = bands.load(b, bd, bh)
        for place in places:   # (not issued yet: a band loaded ahead is placed before its first reader)
            place()
        if ahead and i_item + 1 < len(items):
            places = []
            loaded[i_item + 1] = (bands.load(*items[i_item + 1], places=places), places)
        if on_band is not None:
            on_band(b, bd, bh, bands.band_w, bufs)
        for place in loaded.get(i_item + 1, (None, []))[1]:
            place()
        if i_item + 1 in loaded:
            loaded[i_item + 1][1].clear()
        if between is not None:   # dw's boxes (dw-interleaved), after this band's load, before its groups
            between(i_item, len(items))
        nh_in = bh.i1 - bh.i0
        plane = plane_pool.take()
        groups = dpair_groups(g, (bd, bh, bands.band_w))
        first = band_halves(g, (bd, bh, bands.band_w))   # D phase -> (first input row of the band, rows)
        # the program's last band with one store: its D rows one after the other, each stored as soon as
        # its blocks are evicted (the last store, the dx tail, moves one row instead of the whole plane)
        by_row = i_item == len(items) - 1 and dpair_last_by_rows(g, first)
        rows = [(r, r + 1) for r in range(first[0][1])] if by_row else [(0, rows_d)]
        for r_lo, r_hi in rows:
            for grp in groups:
                _dpair_group(ctx, grp, bd, bh, bands, bufs, pair_t, slots, plane, acc_pool, co_tiles,
                             (r_lo, r_hi) if by_row else None, r_lo == 0)
            if by_row:
                _dpair_one_store(ctx, b, bh, first, plane, nh_in, (r_lo, r_hi))
        if by_row:
            continue
        if one_store(g, first):   # [phase, ci, rows, (h, w)] in dx: all 128 partitions in one DMA
            _dpair_one_store(ctx, b, bh, first, plane, nh_in, (0, first[0][1]))
            continue
        for side, (i_first, n_rows) in sorted(first.items()):
            nisa.dma_copy(dst=ctx.dx[b, :, band_slices(i_first - 0, n_rows, 2), bh.i0:bh.i1, :],
                          src=plane[side * HALF:side * HALF + ci, :n_rows, :nh_in, :W])


def _dpair_one_store(ctx, b, bh, first, plane, nh_in, rows):
    """D rows [r0, r1) of a band plane with one 128-partition DMA: dx pattern [phase (+-1 D row), ci,
    rows (two D rows apart), (h, w)] (``one_store``)."""
    g = ctx.g
    ax = g.axes
    D, H, W = ax[0].n, ax[1].n, ax[2].n
    (i_first, _n), (i_up, _n1) = first[0], first[1]
    r0, r1 = rows
    off = ((b * g.c_in) * D + i_first + 2 * r0) * H * W + bh.i0 * W
    dst = ctx.dx.ap([[(i_up - i_first) * H * W, 2], [D * H * W, g.c_in], [2 * H * W, r1 - r0], [1, nh_in * W]],
                    offset=off)
    nisa.dma_copy(dst=dst, src=plane[:2 * HALF, r0:r1, :nh_in, :W])


def _dpair_group(ctx, grp, bd, bh, bands, bufs, pair_t, slots, plane, acc_pool, co_tiles, rows, zeros):
    """One group's blocks of a band (``rows``: only plane rows [r0, r1), one D row per block; None: all);
    ``zeros``: write the zeros of a phase no tap reaches (once per band)."""
    g = ctx.g
    ax = g.axes
    ci = g.c_in
    if not grp.steps:   # a phase no tap reaches: zeros
        if not zeros:
            return
        side, pw = (0, grp.lo) if grp.lo is not None else (1, grp.hi)
        p0 = side * HALF
        i_h = ax[1].i_of_j(pw.j0[1], pw.phases[1]) - bh.i0
        i_w = ax[2].i_of_j(pw.j0[2], pw.phases[2])
        nisa.memset(plane[p0:p0 + ci, 0:pw.j1[0] - pw.j0[0],
                          band_slices(i_h, pw.j1[1] - pw.j0[1], ax[1].s),
                          band_slices(i_w, pw.j1[2] - pw.j0[2], ax[2].s)], 0.0, engine=nisa.engine.gpsimd)
        return
    ref = grp.lo if grp.lo is not None else grp.hi
    has_hi = grp.hi is not None
    m = HALF + ci if has_hi else ci   # the stationary columns used (phase 1 from column 64)
    p_lo = HALF if grp.alone == 1 else 0
    p_hi = HALF + ci if has_hi else ci
    for (jd, jh, jw), (nd, nh, nw) in _row_blocks(ref, rows):
        n = nd * nh * nw
        rel = (jd - ref.j0[0], jh - ref.j0[1], jw - ref.j0[2])
        ps = acc_pool.take()
        steps = [(st, c) for st in grp.steps for c in range(len(co_tiles))]
        for si, ((a, bt, win), c) in enumerate(steps):
            co_sz = co_tiles[c][1]
            qd = win[0] + rel[0] - bd.q0
            qh = win[1] + rel[1] - bh.q0
            qw = win[2] + rel[2] - bands.band_w.q0
            nisa.nc_matmul(ps[:m, :n], stationary=pair_t[c][:co_sz, slots[(a, bt)], :m],
                           moving=bufs[c][:co_sz, qd:qd + nd, qh:qh + nh, qw:qw + nw], accumulate=si > 0)
        i_h = ax[1].i_of_j(jh, ref.phases[1]) - bh.i0
        i_w = ax[2].i_of_j(jw, ref.phases[2])
        ctx.evict.copy(plane[p_lo:p_hi, rel[0]:rel[0] + nd, band_slices(i_h, nh, ax[1].s),
                             band_slices(i_w, nw, ax[2].s)], ps[p_lo:p_hi, :n])


def _row_blocks(ref, rows):
    """A phase's blocks; with ``rows`` (plane rows [r0, r1)) only their D rows, one row per block."""
    if rows is None:
        return list(ref.blocks)
    out = []
    for (jd, jh, jw), (nd, nh, nw) in ref.blocks:
        for d in range(jd, jd + nd):
            if rows[0] <= d - ref.j0[0] < rows[1]:
                out.append(((d, jh, jw), (1, nh, nw)))
    return out
