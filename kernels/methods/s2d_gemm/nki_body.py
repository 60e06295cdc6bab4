"""The space-to-depth GEMM method's NKI code: dx, dw and db of a stride == kernel convolution.

Uses only ``nki.language`` / ``nki.isa`` (plus the pure-Python spec beside it and the project's pool
helpers), so the same code runs on nkisim and on a NeuronCore. Loops and sizes come from ``spec``;
``design.md`` has the pseudocode.

Per row tile (<= 128 output rows (b, d_o, h_o) on the partitions):
- dy rows ``[co, rows * W_out]`` by DMA (contiguous); dy^T ``[rows, (w_o, co)]`` by PE transposes;
- (dw) x lines ``[rows, plane, K_h, W]`` by DMA: per row and plane one contiguous K_h x W block;
- dx: per dx chunk and output column w_o, PSUM ``[rows, chunk]`` = sum over C_out tiles of
  MM(stationary = dy[co, rows at w_o], moving = W^T[co, chunk]), evicted into the dx lines at w_o's
  K_w columns; each plane's lines stored by one DMA (contiguous K_h x W blocks again);
- dw: per accumulator (dw chunk of <= 128 patch elements, C_out block of <= 512), over the group's
  rows and every w_o: MM(stationary = x lines[rows, chunk at w_o], moving = dy^T[rows, w_o, block]);
- db: per C_out tile, a VectorE reduction of the dy rows.
"""
import nki.isa as nisa
import nki.language as nl

from ...nki_common import Evictor, Pool
from . import spec

_P = spec.PMAX


def run_s2d_gemm(g, opts, dy, x, filters, dx, dw, db, dtype, target, pid, lnc):
    """Program ``pid``'s share (its planes of dx and dw; db on program 0) of the three gradients."""
    p0, p1 = spec.program_planes(g, lnc, pid)
    if not p1 > p0 and not (db is not None and pid == 0):
        return
    run = _S2dPass(g, opts, (dy, x, filters, dx, dw, db), dtype, target, pid, lnc)
    rows_t = run.load_filter_rows() if run.do_dx else None
    run.load_group(0)
    if run.do_dx:
        run.transpose_filters(rows_t)
    run.alloc_accumulators()
    for k, grp in enumerate(run.grps):
        run.group(k, grp)
    if run.want_db:
        for c, (c0, cs) in enumerate(run.cot):
            nisa.dma_copy(dst=db[c0:c0 + cs], src=run.db_acc[:cs, c:c + 1])


