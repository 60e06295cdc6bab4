"""dx:toeplitz as plain data: output positions stacked on the PE's M axis (block-Toeplitz filters).

Pure Python (no NKI import): the kernel (``nki_dx_toeplitz``) iterates these lists and the planner's
estimate walks the same lists.

For tiny C_in the gather formulation of dx uses M = C_in columns of the PE whatever it does. Here,
per stride phase (pd, ph) of a band, U_d x U_h consecutive phase positions along d and h go on M
with the C_in channels: ``O[(ci, u_d, u_h), (m_d, m_h, j_w)] = dx[ci, j_d, j_h, j_w]`` with
``j_d = j_d0 + U_d*m_d + u_d`` (likewise h). For each dy row offset pair ``(delta_d, delta_h)``
(``delta = u - t`` for tap shift t) and each kw tap of the w phase, ONE matmul accumulates
``stationary = Z[co, kw, z_d0 : z_d0 + U_d, z_h0 : z_h0 + U_h, ci]`` (a window of the phase's tap grid,
zero-padded by U - 1 on both sides, so every (u, t) pair is met exactly once over the offsets) with
``moving = dy band [co, rows j_d0 + U_d*m_d + delta_d, likewise h, the w window of the tap]``
(free-axis strided views of the zero-padded dy band). Matmuls per U positions drop from U*T to
U + L - 1 (L: the tap span of the phase, T taps) per Toeplitz axis; each matmul still costs its N
cycles. The partitions of O are (ci, u_d, u_h) (the stationary window viewed channel-major) or
(u_d, u_h, ci), whichever needs fewer store DMAs: the eviction writes them to a plane of the same
partition layout, and each store DMA moves one channel's U_d x U_h partitions (or one u_d's
U_h x C_in) to HBM with one strided destination pattern (runs of W elements). W stays on the free axis (a u_w on M would make the store
runs one element long).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd

from .costs import TARGET_FIGURES, CostSheet, TargetFigures
from .geometry import Axis, ConvGeom, ceil_div
from .schedule import MOVING_MAX, PMAX, AxisBand, axis_bands, box_block_sizes, n_tiles

MAX_OPTIONS = 1   # (U_d, U_h) choices the planner estimates per base plan (best by the PE-cycle proxy)


@dataclass(frozen=True)
class TapLine:
    """The taps of one axis phase as a line of tap shifts t = t_min + z_step * i (i < count)."""

    t_min: int
    z_step: int
    count: int
    first_k: int     # the phase's first kernel tap and the kernel-index step between its taps
    k_step: int

    @property
    def span(self) -> int:
        return (self.count - 1) * self.z_step + 1

    @property
    def shifts(self) -> tuple[int, ...]:
        return tuple(self.t_min + self.z_step * i for i in range(self.count))


@lru_cache(maxsize=4096)
def tap_line(ax: Axis, ph: int) -> TapLine | None:
    """The phase's taps (None when no tap reaches phase ``ph``)."""
    taps = ax.phase_taps(ph)
    if not taps:
        return None
    k_step = ax.s // gcd(ax.s, ax.r)
    return TapLine(ax.tap_shift(taps[0], ph), ax.r // gcd(ax.s, ax.r), len(taps), taps[0], k_step)


@lru_cache(maxsize=4096)
def z_extent(ax: Axis, u: int) -> int:
    """Length of the zero-padded tap line of the axis (the longest phase's span + 2 (U - 1))."""
    spans = [ln.span for ph in range(ax.s) if (ln := tap_line(ax, ph)) is not None]
    return max(spans) + 2 * (u - 1)


@lru_cache(maxsize=4096)
def deltas(line: TapLine, u: int) -> tuple[int, ...]:
    """The dy row offsets delta = u' - t (u' < u) whose stationary window holds at least one tap."""
    return tuple(sorted({uu - t for uu in range(u) for t in line.shifts}))


def offsets(lines: tuple[TapLine, TapLine], u: tuple[int, int], pair_axis: int
            ) -> tuple[tuple[int, int, bool], ...]:
    """The (delta_d, delta_h, paired) matmuls of a sub-box with group sizes ``u``. With ``pair_axis``
    0 (d) or 1 (h), consecutive offsets delta, delta + 1 along that axis share one matmul: the dy
    band's copy on partitions C_out..2 C_out is shifted by one row along the axis, and so is the tap
    grid's copy, so that K = 2 C_out serves both offsets."""
    dd, dh = deltas(lines[0], u[0]), deltas(lines[1], u[1])
    if pair_axis < 0:
        return tuple((a, b, False) for a in dd for b in dh)
    firsts = []
    seq = list(dd if pair_axis == 0 else dh)
    i = 0
    while i < len(seq):
        paired = i + 1 < len(seq) and seq[i + 1] == seq[i] + 1
        firsts.append((seq[i], paired))
        i += 2 if paired else 1
    if pair_axis == 0:
        return tuple((a, b, pr) for a, pr in firsts for b in dh)
    return tuple((a, b, pr) for a in dd for b, pr in firsts)


def pair_fits(g: ConvGeom) -> bool:
    """Two copies of the dy band fit the partitions (K = 2 C_out <= 128)."""
    return 2 * g.c_out <= PMAX


def pair_shifts(g: ConvGeom, u: tuple[int, int], pool_ext: tuple[int, int, int], pair_axis: int) -> tuple[int, int]:
    """Flat element shifts (dy band buffer, tap grid) of one row along the pairing axis."""
    zs = z_shape(g, u)
    if pair_axis == 0:
        return pool_ext[1] * pool_ext[2], zs[2] * zs[3]
    return pool_ext[2], zs[3]


def z_start(line: TapLine, u_full: int, delta: int) -> int:
    """First index of the stationary window for offset ``delta`` in the line padded by U - 1."""
    return u_full - 1 - delta - line.t_min


@dataclass(frozen=True)
class SubBox:
    """Groups of U' positions per Toeplitz axis: groups [g0, g0 + G) of size U (or one tail group)."""

    g0: tuple[int, int]
    groups: tuple[int, int]
    u: tuple[int, int]

    def m(self, c_in: int) -> int:
        return self.u[0] * self.u[1] * c_in


def axis_parts(n: int, u: int) -> tuple[tuple[int, int, int], ...]:
    """(first group, groups, group size) covering n positions: the full groups, then the tail."""
    full, rest = divmod(n, u)
    out = [(0, full, u)] if full else []
    if rest:
        out.append((full, 1, rest))
    return tuple(out)


@dataclass(frozen=True)
class WPhase:
    """One w phase of a phase pair: its j_w range and kw taps (empty: zeros)."""

    pw: int
    j0: int
    j1: int
    taps: tuple[int, ...]


@dataclass(frozen=True)
class PairWork:
    """One (d, h) stride phase pair of one band: its positions, tap lines, sub-boxes and w phases."""

    phases: tuple[int, int]
    j0: tuple[int, int]
    n: tuple[int, int]
    lines: tuple[TapLine, TapLine] | None     # None: no tap reaches the pair (zeros)
    subs: tuple[SubBox, ...]
    wphases: tuple[WPhase, ...]


@lru_cache(maxsize=4096)
def toeplitz_work(g: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand], u: tuple[int, int]
                  ) -> tuple[PairWork, ...]:
    """The phase pairs of one band (D band, H band, full W)."""
    ax = g.axes
    wph = []
    for pw in range(ax[2].s):
        j0, j1 = ax[2].phase_j_range(pw, bands[2].i0, bands[2].i1)
        if j1 > j0:
            wph.append(WPhase(pw, j0, j1, ax[2].phase_taps(pw)))
    out = []
    for pd in range(ax[0].s):
        for ph in range(ax[1].s):
            rd = ax[0].phase_j_range(pd, bands[0].i0, bands[0].i1)
            rh = ax[1].phase_j_range(ph, bands[1].i0, bands[1].i1)
            n = (rd[1] - rd[0], rh[1] - rh[0])
            if min(n) <= 0 or not wph:
                continue
            ld, lh = tap_line(ax[0], pd), tap_line(ax[1], ph)
            lines = (ld, lh) if ld is not None and lh is not None else None
            subs = tuple(SubBox((pd_[0], ph_[0]), (pd_[1], ph_[1]), (pd_[2], ph_[2]))
                         for pd_ in axis_parts(n[0], u[0]) for ph_ in axis_parts(n[1], u[1]))
            out.append(PairWork((pd, ph), (rd[0], rh[0]), n, lines, subs, tuple(wph)))
    return tuple(out)


