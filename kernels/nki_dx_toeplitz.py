"""dx:toeplitz — output positions stacked on the PE's M axis with block-Toeplitz filters (tiny C_in).

See ``kernels/dx_toeplitz.py`` for the formulation; this module issues its instructions. The dy
bands are the gather method's zero-padded bands (``DyBands``); the filters are first transposed
to ``W^T [co, tap, ci]`` (``load_filters_t``) and then laid out, per (d, h) phase pair and kw tap,
on zero-padded tap grids ``Z[co, pair*K_w + kw, z_d, z_h, ci]`` so that every stationary is a window.
"""
from dataclasses import dataclass

import nki.isa as nisa
import nki.language as nl

from .dx_toeplitz import (
    QUADRANT,
    ZERO_SEED,
    ci_major,
    dy_pair_shift,
    expand_offsets,
    fast_grid,
    first_band_split,
    first_band_upper,
    first_block_expansion,
    grid_lines,
    grid_memset_split,
    offsets3,
    pair_copy_on_vector,
    pair_shifts,
    pair_steps,
    part_copy_on_engine,
    plane_groups,
    quad_copies,
    quad_legal,
    shifted_elems,
    split_runs,
    store_dmas,
    store_pattern,
    sub_offsets,
    toeplitz_work,
    w_mode_ok,
    w_mode_parts,
    w_track,
    z_shape,
    z_start,
    zq_pair_shift,
    zq_shape,
)
from .nki_common import BANK_FP32, PMAX, Pool, _contiguous, _zero_border, band_slices
from .nki_dx import DyBands
from .nki_filters import load_filters_t
from .schedule import box_blocks, tiles
from .spec.dx_options import filter_group, filters_by_dma