class _S2dPass:
    """One program's sizes, buffers and filters; the group buffers are allocated here, the filters' and
    the accumulators' by the calls ``run_s2d_gemm`` makes in order."""

    def __init__(self, g, opts, tensors, dtype, target, pid, lnc):
        self.g, self.dtype, self.pid, self.lnc = g, dtype, pid, lnc
        self.dy, self.x, self.filters, self.dx, self.dw, self.db = tensors
        self.p0, self.p1 = p0, p1 = spec.program_planes(g, lnc, pid)
        has_kc = p1 > p0
        self.want_db = self.db is not None and pid == 0
        self.do_dx, self.do_dw = self.dx is not None and has_kc, self.dw is not None and has_kc
        self.kh, self.W, self.ow = g.axes[1].k, g.axes[2].n, g.axes[2].o
        self.cot = spec.co_tiles(g)
        self.grps = spec.groups(g, opts)
        self.gbufs = 1 if len(self.grps) == 1 else 2
        gt = min(opts.group_tiles, len(spec.row_tiles(g)))
        rows_max = max(t.rows for t in spec.row_tiles(g))
        self.evict = Evictor(target)
        self.bank_t = spec.transpose_bank(g)
        self.banks = spec.psum_budget(g, self.dx is not None, self.dw is not None)
        self.pt_pool = Pool(spec.T_PSUM_BUFS, (_P, self.bank_t), dtype, nl.psum, "s2d_pt") \
            if (self.do_dx or self.do_dw) else None
        self.dy_bufs = [nl.ndarray((_P, gt, len(self.cot), rows_max * self.ow), dtype, buffer=nl.sbuf,
                                   name=f"s2d_dy{i}") for i in range(self.gbufs)]
        self.xl_bufs = [nl.ndarray((_P, gt, p1 - p0, self.kh, self.W), dtype, buffer=nl.sbuf, name=f"s2d_x{i}")
                        for i in range(self.gbufs)] if self.do_dw else None
        self.dyt_bufs = [nl.ndarray((_P, gt, self.ow, g.c_out), dtype, buffer=nl.sbuf, name=f"s2d_dyt{i}")
                         for i in range(self.gbufs)] if self.do_dw else None
        self.chunks = self.wt = None
        self.db_acc = self.db_part = self.px_pool = self.dxp_pool = self.dw_state = None

    def load_group(self, k):
        """DMA the dy rows (and x lines) of group ``k`` into its buffer."""
        g, p0 = self.g, self.p0
        for slot, t in enumerate(self.grps[k]):
            buf = self.dy_bufs[k % self.gbufs]
            for c, (c0, cs) in enumerate(self.cot):
                nisa.dma_copy(dst=buf[:cs, slot, c, :t.rows * self.ow], src=_dy_rows(self.dy, g, t, c0, cs))
            if self.do_dw:
                for p in range(p0, self.p1):
                    nisa.dma_copy(dst=self.xl_bufs[k % self.gbufs][:t.rows, slot, p - p0, :, :],
                                  src=_lines(self.x, g, t, p))

    def load_filter_rows(self):
        """The filters' natural rows [kc, co] by DMA (transposed once the first group's loads are issued)."""
        g = self.g
        self.chunks = spec.dw_chunks(g, self.lnc, self.pid)
        rows_t = nl.ndarray((_P, len(self.chunks), g.c_out), self.dtype, buffer=nl.sbuf, name="s2d_wrows")
        for k, c in enumerate(self.chunks):
            nisa.dma_copy(dst=rows_t[:spec.chunk_size(g, c), k, :], src=_filter_rows(self.filters, g, c))
        return rows_t

    def transpose_filters(self, rows_t):
        """W^T [co, kc] by PE transposes of the rows (resident), pack-outer: each pack as soon as its rows land."""
        g, cot = self.g, self.cot
        self.wt = nl.ndarray((_P, len(cot), (self.p1 - self.p0) * spec.plane_size(g)), self.dtype,
                             buffer=nl.sbuf, name="s2d_wt")
        widths = [spec.chunk_size(g, c) for c in self.chunks]
        for pack in spec.bank_packs(widths, self.bank_t):
            for ci_, (c0, cs) in enumerate(cot):
                pt = self.pt_pool.take()
                off = 0
                for k in pack:
                    nisa.nc_transpose(dst=pt[:cs, off:off + widths[k]], data=rows_t[:widths[k], k, c0:c0 + cs])
                    off += widths[k]
                first = spec.chunk_offset(g, self.chunks[pack[0]], self.p0)
                self.evict.copy(self.wt[:cs, ci_, first:first + off], pt[:cs, :off])

    def alloc_accumulators(self):
        """db's fp32 sum, dx's PSUM and line pools, dw's accumulators."""
        g, n_co = self.g, len(self.cot)
        if self.want_db:
            self.db_acc = nl.ndarray((_P, n_co), nl.float32, buffer=nl.sbuf, name="s2d_db")
            self.db_part = Pool(2, (_P, 1), nl.float32, nl.sbuf, "s2d_dbp")
            nisa.memset(self.db_acc, 0.0, engine=nisa.engine.vector)
        if self.do_dx:
            self.px_pool = Pool(spec.DX_PSUM_BUFS, (_P, spec.MOVING_MAX), nl.float32, nl.psum, "s2d_px")
            unit_planes = max(u[0].np for u in spec.dx_units(g, 1, 0))
            self.dxp_pool = Pool(spec.DXP_BUFS, (_P, unit_planes, self.kh, self.W), self.dtype, nl.sbuf, "s2d_dxp")
        if self.do_dw:
            self.dw_state = _DwAcc(g, self.lnc, self.pid, self.dtype, self.banks["dw"], len(self.grps), self.evict)

    def group(self, k, grp):
        """Group ``k``: the next group's loads, then per row tile dy^T, dx and db; then the group's dw."""
        g, cot, slot_buf = self.g, self.cot, k % self.gbufs
        if k + 1 < len(self.grps):   # the next group's loads go ahead of this group's work (double buffer)
            self.load_group(k + 1)
        dy_t = self.dy_bufs[slot_buf]
        for slot, t in enumerate(grp):
            if self.do_dw:   # first: C_out tile by C_out tile as dy lands (dx needs all of it)
                _dy_transposes(g, t, dy_t, slot, self.dyt_bufs[slot_buf], cot, self.pt_pool, self.bank_t, self.evict)
            if self.do_dx:
                _dx_tile(g, t, dy_t, slot, self.wt, cot, self.px_pool, self.dxp_pool, self.evict, self.dx, self.lnc,
                         self.pid, self.p0)
            if self.want_db:   # after the tile's evictions on VectorE: the PE never waits behind these reductions
                for c, (_c0, cs) in enumerate(cot):
                    part = self.db_part.take()
                    nisa.tensor_reduce(dst=part[:cs, :], op=nl.add, data=dy_t[:cs, slot, c, :t.rows * self.ow],
                                       axis=(1,))
                    nisa.tensor_tensor(dst=self.db_acc[:cs, c:c + 1], data1=self.db_acc[:cs, c:c + 1],
                                       data2=part[:cs, :], op=nl.add, engine=nisa.engine.vector)
        if self.do_dw:
            self.dw_state.group(k, grp, self.xl_bufs[slot_buf], self.dyt_bufs[slot_buf], self.dw)


