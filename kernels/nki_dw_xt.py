"""Row-mode dw x^T tiles by ``dma_transpose`` straight from x in HBM (2-byte dtypes, NC-v3+).

The PE-transpose path builds each x^T ``[rows, x columns, ci]`` of a (kd, kh) pair from the
zero-padded SBUF x band, one PE transpose per x column. Here the DMA queues build it instead: one
3-D transpose (src ``[ci, columns, rows]`` -> dst ``[rows, columns, ci]``) per run of rows at one
uniform stride (``kernels.xt_rows``), zero rows by DMA from a zero tile, and the pad columns zeroed
once per buffer (they are the same columns in every tile and no DMA writes them). No x band is loaded.
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import PMAX, Pool, band_slices
from .xt_rows import MEMSET_MAX, XT_DMA_BUFS, xt_columns, xt_fill, zero_split


class RowXtDma:
    """The x^T tiles of row-mode dw, filled by DMA (one instance per DwState)."""

    def __init__(self, ctx, ci_tile, ring=None):
        """``ring``: where the tiles come from -- None, a ring of XT_DMA_BUFS tiles [P, columns, ci] of
        its own; else a ring of bundle tiles [P, slots, columns, ci] handed out one slot view at a time
        (x-stationary's ``SlotRing``). Either way the pad columns of every tile are zeroed here, once."""
        g = ctx.g
        self.ctx = ctx
        self.xw, self.c_lo, self.c_hi = xt_columns(g)
        if ring is None:
            self.ring = Pool(XT_DMA_BUFS, (PMAX, self.xw, ci_tile), ctx.dtype, nl.sbuf, "dw_xt")
            pads = [t[:, a:b, :] for t in self.ring.items for a, b in self._pads()]
        else:
            self.ring = ring
            pads = [t[:, :, a:b, :] for t in ring.tiles for a, b in self._pads()]
        for view in pads:   # the pad columns: no DMA ever writes them
            nisa.memset(view, 0.0, engine=nisa.engine.gpsimd)
        fill = self.xw * ci_tile
        self.zero = nl.ndarray((PMAX, fill), ctx.dtype, buffer=nl.sbuf, name="dw_xt_zero")
        for z0 in range(0, fill, MEMSET_MAX):
            nisa.memset(self.zero[:, z0:min(fill, z0 + MEMSET_MAX)], 0.0, engine=nisa.engine.gpsimd)
        ax = g.axes
        # x with its (D, H) rows flattened: a run of rows at one stride is one sliced dim
        self.x_rows = ctx.x.reshape((g.batch, g.c_in, ax[0].n * ax[1].n, ax[2].n))

    def _pads(self):
        """The [lo, hi) pad column ranges of a tile (left and right of x's columns)."""
        return [(a, b) for a, b in ((0, self.c_lo), (self.c_hi, self.xw)) if b > a]

    def _memset_rows(self, xt, run):
        """Zero whole rows [p0, p0+rows) of a tile on GpSimd, <= MEMSET_MAX elements per instruction."""
        rows = xt[run.p0:run.p0 + run.rows]
        cols, ci = rows.shape[1], rows.shape[2]
        step = max(1, MEMSET_MAX // ci)
        for c0 in range(0, cols, step):
            nisa.memset(rows[:, c0:min(cols, c0 + step), :], 0.0, engine=nisa.engine.gpsimd)

    def fill(self, b, ci0, ci_sz, od0, oh0, cd, ch, kd, kh):
        """The x^T tile (or slot view) [cd*ch rows, x columns, ci_sz] of pair (kd, kh) for output rows
        [od0, od0+cd) x [oh0, oh0+ch) of batch b, the next of the ring."""
        xt = self.ring.take()
        plan = xt_fill(self.ctx.g, od0, oh0, cd, ch, kd, kh)
        w0, wn = self.c_lo - self.ctx.g.axes[2].lo, self.c_hi - self.c_lo   # x columns of the tile
        for run in plan.zeros:   # whole rows (all columns and channel slots): one contiguous write
            by_dma, by_memset = zero_split(run)
            if by_memset is not None:   # (GpSimd is idle in dw; the DMA queues are not)
                self._memset_rows(xt, by_memset)
            if by_dma is not None:
                n = by_dma.rows
                nisa.dma_copy(dst=xt[by_dma.p0:by_dma.p0 + n, :, :], src=self.zero[:n, :])
        for run in plan.transposes:
            src = self.x_rows[b, ci0:ci0 + ci_sz, band_slices(run.x_row, run.rows, run.step), w0:w0 + wn]
            nisa.dma_transpose(dst=xt[run.p0:run.p0 + run.rows, self.c_lo:self.c_hi, :ci_sz],
                               src=src.permute((0, 2, 1)))
        return xt
