"""Row-mode x^T tiles by DMA transpose: which rows come from x and which are zeros (pure Python).

A row-mode x^T tile is ``[rows, x columns, ci]``: row ``r = i*ch + j`` is output row
(d0 + i, h0 + j) of a chunk of ``cd x ch`` rows, shifted by the (kd, kh) tap into x. Built by
``dma_transpose`` straight from x in HBM, a transfer must read its rows at one uniform stride of the
(D*H, W)-flattened x: the rows of one d plane always are (stride s_h); several planes only when the
plane step equals ``ch`` row steps (``s_d * H == ch * s_h``) and no row of those planes is clipped by
the H padding. Rows whose x row is padding are zeros, written by DMA from a zero tile (DMA may start
at any partition; compute engines may not). Columns outside x are padding too: the same columns of
every tile, so the kernel zeroes them once per buffer. The kernel and the planner walk these lists.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .costs import CostSheet
from .geometry import Axis, ConvGeom
from .schedule import dw_x_extent

XT_DMA_BUFS = 3      # x^T tiles in flight: a tile's transposes run while the two before it are in use


def xt_dma_bufs(plan) -> int:
    """x-stationary's ring of x^T bundle tiles (``XT_DMA_BUFS``), one deeper with ``dw_interleave``: there a
    box's last bundle reuses the tile of a bundle two before it, whose matmuls free it too late for the
    zero-row memset and the transposes' ~1.6 us to land before the PE reaches it (stem: 0.5 us per box)."""
    if plan.dw_x_stationary and plan.dw_interleave:
        return XT_DMA_BUFS + 1
    return XT_DMA_BUFS
MEMSET_MAX = 32768   # elements per partition of one memset of the zero tile (engine access limit 64K)
ZERO_MEMSET_MAX = 512   # x-column elements per partition up to which a tile's zero rows are one memset
ZERO_MEMSET_MIN_ROWS = 16   # zero runs at least this long go to a GpSimd memset when its partitions allow


@dataclass(frozen=True)
class XtRun:
    """``rows`` tile rows from partition ``p0``; for a transpose, the first one's flattened x row
    ``x_row = d*H + h`` (the others follow at ``step`` flattened rows)."""

    p0: int
    rows: int
    x_row: int = 0
    step: int = 0


@dataclass(frozen=True)
class XtFill:
    """The DMAs that fill one x^T tile: transposes from x, zero rows written before them, and ``after``:
    zero rows written after them (rows a bridging transpose read from a neighbouring plane, see
    ``xt_fill``)."""

    transposes: tuple[XtRun, ...]
    zeros: tuple[XtRun, ...]
    after: tuple[XtRun, ...] = ()


