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

from .geometry import ConvGeom
from .schedule import PMAX, box_blocks

BANK_FP32 = 512


@dataclass(frozen=True)
class TapStep:
    """One matmul per position block: tap ``a`` (its window is the stationary AP), optionally with
    tap ``b`` stacked on partitions [co, 2co) of copy ``copy`` (0: the band buffer itself)."""

    a: tuple[int, int, int]
    b: tuple[int, int, int] | None
    copy: int


def pair_axes(g: ConvGeom) -> tuple[int, ...]:
    """The axes that can pair taps (kernel > 1), W first (its copy lives in the band buffer)."""
    return tuple(a for a in (2, 1, 0) if g.axes[a].k > 1)


def pairs_possible(g: ConvGeom) -> bool:
    """Two taps fit on the partitions (C_out <= 64) and some axis has two taps."""
    return 2 * g.c_out <= PMAX and bool(pair_axes(g))


@lru_cache(maxsize=1024)
def tap_steps(g: ConvGeom, copies: int) -> tuple[TapStep, ...]:
    """The matmuls of one position block: taps paired greedily along the first ``copies`` pair axes
    (each tap's partner is the next tap along that axis), the rest single."""
    taps = [(kd, kh, kw) for kd in range(g.kernel[0]) for kh in range(g.kernel[1]) for kw in range(g.kernel[2])]
    used: set = set()
    steps: list[TapStep] = []
    tapset = set(taps)
    for ci, axis in enumerate(pair_axes(g)[:copies] if 2 * g.c_out <= PMAX else ()):
        for t in taps:
            if t in used:
                continue
            u = list(t)
            u[axis] += 1
            partner = tuple(u)
            if partner in tapset and partner not in used:
                used.update((t, partner))
                steps.append(TapStep(t, partner, ci))  # type: ignore[arg-type]
    # singles first: they read the band alone, so a band's first block starts before its copies land
    singles = [TapStep(t, None, 0) for t in taps if t not in used]
    return tuple(singles + steps)


def copy_shift(g: ConvGeom, copy: int, tile_ext: tuple[int, int, int]) -> int:
    """Flat free-axis offset of copy ``copy``: one tap step (dilation) along its axis in a band tile
    of extents ``tile_ext``: partitions [co, 2co) hold band[f - shift] at f."""
    axis = pair_axes(g)[copy]
    unit = (tile_ext[1] * tile_ext[2], tile_ext[2], 1)[axis]
    return g.axes[axis].r * unit


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
