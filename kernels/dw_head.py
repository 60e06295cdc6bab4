"""dw's head split (``Plan.dw_head_split``): the first row pass's transfers in W column pieces (pure Python).

Row-mode x-stationary dw with x^T and dy^T by DMA starts its PE only when the first row chunk's whole
dy^T and the first (kd, kh) pair's whole x^T have landed (vae3d: 1 MB each, ~7.5 us on one core's DMA
bandwidth), while its matmuls step over the W output columns one at a time (the PSUM accumulates over
w). Issued as column pieces, dy^T piece i then x^T piece i (the DMA bandwidth serves transfers in issue
order), the first matmuls start after the first piece and the rest of the pass's head load runs under
them. The first pair is the program's cheapest to fill among those with the most own taps (fewest
transfers and memsets; vae3d: (0, 1) and (2, 1), whose padding rows are whole D planes): the
scheduler tracks at most 16 writes per tile, and each piece adds the pair's writes.
"""
from __future__ import annotations

from .geometry import ConvGeom
from .schedule import tile_sizes
from .xt_rows import xt_columns, xt_fill, xt_window

HEAD_PIECES = 4        # column pieces of the first pass's dy^T and first x^T
HEAD_PAIRS = 2         # pairs whose x^T come by pieces (the second: the DMA is still behind the PE)
HEAD_MAX_WRITES = 14   # writes per x^T tile the pieces may take (nkisim remembers 16 per storage)


def head_col_pieces(g: ConvGeom, w_lo: int, w_hi: int, f_lo: int, f_hi: int,
                    pieces: int = HEAD_PIECES) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
    """((w0, w1), (a, b)) per piece: output columns [w0, w1) of [w_lo, w_hi) in ``pieces`` near-equal
    parts, and the x^T tile columns [a, b) first read by them (disjoint, together [f_lo, f_hi): the
    fill's window; an empty (a == b) when the columns before already cover the piece)."""
    n = max(1, min(pieces, w_hi - w_lo))
    bounds = [w_lo + (w_hi - w_lo) * i // n for i in range(n + 1)]
    out = []
    prev = f_lo
    for i in range(n):
        w0, w1 = bounds[i], bounds[i + 1]
        end = f_hi if i == n - 1 else max(prev, min(f_hi, xt_window(g, w0, w1)[1]))
        out.append(((w0, w1), (prev, end)))
        prev = end
    return tuple(out)


def fill_writes(g: ConvGeom, chunk: tuple[int, int, int, int], kd: int, kh: int) -> int:
    """Transfers and zero runs (before and after) of one pair's x^T fill (the writes one piece adds to its tile)."""
    f = xt_fill(g, *chunk, kd, kh)
    return len(f.transposes) + len(f.zeros) + len(f.after)


def head_pieces(g: ConvGeom, chunk: tuple[int, int, int, int], kd: int, kh: int) -> int:
    """How many pieces the first pair's fill takes: HEAD_PIECES, fewer when its writes would pass the
    scheduler's per-tile memory (two more writes: the tile's pad-column memsets)."""
    per = max(1, fill_writes(g, chunk, kd, kh))
    return max(1, min(HEAD_PIECES, (HEAD_MAX_WRITES - 2) // per))


def head_pair_order(g: ConvGeom, pairs: list[tuple[int, int]],
                    chunk: tuple[int, int, int, int]) -> list[tuple[int, int]]:
    """``pairs`` in head order: the fewest fill writes first, then the earliest (the head pairs come by
    pieces: cheap fills)."""
    order = sorted(range(len(pairs)), key=lambda i: (fill_writes(g, chunk, *pairs[i]), i))
    return [pairs[i] for i in order]


def x_columns_window(g: ConvGeom) -> tuple[int, int]:
    """The x columns [lo, hi) of a row-mode x^T tile (its fill window)."""
    _xw, lo, hi = xt_columns(g)
    return lo, hi


def head_wait_ns(g: ConvGeom, hw, chunk: tuple[int, int, int, int], span: tuple[int, int], w_cols: int,
                 x_cols: int, ci: int) -> float:
    """The PE's wait at dw's start beyond the DMA start latency, with the head split: the PE trails the pieces
    of the first chunk's dy^T and the head pair's x^T (both transposes, charged by whole blocks as nkisim
    does: ``hw.transpose_ns`` of ``kernels.costs.TargetFigures``), so it finishes that pair at
    max(first piece + its matmuls, all of it + the last piece's matmuls); the wait is that less its matmuls
    (cost ``max(min(64, ci), C_out)`` cycles per tap and output column)."""
    rows = chunk[2] * chunk[3]
    pairs = sorted({g.tap_coords(t)[:2] for t in range(*span)})
    if not pairs:
        return 0.0
    kd, kh = head_pair_order(g, pairs, chunk)[0]
    n = head_pieces(g, chunk, kd, kh)
    ds = g.dtype_bytes
    dma_ns = (sum(hw.transpose_ns((rows, w_cols, co), ds) for co in tile_sizes(g.c_out, 128))
              + hw.transpose_ns((rows, x_cols, ci), ds))
    pe = g.kernel[2] * w_cols * max(min(64, ci), g.c_out) / hw.tensor_ghz
    finish = max(dma_ns / n + pe, dma_ns + pe / n)
    return max(0.0, finish - pe)
