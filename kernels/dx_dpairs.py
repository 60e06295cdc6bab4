"""dx phase gather with the two D stride phases stacked on the PE's M axis (``Plan.dx_dphase_pairs``).

The gather puts C_in on M: with C_in <= 64 half the array idles. At stride 2 along D, the two D phases
(same H and W phases) read dy windows that mostly coincide: position i = 2j + phi - lo of phase phi
reached by tap kd reads dy row j - tap_shift(kd, phi). Steps of the two phases with the same dy window
(relative to their j box) share ONE matmul: stationary ``[W_a^T | W_b^T]`` (phase 0's tap on columns
[0, ci), phase 1's on [64, 64 + ci), zeros elsewhere), moving the common window; PSUM partitions
[0, 64) hold phase 0's positions, [64, 128) phase 1's. A dx band plane holds phase 0's D rows on the
lower partitions and phase 1's on the upper ones (each with whole H x W rows, so each half stores with
one DMA of long runs). k = 3, pad 1: 18 matmuls per block pair instead of 27 (2 D windows, not 3).

Pure Python: the kernel (``nki_dx_dpairs``) and the planner walk these lists.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .geometry import ConvGeom
from .schedule import AxisBand, PhaseWork, axis_bands, dx_phase_work
from .spec.items import dx_items

HALF = 64   # phase 1's partition offset (the start-partition rule: <= 64 partitions may start at 64)


@dataclass(frozen=True)
class DpairGroup:
    """The work of one (H, W) phase pair of a band: ``lo`` (D phase 0) and ``hi`` (D phase 1) phase
    work (None when the band has no position of it); ``steps`` per block: (tap of lo | None, tap of
    hi | None, (d, h, w) window offset of the step relative to the block start, in dy rows). Paired
    when both phases have taps and equal j extents (their blocks align one to one), else each phase
    runs alone (``steps`` then holds one side only; ``alone`` names the phase: 0 or 1)."""

    lo: PhaseWork | None
    hi: PhaseWork | None
    steps: tuple[tuple[int | None, int | None, tuple[int, int, int]], ...]
    alone: int = -1


def dpairs_domain(g: ConvGeom) -> str:
    """'' when the variant applies, else why not."""
    if g.axes[0].s != 2:
        return f"D stride {g.axes[0].s} (needs 2)"
    if g.c_in > HALF:
        return f"C_in {g.c_in} > {HALF}"
    return ""


def _steps(g: ConvGeom, pw: PhaseWork) -> list[tuple[tuple[int, int, int], int]]:
    """(the dy window start of the phase's j0 position, tap index) of every tap of one phase."""
    ax = g.axes
    out = []
    for kd, kh, kw in pw.taps:
        off = tuple(pw.j0[a] - ax[a].tap_shift((kd, kh, kw)[a], pw.phases[a]) for a in range(3))
        out.append((off, g.tap_index(kd, kh, kw)))
    return out


@lru_cache(maxsize=4096)
def dpair_groups(g: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand], with_blocks: bool = True
                 ) -> tuple[DpairGroup, ...]:
    """The groups of one dx band, in the kernel's order (phases without taps: ``steps`` empty);
    ``with_blocks``: each phase's PSUM blocks too (the slots do not read them: a band of many stride phases
    has many). Cached: the planner asks for the same bands for every candidate (values are frozen)."""
    work = dx_phase_work(g, bands, with_blocks=with_blocks)
    by_hw: dict[tuple[int, int], dict[int, PhaseWork]] = {}
    for pw in work:
        by_hw.setdefault(pw.phases[1:], {})[pw.phases[0]] = pw
    out = []
    for hw in sorted(by_hw):
        lo, hi = by_hw[hw].get(0), by_hw[hw].get(1)
        ext = [tuple(p.j1[a] - p.j0[a] for a in range(3)) if p is not None else None for p in (lo, hi)]
        if lo is not None and hi is not None and lo.taps and hi.taps and ext[0] == ext[1]:
            keyed: dict[tuple[int, int, int], list[int | None]] = {}
            for side, pw in ((0, lo), (1, hi)):
                for off, t in _steps(g, pw):
                    keyed.setdefault(off, [None, None])[side] = t
            out.append(DpairGroup(lo, hi, tuple((a, b, off) for off, (a, b) in sorted(keyed.items()))))
            continue
        for side, pw in ((0, lo), (1, hi)):
            if pw is None:
                continue
            steps = tuple((t, None, off) if side == 0 else (None, t, off) for off, t in _steps(g, pw))
            out.append(DpairGroup(lo if side == 0 else None, hi if side == 1 else None, steps, alone=side))
    return tuple(out)


def dpair_slots(g: ConvGeom, band_list: list[tuple[AxisBand, AxisBand, AxisBand]]
                ) -> dict[tuple[int | None, int | None], int]:
    """The stationary slots [W_a^T | W_b^T] (a tap pair, or one tap and zeros) every band needs,
    numbered in first-use order."""
    return dict(_slots(g, tuple(band_list)))


