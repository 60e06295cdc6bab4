"""The small-extent dw method's NKI code: dw (and db folded on its dy^T) with every position resident.

Uses only ``nki.language`` / ``nki.isa`` (plus the pure-Python spec beside it and the project's pool and
eviction helpers), so the same code runs on nkisim and on a NeuronCore. Loops and sizes come from
``spec``; ``design.md`` has the pseudocode.

- x of every sample, zero-padded, and dy of every sample by a few DMAs (one per 128-channel tile);
- dy^T ``[positions, C_out]`` of every position tile by PE transposes, resident;
- per group of chunks: x^T ``[positions, chunk]`` by PE transposes of tap windows of the padded x (the
  next group's built before this group's matmuls), then per chunk and C_out block one PSUM accumulation
  group over every position tile: MM(stationary = x^T, moving = dy^T), evicted once into a store tile;
- db: a ones column stationary against each dy^T tile, accumulated in PSUM over every position tile.
"""
import nki.isa as nisa
import nki.language as nl

from ...nki_common import Evictor, Pool, memset_pieces
from . import spec

_P = spec.PMAX


def run_dw_small_extent(g, dy, x, dw, db, dtype, target, pid, lnc, after_loads=None):
    """Program ``pid``'s share of dw (its taps; db, when given, on program 0). ``after_loads``: called
    once x and dy are issued (the caller's next loads, e.g. dx's filters, queue behind them and land
    under dw's compute)."""
    cs = spec.chunks(g, lnc, pid)
    db_here = db is not None and pid == 0
    if not cs and not db_here:
        return
    od, oh, ow = g.out_size
    tiles = spec.pos_tiles(g)
    sizes = [t.size(ow) for t in tiles]
    cot = spec.co_tiles(g)
    bank = spec.transpose_bank(g)
    evict = Evictor(target)
    pt_pool = Pool(spec.T_PSUM_BUFS, (_P, bank), dtype, nl.psum, "dws_pt")
    xp = _load_x(g, x, dtype) if cs else None
    dyn = nl.ndarray((_P, len(cot), g.batch, od, oh, ow), dtype, buffer=nl.sbuf, name="dws_dy")
    for c, (c0, cw) in enumerate(cot):
        nisa.dma_copy(dst=dyn[:cw, c], src=dy.ap(pattern=[[od * oh * ow, cw], [g.c_out * od * oh * ow, g.batch],
                                                          [oh * ow, od], [ow, oh], [1, ow]],
                                                 offset=c0 * od * oh * ow))
    if after_loads is not None:
        after_loads()
    pipe = _Dw(g, cs, xp, tiles, sizes, dtype, pt_pool, evict) if cs else None
    if pipe is not None:   # the first x^T groups need x only: the PE builds them while dy lands
        pipe.prime()
    dyt = _dy_transposes(g, dyn, tiles, sizes, dtype, pt_pool, evict)
    if db_here:   # (its PSUM bank is released before dw's accumulators are allocated)
        _db(g, db, dyt, sizes, dtype, evict)
    if pipe is not None:
        pipe.run(dyt, dw)


def _dy_transposes(g, dyn, tiles, sizes, dtype, pt_pool, evict):
    """dy^T ``[positions, tile, C_out]`` of every position tile: PE transposes of the tile's dy window per
    C_out tile, packed per PSUM bank, one eviction per bank."""
    cot = spec.co_tiles(g)
    dyt = nl.ndarray((_P, len(tiles), g.c_out), dtype, buffer=nl.sbuf, name="dws_dyt")
    for t, tl in enumerate(tiles):
        for pack in spec.bank_packs([cw for _c0, cw in cot], spec.transpose_bank(g)):
            pt = pt_pool.take()
            off = 0
            for i in pack:
                _c0, cw = cot[i]
                nisa.nc_transpose(dst=pt[:sizes[t], off:off + cw],
                                  data=dyn[:cw, i, tl.b:tl.b + tl.nb, tl.d0:tl.d0 + tl.nd, tl.h0:tl.h0 + tl.nh, :])
                off += cw
            c0 = cot[pack[0]][0]
            evict.copy(dyt[:sizes[t], t, c0:c0 + off], pt[:sizes[t], :off])
    return dyt