def _lines(t_hbm, g, t, p):
    """The HBM view of plane ``p``'s K_h x W blocks of row tile ``t`` in x or dx ``[B, C_in, D, H, W]``:
    one contiguous block per output row (b, d_o, h_o), rows b-major, then d_o."""
    kd, kh, _kw = g.kernel
    D, H, W = g.in_size
    ci, i = divmod(p, kd)
    offset = (((t.b * g.c_in + ci) * D + t.d0 * kd + i) * H + t.h0 * kh) * W
    return t_hbm.ap(pattern=spec.compact([[g.c_in * D * H * W, t.nb], [kd * H * W, t.nd], [kh * W, t.nh],
                                          [1, kh * W]]), offset=offset)


def _dy_rows(t_hbm, g, t, c0, cs):
    """The HBM view of dy ``[B, C_out, D_out, H_out, W_out]`` for C_out [c0, c0+cs) and the rows of tile
    ``t``: per channel its rows' W_out columns, b-major (contiguous per batch when the rows are whole)."""
    od, oh, ow = g.out_size
    offset = (((t.b * g.c_out + c0) * od + t.d0) * oh + t.h0) * ow
    return t_hbm.ap(pattern=spec.compact([[od * oh * ow, cs], [g.c_out * od * oh * ow, t.nb], [oh * ow, t.nd],
                                          [ow, t.nh], [1, ow]]), offset=offset)


def _filter_rows(t_hbm, g, c):
    """The HBM view of chunk ``c``'s filter rows ``[K_w lines x K_w, C_out]`` in filters or dw
    ``[K_d, K_h, K_w, C_in, C_out]``: consecutive (kd, kh, kw) taps of one c_in, C_out contiguous each."""
    kd, kh, kw = g.kernel
    ci, i = divmod(c.p0, kd)
    tap0 = (i * kh + c.j0) * kw
    return t_hbm.ap(pattern=[[g.c_in * g.c_out, c.nj * kw], [1, g.c_out]], offset=(tap0 * g.c_in + ci) * g.c_out)


def _dx_tile(g, t, dy_t, slot, wt, cot, px_pool, dxp_pool, evict, dx, lnc, pid, p0):
    """dx of row tile ``t``: per store unit, every chunk at every w_o into the unit's lines, then one
    store per plane."""
    kw = g.axes[2].k
    ow = g.axes[2].o
    rows = t.rows
    for unit in spec.dx_units(g, lnc, pid):
        lines = dxp_pool.take()
        for c in unit:
            n = spec.chunk_size(g, c)
            off = spec.chunk_offset(g, c, p0)
            for w_o in range(ow):
                ps = px_pool.take()
                for ci_, (_c0, cs) in enumerate(cot):
                    stat = dy_t[:cs, slot, ci_, w_o:w_o + (rows - 1) * ow + 1:ow]
                    nisa.nc_matmul(ps[:rows, :n], stationary=stat, moving=wt[:cs, ci_, off:off + n],
                                   accumulate=ci_ > 0)
                evict.copy(lines[:rows, :c.np, c.j0:c.j0 + c.nj, w_o * kw:(w_o + 1) * kw],
                           ps[:rows, :n].reshape((rows, c.np, c.nj, kw)))
        for q in range(unit[0].np):
            nisa.dma_copy(dst=_lines(dx, g, t, unit[0].p0 + q), src=lines[:rows, q, :, :])


