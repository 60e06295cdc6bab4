"""dw as per-tap GEMMs contracting over output positions (on partitions), taps packed on the moving axis.

Per box of output rows: dy^T [pos, C_out] once per position tile (PE transposes, shared by every
tap); per C_in tile a zero-padded x band, whose tap windows are free-axis strided views (so stride,
dilation and padding cost nothing) transposed on the PE, ``G`` taps side by side; one matmul
(stationary dy^T [pos, co], moving x^T [pos, G*ci]) accumulates dw^T[co, (tap, ci)] in a PSUM bank
over the position tiles, then into an fp32 SBUF accumulator over boxes and batches. At the end the
accumulator is (LNC2: exchanged and added,) cast, transposed to [ci, co] and stored.

x-stationary (``plan.dw_x_stationary``): the same x^T and dy^T tiles with the roles swapped,
stationary x^T [pos, (taps x ci) <= 128], moving dy^T [pos, C_out <= 512], so PSUM holds
dw[(tap, ci), co], the output layout: folded into one fp32 accumulator [(slot, ci), chunks, C_out],
cast once per C_in tile and stored by DMA (no transposes).
"""
import nki.isa as nisa
import nki.language as nl

from .dw_head import HEAD_PAIRS, head_col_pieces, head_pair_order, head_pieces
from .nki_common import (
    BANK_BYTES,
    BANK_FP32,
    PMAX,
    Pool,
    band_slices,
    co_bank_packs,
    stage_padded,
)
from .nki_dw_xt import RowXtDma
from .schedule import box_blocks, dw_x_extent, dw_x_fill, dw_x_stage_elems, n_tiles, tiles
from .spec.dw_options import (
    DYT_DMA_BUFS,
    cast_group,
    dw_acc_banks,
    dw_co_passes,
    dw_db_program,
    dw_defer_finish,
    dw_direct,
    dw_fused_exchange,
    dw_head_split_on,
    dw_out_bufs,
    dw_own_taps,
    dw_program_items,
    dw_stage_rows,
    dw_tap_passes,
    dw_w_bands,
    dw_w_cols,
    xt_copy_legal,
)
from .spec.dw_xs import (
    db_ones_chunk,
    dw_xs_bundle,
    dw_xs_bundles,
    dw_xs_chunks,
    dw_xs_fold_runs,
    dw_xs_group_banks,
    dw_xs_per_bank,
    dw_xs_row_chunks,
    xs_exchange_window,
    xs_store_runs,
)
from .spec.record import DwMethod
from .xt_rows import dyt_runs, xt_columns, xt_dma_bufs, zero_by_memset

LOOKAHEAD = 2   # position tiles whose x^T is built ahead of the matmuls
FIRST_X_PIECES = 3   # box mode: the DMAs (and placements) of a state's first x band, by D rows


