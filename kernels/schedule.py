"""The loop structure of the kernel as plain data: bands, phases, blocks and position tiles.

Pure Python (no NKI import). The kernel iterates these lists and the planner's cost estimate
walks the very same lists, so the estimate describes the instructions the kernel issues.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import product
from math import prod

from .geometry import Axis, ConvGeom, ceil_div

PMAX = 128          # partitions
MOVING_MAX = 512    # matmul moving free size (NC-v2/v3) == fp32 elements of one PSUM bank
ENGINE_FREE_MAX = 65536   # elements per partition of one Vector/Scalar/GpSimd SBUF access (nkisim's rule)
FILTER_RUN_CI_MAX = 32   # C_in up to which the filters come by runs of taps (one DMA per run; nki_filters)
FILTER_RUN_ROWS = 512    # (tap, ci) rows per such DMA
FILTER_STAGE_BYTES = 8192   # a filter staging tile's C_out columns per partition (nki_filters.load_filters_t)


def filter_stage_cols(c_out: int, dtype_bytes: int) -> int:
    """C_out columns of one filter staging tile: all of C_out up to ``FILTER_STAGE_BYTES`` per partition, else
    whole 128-column C_out tiles that fit it (a very wide C_out stages in column chunks, one DMA each)."""
    return min(c_out, max(PMAX, FILTER_STAGE_BYTES // dtype_bytes // PMAX * PMAX))


@dataclass(frozen=True)
class AxisBand:
    """One band of one axis for dx: input rows [i0, i1), dy rows loaded at buffer offset."""

    i0: int
    i1: int
    q0: int          # first virtual dy row of the buffer (may be < 0: zero rows)
    q1: int          # end of the virtual dy rows
    own0: int        # dy rows this band owns (for dw / db folded on the shared dy load)
    own1: int

    @property
    def extent(self) -> int:
        return self.q1 - self.q0


@lru_cache(maxsize=4096)
def axis_bands(ax: Axis, band: int) -> tuple[AxisBand, ...]:
    """Split the input axis into bands of ``band`` rows; each band knows its dy rows.

    With strides the dy windows of consecutive bands need not be monotone (a band of one phase may read
    rows before the previous band's): each window is widened to the smallest one-way-ordered cover
    (q0 the least of its own and every later window's start, q1 the greatest of its own and every
    earlier window's end), so that owned rows -- contiguous, each dy row at most once, every row some
    input reads owned by a band whose window holds it -- follow from the band order. Owned rows always
    lie inside the band's window (an empty own range too: a view of them is a valid, empty, slice).
    A single band over the whole axis (W always) holds every dy row, also those only padding beyond
    the kernel's reach reads: they add nothing to dx, but dw and a folded db on the shared dy load need
    every output column.
    """
    spans = []
    for i0 in range(0, ax.n, band):
        i1 = min(ax.n, i0 + band)
        q0, q1 = ax.dx_dy_range(i0, i1)
        if i0 == 0 and i1 == ax.n:
            q0, q1 = min(q0, 0) if q1 > q0 else 0, max(q1, ax.o)
        spans.append([i0, i1, q0, q1])
    live = [sp for sp in spans if sp[3] > sp[2]]   # (no tap reaches a band: an empty window, set below)
    for k in range(len(live) - 2, -1, -1):
        live[k][2] = min(live[k][2], live[k + 1][2])
    for k in range(1, len(live)):
        live[k][3] = max(live[k][3], live[k - 1][3])
    out = []
    prev_own = 0
    for i0, i1, q0, q1 in spans:
        if q1 <= q0:
            q0 = q1 = max(0, min(prev_own, ax.o))
        own0 = max(prev_own, q0, 0)
        own1 = max(own0, min(q1, ax.o))
        if own0 > q1:   # every row this band reads is owned by an earlier band: it owns none
            own0 = own1 = max(q0, q1)
        out.append(AxisBand(i0, i1, q0, q1, own0, own1))
        prev_own = max(prev_own, own1)
    return tuple(out)


@lru_cache(maxsize=4096)
def axis_live(ax: Axis, bb: AxisBand) -> tuple[AxisBand, tuple[frozenset[int], ...]]:
    """``bb`` clipped to the dy rows that matter, and per stride phase (indexed by it) the taps that read dy.

    A tap whose dy window for the phase's positions of the band lies wholly outside dy ([0, o)) reads
    zeros only (a tiny input under a huge dilation: most of the kernel's reach): it adds nothing, so it
    is skipped, and the band's buffer holds only the windows of the other taps and the rows the band
    owns (q0, q1 narrowed, nothing else moved)."""
    lo, hi = (bb.own0, bb.own1) if bb.own1 > bb.own0 else (bb.q1, bb.q0)
    live = []
    for ph in range(ax.s):
        j0, j1 = ax.phase_j_range(ph, bb.i0, bb.i1)
        taps = set()
        for k in ax.phase_taps(ph) if j1 > j0 else ():
            w0, w1 = j0 - ax.tap_shift(k, ph), j1 - ax.tap_shift(k, ph)
            if w1 > 0 and w0 < ax.o:
                taps.add(k)
                lo, hi = min(lo, w0), max(hi, w1)
        live.append(frozenset(taps))
    lo, hi = max(lo, bb.q0), min(hi, bb.q1)
    if hi <= lo:   # no live tap, no owned row: an empty buffer
        lo = hi = min(max(bb.own0, bb.q0), bb.q1)
    return replace(bb, q0=lo, q1=hi), tuple(live)


def live_phase_work(geom: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand]
                    ) -> tuple[tuple[AxisBand, AxisBand, AxisBand], tuple[PhaseWork, ...]]:
    """The bands clipped by ``axis_live`` and their phase work with the live taps only (a phase none of
    whose taps reads dy has none: its positions are zeros)."""
    clipped, live = zip(*(axis_live(geom.axes[a], bands[a]) for a in range(3)))
    work = tuple(replace(pw, taps=tuple(t for t in pw.taps if all(t[a] in live[a][pw.phases[a]] for a in range(3))))
                 for pw in dx_phase_work(geom, bands))
    return tuple(clipped), work


@lru_cache(maxsize=1024)
def axis_covered(ax: Axis, band: int) -> bool:
    """True when the bands' owned dy rows cover every output row, each exactly once (db can fold on the
    dx load)."""
    reach = 0
    for b in axis_bands(ax, band):
        if b.own1 <= b.own0:
            continue
        if b.own0 != reach:
            return False
        reach = b.own1
    return reach == ax.o


@dataclass(frozen=True)
class PhaseWork:
    """One stride phase of one dx band: taps, the j box and its blocks."""

    phases: tuple[int, int, int]
    taps: tuple[tuple[int, int, int], ...]            # (kd, kh, kw) contributing
    j0: tuple[int, int, int]
    j1: tuple[int, int, int]
    blocks: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]   # (start j, sizes)

    @property
    def positions(self) -> int:
        return (self.j1[0] - self.j0[0]) * (self.j1[1] - self.j0[1]) * (self.j1[2] - self.j0[2])


def box_blocks(lo: tuple[int, int, int], hi: tuple[int, int, int], limit: int
               ) -> tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]:
    """Tile the box [lo, hi) into blocks of at most ``limit`` elements, W fastest."""
    n = [hi[a] - lo[a] for a in range(3)]
    if min(n) <= 0:
        return ()
    bw = min(n[2], limit)
    bh = min(n[1], max(1, limit // bw))
    bd = min(n[0], max(1, limit // (bw * bh)))
    out = []
    for d in range(lo[0], hi[0], bd):
        for h in range(lo[1], hi[1], bh):
            for w in range(lo[2], hi[2], bw):
                out.append(((d, h, w), (min(bd, hi[0] - d), min(bh, hi[1] - h), min(bw, hi[2] - w))))
    return tuple(out)


def box_block_sizes(lo: tuple[int, int, int], hi: tuple[int, int, int], limit: int
                    ) -> list[tuple[tuple[int, int, int], int]]:
    """The block shapes ``box_blocks`` produces, with their counts (without listing the blocks)."""
    n = [hi[a] - lo[a] for a in range(3)]
    if min(n) <= 0:
        return []
    bw = min(n[2], limit)
    bh = min(n[1], max(1, limit // bw))
    bd = min(n[0], max(1, limit // (bw * bh)))
    per_axis = []
    for size, b in zip(n, (bd, bh, bw)):
        full, rest = divmod(size, b)
        per_axis.append([(b, full)] + ([(rest, 1)] if rest else []))
    out = []
    for sd, cd in per_axis[0]:
        for sh, ch in per_axis[1]:
            for sw, cw in per_axis[2]:
                if cd and ch and cw:
                    out.append(((sd, sh, sw), cd * ch * cw))
    return out


@lru_cache(maxsize=4096)
def phase_taps(geom: ConvGeom, phases: tuple[int, int, int]) -> tuple[tuple[int, int, int], ...]:
    """The taps (kd, kh, kw) that reach one stride phase (D, H, W) of dx: the same for every band (one
    tuple, built once: a wide kernel has hundreds)."""
    ax = geom.axes
    return tuple((kd, kh, kw) for kd in ax[0].phase_taps(phases[0]) for kh in ax[1].phase_taps(phases[1])
                 for kw in ax[2].phase_taps(phases[2]))


@lru_cache(maxsize=4096)
def dx_phase_work(geom: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand], with_blocks: bool = True
                  ) -> tuple[PhaseWork, ...]:
    """The phases of one dx band (D band, H band, full W) with taps and (optionally) blocks."""
    ax = geom.axes
    # the phase ranges are separable per axis: list each axis's reached phases once
    per_axis = []
    for a in range(3):
        reached = []
        for ph in range(ax[a].s):
            j0, j1 = ax[a].phase_j_range(ph, bands[a].i0, bands[a].i1)
            if j1 > j0:
                reached.append((ph, j0, j1))
        per_axis.append(reached)
    out = []
    for pd, d0, d1 in per_axis[0]:
        for ph, h0, h1 in per_axis[1]:
            for pw, w0, w1 in per_axis[2]:
                taps = phase_taps(geom, (pd, ph, pw))
                j0, j1 = (d0, h0, w0), (d1, h1, w1)
                blocks = box_blocks(j0, j1, MOVING_MAX) if (taps and with_blocks) else ()
                out.append(PhaseWork((pd, ph, pw), taps, j0, j1, blocks))
    return tuple(out)


def dw_x_extent(ax: Axis, rows: int) -> int:
    """Rows of the padded x buffer that ``rows`` output rows read."""
    if rows <= 0:
        return 0
    return (rows - 1) * ax.s + (ax.k - 1) * ax.r + 1


def tiles(n: int, size: int) -> tuple[tuple[int, int], ...]:
    """(start, size) tiles of [0, n)."""
    return tuple((s, min(size, n - s)) for s in range(0, n, size))


def tile_sizes(n: int, size: int) -> list[int]:
    """The sizes of the ``tiles(n, size)``."""
    return [min(size, n - s) for s in range(0, n, size)]


def n_tiles(n: int, size: int) -> int:
    return ceil_div(n, size)


def _needs_stage(lo: list[int], hi: list[int], ext: list[int]) -> bool:
    """The interior [lo, hi) of a buffer with extents ``ext`` is not contiguous per partition."""
    return not (lo[2] == 0 and hi[2] == ext[2] and (lo[1] == 0 and hi[1] == ext[1] or hi[0] - lo[0] == 1))


def dx_band_fill(g: ConvGeom, bd: AxisBand, bh: AxisBand, bw: AxisBand | None = None) -> tuple[int, bool, bool]:
    """(valid elements, padded, staged) of the dy band buffer of one dx band (W band ``bw``, default whole
    rows)."""
    bw = bw if bw is not None else axis_bands(g.axes[2], g.axes[2].n)[0]
    o = g.out_size
    bands = (bd, bh, bw)
    valid = [(max(b.q0, 0), min(b.q1, o[a])) for a, b in enumerate(bands)]
    if any(v1 <= v0 for v0, v1 in valid) or min(b.extent for b in bands) <= 0:
        return 0, True, False
    lo = [v0 - b.q0 for (v0, _v1), b in zip(valid, bands)]
    hi = [v1 - b.q0 for (_v0, v1), b in zip(valid, bands)]
    ext = [b.extent for b in bands]
    n = 1
    for a in range(3):
        n *= hi[a] - lo[a]
    padded = lo != [0, 0, 0] or hi != ext
    return n, padded, _needs_stage(lo, hi, ext)


@lru_cache(maxsize=65536)
def axis_fill(ax: Axis, b: AxisBand, clip: bool = False) -> tuple[int, int, int, tuple[int, int]] | None:
    """One axis of a dy band buffer's fill: (valid lo, valid hi, extent, the dy rows it holds); None: an empty
    buffer (``clip``: the band clipped to its live taps' rows, ``axis_live``)."""
    bb = axis_live(ax, b)[0] if clip else b
    if bb.extent <= 0:
        return None
    v0, v1 = max(bb.q0, 0), min(bb.q1, ax.o)
    lo = max(v0 - bb.q0, 0)
    return lo, max(lo, v1 - bb.q0), bb.extent, (v0, v1)


@lru_cache(maxsize=1024)
def dx_stage_elems(g: ConvGeom, band: tuple[int, int], w_band: int = 0) -> int:
    """Elements per partition of the dy staging tile (0 when every band loads contiguously); ``w_band``:
    W input columns per band (0: whole rows). A band's fill is its axes' fills combined, so the distinct
    fills per axis give every band's (a huge plane's bands are a few kinds)."""
    best = 0
    per_axis = [{f[:3] for b in axis_bands(g.axes[a], n) if (f := axis_fill(g.axes[a], b)) and f[3][1] > f[3][0]}
                for a, n in enumerate((band[0], band[1], w_band or g.axes[2].n))]   # (those holding some dy)
    for fills in product(*per_axis):
        lo, hi, ext = zip(*fills)
        if _needs_stage(list(lo), list(hi), list(ext)):
            best = max(best, prod(h - l for l, h in zip(lo, hi)))
    return best


def dw_x_fill(g: ConvGeom, od: tuple[int, int], oh: tuple[int, int], ow: tuple[int, int] | None = None
              ) -> tuple[list[int], list[int], list[int], list[int]]:
    """x band of output rows od x oh and output columns ow (default all W): (virtual start, extent,
    valid lo, valid hi) per axis. A W band's x columns carry the halo its taps' W reach reads."""
    ax = g.axes
    w0, w1 = ow if ow is not None else (0, ax[2].o)
    rows = (od[1] - od[0], oh[1] - oh[0], w1 - w0)
    x0 = [od[0] * ax[0].s - ax[0].lo, oh[0] * ax[1].s - ax[1].lo, w0 * ax[2].s - ax[2].lo]
    ext = [dw_x_extent(ax[a], rows[a]) for a in range(3)]
    lo = [max(0, x0[a]) - x0[a] for a in range(3)]
    hi = [max(lo[a], min(ax[a].n, x0[a] + ext[a]) - x0[a]) for a in range(3)]
    return x0, ext, lo, hi


def dw_x_stage_elems(g: ConvGeom, rows: tuple[int, int], cols: int = 0) -> int:
    """Upper bound of the x staging tile (elements per partition) for boxes of ``rows`` output rows and
    ``cols`` output columns (0: whole W rows)."""
    ax = g.axes
    cols = cols or ax[2].o
    if ax[1].lo == 0 and ax[1].hi == 0 and ax[2].lo == 0 and ax[2].hi == 0 and cols == ax[2].o:
        return 0   # no H/W padding, whole rows: every x band interior is contiguous per partition
    ext = [dw_x_extent(ax[0], rows[0]), dw_x_extent(ax[1], rows[1]), dw_x_extent(ax[2], cols)]
    return min(ext[0], ax[0].n) * min(ext[1], ax[1].n) * min(ext[2], ax[2].n)


def border_slabs(lo: list[int], hi: list[int], ext: list[int]) -> list[int]:
    """Elements per partition of each zero slab ``load_padded`` memsets (whole buffer if empty)."""
    if any(h <= l for l, h in zip(lo, hi)):
        return [ext[0] * ext[1] * ext[2]]
    out = []
    for a in range(3):
        other = 1
        for b in range(3):
            if b != a:
                other *= ext[b]
        if lo[a] > 0:
            out.append(lo[a] * other)
        if hi[a] < ext[a]:
            out.append((ext[a] - hi[a]) * other)
    return out


def needs_stage(lo: list[int], hi: list[int], ext: list[int]) -> bool:
    return _needs_stage(lo, hi, ext)


@lru_cache(maxsize=8192)
def dx_band_key(geom: ConvGeom, bd: AxisBand, bh: AxisBand) -> tuple:
    """What the dx loops of a band depend on, relative to the band: bands with equal keys run the
    very same instructions on their own data, so they can share one matmul as partition regions."""
    bw = axis_bands(geom.axes[2], geom.axes[2].n)[0]
    bands = (bd, bh, bw)
    key: list = [bd.extent, bh.extent, bd.i1 - bd.i0, bh.i1 - bh.i0]
    for pw in dx_phase_work(geom, bands, with_blocks=False):
        key.append((pw.phases, pw.taps,
                    tuple(pw.j1[a] - pw.j0[a] for a in range(3)),
                    tuple(pw.j0[a] - bands[a].q0 for a in range(3)),
                    tuple(geom.axes[a].i_of_j(pw.j0[a], pw.phases[a]) - bands[a].i0 for a in range(3))))
    return tuple(key)


def dx_packs(geom: ConvGeom, items: list, regions: int) -> list[list]:
    """Consecutive (batch, D band, H band) items with equal band keys, ``regions`` at a time."""
    packs: list[list] = []
    for item in items:
        if packs and len(packs[-1]) < regions and \
                dx_band_key(geom, packs[-1][0][1], packs[-1][0][2]) == dx_band_key(geom, item[1], item[2]):
            packs[-1].append(item)
        else:
            packs.append([item])
    return packs


def region_fits(c_in: int, c_out: int, regions: int) -> bool:
    """dx can pack ``regions`` independent bands on the partitions (block-diagonal filters)."""
    pitch = PMAX // regions
    return regions > 1 and c_in <= pitch and c_out <= pitch


def free_pieces(free: tuple[int, ...], limit: int = ENGINE_FREE_MAX) -> list[tuple[slice, ...]]:
    """Index slices over a tile's free axes that cover it in pieces of at most ``limit`` elements per
    partition (one engine access each): whole trailing axes, the first axis that still fits cut in runs,
    one index at a time on the axes before it. A tile within the limit is one piece."""
    split = next(i for i in range(len(free) + 1) if prod(free[i:]) <= limit)
    if split == 0:
        return [tuple(slice(0, n) for n in free)]
    axis, inner = split - 1, prod(free[split:])
    run = max(1, limit // inner)
    pieces = []
    for outer in product(*(range(n) for n in free[:axis])):
        for a0 in range(0, free[axis], run):
            pieces.append(tuple(slice(i, i + 1) for i in outer) + (slice(a0, min(free[axis], a0 + run)),)
                          + tuple(slice(0, n) for n in free[split:]))
    return pieces