@lru_cache(maxsize=256)
def _slots(g: ConvGeom, band_list: tuple[tuple[AxisBand, AxisBand, AxisBand], ...]
           ) -> tuple[tuple[tuple[int | None, int | None], int], ...]:
    slots: dict[tuple[int | None, int | None], int] = {}
    for bands in band_list:
        for grp in dpair_groups(g, bands, with_blocks=False):
            for a, b, _off in grp.steps:
                slots.setdefault((a, b), len(slots))
    return tuple(slots.items())


def dpair_slot_count(g: ConvGeom, band_list: list[tuple[AxisBand, AxisBand, AxisBand]]) -> int:
    """``len(dpair_slots(g, band_list))``, costing each D band once per set of H phases its H bands reach:
    a band's tap pairs do not depend on where its H band lies (the two D phases of a group share its H and W
    phases, offsets and extents), and a band of a wide plane under a large H stride has many phases."""
    h = g.axes[1]
    pairs: set[tuple[int | None, int | None]] = set()
    seen: set[tuple] = set()
    for bd, bh, bw in band_list:
        reached = tuple(ph for ph in range(h.s) if (js := h.phase_j_range(ph, bh.i0, bh.i1))[1] > js[0])
        if (bd, reached, bw) in seen:
            continue
        seen.add((bd, reached, bw))
        pairs.update((a, b) for grp in dpair_groups(g, (bd, bh, bw), with_blocks=False) for a, b, _off in grp.steps)
    return len(pairs)


def dpair_matmuls(g: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand]) -> int:
    """Matmuls per C_out tile of one band (for tests and explain)."""
    return sum(len(grp.steps) * len((grp.lo or grp.hi).blocks) for grp in dpair_groups(g, bands)
               if grp.steps)


def band_halves(g: ConvGeom, bands: tuple[AxisBand, AxisBand, AxisBand]) -> dict[int, tuple[int, int]]:
    """Per D phase (0: the plane's lower partitions, 1: its upper ones) of one band: (its first input D row,
    its rows), the rows two apart in dx (mirrors the kernel's plane)."""
    first: dict[int, tuple[int, int]] = {}
    for grp in dpair_groups(g, bands):
        for side, pw in ((0, grp.lo), (1, grp.hi)):
            if pw is not None and (grp.alone < 0 or grp.alone == side):
                first.setdefault(side, (g.axes[0].i_of_j(pw.j0[0], side), pw.j1[0] - pw.j0[0]))
    return first


STRIDE_MAX = 32767   # an access-pattern stride is an int16 (docs/nki-rules.md, "Memory")


def one_store(g: ConvGeom, halves: dict[int, tuple[int, int]]) -> bool:
    """Whether a band plane stores with ONE 128-partition DMA: C_in = 64 (the halves meet at partition 64,
    no gap), both phases with the same rows, phase 1's rows one D row before or after phase 0's. Its dx
    pattern is [phase (+-1 D row), ci, rows (two D rows), (h, w)]; two 64-partition stores would each get
    half the DMA engines and, their dx spans interleaving, run one after the other."""
    if g.c_in != HALF or sorted(halves) != [0, 1]:
        return False
    (i0, n0), (i1, n1) = halves[0], halves[1]
    plane = g.axes[0].n * g.axes[1].n * g.axes[2].n   # the ci stride
    return n0 == n1 and abs(i1 - i0) == 1 and plane <= STRIDE_MAX


def dpair_last_by_rows(g: ConvGeom, halves: dict[int, tuple[int, int]]) -> bool:
    """Whether a program's last band runs and stores its plane's D rows one by one (``run_dx_dpairs``):
    the plane stores with one DMA (``one_store``) and holds more than one D row per phase. Each row's
    store is issued once its blocks are evicted, so the dx tail moves one row, not the whole plane."""
    return one_store(g, halves) and halves[0][1] > 1


def dpair_slot_map(g: ConvGeom, plan) -> dict[tuple[int | None, int | None], int]:
    """The stationary slots of every band of the plan's dx items (the planner counts the same),
    numbered in tap order (paired slots first, by phase 0's tap): each side's taps then run up by one
    over consecutive slots, so ``dpair_filters`` fills a run of slots with one DMA transpose."""
    w_band = axis_bands(g.axes[2], g.axes[2].n)[0]
    used = dpair_slots(g, sorted({(bd, bh, w_band) for _b, bd, bh in dx_items(g, plan)},
                                 key=lambda t: (t[0].i0, t[1].i0)))
    order = sorted(used, key=lambda ab: (ab[0] is None, ab[1] is None, ab[0] or 0, ab[1] or 0))
    return {ab: s for s, ab in enumerate(order)}


def slot_runs(slots: dict[tuple[int | None, int | None], int], side: int) -> list[tuple[int, int, int, int]]:
    """Runs ``(first slot, first tap, tap step, n)`` of consecutive slots whose taps on ``side`` (0: a,
    1: b) are present and evenly spaced (step >= 1): one DMA transpose fills each run."""
    by_slot = sorted((s, ab[side]) for ab, s in slots.items() if ab[side] is not None)
    runs = []
    for s, t in by_slot:
        if runs:
            s0, t0, step, n = runs[-1]
            if s == s0 + n and (n == 1 and t > t0 or n > 1 and t == t0 + n * step):
                runs[-1] = (s0, t0, t - t0 if n == 1 else step, n + 1)
                continue
        runs.append((s, t, 1, 1))
    return runs
