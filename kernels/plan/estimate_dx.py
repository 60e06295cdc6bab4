"""The estimate of dx's work per band: gather, D-phase pairs and dx^T."""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

from .. import dx_dpairs as dpairs
from ..costs import TARGET_FIGURES, CostSheet, TargetFigures
from ..dx_pairs import BANK_FP32, block_groups, ci_tile_t, copies_made, copy_shift, phase_tap_sets, tap_steps
from ..geometry import Axis, ConvGeom, ceil_div
from ..schedule import (
    MOVING_MAX,
    PMAX,
    AxisBand,
    axis_bands,
    axis_live,
    box_block_sizes,
    dx_phase_work,
    live_phase_work,
    n_tiles,
    tile_sizes,
)
from ..spec.dx_options import _dpair_slot_count, filters_by_dma
from ..spec.psum import PSUM_BANK_BYTES
from ..spec.record import Plan
from .budget import _dx_dy_extent


def _run_cached(memo: dict | None, fn, *args) -> CostSheet:
    """``fn(*args)`` (a band's cost sheet, a pure function of its arguments) kept in one planning run's memo
    (``estimate._estimate``) besides ``fn``'s own bounded cache: a problem of many bands cycles through more
    of them per candidate than that cache holds, and the next candidate asks for the same bands again."""
    if memo is None:
        return fn(*args)
    key = (fn, args)
    if key not in memo:
        memo[key] = fn(*args)
    return memo[key]


@lru_cache(maxsize=8192)
def _dx_band_sheet(g: ConvGeom, target: str, ci_tile: int, bd: AxisBand, bh: AxisBand,
                   packed: bool = False, bw: AxisBand | None = None, chunks: int = 1, clip: bool = False
                   ) -> CostSheet:
    """The cost of one dx band (cached across candidates: many share their bands); ``packed``: the
    block-diagonal form (one 128-row tile, one 128-partition C_out tile); ``bw``: its W band (default all W);
    ``chunks``: C_out chunks (``dx_co_chunk``); ``clip``: the live taps only (``dx_dy_clip``)."""
    c = CostSheet(TARGET_FIGURES[target])
    ci_tiles = [PMAX] if packed else tile_sizes(g.c_in, ci_tile)
    _estimate_dx_band(c, g, None, bd, bh, ci_tiles, 1 if packed else n_tiles(g.c_out, PMAX),
                      g.dtype == "fp32", g.dtype_bytes == 2, g.axes[2].n, bw, chunks, g.c_in if packed else 0, clip)
    return c


@lru_cache(maxsize=65536)
def band_class(ax: Axis, b: AxisBand, clip: bool) -> tuple:
    """All a dx band's cost (``_estimate_dx_band``) reads of one axis band: its input rows and, per stride
    phase it reaches, the positions and (``clip``) the live taps -- not where the band lies. Bands whose
    classes agree on every axis cost the same: the interior bands of a huge plane are a few classes."""
    live = axis_live(ax, b)[1] if clip else ()
    phases = []
    for ph in range(ax.s):
        j0, j1 = ax.phase_j_range(ph, b.i0, b.i1)
        if j1 > j0:
            phases.append((ph, j1 - j0, live[ph] if clip else None))
    return b.i1 - b.i0, tuple(phases)


def dx_band_classes(g: ConvGeom, items: list, w_bands: tuple, clip: bool) -> list[tuple[tuple, int]]:
    """The (D, H, W) bands of ``items`` x ``w_bands`` as one representative per class (``band_class``)
    with the number of bands in it: every item has the same W bands, so a class is (items of a D, H class)
    x (W bands of a W class)."""
    w_reps: dict[tuple, AxisBand] = {}
    w_counts: Counter = Counter()
    for bw in w_bands:
        k = band_class(g.axes[2], bw, clip)
        w_reps.setdefault(k, bw)
        w_counts[k] += 1
    dh_reps: dict[tuple, tuple] = {}
    dh_counts: Counter = Counter()
    for _b, bd, bh in items:
        k = (band_class(g.axes[0], bd, clip), band_class(g.axes[1], bh, clip))
        dh_reps.setdefault(k, (bd, bh))
        dh_counts[k] += 1
    return [((*dh_reps[kdh], w_reps[kw]), dh_counts[kdh] * w_counts[kw]) for kdh in dh_reps for kw in w_reps]


def estimate_dx_bands(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, items: list, ci_tiles: list[int],
                      w_bands: tuple, chunks: int, clip: bool, split: bool, memo: dict | None = None) -> None:
    """The gather's band work (``_estimate_dx_band``) of ``items`` x ``w_bands``: each class of identical
    bands (``dx_band_classes``) costed once and charged as many times as it has bands; ``split``: the LNC2
    C_in split (this program's ``ci_tiles``)."""
    for (bd, bh, bw), n in dx_band_classes(g, items, w_bands, clip):
        if split:
            sheet = CostSheet(hw)
            _estimate_dx_band(sheet, g, None, bd, bh, ci_tiles, n_tiles(g.c_out, PMAX), g.dtype == "fp32",
                              g.dtype_bytes == 2, g.axes[2].n, bw, chunks, clip=clip)
        else:
            sheet = _run_cached(memo, _dx_band_sheet, g, hw.name, p.dx_ci_tile, bd, bh, False, bw, chunks, clip)
        c.add(sheet, times=n)


