"""dw with the kd taps on the moving axis, as data: when it applies, its loops, pools and work list.

Pure Python (no NKI import): the NKI body (``nki_body.py``) walks the lists built here, and the planner
budgets and estimates the method from them (``estimate.py``), so what is costed is what runs.

The contraction is over output rows (j, h_o) of a *chunk*: ``cd`` consecutive x planes d0 + j of one
batch times the H_out output rows, at most 128 partitions; each W output column w_o is a matmul step.

- x^T tile of (chunk, kh): ``[rows, x columns (padded), ci]``, row (j, h_o) = x[b, :, d0 + j,
  h_o*s_h + kh*r_h - pad_h, :]; the kw taps are free-axis offsets of it (like row mode).
- dy^T tile of the chunk: ``[rows, K_d slots, W_out, co]``; slot kd of row (j, h_o) holds dy plane
  o = d0 + j + pad_d - kd*r_d, the plane x plane d0 + j meets through tap kd.
- per (kh, kw group, w_o): MM(stationary = x^T[rows, kw taps at w_o, ci] (M = taps x ci),
  moving = dy^T[rows, all slots, w_o, co] (N = K_d x co)), accumulated in one PSUM bank for the whole
  layer: PSUM[(kw, ci), (kd, co)] = dw[kd, kh, kw, ci, co].

So x^T is built K_h times per x plane (row mode: K_d x K_h times) and a matmul moves K_d x C_out
columns (row mode: C_out, which pays the 64-column minimum when C_out < 64).

LNC2: each program takes half the chunks; the fp32 partials of every accumulator are exchanged once
(``sendrecv``) and each program adds and stores half the accumulators.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...geometry import ConvGeom

PMAX = 128               # partitions; TensorE contraction and stationary free size
MOVING_MAX = 512         # TensorE moving free size (one fp32 PSUM bank)
PSUM_BANKS = 8
PSUM_TRANSPOSE_BANKS = 2   # the kernel's shared PE-transpose pool (spec/psum.py), live during dw
XT_BUFS = 2              # x^T tiles per kh: one is filled while the other is read
DYT_BUFS = 2             # dy^T tiles: likewise
OUT_BUFS = 2             # dw rows in the output dtype: one is stored while the next is cast


@dataclass(frozen=True)
class Chunk:
    """x planes [d0, d0 + nd) of batch b: rows (j, h_o), j < nd, on partitions j*H_out + h_o."""

    b: int
    d0: int
    nd: int


@dataclass(frozen=True)
class Run:
    """``rows`` consecutive tile rows from partition ``p0`` that a transfer fills: from the source's
    flattened row ``src_row`` on (transposes; rows follow at the axis stride), or zeros (``src_row`` -1)."""

    p0: int
    rows: int
    src_row: int = -1


@dataclass(frozen=True)
class Work:
    """One kind of instruction: ``count`` of them on ``engine`` with the given operand figures.

    tensor: (K, M, N); dma_copy: (bytes, contiguous run bytes); dma_transpose: (partitions, outer, inner)
    of its destination; vector/scalar: (partitions, elements per partition)."""

    op: str
    engine: str
    dims: tuple
    count: int


def applies(g: ConvGeom, lnc: int, target: str) -> str:
    """'' when the problem is in the method's class, else the rule it breaks."""
    d, h = g.axes[0], g.axes[1]
    if g.dtype_bytes != 2 or target == "trn1":
        return f"x^T and dy^T come by dma_transpose: a 2-byte dtype on trn2/trn3 (got {g.dtype}, {target})"
    if lnc not in (1, 2):
        return f"lnc {lnc} must be 1 or 2"
    if d.k < 2:
        return "K_d must be >= 2 (the kd taps are what fills the moving axis)"
    if d.s != 1:
        return f"stride {d.s} on D must be 1 (a chunk's kd planes are consecutive dy planes)"
    if g.c_in > PMAX:
        return f"C_in {g.c_in} must be <= {PMAX} (one C_in tile on the stationary)"
    if d.k * g.c_out > MOVING_MAX:
        return f"K_d x C_out = {d.k * g.c_out} must be <= {MOVING_MAX} (one moving operand, one PSUM bank)"
    if g.c_out > PMAX:
        return f"C_out {g.c_out} must be <= {PMAX} (dy^T's transposes write C_out per row)"
    if h.o > PMAX:
        return f"H_out {h.o} must be <= {PMAX} (a chunk holds whole H_out rows)"
    if accumulators(g) > PSUM_BANKS - PSUM_TRANSPOSE_BANKS:
        return (f"{accumulators(g)} accumulators (K_h x kw groups) exceed the "
                f"{PSUM_BANKS - PSUM_TRANSPOSE_BANKS} free PSUM banks")
    return ""


# ------------------------------------------------------------------------------------------- loops


