"""The space-to-depth GEMM method as data: when it applies, its loops, pools and instruction work list.

Pure Python (no NKI import): the NKI body (``nki_body.py``) walks the lists built here, and the planner
budgets and estimates the method from them (``estimate.py``), so what is costed is what runs.

Class: stride equal to the kernel on every axis, no padding, dilation 1, each input size a multiple of
the kernel, more than one tap. Then every input element belongs to exactly one patch and the layer is
one GEMM over the Kc = C_in*K_d*K_h*K_w patch elements (design.md beside this file).

Layout of the work. A *row* is one output (b, d_o, h_o); a *row tile* is up to 128 rows of one batch
(whole H_out rows of several d_o, or a piece of H_out), the partitions of every position-major tile.
A *plane* is one (c_in, k_d) pair: per row, its patch elements are the K_h x W input block
x[b, ci, d_o*K_d + k_d, h_o*K_h : (h_o+1)*K_h, :], contiguous in HBM. Patch element order (kc) is
(ci, kd, kh, kw), so a plane holds K_h*K_w consecutive kc and one output column w_o reads the kw run
[w_o*K_w, (w_o+1)*K_w) of each of its K_h lines.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...geometry import ConvGeom, ceil_div
from ..common import bank_packs

PMAX = 128               # partitions; TensorE contraction and stationary free size
MOVING_MAX = 512         # TensorE moving free size (one fp32 PSUM bank)
PSUM_BANK_BYTES = 2048   # one PSUM bank per partition
PSUM_BANKS = 8
DX_PSUM_BUFS = 2         # dx accumulation banks (one accumulates while the other is evicted)
T_PSUM_BUFS = 2          # PE-transpose banks (W^T, dy^T)
DXP_BUFS = 2             # dx patch planes: one is stored while the next is evicted into
DWO_BUFS = 2             # dw rows in the output dtype: one is stored while the next is cast


@dataclass(frozen=True)
class S2dOptions:
    """The method's one tiling choice: row tiles whose operands are resident together (a *group*)."""

    group_tiles: int


@dataclass(frozen=True)
class RowTile:
    """Up to 128 output rows: batches [b, b+nb) x d_o in [d0, d0+nd) x h_o in [h0, h0+nh), b-major
    (nb > 1 only with whole batches, nd > 1 only with whole H_out rows)."""

    b: int
    d0: int
    nd: int
    h0: int
    nh: int
    nb: int = 1

    @property
    def rows(self) -> int:
        return self.nb * self.nd * self.nh

    def row(self, i: int) -> tuple[int, int, int]:
        """(b, d_o, h_o) of the tile's row ``i`` (its partition)."""
        b, rest = divmod(i, self.nd * self.nh)
        return self.b + b, self.d0 + rest // self.nh, self.h0 + rest % self.nh


@dataclass(frozen=True)
class KcChunk:
    """Patch elements [j0, j0+nj) x [0, K_w) of planes [p0, p0+np) (np > 1 only with whole planes)."""

    p0: int
    np: int
    j0: int
    nj: int


@dataclass(frozen=True)
class Work:
    """One kind of instruction: ``count`` of them on ``engine`` with the given operand figures.

    tensor: (contraction K, stationary free M, moving free N); vector/scalar: (partitions, elements per
    partition, PSUM source, contiguous); dma: (bytes, contiguous run bytes)."""

    op: str
    engine: str
    dims: tuple
    count: int


def applies(g: ConvGeom) -> str:
    """'' when the geometry is in the method's class, else the rule it breaks."""
    for name, a in zip("DHW", g.axes):
        if a.s != a.k:
            return f"stride {a.s} on {name} must equal the kernel {a.k}"
        if a.lo or a.hi:
            return f"padding ({a.lo}, {a.hi}) on {name} must be 0"
        if a.r != 1:
            return f"dilation {a.r} on {name} must be 1"
        if a.n != a.o * a.k:
            return f"input size {a.n} on {name} must be a multiple of the kernel {a.k}"
    if g.taps == 1:
        return "1x1x1 filters: the pointwise GEMM methods serve them"
    if g.axes[2].k > PMAX:
        return f"K_w {g.axes[2].k} must be <= {PMAX} (one kernel line per stationary chunk)"
    return ""


