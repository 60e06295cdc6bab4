"""dx with positions on the stationary side (``dx^T``) and tap pairs on the contraction (stride 1).

Per band: the zero-padded dy band (``DyBands``) plus, with C_out <= 64, shifted copies on partitions
[co, 2co) (``dx_pairs.copy_shift``) so that one stationary AP over 2co partitions reads two taps'
windows. Per C_in tile (<= 512) and group of position blocks (<= 128 positions each, up to
512 // ci of them in one PSUM bank): every matmul step of ``dx_pairs.tap_steps`` (and C_out tile)
accumulates dx^T [positions, ci] (stationary = dy window [K, positions], moving = [W_a^T; W_b^T]);
the bank is evicted (cast) into a dx^T tile, transposed back to [ci, positions] into the flat
band plane (``dma_transpose`` for 2-byte dtypes on NC-v3+, PE transposes otherwise) and the plane is
stored with one contiguous DMA.
"""
from dataclasses import dataclass

import nki.isa as nisa
import nki.language as nl

from .dx_pairs import (
    BANK_FP32,
    DXT_BUFS,
    block_groups,
    ci_tile_t,
    copies_made,
    copy_shift,
    phase_stage_elems,
    phase_tap_sets,
    tap_steps,
)
from .nki_common import PMAX, Pool, band_slices
from .schedule import dx_phase_work, tiles
from .spec.dx_options import filters_by_dma


def add_pair_filters(g, plan, w_t):
    """Stack W_b^T on partitions [co, 2co) of tap a's slot for every tap pair (SBUF->SBUF DMAs)."""
    co = g.c_out
    for taps in phase_tap_sets(g):
        for st in tap_steps(g, plan.dx_pair_copies, taps):
            if st.b is not None:
                nisa.dma_copy(dst=w_t[0][co:2 * co, g.tap_index(*st.a), :g.c_in],
                              src=w_t[0][0:co, g.tap_index(*st.b), :g.c_in])
    return w_t


def _last_taken(pool):
    """The tile ``pool.take()`` returned last (the whole tile, all partitions)."""
    return pool.items[(pool.next - 1) % len(pool.items)]


def _flat(tile):
    shape = tile.shape
    n = 1
    for s in shape[1:]:
        n *= s
    return tile.reshape((shape[0], n))


def _copy_halves(dst, p0, f0, src, n, co):
    """dst[p0:p0+co, f0:f0+n] = src[0:co, 0:n] in two DMAs over the two halves of the free range: a
    transfer over 64 partitions uses half the DMA engines, two in flight use them all."""
    half = n // 2 if n >= 2 else n
    for a, b in ((0, half), (half, n)):
        if b <= a:
            continue
        nisa.dma_copy(dst=dst[p0:p0 + co, f0 + a:f0 + b], src=src[0:co, a:b])


def _phase_view(plane, c_sz, rows, first, box, ax):
    """The positions of one stride phase in a flat band plane [c, nd*nh*W]: a strided 4-D view."""
    nd, nh, w = rows
    return plane[:c_sz, :nd * nh * w].reshape((c_sz, nd, nh, w))[
        :, band_slices(first[0], box[0], ax[0].s), band_slices(first[1], box[1], ax[1].s),
        band_slices(first[2], box[2], ax[2].s)]


