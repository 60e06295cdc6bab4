"""The loop structure of dx with positions on the stationary side (``dx^T``), as plain data.

Pure Python (no NKI import): the kernel (``nki_dx_t``) and the planner walk the same lists.

dx^T[pos, ci] accumulates ``nc_matmul(stationary = dy window [co, <=128 positions], moving = W_k^T
[co, ci])`` over the taps. With C_out <= 64 two taps share one matmul on K = 2 C_out partitions: a
copy of the zero-padded dy band on partitions [co, 2co), shifted in the flat free axis by one tap
step along an axis, puts tap b's window where tap a's window is on [0, co); the moving operand is
[W_a^T; W_b^T]. One shifted copy per paired axis (W first, then H, then D).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd

from .geometry import ConvGeom
from .schedule import PMAX, box_blocks

BANK_FP32 = 512
DXT_BUFS = 2   # dx^T tiles in flight (each waits for its transpose back before reuse)


@dataclass(frozen=True)
class TapStep:
    """One matmul per position block: tap ``a`` (its window is the stationary AP), optionally with
    tap ``b`` stacked on partitions [co, 2co) of copy ``copy`` (0: the band buffer itself)."""

    a: tuple[int, int, int]
    b: tuple[int, int, int] | None
    copy: int


def tap_step(g: ConvGeom, axis: int) -> int:
    """Kernel index step between consecutive taps of one stride phase along ``axis``."""
    ax = g.axes[axis]
    return ax.s // gcd(ax.r, ax.s)


def pair_axes(g: ConvGeom) -> tuple[int, ...]:
    """The axes along which some phase has two taps, W first (its copy lives in the band buffer)."""
    return tuple(a for a in (2, 1, 0) if g.axes[a].k > tap_step(g, a))


def pairs_possible(g: ConvGeom) -> bool:
    """Two taps fit on the partitions (C_out <= 64) and some axis has two taps."""
    return 2 * g.c_out <= PMAX and bool(pair_axes(g))


def all_taps(g: ConvGeom) -> tuple[tuple[int, int, int], ...]:
    return tuple((kd, kh, kw) for kd in range(g.kernel[0]) for kh in range(g.kernel[1]) for kw in range(g.kernel[2]))


@lru_cache(maxsize=4096)
def tap_steps(g: ConvGeom, copies: int, phase_taps: tuple | None = None) -> tuple[TapStep, ...]:
    """The matmuls of one position block of a phase (``phase_taps``, default every tap): taps paired
    greedily along the first ``copies`` pair axes (a tap's partner is the next tap of the phase along
    that axis), the rest single."""
    taps = list(phase_taps if phase_taps is not None else all_taps(g))
    used: set = set()
    steps: list[TapStep] = []
    tapset = set(taps)
    for ci, axis in enumerate(pair_axes(g)[:copies] if 2 * g.c_out <= PMAX else ()):
        for t in taps:
            if t in used:
                continue
            u = list(t)
            u[axis] += tap_step(g, axis)
            partner = tuple(u)
            if partner in tapset and partner not in used:
                used.update((t, partner))
                steps.append(TapStep(t, partner, ci))  # type: ignore[arg-type]
    # singles first: they read the band alone, so a band's first block starts before its copies land
    singles = [TapStep(t, None, 0) for t in taps if t not in used]
    return tuple(singles + steps)


def copy_shift(g: ConvGeom, copy: int, tile_ext: tuple[int, int, int]) -> int:
    """Flat free-axis offset of copy ``copy`` in a band tile of extents ``tile_ext``: the dy shift
    between consecutive taps of a phase along its axis (dilation r / gcd(r, s)); partitions
    [co, 2co) hold band[f - shift] at f."""
    axis = pair_axes(g)[copy]
    ax = g.axes[axis]
    unit = (tile_ext[1] * tile_ext[2], tile_ext[2], 1)[axis]
    return ax.r // gcd(ax.r, ax.s) * unit


@lru_cache(maxsize=1024)
def copies_made(g: ConvGeom, copies: int) -> int:
    """Shifted copies a band needs: up to the last copy any phase's pairs use."""
    used = -1
    for taps in phase_tap_sets(g):
        for st in tap_steps(g, copies, taps):
            if st.b is not None:
                used = max(used, st.copy)
    return used + 1


@lru_cache(maxsize=1024)
def phase_tap_sets(g: ConvGeom) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """The tap tuple of every stride phase (in dx_phase_work's order)."""
    ax = g.axes
    out = []
    for pd in range(ax[0].s):
        for ph in range(ax[1].s):
            for pw in range(ax[2].s):
                t = [ax[a].phase_taps(p) for a, p in enumerate((pd, ph, pw))]
                out.append(tuple((kd, kh, kw) for kd in t[0] for kh in t[1] for kw in t[2]))
    return tuple(out)


def ci_tile_t(g: ConvGeom) -> int:
    """C_in per matmul (the moving free size, <= 512 = one PSUM bank of fp32)."""
    return min(g.c_in, BANK_FP32)


@dataclass(frozen=True)
class BlockGroup:
    """Consecutive position blocks of equal size ``n`` whose dx^T share one PSUM bank (one slot of
    ``ci`` columns each); their positions are a contiguous flat run of the band plane from ``f0``."""

    f0: int
    n: int
    blocks: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]


@lru_cache(maxsize=4096)
def block_groups(rows: tuple[int, int, int], slots: int) -> tuple[BlockGroup, ...]:
    """Blocks of <= 128 positions over a band plane [nd, nh, W] (plane-relative starts), grouped.

    box_blocks tiles the whole plane W fastest, so consecutive blocks are consecutive flat runs."""
    nd, nh, w = rows
    out: list[BlockGroup] = []
    cur: list = []
    f_next = 0
    f0 = 0
    for start, size in box_blocks((0, 0, 0), rows, PMAX):
        n = size[0] * size[1] * size[2]
        f = (start[0] * nh + start[1]) * w + start[2]
        assert f == f_next, "position blocks must tile the plane in flat order"
        f_next = f + n
        if cur and (len(cur) == slots or n != cur[0][1][0] * cur[0][1][1] * cur[0][1][2]):
            out.append(BlockGroup(f0, cur[0][1][0] * cur[0][1][1] * cur[0][1][2], tuple(cur)))
            cur = []
        if not cur:
            f0 = f
        cur.append((start, size))
    if cur:
        out.append(BlockGroup(f0, cur[0][1][0] * cur[0][1][1] * cur[0][1][2], tuple(cur)))
    assert f_next == nd * nh * w
    return tuple(out)


def phase_stage_elems(g: ConvGeom, band: tuple[int, int]) -> int:
    """Upper bound of one phase's positions in a band (the staging run of strided dx^T)."""
    n = 1
    for a, rows in enumerate((band[0], band[1], g.axes[2].n)):
        n *= -(-min(rows, g.axes[a].n) // g.axes[a].s)
    return n