def _estimate_dx_band(c: CostSheet, g: ConvGeom, p: Plan | None, bd: AxisBand, bh: AxisBand, ci_tiles: list[int],
                      n_co: int, fp32: bool, two: bool, W: int, bw: AxisBand | None = None, chunks: int = 1,
                      store_ci: int = 0, clip: bool = False) -> None:
    """The dx compute and store of one band (mirrors nki_dx._run_band, and _run_band_chunks with ``chunks`` > 1
    C_out chunks); ``bw``: its W band (default all W); ``store_ci``: the channels of its store when not the
    C_in tile's (packed regions: one region's); ``clip``: the live taps only (``dx_dy_clip``)."""
    ds = g.dtype_bytes
    bw = bw if bw is not None else axis_bands(g.axes[2], W)[0]
    wn = bw.i1 - bw.i0
    work = live_phase_work(g, (bd, bh, bw))[1] if clip else dx_phase_work(g, (bd, bh, bw), with_blocks=False)
    zero = [w for w in work if not w.taps]
    for ci in ci_tiles:
        for w in zero:
            c.compute("gpsimd", w.positions, 0, 1.0, 1, op="memset")
        for w in work:
            if not w.taps:
                continue
            for (nd, nh, nw), count in box_block_sizes(w.j0, w.j1, MOVING_MAX):
                n = nd * nh * nw
                c.matmul(ci, n, fp32, len(w.taps) * n_co * count)
                # chunked: the first chunk's copy lands in fp32 sums, each later chunk's is a VectorE add
                c.evict(n, two and chunks == 1, count, contiguous=(g.axes[2].s == 1))
                if chunks > 1:
                    c.compute("vector", n, 2, 1.0, (chunks - 1) * count, op="tensor_tensor")
        rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
        run = wn if wn < W else (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W)
        sc = store_ci or ci   # (dx's stores: one after another)
        c.dma(sc * rows * wn * ds, run * ds, serial=sc if sc > 1 else 0)


def _estimate_dpairs(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, items: list,
                     memo: dict | None = None) -> None:
    """D-phase pairs: the slot tiles (memset, one SBUF->SBUF DMA per tap) and every band's matmuls,
    evictions and two stores (mirrors nki_dx_dpairs.run_dx_dpairs)."""
    ds = g.dtype_bytes
    n_co = n_tiles(g.c_out, PMAX)
    slots = _dpair_slot_count(g, p)
    if g.c_in < dpairs.HALF:   # gap columns: the whole slot tiles
        c.compute("gpsimd", slots * PMAX, 0, 1.0, n_co, op="memset")
    else:   # the halves no tap fills
        c.compute("gpsimd", dpairs.HALF, 0, 1.0, n_co * (2 * slots - g.taps), op="memset")
    if not filters_by_dma(g, p):   # W^T (charged with the filters) copied into the slots; else DMA-transposed there
        c.dma(min(PMAX, g.c_out) * g.c_in * ds, g.c_in * ds, g.taps * n_co)
    for _b, bd, bh in items:
        c.add(_run_cached(memo, _dpair_band_sheet, g, hw.name, bd, bh))


@lru_cache(maxsize=4096)
def _dpair_band_sheet(g: ConvGeom, target: str, bd: AxisBand, bh: AxisBand) -> CostSheet:
    """One band of the D-phase pairs (cached)."""
    c = CostSheet(TARGET_FIGURES[target])
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    n_co = n_tiles(g.c_out, PMAX)
    W = g.axes[2].n
    w_band = axis_bands(g.axes[2], W)[0]
    halves = set()
    for grp in dpairs.dpair_groups(g, (bd, bh, w_band)):
        ref = grp.lo if grp.lo is not None else grp.hi
        halves |= {side for side, pw in ((0, grp.lo), (1, grp.hi)) if pw is not None}
        if not grp.steps:
            c.compute("gpsimd", (ref.j1[0] - ref.j0[0]) * (ref.j1[1] - ref.j0[1]) * (ref.j1[2] - ref.j0[2]), 0, 1.0,
                      1, op="memset")
            continue
        m = dpairs.HALF + g.c_in if grp.hi is not None else g.c_in
        for _st, (nd, nh, nw) in ref.blocks:
            c.matmul(m, nd * nh * nw, fp32, len(grp.steps) * n_co)
            c.evict(nd * nh * nw, ds == 2, 1, contiguous=(g.axes[2].s == 1))
    nh_in = bh.i1 - bh.i0
    rows = ceil_div(bd.i1 - bd.i0, 2)
    run = (nh_in * W if nh_in == g.axes[1].n else W) * ds
    one = dpairs.one_store(g, dpairs.band_halves(g, (bd, bh, w_band)))
    c.dma(g.c_in * rows * nh_in * W * ds * (2 if one else 1), run, 1 if one else len(halves),
          serial=g.c_in * (2 if one else 1))
    return c


