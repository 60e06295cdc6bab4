"""Filters W[k] transposed to [C_out, C_in] per tap, resident in SBUF for the dx matmuls."""
import nki.isa as nisa
import nki.language as nl

from .nki_common import PMAX, Pool
from .schedule import FILTER_RUN_CI_MAX, FILTER_RUN_ROWS, filter_stage_cols, tiles


class CiTiledFilters:
    """One C_out tile's W^T [co, taps, width] held as one SBUF tensor per C_in tile of the group
    (``load_filters_t(split_ci=True)``); indexed like the single tensor, as long as a column slice stays
    inside one C_in tile (every dx gather access does).

    Why: each filter DMA is a write access of its tensor, and nkisim remembers at most 16 writes per
    tensor, folding the older ones into one hull with the latest time. With all of a group's C_in tiles
    in one tensor (108 DMAs for wide_c512's 4 x 27 taps per C_out tile) the hull spans every column, so
    dx's first matmul (C_in tile 0, loaded first) waited for nearly the whole 14 MB group (a 14 us PE gap
    at LNC2, where dw is too short to hide the load). One tensor per C_in tile keeps the hull inside the
    tile: C_in tile 0's matmuls wait only for C_in tile 0's filters, as the data flow requires."""

    def __init__(self, pieces, ci_list):
        self.pieces = pieces
        self.starts = []
        rel = 0
        for _c, sz in ci_list:
            self.starts.append((rel, rel + sz))
            rel += sz

    def __getitem__(self, key):
        p, t, cs = key
        lo, hi = cs.start or 0, cs.stop
        for piece, (r0, r1) in zip(self.pieces, self.starts):
            if r0 <= lo and hi <= r1:
                return piece[p, t, lo - r0:hi - r0]
        raise ValueError(f"CiTiledFilters: column slice [{lo}, {hi}) spans C_in tiles {self.starts}")