def plane_groups(g: ConvGeom, band: tuple[int, int], u: tuple[int, int]) -> tuple[int, int]:
    """Groups per Toeplitz axis of the dx plane (the largest phase of a band of ``band`` rows)."""
    return tuple(ceil_div(ceil_div(band[a], g.axes[a].s), u[a]) for a in range(2))  # type: ignore[return-value]


def z_shape(g: ConvGeom, u: tuple[int, int]) -> tuple[int, int, int, int]:
    """Free shape of one C_out tile's tap grids: [phase pairs x K_w, Z_d, Z_h, C_in]."""
    return (g.axes[0].s * g.axes[1].s * g.axes[2].k, z_extent(g.axes[0], u[0]), z_extent(g.axes[1], u[1]), g.c_in)


def contiguous_run(free: list[tuple[int, int]]) -> int:
    """Elements of the innermost contiguous run of a (stride, count) pattern, outer to inner (the way
    nkisim's trace measures it, dims of count 1 skipped)."""
    run = 1
    for s, c in reversed(free):
        if c == 1:
            continue
        if s != run:
            break
        run *= c
    return run


def ci_major(g: ConvGeom, sub: SubBox) -> bool:
    """The partitions of a sub-box's O: (ci, u_d, u_h) when C_in <= U_d' (one store DMA per channel),
    else (u_d, u_h, ci) (one store DMA per u_d): whichever needs fewer DMAs."""
    return g.c_in <= sub.u[0]