class DxTBands:
    """The band side of dx^T: the dy band ring (``DyBands``) and the shifted copies' pools, and
    ``prepare`` (load a band, make its copies). Built ahead of ``run_dx_t`` when dx's first band is
    prefetched during dw (``plan.dx_prefetch``): then only these pools are live during dw."""

    def __init__(self, ctx, bands, on_band=None):
        g, plan = ctx.g, ctx.plan
        self.ctx, self.bands, self.on_band = ctx, bands, on_band
        self.n_copies = copies_made(g, plan.dx_pair_copies)
        self.tile_ext = bands.pools[0].items[0].shape[1:] if bands.pools else (0, 0, 0)
        self.extra = [Pool(plan.dy_bufs, (PMAX,) + tuple(self.tile_ext), ctx.dtype, nl.sbuf, f"dy_pair{k}_")
                      for k in range(1, self.n_copies)]

    def prepare(self, item, place_engine=None):
        """Load a band and make its shifted copies: issued one band ahead of the band's matmuls, so
        that its placement (VectorE, in order) and copies (DMA) do not wait behind the evictions.
        ``place_engine``: the engine of a staged band's placement (default VectorE)."""
        g, co, tile_ext, bands = self.ctx.g, self.ctx.g.c_out, self.tile_ext, self.bands
        b, bd, bh = item
        bufs = bands.load(b, bd, bh, place_engine=place_engine)
        if self.on_band is not None:
            self.on_band(b, bd, bh, bands.band_w, bufs)
        tiles_k = []
        if bufs is not None and self.n_copies:
            # copy 0 lives in the band tile (its upper partitions); the others in their own tiles
            band_tile = _last_taken(bands.pools[0])
            flat_band = _flat(band_tile)
            used = bd.extent * tile_ext[1] * tile_ext[2]
            for k in range(self.n_copies):
                sh = copy_shift(g, k, tuple(tile_ext))
                t = band_tile if k == 0 else self.extra[k - 1].take()
                if k:
                    _copy_halves(_flat(t), 0, 0, flat_band, used, co)
                if sh < used:
                    _copy_halves(_flat(t), co, sh, flat_band, used - sh, co)
                tiles_k.append(t)
        return item, bufs, tiles_k


def run_dx_t(ctx, items, bands, w_t, on_band=None, prepared=None):
    """dx of the (batch, D band, H band) ``items`` with dx^T accumulation (see the module docstring).

    ``prepared``: (DxTBands, the first item's ``prepare`` result) when the first band was prefetched."""
    side, first = prepared if prepared is not None else (DxTBands(ctx, bands, on_band), None)
    dx_pass = _DxTPass(ctx, side.bands, w_t)
    prepare = side.prepare
    items = list(items)
    # one band ahead needs two buffers per ring; with one, each band is prepared when its turn comes
    ahead = ctx.plan.dy_bufs >= 2
    nxt = first if first is not None else (prepare(items[0]) if items else None)
    for i in range(len(items)):
        if nxt is None:
            nxt = prepare(items[i])
        band = nxt
        nxt = prepare(items[i + 1]) if ahead and i + 1 < len(items) else None
        dx_pass.item(band, last=i == len(items) - 1)


@dataclass(frozen=True)
class _Band:
    """One prepared item: its batch and D / H bands, dy band tiles per C_out tile, shifted copies, the
    buffer's first rows (D, H, W) and the band plane's rows (D, H, W)."""

    b: int
    bd: object
    bh: object
    bufs: list
    tiles_k: list
    q0: tuple
    rows: tuple


@dataclass(frozen=True)
class _CiTile:
    """One C_in tile of an item: its planes (128-channel chunks), whether it is stored group by group
    (``progressive``) and the flat dx view with the band's first position."""

    ci0: int
    ci_sz: int
    planes: list
    progressive: bool
    dx_flat: object
    base: int


