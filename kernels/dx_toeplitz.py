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
from .schedule import ENGINE_FREE_MAX, MOVING_MAX, PMAX, AxisBand, axis_bands, box_block_sizes, n_tiles

MAX_OPTIONS = 1   # (U_d, U_h) choices the planner estimates per base plan (best by the PE-cycle proxy)


Merge = tuple[bool, bool]
NO_MERGE: Merge = (False, False)


@dataclass(frozen=True)
class TapLine:
    """The taps of one track as a line of positions e = t_min + z_step * i (i < count) on its grid line.

    Phase mode (one stride phase of the axis, ``z_mul`` 1, ``phi`` 0): e is the tap shift t and the
    entry at (position u, offset delta) is the tap with ``t = u - delta``. Merged mode (every phase of
    the axis on M, ``z_mul`` = s): e = k r (the dilated kernel index) and the entry at (u, delta) is
    the tap with ``k r = phi + u - s delta`` (phi: the stride phase of the track's first position)."""

    t_min: int
    z_step: int
    count: int
    first_k: int     # the line's first kernel tap and the kernel-index step between its taps
    k_step: int
    z_mul: int = 1   # grid rows the stationary window moves per dy row offset
    phi: int = 0

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
def merged_line(ax: Axis, phi: int) -> TapLine:
    """Every tap of the axis (positions k r on the line) for a merged track starting at phase ``phi``."""
    return TapLine(0, ax.r, ax.k, 0, 1, ax.s, phi)


def merged_ok(ax: Axis, u: int) -> bool:
    """The axis' phases can share M with groups of ``u`` positions (a multiple of the stride, > 1 phase)."""
    return ax.s > 1 and u % ax.s == 0


def line_keys(ax: Axis, merged: bool) -> int:
    """Grid lines of the axis: one per stride phase, or one when the phases are merged."""
    return 1 if merged else ax.s


@lru_cache(maxsize=4096)
def z_extent(ax: Axis, u: int, merged: bool = False) -> int:
    """Length of the zero-padded tap line of the axis (the longest line's span + 2 (U - 1))."""
    if merged:
        return merged_line(ax, 0).span + 2 * (u - 1)
    spans = [ln.span for ph in range(ax.s) if (ln := tap_line(ax, ph)) is not None]
    return max(spans) + 2 * (u - 1)