class SlotRing:
    """A ring of tiles [P, slots, ...] handed out one slot view [P, ...] at a time (like ``Pool``);
    ``align`` makes the next view the first slot of the next tile; ``tile`` is the last view's tile."""

    def __init__(self, count, slots, shape, dtype, name, channel_major=False):
        """``channel_major`` (``Plan.dw_xt_copy``, shape [P, columns, ci]): each tile is held [P, slots, ci,
        columns] and kept as its [P, slots, columns, ci] view, so readers index it as usual."""
        if channel_major:
            p, cols, ci = shape
            self.tiles = [nl.ndarray((p, slots, ci, cols), dtype, buffer=nl.sbuf, name=f"{name}{i}").permute((0, 1, 3, 2))
                          for i in range(count)]
        else:
            self.tiles = [nl.ndarray((shape[0], slots) + tuple(shape[1:]), dtype, buffer=nl.sbuf, name=f"{name}{i}")
                          for i in range(count)]
        self.slots = slots
        self.k = -1   # the last slot handed out, counted over the whole ring

    def take(self):
        self.k = (self.k + 1) % (len(self.tiles) * self.slots)
        return self.tile[:, self.k % self.slots]

    def align(self):
        self.k += (self.slots - 1 - self.k % self.slots) % self.slots if self.k >= 0 else 0

    @property
    def tile(self):
        return self.tiles[(self.k // self.slots) % len(self.tiles)]


class DwState:
    """The dw accumulators and pools of one program."""

    def __init__(self, ctx, max_rows, ci_range=None, direct=False, db_state=None, own_taps=None, taps=None,
                 head=False, co_range=None):
        g, plan = ctx.g, ctx.plan
        self.ctx = ctx
        # LNC2 tap split: this program computes and stores only taps [lo, hi), over every position
        self.own_taps = own_taps
        # the taps of this pass (accumulators for these only): a tap pass, else the program's own taps
        self.span = taps or own_taps or (0, g.taps)
        self.n_span = self.span[1] - self.span[0]
        # db folded on the PE: the dy^T tiles dw builds anyway times a ones vector, summed in PSUM;
        # or (plan.db_ones) inside dw's own x-stationary matmuls: one chunk's stationary also takes
        # the bundle tile's ones slot, so PSUM row ``ones_row`` of that chunk is sum_pos dy^T (db)
        self.db_state = db_state
        self.ones_chunk = db_ones_chunk(g, plan, self.span) if (db_state is not None and plan.db_ones) else None
        if db_state is not None and plan.db_ones and self.ones_chunk is None:
            raise ValueError(f"db_ones: no stationary chunk of taps {self.span} has room for the ones slot")
        if db_state is not None and self.ones_chunk is None:
            self.ones = nl.ndarray((PMAX, 1), ctx.dtype, buffer=nl.sbuf, name="dw_ones")
            nisa.memset(self.ones, 1.0, engine=nisa.engine.gpsimd)
            self.db_ps = nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name="ps_db")
        # direct: every accumulator is folded exactly once (one output box, one PSUM group), so the
        # PSUM banks are evicted straight into the output dtype: no fp32 copy, no cast pass
        self.direct = direct
        # the C_out channels [lo, hi) of this pass (``dw_co_pass``, box mode): its dy^T columns, accumulators
        # and stores; ``co_tiles`` are relative to ``co_lo`` (the dy^T and staging columns)
        self.co_lo, co_hi = co_range if co_range is not None else (0, g.c_out)
        self.co_w = co_hi - self.co_lo
        self.co_tiles = tiles(self.co_w, PMAX)
        self.co_packs = co_bank_packs(self.co_tiles, BANK_BYTES // g.dtype_bytes)
        self.ci_lo, ci_hi = ci_range if ci_range is not None else (0, g.c_in)
        self.width = ci_hi - self.ci_lo
        self.ci_tiles = [(self.ci_lo + c0, sz) for c0, sz in tiles(self.width, plan.dw_ci_tile)]
        # x-stationary (plan.dw_x_stationary): dw[(tap-slot, ci), co] accumulates in one tensor
        # [(slot, ci) partitions, C_in tiles x chunks, C_out] (chunk k of C_in tile i at column block
        # i * n_chunks + k), stored straight into dw; else dw^T[co, (tap, ci)] per C_out tile
        self.xs = plan.dw_x_stationary
        if self.xs:
            self.xs_chunks = dw_xs_chunks(g, plan, self.span)
            self.xs_index = {t: k for k, (t, _nb, _tn) in enumerate(self.xs_chunks)}
            n_units = max(1, len(self.ci_tiles) * len(self.xs_chunks))
            self.xacc = nl.ndarray((PMAX, n_units * g.c_out), ctx.dtype if direct else nl.float32, buffer=nl.sbuf,
                                   name="dw_xacc")
            self.acc = []
        else:
            self.acc = [nl.ndarray((PMAX, max(1, self.n_span), self.width), ctx.dtype if direct else nl.float32,
                                   buffer=nl.sbuf, name=f"dw_acc{c}")
                        for c in range(len(self.co_tiles))]
        self.started = False
        # dw_head_split (the program's first state): its first row chunk's dy^T is issued in column pieces
        # with the first pair's x^T (``_head_dyt`` holds the chunk until then)
        self.head = head and dw_head_split_on(g, plan)
        self._head_dyt = None
        # a callable run once at the start of this state's last row chunk (dx^T's first band
        # prefetch, ``plan.dx_prefetch``); set by run_dw_streaming on the last box
        self.prefetch = None
        # a callable run once when the first row chunk's loads are issued (run_dw_streaming)
        self.after_first = None
        self.exchanged = ()   # (LNC2, deferred finish) the received partials, once start_exchange ran
        # box mode: the box the caller adds next, (b, od, oh, ow) (``expect``), and the x band of its first
        # C_in tile loaded ahead under this box's work: (key, band, placement still to issue or None)
        self.next_box = None
        self._next_x = None
        wo = g.axes[2].o
        wcols = dw_w_cols(g, plan)   # box mode: the W output columns of a box (a W band, else all)
        xext = (dw_x_extent(g.axes[0], max_rows[0]), dw_x_extent(g.axes[1], max_rows[1]),
                dw_x_extent(g.axes[2], wcols))
        self.xt_dma = None
        if plan.dw_method is DwMethod.ROW_PACK:
            # rows chunks are at most 128 (d, h) rows: the x band of one chunk
            rows_cap = [min(max_rows[0], PMAX), min(max_rows[1], PMAX)]
            xext = (dw_x_extent(g.axes[0], rows_cap[0]), dw_x_extent(g.axes[1], rows_cap[1]), xext[2])
            # dw_dyt_dma: a ring of dy^T tiles (a chunk's transfers land while the pass before reads the other)
            self.dyt_ring = [nl.ndarray((PMAX, wo, g.c_out), ctx.dtype, buffer=nl.sbuf, name=f"dw_dyt{i}")
                             for i in range(DYT_DMA_BUFS if plan.dw_dyt_dma else 1)]
            self.dyt = self.dyt_ring[0]
            if plan.dw_dyt_dma:   # dy with its (D, H) output rows flattened: a run of rows is one sliced dim
                self.dy_rows = ctx.dy.reshape((g.batch, g.c_out, g.out_size[0] * g.out_size[1], wo))
            slots = dw_xs_bundle(g, plan) + (1 if self.ones_chunk is not None else 0)   # (+ the ones slot)
            # (a flag not legal here is ignored, as the planner never offers it)
            self.xt_copy = plan.dw_xt_copy and xt_copy_legal(g, plan)
            if plan.dw_xt_dma:   # x^T by dma_transpose from HBM: no x band, no PE transposes
                # x-stationary: into the slot views of the bundle ring (RowXtDma zeroes their pad columns)
                ring = SlotRing(xt_dma_bufs(plan), slots, (PMAX, xt_columns(g)[0], plan.dw_ci_tile),
                                ctx.dtype, "dw_xt", channel_major=self.xt_copy) if self.xs else None
                head_cols = max((e - a for _w, (a, e) in head_col_pieces(g, 0, wo, *xt_columns(g)[1:])),
                                default=0) if self.head else 0
                self.xt_dma = RowXtDma(ctx, plan.dw_ci_tile, ring, head_cols, copy=self.xt_copy)
                self.xt_pool = self.xt_dma.ring
            elif self.xs:   # x^T of several (kd, kh) pairs in one tile (a stationary may span them)
                self.xt_pool = SlotRing(2, slots, (PMAX, xext[2], plan.dw_ci_tile), ctx.dtype, "dw_xt")
            else:
                self.xt_pool = Pool(2, (PMAX, xext[2], plan.dw_ci_tile), ctx.dtype, nl.sbuf, "dw_xt")
            if self.ones_chunk is not None:   # the last slot of every bundle tile: ones, never handed out
                for t in self.xt_pool.tiles:   # (after RowXtDma's pad-column memsets of every slot)
                    nisa.memset(t[:, slots - 1], 1.0, engine=nisa.engine.gpsimd)
        else:
            n_pt = len(box_blocks((0, 0, 0), (max_rows[0], max_rows[1], wcols), PMAX)) if min(max_rows) > 0 else 0
            self.dyt = nl.ndarray((PMAX, max(1, n_pt), self.co_w), ctx.dtype, buffer=nl.sbuf, name="dw_dyt")
            self.dyt_ring = [self.dyt]
            self.xt_pool = Pool(LOOKAHEAD + 2, (PMAX, plan.dw_tap_group * plan.dw_ci_tile), ctx.dtype, nl.sbuf,
                                "dw_xt")
        if self.xt_dma is None:
            self.x_pool = Pool(2, (PMAX,) + tuple(max(1, e) for e in xext), ctx.dtype, nl.sbuf, "dw_x")
            stage = dw_x_stage_elems(g, dw_stage_rows(plan, max_rows), wcols)
            self.x_stage = Pool(2, (PMAX, stage), ctx.dtype, nl.sbuf, "dw_x_stage") if stage else None
        banks = dw_xs_group_banks(g, plan) + 1 if self.xs else dw_acc_banks(plan.dw_co_chunk, len(self.co_tiles))
        self.acc_pool = Pool(banks, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_dw")

    def add_box(self, b, od, oh, dy_views, ow=None):
        """Accumulate the output box rows od=[d0,d1) x oh=[h0,h1) x columns ow=[w0,w1) (default all W) of
        batch b; dy_views per co tile, [co, rows d, rows h, columns of ow]."""
        ctx, g, plan = self.ctx, self.ctx.g, self.ctx.plan
        ax = g.axes
        rows = (od[1] - od[0], oh[1] - oh[0])
        ow = ow if ow is not None else (0, ax[2].o)
        wo = ow[1] - ow[0]
        if rows[0] <= 0 or rows[1] <= 0:
            return
        if plan.dw_method is DwMethod.ROW_PACK:
            self._add_rows(b, od, oh, dy_views)
            return
        self._run_prefetch()
        ptiles = box_blocks((0, 0, 0), (rows[0], rows[1], wo), PMAX)
        # dy^T once per position tile, C_out tiles packed into one PSUM bank
        for p, ((sd, sh, sw), (td, th, tw)) in enumerate(ptiles):
            npos = td * th * tw
            if plan.dw_dyt_dma:   # by DMA (dyt_box_dma_legal): per C_out tile and d plane, one contiguous run of dy
                self._dyt_box_by_dma(b, od[0] + sd, oh[0] + sh, ow[0] + sw, td, th, tw, p)
                continue
            for g0, members, width in self.co_packs:
                pt = ctx.psum_t.take()
                for c, off, co_sz in members:
                    nisa.nc_transpose(dst=pt[:npos, off:off + co_sz],
                                      data=dy_views[c][:co_sz, sd:sd + td, sh:sh + th, sw:sw + tw])
                ctx.evict.copy(self.dyt[:npos, p, g0:g0 + width], pt[:npos, :width])
        self._db([(s_[0] * s_[1] * s_[2], p) for p, (_st, s_) in enumerate(ptiles)])
        G = plan.dw_tap_group
        chunk = plan.dw_co_chunk
        n_co = len(self.co_tiles)
        # one flat stream of steps (C_in tile, tap group, C_out chunk, position tile), software
        # pipelined across every boundary: x^T of step i+LOOKAHEAD is built before the matmuls of step i
        t_lo, t_hi = self.span
        co_steps = [0] if self.xs else range(0, n_co, chunk)   # x-stationary: all of C_out on the moving axis
        steps = [(ci, t0, c0, p) for ci in range(len(self.ci_tiles)) for t0 in range(t_lo, t_hi, G)
                 for c0 in co_steps for p in range(len(ptiles))]
        bands = {}

        ahead = self._x_ahead_steps(steps)

        def stage(i):
            ci, t0, _c0, p = steps[i]
            ci0, ci_sz = self.ci_tiles[ci]
            if ci not in bands:      # the x band of a C_in tile is loaded when first needed
                bands[ci] = self._take_x(b, od, oh, ci0, ci_sz, ow)
                bands.pop(ci - 2, None)
            if ahead is not None and i == ahead[0]:
                self._load_next_x()
            if ahead is not None and i == ahead[1]:
                self._place_next_x()
            xb = bands[ci]
            grp = range(t0, min(t_hi, t0 + G))
            (sd, sh, sw), (td, th, tw) = ptiles[p]
            npos = td * th * tw
            n = len(grp) * ci_sz
            pt = ctx.psum_t.take()
            for gi, t in enumerate(grp):
                kd, kh, kw = g.tap_coords(t)
                view = xb[:ci_sz,
                          band_slices(kd * ax[0].r + sd * ax[0].s, td, ax[0].s),
                          band_slices(kh * ax[1].r + sh * ax[1].s, th, ax[1].s),
                          band_slices(kw * ax[2].r + sw * ax[2].s, tw, ax[2].s)]
                nisa.nc_transpose(dst=pt[:npos, gi * ci_sz:(gi + 1) * ci_sz], data=view)
            xt = self.xt_pool.take()
            ctx.evict.copy(xt[:npos, :n], pt[:npos, :n])
            return xt

        staged = [stage(i) for i in range(min(LOOKAHEAD, len(steps)))]
        accs = []
        for i, (ci, t0, c0, p) in enumerate(steps):
            if i + LOOKAHEAD < len(steps):
                staged.append(stage(i + LOOKAHEAD))
            xt = staged[i]
            staged[i] = None
            ci0, ci_sz = self.ci_tiles[ci]
            gn = min(t_hi, t0 + G) - t0
            n = gn * ci_sz
            npos = ptiles[p][1][0] * ptiles[p][1][1] * ptiles[p][1][2]
            if self.xs:
                grp = [ch for ch in self.xs_chunks if t0 <= ch[0] < t0 + gn]
                if p == 0:
                    accs = self._xs_banks(len(grp))
                for u, (t, _nb, tn) in enumerate(grp):
                    col = (t - t0) * ci_sz   # the chunk's taps are adjacent ci-blocks of the x^T group
                    self._xs_matmul(accs, u, xt[:npos, col:col + tn * ci_sz], tn * ci_sz,
                                    self.dyt[:npos, p, :g.c_out], p > 0)
                if p == len(ptiles) - 1:
                    self._xs_fold(accs, ci, ci_sz, grp)
                continue
            cts = list(range(c0, min(n_co, c0 + chunk)))
            if p == 0:
                accs = [self.acc_pool.take() for _ in cts]
            for a, c in enumerate(cts):
                co0, co_sz = self.co_tiles[c]
                nisa.nc_matmul(accs[a][:co_sz, :n], stationary=self.dyt[:npos, p, co0:co0 + co_sz],
                               moving=xt[:npos, :n], accumulate=p > 0)
            if p == len(ptiles) - 1:
                for a, c in enumerate(cts):
                    self._fold(c, t0, gn, ci0, ci_sz, accs[a][:self.co_tiles[c][1], :n])
        self.started = True
        self.next_box = None   # (an expectation holds for one box)

    def _dyt_box_by_dma(self, b, d0, h0, w0, td, th, tw, p):
        """Box mode, ``dw_dyt_dma``: position tile ``p`` (td x th x tw positions from (d0, h0, w0) of batch b)
        as dy^T [positions, C_out] straight from dy in HBM: a d plane's th x tw positions are one run of the
        flattened dy when tw is all of W_out (or th is 1), one 2-D transpose per C_out tile and d plane."""
        g = self.ctx.g
        ho, wo = g.out_size[1], g.axes[2].o
        if tw != wo and th != 1:
            raise ValueError(f"dw_dyt_dma (box mode): position tile {td}x{th}x{tw} is not whole W rows (W_out {wo})")
        flat = self.ctx.dy.reshape((g.batch, g.c_out, g.out_size[0] * ho * wo))
        n = th * tw
        for co0, co_sz in self.co_tiles:
            for i in range(td):
                r0 = ((d0 + i) * ho + h0) * wo + w0
                nisa.dma_transpose(dst=self.dyt[i * n:(i + 1) * n, p, co0:co0 + co_sz],
                                   src=flat[b, co0:co0 + co_sz, r0:r0 + n])

    def expect(self, b, od, oh, ow=None):
        """Tell a box-mode state the box the caller adds after the current one: its x band (first C_in
        tile) then loads under the current box's work instead of in front of its own first transposes."""
        self.next_box = (b, od, oh, ow if ow is not None else (0, self.ctx.g.axes[2].o))

    def _x_ahead_steps(self, steps):
        """(step whose staging issues the next box's x band DMA, step whose staging issues its placement),
        or None: the DMA when the last C_in tile's steps begin (the other x buffer's readers are issued by
        then), the placement halfway from there to the box's last step (the DMA has landed by then)."""
        if self.next_box is None or not steps or self.xt_dma is not None:
            return None
        last_ci = steps[-1][0]
        first = next(i for i, st in enumerate(steps) if st[0] == last_ci)
        return first, first + (len(steps) - 1 - first) // 2

    def _load_next_x(self):
        b, od, oh, ow = self.next_box
        rows = (od[1] - od[0], oh[1] - oh[0])
        if rows[0] <= 0 or rows[1] <= 0:
            return
        ci0, ci_sz = self.ci_tiles[0]
        band, place, _ext = self._stage_x(b, od, oh, ci0, ci_sz, ow)
        self._next_x = ((b, od, oh, ow, ci0), band, place)

    def _place_next_x(self):
        if self._next_x is not None and self._next_x[2] is not None:
            self._next_x[2]()
            self._next_x = self._next_x[:2] + (None,)

    def _take_x(self, b, od, oh, ci0, ci_sz, ow):
        """The x band of C_in tile ci0: the one loaded ahead when it is this box's, else loaded now."""
        ahead, self._next_x = self._next_x, None
        if ahead is not None and ahead[0] == (b, od, oh, ow, ci0):
            if ahead[2] is not None:   # (its placement was not issued yet: now, before its first reader)
                ahead[2]()
            return ahead[1]
        # (the state's first band: in pieces, so that its first transposes wait for the first D rows only)
        return self._load_x(b, od, oh, ci0, ci_sz, ow, FIRST_X_PIECES if not self.started and ci0 == 0 else 1)[0]

    def _stage_x(self, b, od, oh, ci0, ci_sz, ow=None, pieces=1):
        """The zero-padded x band [ci, Xd, Xh, Xw] that output rows od x oh and columns ow (default all W)
        read, its extent, and its placement copy still to issue (``stage_padded``)."""
        x0, ext, lo, hi = dw_x_fill(self.ctx.g, od, oh, ow)
        xb = self.x_pool.take()
        if any(h <= l for l, h in zip(lo, hi)):
            return stage_padded(xb, ext, lo, hi, None, None) + (ext,)
        src = self.ctx.x[b, ci0:ci0 + ci_sz, x0[0] + lo[0]:x0[0] + hi[0], x0[1] + lo[1]:x0[1] + hi[1],
                         x0[2] + lo[2]:x0[2] + hi[2]]
        return stage_padded(xb, ext, lo, hi, src, self.x_stage, pieces=pieces) + (ext,)

    def _load_x(self, b, od, oh, ci0, ci_sz, ow=None, pieces=1):
        """``_stage_x`` with the placement issued now: (band, extent)."""
        band, place, ext = self._stage_x(b, od, oh, ci0, ci_sz, ow, pieces)
        place()
        return band, ext

    def _add_rows(self, b, od, oh, dy_views):
        """Row mode: (d, h) output rows on partitions, each W column a matmul step; the kw taps are
        free-axis offsets of one x^T [rows, x columns, ci] per (kd, kh), so they share its transposes
        and pack side by side on the moving axis."""
        ctx, g, plan = self.ctx, self.ctx.g, self.ctx.plan
        wo = g.axes[2].o
        bank = 2048 // g.dtype_bytes
        chunks = box_blocks((0, 0, 0), (od[1] - od[0], oh[1] - oh[0], 1), PMAX)
        for k_chunk, ((sd, sh, _z), (cd, ch, _one)) in enumerate(chunks):
            if k_chunk == 1:
                self.run_after_first()
            nrows = cd * ch
            # dy^T per output column w: [rows, C_out], several columns per bank
            per_bank = max(1, bank // g.c_out) if g.c_out <= bank else 0
            if plan.dw_dyt_dma and self.head and not self.started:
                self._head_dyt = (b, od[0] + sd, oh[0] + sh, cd, ch)   # with the first x^T, piece by piece
                self.head = False
            elif plan.dw_dyt_dma:
                self._dyt_by_dma(b, od[0] + sd, oh[0] + sh, cd, ch)
            elif per_bank:
                for w0 in range(0, wo, per_bank):
                    wn = min(per_bank, wo - w0)
                    pt = ctx.psum_t.take()
                    for wi in range(wn):
                        for c, (co0, co_sz) in enumerate(self.co_tiles):
                            nisa.nc_transpose(dst=pt[:nrows, wi * g.c_out + co0:wi * g.c_out + co0 + co_sz],
                                              data=dy_views[c][:co_sz, sd:sd + cd, sh:sh + ch, w0 + wi])
                    ctx.evict.copy(self.dyt[:nrows, w0:w0 + wn, :], pt[:nrows, :wn * g.c_out])
            else:
                for w in range(wo):
                    for c, (co0, co_sz) in enumerate(self.co_tiles):
                        pt = ctx.psum_t.take()
                        nisa.nc_transpose(dst=pt[:nrows, :co_sz], data=dy_views[c][:co_sz, sd:sd + cd, sh:sh + ch, w])
                        ctx.evict.copy(self.dyt[:nrows, w, co0:co0 + co_sz], pt[:nrows, :co_sz])
            if k_chunk == len(chunks) - 1:   # after this chunk's dy^T evictions: ScalarE is free for dw now
                # (GpSimd still has the pass's x^T zero-row memsets to run; trn1's ScalarE cannot copy)
                scalar = nisa.engine.scalar in ctx.evict.engines
                self._run_prefetch(nisa.engine.scalar if scalar else nisa.engine.gpsimd)
            self._rows_pass(b, (od[0] + sd, od[0] + sd + cd), (oh[0] + sh, oh[0] + sh + ch), cd, ch)
            # the next chunk's dy^T goes to the next tile of the ring (dw_dyt_dma: its DMA overlaps this pass)
            self.dyt_ring.append(self.dyt_ring.pop(0))
            self.dyt = self.dyt_ring[0]

    def _dyt_by_dma(self, b, d0, h0, cd, ch, cols=None):
        """``dw_dyt_dma``: the dy^T [rows, W, C_out] of row chunk (d0, h0, cd, ch) of batch b onto partitions
        [0, cd*ch) straight from dy in HBM (src [co, W, rows] -> dst [rows, W, co]), per C_out tile and run of
        consecutive flattened rows (``xt_rows.dyt_runs``); ``cols``: only output columns [w0, w1)."""
        w0, w1 = cols if cols is not None else (0, self.ctx.g.axes[2].o)
        for co0, co_sz in self.co_tiles:
            for p0, r0, n in dyt_runs(self.ctx.g.out_size[1], d0, h0, cd, ch):
                src = self.dy_rows[b, co0:co0 + co_sz, r0:r0 + n, w0:w1]
                nisa.dma_transpose(dst=self.dyt[p0:p0 + n, w0:w1, co0:co0 + co_sz],
                                   src=src.permute((0, 2, 1)))

    def _rows_pass(self, b, box_d, box_h, cd, ch):
        """Row mode, the x^T and matmuls of the row chunk (cd x ch rows from (box_d[0], box_h[0])) of batch
        ``b`` whose dy^T is on partitions [0, cd*ch) of ``dyt``."""
        ctx, g, plan = self.ctx, self.ctx.g, self.ctx.plan
        nrows = cd * ch
        ax = g.axes
        kd_n, kh_n, kw_n = g.kernel
        bank = 2048 // g.dtype_bytes
        gk = plan.dw_tap_group
        chunk = plan.dw_co_chunk
        n_co = len(self.co_tiles)
        # dw_head_split: this chunk's dy^T is not issued yet; db's ones-vector matmuls (which read all of it)
        # then run after the first pair's matmuls, so that the PE starts on the first piece
        head, self._head_dyt = self._head_dyt, None
        db_columns = [(nrows, w) for w in range(ax[2].o)]
        if head is None:
            self._db(db_columns)
        for ci0, ci_sz in self.ci_tiles:
            if self.xt_dma is None:
                xb, ext = self._load_x(b, box_d, box_h, ci0, ci_sz)
                xw = ext[2]
            else:
                xb, xw = None, self.xt_dma.xw
            cols = max(1, bank // ci_sz)
            t_lo, t_hi = self.span
            pairs = [(kd, kh) for kd in range(kd_n) for kh in range(kh_n)   # the pairs of the span
                     if t_lo <= g.tap_index(kd, kh, 0) < t_hi]
            head_fills = []
            if head is not None:   # the head pairs first (one pair per bundle, no ones slot: dw_head_split_legal)
                pairs = head_pair_order(g, pairs, (box_d[0], box_h[0], cd, ch))
                # the first pair's fill carries the dy^T pieces, the next ones' only their own
                head_fills = [(head, True)] + [(head, False)] * (HEAD_PAIRS - 1)

            def stage(pair, xb=xb, ci0=ci0, ci_sz=ci_sz, xw=xw, cols=cols, nrows=nrows, cd=cd, ch=ch,
                      box_d=box_d, box_h=box_h, head_fills=head_fills):
                kd, kh = pair
                if head_fills and self.xt_dma is not None:   # the first pairs of the head pass
                    return self._head_fill(head_fills.pop(0), ci0, ci_sz, kd, kh)
                if self.xt_dma is not None:
                    return self.xt_dma.fill(b, ci0, ci_sz, box_d[0], box_h[0], cd, ch, kd, kh)
                xt = self.xt_pool.take()
                for c0 in range(0, xw, cols):
                    cn = min(cols, xw - c0)
                    pt = ctx.psum_t.take()
                    for ci_ in range(cn):
                        view = xb[:ci_sz, band_slices(kd * ax[0].r, cd, ax[0].s),
                                  band_slices(kh * ax[1].r, ch, ax[1].s), c0 + ci_]
                        nisa.nc_transpose(dst=pt[:nrows, ci_ * ci_sz:(ci_ + 1) * ci_sz], data=view)
                    ctx.evict.copy(xt[:nrows, c0:c0 + cn, :ci_sz], pt[:nrows, :cn * ci_sz])
                return xt

            # x-stationary: the bundles (index of the first pair in ``pairs``, pairs); each pair's bundle
            # (min: dw_head_split moves its head pairs first; its bundles are single pairs)
            first_pair = min((kd * kh_n + kh for kd, kh in pairs), default=0)
            bundles = ([(q - first_pair, n) for q, n in dw_xs_bundles(g, plan, self.span)] if self.xs
                       else [(k, 1) for k in range(len(pairs))])
            bundle_of = {k: (j, q0, n) for j, (q0, n) in enumerate(bundles) for k in range(q0, q0 + n)}
            bundle_tiles = {}
            # x^T by DMA: a bundle's pairs are filled together (transposes merged along kh) for tiny C_in
            merged = self.xs and self.xt_dma is not None and zero_by_memset(g, ci_sz)
            bundle_views = {}

            def stage_at(k, stage=stage, pairs=pairs, bundle_of=bundle_of, bundle_tiles=bundle_tiles, merged=merged,
                         bundle_views=bundle_views, ci0=ci0, ci_sz=ci_sz, cd=cd, ch=ch, box_d=box_d, box_h=box_h):
                """x-stationary: a bundle starts on a fresh tile of the ring."""
                j, q0, n = bundle_of[k]
                if self.xs and k == q0:
                    self.xt_pool.align()
                    # db_ones: the bundle of the ones chunk ends at the slot before the ones slot
                    self.xt_pool.k += self._ones_shift(self.ci_tiles.index((ci0, ci_sz)),
                                                       pairs[k][0] * kh_n + pairs[k][1], n)
                    if merged:
                        bundle_views[j] = self.xt_dma.fill_bundle(b, ci0, ci_sz, box_d[0], box_h[0], cd, ch,
                                                                  pairs[k:k + n])
                view = bundle_views[j][k - q0] if merged else stage(pairs[k])
                if self.xs:
                    bundle_tiles[j] = self.xt_pool.tile
                return view

            staged = [stage_at(0)] if pairs else []
            db_after = head is not None
            if head is not None:
                if not pairs:   # (no pair in the span: the dy^T still feeds db)
                    self._dyt_by_dma(*head)
                head = None
            if db_after and not pairs:
                self._db(db_columns)
            for pi, (kd, kh) in enumerate(pairs):
                if pi + 1 < len(pairs):
                    staged.append(stage_at(pi + 1))
                xt = staged[pi]
                staged[pi] = None
                if self.xs:
                    j, q0, n = bundle_of[pi]
                    if pi == q0 + n - 1:   # the bundle's x^T are all built
                        self._xs_rows(bundle_tiles.pop(j), nrows, pairs[q0][0] * kh_n + pairs[q0][1],
                                      n, self.ci_tiles.index((ci0, ci_sz)), ci_sz)
                        if db_after:
                            self._db(db_columns)
                            db_after = False
                    continue
                for k0 in range(0, kw_n, gk):
                    kn = min(gk, kw_n - k0)
                    n = kn * ci_sz
                    t0 = g.tap_index(kd, kh, k0)
                    for c0 in range(0, n_co, chunk):
                        cts = list(range(c0, min(n_co, c0 + chunk)))
                        accs = [self.acc_pool.take() for _ in cts]
                        for w in range(ax[2].o):
                            mv = xt[:nrows, band_slices(w * ax[2].s + k0 * ax[2].r, kn, ax[2].r), :ci_sz]
                            for a, c in enumerate(cts):
                                co0, co_sz = self.co_tiles[c]
                                nisa.nc_matmul(accs[a][:co_sz, :n], stationary=self.dyt[:nrows, w, co0:co0 + co_sz],
                                               moving=mv, accumulate=w > 0)
                        for a, c in enumerate(cts):
                            self._fold(c, t0, kn, ci0, ci_sz, accs[a][:self.co_tiles[c][1], :n])
        self.started = True

    def _head_fill(self, fill, ci0, ci_sz, kd, kh):
        """``dw_head_split``: a head pair's x^T by column pieces, the first one interleaved with the head
        chunk's dy^T pieces (``fill`` = (chunk, with dy^T))."""
        g = self.ctx.g
        (b, d0, h0, cd, ch), with_dyt = fill
        xd = self.xt_dma
        pieces = head_col_pieces(g, 0, g.axes[2].o, xd.c_lo, xd.c_hi, head_pieces(g, (d0, h0, cd, ch), kd, kh))

        def dyt(i):
            if with_dyt:
                self._dyt_by_dma(b, d0, h0, cd, ch, pieces[i][0])
        return xd.fill_pieces(b, ci0, ci_sz, d0, h0, cd, ch, kd, kh, [win for _w, win in pieces], dyt)

    def run_after_first(self):
        if self.after_first is not None:
            self.after_first()
            self.after_first = None

    def _run_prefetch(self, *engine):
        if self.prefetch is not None:
            self.prefetch(*engine)
            self.prefetch = None

    def _xs_banks(self, n_units):
        """The PSUM banks of one x-stationary accumulation group of ``n_units`` chunks."""
        per = dw_xs_per_bank(self.ctx.g)
        return [self.acc_pool.take() for _ in range(-(-n_units // per))]

    def _xs_matmul(self, banks, u, stationary, m, moving, accumulate):
        """dw[(tap, ci), co] of chunk ``u`` of the group += stationary.T @ moving (its slot of a bank)."""
        co = self.ctx.g.c_out
        per = dw_xs_per_bank(self.ctx.g)
        off = (u % per) * co
        nisa.nc_matmul(banks[u // per][:m, off:off + co], stationary=stationary, moving=moving,
                       accumulate=accumulate)

    def _ones_shift(self, ci, pair0, n_pairs):
        """db_ones: the slots a bundle of ``n_pairs`` pairs from flat pair ``pair0`` starts into its tile,
        so that its last pair sits just before the ones slot: for the ones chunk's bundle of C_in tile 0
        (a full bundle needs none), else 0."""
        if self.ones_chunk is None or ci != 0:
            return 0
        pair = self.ones_chunk[0] // self.ctx.g.axes[2].k
        return dw_xs_bundle(self.ctx.g, self.ctx.plan) - n_pairs if pair0 <= pair < pair0 + n_pairs else 0

    def _xs_rows(self, tile, nrows, pair0, n_pairs, ci, ci_sz):
        """Row mode, x-stationary, one bundle of (kd, kh) pairs whose x^T [rows, pairs, cols, ci] share
        ``tile``: the kw taps of output column w are adjacent x^T columns and the pairs a uniform stride
        apart, so a chunk x^T[rows, pairs, kw columns, ci] is one stationary (M = pairs x taps x ci);
        moving dy^T[rows, w, C_out]; accumulated over every column w in PSUM. db_ones: the ones chunk's
        stationary spans one slot more (the ones slot), its PSUM rows after its own hold db."""
        g = self.ctx.g
        ax = g.axes
        kw = ax[2].k
        chunks = dw_xs_row_chunks(g, self.ctx.plan, pair0, n_pairs)
        shift = self._ones_shift(ci, pair0, n_pairs)
        ones_t = self.ones_chunk[0] if self.ones_chunk is not None and ci == 0 else None
        per = dw_xs_per_bank(g) * (len(self.acc_pool.items) - 1)
        for b0 in range(0, len(chunks), per):
            batch = chunks[b0:b0 + per]
            banks = self._xs_banks(len(batch))
            for w in range(ax[2].o):
                for u, (t, nb, tn) in enumerate(batch):
                    q, k0 = t // kw - pair0 + shift, t % kw
                    nq = nb + (1 if t == ones_t else 0)
                    st = tile[:nrows, q:q + nq, band_slices(w * ax[2].s + k0 * ax[2].r, tn, ax[2].r), :ci_sz]
                    self._xs_matmul(banks, u, st, nq * tn * ci_sz, self.dyt[:nrows, w, :g.c_out], w > 0)
            self._xs_fold(banks, ci, ci_sz, batch, ones_t)

    def _xs_fold(self, banks, ci, ci_sz, chunks, ones_t=None):
        """Fold a group's PSUM accumulators into the x-stationary accumulator: per bank, consecutive
        chunks with the same tap count in one instruction (the db_ones chunk alone, with its db row)."""
        co = self.ctx.g.c_out
        base = ci * len(self.xs_chunks)
        alone = next((u for u, ch in enumerate(chunks) if ch[0] == ones_t), None)
        for b, u0, k, taps in dw_xs_fold_runs(chunks, dw_xs_per_bank(self.ctx.g), alone):
            a = base + self.xs_index[chunks[u0][0]]
            off = (u0 - b * dw_xs_per_bank(self.ctx.g)) * co
            rows = taps * ci_sz + (1 if u0 == alone else 0)
            dst = self.xacc[:rows, a * co:(a + k) * co]
            ps = banks[b][:rows, off:off + k * co]
            self._accumulate(dst, ps)

    def _finish_xs(self, pid, lnc):
        """x-stationary: (LNC2: exchange the fp32 partials, add this program's chunks,) cast each C_in
        tile once and store its chunks straight into dw (already [(tap, ci), co]: no transposes)."""
        ctx, g = self.ctx, self.ctx.g
        co = g.c_out
        n = len(self.xs_chunks)
        parts = min(PMAX, max(nb * tn for _t, nb, tn in self.xs_chunks) * self.ctx.plan.dw_ci_tile) if n else 1
        ones_row = None   # db_ones: db's row of the ones chunk's accumulator (C_in tile 0)
        if self.ones_chunk is not None:
            ones_row = self.ones_chunk[1] * self.ones_chunk[2] * self.ci_tiles[0][1]
            parts = max(parts, ones_row + 1)
        if not self.started:
            nisa.memset(self.xacc[:parts, :], 0.0, engine=nisa.engine.vector)
        lo, hi = 0, n
        if self.own_taps is None and lnc == 2:   # each program adds and stores its share of the chunks
            per = -(-n // lnc)
            lo, hi = min(n, pid * per), min(n, (pid + 1) * per)
            other = self._send_xacc(pid, parts)
            if hi > lo:
                for i in range(len(self.ci_tiles)):
                    mine = self.xacc[:parts, (i * n + lo) * co:(i * n + hi) * co]
                    nisa.tensor_tensor(dst=mine, data1=mine, data2=other[:parts, (i * n + lo) * co:(i * n + hi) * co],
                                       op=nl.add, engine=nisa.engine.vector)
        if hi <= lo:
            return
        if ones_row is not None and lo <= self.xs_index[self.ones_chunk[0]] < hi:
            # db = that row (this program's sum, LNC2: plus the other's, added above), cast by the DMA
            a = self.xs_index[self.ones_chunk[0]] * co
            nisa.dma_copy(dst=ctx.db.reshape((1, co)), src=self.xacc[ones_row:ones_row + 1, a:a + co])
        runs = xs_store_runs(self.xs_chunks[lo:hi])
        dw_flat = ctx.dw.reshape((g.taps, g.c_in, co))
        kw = g.axes[2].k
        dw_rows = ctx.dw.reshape((g.taps // kw, kw, g.c_in, co))   # [(kd, kh) pairs, kw, ci, co]
        cast_pool = None if self.direct else Pool(2, (PMAX, (hi - lo) * co), ctx.dtype, nl.sbuf, "dw_xcast")
        cast_engines = (nisa.engine.vector, nisa.engine.gpsimd)
        for i, (ci0, ci_sz) in enumerate(self.ci_tiles):
            src = self.xacc
            c0 = (i * n + lo) * co
            if cast_pool is not None:   # one cast copy of this C_in tile's chunks to the output dtype
                src = cast_pool.take()
                nisa.tensor_copy(dst=src[:parts, :(hi - lo) * co], src=self.xacc[:parts, c0:c0 + (hi - lo) * co],
                                 engine=cast_engines[i % 2])
                c0 = 0
            for k0, t0, nb, tn, single in runs:
                a = c0 + k0 * co
                if single:     # consecutive single-tap chunks: [ci, taps, C_out]
                    nisa.dma_copy(dst=dw_flat[t0:t0 + tn, ci0:ci0 + ci_sz, :].permute((1, 0, 2)),
                                  src=src[:ci_sz, a:a + tn * co])
                elif nb == 1:  # one chunk [(tap, ci), C_out] -> dw[t0:t0+tn, ci tile, :]
                    nisa.dma_copy(dst=dw_flat[t0:t0 + tn, ci0:ci0 + ci_sz, :], src=src[:tn * ci_sz, a:a + co])
                else:          # [(pair, kw tap, ci), C_out] -> dw[pairs, kw taps, ci tile, :]
                    q, k = t0 // kw, t0 % kw
                    nisa.dma_copy(dst=dw_rows[q:q + nb, k:k + tn, ci0:ci0 + ci_sz, :],
                                  src=src[:nb * tn * ci_sz, a:a + co])

    def _send_xacc(self, pid, parts):
        """x-stationary, LNC2 positions split: exchange the fp32 accumulator. Each program adds
        only its own share of the chunks (``_finish_xs``), so with one C_in tile it sends only the window
        of ceil(n/2) chunks that covers the other's share (program 0: the last ones, program 1: the first
        ones; both windows the same size, as sendrecv needs) and receives the other's partial of its own
        window, at the same columns (``xs_exchange_window``); else the whole accumulator."""
        other = nl.ndarray(self.xacc.shape, nl.float32, buffer=nl.sbuf, name="dw_other")
        win = xs_exchange_window(len(self.xs_chunks), len(self.ci_tiles))
        co = self.ctx.g.c_out
        if win is None:
            send = recv = (0, self.xacc.shape[1])
        else:
            n, per = win
            first, last = (0, per * co), ((n - per) * co, n * co)
            send, recv = (last, first) if pid == 0 else (first, last)
        nisa.sendrecv(src=self.xacc[:parts, send[0]:send[1]], dst=other[:parts, recv[0]:recv[1]],
                      send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        return other

    def _db(self, columns):
        """db += sum over the dy^T columns (npos, index) of this box: ones-vector matmuls on the PE
        (not with db_ones: dw's own matmuls sum them)."""
        if self.db_state is None or self.ones_chunk is not None:
            return
        for c, (co0, co_sz) in enumerate(self.co_tiles):
            for i, (npos, idx) in enumerate(columns):
                nisa.nc_matmul(self.db_ps[:co_sz, c:c + 1], stationary=self.dyt[:npos, idx, co0:co0 + co_sz],
                               moving=self.ones[:npos, :], accumulate=i > 0)
            self.db_state.add_psum(c, self.db_ps[:co_sz, c:c + 1])

    def _fold(self, c, t0, kn, ci0, ci_sz, ps):
        co_sz = self.co_tiles[c][1]
        a0 = t0 - self.span[0]
        dst = self.acc[c][:co_sz, a0:a0 + kn, ci0 - self.ci_lo:ci0 - self.ci_lo + ci_sz]
        self._accumulate(dst, ps)

    def _accumulate(self, dst, ps):
        """Fold a PSUM result into its accumulator: straight to the output dtype when direct, else
        copied the first time and added after."""
        if self.direct:
            self.ctx.evict.copy(dst, ps)
        elif self.started:
            nisa.tensor_tensor(dst=dst, data1=dst, data2=ps, op=nl.add, engine=nisa.engine.vector)
        else:
            nisa.tensor_copy(dst=dst, src=ps, engine=nisa.engine.vector)

    def finish(self, pid, lnc):
        """Combine the LNC partials, cast, transpose to [ci, co] and store this program's taps
        (x-stationary: ``_finish_xs``, no transposes)."""
        if self.xs:
            self._finish_xs(pid, lnc)
            return
        ctx, g = self.ctx, self.ctx.g
        if not self.started:
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                nisa.memset(self.acc[c][:co_sz, :, :], 0.0, engine=nisa.engine.vector)
        s0, s1 = self.span
        per = -(-self.n_span // lnc)
        t_lo, t_hi = min(s1, s0 + pid * per), min(s1, s0 + (pid + 1) * per)
        others = None
        if self.own_taps is not None:     # tap split: nothing to combine, store the taps of this pass
            t_lo, t_hi = s0, s1
        elif lnc == 2:   # each program adds (in its cast) and stores its half of this pass's taps
            others = self.exchanged[0] if self.exchanged else self._exchange_halves(pid)
        # cast a group of taps per C_out tile in one copy, so that the transposes of a whole group run
        # back to back on the PE (a per-tap cast would serialise cast -> transpose -> evict)
        group = cast_group(g, self.width)
        cast_pools = [Pool(3, (PMAX, group, self.width), ctx.dtype, nl.sbuf, f"dw_cast{c}_")
                      for c in range(len(self.co_tiles))]
        out_pool = Pool(dw_out_bufs(g, self.width), (PMAX, group, self.co_w), ctx.dtype, nl.sbuf, "dw_out")
        dw_flat = ctx.dw.reshape((g.taps, g.c_in, g.c_out))
        cast_engines = (nisa.engine.vector, nisa.engine.gpsimd)
        state = {"k": 0}

        def cast_group_at(t0):
            tn = min(group, t_hi - t0)
            if self.direct:   # already in the output dtype
                return [a[:, t0 - s0:t0 - s0 + tn, :] for a in self.acc]
            casts = []
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                cast = cast_pools[c].take()
                mine = self.acc[c][:co_sz, t0 - s0:t0 - s0 + tn, :]
                if others is not None:   # LNC2 positions split: the add with the other's partial is the cast
                    o0 = t0 - (s0 if pid == 0 else s1 - per)
                    nisa.tensor_tensor(dst=cast[:co_sz, :tn, :], data1=mine, data2=others[c][:co_sz, o0:o0 + tn, :],
                                       op=nl.add, engine=cast_engines[state["k"] % 2])
                else:
                    nisa.tensor_copy(dst=cast[:co_sz, :tn, :], src=mine, engine=cast_engines[state["k"] % 2])
                state["k"] += 1
                casts.append(cast)
            return casts

        starts = list(range(t_lo, t_hi, group))
        # the casts of group i+1 are issued before the transposes of group i (pipelined)
        pending = [cast_group_at(starts[0])] if starts else []
        for gi, t0 in enumerate(starts):
            tn = min(group, t_hi - t0)
            if gi + 1 < len(starts):
                pending.append(cast_group_at(starts[gi + 1]))
            casts = pending[gi]
            pending[gi] = None
            for ci0, ci_sz in [(self.ci_lo + c0, sz) for c0, sz in tiles(self.width, PMAX)]:
                out = out_pool.take()
                for t in range(t0, t0 + tn):
                    for g0, members, width in self.co_packs:
                        pt = ctx.psum_t.take()
                        for c, off, co_sz in members:
                            nisa.nc_transpose(dst=pt[:ci_sz, off:off + co_sz],
                                              data=casts[c][:co_sz, t - t0, ci0 - self.ci_lo:ci0 - self.ci_lo + ci_sz])
                        ctx.evict.copy(out[:ci_sz, t - t0, g0:g0 + width], pt[:ci_sz, :width])
                # one store per tap group: dw[t0:t0+tn, ci tile, this pass's C_out] seen as [ci, taps, C_out]
                nisa.dma_copy(dst=dw_flat[t0:t0 + tn, ci0:ci0 + ci_sz, self.co_lo:self.co_lo + self.co_w]
                              .permute((1, 0, 2)), src=out[:ci_sz, :tn, :self.co_w])

    def start_exchange(self, pid):
        """LNC2 positions split, finish deferred past dx: issue the exchange now (its DMA runs under dx's
        compute instead of stalling the in-order PE between dw and dx) and free the compute pools
        (SBUF and PSUM) for dx; ``finish`` adds, casts and stores after dx (not x-stationary: ``dw_defer_finish``)."""
        if not self.started:   # no box on this program: its partials are zero
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                nisa.memset(self.acc[c][:co_sz, :, :], 0.0, engine=nisa.engine.vector)
            self.started = True
        self.exchanged = (self._exchange_halves(pid),)
        self.x_pool = self.xt_pool = self.x_stage = self.dyt = self.acc_pool = self.xt_dma = None
        self.dyt_ring = None   # (the ring holds the dy^T tiles too: dropped with them, or they outlive dw)
        self.db_state = self.ones = self.db_ps = None

    def _exchange_halves(self, pid):
        """LNC2 positions split, a reduce-scatter: program 0 stores the first ceil(n/2) taps of the pass,
        program 1 the rest. Each sends only the window of ceil(n/2) taps that covers the other's half
        (program 0: the last ones, program 1: the first ones; both windows the same size, as sendrecv
        needs) and receives the other's partial of its own window. Fused (<= 2 C_out tiles): one receive
        buffer per C_out tile, returned for the casts to add; else one buffer reused per tile and added
        in place into this program's taps (returns None)."""
        g = self.ctx.g
        s0, s1 = self.span
        per = -(-self.n_span // 2)
        send = (s1 - per, s1) if pid == 0 else (s0, s0 + per)
        mine = (s0, s0 + per) if pid == 0 else (s1 - per, s1)
        t_lo, t_hi = (s0, s0 + per) if pid == 0 else (s0 + per, s1)   # the taps this program stores
        fused = dw_fused_exchange(g, self.ctx.plan)
        others = []
        for c, (_co0, co_sz) in enumerate(self.co_tiles):
            if fused or not others:
                others.append(nl.ndarray((PMAX, per, self.width), nl.float32, buffer=nl.sbuf, name=f"dw_other{c}"))
            other = others[-1]
            nisa.sendrecv(src=self.acc[c][:co_sz, send[0] - s0:send[1] - s0, :], dst=other[:co_sz, :, :],
                          send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
            if not fused and t_hi > t_lo:
                acc = self.acc[c][:co_sz, t_lo - s0:t_hi - s0, :]
                nisa.tensor_tensor(dst=acc, data1=acc, data2=other[:co_sz, t_lo - mine[0]:t_hi - mine[0], :],
                                   op=nl.add, engine=nisa.engine.vector)
        return others if fused else None


def _load_dy_box(ctx, buf, co0, co_sz, b, od, oh, ow=None):
    """dw's dy box [co, rows d, rows h, columns ow (default all W)]: in row mode one DMA per row chunk, so
    the first chunk's dy^T transposes start when it lands, not the whole box. (Two half transfers per
    chunk on <= 64 partitions were tried: no gain on unet3d/dilated_d2, stem_k377 +2 us.)"""
    g, plan = ctx.g, ctx.plan
    w0, w1 = ow if ow is not None else (0, g.axes[2].o)
    wo = w1 - w0
    nd, nh = od[1] - od[0], oh[1] - oh[0]
    if plan.dw_method is DwMethod.ROW_PACK:
        pieces = [((sd, sh), (cd, ch)) for (sd, sh, _z), (cd, ch, _o) in box_blocks((0, 0, 0), (nd, nh, 1), PMAX)]
    else:
        pieces = [((0, 0), (nd, nh))]
    for (sd, sh), (cd, ch) in pieces:
        nisa.dma_copy(dst=buf[:co_sz, sd:sd + cd, sh:sh + ch, :wo],
                      src=ctx.dy[b, co0:co0 + co_sz, od[0] + sd:od[0] + sd + cd, oh[0] + sh:oh[0] + sh + ch, w0:w1])


def between_chunks(g, plan):
    """dw-interleaved in row mode: each box of more than 128 rows runs as boxes of its <= 128-row chunks (the
    chunks ``_add_rows`` makes), so dx's bands interleave with every chunk's x^T transfers, not with a big
    box's burst of them."""
    return plan.dw_interleave and plan.dw_method is DwMethod.ROW_PACK and plan.dw_band[0] * plan.dw_band[1] > PMAX


def run_dw_streaming(ctx, pid, lnc, db_state, prefetch=None, after_first=None, before_last_finish=None):
    """dw streaming dy itself (per-gradient strategy): dy boxes loaded unpadded. Returns the state whose
    ``finish`` the caller runs after dx when the plan defers it (``dw_defer_finish``), else None.
    ``prefetch``: called once, at the start of the last box's last row chunk (dx^T's first band).
    ``after_first``: called once, when the first row chunk's loads are issued (dx's filters by DMA: they
    queue behind what the PE needs first, and still well before dw's stores).
    ``before_last_finish``: called once after the last pass's matmuls, before its finish (its stores)."""
    steps = dw_streaming_steps(ctx, pid, lnc, db_state, prefetch, after_first, before_last_finish)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def dw_streaming_steps(ctx, pid, lnc, db_state, prefetch=None, after_first=None, before_last_finish=None):
    """``run_dw_streaming`` as a generator that yields after each dw box, so that the caller can issue
    another section's work between the boxes (``Plan.dw_interleave``: dx's PE work covers dw's DMA
    waits); its return value is ``run_dw_streaming``'s."""
    g, plan = ctx.g, ctx.plan
    own = dw_own_taps(g, plan, pid)
    items = dw_program_items(g, plan, pid)
    if between_chunks(g, plan):
        items = [(b, (d0 + sd, d0 + sd + cd), (h0 + sh, h0 + sh + ch)) for b, (d0, d1), (h0, h1) in items
                 for (sd, sh, _z), (cd, ch, _one) in box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)]
    if own is not None and pid != dw_db_program(g, plan):
        db_state = None     # the tap split runs every position on both programs: db once, on the lighter one
    co_passes = dw_co_passes(g, plan)   # (dw_co_pass: C_out in passes of whole tiles, outermost)
    wo = dw_w_cols(g, plan)   # a box's W columns (W bands: per band, with the x columns its taps reach)
    w_bands = dw_w_bands(g, plan)
    # (dw_dyt_dma: no dy box; the row chunks' dy^T come straight from HBM)
    pools = [Pool(plan.dy_bufs, (PMAX, plan.dw_band[0], plan.dw_band[1], wo), ctx.dtype, nl.sbuf, f"dw_dy{c}_")
             for c in range(0 if plan.dw_dyt_dma else n_tiles(co_passes[0][1] - co_passes[0][0], PMAX))]
    # C_in ranges processed one after the other (dy streamed once per range) so the fp32
    # accumulators of one range fit SBUF
    ranges = [(c0, min(g.c_in, c0 + plan.dw_ci_range)) for c0 in range(0, g.c_in, plan.dw_ci_range)]
    # and, for big filters, tap passes (dy and x streamed once per pass): one pass's accumulators fit
    passes = [(co_range, ci_range, span) for co_range in co_passes for ci_range in ranges
              for span in dw_tap_passes(g, plan, pid)]
    yield len(passes) * len(items)   # the box count first (the caller paces the boxes by it)
    for k, (co_range, ci_range, span) in enumerate(passes):
        state = DwState(ctx, plan.dw_band, ci_range, direct=dw_direct(g, plan),
                        db_state=db_state if k == 0 else None, own_taps=own, taps=span,
                        head=k == 0, co_range=co_range)
        co_tiles = [(co_range[0] + c0, sz) for c0, sz in state.co_tiles]   # (the pass's tiles of dy)
        for i_item, (b, (d0, d1), (h0, h1)) in enumerate(items):
            if k == len(passes) - 1 and i_item == len(items) - 1:
                state.prefetch = prefetch
            if k == 0 and i_item == 0:
                state.after_first = after_first
            def load(item, ow, co_tiles=co_tiles):
                bb, (e0, e1), (f0, f1) = item
                out = []
                for c, (co0, co_sz) in enumerate(co_tiles if pools else ()):   # (dyT dma: no dy box)
                    buf = pools[c].take()
                    _load_dy_box(ctx, buf, co0, co_sz, bb, (e0, e1), (f0, f1), ow)
                    out.append(buf[:co_sz, :e1 - e0, :f1 - f0, :ow[1] - ow[0]])
                return out

            views = load(items[i_item], w_bands[0])
            for j, ow in enumerate(w_bands):   # (dw_w_band: each W band its own dy box and x band)
                nxt = (items[i_item], w_bands[j + 1]) if j + 1 < len(w_bands) else \
                    (items[i_item + 1], w_bands[0]) if i_item + 1 < len(items) else None
                if nxt is not None:
                    state.expect(*nxt[0], nxt[1])
                state.add_box(b, (d0, d1), (h0, h1), views if j == 0 else load(items[i_item], ow), ow)
            state.run_after_first()
            yield
        state.run_after_first()   # (no box at all)
        if dw_defer_finish(g, plan):   # one pass: the exchange starts now, the rest after dx
            state.start_exchange(pid)
            return state
        if k == len(passes) - 1 and before_last_finish is not None:
            before_last_finish()
        state.finish(pid, lnc)
        del state
    return None