def store_pattern(g: ConvGeom, u: tuple[int, int], sub: SubBox) -> list[list[int]]:
    """The dx (HBM) access pattern of one store DMA, outer to inner: (u_d, u_h, m_d, m_h, w) for one
    channel (ci-major), or (u_h, ci, m_d, m_h, w) for one u_d (u-major)."""
    ax = g.axes
    W, H, D = ax[2].n, ax[1].n, ax[0].n
    rows = [[u[0] * ax[0].s * H * W, sub.groups[0]], [u[1] * ax[1].s * W, sub.groups[1]], [1, W]]
    if ci_major(g, sub):
        return [[ax[0].s * H * W, sub.u[0]], [ax[1].s * W, sub.u[1]]] + rows
    return [[ax[1].s * W, sub.u[1]], [D * H * W, g.c_in]] + rows


def store_dmas(g: ConvGeom, sub: SubBox) -> int:
    """Store DMAs of one sub-box (each moves C_in or U_d' of its partition groups)."""
    return g.c_in if ci_major(g, sub) else sub.u[0]


def store_run(g: ConvGeom, u: tuple[int, int], plane_g: tuple[int, int], sub: SubBox) -> int:
    """Contiguous elements per descriptor of one store: the shorter of the plane and dx runs."""
    W = g.axes[2].n
    src = [(plane_g[1] * W, sub.groups[0]), (W, sub.groups[1]), (1, W)]
    dst = [(s, c) for s, c in store_pattern(g, u, sub)]
    return min(contiguous_run(src), contiguous_run(dst))


def toeplitz_domain(g: ConvGeom) -> str:
    """'' when dx:toeplitz applies, else why not."""
    if g.c_in * 2 > PMAX:
        return f"C_in {g.c_in} > {PMAX // 2}: two positions of C_in channels do not fit the PE's M axis"
    spans = [ln.span for ax in g.axes[:2] for ph in range(ax.s) if (ln := tap_line(ax, ph)) is not None]
    if max(spans) < 2:
        return "every D/H phase has a one-tap span: positions on M would save no matmul"
    return ""


def _axis_cost(ax: Axis, n: int, u: int) -> float:
    """Sum over groups of the stationary windows per group (the matmul count factor of one axis),
    averaged over the axis' phases that have taps."""
    tot, cnt = 0, 0
    for ph in range(ax.s):
        line = tap_line(ax, ph)
        if line is None:
            continue
        cnt += 1
        tot += sum(groups * len(deltas(line, uu)) for _g0, groups, uu in axis_parts(n, u))
    return tot / max(cnt, 1)