@lru_cache(maxsize=4096)
def deltas(line: TapLine, u: int) -> tuple[int, ...]:
    """The dy row offsets delta whose stationary window holds at least one tap (positions u' < u)."""
    out = set()
    for uu in range(u):
        for e in line.shifts:
            num = uu + line.phi - e
            if num % line.z_mul == 0:
                out.add(num // line.z_mul)
    return tuple(sorted(out))


def paired_firsts(seq: tuple[int, ...]) -> list[tuple[int, bool]]:
    """Offsets along the pairing axis, in order, as (first offset, paired): delta and delta + 1 share one
    matmul (K = 2 C_out), an offset without its successor runs alone."""
    out, i = [], 0
    while i < len(seq):
        paired = i + 1 < len(seq) and seq[i + 1] == seq[i] + 1
        out.append((seq[i], paired))
        i += 2 if paired else 1
    return out


def offsets(lines: tuple[TapLine, TapLine], u: tuple[int, int], pair_axis: int
            ) -> tuple[tuple[int, int, bool], ...]:
    """The (delta_d, delta_h, paired) matmuls of a sub-box with group sizes ``u``. With ``pair_axis``
    0 (d) or 1 (h), consecutive offsets delta, delta + 1 along that axis share one matmul: the dy
    band's copy on partitions C_out..2 C_out is shifted by one row along the axis, and the tap grid's
    copy by ``z_mul`` grid rows, so that K = 2 C_out serves both offsets."""
    dd, dh = deltas(lines[0], u[0]), deltas(lines[1], u[1])
    if pair_axis < 0:
        return tuple((a, b, False) for a in dd for b in dh)
    firsts = paired_firsts(dd if pair_axis == 0 else dh)
    if pair_axis == 0:
        return tuple((a, b, pr) for a, pr in firsts for b in dh)
    return tuple((a, b, pr) for a in dd for b, pr in firsts)


def pair_fits(g: ConvGeom) -> bool:
    """Two copies of the dy band fit the partitions (K = 2 C_out <= 128)."""
    return 2 * g.c_out <= PMAX


def pair_shifts(g: ConvGeom, u: tuple[int, int], pool_ext: tuple[int, int, int], pair_axis: int,
                merge: Merge = NO_MERGE) -> tuple[int, int]:
    """Flat element shifts (dy band buffer: one row, tap grid: z_mul rows) along the pairing axis."""
    zs = z_shape(g, u, merge)
    mul = g.axes[pair_axis].s if merge[pair_axis] else 1
    if pair_axis == 0:
        return pool_ext[1] * pool_ext[2], mul * zs[2] * zs[3]
    return pool_ext[2], mul * zs[3]


# K quads: with K pairs along d, the offset pairs along h share the matmul too. The dy band and the tap
# grids get two more copies: partitions 2 C_out..3 C_out one row further along h, 3 C_out..4 C_out one
# row further along d and h (each copied from the first C_out partitions, so neither waits for another
# copy). A matmul over the four copies (K = 4 C_out) serves offsets (d, h), (d + 1, h), (d, h + 1) and
# (d + 1, h + 1); a d pair alone uses the first two copies, an h pair without its d pair runs as two
# single offsets (its copies are not one contiguous partition range).
QUAD = 4


def quad_offsets(lines: tuple[TapLine, TapLine], u: tuple[int, int]) -> tuple[tuple[int, int, int], ...]:
    """The (delta_d, delta_h, copies) matmuls of a sub-box with K quads: copies 4 (a quad), 2 (a d pair)
    or 1 (one offset)."""
    dd, dh = deltas(lines[0], u[0]), deltas(lines[1], u[1])
    out: list[tuple[int, int, int]] = []
    for a, pa in paired_firsts(dd):
        for b, pb in paired_firsts(dh):
            if pa:
                out.append((a, b, QUAD if pb else 2))
            else:
                out += [(a, b, 1), (a, b + 1, 1)] if pb else [(a, b, 1)]
    return tuple(out)


def k_offsets(lines: tuple[TapLine, TapLine], u: tuple[int, int], pair_axis: int, quad: bool = False
              ) -> tuple[tuple[int, int, int], ...]:
    """``offsets`` (or ``quad_offsets``) as (delta_d, delta_h, copies): the band copies one matmul reads."""
    if quad:
        return quad_offsets(lines, u)
    return tuple((a, b, 2 if pr else 1) for a, b, pr in offsets(lines, u, pair_axis))


def quad_legal(g: ConvGeom, u: tuple[int, int], merge: Merge, pair_axis: int, uw: int = 0) -> bool:
    """K quads apply: K pairs along d, four copies within the partitions, no W on M, and some h offset
    pair to share (else the quads are the d pairs)."""
    if pair_axis != 0 or uw or QUAD * g.c_out > PMAX:
        return False
    return any(pb for _z, _ld, lh in grid_lines(g, merge) for _b, pb in paired_firsts(deltas(lh, u[1])))


def quad_copies(g: ConvGeom, u: tuple[int, int], pool_ext: tuple[int, int, int], merge: Merge = NO_MERGE
                ) -> tuple[tuple[int, int, int, str], ...]:
    """The two quad copies as (first partition, dy band shift, tap grid shift, engine): one row along h,
    and along d and h (dy band: rows of the band buffer, tap grid: z_mul grid rows). The band's copies are
    SBUF->SBUF DMAs: VectorE already places the band and makes the pair copy, GpSimd copies without
    VectorE's 2-byte fast mode, ScalarE evicts (and may sum db), while the DMA queues carry little beside
    dx's band loads and stores. The planner weighs quads against pairs by estimate."""
    dh, zh = pair_shifts(g, u, pool_ext, 1, merge)
    dd, zd = pair_shifts(g, u, pool_ext, 0, merge)
    return ((2 * g.c_out, dh, zh, "dma"), (3 * g.c_out, dd + dh, zd + zh, "dma"))


def part_copy_on_engine(g: ConvGeom, start: int, n: int) -> bool:
    """A copy of partitions 0..C_out to ``start``.. by a compute engine: C_out partitions that start at a
    quadrant (<= 32) or half (<= 64) (docs/nki-rules.md, "Memory"), <= 64K elements; else an SBUF->SBUF DMA."""
    c = g.c_out
    return 0 < n <= ENGINE_FREE_MAX and ((c <= 32 and start % 32 == 0) or (c <= 64 and start in (0, 64)))


def part_copy_cost(c: CostSheet, g: ConvGeom, start: int, n: int, engine: str) -> None:
    """The cost of one copy of ``n`` elements per partition to partitions ``start``.. (``engine``, else DMA)."""
    if engine != "dma" and part_copy_on_engine(g, start, n):
        c.compute(engine, n, 1, c.copy_speedup(engine, g.dtype_bytes == 2, False, True), 1)
    elif n > 0:
        c.dma(g.c_out * n * g.dtype_bytes, n * g.dtype_bytes)


def z_start(line: TapLine, u_full: int, delta: int) -> int:
    """First index of the stationary window for offset ``delta`` in the line padded by U - 1."""
    return u_full - 1 + line.phi - line.z_mul * delta - line.t_min


@dataclass(frozen=True)
class Track:
    """The positions of one Toeplitz axis that share one grid line: one stride phase (phase mode) or
    every phase (merged). Position p is input row ``i0 + i_step p``; group m's offset-0 dy row is
    ``q0 + q_step(U) m``."""

    key: int         # the grid line (the phase; 0 when merged)
    i0: int
    i_step: int
    q0: int
    n: int
    line: TapLine | None   # None: no tap reaches the track (zeros)

    def q_step(self, u: int) -> int:
        return u // self.line.z_mul if self.line is not None else u


@lru_cache(maxsize=4096)
def axis_tracks(ax: Axis, band: AxisBand, merged: bool) -> tuple[Track, ...]:
    """The tracks of one axis band."""
    if merged:
        phi = (band.i0 + ax.lo) % ax.s
        return (Track(0, band.i0, 1, (band.i0 + ax.lo - phi) // ax.s, band.i1 - band.i0, merged_line(ax, phi)),)
    out = []
    for ph in range(ax.s):
        j0, j1 = ax.phase_j_range(ph, band.i0, band.i1)
        if j1 > j0:
            out.append(Track(ph, ax.i_of_j(j0, ph), ax.s, j0, j1 - j0, tap_line(ax, ph)))
    return tuple(out)


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
    """One (d, h) track pair of one band: its positions, tap lines, sub-boxes and w phases."""

    tracks: tuple[Track, Track]
    subs: tuple[SubBox, ...]
    wphases: tuple[WPhase, ...]

    @property
    def lines(self) -> tuple[TapLine, TapLine] | None:
        """None: no tap reaches the pair (zeros)."""
        ld, lh = self.tracks[0].line, self.tracks[1].line
        return (ld, lh) if ld is not None and lh is not None else None

    @property
    def n(self) -> tuple[int, int]:
        return self.tracks[0].n, self.tracks[1].n

    def z_line(self, g: ConvGeom, merge: Merge) -> int:
        """The pair's first grid line index (times K_w: the kw taps follow)."""
        return (self.tracks[0].key * line_keys(g.axes[1], merge[1]) + self.tracks[1].key) * g.axes[2].k


@lru_cache(maxsize=4096)
def toeplitz_work(g: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand], u: tuple[int, int],
                  merge: Merge = NO_MERGE) -> tuple[PairWork, ...]:
    """The track pairs of one band (D band, H band, full W)."""
    ax = g.axes
    for a in range(2):
        if merge[a] and not merged_ok(ax[a], u[a]):
            raise ValueError(f"dx:toeplitz U={u}, merge={merge}: axis {'DH'[a]} merges its phases, so U must be a "
                             f"multiple of its stride {ax[a].s} (> 1)")
    wph = []
    for pw in range(ax[2].s):
        j0, j1 = ax[2].phase_j_range(pw, bands[2].i0, bands[2].i1)
        if j1 > j0:
            wph.append(WPhase(pw, j0, j1, ax[2].phase_taps(pw)))
    if not wph:
        return ()
    out = []
    for td in axis_tracks(ax[0], bands[0], merge[0]):
        for th in axis_tracks(ax[1], bands[1], merge[1]):
            if min(td.n, th.n) <= 0:
                continue
            subs = tuple(SubBox((pd_[0], ph_[0]), (pd_[1], ph_[1]), (pd_[2], ph_[2]))
                         for pd_ in axis_parts(td.n, u[0]) for ph_ in axis_parts(th.n, u[1]))
            out.append(PairWork((td, th), subs, tuple(wph)))
    return tuple(out)


def sub_offsets(pair: PairWork, sub: SubBox, pair_axis: int, quad: bool = False
                ) -> tuple[tuple[int, int, int], ...]:
    """The (delta_d, delta_h, copies) matmuls of a sub-box (empty: no tap reaches it; its plane region is
    zeroed)."""
    lines = pair.lines
    return k_offsets(lines, sub.u, pair_axis, quad) if lines is not None else ()


def plane_groups(g: ConvGeom, band: tuple[int, int], u: tuple[int, int], merge: Merge = NO_MERGE
                 ) -> tuple[int, int]:
    """Groups per Toeplitz axis of the dx plane (the largest track of a band of ``band`` rows)."""
    return tuple(ceil_div(band[a] if merge[a] else ceil_div(band[a], g.axes[a].s), u[a])  # type: ignore[return-value]
                 for a in range(2))


def z_shape(g: ConvGeom, u: tuple[int, int], merge: Merge = NO_MERGE) -> tuple[int, int, int, int]:
    """Free shape of one C_out tile's tap grids: [track lines x K_w, Z_d, Z_h, C_in]."""
    ax = g.axes
    return (line_keys(ax[0], merge[0]) * line_keys(ax[1], merge[1]) * ax[2].k, z_extent(ax[0], u[0], merge[0]),
            z_extent(ax[1], u[1], merge[1]), g.c_in)


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


def store_pattern(g: ConvGeom, u: tuple[int, int], sub: SubBox, steps: tuple[int, int] | None = None
                  ) -> list[list[int]]:
    """The dx (HBM) access pattern of one store DMA, outer to inner: (u_d, u_h, m_d, m_h, w) for one
    channel (ci-major), or (u_h, ci, m_d, m_h, w) for one u_d (u-major). ``steps``: input rows between
    consecutive positions per axis (the tracks' i_step; default: the strides, phase mode)."""
    ax = g.axes
    W, H, D = ax[2].n, ax[1].n, ax[0].n
    sd, sh = steps if steps is not None else (ax[0].s, ax[1].s)
    rows = [[u[0] * sd * H * W, sub.groups[0]], [u[1] * sh * W, sub.groups[1]], [1, W]]
    if ci_major(g, sub):
        return [[sd * H * W, sub.u[0]], [sh * W, sub.u[1]]] + rows
    return [[sh * W, sub.u[1]], [D * H * W, g.c_in]] + rows


def store_dmas(g: ConvGeom, sub: SubBox) -> int:
    """Store DMAs of one sub-box (each moves C_in or U_d' of its partition groups)."""
    return g.c_in if ci_major(g, sub) else sub.u[0]


def store_run(g: ConvGeom, u: tuple[int, int], plane_g: tuple[int, int], sub: SubBox,
              steps: tuple[int, int] | None = None) -> int:
    """Contiguous elements per descriptor of one store: the shorter of the plane and dx runs."""
    W = g.axes[2].n
    src = [(plane_g[1] * W, sub.groups[0]), (W, sub.groups[1]), (1, W)]
    dst = [(s, c) for s, c in store_pattern(g, u, sub, steps)]
    return min(contiguous_run(src), contiguous_run(dst))


def pair_steps(pair: PairWork) -> tuple[int, int]:
    return pair.tracks[0].i_step, pair.tracks[1].i_step


def toeplitz_domain(g: ConvGeom) -> str:
    """'' when dx:toeplitz applies, else why not."""
    if g.c_in * 2 > PMAX:
        return f"C_in {g.c_in} > {PMAX // 2}: two positions of C_in channels do not fit the PE's M axis"
    spans = [ln.span for ax in g.axes[:2] for ph in range(ax.s) if (ln := tap_line(ax, ph)) is not None]
    # with every phase of a strided axis on M (merged), its s phases share the matmuls of one offset
    if max(spans) < 2 and not any(ax.s > 1 and ax.s * g.c_in <= PMAX for ax in g.axes[:2]):
        return ("every D/H phase has a one-tap span and no strided D/H axis fits its phases on M: positions "
                "on M would save no matmul")
    return ""


def _axis_cost(ax: Axis, n: int, u: int, merged: bool = False) -> float:
    """Sum over the axis' tracks and their groups of the stationary windows per group (the matmul count
    factor of one axis) for a band of ``n`` rows."""
    if merged:
        line = merged_line(ax, ax.lo % ax.s)
        return sum(groups * len(deltas(line, uu)) for _g0, groups, uu in axis_parts(n, u))
    tot = 0
    for ph in range(ax.s):
        line = tap_line(ax, ph)
        if line is None:
            continue
        tot += sum(groups * len(deltas(line, uu)) for _g0, groups, uu in axis_parts(ceil_div(n, ax.s), u))
    return tot


@lru_cache(maxsize=1024)
def toeplitz_options(g: ConvGeom, band: tuple[int, int]) -> tuple[tuple[tuple[int, int], Merge], ...]:
    """The ((U_d, U_h), merge) choices worth estimating for bands of ``band`` rows: U_d * U_h * C_in
    <= 128 and > 1 position (U a multiple of the stride on a merged axis), ranked by matmul count x
    moving size (the PE cycles up to a constant); the best ``MAX_OPTIONS``."""
    if toeplitz_domain(g):
        return ()
    mmax = PMAX // g.c_in
    ranked = []
    for md in (False, True):
        for mh in (False, True):
            if (md and g.axes[0].s == 1) or (mh and g.axes[1].s == 1):
                continue
            n = [band[a] if (md, mh)[a] else ceil_div(band[a], g.axes[a].s) for a in range(2)]
            for ud in range(1, min(mmax, n[0]) + 1):
                for uh in range(1, min(mmax // ud, n[1]) + 1):
                    if ud * uh < 2 or (md and not merged_ok(g.axes[0], ud)) or (mh and not merged_ok(g.axes[1], uh)):
                        continue
                    # PE cycles ~ (sum over d groups of their windows) x (same for h) x the w positions;
                    # a matmul costs at least 64 cycles, which small groups-x-W moving sizes do not reach
                    groups = ceil_div(n[0], ud) * ceil_div(n[1], uh) * g.axes[2].n // g.axes[2].s
                    floor = 64 / max(1, min(512, groups))
                    cyc = (_axis_cost(g.axes[0], band[0], ud, md) * _axis_cost(g.axes[1], band[1], uh, mh)
                           * max(1.0, floor))
                    ranked.append((cyc, -ud * uh, md + mh, ud, uh, (md, mh)))
    ranked.sort()
    return tuple(((ud, uh), m) for _c, _n, _k, ud, uh, m in ranked[:MAX_OPTIONS])


# ------------------------------------------------------------------------------- planner side


def sbuf_bytes(g: ConvGeom, band: tuple[int, int], u: tuple[int, int], merge: Merge = NO_MERGE, uw: int = 0
               ) -> tuple[int, int]:
    """(tap grids of every C_out tile, the two dx planes) in bytes per partition."""
    zs = zq_shape(g, u, merge, uw) if uw else z_shape(g, u, merge)
    grids = n_tiles(g.c_out, PMAX) * zs[0] * zs[1] * zs[2] * zs[3] * g.dtype_bytes
    pg = plane_groups(g, band, u, merge)
    return grids, 2 * pg[0] * pg[1] * g.axes[2].n * g.dtype_bytes




def pair_copy_on_vector(g: ConvGeom, n: int) -> bool:
    """The shifted copy (partitions 0..C_out -> C_out..2 C_out, ``n`` elements each) by one VectorE
    tensor_copy: the compute engines move data between partition halves (C_out 64: start 64) and
    quadrants (C_out 32: start 32) (docs/nki-rules.md, "Memory"); other C_out: an SBUF->SBUF DMA."""
    return g.c_out in (32, 64) and 0 < n <= ENGINE_FREE_MAX


def pair_copy_cost(c: CostSheet, g: ConvGeom, n: int) -> None:
    """The cost of one shifted copy of ``n`` elements per partition (VectorE, else DMA)."""
    if pair_copy_on_vector(g, n):
        c.compute("vector", n, 1, c.copy_speedup("vector", g.dtype_bytes == 2, False, True), 1)
    elif n > 0:
        c.dma(g.c_out * n * g.dtype_bytes, n * g.dtype_bytes)


def grid_memset_split(free: int) -> int:
    """Elements per partition of the grid memset on GpSimd (1.2 GHz); VectorE (0.96 GHz) zeroes the
    rest at the same time."""
    return free * 5 // 9


def shifted_elems(pool_ext: tuple[int, int, int], ext: tuple[int, int, int], shift: int) -> int:
    """Elements per partition the shifted copy of a band moves: up to the band's last element."""
    last = ((ext[0] - 1) * pool_ext[1] + ext[1] - 1) * pool_ext[2] + ext[2]
    return max(0, last - shift)


def first_copy_ns(g: ConvGeom, hw: TargetFigures, u: tuple[int, int], pair_axis: int,
                  pool_ext: tuple[int, int, int], bd: AxisBand, bh: AxisBand, merge: Merge = NO_MERGE,
                  quad: bool = False) -> float:
    """The exposed start of the first band's shifted copy (K pairs; with K quads the quad copy after it):
    it waits for the band's placement and the first paired matmul waits for it (fixed latency + bytes at
    the rate of the copied partitions)."""
    if pair_axis < 0 or min(bd.extent, bh.extent) <= 0:
        return 0.0
    ext = (bd.extent, bh.extent, axis_bands(g.axes[2], g.axes[2].n)[0].extent)

    def copy_ns(start: int, n: int, engine: str) -> float:
        if engine != "dma" and part_copy_on_engine(g, start, n):
            c = CostSheet(hw)
            c.compute(engine, n, 1, c.copy_speedup(engine, g.dtype_bytes == 2, False, True), 1)
            return c.busy[engine]
        rate = min(16, ceil_div(g.c_out * 16, PMAX)) / 16
        return hw.dma_fixed_ns + g.c_out * n * g.dtype_bytes / (hw.dma_bytes_per_ns * rate)

    # the first quad waits for the quad copies too (side by side, after the pair's on VectorE)
    quads = [copy_ns(start, shifted_elems(pool_ext, ext, sh), engine)
             for start, sh, _z, engine in quad_copies(g, u, pool_ext, merge)] if quad else [0.0]
    return copy_ns(g.c_out, shifted_elems(pool_ext, ext, dy_pair_shift(pool_ext, pair_axis)), "vector") + max(quads)


def store_tail_ns(g: ConvGeom, hw: TargetFigures, u: tuple[int, int], band: tuple[int, int], bd: AxisBand,
                  bh: AxisBand, merge: Merge = NO_MERGE) -> float:
    """The stores of a band's last track pair after its last eviction, beyond one DMA latency. A u-major
    sub-box's stores write interleaved rows of dx, so nkisim orders them (write after write) one after the
    other; a ci-major sub-box's (one channel each) write disjoint stretches and run side by side."""
    pairs = toeplitz_work(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]), u, merge)
    if not pairs:
        return 0.0
    pg = plane_groups(g, band, u, merge)
    total = 0.0
    for sub in pairs[-1].subs:
        n = store_dmas(g, sub)
        nbytes = sub.m(g.c_in) // n * sub.groups[0] * sub.groups[1] * g.axes[2].n * g.dtype_bytes
        run = store_run(g, u, pg, sub, pair_steps(pairs[-1])) * g.dtype_bytes
        rate = min(16, ceil_div(sub.m(g.c_in) // n * 16, PMAX)) / 16
        one = hw.dma_fixed_ns + nbytes / (hw.dma_bytes_per_ns * hw.descriptor_efficiency(run) * rate)
        if ci_major(g, sub):   # side by side, sharing the bandwidth
            total += max(one, hw.dma_fixed_ns + n * nbytes / (hw.dma_bytes_per_ns * hw.descriptor_efficiency(run)))
        else:
            total += n * one
    return max(0.0, total - hw.dma_fixed_ns)


def grid_lines(g: ConvGeom, merge: Merge) -> tuple[tuple[int, TapLine, TapLine], ...]:
    """(first grid line index, d line, h line) of every track pair with taps (the grid's content)."""
    ax = g.axes
    out = []
    for kd in range(line_keys(ax[0], merge[0])):
        for kh in range(line_keys(ax[1], merge[1])):
            ld = merged_line(ax[0], 0) if merge[0] else tap_line(ax[0], kd)
            lh = merged_line(ax[1], 0) if merge[1] else tap_line(ax[1], kh)
            if ld is not None and lh is not None:
                out.append(((kd * line_keys(ax[1], merge[1]) + kh) * ax[2].k, ld, lh))
    return tuple(out)


def estimate_grids(c: CostSheet, g: ConvGeom, u: tuple[int, int], pair_axis: int = -1,
                   merge: Merge = NO_MERGE, quad: bool = False) -> None:
    """Building the tap grids from W^T (mirrors nki_dx_toeplitz.load_toeplitz_filters after the
    transposed filters are loaded): a memset per C_out tile, one GpSimd copy per (track pair, kw)."""
    ax = g.axes
    zs = z_shape(g, u, merge)
    n_co = n_tiles(g.c_out, PMAX)
    free = zs[0] * zs[1] * zs[2] * zs[3]
    c.compute("gpsimd", grid_memset_split(free), 0, 1.0, n_co, op="memset")
    c.compute("vector", free - grid_memset_split(free), 0, 1.0, n_co, op="memset")
    for _z, ld, lh in grid_lines(g, merge):
        c.compute("gpsimd", ld.count * lh.count * g.c_in, 1, 1.0, ax[2].k * n_co, op="tensor_copy")
    if pair_axis >= 0:   # the shifted copy of the grids on partitions C_out..2 C_out
        pair_copy_cost(c, g, free - pair_shifts(g, u, (1, 1, 1), pair_axis, merge)[1])
    if quad:   # and the quad copies on partitions 2 C_out..4 C_out (VectorE: built once)
        for start, _dy, sh, _engine in quad_copies(g, u, (1, 1, 1), merge):
            part_copy_cost(c, g, start, free - sh, "vector")


@lru_cache(maxsize=8192)
def band_sheet(g: ConvGeom, target: str, u: tuple[int, int], band: tuple[int, int], bd: AxisBand, bh: AxisBand,
               pair_axis: int = -1, pool_ext: tuple[int, int, int] = (0, 0, 0), merge: Merge = NO_MERGE,
               quad: bool = False) -> CostSheet:
    """The dx compute and stores of one band of a plan with bands of ``band`` rows (mirrors
    nki_dx_toeplitz.run_dx_toeplitz's loops); ``pool_ext``: the dy band buffers' extents."""
    c = CostSheet(TARGET_FIGURES[target])
    if pair_axis >= 0 and min(b.extent for b in (bd, bh)) > 0:   # the shifted copy of the band
        ext = (bd.extent, bh.extent, axis_bands(g.axes[2], g.axes[2].n)[0].extent)
        pair_copy_cost(c, g, shifted_elems(pool_ext, ext, pair_shifts(g, u, pool_ext, pair_axis, merge)[0]))
        if quad:
            for start, sh, _z, engine in quad_copies(g, u, pool_ext, merge):
                part_copy_cost(c, g, start, shifted_elems(pool_ext, ext, sh), engine)
    ax = g.axes
    W = ax[2].n
    fp32 = g.dtype == "fp32"
    two = g.dtype_bytes == 2
    n_co = n_tiles(g.c_out, PMAX)
    bw = axis_bands(ax[2], W)[0]
    pg = plane_groups(g, band, u, merge)
    for pair in toeplitz_work(g, (bd, bh, bw), u, merge):
        for sub in pair.subs:
            m = sub.m(g.c_in)
            gd, gh = sub.groups
            offs = len(sub_offsets(pair, sub, pair_axis, quad))
            if not offs:
                c.compute("gpsimd", gd * gh * W, 0, 1.0, 1, op="memset")
                continue
            for wp in pair.wphases:
                if not wp.taps:
                    c.compute("gpsimd", gd * gh * (wp.j1 - wp.j0), 0, 1.0, 1, op="memset")
                    continue
                for (nd, nh, nw), count in box_block_sizes((0, 0, wp.j0), (gd, gh, wp.j1), MOVING_MAX):
                    n = nd * nh * nw
                    c.matmul(m, n, fp32, offs * len(wp.taps) * n_co * count)
                    c.evict(n, two, count, contiguous=(ax[2].s == 1))
        _charge_stores(c, g, u, pg, pair, W)
    return c


def _charge_stores(c: CostSheet, g: ConvGeom, u, pg, pair, W: int) -> None:
    """The store DMAs of a phase pair's sub-boxes (one per channel or per u_d, runs of W elements)."""
    for sub in pair.subs:
        gd, gh = sub.groups
        run = store_run(g, u, pg, sub, pair_steps(pair))
        n = store_dmas(g, sub)
        parts = sub.m(g.c_in) // n
        # a u-major store spans every channel: dx's stores of several channels run one after another
        c.dma(parts * gd * gh * W * g.dtype_bytes, run * g.dtype_bytes, n,
              serial=0 if ci_major(g, sub) or g.c_in == 1 else parts)


def pair_axis(g: ConvGeom, u: tuple[int, int], merge: Merge = NO_MERGE) -> int:
    """The axis whose offset pairs save the most matmuls when two band copies fit K (-1: none)."""
    if not pair_fits(g):
        return -1
    best, axis = None, -1
    lines = grid_lines(g, merge)
    for a in (-1, 0, 1):
        count = sum(len(offsets((ld, lh), u, a)) for _z, ld, lh in lines)
        if best is None or count < best:   # ties keep the earlier: no pairing before d before h
            best, axis = count, a
    return axis


# ------------------------------------------------------------------- W on M (PSUM quadrants)
# With U_d = 1 and U_h C_in <= 32, U_w <= 4 consecutive w positions go on M too, one PSUM quadrant
# (32 partitions) each: M = (u_w, r) with r = (u_h, ci) < 32. The stationary is a window
# [u_w (step: one grid z_w row), 32 contiguous (z_h, ci) elements] of grids laid out z_w-outermost
# ``Zq[co, line, z_w, z_d, z_h * C_in]`` (rows r >= U_h C_in read the next taps: never evicted). A
# quadrant's rows are then evicted to partitions 0..U_h C_in of the plane (Vector/Scalar move data
# between quadrants), w positions strided by U_w: the plane keeps whole W rows per partition.

QUADRANT = 32


def w_track(ax: Axis, uw: int) -> Track:
    """The merged w track of the whole W (one band): every phase on M."""
    return Track(0, 0, 1, ax.lo // ax.s, ax.n, merged_line(ax, ax.lo % ax.s))


def w_mode_ok(g: ConvGeom, u: tuple[int, int], uw: int) -> bool:
    """U_w positions of W on M: U_d 1, U_h C_in within a quadrant, U_w quadrants, a multiple of s_w."""
    return (u[0] == 1 and u[1] * g.c_in <= QUADRANT and 2 <= uw <= PMAX // QUADRANT
            and uw % g.axes[2].s == 0 and uw <= g.axes[2].n)


def zq_shape(g: ConvGeom, u: tuple[int, int], merge: Merge, uw: int) -> tuple[int, int, int, int]:
    """Free shape of one C_out tile's W-mode grids: [d x h lines, Z_w, Z_d, Z_h' C_in] (Z_h padded so
    that the 32-element windows stay inside)."""
    ax = g.axes
    # a window starts at z_h <= Z_h - U_h (any tail too) and reads ceil(32 / C_in) rows
    zh = z_extent(ax[1], u[1], merge[1])
    zh = max(zh, zh - u[1] + ceil_div(QUADRANT, g.c_in))
    return (line_keys(ax[0], merge[0]) * line_keys(ax[1], merge[1]), z_extent(ax[2], uw, True),
            z_extent(ax[0], u[0], merge[0]), zh * g.c_in)


def offsets3(lines: tuple[TapLine, TapLine, TapLine], u: tuple[int, int, int], pair_axis: int
             ) -> tuple[tuple[int, int, int, bool], ...]:
    """``offsets`` over d, h and w: (delta_d, delta_h, delta_w, paired), pairs along ``pair_axis``."""
    per = [deltas(lines[a], u[a]) for a in range(3)]
    firsts: list[list[tuple[int, bool]]] = [[(x, False) for x in p] for p in per]
    if pair_axis >= 0:
        firsts[pair_axis] = paired_firsts(per[pair_axis])
    return tuple((a, b, c, pa or pb or pc) for a, pa in firsts[0] for b, pb in firsts[1] for c, pc in firsts[2])


def zq_pair_shift(g: ConvGeom, u: tuple[int, int], merge: Merge, uw: int, pair_axis: int) -> int:
    """Flat element shift of the W-mode grid copy: z_mul rows along the pairing axis."""
    zs = zq_shape(g, u, merge, uw)
    if pair_axis == 2:
        return g.axes[2].s * zs[2] * zs[3]
    mul = g.axes[pair_axis].s if merge[pair_axis] else 1
    return mul * (zs[3] if pair_axis == 0 else g.c_in)


def dy_pair_shift(pool_ext: tuple[int, int, int], pair_axis: int) -> int:
    """Flat element shift of the dy band copy: one row along the pairing axis (d, h or w)."""
    return (pool_ext[1] * pool_ext[2], pool_ext[2], 1)[pair_axis]


def w_mode_parts(g: ConvGeom, uw: int) -> tuple[tuple[int, int, int], ...]:
    return axis_parts(g.axes[2].n, uw)


def estimate_grids_w(c: CostSheet, g: ConvGeom, u: tuple[int, int], merge: Merge, uw: int,
                     pair_axis: int, fast: bool = False) -> None:
    """Building the W-mode grids (mirrors nki_dx_toeplitz.load_toeplitz_filters with U_w; ``fast``:
    ``fast_grid``, zeroed by doubling copies on VectorE, taps and shifted copy on ScalarE)."""
    zs = zq_shape(g, u, merge, uw)
    n_co = n_tiles(g.c_out, PMAX)
    free = zs[0] * zs[1] * zs[2] * zs[3]
    if fast:
        done = min(free, ZERO_SEED)
        c.compute("vector", done, 0, 1.0, n_co, op="memset")
        while done < free:
            n = min(done, free - done)
            c.compute("vector", n, 1, c.copy_speedup("vector", True, False, True), n_co, op="tensor_copy")
            done += n
    else:
        c.compute("gpsimd", grid_memset_split(free), 0, 1.0, n_co, op="memset")
        c.compute("vector", free - grid_memset_split(free), 0, 1.0, n_co, op="memset")
    for _z, ld, lh in grid_lines(g, merge):
        c.compute("scalar" if fast else "gpsimd", ld.count * lh.count * g.c_in, 1, 1.0, g.axes[2].k * n_co,
                  op="tensor_copy")
    if pair_axis >= 0:
        n = free - zq_pair_shift(g, u, merge, uw, pair_axis)
        if fast and pair_copy_on_vector(g, n):
            c.compute("scalar", n, 1, c.copy_speedup("scalar", True, False, True), 1)
        else:
            pair_copy_cost(c, g, n)


@lru_cache(maxsize=8192)
def band_sheet_w(g: ConvGeom, target: str, u: tuple[int, int], band: tuple[int, int], bd: AxisBand,
                 bh: AxisBand, pair_axis: int, pool_ext: tuple[int, int, int], merge: Merge, uw: int) -> CostSheet:
    """``band_sheet`` of the W mode (mirrors nki_dx_toeplitz.run_dx_toeplitz with U_w)."""
    c = CostSheet(TARGET_FIGURES[target])
    ax = g.axes
    bw = axis_bands(ax[2], ax[2].n)[0]
    if pair_axis >= 0 and min(b.extent for b in (bd, bh)) > 0:
        pair_copy_cost(c, g, shifted_elems(pool_ext, (bd.extent, bh.extent, bw.extent),
                                           dy_pair_shift(pool_ext, pair_axis)))
    W = ax[2].n
    fp32 = g.dtype == "fp32"
    two = g.dtype_bytes == 2
    n_co = n_tiles(g.c_out, PMAX)
    pg = plane_groups(g, band, u, merge)
    tw = w_track(ax[2], uw)
    for pair in toeplitz_work(g, (bd, bh, bw), u, merge):
        for sub in pair.subs:
            gd, gh = sub.groups
            for _w0, gw, wu in w_mode_parts(g, uw):
                lines = pair.lines
                offs = len(offsets3(lines + (tw.line,), sub.u + (wu,), pair_axis)) if lines is not None else 0
                if not offs:
                    c.compute("gpsimd", gd * gh * gw * wu, 0, 1.0, 1, op="memset")
                    continue
                for (nd, nh, nw), count in box_block_sizes((0, 0, 0), (gd, gh, gw), MOVING_MAX):
                    n = nd * nh * nw
                    c.matmul(QUADRANT * wu, n, fp32, offs * n_co * count)
                    c.evict(n, two, count * wu, contiguous=False)
        _charge_stores(c, g, u, pg, pair, W)
    return c


def pair_axis_w(g: ConvGeom, u: tuple[int, int], merge: Merge, uw: int) -> int:
    """``pair_axis`` of the W mode (d, h or w)."""
    if not pair_fits(g):
        return -1
    lw = merged_line(g.axes[2], g.axes[2].lo % g.axes[2].s)
    best, axis = None, -1
    for a in (-1, 0, 1, 2):
        count = sum(len(offsets3((ld, lh, lw), (u[0], u[1], uw), a)) for _z, ld, lh in grid_lines(g, merge))
        if best is None or count < best:
            best, axis = count, a
    return axis


@lru_cache(maxsize=1024)
def toeplitz_w_options(g: ConvGeom, band: tuple[int, int]) -> tuple[tuple[tuple[int, int], Merge, int], ...]:
    """The ((1, U_h), merge, U_w) W-mode choices for bands of ``band`` rows, ranked like
    ``toeplitz_options`` (matmul count x moving size, with K pairs); the best ``MAX_OPTIONS``."""
    if toeplitz_domain(g) or g.c_in > QUADRANT // 2:
        return ()
    ax = g.axes
    lw = merged_line(ax[2], ax[2].lo % ax[2].s)
    ranked = []
    for mh in ((False, True) if ax[1].s > 1 else (False,)):
        merge = (False, mh)
        nh = band[1] if mh else ceil_div(band[1], ax[1].s)
        for uh in range(1, min(QUADRANT // g.c_in, nh) + 1):
            if mh and not merged_ok(ax[1], uh):
                continue
            for uw in range(2, PMAX // QUADRANT + 1):
                # (offered even where the U_w positions save no matmul: their fuller M and fewer, longer
                # stores can still win, as on a tiny C_in with a one-tap strided W; the estimate decides)
                if not w_mode_ok(g, (1, uh), uw):
                    continue
                pk = pair_axis_w(g, (1, uh), merge, uw)
                cyc = 0.0
                for _z, ld, lh in grid_lines(g, merge):
                    for _g0d, gd, ud in axis_parts(band[0] if merge[0] else ceil_div(band[0], ax[0].s), 1):
                        for _g0h, gh, uhh in axis_parts(nh, uh):
                            for _g0w, gw, uww in axis_parts(ax[2].n, uw):
                                n = gd * gh * gw
                                cyc += len(offsets3((ld, lh, lw), (ud, uhh, uww), pk)) * max(64, min(n, 512)) \
                                    * ceil_div(n, 512)
                ranked.append((cyc, -uh * uw, (1, uh), merge, uw))
    ranked.sort()
    return tuple((u, m, uw) for _c, _n, u, m, uw in ranked[:MAX_OPTIONS])


def expand_offsets(offs: tuple[tuple[int, int, int, bool], ...], pair_axis: int, count: int
                   ) -> list[tuple[int, int, int, bool]]:
    """Unpaired offsets first, then the first ``count`` pairs as two unpaired offsets each (K = C_out:
    they do not read the shifted copies), then the other pairs."""
    out = [o for o in offs if not o[-1]]
    paired = [o for o in offs if o[-1]]
    for o in paired[:count]:
        nxt = list(o[:3])
        nxt[pair_axis] += 1
        out += [o[:3] + (False,), tuple(nxt) + (False,)]
    return out + paired[count:]


def first_block_expansion(g: ConvGeom, target: str, u: tuple[int, int], merge: Merge, uw: int, pair_axis: int,
                          pool_ext: tuple[int, int, int], bd: AxisBand, bh: AxisBand) -> tuple[int, int, float]:
    """W mode: (pairs of a program's first block run unpaired, that block's N, the shifted copy's ns).
    Enough pairs to cover the first band's VectorE copy with the PE (each pair so split costs one more
    matmul); none when the copy is a DMA or there is no pairing."""
    hw = TARGET_FIGURES[target]
    bw = axis_bands(g.axes[2], g.axes[2].n)[0]
    pairs = toeplitz_work(g, (bd, bh, bw), u, merge)
    if pair_axis < 0 or not pairs or pairs[0].lines is None or min(bd.extent, bh.extent) <= 0:
        return 0, 0, 0.0
    n = shifted_elems(pool_ext, (bd.extent, bh.extent, bw.extent), dy_pair_shift(pool_ext, pair_axis))
    if not pair_copy_on_vector(g, n):
        return 0, 0, 0.0
    c = CostSheet(hw)
    pair_copy_cost(c, g, n)
    copy_ns = c.busy["vector"]
    sub, (_w0, gw, wu) = pairs[0].subs[0], w_mode_parts(g, uw)[0]
    (nd, nh, nw), _count = box_block_sizes((0, 0, 0), (sub.groups[0], sub.groups[1], gw), MOVING_MAX)[0]
    nb = nd * nh * nw
    offs = offsets3(pairs[0].lines + (w_track(g.axes[2], uw).line,), sub.u + (wu,), pair_axis)
    paired = sum(1 for o in offs if o[-1])
    mm_ns = max(64, nb) / hw.tensor_ghz
    return min(paired, ceil_div(int(copy_ns), int(2 * mm_ns) or 1)), nb, copy_ns


def first_band_split(g: ConvGeom, plan) -> int:
    """D-plane runs of the program's first dy band's staged load (W mode, one C_out tile of <= 64
    partitions: each run's DMA uses half the queues). 0: one load."""
    return FIRST_BAND_RUNS if plan.dx_toeplitz_w and g.c_out <= PMAX // 2 else 0


FIRST_BAND_RUNS = 4


def split_runs(lo: int, hi: int, parts: int) -> tuple[tuple[int, int], ...]:
    """[lo, hi) in at most ``parts`` consecutive runs of near-equal length (later runs not shorter:
    the first run lands first)."""
    n = hi - lo
    k = max(1, min(parts, n))
    out, a = [], lo
    for i in range(k):
        b = a + n // k + (1 if i >= k - n % k else 0)
        out.append((a, b))
        a = b
    return tuple(out)


ZERO_SEED = 256   # elements per partition of the grid's one memset under ``fast_grid``


def fast_grid(g: ConvGeom, plan) -> bool:
    """W mode with a 2-byte dtype and one C_out tile: the grids are zeroed on VectorE by doubling
    copies and filled (taps, shifted copy) on ScalarE, leaving GpSimd to the first dy band's border
    memsets (the program's start waits for the band, not for the grid). Not on trn1 (ScalarE copies)."""
    return bool(plan.dx_toeplitz_w) and g.dtype_bytes == 2 and g.c_out <= PMAX and plan.target != "trn1"


def first_band_upper(g: ConvGeom, pair_axis: int, ext: tuple[int, int, int], pool_ext: tuple[int, int, int],
                     lo: list[int]) -> bool:
    """Whether a split first band places its shifted copy (partitions C_out.., one row back along the
    pairing axis) from the staging tile: the copy's rules hold (C_out 32/64 across quadrants/halves),
    the band fills its pool buffer (the flat shift is one row) and it starts with a zero row along the
    axis (the flat copy's wrap from the next row/plane then brings zeros, as the placement's borders do)."""
    return (pair_axis >= 0 and g.c_out in (32, 64) and tuple(ext) == tuple(pool_ext)
            and lo[pair_axis] >= 1)


def first_band_adjust(c: CostSheet, g: ConvGeom, plan, pool_ext: tuple[int, int, int], bd: AxisBand,
                      bh: AxisBand) -> None:
    """The program's first band under ``first_band_split`` with ``first_band_upper``: its shifted
    copy is a second placement from the staging tile (the band sheet charged the whole-band copy)."""
    if not first_band_split(g, plan) or plan.dx_toeplitz_pair < 0 or min(bd.extent, bh.extent) <= 0:
        return
    bw = axis_bands(g.axes[2], g.axes[2].n)[0]
    ext = (bd.extent, bh.extent, bw.extent)
    o = g.out_size
    bands3 = (bd, bh, bw)
    lo = [max(max(b.q0, 0) - b.q0, 0) for b in bands3]
    hi = [max(lo[a], min(b.q1, o[a]) - b.q0) for a, b in enumerate(bands3)]
    if any(h <= l_ for l_, h in zip(lo, hi)) or not first_band_upper(g, plan.dx_toeplitz_pair, ext, pool_ext, lo):
        return
    n = shifted_elems(pool_ext, ext, dy_pair_shift(pool_ext, plan.dx_toeplitz_pair))
    copy = CostSheet(c.hw)
    pair_copy_cost(copy, g, n)
    c.busy["vector"] -= copy.busy["vector"]
    elems = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    runs = len(split_runs(lo[0], hi[0], FIRST_BAND_RUNS))
    c.compute("vector", elems / runs, 1, c.copy_speedup("vector", g.dtype_bytes == 2, False, True), runs)