def _dy_transposes(g, t, dy_t, slot, dyt, cot, pt_pool, bank_t, evict):
    """dy^T of row tile ``t``: ``[rows, w_o, co]`` by PE transposes of dy's w_o columns, C_out tile by
    C_out tile (each starts when its dy rows land), packed into PSUM banks, one eviction per bank."""
    ow = g.axes[2].o
    rows = t.rows
    for c, (c0, cs) in enumerate(cot):
        for pack in spec.bank_packs([cs] * ow, bank_t):
            pt = pt_pool.take()
            for k, w_o in enumerate(pack):
                nisa.nc_transpose(dst=pt[:rows, k * cs:(k + 1) * cs],
                                  data=dy_t[:cs, slot, c, w_o:w_o + (rows - 1) * ow + 1:ow])
            w0, nw = pack[0], len(pack)
            evict.copy(dyt[:rows, slot, w0:w0 + nw, c0:c0 + cs], pt[:rows, :nw * cs].reshape((rows, nw, cs)))


class _DwAcc:
    """dw's accumulators: PSUM sets over a group's rows and columns; across groups an fp32 SBUF sum."""

    def __init__(self, g, lnc, pid, dtype, banks, n_groups, evict):
        self.g, self.dtype, self.evict, self.n_groups = g, dtype, evict, n_groups
        self.p0 = spec.program_planes(g, lnc, pid)[0]
        self.chunks = spec.dw_chunks(g, lnc, pid)
        self.blocks = spec.co_blocks(g)
        self.sets = spec.acc_sets(g, lnc, pid, banks)
        self.ps = [nl.ndarray((_P, spec.MOVING_MAX), nl.float32, buffer=nl.psum, name=f"s2d_acc{i}")
                   for i in range(banks)]
        self.out = Pool(spec.DWO_BUFS, (_P, g.c_out), dtype, nl.sbuf, "s2d_dwo")
        self.acc = (nl.ndarray((_P, len(self.chunks), g.c_out), nl.float32, buffer=nl.sbuf, name="s2d_dw32")
                    if n_groups > 1 else None)

    def group(self, k, grp, xl, dyt, dw):
        g = self.g
        ow = g.axes[2].o
        kw = g.axes[2].k
        c_out = g.c_out
        last_group = k == self.n_groups - 1
        out = None   # a chunk's row of dw in the output dtype (its blocks may span two sets)
        half = spec.acc_half(len(self.ps))
        for si, aset in enumerate(self.sets):
            ps_set = self.ps[(si % 2) * half:(si % 2) * half + half] if len(self.ps) > 1 else self.ps
            first = True
            for slot, t in enumerate(grp):
                for w_o in range(ow):
                    for a, (ki, j) in enumerate(aset):
                        c = self.chunks[ki]
                        b0, bn = self.blocks[j]
                        stat = xl[:t.rows, slot, c.p0 - self.p0, c.j0:c.j0 + c.nj, w_o * kw:(w_o + 1) * kw]
                        nisa.nc_matmul(ps_set[a][:c.nj * kw, :bn], stationary=stat,
                                       moving=dyt[:t.rows, slot, w_o, b0:b0 + bn],
                                       accumulate=not first)
                    first = False
            for a, (ki, j) in enumerate(aset):
                c = self.chunks[ki]
                m = c.nj * kw
                b0, bn = self.blocks[j]
                ps = ps_set[a][:m, :bn]
                if self.acc is None:
                    if j == 0 or out is None:
                        out = self.out.take()
                    self.evict.copy(out[:m, b0:b0 + bn], ps)
                else:
                    acc = self.acc[:m, ki, b0:b0 + bn]
                    if k == 0:
                        nisa.tensor_copy(dst=acc, src=ps, engine=nisa.engine.vector)
                    else:
                        nisa.tensor_tensor(dst=acc, data1=acc, data2=ps, op=nl.add, engine=nisa.engine.vector)
                    if last_group:
                        if j == 0 or out is None:
                            out = self.out.take()
                        self.evict.copy(out[:m, b0:b0 + bn], acc)
                if j == len(self.blocks) - 1 and (self.acc is None or last_group):
                    nisa.dma_copy(dst=_filter_rows(dw, g, c), src=out[:m, :c_out])