def load_toeplitz_filters(ctx):
    """Per C_out tile the tap grids Z [co, s_d*s_h*K_w, Z_d, Z_h, C_in] (zeros between and around taps)."""
    g, plan = ctx.g, ctx.plan
    ax = g.axes
    u, merge = plan.dx_toeplitz, plan.dx_toeplitz_merge
    w_t = load_filters_t(g, ctx.filters, [(0, g.c_in)], ctx.dtype, ctx.psum_t, ctx.evict, filter_group(g, plan),
                         by_dma=filters_by_dma(g, plan))
    uw = plan.dx_toeplitz_w
    shape = zq_shape(g, u, merge, uw) if uw else z_shape(g, u, merge)
    out = []
    # the program's start: the grid off GpSimd (see fast_grid), its taps and shifted copy on ScalarE
    fast = fast_grid(g, plan)
    tap_engine = nisa.engine.scalar if fast else nisa.engine.gpsimd
    for c, (_co0, co_sz) in enumerate(tiles(g.c_out, PMAX)):
        z = nl.ndarray((PMAX,) + shape, ctx.dtype, buffer=nl.sbuf, name=f"w_z{c}")
        # with K pairing the shifted copy lands on partitions C_out..2 C_out: zero them all
        parts = PMAX if plan.dx_toeplitz_pair >= 0 else co_sz
        free = shape[0] * shape[1] * shape[2] * shape[3]
        if fast:   # VectorE alone (GpSimd zeroes the first dy band's borders meanwhile)
            _zero_by_doubling(z, parts, free)
        else:      # GpSimd and VectorE each zero a part of the free axis
            f1 = grid_memset_split(free)
            nisa.memset(z.ap([[free, parts], [1, f1]], offset=0), 0.0, engine=nisa.engine.gpsimd)
            nisa.memset(z.ap([[free, parts], [1, free - f1]], offset=f1), 0.0, engine=nisa.engine.vector)
        w5 = w_t[c].reshape((PMAX, ax[0].k, ax[1].k, ax[2].k, g.c_in))
        zq = z.reshape((PMAX,) + shape[:3] + (shape[3] // g.c_in, g.c_in)) if uw else None
        for z0, ld, lh in grid_lines(g, merge):
            for kw in range(ax[2].k):
                src = w5[:co_sz, band_slices(ld.first_k, ld.count, ld.k_step),
                         band_slices(lh.first_k, lh.count, lh.k_step), kw, :]
                if uw:   # W mode: [line, z_w, z_d, z_h, ci]; the w taps on the merged w line
                    dst = zq[:co_sz, z0 // ax[2].k, uw - 1 + kw * ax[2].r,
                             band_slices(u[0] - 1, ld.count, ld.z_step), band_slices(u[1] - 1, lh.count, lh.z_step), :]
                else:
                    dst = z[:co_sz, z0 + kw, band_slices(u[0] - 1, ld.count, ld.z_step),
                            band_slices(u[1] - 1, lh.count, lh.z_step), :]
                nisa.tensor_copy(dst, src, engine=tap_engine)
        out.append(z)
    if plan.dx_toeplitz_pair >= 0:   # one C_out tile: its grids again, one row further along the axis
        row = shape[0] * shape[1] * shape[2] * shape[3]
        sh = (zq_pair_shift(g, u, merge, uw, plan.dx_toeplitz_pair) if uw
              else pair_shifts(g, u, (1, 1, 1), plan.dx_toeplitz_pair, merge)[1])
        _pair_copy(g, out[0].ap([[row, g.c_out], [1, row - sh]], offset=g.c_out * row + sh),
                   out[0].ap([[row, g.c_out], [1, row - sh]], offset=0), row - sh,
                   nisa.engine.scalar if fast else nisa.engine.vector)
    if plan.dx_toeplitz_quad:   # the quad copies of the grids on partitions 2 C_out..4 C_out
        row = shape[0] * shape[1] * shape[2] * shape[3]
        for start, _dy, sh, _engine in quad_copies(g, u, (1, 1, 1), merge):
            _part_copy(g, start, out[0].ap([[row, g.c_out], [1, row - sh]], offset=start * row + sh),
                       out[0].ap([[row, g.c_out], [1, row - sh]], offset=0), row - sh, nisa.engine.vector)
    return out


def _zero_by_doubling(z, parts, free):
    """Zero ``free`` elements per partition: one small memset, then copies of the zeroed prefix onto
    the next run (VectorE copies 2-byte SBUF data at 4x the memset's rate)."""
    done = min(free, ZERO_SEED)
    nisa.memset(z.ap([[free, parts], [1, done]], offset=0), 0.0, engine=nisa.engine.vector)
    while done < free:
        n = min(done, free - done)
        nisa.tensor_copy(z.ap([[free, parts], [1, n]], offset=done), z.ap([[free, parts], [1, n]], offset=0),
                         engine=nisa.engine.vector)
        done += n


def _pair_copy(g, dst, src, n, engine=nisa.engine.vector):
    """A copy from partitions 0..C_out to C_out..2 C_out: VectorE (or ``engine``) across halves /
    quadrants where the start-partition rules allow it, else an SBUF->SBUF DMA."""
    if pair_copy_on_vector(g, n):
        nisa.tensor_copy(dst, src, engine=engine)
    else:
        nisa.dma_copy(dst=dst, src=src)


def _part_copy(g, start, dst, src, n, engine):
    """A copy from partitions 0..C_out to ``start``..: ``engine`` where the start-partition rules allow it,
    else (or with ``engine`` None) an SBUF->SBUF DMA."""
    if engine is not None and part_copy_on_engine(g, start, n):
        nisa.tensor_copy(dst, src, engine=engine)
    else:
        nisa.dma_copy(dst=dst, src=src)


def _load_split(bands, item, parts, pair_axis):
    """``DyBands.load`` of one staged band of one C_out tile with its staging DMA and placement split
    into ``parts`` d-plane runs (the program's first band: a 64-partition DMA uses half the queues, so
    two run side by side, and the first run's placement starts while the rest still loads). With K
    pairing (``first_band_upper``) each run is also placed on partitions C_out.. one row back along
    the pairing axis: the band's shifted copy, built from the staging tile instead of a copy of the
    whole band after its placement. Returns (views, upper placed); None when the band is not staged."""
    g = bands.g
    b, bd, bh = item
    bw = bands.band_w
    ext = (bd.extent, bh.extent, bw.extent)
    o = g.out_size
    valid = [(max(bb.q0, 0), min(bb.q1, o[a])) for a, bb in enumerate((bd, bh, bw))]
    lo = [max(v0 - bb.q0, 0) for (v0, _v1), bb in zip(valid, (bd, bh, bw))]
    hi = [max(v1 - bb.q0, lo[a]) for a, ((_v0, v1), bb) in enumerate(zip(valid, (bd, bh, bw)))]
    if (len(bands.co_tiles) != 1 or bands.stage is None or min(ext) <= 0 or any(h <= l for l, h in zip(lo, hi))
            or _contiguous(ext, lo, hi)):
        return None
    co_sz = bands.co_tiles[0][1]
    upper = first_band_upper(g, pair_axis, ext, bands.ext, lo)
    buf = bands.pools[0].take()
    # the borders of both copies (the shifted copy's interior is one row back along the pair axis:
    # its slab after the interior starts one row earlier; the placements overwrite what is zeroed twice)
    _zero_border(buf, 2 * co_sz if upper else co_sz, ext, lo,
                 [h - (1 if upper and a == pair_axis else 0) for a, h in enumerate(hi)], axes=(1, 2, 0))
    stage = bands.stage.take()
    n1, n2 = hi[1] - lo[1], hi[2] - lo[2]
    back = [1 if upper and a == pair_axis else 0 for a in range(3)]
    runs = split_runs(lo[0], hi[0], parts)

    def flat(d0, d1):
        return (d0 - lo[0]) * n1 * n2, (d1 - lo[0]) * n1 * n2

    def place_upper(d0, d1):
        f0, f1 = flat(d0, d1)
        nisa.tensor_copy(dst=buf[co_sz:2 * co_sz, d0 - back[0]:d1 - back[0], lo[1] - back[1]:hi[1] - back[1],
                                 lo[2] - back[2]:hi[2] - back[2]],
                         src=stage[:co_sz, f0:f1], engine=nisa.engine.vector)

    for i, (d0, d1) in enumerate(runs):
        f0, f1 = flat(d0, d1)
        src = bands.dy[b, :co_sz, valid[0][0] + d0 - lo[0]:valid[0][0] + d1 - lo[0], valid[1][0]:valid[1][1],
                       valid[2][0]:valid[2][1]]
        nisa.dma_copy(dst=stage[:co_sz, f0:f1], src=src)
        if upper and i == len(runs) - 1:
            # the earlier runs' shifted copies first: the first (unpaired) matmuls need only the lower
            # copy of the first planes, and the last run lands last
            for r in runs[:-1]:
                place_upper(*r)
        nisa.tensor_copy(dst=buf[:co_sz, d0:d1, lo[1]:hi[1], lo[2]:hi[2]], src=stage[:co_sz, f0:f1],
                         engine=nisa.engine.vector)
    if upper:
        place_upper(*runs[-1])
    return [buf[:co_sz, :ext[0], :ext[1], :ext[2]]], upper


def _load(bands, g, u, merge, pair_axis, item, split=0, quad=False):
    """The dy band of ``item`` (one view per C_out tile) and, with K pairing, the view of both copies
    ([2 C_out, ...]: the copy on partitions C_out.. is shifted by one row along the pairing axis); with
    K quads of all four ([4 C_out, ...]: partitions 2 C_out.. and 3 C_out.. hold the band one row further
    along h, and along d and h)."""
    got = _load_split(bands, item, split, pair_axis) if split else None
    bufs, placed = got if got is not None else (bands.load(*item), False)
    if bufs is None or pair_axis < 0:
        return bufs, None
    pool = bands.pools[0]
    ten = pool.items[(pool.next - 1) % len(pool.items)]   # the buffer bands.load just took
    ext = tuple(bufs[0].shape[1:])
    row = bands.ext[0] * bands.ext[1] * bands.ext[2]
    sh = dy_pair_shift(bands.ext, pair_axis)
    n = shifted_elems(bands.ext, ext, sh)
    if n > 0 and not placed:
        _pair_copy(g, ten.ap([[row, g.c_out], [1, n]], offset=g.c_out * row), ten.ap([[row, g.c_out], [1, n]], offset=sh), n)
    if not quad:
        return bufs, ten[:2 * g.c_out, :ext[0], :ext[1], :ext[2]]
    engines = {"vector": nisa.engine.vector, "gpsimd": nisa.engine.gpsimd, "dma": None}
    for start, sh, _z, engine in quad_copies(g, u, bands.ext, merge):
        n = shifted_elems(bands.ext, ext, sh)
        if n > 0:
            _part_copy(g, start, ten.ap([[row, g.c_out], [1, n]], offset=start * row),
                       ten.ap([[row, g.c_out], [1, n]], offset=sh), n, engines[engine])
    return bufs, ten[:4 * g.c_out, :ext[0], :ext[1], :ext[2]]


def run_dx_toeplitz(ctx, items, on_band=None, first_filters=None, between=None):
    """dx for the (batch, D band, H band) ``items`` of this program (``on_band`` sees each dy band once)."""
    g, plan = ctx.g, ctx.plan
    tp = _ToeplitzPass(ctx, first_filters)
    # the dy band of the next item loads (DMA, and its placement on VectorE, an in-order engine)
    # before this item's evictions: the PE does not wait for it at the item boundary. The first band
    # is issued before the filters, whose many small DMAs would otherwise queue ahead of it.
    ahead = plan.dy_bufs >= 2
    pending = tp.load(items[0], first_band_split(g, plan)) if (ahead and items) else None
    if tp.z is None:
        tp.z = load_toeplitz_filters(ctx)
    for idx, (b, bd, bh) in enumerate(items):
        if between is not None:   # another section's step (dw_interleave), ahead of this item's matmuls
            between(idx)
        bufs, both = pending if ahead else tp.load((b, bd, bh))
        if on_band is not None:
            on_band(b, bd, bh, tp.bands.band_w, bufs)
        if ahead and idx + 1 < len(items):   # after dw's share of this band (shared-dy), before dx's
            pending = tp.load(items[idx + 1])
        tp.item(idx, b, _Band(bufs, both, bd, bh, tp.bands.band_w))


@dataclass(frozen=True)
class _Band:
    """One item's loaded dy band: the tiles per C_out tile, the stacked copies (``both``: pairs / quads
    on the contraction) and the D / H / W bands."""

    bufs: list
    both: object
    bd: object
    bh: object
    bw: object


class _ToeplitzPass:
    """The dy band ring, plane and PSUM pools (allocated here, in this order), the Toeplitz filters
    ``z`` and the per-item work of one program's dx."""

    def __init__(self, ctx, first_filters):
        g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
        self.ctx, self.g, self.plan = ctx, g, plan
        self.u, self.merge = plan.dx_toeplitz, plan.dx_toeplitz_merge
        self.co_tiles = tiles(g.c_out, PMAX)
        self.bands = DyBands(g, ctx.dy, plan, dtype)
        pg = plane_groups(g, plan.dx_band, self.u, self.merge)
        self.plane_pool = Pool(2, (PMAX, pg[0], pg[1], g.axes[2].n), dtype, nl.sbuf, "dx_tplane")
        self.acc_pool = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_dxt")
        self.z = first_filters.pop() if first_filters else None
        self.pk, self.quad = plan.dx_toeplitz_pair, plan.dx_toeplitz_quad
        if self.quad and not quad_legal(g, self.u, self.merge, self.pk, plan.dx_toeplitz_w):
            raise ValueError(f"dx:toeplitz K quads (U={self.u}, K pairs axis {self.pk}, U_w={plan.dx_toeplitz_w}): "
                             f"need K pairs along d (axis 0), no W on M, 4 C_out <= {PMAX} (C_out {g.c_out}) "
                             f"and an h offset pair")

    def load(self, item, split=0):
        """One item's dy band and its stacked copies (``_load``)."""
        return _load(self.bands, self.g, self.u, self.merge, self.pk, item, split, self.quad)

    def item(self, idx, b, band):
        """The track pairs of one item: each into a plane, stored."""
        g, plan, u = self.g, self.plan, self.u
        work = toeplitz_work(g, (band.bd, band.bh, band.bw), u, self.merge)
        first_pair = work[0] if work else None
        for pair in work:
            plane = self.plane_pool.take()
            if plan.dx_toeplitz_w:
                expand = first_block_expansion(g, plan.target, u, self.merge, plan.dx_toeplitz_w, self.pk,
                                               self.bands.ext, band.bd, band.bh)[0] \
                    if idx == 0 and pair is first_pair else 0
                _pair_w_mode(self.ctx, pair, plane, self.z, band.bufs, band.both, band.bd, band.bh, band.bw,
                             self.acc_pool, expand)
            else:
                self._pair_h_mode(pair, plane, band)
            _store_pair(self.ctx, g, u, b, pair, plane)

    def _pair_h_mode(self, pair, plane, band):
        """One track pair, positions on the moving side: per sub-box and W phase, its blocks (zeros where
        no offset or tap reaches)."""
        g, ax = self.g, self.g.axes
        W = ax[2].n
        for sub in pair.subs:
            m = sub.m(g.c_in)
            (g0d, g0h), (gd, gh), _u = sub.g0, sub.groups, sub.u
            region = (slice(g0d, g0d + gd), slice(g0h, g0h + gh))
            offs = sub_offsets(pair, sub, self.pk, self.quad)
            if not offs:
                nisa.memset(plane[:m, region[0], region[1], :W], 0.0, engine=nisa.engine.gpsimd)
                continue
            for wp in pair.wphases:
                iw0 = ax[2].i_of_j(wp.j0, wp.pw)
                if not wp.taps:
                    nisa.memset(plane[:m, region[0], region[1], band_slices(iw0, wp.j1 - wp.j0, ax[2].s)], 0.0,
                                engine=nisa.engine.gpsimd)
                    continue
                for start, size in box_blocks((0, 0, wp.j0), (gd, gh, wp.j1), BANK_FP32):
                    self._h_block(pair, sub, wp, offs, (start, size), plane, band)

    def _h_block(self, pair, sub, wp, offs, block, plane, band):
        """One block of a sub-box's W phase: every (offset, tap, C_out tile) matmul into a PSUM bank,
        evicted into the plane."""
        g, ax, u = self.g, self.g.axes, self.u
        (md, mh, jw), (nd, nh, nw) = block
        m, n = sub.m(g.c_in), nd * nh * nw
        (g0d, g0h), _groups, (ud, uh) = sub.g0, sub.groups, sub.u
        td, th = pair.tracks
        ld, lh = pair.lines
        cmaj = ci_major(g, sub)
        pair_z = pair.z_line(g, self.merge)
        ps = self.acc_pool.take()
        # single offsets first, then pairs, then quads: each waits for fewer band copies
        steps = [(dd, dh, cp, kw, c) for dd, dh, cp in sorted(offs, key=lambda o: o[-1])
                 for kw in wp.taps for c in range(len(self.co_tiles))]
        for si, (dd, dh, cp, kw, c) in enumerate(steps):
            # a pair (quad): two (four) band copies and grid copies, K = 2 (4) C_out
            k = cp * g.c_out if cp > 1 else self.co_tiles[c][1]
            mov = band.both if cp > 1 else band.bufs[c]
            zd, zh = z_start(ld, u[0], dd), z_start(lh, u[1], dh)
            qd = td.q0 + td.q_step(u[0]) * (g0d + md) + dd - band.bd.q0
            qh = th.q0 + th.q_step(u[1]) * (g0h + mh) + dh - band.bh.q0
            qw = jw - ax[2].tap_shift(kw, wp.pw) - band.bw.q0
            nisa.nc_matmul(ps[:m, :n],
                           stationary=self.z[c][:k, pair_z + kw, zd:zd + ud, zh:zh + uh, :]
                           .permute((0, 3, 1, 2) if cmaj else (0, 1, 2, 3)),
                           moving=mov[:k, band_slices(qd, nd, td.q_step(u[0])),
                                      band_slices(qh, nh, th.q_step(u[1])),
                                      qw:qw + nw],
                           accumulate=si > 0)
        self.ctx.evict.copy(plane[:m, g0d + md:g0d + md + nd, g0h + mh:g0h + mh + nh,
                                  band_slices(ax[2].i_of_j(jw, wp.pw), nw, ax[2].s)], ps[:m, :n])


def _store_pair(ctx, g, u, b, pair, plane):
    """The plane of one track pair to dx: per sub-box one DMA per channel (ci-major partitions) or per
    u_d (u-major), to the strided rows of dx (an HBM pattern in the partitions' row-major order)."""
    ax = g.axes
    W, H, D = ax[2].n, ax[1].n, ax[0].n
    td, th = pair.tracks
    steps = pair_steps(pair)
    for sub in pair.subs:
        (g0d, g0h), (gd, gh), (ud, uh) = sub.g0, sub.groups, sub.u
        i_d = td.i0 + td.i_step * u[0] * g0d
        i_h = th.i0 + th.i_step * u[1] * g0h
        pattern = store_pattern(g, u, sub, steps)
        for k in range(store_dmas(g, sub)):
            if ci_major(g, sub):   # channel k: partitions [k U_d' U_h', (k+1) U_d' U_h')
                p0, parts, offset = k * ud * uh, ud * uh, (((b * g.c_in + k) * D + i_d) * H + i_h) * W
            else:                  # u_d = k: partitions [k U_h' C, (k+1) U_h' C)
                p0, parts = k * uh * g.c_in, uh * g.c_in
                offset = ((b * g.c_in * D + i_d + k * td.i_step) * H + i_h) * W
            nisa.dma_copy(dst=ctx.dx.ap(pattern, offset=offset),
                          src=plane[p0:p0 + parts, g0d:g0d + gd, g0h:g0h + gh, :W])


def _pair_w_mode(ctx, pair, plane, z, bufs, both, bd, bh, bw, acc_pool, expand=0):
    """One track pair with U_w w positions on M, one PSUM quadrant each (``dx_toeplitz_w``): per block
    the matmuls of every (delta_d, delta_h, delta_w) window, then one eviction per quadrant to the
    plane's partitions 0..U_h C_in, w positions strided by U_w. The first block splits ``expand`` of
    its pairs into unpaired matmuls (the program's first band: they run during its shifted copy)."""
    g, plan = ctx.g, ctx.plan
    ax = g.axes
    u, uw, pk = plan.dx_toeplitz, plan.dx_toeplitz_w, plan.dx_toeplitz_pair
    if not w_mode_ok(g, u, uw):
        raise ValueError(f"dx:toeplitz U={u}, U_w={uw}: W on M needs U_d 1, U_h C_in <= {QUADRANT}, "
                         f"2 <= U_w <= {PMAX // QUADRANT} and U_w a multiple of the W stride {ax[2].s}")
    co_tiles = tiles(g.c_out, PMAX)
    td, th = pair.tracks
    tw = w_track(ax[2], uw)
    zs = zq_shape(g, u, plan.dx_toeplitz_merge, uw)
    row = zs[0] * zs[1] * zs[2] * zs[3]
    line = pair.z_line(g, plan.dx_toeplitz_merge) // ax[2].k
    for sub in pair.subs:
        (g0d, g0h), (gd, gh), (ud, uh) = sub.g0, sub.groups, sub.u
        r = uh * g.c_in
        for w_g0, gw, wu in w_mode_parts(g, uw):
            offs = offsets3(pair.lines + (tw.line,), (ud, uh, wu), pk) if pair.lines is not None else ()
            if not offs:
                nisa.memset(plane[:r, g0d:g0d + gd, g0h:g0h + gh, uw * w_g0:uw * w_g0 + gw * wu], 0.0,
                            engine=nisa.engine.gpsimd)
                continue
            ld, lh = pair.lines
            for (md, mh, mw), (nd, nh, nw) in box_blocks((0, 0, 0), (gd, gh, gw), BANK_FP32):
                n = nd * nh * nw
                ps = acc_pool.take()
                # unpaired offsets first: they do not wait for the band's shifted copy
                steps = [(dd, dh, dw, pr, c) for dd, dh, dw, pr in expand_offsets(offs, pk, expand)
                         for c in range(len(co_tiles))]
                expand = 0
                for si, (dd, dh, dw, pr, c) in enumerate(steps):
                    k = 2 * g.c_out if pr else co_tiles[c][1]
                    mov = both if pr else bufs[c]
                    zd, zh, zw = z_start(ld, u[0], dd), z_start(lh, u[1], dh), z_start(tw.line, uw, dw)
                    qd = td.q0 + td.q_step(u[0]) * (g0d + md) + dd - bd.q0
                    qh = th.q0 + th.q_step(u[1]) * (g0h + mh) + dh - bh.q0
                    qw = tw.q0 + tw.q_step(uw) * (w_g0 + mw) + dw - bw.q0
                    off = ((line * zs[1] + zw) * zs[2] + zd) * zs[3] + zh * g.c_in
                    nisa.nc_matmul(ps[:QUADRANT * wu, :n],
                                   stationary=z[c].ap([[row, k], [zs[2] * zs[3], wu], [1, QUADRANT]], offset=off),
                                   moving=mov[:k, band_slices(qd, nd, td.q_step(u[0])),
                                              band_slices(qh, nh, th.q_step(u[1])), band_slices(qw, nw, tw.q_step(uw))],
                                   accumulate=si > 0)
                w0 = uw * (w_g0 + mw)
                for j in range(wu):   # quadrant j: w positions w0 + j + U_w m
                    ctx.evict.copy(plane[:r, g0d + md:g0d + md + nd, g0h + mh:g0h + mh + nh, band_slices(w0 + j, nw, uw)],
                                   ps[QUADRANT * j:QUADRANT * j + r, :n])