def valid_range(start: int, step: int, count: int, limit: int) -> tuple[int, int]:
    """The indices j in [0, count) with 0 <= start + j*step < limit (step >= 1), as [lo, hi)."""
    lo = -(start // step) if start < 0 else 0   # ceil(-start / step)
    hi = min(count, (limit - 1 - start) // step + 1) if limit - 1 - start >= 0 else 0
    return (lo, hi) if hi > lo else (0, 0)


def xt_columns(g: ConvGeom) -> tuple[int, int, int]:
    """(tile columns, first x column's tile column, end of the x columns) of a row-mode x^T tile:
    tile column c holds x column ``c - lo`` (all W output columns of the row)."""
    ax: Axis = g.axes[2]
    xw = dw_x_extent(ax, ax.o)
    lo = min(xw, ax.lo)
    hi = max(lo, min(xw, ax.lo + ax.n))
    return xw, lo, hi


def xt_window(g: ConvGeom, w_lo: int, w_hi: int) -> tuple[int, int]:
    """The tile columns [a, b) holding x columns that output columns [w_lo, w_hi) read (any kw tap),
    within the x columns of the tile (the pad columns are zeroed once): what a fill must write."""
    ax: Axis = g.axes[2]
    _xw, lo, hi = xt_columns(g)
    if w_hi <= w_lo:
        return lo, lo
    a = max(lo, w_lo * ax.s)
    b = min(hi, (w_hi - 1) * ax.s + (ax.k - 1) * ax.r + 1)
    return (a, b) if b > a else (lo, lo)


@lru_cache(maxsize=65536)
def xt_fill(g: ConvGeom, od0: int, oh0: int, cd: int, ch: int, kd: int, kh: int, bridge: bool = True) -> XtFill:
    """The transposes and zero rows of the x^T tile of tap pair (kd, kh) for output rows
    [od0, od0+cd) x [oh0, oh0+ch) (rows on partitions 0..cd*ch-1). ``bridge``: one transfer across
    planes clipped by the H padding (for transposes; ``Plan.dw_xt_copy``'s copies are charged by bytes,
    so bridging would only add the zero writes after them)."""
    ad, ah = g.axes[0], g.axes[1]
    nrows = cd * ch
    _xw, c_lo, c_hi = xt_columns(g)
    if c_hi <= c_lo:
        return XtFill((), ())   # no x column at all: the once-zeroed pad columns are the whole tile
    d_start = od0 * ad.s + kd * ad.r - ad.lo
    h_start = oh0 * ah.s + kh * ah.r - ah.lo
    i_lo, i_hi = valid_range(d_start, ad.s, cd, ad.n)
    j_lo, j_hi = valid_range(h_start, ah.s, ch, ah.n)
    if i_hi <= i_lo or j_hi <= j_lo:
        return XtFill((), (XtRun(0, nrows),))
    zero_rows = [(0, i_lo * ch)]
    for i in range(i_lo, i_hi):
        zero_rows += [(i * ch, i * ch + j_lo), (i * ch + j_hi, (i + 1) * ch)]
    zero_rows.append((i_hi * ch, nrows))
    zeros: list[list[int]] = []
    for a, b in zero_rows:   # merge touching runs (the end of a plane and the start of the next)
        if b <= a:
            continue
        if zeros and zeros[-1][1] == a:
            zeros[-1][1] = b
        else:
            zeros.append([a, b])

    def x_row(i: int, j: int) -> int:
        return (d_start + i * ad.s) * ah.n + h_start + j * ah.s

    uniform = ad.s * ah.n == ch * ah.s   # the chunk's planes follow one another at one flattened row stride
    if j_lo == 0 and j_hi == ch and uniform:   # whole planes at one uniform stride
        transposes = (XtRun(i_lo * ch, (i_hi - i_lo) * ch, x_row(i_lo, 0), ah.s),)
    elif bridge and uniform and i_hi - i_lo >= 2:
        # H padding clips rows at both ends of every plane: one transfer bridges the planes, reading the
        # clipped rows between them from x's neighbouring rows (in bounds: they lie between valid rows),
        # and those rows are zeroed after it -- one transpose fills whole [128, 16] blocks where one per
        # plane would pay a block row for each plane's few rows (trn2 arch guide "DMA Transpose")
        p0, p1 = i_lo * ch + j_lo, (i_hi - 1) * ch + j_hi
        transposes = (XtRun(p0, p1 - p0, x_row(i_lo, j_lo), ah.s),)
        inner = [z for z in zeros if p0 <= z[0] and z[1] <= p1]
        return XtFill(transposes, tuple(XtRun(a, b - a) for a, b in zeros if [a, b] not in inner),
                      tuple(XtRun(a, b - a) for a, b in inner))
    else:
        transposes = tuple(XtRun(i * ch + j_lo, j_hi - j_lo, x_row(i, j_lo), ah.s) for i in range(i_lo, i_hi))
    return XtFill(transposes, tuple(XtRun(a, b - a) for a, b in zeros))


@dataclass(frozen=True)
class XtGroup:
    """Consecutive slots ``slot0 .. slot0+slots`` of a bundle tile holding pairs (kd, kh), (kd, kh+1), ...
    whose fills have the same rows: each run of ``fill`` is one 4-D transpose for all of them (src
    ``[ci, slots, columns, rows]``, the slot dim one dilated H step of x rows apart), its zero rows one
    memset (see ``zero_by_memset``)."""

    slot0: int
    slots: int
    fill: XtFill


def xt_bundle_groups(g: ConvGeom, od0: int, oh0: int, cd: int, ch: int,
                     pairs: tuple[tuple[int, int], ...], bridge: bool = True) -> tuple[XtGroup, ...]:
    """The groups of a bundle's pairs (in slot order) whose x^T tiles one transpose per run can fill:
    same kd, consecutive kh, and the same transposed / zero rows (the kh of one H-padding class)."""
    groups: list[list] = []
    for s, (kd, kh) in enumerate(pairs):
        fill = xt_fill(g, od0, oh0, cd, ch, kd, kh, bridge)
        if groups:
            s0, n, f0 = groups[-1]
            kd0, kh0 = pairs[s0]
            if kd == kd0 and kh == kh0 + n and _same_rows(f0, fill, n * g.axes[1].r):
                groups[-1][1] += 1
                continue
        groups.append([s, 1, fill])
    return tuple(XtGroup(s0, n, f) for s0, n, f in groups)


def _same_rows(a: XtFill, b: XtFill, x_rows_apart: int) -> bool:
    """``b``'s tile rows equal ``a``'s, and its x rows are ``x_rows_apart`` flattened rows further."""
    return a.zeros == b.zeros and a.after == b.after and len(a.transposes) == len(b.transposes) and all(
        (ra.p0, ra.rows, ra.step) == (rb.p0, rb.rows, rb.step) and rb.x_row - ra.x_row == x_rows_apart
        for ra, rb in zip(a.transposes, b.transposes))


def zero_by_memset(g: ConvGeom, ci_tile: int) -> bool:
    """Zero rows by one GpSimd memset of the tile's x columns (all its rows, before the transposes
    overwrite the valid ones) instead of one DMA per zero run: for tiny channel counts, where a tile
    has many clipped runs (one per d plane and H edge: the stem's 7x7 kernel) and each DMA holds one
    of the 16 queues for its ~1.3 us start latency, while the memset of so few elements costs
    ~0.2 us. The memset starts at partition 0 (a compute engine cannot start at the clipped rows)."""
    _xw, lo, hi = xt_columns(g)
    return 0 < (hi - lo) * ci_tile <= ZERO_MEMSET_MAX


def _engine_partitions_ok(p0: int, n: int) -> bool:
    """A compute engine may access partitions [p0, p0+n) (nki-api §2: n <= 32 from 0/32/64/96,
    n <= 64 from 0/64, more from 0)."""
    return (n <= 32 and p0 % 32 == 0) or (n <= 64 and p0 in (0, 64)) or p0 == 0


def zero_split(run: XtRun) -> tuple[XtRun | None, XtRun | None]:
    """(by DMA, by GpSimd memset) parts of a zero run, in tile partitions. A whole zero plane (D padding:
    >= 32 rows) by DMA takes DMA bandwidth from the x^T transposes, which bound row-mode dw; GpSimd is
    idle there. A compute engine must start at a partition its count allows, so a run that does not is
    cut at the next multiple of 32: the head by DMA, the rest by memset (when that is allowed and long
    enough)."""
    run = XtRun(run.p0, run.rows)   # (the partitions only)
    p1 = run.p0 + run.rows
    if run.rows >= ZERO_MEMSET_MIN_ROWS and _engine_partitions_ok(run.p0, run.rows):
        return None, run
    m = -(-run.p0 // 32) * 32
    if p1 - m >= ZERO_MEMSET_MIN_ROWS and _engine_partitions_ok(m, p1 - m):
        return XtRun(run.p0, m - run.p0), XtRun(m, p1 - m)
    return run, None


def xt_dma_setup_cost(c: CostSheet, g: ConvGeom, ci_tile: int, slots: int = 1) -> None:
    """The memsets of one RowXtDma: each buffer's pad columns (of its ``slots`` slot views: one
    memset per buffer and side, GpSimd), the zero tile (VectorE: idle until dw's first dy^T evictions, while
    GpSimd's queue is what the first x^T tiles' zero-row memsets wait behind)."""
    xw, lo, hi = xt_columns(g)
    for n in (lo, xw - hi):
        if n > 0:
            c.compute("gpsimd", slots * n * ci_tile, 0, 1.0, XT_DMA_BUFS, op="memset")
    fill = xw * ci_tile
    for z0 in range(0, fill, MEMSET_MAX):
        c.compute("vector", min(MEMSET_MAX, fill - z0), 0, 1.0, 1, op="memset")


def xt_dma_cost(c: CostSheet, g: ConvGeom, ci_tile: int, ci: int, chunk: tuple[int, int, int, int],
                span: tuple[int, int], tile_pe_ns: float = 0.0, one_tile: bool = False,
                bufs: int = XT_DMA_BUFS, copy: bool = False) -> None:
    """The DMAs of the x^T tiles of one row chunk (od0, oh0, cd, ch) and C_in tile of ``ci`` channels,
    for the (kd, kh) pairs of the tap span (mirrors RowXtDma.fill).

    ``tile_pe_ns``: the PE work on one tile. A tile's DMAs start when the matmuls of the tile
    XT_DMA_BUFS back are done and take their latency L (start latency + the slowest transfer at its
    engines' share), so tiles cannot go faster than (PE + L) / XT_DMA_BUFS each: the PE idles the rest
    (small layers, where L dominates); charged as TensorE time. ``one_tile``: the pairs of the span
    share one tile (x-stationary's bundle): one latency (its slowest transfer), ``tile_pe_ns`` its PE work.
    ``bufs``: the ring's depth (``xt_dma_bufs``).
    ``copy`` (``Plan.dw_xt_copy``): the runs are channel-major ``dma_copy`` fills (``xt_run_ns``).
    """
    ds = g.dtype_bytes
    xw, lo, hi = xt_columns(g)
    kw_n = g.kernel[2]
    row = xw * ci_tile * ds
    bw = c.hw.dma_bytes_per_ns
    worst = None   # one_tile: the slowest transfer of the whole span
    memset = zero_by_memset(g, ci_tile)
    pairs = tuple(g.tap_coords(t)[:2] for t in range(span[0], span[1], kw_n))
    if one_tile and memset:   # (tiny C_in) the bundle's pairs of one H-padding class share each transpose
        groups = xt_bundle_groups(g, *chunk, pairs, not copy)
    else:
        groups = tuple(XtGroup(i, 1, xt_fill(g, *chunk, kd, kh, not copy)) for i, (kd, kh) in enumerate(pairs))
    for grp in groups:
        fill = grp.fill
        slowest = 0.0
        if memset and fill.zeros:
            c.compute("gpsimd", grp.slots * (hi - lo) * ci_tile, 0, 1.0, 1, op="memset")
        for run in (fill.after if memset else fill.zeros + fill.after):
            by_dma, by_memset = zero_split(run)
            if by_memset is not None:   # GpSimd, per MEMSET_MAX elements of a row (of each slot)
                for z0 in range(0, xw * ci_tile, MEMSET_MAX):
                    c.compute("gpsimd", min(MEMSET_MAX, xw * ci_tile - z0), 0, 1.0, grp.slots, op="memset")
            if by_dma is None:
                continue
            c.dma(grp.slots * by_dma.rows * row, row)
            slowest = max(slowest, by_dma.rows * row / (bw * row / (row + 256.0) * _rate(by_dma.rows)))
        for run in fill.transposes:
            if copy:   # channel-major dma_copy fills (Plan.dw_xt_copy)
                busy, lone = xt_run_ns(c, run.rows, grp.slots, hi - lo, ci, ds, True)
                c.busy["dma"] += busy
                c.count("dma_copy", 1)
                slowest = max(slowest, lone)
                continue
            # the body's destination [rows, slots, columns, ci] (a pair's own tile: [rows, columns, ci],
            # the same blocks), its source [ci, (slots,) columns, rows]; charged by whole blocks
            src = (ci, grp.slots, hi - lo, run.rows) if one_tile and memset else (ci, hi - lo, run.rows)
            slowest = max(slowest, c.dma_transpose((run.rows, grp.slots, hi - lo, ci), ds, src_shape=src))
        if one_tile:
            worst = max(worst or 0.0, slowest) if (fill.zeros or fill.transposes) else worst
        elif fill.zeros or fill.transposes:
            _charge_latency(c, tile_pe_ns, slowest, bufs)
    if worst is not None:
        _charge_latency(c, tile_pe_ns, worst, bufs)


def xt_run_ns(c: CostSheet, rows: int, slots: int, cols: int, ci: int, ds: int, copy: bool) -> tuple[float, float]:
    """(DMA busy ns, ns until it lands alone) of one x^T run of ``rows`` rows x ``slots`` x ``cols`` x ``ci``.

    Transpose: its destination ``[rows, slots, cols, ci]`` in whole ``[128, 16]`` blocks at the transpose
    efficiency from HBM (trn2 arch guide "DMA Transpose"; nkisim charges the same), every engine at work.
    Copy (``Plan.dw_xt_copy``): the bytes at the descriptor efficiency of ``cols``-element runs, at least
    half a DGE issue time (the fills alternate between the two hardware-DGE queues), landing at the
    engines' share its ``rows`` partitions get."""
    bw = c.hw.dma_bytes_per_ns
    if copy:
        moved = rows * slots * cols * ci * ds
        ns = moved / (bw * c.hw.descriptor_efficiency(cols * ds))
        return max(ns, c.hw.dma_issue_ns / 2), ns / _rate(rows)
    ns = c.hw.transpose_ns((rows, slots, cols, ci), ds)
    return ns, ns


def _charge_latency(c: CostSheet, tile_pe_ns: float, slowest: float, bufs: int = XT_DMA_BUFS) -> None:
    """The PE idle of a tile whose DMAs start ``bufs`` tiles back (see ``xt_dma_cost``)."""
    latency = c.hw.dma_fixed_ns + slowest
    c.busy["tensor"] += max(0.0, (tile_pe_ns + latency) / bufs - tile_pe_ns)


def _rate(partitions: int) -> float:
    """The share of the 16 DMA engines a transfer with ``partitions`` SBUF partitions uses (nkisim)."""
    return min(16, -(-partitions * 16 // 128)) / 16


def dyt_runs(ho: int, d0: int, h0: int, cd: int, ch: int) -> tuple[tuple[int, int, int], ...]:
    """(first partition, first (D_out x H_out)-flattened dy row, rows) of the ``dma_transpose`` transfers
    of a row chunk's dy^T ``[cd*ch rows, W_out, C_out]`` (``Plan.dw_dyt_dma``): the chunk's rows are
    consecutive flattened rows when it holds whole H rows (or one d plane), else one transfer per plane."""
    if ch == ho or cd == 1:
        return ((0, d0 * ho + h0, cd * ch),)
    return tuple((i * ch, (d0 + i) * ho + h0, ch) for i in range(cd))