class _DxTPass:
    """The pools of one dx^T pass (allocated here, in this order) and the per-item work."""

    def __init__(self, ctx, bands, w_t):
        g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
        self.ctx, self.g, self.bands, self.w_t = ctx, g, bands, w_t
        self.co_tiles = tiles(g.c_out, PMAX)
        self.copies = plan.dx_pair_copies
        self.ci_t = ci_tile_t(g)
        self.slots = max(1, BANK_FP32 // self.ci_t)
        W = g.axes[2].n
        # one plane per 128-channel chunk of a C_in tile, double-buffered
        self.plane_pool = Pool(2 * len(tiles(self.ci_t, PMAX)), (PMAX, plan.dx_band[0] * plan.dx_band[1] * W),
                               dtype, nl.sbuf, "dx_plane_t")
        self.acc_pool = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_dxt")
        self.dxt_pool = Pool(DXT_BUFS, (PMAX, self.slots, self.ci_t), dtype, nl.sbuf, "dx_t")
        self.strided = any(a.s > 1 for a in g.axes)
        # strided: dx of one phase in phase order, before its strided placement into the plane
        self.stage_pool = Pool(2 * len(tiles(self.ci_t, PMAX)), (PMAX, phase_stage_elems(g, plan.dx_band)), dtype,
                               nl.sbuf, "dx_t_stage") if self.strided else None
        self.by_dma = filters_by_dma(g, plan)
        self.tbank = 2048 // g.dtype_bytes   # elements of one PSUM bank in the transpose dtype

    def item(self, prepared, last):
        """dx of one prepared item (``last``: the program's last, whose last plane is stored progressively)."""
        g, ax = self.g, self.g.axes
        (b, bd, bh), bufs, tiles_k = prepared
        rows = (bd.i1 - bd.i0, bh.i1 - bh.i0, ax[2].n)
        if bufs is None:   # no dy row reaches this band: dx is zero
            self._zero_item(b, bd, bh, rows)
            return
        band = _Band(b, bd, bh, bufs, tiles_k, (bd.q0, bh.q0, self.bands.band_w.q0), rows)
        work = dx_phase_work(g, (bd, bh, self.bands.band_w), with_blocks=False)
        ci_list = tiles(g.c_in, self.ci_t)
        for ci0, ci_sz in ci_list:
            planes = [(c0, c_sz, self.plane_pool.take()) for c0, c_sz in tiles(ci_sz, PMAX)]
            # the program's last plane: stored group by group as its dx^T lands (the kernel's tail
            # is then one group's transpose and store, not the whole plane's)
            progressive = (not self.strided and last and (ci0, ci_sz) == ci_list[-1] and rows[1] == ax[1].n)
            dx_flat = self.ctx.dx.reshape((g.batch, g.c_in, ax[0].n * ax[1].n * ax[2].n))
            ct = _CiTile(ci0, ci_sz, planes, progressive, dx_flat, bd.i0 * ax[1].n * ax[2].n)
            for pw in work:
                self._phase(band, ct, pw)
            for c0, c_sz, plane in planes if not progressive else ():
                nisa.dma_copy(dst=self.ctx.dx[b, ci0 + c0:ci0 + c0 + c_sz, bd.i0:bd.i1, bh.i0:bh.i1, :],
                              src=plane[:c_sz, :rows[0] * rows[1] * rows[2]])

    def _zero_item(self, b, bd, bh, rows):
        """An item no dy row reaches: zero planes stored."""
        n = rows[0] * rows[1] * rows[2]
        for ci0, ci_sz in tiles(self.g.c_in, PMAX):
            plane = self.plane_pool.take()
            nisa.memset(plane[:ci_sz, :n], 0.0, engine=nisa.engine.gpsimd)
            nisa.dma_copy(dst=self.ctx.dx[b, ci0:ci0 + ci_sz, bd.i0:bd.i1, bh.i0:bh.i1, :], src=plane[:ci_sz, :n])

    def _phase(self, band, ct, pw):
        """One stride phase of a C_in tile: its block groups' matmuls, evictions and transposes (strided:
        into a staging run, then placed into the plane)."""
        ax = self.g.axes
        box = tuple(pw.j1[a] - pw.j0[a] for a in range(3))
        # the phase's positions in the band plane: a (strided) view from its first input row
        first = [ax[a].i_of_j(pw.j0[a], pw.phases[a]) - (band.bd.i0, band.bh.i0, 0)[a] for a in range(3)]
        if not pw.taps:   # no tap reaches this phase: zeros
            for _c0, c_sz, plane in ct.planes:
                nisa.memset(_phase_view(plane, c_sz, band.rows, first, box, ax), 0.0, engine=nisa.engine.gpsimd)
            return
        steps = tap_steps(self.g, self.copies, pw.taps)
        mm = [(st, c) for st in steps for c in range(len(self.co_tiles))]
        # stride 1: the phase is the whole plane, dx^T goes straight into it; else into a
        # staging run (phase order) placed by one strided copy per channel chunk
        targets = [(c0, c_sz, plane if not self.strided else self.stage_pool.take()) for c0, c_sz, plane in ct.planes]
        for grp in block_groups(box, self.slots):
            ps = self.acc_pool.take()
            self._group_matmuls(band, ct, pw, grp, mm, ps)
            self._group_out(ct, grp, ps, targets)
            if ct.progressive:
                self._store_group(band, ct, grp, targets)
        if self.strided:
            npos = box[0] * box[1] * box[2]
            for (_c0, c_sz, plane), (_c, _s, stage) in zip(ct.planes, targets):
                # GpSimd: otherwise idle here; on VectorE it would queue the evictions behind it
                nisa.tensor_copy(_phase_view(plane, c_sz, band.rows, first, box, ax), stage[:c_sz, :npos],
                                 engine=nisa.engine.gpsimd)

    def _group_matmuls(self, band, ct, pw, grp, mm, ps):
        """dx^T of one block group into PSUM bank ``ps``: per block, every (tap step, C_out tile) of ``mm``."""
        g, ax, co = self.g, self.g.axes, self.g.c_out
        n, ci0, ci_sz = grp.n, ct.ci0, ct.ci_sz
        for k, (start, size) in enumerate(grp.blocks):
            nd, nh, nw = size
            j = [pw.j0[a] + start[a] for a in range(3)]
            for si, (st, c) in enumerate(mm):
                # tap a's dy window: o = j - tap_shift (buffer rows from q0)
                q = [j[a] - ax[a].tap_shift(st.a[a], pw.phases[a]) - band.q0[a] for a in range(3)]
                co_sz = self.co_tiles[c][1]
                if st.b is not None:   # tap a on [0, co), tap b on [co, 2co) of the copy
                    kk = 2 * co
                    stat = band.tiles_k[st.copy][0:kk, q[0]:q[0] + nd, q[1]:q[1] + nh, q[2]:q[2] + nw]
                else:
                    kk = co_sz
                    stat = band.bufs[c][:co_sz, q[0]:q[0] + nd, q[1]:q[1] + nh, q[2]:q[2] + nw]
                nisa.nc_matmul(ps[:n, k * ci_sz:(k + 1) * ci_sz], stationary=stat,
                               moving=self.w_t[c][:kk, g.tap_index(*st.a), ci0:ci0 + ci_sz],
                               accumulate=si > 0)

    def _group_out(self, ct, grp, ps, targets):
        """The group's bank evicted (cast) into a dx^T tile and transposed back into the targets."""
        n, nb, ci_sz = grp.n, len(grp.blocks), ct.ci_sz
        dxt = self.dxt_pool.take()
        self.ctx.evict.copy(dxt[:n, :nb, :ci_sz], ps[:n, :nb * ci_sz])
        for c0, c_sz, tgt in targets:
            if self.by_dma:
                nisa.dma_transpose(dst=tgt[:c_sz, grp.f0:grp.f0 + nb * n].reshape((c_sz, nb, n)),
                                   src=dxt[:n, :nb, c0:c0 + c_sz])
                continue
            per = max(1, self.tbank // n)   # blocks per PSUM transpose bank
            for k0 in range(0, nb, per):
                kn = min(per, nb - k0)
                pt = self.ctx.psum_t.take()
                for k in range(kn):
                    nisa.nc_transpose(dst=pt[:c_sz, k * n:(k + 1) * n], data=dxt[:n, k0 + k, c0:c0 + c_sz])
                f = grp.f0 + k0 * n
                self.ctx.evict.copy(tgt[:c_sz, f:f + kn * n], pt[:c_sz, :kn * n])

    def _store_group(self, band, ct, grp, targets):
        """The progressive plane's positions of one group, stored as they land."""
        f0, f1 = grp.f0, grp.f0 + len(grp.blocks) * grp.n
        for c0, c_sz, tgt in targets:
            nisa.dma_copy(dst=ct.dx_flat[band.b, ct.ci0 + c0:ct.ci0 + c0 + c_sz, ct.base + f0:ct.base + f1],
                          src=tgt[:c_sz, f0:f1])