def load_filters_t(g, filters, ci_list, dtype, psum_t, evict, group, by_dma=False, split_ci=False, co=None):
    """Per C_out tile an SBUF tensor [co, taps, sum of ci_list sizes] holding W[tap, ci, co] at [co, tap, ci]
    (``split_ci`` with several C_in tiles: a ``CiTiledFilters``, one tensor per C_in tile, same indexing).

    ``ci_list``: (ci0, ci_size) tiles. Loaded per tap (DMA of a [ci, C_out] row block) and transposed
    on the PE ``group`` taps to one PSUM bank, then evicted in one copy. ``co``: [t0, t1) C_out tiles
    (a C_out chunk of gather dx; default all), the list indexed from t0.
    """
    co_tiles = tiles(g.c_out, PMAX)
    if co is not None:
        co_tiles = co_tiles[co[0]:co[1]]
    co_lo, co_hi = co_tiles[0][0], co_tiles[-1][0] + co_tiles[-1][1]
    width = sum(sz for _c, sz in ci_list)
    if split_ci and len(ci_list) > 1:
        w_t = [CiTiledFilters([nl.ndarray((PMAX, g.taps, sz), dtype, buffer=nl.sbuf, name=f"w_t{i}_{j}")
                               for j, (_c, sz) in enumerate(ci_list)], ci_list) for i in range(len(co_tiles))]
    else:
        w_t = [nl.ndarray((PMAX, g.taps, width), dtype, buffer=nl.sbuf, name=f"w_t{i}")
               for i in range(len(co_tiles))]
    if by_dma and len(ci_list) == 1 and ci_list[0][1] == g.c_in <= FILTER_RUN_CI_MAX:
        # tiny C_in: W[taps, ci, co] is [(taps, ci), co] rows in HBM, so one 2-D transpose moves a run
        # of taps (one per tap would be ~150 DMAs of 1.3 us start latency each ahead of everything)
        rows = g.taps * g.c_in
        flat = filters.reshape((rows, g.c_out))
        step = max(1, FILTER_RUN_ROWS // g.c_in) * g.c_in
        for c, (co0, co_sz) in enumerate(co_tiles):
            dst = w_t[c].reshape((PMAX, rows))
            for r0 in range(0, rows, step):
                r1 = min(rows, r0 + step)
                nisa.dma_transpose(dst=dst[:co_sz, r0:r1], src=flat[r0:r1, co0:co0 + co_sz])
        return w_t
    if by_dma:   # 2-byte dtypes on NC-v3+: the DMA transposes each [ci, co] block, the PE stays free
        flat = filters.reshape((g.taps, g.c_in, g.c_out))
        rel = 0
        for ci0, ci_sz in ci_list:
            for t in range(g.taps):
                for c, (co0, co_sz) in enumerate(co_tiles):
                    nisa.dma_transpose(dst=w_t[c][:co_sz, t, rel:rel + ci_sz],
                                       src=flat[t, ci0:ci0 + ci_sz, co0:co0 + co_sz])
            rel += ci_sz
        return w_t
    # the staging tile holds a chunk of C_out columns (all of them unless C_out is very wide)
    cols = filter_stage_cols(co_hi - co_lo, g.dtype_bytes)
    stage_pool = Pool(3, (PMAX, group, cols), dtype, nl.sbuf, "w_stage")
    flat = filters.reshape((g.taps, g.c_in, g.c_out))
    rel = 0
    for ci0, ci_sz in ci_list:
        for t0 in range(0, g.taps, group):
            gn = min(group, g.taps - t0)
            for cc0 in range(co_lo, co_hi, cols):
                cn = min(cols, co_hi - cc0)
                stage = stage_pool.take()
                # one DMA per tap group and column chunk: filters[t0:t0+gn, ci tile, chunk] as [ci, taps, C_out]
                nisa.dma_copy(dst=stage[:ci_sz, :gn, :cn],
                              src=flat[t0:t0 + gn, ci0:ci0 + ci_sz, cc0:cc0 + cn].permute((1, 0, 2)))
                for c, (co0, co_sz) in enumerate(co_tiles):
                    if not cc0 <= co0 < cc0 + cn:
                        continue
                    pt = psum_t.take()
                    for gi in range(gn):
                        nisa.nc_transpose(dst=pt[:co_sz, gi * ci_sz:(gi + 1) * ci_sz],
                                          data=stage[:ci_sz, gi, co0 - cc0:co0 - cc0 + co_sz])
                    evict.copy(w_t[c][:co_sz, t0:t0 + gn, rel:rel + ci_sz], pt[:co_sz, :gn * ci_sz])
        rel += ci_sz
    return w_t


def load_filters_block_diag(g, filters, regions, dtype, psum_t, evict, group):
    """One SBUF tensor [128, taps, 128] holding, per tap, ``regions`` copies of W^T [co, ci] on the
    diagonal (region r at partitions / columns r*pitch), zeros elsewhere: one matmul then computes dx
    of ``regions`` independent bands stacked on the partitions."""
    pitch = PMAX // regions
    w_bd = nl.ndarray((PMAX, g.taps, PMAX), dtype, buffer=nl.sbuf, name="w_bd")
    stage_pool = Pool(3, (PMAX, group, PMAX), dtype, nl.sbuf, "w_stage_bd", zero=True)
    flat = filters.reshape((g.taps, g.c_in, g.c_out))
    for t0 in range(0, g.taps, group):
        gn = min(group, g.taps - t0)
        stage = stage_pool.take()
        for r in range(regions):
            nisa.dma_copy(dst=stage[r * pitch:r * pitch + g.c_in, :gn, r * pitch:r * pitch + g.c_out],
                          src=flat[t0:t0 + gn, :, :].permute((1, 0, 2)))
        pt = psum_t.take()
        for gi in range(gn):
            nisa.nc_transpose(dst=pt[:PMAX, gi * PMAX:(gi + 1) * PMAX], data=stage[:PMAX, gi, :PMAX])
        evict.copy(w_bd[:PMAX, t0:t0 + gn, :], pt[:PMAX, :gn * PMAX])
    return [w_bd]
