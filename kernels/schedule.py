"""The loop structure of the kernel as plain data: bands, phases, blocks and position tiles.

Pure Python (no NKI import). The kernel iterates these lists and the planner's cost estimate
walks the very same lists, so the estimate describes the instructions the kernel issues.
"""
from __future__ import annotations

from dataclasses import dataclass

from .geometry import Axis, ConvGeom, ceil_div

PMAX = 128          # partitions
MOVING_MAX = 512    # matmul moving free size (NC-v2/v3) == fp32 elements of one PSUM bank


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


def axis_bands(ax: Axis, band: int) -> tuple[AxisBand, ...]:
    """Split the input axis into bands of ``band`` rows; each band knows its dy rows."""
    out = []
    prev_own = 0
    for i0 in range(0, ax.n, band):
        i1 = min(ax.n, i0 + band)
        q0, q1 = ax.dx_dy_range(i0, i1)
        if q1 <= q0:  # no tap reaches this band: an empty dy window
            q0 = q1 = max(0, min(prev_own, ax.o))
        own0 = max(prev_own, q0, 0)
        own1 = max(own0, min(q1, ax.o))
        if i1 == ax.n:
            own1 = max(own1, own0)
        out.append(AxisBand(i0, i1, q0, q1, own0, own1))
        prev_own = max(prev_own, own1)
    return tuple(out)


def axis_covered(ax: Axis, band: int) -> bool:
    """True when the bands' owned dy rows cover every output row (db can fold on the dx load)."""
    bands = axis_bands(ax, band)
    return bands[0].own0 == 0 and max(b.own1 for b in bands) == ax.o and all(
        b.own0 <= (bands[i - 1].own1 if i else 0) for i, b in enumerate(bands))


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


def dx_phase_work(geom: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand]) -> tuple[PhaseWork, ...]:
    """The phases of one dx band (D band, H band, full W) with taps and blocks."""
    ax = geom.axes
    out = []
    for pd in range(ax[0].s):
        for ph in range(ax[1].s):
            for pw in range(ax[2].s):
                phs = (pd, ph, pw)
                rng = [ax[a].phase_j_range(phs[a], bands[a].i0, bands[a].i1) for a in range(3)]
                if any(r[1] <= r[0] for r in rng):
                    continue
                taps_a = [ax[a].phase_taps(phs[a]) for a in range(3)]
                taps = tuple((kd, kh, kw) for kd in taps_a[0] for kh in taps_a[1] for kw in taps_a[2])
                j0 = tuple(r[0] for r in rng)
                j1 = tuple(r[1] for r in rng)
                blocks = box_blocks(j0, j1, MOVING_MAX) if taps else ()
                out.append(PhaseWork(phs, taps, j0, j1, blocks))  # type: ignore[arg-type]
    return tuple(out)


def pos_tiles(o0: tuple[int, int, int], o1: tuple[int, int, int]
              ) -> tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]:
    """Position tiles (<= 128 output positions, a box) of the output box [o0, o1)."""
    return box_blocks(o0, o1, PMAX)


def full_band(ax: Axis) -> AxisBand:
    """The whole axis as one band (the W axis is never banded)."""
    return axis_bands(ax, ax.n)[0]


def dw_x_extent(ax: Axis, rows: int) -> int:
    """Rows of the padded x buffer that ``rows`` output rows read."""
    if rows <= 0:
        return 0
    return (rows - 1) * ax.s + (ax.k - 1) * ax.r + 1


def tiles(n: int, size: int) -> tuple[tuple[int, int], ...]:
    """(start, size) tiles of [0, n)."""
    return tuple((s, min(size, n - s)) for s in range(0, n, size))


def n_tiles(n: int, size: int) -> int:
    return ceil_div(n, size)