def _load_x(g, x, dtype):
    """x of every sample in a zero-padded box ``[ci, C_in tile, b, d, h, w]``, one DMA per C_in tile:
    straight into the box, or (``spec.x_staged``: short rows) contiguously into a staging tile that GpSimd
    (otherwise idle here) places into the box."""
    D, H, W = g.in_size
    e = spec.x_extent(g)
    n = spec.x_loaded(g)
    lo = [a.lo for a in g.axes]
    n_ci = -(-g.c_in // _P)
    xp = nl.ndarray((_P, n_ci, g.batch, e[0], e[1], e[2]), dtype, buffer=nl.sbuf, name="dws_x")
    if spec.x_needs_zeros(g):   # the padding: zeroed once, the loads overwrite the interior
        memset_pieces(xp, 0.0, nisa.engine.gpsimd)
    if min(n) == 0:
        return xp
    staged = spec.x_staged(g)
    stage = nl.ndarray((_P, n_ci, g.batch, n[0], n[1], n[2]), dtype, buffer=nl.sbuf, name="dws_xs") if staged else None
    for c in range(n_ci):
        c0 = c * _P
        cw = min(_P, g.c_in - c0)
        src = x.ap(pattern=[[D * H * W, cw], [g.c_in * D * H * W, g.batch], [H * W, n[0]], [W, n[1]], [1, n[2]]],
                   offset=c0 * D * H * W)
        box = xp[:cw, c, :, lo[0]:lo[0] + n[0], lo[1]:lo[1] + n[1], lo[2]:lo[2] + n[2]]
        if staged:
            nisa.dma_copy(dst=stage[:cw, c], src=src)
            nisa.tensor_copy(dst=box, src=stage[:cw, c], engine=nisa.engine.gpsimd)
        else:
            nisa.dma_copy(dst=box, src=src)
    return xp


def _window(g, xp, s, tl):
    """Slot ``s``'s x window for position tile ``tl``: ``[cs, nb, nd, nh, W_out]`` of the padded x."""
    kd, kh, kw = g.tap_coords(s.tap)
    ad, ah, aw = g.axes
    ow = aw.o

    def axis(a, k, o0, n):
        start = o0 * a.s + k * a.r
        return slice(start, start + (n - 1) * a.s + 1, a.s)

    c = s.ci0 // _P
    ci = s.ci0 - c * _P
    return xp[ci:ci + s.cs, c, tl.b:tl.b + tl.nb, axis(ad, kd, tl.d0, tl.nd), axis(ah, kh, tl.h0, tl.nh),
              axis(aw, kw, 0, ow)]


def _db(g, db, dyt, sizes, dtype, evict):
    """db = ones^T @ dy^T, accumulated in PSUM over every position tile, one eviction per C_out block."""
    ones = nl.ndarray((_P, 1), dtype, buffer=nl.sbuf, name="dws_ones")
    nisa.memset(ones, 1.0, engine=nisa.engine.vector)
    ps = nl.ndarray((_P, spec.MOVING_MAX), nl.float32, buffer=nl.psum, name="dws_db_ps")
    out = nl.ndarray((1, g.c_out), dtype, buffer=nl.sbuf, name="dws_db")
    for b0, bn in spec.co_blocks(g):
        for t, n in enumerate(sizes):
            nisa.nc_matmul(ps[:1, :bn], stationary=ones[:n, :], moving=dyt[:n, t, b0:b0 + bn], accumulate=t > 0)
        evict.copy(out[:1, b0:b0 + bn], ps[:1, :bn])
    nisa.dma_copy(dst=db.ap(pattern=[[g.c_out, 1], [1, g.c_out]], offset=0), src=out[:1, :])


class _Dw:
    """Per group of chunks: x^T (built two groups ahead of the matmuls), then one PSUM accumulation
    group per (chunk, C_out block) over every position tile, evicted once into a store tile; each
    store unit (consecutive rows of dw) leaves by one DMA."""

    def __init__(self, g, cs, xp, tiles, sizes, dtype, pt_pool, evict):
        self.g, self.cs, self.xp, self.tiles, self.sizes = g, cs, xp, tiles, sizes
        self.dtype, self.pt_pool, self.evict = dtype, pt_pool, evict
        self.grps = spec.groups(g, cs)
        self.xt_pool = Pool(spec.XT_BUFS, (_P, spec.xt_cols(g)), dtype, nl.sbuf, "dws_xt")
        self.ahead = []

    def prime(self):
        self.ahead = [self.build(grp) for grp in self.grps[:2]]

    def build(self, grp):
        """x^T of the group's chunks for every position tile: SBUF ``[positions, (tile, chunk, m)]``."""
        g, cs, sizes = self.g, self.cs, self.sizes
        w = spec.group_width(cs, grp)
        xt = self.xt_pool.take()
        for t0, t1 in spec.xt_packs(g, w):
            pt = self.pt_pool.take()
            for t in range(t0, t1):
                off = (t - t0) * w
                for i in grp:
                    for s in cs[i].slots:
                        nisa.nc_transpose(dst=pt[:sizes[t], off:off + s.cs], data=_window(g, self.xp, s, self.tiles[t]))
                        off += s.cs
            for a, b in spec.equal_runs(sizes, t0, t1):
                self.evict.copy(xt[:sizes[a], a * w:b * w], pt[:sizes[a], (a - t0) * w:(b - t0) * w])
        return xt

    def run(self, dyt, dw):
        g, cs, grps = self.g, self.cs, self.grps
        blocks = spec.co_blocks(g)
        acc_pool = Pool(spec.psum_banks(False)["dw"], (_P, spec.MOVING_MAX), nl.float32, nl.psum, "dws_acc")
        st_pool = Pool(spec.STORE_BUFS, (_P, spec.STORE_CHUNKS, g.c_out), self.dtype, nl.sbuf, "dws_st")
        units = spec.stores(cs)
        unit_of = {i: (u, k) for u, st in enumerate(units) for k, i in enumerate(st)}
        stage = None
        for gi, grp in enumerate(grps):
            xt = self.ahead.pop(0)
            if gi + 2 < len(grps):   # its transposes run while this group's matmuls wait for nothing
                self.ahead.append(self.build(grps[gi + 2]))
            w = spec.group_width(cs, grp)
            col = 0
            for i in grp:
                m = cs[i].m
                u, k = unit_of[i]
                if k == 0:
                    stage = st_pool.take()
                for b0, bn in blocks:
                    acc = acc_pool.take()
                    for t, n in enumerate(self.sizes):
                        nisa.nc_matmul(acc[:m, :bn], stationary=xt[:n, t * w + col:t * w + col + m],
                                       moving=dyt[:n, t, b0:b0 + bn], accumulate=t > 0)
                    self.evict.copy(stage[:m, k, b0:b0 + bn], acc[:m, :bn])
                col += m
                if k == len(units[u]) - 1:
                    row = spec.chunk_row(g, cs[units[u][0]])
                    dst = dw.ap(pattern=[[g.c_out, m], [m * g.c_out, k + 1], [1, g.c_out]], offset=row * g.c_out)
                    nisa.dma_copy(dst=dst, src=stage[:m, :k + 1, :])
