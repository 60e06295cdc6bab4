"""Row-mode dw x^T tiles by ``dma_transpose`` straight from x in HBM (2-byte dtypes, NC-v3+).

The PE-transpose path builds each x^T ``[rows, x columns, ci]`` of a (kd, kh) pair from the
zero-padded SBUF x band, one PE transpose per x column. Here the DMA queues build it instead: one
3-D transpose (src ``[ci, columns, rows]`` -> dst ``[rows, columns, ci]``) per run of rows at one
uniform stride (``kernels.xt_rows``), zero rows by DMA from a zero tile, and the pad columns zeroed
once per buffer (they are the same columns in every tile and no DMA writes them). No x band is loaded.

``Plan.dw_xt_copy``: the tiles are held channel-major ``[rows, (slots,) ci, columns]`` and handed out as
views in the ``[rows, (slots,) columns, ci]`` order every reader indexes; each run of rows is then one
plain ``dma_copy`` of whole x row segments (runs of ``columns`` elements), not a ``dma_transpose``, whose
whole ``[128, 16]`` destination blocks a few rows or a tiny C_in leave mostly empty. The copies go to
the two hardware-DGE queues in turn (``engine=`` sync / scalar of ``nisa.dma_copy``).
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import PMAX, Pool, band_slices
from .xt_rows import (
    MEMSET_MAX,
    XT_DMA_BUFS,
    xt_bundle_groups,
    xt_columns,
    xt_fill,
    zero_by_memset,
    zero_split,
)


class RowXtDma:
    """The x^T tiles of row-mode dw, filled by DMA (one instance per DwState)."""

    def __init__(self, ctx, ci_tile, ring=None, head_cols=0, copy=False):
        """``ring``: where the tiles come from -- None, a ring of XT_DMA_BUFS tiles [P, columns, ci] of
        its own; else a ring of bundle tiles [P, slots, columns, ci] handed out one slot view at a time
        (x-stationary's ``SlotRing``). Either way the pad columns of every tile are zeroed here, once.
        ``head_cols``: the columns of the first head piece (``dw_head_split``), whose zero rows wait only
        for that part of the zero tile."""
        g = ctx.g
        self.ctx = ctx
        self.copy = copy   # channel-major tiles filled by dma_copy (the ring hands out the permuted views)
        # the fills write x's columns [c_lo, c_hi) (zero rows too); the pad columns stay zero from the setup
        self.xw, self.c_lo, self.c_hi = xt_columns(g)
        if ring is None:
            self.ring = Pool(XT_DMA_BUFS, (PMAX, self.xw, ci_tile), ctx.dtype, nl.sbuf, "dw_xt")
            pads = [t[:, a:b, :] for t in self.ring.items for a, b in self._pads()]
        else:
            self.ring = ring
            pads = [t[:, :, a:b, :] for t in ring.tiles for a, b in self._pads()]
        for view in pads:   # the pad columns: no DMA ever writes them
            nisa.memset(self._nat(view), 0.0, engine=nisa.engine.gpsimd)
        self.copies = 0    # dma_copy fills issued (their hardware-DGE queue alternates)
        # (tiny C_in's bundles filled together: the zero rows a bridging transfer leaves, of every slot of a
        # group, in one DMA over x's columns only: the pad columns are zero from the setup)
        wide = ring is not None and zero_by_memset(g, ci_tile)
        fill = ci_tile * (max(self.xw, ring.slots * (self.c_hi - self.c_lo)) if wide else self.xw)
        self.zero = nl.ndarray((PMAX, fill), ctx.dtype, buffer=nl.sbuf, name="dw_xt_zero")
        first = min(fill, head_cols * ci_tile)
        if first:   # the head pieces' zero rows wait only for this part
            nisa.memset(self.zero[:, :first], 0.0, engine=nisa.engine.vector)
        for z0 in range(first, fill, MEMSET_MAX):   # VectorE: GpSimd has the first tiles' zero-row memsets
            nisa.memset(self.zero[:, z0:min(fill, z0 + MEMSET_MAX)], 0.0, engine=nisa.engine.vector)
        ax = g.axes
        # x with its (D, H) rows flattened: a run of rows at one stride is one sliced dim
        self.x_rows = ctx.x.reshape((g.batch, g.c_in, ax[0].n * ax[1].n, ax[2].n))

    def _nat(self, view):
        """``view`` [rows, (slots,) columns, ci] of a tile in the tile's memory order: as it is, or with
        ``copy`` [rows, (slots,) ci, columns] (writes along whole runs of columns, not element by element;
        the zero tile they copy from is all zeros, so any order of it serves)."""
        if not self.copy:
            return view
        n = len(view.shape)
        return view.permute(tuple(range(n - 2)) + (n - 1, n - 2))

    def _move(self, dst, src):
        """One run of rows: ``dst`` [rows, (slots,) columns, ci] (a view of a tile) from ``src`` [ci, (slots,)
        rows, columns] in HBM. By default a ``dma_transpose`` (src permuted to [ci, (slots,) columns, rows]);
        with ``copy`` a ``dma_copy`` in the tile's own channel-major order [rows, (slots,) ci, columns]."""
        if len(src.shape) == 3:
            t_src, c_src = (0, 2, 1), (1, 0, 2)
        else:
            t_src, c_src = (0, 1, 3, 2), (2, 1, 0, 3)
        if not self.copy:
            nisa.dma_transpose(dst=dst, src=src.permute(t_src))
            return
        engine = (nisa.engine.sync, nisa.engine.scalar)[self.copies % 2]
        self.copies += 1
        nisa.dma_copy(dst=self._nat(dst), src=src.permute(c_src), dge_mode=nisa.dge_mode.hwdge, engine=engine)

    def _pads(self):
        """The [lo, hi) pad column ranges of a tile (left and right of x's columns)."""
        return [(a, b) for a, b in ((0, self.c_lo), (self.c_hi, self.xw)) if b > a]

    def _zero_run(self, tile, s0: int, slots: int, run) -> None:
        """Zero one run of rows of ``slots`` slots from ``s0``: by GpSimd memset or a DMA of the zero tile."""
        by_dma, by_memset = zero_split(run)
        if by_memset is not None:
            for j in range(slots):
                self._memset_rows(tile[:, s0 + j], by_memset)
        if by_dma is not None:
            n = by_dma.rows
            nisa.dma_copy(dst=self._nat(tile[by_dma.p0:by_dma.p0 + n, s0:s0 + slots, self.c_lo:self.c_hi, :]),
                          src=self.zero[:n, :slots * (self.c_hi - self.c_lo) * tile.shape[-1]])

    def _memset_rows(self, xt, run):
        """Zero whole rows [p0, p0+rows) of a tile on GpSimd, <= MEMSET_MAX elements per instruction."""
        rows = xt[run.p0:run.p0 + run.rows]
        ci = rows.shape[2]
        cols = rows.shape[1]
        step = max(1, MEMSET_MAX // ci)
        for c0 in range(0, cols, step):
            nisa.memset(self._nat(rows[:, c0:min(cols, c0 + step), :]), 0.0, engine=nisa.engine.gpsimd)

    def fill(self, b, ci0, ci_sz, od0, oh0, cd, ch, kd, kh):
        """The x^T tile (or slot view) [cd*ch rows, x columns, ci_sz] of pair (kd, kh) for output rows
        [od0, od0+cd) x [oh0, oh0+ch) of batch b, the next of the ring."""
        xt = self.ring.take()
        plan = xt_fill(self.ctx.g, od0, oh0, cd, ch, kd, kh, not self.copy)
        if self.c_hi <= self.c_lo:   # no x column at all: only the zeroed pad columns are read
            return xt
        # the x columns (tile column c holds x column c - lo)
        w0, wn = self.c_lo - self.ctx.g.axes[2].lo, self.c_hi - self.c_lo
        if plan.zeros and zero_by_memset(self.ctx.g, xt.shape[-1]):
            # tiny C_in: one memset of the x columns of every row (from the chunk's first partition), then
            # the transposes overwrite the valid rows (the pad columns stay zero from the setup)
            end = max(r.p0 + r.rows for r in plan.zeros + plan.transposes)
            nisa.memset(self._nat(xt[:end, self.c_lo:self.c_hi, :]), 0.0, engine=nisa.engine.gpsimd)
        else:
            for run in plan.zeros:   # whole rows (all columns and channel slots): one contiguous write
                by_dma, by_memset = zero_split(run)
                if by_memset is not None:   # (GpSimd is idle in dw; the DMA queues are not)
                    self._memset_rows(xt, by_memset)
                if by_dma is not None:
                    n = by_dma.rows
                    nisa.dma_copy(dst=self._nat(xt[by_dma.p0:by_dma.p0 + n, :, :]), src=self.zero[:n, :self.xw * xt.shape[-1]])
        for run in plan.transposes:
            src = self.x_rows[b, ci0:ci0 + ci_sz, band_slices(run.x_row, run.rows, run.step), w0:w0 + wn]
            self._move(xt[run.p0:run.p0 + run.rows, self.c_lo:self.c_hi, :ci_sz], src)
        for run in plan.after:   # rows a bridging transfer read from a neighbouring plane: zeroed after it
            by_dma, by_memset = zero_split(run)
            if by_memset is not None:
                self._memset_rows(xt, by_memset)
            if by_dma is not None:
                n = by_dma.rows
                nisa.dma_copy(dst=self._nat(xt[by_dma.p0:by_dma.p0 + n, :, :]), src=self.zero[:n, :self.xw * xt.shape[-1]])
        return xt

    def fill_pieces(self, b, ci0, ci_sz, od0, oh0, cd, ch, kd, kh, pieces, before):
        """``dw_head_split``: like ``fill``, piece by piece: for each tile column
        window [a, b) of ``pieces`` (``dw_head.head_col_pieces``), ``before(i)`` (the dy^T piece), then the
        window's zero rows and transposes, so that the first matmuls wait only for the first piece."""
        xt = self.ring.take()
        plan = xt_fill(self.ctx.g, od0, oh0, cd, ch, kd, kh, not self.copy)
        c_lo = self.ctx.g.axes[2].lo
        ci_t = xt.shape[2]
        for i, (a, e) in enumerate(pieces):
            before(i)
            if e <= a:
                continue
            self._zero_piece(xt, plan.zeros, a, e, ci_t)
            for run in plan.transposes:
                src = self.x_rows[b, ci0:ci0 + ci_sz, band_slices(run.x_row, run.rows, run.step), a - c_lo:e - c_lo]
                self._move(xt[run.p0:run.p0 + run.rows, a:e, :ci_sz], src)
            self._zero_piece(xt, plan.after, a, e, ci_t)   # (after a bridging transfer)
        return xt

    def _zero_piece(self, xt, runs, a, e, ci_t):
        """Zero the rows of ``runs`` in tile columns [a, e) (by GpSimd memset or DMA, as ``zero_split`` says)."""
        for run in runs:
            by_dma, by_memset = zero_split(run)
            if by_memset is not None:
                rows = xt[by_memset.p0:by_memset.p0 + by_memset.rows]
                step = max(1, MEMSET_MAX // ci_t)
                for c0 in range(a, e, step):
                    nisa.memset(self._nat(rows[:, c0:min(e, c0 + step), :]), 0.0, engine=nisa.engine.gpsimd)
            if by_dma is not None:
                n = by_dma.rows
                nisa.dma_copy(dst=self._nat(xt[by_dma.p0:by_dma.p0 + n, a:e, :]), src=self.zero[:n, :(e - a) * ci_t])

    def fill_bundle(self, b, ci0, ci_sz, od0, oh0, cd, ch, pairs):
        """x-stationary, tiny C_in: the slot views of one bundle tile for ``pairs`` (consecutive slots from
        the current one), filled per group of one kd and consecutive kh with the same rows
        (``xt_bundle_groups``): the group's zero rows (one memset of its slots; else by DMA / memset as in
        ``fill``, one write for all its slots), then one 4-D transpose per run of rows (src [ci, slots,
        columns, rows]: x rows one dilated H step apart per slot)."""
        views = [self.ring.take() for _ in pairs]
        tile = self.ring.tile
        s_first = self.ring.k % self.ring.slots - (len(pairs) - 1)
        if self.c_hi <= self.c_lo:   # no x column at all
            return views
        g = self.ctx.g
        ax = g.axes
        w0, wn = self.c_lo - ax[2].lo, self.c_hi - self.c_lo
        plane = ax[0].n * ax[1].n * ax[2].n
        memset = zero_by_memset(g, tile.shape[-1])
        for grp in xt_bundle_groups(g, od0, oh0, cd, ch, tuple(pairs), not self.copy):
            s0 = s_first + grp.slot0
            fill = grp.fill
            if fill.zeros and memset:
                end = max(r.p0 + r.rows for r in fill.zeros + fill.transposes)
                nisa.memset(self._nat(tile[:end, s0:s0 + grp.slots, self.c_lo:self.c_hi, :]), 0.0,
                            engine=nisa.engine.gpsimd)
            for run in () if memset else fill.zeros:   # whole rows of every slot of the group
                self._zero_run(tile, s0, grp.slots, run)
            for run in fill.transposes:
                off = ((b * g.c_in + ci0) * ax[0].n * ax[1].n + run.x_row) * ax[2].n + w0
                src = self.ctx.x.ap([[plane, ci_sz], [ax[1].r * ax[2].n, grp.slots],
                                     [run.step * ax[2].n, run.rows], [1, wn]], offset=off)
                self._move(tile[run.p0:run.p0 + run.rows, s0:s0 + grp.slots, self.c_lo:self.c_hi, :ci_sz], src)
            for run in fill.after:   # rows a bridging transfer read from a neighbouring plane: zeroed after it
                self._zero_run(tile, s0, grp.slots, run)
        return views