@lru_cache(maxsize=1024)
def toeplitz_options(g: ConvGeom, band: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """The (U_d, U_h) choices worth estimating for bands of ``band`` rows: U_d * U_h * C_in <= 128
    and > 1 position, ranked by matmul count x moving size (the PE cycles up to a constant);
    the best ``MAX_OPTIONS``."""
    if toeplitz_domain(g):
        return ()
    mmax = PMAX // g.c_in
    n = [ceil_div(band[a], g.axes[a].s) for a in range(2)]
    ranked = []
    for ud in range(1, min(mmax, n[0]) + 1):
        for uh in range(1, min(mmax // ud, n[1]) + 1):
            if ud * uh < 2:
                continue
            # PE cycles ~ (sum over d groups of their windows) x (same for h) x the w positions;
            # a matmul costs at least 64 cycles, which small groups-x-W moving sizes do not reach
            groups = ceil_div(n[0], ud) * ceil_div(n[1], uh) * g.axes[2].n // g.axes[2].s
            floor = 64 / max(1, min(512, groups))
            cyc = _axis_cost(g.axes[0], n[0], ud) * _axis_cost(g.axes[1], n[1], uh) * max(1.0, floor)
            ranked.append((cyc, -ud * uh, ud, uh))
    ranked.sort()
    return tuple((ud, uh) for _c, _m, ud, uh in ranked[:MAX_OPTIONS])


# ------------------------------------------------------------------------------- planner side


def sbuf_bytes(g: ConvGeom, band: tuple[int, int], u: tuple[int, int]) -> tuple[int, int]:
    """(tap grids of every C_out tile, the two dx planes) in bytes per partition."""
    zs = z_shape(g, u)
    grids = n_tiles(g.c_out, PMAX) * zs[0] * zs[1] * zs[2] * zs[3] * g.dtype_bytes
    pg = plane_groups(g, band, u)
    return grids, 2 * pg[0] * pg[1] * g.axes[2].n * g.dtype_bytes


def shifted_elems(pool_ext: tuple[int, int, int], ext: tuple[int, int, int], shift: int) -> int:
    """Elements per partition the shifted copy of a band moves: up to the band's last element."""
    last = ((ext[0] - 1) * pool_ext[1] + ext[1] - 1) * pool_ext[2] + ext[2]
    return max(0, last - shift)


def first_copy_ns(g: ConvGeom, hw: TargetFigures, u: tuple[int, int], pair_axis: int,
                  pool_ext: tuple[int, int, int], bd: AxisBand, bh: AxisBand) -> float:
    """The exposed start of the first band's shifted copy (K pairs): it waits for the band's placement
    and the first paired matmul waits for it (fixed latency + bytes at the rate of C_out partitions)."""
    if pair_axis < 0 or min(bd.extent, bh.extent) <= 0:
        return 0.0
    ext = (bd.extent, bh.extent, axis_bands(g.axes[2], g.axes[2].n)[0].extent)
    n = shifted_elems(pool_ext, ext, pair_shifts(g, u, pool_ext, pair_axis)[0])
    rate = min(16, ceil_div(g.c_out * 16, PMAX)) / 16
    return hw.dma_fixed_ns + g.c_out * n * g.dtype_bytes / (hw.dma_bytes_per_ns * rate)


def store_tail_ns(g: ConvGeom, hw: TargetFigures, u: tuple[int, int], band: tuple[int, int], bd: AxisBand,
                  bh: AxisBand) -> float:
    """The stores of a band's last phase pair after its last eviction, beyond one DMA latency: they
    write interleaved rows of dx, so nkisim orders them (write after write) one after the other."""
    pairs = toeplitz_work(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]), u)
    if not pairs:
        return 0.0
    pg = plane_groups(g, band, u)
    total, count = 0.0, 0
    for sub in pairs[-1].subs:
        n = store_dmas(g, sub)
        nbytes = sub.m(g.c_in) // n * sub.groups[0] * sub.groups[1] * g.axes[2].n * g.dtype_bytes
        run = store_run(g, u, pg, sub) * g.dtype_bytes
        rate = min(16, ceil_div(sub.m(g.c_in) // n * 16, PMAX)) / 16
        total += n * (hw.dma_fixed_ns + nbytes / (hw.dma_bytes_per_ns * run / (run + 256.0) * rate))
        count += n
    return max(0.0, total - hw.dma_fixed_ns)


def estimate_grids(c: CostSheet, g: ConvGeom, u: tuple[int, int], pair_axis: int = -1) -> None:
    """Building the tap grids from W^T (mirrors nki_dx_toeplitz.load_toeplitz_filters after the
    transposed filters are loaded): a memset per C_out tile, one GpSimd copy per (phase pair, kw)."""
    ax = g.axes
    zs = z_shape(g, u)
    n_co = n_tiles(g.c_out, PMAX)
    c.compute("gpsimd", zs[0] * zs[1] * zs[2] * zs[3], 0, 1.0, n_co, op="memset")
    for pd in range(ax[0].s):
        for ph in range(ax[1].s):
            ld, lh = tap_line(ax[0], pd), tap_line(ax[1], ph)
            if ld is not None and lh is not None:
                c.compute("gpsimd", ld.count * lh.count * g.c_in, 1, 1.0, ax[2].k * n_co, op="tensor_copy")
    if pair_axis >= 0:   # the shifted copy of the grids on partitions C_out..2 C_out
        n = zs[0] * zs[1] * zs[2] * zs[3] - pair_shifts(g, u, (1, 1, 1), pair_axis)[1]
        c.dma(g.c_out * n * g.dtype_bytes, n * g.dtype_bytes)


@lru_cache(maxsize=8192)
def band_sheet(g: ConvGeom, target: str, u: tuple[int, int], band: tuple[int, int], bd: AxisBand, bh: AxisBand,
               pair_axis: int = -1, pool_ext: tuple[int, int, int] = (0, 0, 0)) -> CostSheet:
    """The dx compute and stores of one band of a plan with bands of ``band`` rows (mirrors
    nki_dx_toeplitz.run_dx_toeplitz's loops); ``pool_ext``: the dy band buffers' extents."""
    c = CostSheet(TARGET_FIGURES[target])
    if pair_axis >= 0 and min(b.extent for b in (bd, bh)) > 0:   # the shifted copy of the band
        n = shifted_elems(pool_ext, (bd.extent, bh.extent, axis_bands(g.axes[2], g.axes[2].n)[0].extent),
                          pair_shifts(g, u, pool_ext, pair_axis)[0])
        c.dma(g.c_out * n * g.dtype_bytes, n * g.dtype_bytes)
    ax = g.axes
    W = ax[2].n
    fp32 = g.dtype == "fp32"
    two = g.dtype_bytes == 2
    n_co = n_tiles(g.c_out, PMAX)
    bw = axis_bands(ax[2], W)[0]
    pg = plane_groups(g, band, u)
    for pair in toeplitz_work(g, (bd, bh, bw), u):
        for sub in pair.subs:
            m = sub.m(g.c_in)
            gd, gh = sub.groups
            if pair.lines is None:
                c.compute("gpsimd", gd * gh * W, 0, 1.0, 1, op="memset")
                continue
            offs = len(offsets(pair.lines, sub.u, pair_axis))
            for wp in pair.wphases:
                if not wp.taps:
                    c.compute("gpsimd", gd * gh * (wp.j1 - wp.j0), 0, 1.0, 1, op="memset")
                    continue
                for (nd, nh, nw), count in box_block_sizes((0, 0, wp.j0), (gd, gh, wp.j1), MOVING_MAX):
                    n = nd * nh * nw
                    c.matmul(m, n, fp32, offs * len(wp.taps) * n_co * count)
                    c.evict(n, two, count, contiguous=(ax[2].s == 1))
        for sub in pair.subs:
            gd, gh = sub.groups
            run = store_run(g, u, pg, sub)
            n = store_dmas(g, sub)
            c.dma(sub.m(g.c_in) // n * gd * gh * W * g.dtype_bytes, run * g.dtype_bytes, n)
    return c


def pair_axis(g: ConvGeom, u: tuple[int, int]) -> int:
    """The axis whose offset pairs save the most matmuls when two band copies fit K (-1: none)."""
    if not pair_fits(g):
        return -1
    best, axis = None, -1
    for a in (-1, 0, 1):
        count = 0
        for pd in range(g.axes[0].s):
            for ph in range(g.axes[1].s):
                ld, lh = tap_line(g.axes[0], pd), tap_line(g.axes[1], ph)
                if ld is not None and lh is not None:
                    count += len(offsets((ld, lh), u, a))
        if best is None or count < best:   # ties keep the earlier: no pairing before d before h
            best, axis = count, a
    return axis