def planes_per_chunk(g: ConvGeom) -> int:
    return max(1, PMAX // g.axes[1].o)


def chunks(g: ConvGeom) -> list[Chunk]:
    """Every x plane of every batch, ``planes_per_chunk`` at a time (a chunk never crosses a batch)."""
    cd, n = planes_per_chunk(g), g.axes[0].n
    return [Chunk(b, d0, min(cd, n - d0)) for b in range(g.batch) for d0 in range(0, n, cd)]


def program_chunks(g: ConvGeom, lnc: int, pid: int) -> list[Chunk]:
    """The chunks program ``pid`` contracts (LNC2: contiguous halves)."""
    every = chunks(g)
    per = -(-len(every) // lnc)
    return every[pid * per:(pid + 1) * per]


def owned(g: ConvGeom, lnc: int, pid: int) -> list[int]:
    """The accumulators (index kh * len(kw_groups) + group) program ``pid`` adds up and stores."""
    n = accumulators(g)
    per = -(-n // lnc)
    return list(range(pid * per, min(n, (pid + 1) * per)))


def kw_groups(g: ConvGeom) -> list[tuple[int, int]]:
    """(kw0, n): the kw taps of one stationary (n x C_in <= 128 columns)."""
    kw = g.axes[2].k
    per = max(1, PMAX // g.c_in)
    return [(k0, min(per, kw - k0)) for k0 in range(0, kw, per)]


def accumulators(g: ConvGeom) -> int:
    return g.axes[1].k * len(kw_groups(g))


def x_cols(g: ConvGeom) -> int:
    """Columns of an x^T tile: the padded x columns the stationaries read."""
    w = g.axes[2]
    return (w.o - 1) * w.s + (w.k - 1) * w.r + 1


def x_col_range(g: ConvGeom) -> tuple[int, int]:
    """[c0, c1): the tile columns that are real x columns (the others are padding, zeroed once)."""
    w = g.axes[2]
    return min(w.lo, x_cols(g)), min(x_cols(g), w.lo + w.n)


def valid_h(g: ConvGeom, kh: int) -> tuple[int, int]:
    """[lo, hi): the output rows h_o whose x row h_o*s_h + kh*r_h - pad_h is inside x."""
    h = g.axes[1]
    lo = next((o for o in range(h.o) if 0 <= o * h.s + kh * h.r - h.lo < h.n), h.o)
    hi = next((o + 1 for o in reversed(range(h.o)) if 0 <= o * h.s + kh * h.r - h.lo < h.n), lo)
    return lo, hi


def xt_runs(g: ConvGeom, c: Chunk, kh: int) -> list[Run]:
    """The transfers filling chunk ``c``'s x^T tile of ``kh``, in issue order: transposes (src_row: the
    flattened (D*H) x row of the run's first tile row; its rows follow at stride s_h), then zero runs.

    When the planes continue one another (H == H_out * s_h) one transpose covers every plane, from the
    first plane's first valid row to the last plane's last valid one; the rows between two planes that
    are H padding (a row past the end of one plane, before the start of the next) read x rows of those
    planes and are then zeroed from the zero tile (one run per plane boundary). A transpose is charged
    by whole 128-partition blocks, so one per plane would cost each plane a whole block. Rows before the
    first valid one and after the last are never written: the buffer's memset keeps them zero."""
    h = g.axes[1]
    lo, hi = valid_h(g, kh)
    if hi <= lo:
        return []
    first = lo * h.s + kh * h.r - h.lo
    if h.n != h.o * h.s:
        return [Run(j * h.o + lo, hi - lo, (c.d0 + j) * h.n + first) for j in range(c.nd)]
    runs = [Run(lo, (c.nd - 1) * h.o + hi - lo, c.d0 * h.n + first)]
    if lo > 0 or hi < h.o:
        runs += [Run(j * h.o + hi, h.o - hi + lo) for j in range(c.nd - 1)]
    return runs


def dyt_runs(g: ConvGeom, c: Chunk, kd: int) -> list[Run]:
    """The transfers filling slot ``kd`` of chunk ``c``'s dy^T tile: one transpose of the rows whose dy
    plane o = d0 + j + pad_d - kd*r_d exists (src_row = o*H_out of the first), zeros for the rest."""
    d, oh = g.axes[0], g.axes[1].o
    shift = d.lo - kd * d.r
    js = [j for j in range(c.nd) if 0 <= c.d0 + j + shift < d.o]
    out = []
    if not js:
        return [Run(0, c.nd * oh)]
    j0, j1 = js[0], js[-1] + 1
    if j0 > 0:
        out.append(Run(0, j0 * oh))
    out.append(Run(j0 * oh, (j1 - j0) * oh, (c.d0 + j0 + shift) * oh))
    if j1 < c.nd:
        out.append(Run(j1 * oh, (c.nd - j1) * oh))
    return out


def dyt_has_zeros(g: ConvGeom) -> bool:
    """Whether some dy^T rows are D padding (copied from the zero tile)."""
    return any(r.src_row < 0 for c in chunks(g) for kd in range(g.axes[0].k) for r in dyt_runs(g, c, kd))


def xt_has_zero_runs(g: ConvGeom) -> bool:
    """Whether some x^T rows between planes are zeroed after their transpose (from the zero tile)."""
    return any(r.src_row < 0 for c in chunks(g) for kh in range(g.axes[1].k) for r in xt_runs(g, c, kh))


def zero_cols(g: ConvGeom) -> int:
    """Elements per partition of the zero tile (0: none; the widest zero run copied from it)."""
    c0, c1 = x_col_range(g)
    return max(g.axes[2].o * g.c_out if dyt_has_zeros(g) else 0, (c1 - c0) * g.c_in if xt_has_zero_runs(g) else 0)


def xt_has_padding(g: ConvGeom) -> bool:
    """Whether the x^T tiles have padding rows or columns (then each buffer is zeroed once)."""
    c0, c1 = x_col_range(g)
    return c0 > 0 or c1 < x_cols(g) or any(valid_h(g, kh) != (0, g.axes[1].o) for kh in range(g.axes[1].k))


# ------------------------------------------------------------------------------------------- pools


def sbuf_parts(g: ConvGeom, lnc: int = 1) -> dict[str, int]:
    """SBUF bytes per partition of each pool the body allocates."""
    ds = g.dtype_bytes
    kd, kh = g.axes[0].k, g.axes[1].k
    parts = {"x^T": XT_BUFS * kh * x_cols(g) * g.c_in * ds,
             "dy^T": DYT_BUFS * kd * g.axes[2].o * g.c_out * ds,
             "zeros": zero_cols(g) * ds,
             "dw rows": OUT_BUFS * kd * g.c_out * ds}
    if lnc == 2:   # the fp32 partials, own and received
        parts["partials"] = 2 * accumulators(g) * kd * g.c_out * 4
    return parts


def psum_banks(g: ConvGeom) -> int:
    return accumulators(g)


# ------------------------------------------------------------------------------------------- work


def work_list(g: ConvGeom, lnc: int = 1, pid: int = 0) -> list[Work]:
    """Program ``pid``'s instructions, merged by kind (op, engine, operand figures), in first-issue
    order. Walks the same lists as the body (``nki_body.run_dw_kd_moving``)."""
    ds = g.dtype_bytes
    kd, kh_n = g.axes[0].k, g.axes[1].k
    ow = g.axes[2].o
    ncols = x_cols(g)
    c0, c1 = x_col_range(g)
    counts: dict[tuple, int] = {}

    def add(op, engine, dims, n=1):
        key = (op, engine, tuple(dims))
        counts[key] = counts.get(key, 0) + n

    if zero_cols(g):
        add("memset", "vector", (PMAX, zero_cols(g)))
    if xt_has_padding(g):
        add("memset", "vector", (PMAX, ncols * g.c_in), kh_n * XT_BUFS)
    mine = program_chunks(g, lnc, pid)
    for c in mine:
        for q in range(kd):
            for r in dyt_runs(g, c, q):
                if r.src_row < 0:
                    add("dma_copy", "dma", (r.rows * ow * g.c_out * ds, ow * g.c_out * ds))
                else:
                    add("dma_transpose", "dma", (r.rows, ow, g.c_out))
        rows = c.nd * g.axes[1].o
        for kh in range(kh_n):
            for r in xt_runs(g, c, kh):
                if r.src_row < 0:
                    add("dma_copy", "dma", (r.rows * (c1 - c0) * g.c_in * ds, (c1 - c0) * g.c_in * ds))
                else:
                    add("dma_transpose", "dma", (r.rows, c1 - c0, g.c_in))
            for _w in range(ow):
                for _k0, n in kw_groups(g):
                    add("nc_matmul", "tensor", (rows, n * g.c_in, kd * g.c_out))
    groups = kw_groups(g)
    if lnc == 1:
        for _kh in range(kh_n):
            for _k0, n in groups:
                add("tensor_copy", "evict", (n * g.c_in, kd * g.c_out))
                add("dma_copy", "dma", (kd * n * g.c_in * g.c_out * ds, g.c_out * ds))
    else:
        m_max = max(n for _k0, n in groups) * g.c_in
        add("memset", "vector", (m_max, accumulators(g) * kd * g.c_out))
        if mine:
            for _kh in range(kh_n):
                for _k0, n in groups:
                    add("tensor_copy", "vector", (n * g.c_in, kd * g.c_out))
        add("sendrecv", "dma", (m_max * accumulators(g) * kd * g.c_out * 4, kd * g.c_out * 4))
        for a in owned(g, lnc, pid):
            n = groups[a % len(groups)][1]
            add("tensor_tensor", "vector", (n * g.c_in, kd * g.c_out))
            add("dma_copy", "dma", (kd * n * g.c_in * g.c_out * ds, g.c_out * ds))
    return [Work(op, eng, dims, n) for (op, eng, dims), n in counts.items()]


def n_matmuls(g: ConvGeom, lnc: int = 1, pid: int = 0) -> int:
    return len(program_chunks(g, lnc, pid)) * g.axes[1].k * g.axes[2].o * len(kw_groups(g))
