"""dx as a gather over a zero-padded dy band (one family for GEMM, stride 1 and stride phases).

For each band of input rows, dy rows the band needs are loaded once (all C_out tiles, C_out on
partitions) into a zero-padded buffer. For each C_in tile, stride phase and block of <= 512
positions of that phase, every contributing tap and every C_out tile accumulate into ONE PSUM bank
(stationary W_k^T [co, ci], moving = the dy window shifted by the tap, a unit-stride view); the
bank is evicted into the phase's positions of a dx band plane, which is stored contiguously.
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import (
    BANK_FP32,
    PMAX,
    Pool,
    band_slices,
    load_padded,
    load_padded_regions,
    packed_fill_shared,
    stage_padded,
)
from .nki_dx_dpairs import dpair_filters, run_dx_dpairs
from .nki_dx_t import DxTBands, add_pair_filters, run_dx_t
from .nki_filters import load_filters_block_diag, load_filters_t
from .schedule import axis_bands, axis_live, dx_packs, dx_phase_work, dx_stage_elems, live_phase_work, tiles
from .spec.dx_options import (
    dx_ci_split_on,
    dx_co_chunks,
    dx_co_resident,
    dx_dy_clip_legal,
    dx_last_by_blocks,
    dx_t_active,
    dx_w_bands,
    dx_w_cols,
    filter_group,
    filters_by_dma,
)
from .spec.items import _split


class DyBands:
    """Zero-padded dy band buffers (one per C_out tile), rotated ``bufs`` deep."""

    def __init__(self, g, dy, plan, dtype, zero=False):
        self.g = g
        self.dy = dy
        self.co_tiles = tiles(g.c_out, PMAX)
        bands_d = axis_bands(g.axes[0], plan.dx_band[0])
        bands_h = axis_bands(g.axes[1], plan.dx_band[1])
        # W bands (``dx_w_band``: each with the dy columns its inputs read), else one over all of W
        self.band_ws = dx_w_bands(g, plan)
        self.band_w = self.band_ws[0]
        # dx_dy_clip: each buffer holds only the rows the band's live taps read and its owned rows
        self.clip = dx_dy_clip_legal(g, plan)
        self.ext = tuple(max(self._clipped(a, b).extent for b in axis)
                         for a, axis in enumerate((bands_d, bands_h, self.band_ws)))
        self.pools = None
        if min(self.ext) > 0:   # (dx_co_chunk: one chunk's C_out tiles at a time)
            self.pools = [Pool(plan.dy_bufs, (PMAX,) + self.ext, dtype, nl.sbuf, f"dy_band{c}_", zero=zero)
                          for c in range(dx_co_resident(g, plan))]
        stage = dx_stage_elems(g, plan.dx_band, dx_w_cols(g, plan))
        self.stage = Pool(2, (PMAX, stage), dtype, nl.sbuf, "dy_stage") if stage else None

    def _clipped(self, a, bb):
        return axis_live(self.g.axes[a], bb)[0] if self.clip else bb

    def load(self, b, bd, bh, place_engine=None, bw=None, co=None, places=None):
        """Buffers [co, Ed, Eh, Ew] holding virtual dy rows [q0, q1) per axis (zeros outside dy; with
        ``dx_dy_clip`` the clipped band's rows, ``band_work``); ``place_engine``: the engine of a staged
        placement (default VectorE); ``bw``: the W band (default the first, all W unless dx runs in W
        bands); ``co``: [t0, t1) C_out tiles (default all); ``places``: a list that takes the staged
        placement copies as callables for the caller to issue later (a band loaded ahead), instead of
        issuing them."""
        bw = self.band_w if bw is None else bw
        bd, bh, bw = (self._clipped(a, x) for a, x in enumerate((bd, bh, bw)))
        ext = (bd.extent, bh.extent, bw.extent)
        if min(ext) <= 0:
            return None
        o = self.g.out_size
        valid = [(max(bb.q0, 0), min(bb.q1, o[a])) for a, bb in enumerate((bd, bh, bw))]
        empty = any(v1 <= v0 for v0, v1 in valid)
        out = []
        lo = [max(v0 - bb.q0, 0) for (v0, _v1), bb in zip(valid, (bd, bh, bw))]
        hi = [max(v1 - bb.q0, lo[a]) for a, ((_v0, v1), bb) in enumerate(zip(valid, (bd, bh, bw)))]
        t0, t1 = co if co is not None else (0, len(self.co_tiles))
        for c, (co0, co_sz) in enumerate(self.co_tiles[t0:t1]):
            buf = self.pools[c].take()
            src = None if empty else self.dy[b, co0:co0 + co_sz, valid[0][0]:valid[0][1], valid[1][0]:valid[1][1],
                                             valid[2][0]:valid[2][1]]
            if src is None:
                nisa.memset(buf[:co_sz, :ext[0], :ext[1], :ext[2]], 0.0, engine=nisa.engine.gpsimd)
                out.append(buf[:co_sz, :ext[0], :ext[1], :ext[2]])
            elif places is not None:
                view, place = stage_padded(buf, ext, lo, hi, src, self.stage, engine=place_engine)
                out.append(view)
                places.append(place)
            else:
                out.append(load_padded(buf, ext, lo, hi, src, self.stage, engine=place_engine))
        return out

    def load_regions(self, pack, pitch):
        """One buffer [128, Ed, Eh, Ew] with the dy band of pack item r at partitions r*pitch."""
        bw = self.band_w
        _b, bd, bh = pack[0]
        ext = (bd.extent, bh.extent, bw.extent)
        if min(ext) <= 0:
            return None
        buf = self.pools[0].take()
        o = self.g.out_size
        fills = []
        for b, bd_r, bh_r in pack:
            bands = (bd_r, bh_r, bw)
            valid = [(max(bb.q0, 0), min(bb.q1, o[a])) for a, bb in enumerate(bands)]
            lo = [max(v0 - bb.q0, 0) for (v0, _v1), bb in zip(valid, bands)]
            hi = [max(v1 - bb.q0, lo[a]) for a, ((_v0, v1), bb) in enumerate(zip(valid, bands))]
            empty = any(v1 <= v0 for v0, v1 in valid)
            src = None if empty else self.dy[b, :, valid[0][0]:valid[0][1], valid[1][0]:valid[1][1],
                                             valid[2][0]:valid[2][1]]
            fills.append((lo, hi, src))
        if packed_fill_shared(fills, len(pack) * pitch == PMAX and pitch == self.g.c_out):
            # every region has the same layout and they fill the partitions: one set of border
            # memsets and one placement over all 128 partitions instead of one per region
            load_padded_regions(buf, ext, fills[0][0], fills[0][1], [f[2] for f in fills], pitch, self.stage)
            return [buf[:PMAX, :ext[0], :ext[1], :ext[2]]]
        for r, (lo, hi, src) in enumerate(fills):
            if src is None:
                nisa.memset(buf[r * pitch:r * pitch + self.g.c_out, :ext[0], :ext[1], :ext[2]], 0.0,
                            engine=nisa.engine.gpsimd)
            else:
                load_padded(buf, ext, lo, hi, src, self.stage, p0=r * pitch)
        for r in range(len(pack), PMAX // pitch):
            # a partial pack: the idle regions meet zero weights, but 0 * NaN would poison the others
            nisa.memset(buf[r * pitch:(r + 1) * pitch, :ext[0], :ext[1], :ext[2]], 0.0, engine=nisa.engine.gpsimd)
        return [buf[:PMAX, :ext[0], :ext[1], :ext[2]]]

    @staticmethod
    def own_view(buf, bd, bh, bw, co_sz):
        """The owned dy rows of a loaded band (for dw and a folded db): [co, nd, nh, W_out]."""
        return buf[:co_sz, bd.own0 - bd.q0:bd.own1 - bd.q0, bh.own0 - bh.q0:bh.own1 - bh.q0,
                   bw.own0 - bw.q0:bw.own1 - bw.q0]


def load_dx_filters(ctx, group, co=None):
    """The transposed filters of one C_in group (block-diagonal when dx packs regions); ``co``: [t0, t1)
    C_out tiles (a C_out chunk of the gather, ``dx_co_chunk``; default all)."""
    g, plan = ctx.g, ctx.plan
    if plan.dx_regions > 1:
        return load_filters_block_diag(g, ctx.filters, plan.dx_regions, ctx.dtype, ctx.psum_t, ctx.evict,
                                       max(1, min(g.taps, 2048 // (PMAX * g.dtype_bytes))))
    by_dma = filters_by_dma(g, plan)
    if plan.dx_dphase_pairs:   # the stationary slot tiles (by DMA transposes, or from W^T)
        return dpair_filters(ctx, None if by_dma else load_filters_t(
            g, ctx.filters, group, ctx.dtype, ctx.psum_t, ctx.evict, filter_group(g, plan)))
    grp = filter_group(g, plan)
    if dx_t_active(plan):   # dx^T: tap b's filters under tap a's for every tap pair
        return add_pair_filters(g, plan, load_filters_t(g, ctx.filters, group, ctx.dtype, ctx.psum_t, ctx.evict,
                                                        grp, by_dma=by_dma))
    # the gather: one tensor per C_in tile (its matmuls read one tile at a time; see CiTiledFilters)
    return load_filters_t(g, ctx.filters, group, ctx.dtype, ctx.psum_t, ctx.evict, grp, by_dma=by_dma,
                          split_ci=True, co=co)


def dx_groups(g, plan):
    """C_in groups of dx: all tiles at once, one tile at a time (ci-outer), or one block-diagonal tile."""
    if plan.dx_regions > 1:
        return [[(0, PMAX)]]
    ci_tiles = tiles(g.c_in, plan.dx_ci_tile)
    return [ci_tiles] if not plan.dx_ci_outer else [[t] for t in ci_tiles]


class DxTPrefetch:
    """dx^T's first band, loaded (and its shifted copies made) while dw still computes
    (``plan.dx_prefetch``, per gradient): dw calls it at the start of its last row chunk, so the PE
    does not wait for dx's first band between the sections. Only the band's pools are allocated then
    (the dx planes and PSUM banks come with dx). The staged placement runs on GpSimd: on VectorE it
    would hold dw's evictions behind the band's DMA."""

    def __init__(self, ctx, items):
        self.ctx = ctx
        self.items = list(items)
        self.result = None
        self.started = False

    def __call__(self, place_engine=nisa.engine.gpsimd):
        """``place_engine``: the staged placement's engine (row-mode dw calls this after its last
        chunk's dy^T evictions with ScalarE: GpSimd then still has the last pass's x^T zero-row memsets
        queued, which the in-order engine would hold behind the ~5 us placement)."""
        if self.started:
            return
        self.started = True
        if not self.items:
            return
        ctx = self.ctx
        side = DxTBands(ctx, DyBands(ctx.g, ctx.dy, ctx.plan, ctx.dtype))
        self.result = (side, side.prepare(self.items[0], place_engine=place_engine))


def dx_program_groups(g, plan, pid, lnc):
    """The C_in groups program ``pid`` runs: its contiguous half under the LNC2 C_in split, else all."""
    groups = dx_groups(g, plan)
    return _split(groups, lnc, pid) if dx_ci_split_on(g, plan) else groups


def load_first_band(ctx, items):
    """The dy band ring and the loaded bands of the first item (``run_dx(early=...)``), issued ahead of dx
    (before dw's last stores, whose DMA bandwidth the loads would otherwise queue behind)."""
    bands = DyBands(ctx.g, ctx.dy, ctx.plan, ctx.dtype)
    # GpSimd places a staged band: VectorE is still busy with dw's evictions and folds
    return bands, (bands.load(*items[0], place_engine=nisa.engine.gpsimd) if items else None)


def run_dx(ctx, items, on_band=None, first_filters=None, prefetched=None, groups=None, early=None, between=None):
    """dx for the (batch, D band, H band) ``items`` of this program; ``on_band`` sees each dy band once;
    ``prefetched``: dx^T's first band made during dw (``DxTPrefetch``); ``groups``: this program's C_in
    groups (default: all of them); ``early``: (band ring, the first item's bands) from ``load_first_band``
    (gather); ``between``: (gather, ``Plan.dw_interleave``) a callable given the number of bands run so far
    and the total, called after each band's load and before its matmuls (dw's boxes).

    With ``plan.dx_regions`` R > 1 (C_in, C_out <= 128/R) R bands of equal structure are stacked on the
    partitions (region r at partition r*128/R) and share every matmul through block-diagonal filters.
    ``prefetched``: a ``DxTPrefetch`` (dx^T, no ``on_band``) whose first band dw already loaded.
    """
    g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
    if dx_t_active(plan):   # positions on the stationary side (nki_dx_t)
        w_t = first_filters.pop() if first_filters else load_dx_filters(ctx, dx_groups(g, plan)[0])
        if prefetched is not None and on_band is None:
            prefetched()   # (a no-op when dw already ran it)
            if prefetched.result is not None:
                return run_dx_t(ctx, items, None, w_t, None, prepared=prefetched.result)
        return run_dx_t(ctx, items, DyBands(g, ctx.dy, plan, dtype), w_t, on_band)
    if plan.dx_dphase_pairs:   # the two D stride phases on M (nki_dx_dpairs)
        pair_t = first_filters.pop() if first_filters else load_dx_filters(ctx, dx_groups(g, plan)[0])
        return run_dx_dpairs(ctx, items, DyBands(g, ctx.dy, plan, dtype), pair_t, on_band, between)
    regions = plan.dx_regions
    pitch = PMAX // regions
    co_tiles = tiles(g.c_out, PMAX) if regions == 1 else [(0, PMAX)]
    # partitions between regions that no load writes must be finite (they meet zero weights)
    bands = early[0] if early else DyBands(g, ctx.dy, plan, dtype, zero=regions > 1 and g.c_out < pitch)
    first_bufs = [early[1]] if early else []
    wcols = max(bw.i1 - bw.i0 for bw in bands.band_ws)   # a plane's W columns (a W band, else all of W)
    plane_pool = Pool(2, (PMAX, plan.dx_band[0], plan.dx_band[1], wcols), dtype, nl.sbuf, "dx_plane")
    acc_pool = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_dx")
    groups = dx_groups(g, plan) if groups is None else groups
    packs = dx_packs(g, list(items), regions)
    # (dx_w_band: each band of W columns is a band of its own, loaded with the dy columns its inputs read)
    w_bands = bands.band_ws if regions == 1 else (bands.band_w,)
    chunks = dx_co_chunks(g, plan)
    if len(chunks) > 1:   # dx_co_chunk: the filters load per band and chunk, the sums go through fp32 tiles
        sum_pool = Pool(max(len(grp) for grp in groups), (PMAX, plan.dx_band[0], plan.dx_band[1], wcols),
                        nl.float32, nl.sbuf, "dx_sum")
        for group in groups:
            rel0 = {ci0: sum(sz for c, sz in group if c < ci0) for ci0, _s in group}
            for _b, bd, bh in items:
                for bw in w_bands:
                    _run_band_chunks(ctx, (_b, bd, bh, bw), bands, group, rel0, chunks, plane_pool, acc_pool,
                                     sum_pool)
        return
    # the first group's filters when loaded ahead (a one-item list, emptied here so that they are
    # freed with their group: with C_in-outer groups only the current and the next group are live)
    w_next = first_filters.pop() if first_filters else load_dx_filters(ctx, groups[0])
    total = len(groups) * len(packs) * len(w_bands)
    done = 0
    for gi, group in enumerate(groups):
        w_t = w_next
        if gi + 1 < len(groups):   # the next group's filters load (DMA) while this group computes
            w_next = load_dx_filters(ctx, groups[gi + 1])
        rel0 = {ci0: sum(sz for c, sz in group if c < ci0) for ci0, _s in group}
        for pack in packs:
            for bw in w_bands:
                _run_band(ctx, pack, bw, bands, first_bufs, on_band, gi, groups, group, packs, w_t, rel0, co_tiles,
                          plane_pool, acc_pool, len(w_bands) == 1,
                          None if between is None else (lambda k=done: between(k, total)))
                done += 1


def band_work(ctx, bands3):
    """(bands whose q0 the band's buffers start at, the band's phase work): with ``dx_dy_clip`` the clipped
    bands and the live taps only (``schedule.live_phase_work``), else the bands and every tap."""
    if dx_dy_clip_legal(ctx.g, ctx.plan):
        return live_phase_work(ctx.g, bands3)
    return bands3, dx_phase_work(ctx.g, bands3)


def _block_matmuls(ctx, ps, pw, block, w_t, bufs, co_tiles, bands3, ci_sz, rel):
    """One block's PSUM accumulation group: every tap of its phase and every C_out tile of ``co_tiles``
    (W^T[co, tap, ci] stationary, the dy window shifted by the tap moving)."""
    g = ctx.g
    ax = g.axes
    (jd, jh, jw), (nd, nh, nw) = block
    steps = [(tap, c) for tap in pw.taps for c in range(len(co_tiles))]
    for si, ((kd, kh, kw), c) in enumerate(steps):
        co_sz = co_tiles[c][1]
        qd = jd - ax[0].tap_shift(kd, pw.phases[0]) - bands3[0].q0
        qh = jh - ax[1].tap_shift(kh, pw.phases[1]) - bands3[1].q0
        qw = jw - ax[2].tap_shift(kw, pw.phases[2]) - bands3[2].q0
        nisa.nc_matmul(ps[:ci_sz, :nd * nh * nw], stationary=w_t[c][:co_sz, g.tap_index(kd, kh, kw), rel:rel + ci_sz],
                       moving=bufs[c][:co_sz, qd:qd + nd, qh:qh + nh, qw:qw + nw], accumulate=si > 0)


def _block_view(ctx, t, ci_sz, pw, block, bands3):
    """The block's positions in a band-shaped tile ``t`` (plane or fp32 sum): a phase's strided view."""
    ax = ctx.g.axes
    (jd, jh, jw), (nd, nh, nw) = block
    i = [ax[a].i_of_j((jd, jh, jw)[a], pw.phases[a]) - bands3[a].i0 for a in range(3)]
    return t[:ci_sz, band_slices(i[0], nd, ax[0].s), band_slices(i[1], nh, ax[1].s), band_slices(i[2], nw, ax[2].s)]


def _run_band_chunks(ctx, item, bands, group, rel0, chunks, plane_pool, acc_pool, sum_pool):
    """One dx band (``item``: batch, D, H and W bands) of C_in group ``group`` with C_out in ``chunks`` of tiles
    (``Plan.dx_co_chunk``), the chunk loop outside the block and tap loops: per chunk its dy band and its
    filters load (the next chunk's while this one computes: the dy ring and a fresh filter tensor), each
    block's PSUM sum over the chunk's tiles and taps goes into an fp32 tile of the band (copied by the first
    chunk, added by VectorE for the later ones), and the last chunk's add writes the plane in the output dtype:
    each element rounds once, as in the single-chunk gather."""
    g = ctx.g
    ax = g.axes
    b, bd, bh, bw = item
    bands3, work = band_work(ctx, (bd, bh, bw))
    sums = {ci0: sum_pool.take() for ci0, _s in group}
    last = len(chunks) - 1
    for k, (t0, t1) in enumerate(chunks):
        bufs = bands.load(b, bd, bh, bw=bw, co=(t0, t1))
        w_t = load_dx_filters(ctx, group, co=(t0, t1))
        co_tiles = bands.co_tiles[t0:t1]
        for ci0, ci_sz in group:
            acc = sums[ci0]
            plane = plane_pool.take() if k == last else None
            for pw in work:
                if not pw.taps:   # (no tap reaches the phase: zeros, written once)
                    if plane is not None:
                        view = [band_slices(ax[a].i_of_j(pw.j0[a], pw.phases[a]) - bands3[a].i0,
                                            pw.j1[a] - pw.j0[a], ax[a].s) for a in range(3)]
                        nisa.memset(plane[:ci_sz, view[0], view[1], view[2]], 0.0, engine=nisa.engine.gpsimd)
                    continue
                for block in pw.blocks:
                    n = block[1][0] * block[1][1] * block[1][2]
                    ps = acc_pool.take()
                    _block_matmuls(ctx, ps, pw, block, w_t, bufs, co_tiles, bands3, ci_sz, rel0[ci0])
                    part = _block_view(ctx, acc, ci_sz, pw, block, bands3)
                    if k == 0:
                        ctx.evict.copy(part, ps[:ci_sz, :n])
                    else:
                        dst = part if plane is None else _block_view(ctx, plane, ci_sz, pw, block, bands3)
                        nisa.tensor_tensor(dst=dst, data1=part, data2=ps[:ci_sz, :n], op=nl.add,
                                           engine=nisa.engine.vector)
            if plane is not None:
                nisa.dma_copy(dst=ctx.dx[b, ci0:ci0 + ci_sz, bd.i0:bd.i1, bh.i0:bh.i1, bw.i0:bw.i1],
                              src=plane[:ci_sz, :bd.i1 - bd.i0, :bh.i1 - bh.i0, :bw.i1 - bw.i0])


def _run_band(ctx, pack, bw, bands, first_bufs, on_band, gi, groups, group, packs, w_t, rel0, co_tiles,
              plane_pool, acc_pool, whole_w, between=None):
    """The gather of one pack of dx bands (W band ``bw``) for C_in group ``group`` (``run_dx``'s body)."""
    g, plan = ctx.g, ctx.plan
    ax = g.axes
    regions = plan.dx_regions
    pitch = PMAX // regions
    _b, bd, bh = pack[0]
    if regions == 1:
        bufs = first_bufs.pop() if first_bufs else bands.load(*pack[0], bw=bw)
        if on_band is not None and gi == 0:
            on_band(*pack[0], bw, bufs)
    else:
        bufs = bands.load_regions(pack, pitch)
        if on_band is not None and gi == 0:
            for r, (b_r, bd_r, bh_r) in enumerate(pack):
                view = None if bufs is None else [bufs[0][r * pitch:r * pitch + g.c_out]]
                on_band(b_r, bd_r, bh_r, bw, view)
    if between is not None:   # another section's work (dw's boxes), after this band's load, before its matmuls
        between()
    bands3, work = band_work(ctx, (bd, bh, bw))
    nd_in, nh_in, nw_in = bd.i1 - bd.i0, bh.i1 - bh.i0, bw.i1 - bw.i0
    last_pack = gi == len(groups) - 1 and pack is packs[-1]
    for ci0, ci_sz in group:
        rel = rel0[ci0]
        plane = plane_pool.take()
        # the program's last plane stores block by block (dx_last_by_blocks): its tail is one block's
        by_block = whole_w and last_pack and ci0 == group[-1][0] and dx_last_by_blocks(g, plan, work)
        for pw in work:
            starts = [ax[a].i_of_j(pw.j0[a], pw.phases[a]) - (bd.i0, bh.i0, bw.i0)[a] for a in range(3)]
            if not pw.taps:
                sizes = [pw.j1[a] - pw.j0[a] for a in range(3)]
                nisa.memset(plane[:ci_sz, band_slices(starts[0], sizes[0], ax[0].s),
                                  band_slices(starts[1], sizes[1], ax[1].s),
                                  band_slices(starts[2], sizes[2], ax[2].s)], 0.0,
                            engine=nisa.engine.gpsimd)
                continue
            for block in pw.blocks:
                (jd, jh, jw), (nd, nh, nw) = block
                n = nd * nh * nw
                ps = acc_pool.take()
                _block_matmuls(ctx, ps, pw, block, w_t, bufs, co_tiles, bands3, ci_sz, rel)
                ctx.evict.copy(_block_view(ctx, plane, ci_sz, pw, block, bands3), ps[:ci_sz, :n])
                if by_block:
                    i_d = ax[0].i_of_j(jd, pw.phases[0]) - bd.i0
                    i_h = ax[1].i_of_j(jh, pw.phases[1]) - bh.i0
                    i_w = ax[2].i_of_j(jw, pw.phases[2]) - bw.i0   # (unit strides, whole W rows: the block is a box of the plane and of dx)
                    nisa.dma_copy(dst=ctx.dx[_b, ci0:ci0 + ci_sz, bd.i0 + i_d:bd.i0 + i_d + nd,
                                             bh.i0 + i_h:bh.i0 + i_h + nh, i_w:i_w + nw],
                                  src=plane[:ci_sz, i_d:i_d + nd, i_h:i_h + nh, i_w:i_w + nw])
        if by_block:
            continue
        if regions == 1:
            nisa.dma_copy(dst=ctx.dx[_b, ci0:ci0 + ci_sz, bd.i0:bd.i1, bh.i0:bh.i1, bw.i0:bw.i1],
                          src=plane[:ci_sz, :nd_in, :nh_in, :nw_in])
        else:
            for r, (b_r, bd_r, bh_r) in enumerate(pack):
                nisa.dma_copy(dst=ctx.dx[b_r, :, bd_r.i0:bd_r.i1, bh_r.i0:bh_r.i1, :],
                              src=plane[r * pitch:r * pitch + g.c_in, :nd_in, :nh_in, :nw_in])