def _estimate_dx_t(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, items: list,
                   memo: dict | None = None) -> None:
    """dx^T compute, copies and stores of this program's items (mirrors nki_dx_t.run_dx_t)."""
    ds = g.dtype_bytes
    pairs = sum(1 for taps in phase_tap_sets(g) for s_ in tap_steps(g, p.dx_pair_copies, taps) if s_.b is not None)
    if pairs:   # filters of tap b under tap a's (SBUF->SBUF)
        c.dma(g.c_out * g.c_in * ds, g.c_in * ds, pairs)
    ext = _dx_dy_extent(g, p.dx_band)
    for (bd, bh), n in dx_t_band_classes(g, items):
        c.add(_run_cached(memo, _dx_t_band_sheet, g, hw.name, p.dx_pair_copies, filters_by_dma(g, p), ext, bd, bh),
              times=n)


def dx_t_band_classes(g: ConvGeom, items: list) -> list[tuple[tuple[AxisBand, AxisBand], int]]:
    """The (D, H) bands of dx^T's ``items`` as one representative per class with its number of bands: a
    band's cost (``_dx_t_band_sheet``) reads per axis its rows, its dy extent and the positions of each
    stride phase it reaches (``band_class``), not where it lies."""
    reps: dict[tuple, tuple[AxisBand, AxisBand]] = {}
    counts: Counter = Counter()
    for _b, bd, bh in items:
        k = (band_class(g.axes[0], bd, False), bd.extent, band_class(g.axes[1], bh, False), bh.extent)
        reps.setdefault(k, (bd, bh))
        counts[k] += 1
    return [(reps[k], counts[k]) for k in reps]


@lru_cache(maxsize=8192)
def _dx_t_band_sheet(g: ConvGeom, target: str, copies: int, by_dma: bool, tile_ext: tuple[int, int, int],
                     bd: AxisBand, bh: AxisBand) -> CostSheet:
    """One band of dx^T: shifted copies, matmuls, evictions, transposes back, stores (cached)."""
    hw = TARGET_FIGURES[target]
    c = CostSheet(hw)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    W = g.axes[2].n
    nd_in, nh_in = bd.i1 - bd.i0, bh.i1 - bh.i0
    rows = nd_in * nh_in
    run = (rows * W if nh_in == g.axes[1].n else nh_in * W) * ds
    bw = axis_bands(g.axes[2], W)[0]
    if min(bd.extent, bh.extent, bw.extent) <= 0:   # no dy: zero planes
        for ci in tile_sizes(g.c_in, PMAX):
            c.compute("gpsimd", rows * W, 0, 1.0, 1, op="memset")
            c.dma(ci * rows * W * ds, run, serial=ci)
        return c
    n_copies = copies_made(g, copies)
    used = bd.extent * tile_ext[1] * tile_ext[2]
    for k in range(n_copies):
        sh = copy_shift(g, k, tile_ext)
        if k:
            c.dma(g.c_out * used * ds, used * ds)
        if sh < used:
            c.dma(g.c_out * (used - sh) * ds, (used - sh) * ds)
    ci_t = ci_tile_t(g)
    slots = max(1, BANK_FP32 // ci_t)
    tbank = PSUM_BANK_BYTES // ds
    strided = any(a.s > 1 for a in g.axes)
    for w in dx_phase_work(g, (bd, bh, bw), with_blocks=False):
        npos = w.positions
        if not w.taps:
            c.compute("gpsimd", npos, 0, 1.0, len(tile_sizes(g.c_in, PMAX)), op="memset")
            continue
        n_mm = len(tap_steps(g, copies, w.taps)) * (1 if n_copies else n_tiles(g.c_out, PMAX))
        for grp in block_groups(tuple(w.j1[a] - w.j0[a] for a in range(3)), slots):
            nb, n = len(grp.blocks), grp.n
            for ci in tile_sizes(g.c_in, ci_t):
                c.matmul(n, ci, fp32, n_mm * nb)
                c.evict(nb * ci, two, 1)
                for cc in tile_sizes(ci, PMAX):
                    if by_dma:   # SBUF->SBUF dma_transpose: dst [cc, nb, n] of src [n, nb, cc] (nki_dx_t)
                        c.dma_transpose((cc, nb, n), ds, from_sbuf=True, src_shape=(n, nb, cc))
                        continue
                    per = max(1, tbank // n)
                    c.transpose(n, cc, fp32, nb)
                    for k0 in range(0, nb, per):
                        c.evict(min(per, nb - k0) * n, two, 1)
        if strided:   # the phase's strided placement into the plane (GpSimd), per 128 channels
            c.compute("gpsimd", npos, 1, 1.0, len(tile_sizes(g.c_in, PMAX)), op="tensor_copy")
    for ci in tile_sizes(g.c_in, PMAX):
        c.dma(ci * rows * W * ds, run, serial=ci)
    return c