# ------------------------------------------------------------------------------------------- loops


def row_tiles(g: ConvGeom) -> list[RowTile]:
    """Every output row in tiles of <= 128: whole batches when a batch has at most 64 rows, else whole
    H_out rows of several d_o when H_out <= 128, else pieces of H_out."""
    od, oh = g.axes[0].o, g.axes[1].o
    if od * oh <= PMAX // 2:   # whole batches share a tile (half the PE rows or fewer per batch)
        per = PMAX // (od * oh)
        return [RowTile(b, 0, od, 0, oh, min(per, g.batch - b)) for b in range(0, g.batch, per)]
    out = []
    for b in range(g.batch):
        if oh <= PMAX:
            per = max(1, PMAX // oh)
            out += [RowTile(b, d0, min(per, od - d0), 0, oh) for d0 in range(0, od, per)]
        else:
            out += [RowTile(b, d, 1, h0, min(PMAX, oh - h0)) for d in range(od) for h0 in range(0, oh, PMAX)]
    return out


def groups(g: ConvGeom, opts: S2dOptions) -> list[list[RowTile]]:
    """Row tiles in resident groups of ``opts.group_tiles``."""
    tiles = row_tiles(g)
    n = max(1, opts.group_tiles)
    return [tiles[i:i + n] for i in range(0, len(tiles), n)]


def planes(g: ConvGeom) -> int:
    return g.c_in * g.axes[0].k


def program_planes(g: ConvGeom, lnc: int, pid: int) -> tuple[int, int]:
    """[p0, p1): the planes (so the patch elements, dx's and dw's) program ``pid`` computes."""
    per = ceil_div(planes(g), lnc)
    return min(planes(g), pid * per), min(planes(g), (pid + 1) * per)


def plane_size(g: ConvGeom) -> int:
    return g.axes[1].k * g.axes[2].k


def dw_chunks(g: ConvGeom, lnc: int, pid: int) -> list[KcChunk]:
    """dw's stationary chunks (<= 128 patch elements: whole K_w lines of one plane), in kc order."""
    kh, kw = g.axes[1].k, g.axes[2].k
    lines = max(1, PMAX // kw)
    p0, p1 = program_planes(g, lnc, pid)
    return [KcChunk(p, 1, j0, min(lines, kh - j0)) for p in range(p0, p1) for j0 in range(0, kh, lines)]


def dx_units(g: ConvGeom, lnc: int, pid: int) -> list[list[KcChunk]]:
    """dx's store units: whole planes stored together, each a list of moving chunks (<= 512 elements):
    several whole planes per chunk when a plane holds <= 512, else K_w lines of one plane."""
    kh, kw = g.axes[1].k, g.axes[2].k
    p0, p1 = program_planes(g, lnc, pid)
    size = plane_size(g)
    if size <= MOVING_MAX:
        per = MOVING_MAX // size
        return [[KcChunk(p, min(per, p1 - p), 0, kh)] for p in range(p0, p1, per)]
    lines = MOVING_MAX // kw
    return [[KcChunk(p, 1, j0, min(lines, kh - j0)) for j0 in range(0, kh, lines)] for p in range(p0, p1)]


def chunk_size(g: ConvGeom, c: KcChunk) -> int:
    return c.np * c.nj * g.axes[2].k


def chunk_offset(g: ConvGeom, c: KcChunk, p_first: int) -> int:
    """The chunk's first patch element, counted from plane ``p_first`` (a program's own kc range)."""
    return (c.p0 - p_first) * plane_size(g) + c.j0 * g.axes[2].k


def co_tiles(g: ConvGeom) -> list[tuple[int, int]]:
    return [(c0, min(PMAX, g.c_out - c0)) for c0 in range(0, g.c_out, PMAX)]


def co_blocks(g: ConvGeom) -> list[tuple[int, int]]:
    """dw's moving blocks of C_out (<= 512: one fp32 PSUM bank per accumulator)."""
    return [(c0, min(MOVING_MAX, g.c_out - c0)) for c0 in range(0, g.c_out, MOVING_MAX)]


def psum_budget(g: ConvGeom, compute_dx: bool, compute_dw: bool) -> dict[str, int]:
    """PSUM banks by pool: dx accumulation, PE transposes, dw accumulators (what is left)."""
    used = {"dx": DX_PSUM_BUFS if compute_dx else 0, "transpose": T_PSUM_BUFS if (compute_dx or compute_dw) else 0}
    used["dw"] = PSUM_BANKS - sum(used.values()) if compute_dw else 0
    return used


def acc_half(banks: int) -> int:
    """Accumulators per dw set: half the dw banks, so consecutive sets alternate between the halves and
    a set's matmuls never wait for the previous set's evictions (all of them with a single bank)."""
    return max(1, banks // 2)


def acc_sets(g: ConvGeom, lnc: int, pid: int, banks: int) -> list[list[tuple[int, int]]]:
    """dw's accumulators (dw chunk index, C_out block index), kc-major, in sets of ``acc_half(banks)``
    live together (a chunk's blocks stay in one set where they fit, so its row is cast and stored once)."""
    banks = acc_half(banks)
    per_chunk = len(co_blocks(g))
    chunks_per_set = max(1, banks // per_chunk)
    pairs = [(k, j) for k in range(len(dw_chunks(g, lnc, pid))) for j in range(per_chunk)]
    step = chunks_per_set * per_chunk if per_chunk <= banks else banks
    return [pairs[i:i + step] for i in range(0, len(pairs), step)]


def compact(pattern: list[list[int]]) -> list[list[int]]:
    """An access pattern ([stride, count] pairs, outermost first) with count-1 dims dropped and dims that
    continue one another merged (fewer DMA dims, same elements in the same order). The first pair stays:
    it is the partition dim of the SBUF side."""
    out = [list(pattern[0])]
    for stride, count in pattern[1:]:
        if count == 1:
            continue
        prev = out[-1]
        if len(out) > 1 and prev[0] == stride * count:
            out[-1] = [stride, prev[1] * count]
        else:
            out.append([stride, count])
    if len(out) == 1:
        out.append([1, 1])
    return out


def transpose_bank(g: ConvGeom) -> int:
    """Elements per partition of one PSUM bank in the input dtype (PE transposes keep the dtype)."""
    return PSUM_BANK_BYTES // g.dtype_bytes


# ------------------------------------------------------------------------------------------- pools


def sbuf_parts(g: ConvGeom, opts: S2dOptions, lnc: int, compute_dx: bool, compute_dw: bool,
               compute_db: bool) -> dict[str, int]:
    """SBUF bytes per partition of each pool the body allocates (the largest program's share)."""
    ds = g.dtype_bytes
    n_co = len(co_tiles(g))
    ow, w, kh = g.axes[2].o, g.axes[2].n, g.axes[1].k
    pq = max(p1 - p0 for p0, p1 in (program_planes(g, lnc, q) for q in range(lnc)))
    kq = pq * plane_size(g)
    tiles = row_tiles(g)
    rows = max(t.rows for t in tiles)
    n_groups = ceil_div(len(tiles), max(1, opts.group_tiles))
    gbufs = 1 if n_groups == 1 else 2
    gt = min(opts.group_tiles, len(tiles))
    parts = {"dy": gbufs * gt * n_co * rows * ow * ds}
    if compute_dx:
        unit_planes = max(u[0].np for u in dx_units(g, 1, 0))
        parts["filters^T"] = n_co * kq * ds
        parts["filter rows"] = max(len(dw_chunks(g, lnc, q)) for q in range(lnc)) * g.c_out * ds
        parts["dx planes"] = DXP_BUFS * unit_planes * kh * w * ds
    if compute_dw:
        parts["dy^T"] = gbufs * gt * ow * g.c_out * ds
        parts["x lines"] = gbufs * gt * pq * kh * w * ds
        parts["dw rows"] = DWO_BUFS * g.c_out * ds
        if n_groups > 1:
            parts["dw fp32"] = max(len(dw_chunks(g, lnc, q)) for q in range(lnc)) * g.c_out * 4
    if compute_db:
        parts["db"] = (n_co + 2) * 4
    return parts


def max_group_tiles(g: ConvGeom, lnc: int, flags: tuple[bool, bool, bool], usable: int) -> int:
    """The most row tiles per group whose pools fit ``usable`` bytes per partition (0: none fits)."""
    n = len(row_tiles(g))
    best = 0
    for gt in sorted({n, *range(1, min(n, 64) + 1)}):
        if sum(sbuf_parts(g, S2dOptions(gt), lnc, *flags).values()) <= usable:
            best = gt
    return best


def options(g: ConvGeom, lnc: int, flags: tuple[bool, bool, bool], usable: int) -> list[S2dOptions]:
    """The tilings worth costing: the largest group that fits and half of it (more overlap between the
    next group's loads and this group's matmuls, less resident)."""
    if applies(g):
        return []
    top = max_group_tiles(g, lnc, flags, usable)
    if top == 0:
        return [S2dOptions(1)]   # over budget: the planner reports it with the pools' sizes
    return [S2dOptions(t) for t in sorted({top, max(1, top // 2)}, reverse=True)]


# ------------------------------------------------------------------------------------------- work


class _WorkCounts:
    """Instructions merged by kind (op, engine, operand figures), kinds in the order of their first add."""

    def __init__(self) -> None:
        self.counts: dict[tuple, int] = {}

    def add(self, op: str, engine: str, dims: tuple, n: int = 1) -> None:
        key = (op, engine, tuple(dims))
        self.counts[key] = self.counts.get(key, 0) + n

    def works(self) -> list[Work]:
        return [Work(op, eng, dims, n) for (op, eng, dims), n in self.counts.items()]


@dataclass(frozen=True)
class _Share:
    """One program's share: its planes [p0, p1) and which gradients it computes."""

    g: ConvGeom
    lnc: int
    pid: int
    p0: int
    p1: int
    dx: bool
    dw: bool
    db: bool


def work_list(g: ConvGeom, opts: S2dOptions, lnc: int, pid: int, compute_dx: bool, compute_dw: bool,
              compute_db: bool) -> list[Work]:
    """Program ``pid``'s instructions, merged by kind (op, engine, operand figures), in the order the
    body first issues them. Walks the same lists as the body (``nki_body.run_s2d_gemm``)."""
    p0, p1 = program_planes(g, lnc, pid)
    if p1 <= p0 and not (compute_db and pid == 0):
        return []
    sh = _Share(g, lnc, pid, p0, p1, compute_dx and p1 > p0, compute_dw and p1 > p0, compute_db and pid == 0)
    work = _WorkCounts()
    if sh.dx:
        _filter_work(work, sh)
    if sh.db:
        work.add("memset", "vector", (PMAX, len(co_tiles(g))))
    banks = psum_budget(g, compute_dx, compute_dw)["dw"]
    grps = groups(g, opts)
    for gi, grp in enumerate(grps):
        for t in grp:
            _tile_load_work(work, sh, t)
        for t in grp:
            _tile_work(work, sh, t)
        if sh.dw:
            _dw_group_work(work, sh, grp, banks, (gi, len(grps)))
    if sh.db:
        for _c0, co_sz in co_tiles(g):
            work.add("dma_copy", "dma", (co_sz * g.dtype_bytes, g.dtype_bytes))
    return work.works()


def _filter_work(work: _WorkCounts, sh: _Share) -> None:
    """The filters: natural rows by DMA, PE-transposed to [co, kc], resident."""
    g, ds = sh.g, sh.g.dtype_bytes
    chunks = dw_chunks(g, sh.lnc, sh.pid)
    for c in chunks:
        m = chunk_size(g, c)
        work.add("dma_copy", "dma", (m * g.c_out * ds, g.c_out * ds))
    for pack in bank_packs([chunk_size(g, c) for c in chunks], transpose_bank(g)):
        for _c0, co_sz in co_tiles(g):
            for i in pack:   # data [m kc, co] -> [co, m]: (K, M, N) = (m, co, m)
                m = chunk_size(g, chunks[i])
                work.add("nc_transpose", "tensor", (m, co_sz, m))
            work.add("tensor_copy", "evict", (co_sz, sum(chunk_size(g, chunks[i]) for i in pack), True, True))


def _tile_load_work(work: _WorkCounts, sh: _Share, t: RowTile) -> None:
    """A row tile's loads: dy rows per C_out tile, (dw) x lines per plane."""
    g, ds = sh.g, sh.g.dtype_bytes
    kh, w = g.axes[1].k, g.axes[2].n
    npos = t.rows * g.axes[2].o
    for _c0, co_sz in co_tiles(g):
        work.add("dma_copy", "dma", (co_sz * npos * ds, npos * ds))
    if sh.dw:
        for _p in range(sh.p0, sh.p1):
            work.add("dma_copy", "dma", (t.rows * kh * w * ds, kh * w * ds))


def _tile_work(work: _WorkCounts, sh: _Share, t: RowTile) -> None:
    """A row tile's dy^T (C_out tile by C_out tile), dx and db."""
    g, ds = sh.g, sh.g.dtype_bytes
    kh, w, ow = g.axes[1].k, g.axes[2].n, g.axes[2].o
    cot = co_tiles(g)
    if sh.dw:
        for _c0, co_sz in cot:
            for pack in bank_packs([co_sz] * ow, transpose_bank(g)):
                for _i in pack:   # data [co, rows] -> [rows, co]: (K, M, N) = (co, rows, co)
                    work.add("nc_transpose", "tensor", (co_sz, t.rows, co_sz))
                work.add("tensor_copy", "evict", (t.rows, co_sz * len(pack), True, len(cot) == 1))
    if sh.dx:
        for unit in dx_units(g, sh.lnc, sh.pid):
            for c in unit:
                n = chunk_size(g, c)
                for _w in range(ow):
                    for _c0, co_sz in cot:
                        work.add("nc_matmul", "tensor", (co_sz, t.rows, n))
                    work.add("tensor_copy", "evict", (t.rows, n, True, False))
            for _p in range(unit[0].np):
                work.add("dma_copy", "dma", (t.rows * kh * w * ds, kh * w * ds))
    if sh.db:
        for _c0, co_sz in cot:
            work.add("tensor_reduce", "vector", (co_sz, t.rows * ow))
            work.add("tensor_tensor", "vector", (co_sz, 1))


def _dw_group_work(work: _WorkCounts, sh: _Share, grp, banks: int, group: tuple[int, int]) -> None:
    """A group's dw: per accumulator set its matmuls over the group's rows and columns, then per
    accumulator the eviction (one group), or the fp32 sum and (last group) its cast; the stores."""
    g = sh.g
    gi, n_groups = group
    chunks = dw_chunks(g, sh.lnc, sh.pid)
    blocks = co_blocks(g)
    for aset in acc_sets(g, sh.lnc, sh.pid, banks):
        for t in grp:
            for _w in range(g.axes[2].o):
                for k, j in aset:
                    work.add("nc_matmul", "tensor", (t.rows, chunk_size(g, chunks[k]), blocks[j][1]))
        for k, j in aset:
            m, n = chunk_size(g, chunks[k]), blocks[j][1]
            if n_groups == 1:
                work.add("tensor_copy", "evict", (m, n, True, True))
            elif gi == 0:
                work.add("tensor_copy", "vector", (m, n, True, True))
            else:
                work.add("tensor_tensor", "vector", (m, n, True, True))
            if n_groups > 1 and gi == n_groups - 1:
                work.add("tensor_copy", "evict_sbuf", (m, n, False, True))
            if j == len(blocks) - 1 and gi == n_groups - 1:
                work.add("dma_copy", "dma", (m * g.c_out * g.dtype_bytes, g.c_out * g.dtype_bytes))
