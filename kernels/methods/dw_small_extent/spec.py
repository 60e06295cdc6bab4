"""The small-extent dw method as data: when it applies, its loops, pools and instruction work list.

Pure Python (no NKI import): the NKI body (``nki_body.py``) walks the lists built here, and the planner
budgets and estimates the method from them (``estimate.py``), so what is costed is what runs.

Class: few output positions over the whole batch (at most ``MAX_POS_TILES`` tiles of <= 128 positions,
W_out <= 128), any channels, padding, stride and dilation. Then x (zero-padded) and dy of every sample
stay resident in SBUF, dy^T of every position is built once, and each dw output tile
``dw[(tap, ci) chunk, C_out block]`` is one PSUM accumulation group over every position tile of every
sample (design.md beside this file): VectorE/ScalarE evict each output element once.

Layout of the work. A *position tile* is up to 128 output positions (b, d, h, w), whole W_out rows: whole
samples, whole H_out planes of several d, or a piece of H_out rows of one d. A *slot* is one tap and a
range of <= 128 input channels; a *chunk* is a run of consecutive slots of <= 128 channels in all (several
taps side by side when C_in <= 64): the stationary operand of one matmul and the rows of one output tile,
a contiguous block of dw's ``[K_d, K_h, K_w, C_in, C_out]`` layout.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ...geometry import ConvGeom, ceil_div
from ...schedule import free_pieces
from ..common import bank_packs

PMAX = 128               # partitions; TensorE contraction and stationary free size
MOVING_MAX = 512         # TensorE moving free size (one fp32 PSUM bank)
PSUM_BANK_BYTES = 2048   # one PSUM bank per partition
MAX_POS_TILES = 16       # the class: positions of the whole batch in at most this many 128-position tiles
T_PSUM_BUFS = 2          # PE-transpose banks (dy^T, x^T): one fills while the other is evicted
XT_BUFS = 3              # x^T group tiles in SBUF: the group being multiplied, the next two built ahead
STORE_CHUNKS = 8         # output chunks staged per dw store (one DMA of up to 8 x 128 rows of C_out)
STAGE_RUN_BYTES = 512    # x rows shorter than this land in a staging tile first (descriptor cost)
STORE_BUFS = 6           # store staging tiles: stores in flight while the next are filled


@dataclass(frozen=True)
class PosTile:
    """Output positions of batches [b, b+nb) x d in [d0, d0+nd) x h in [h0, h0+nh) x every w, b-major."""

    b: int
    nb: int
    d0: int
    nd: int
    h0: int
    nh: int

    def size(self, wo: int) -> int:
        return self.nb * self.nd * self.nh * wo


@dataclass(frozen=True)
class Slot:
    """Tap ``tap`` and input channels [ci0, ci0+cs) (within C_in tile ``ci0 // 128``)."""

    tap: int
    ci0: int
    cs: int


@dataclass(frozen=True)
class Chunk:
    """Consecutive slots (<= 128 channels in all): one stationary operand, one block of dw rows."""

    slots: tuple[Slot, ...]

    @property
    def m(self) -> int:
        return sum(s.cs for s in self.slots)


@dataclass(frozen=True)
class Work:
    """One kind of instruction: ``count`` of them on ``engine`` with the given operand figures.

    tensor: (contraction K, stationary free M, moving free N); evict / vector / gpsimd: (partitions,
    elements per partition); dma: (bytes, contiguous run bytes, partitions)."""

    op: str
    engine: str
    dims: tuple
    count: int


def applies(g: ConvGeom) -> str:
    """'' when the geometry is in the method's class, else the rule it breaks."""
    wo = g.axes[2].o
    if wo > PMAX:
        return f"W_out {wo} must be <= {PMAX} (a position tile holds whole W rows)"
    n = len(pos_tiles(g))
    if n > MAX_POS_TILES:
        return (f"{n} position tiles of the whole batch exceed {MAX_POS_TILES} (the method keeps every "
                "position resident)")
    return ""


# ------------------------------------------------------------------------------------------- loops


def pos_tiles(g: ConvGeom) -> list[PosTile]:
    """Every output position in tiles of <= 128 (W_out <= 128): whole samples when a sample has at most
    64 positions, else whole H_out planes of several d when a plane fits, else pieces of H_out (evenly
    sized, so no tile is a small remainder)."""
    od, oh, ow = g.out_size
    rows = max(1, PMAX // ow)   # (d, h) rows of W_out positions per tile
    if od * oh * ow <= PMAX // 2:
        per = PMAX // (od * oh * ow)
        return [PosTile(b, min(per, g.batch - b), 0, od, 0, oh) for b in range(0, g.batch, per)]
    out = []
    for b in range(g.batch):
        if oh <= rows:
            per = rows // oh
            out += [PosTile(b, 1, d0, min(per, od - d0), 0, oh) for d0 in range(0, od, per)]
        else:
            pieces = ceil_div(oh, rows)
            size = ceil_div(oh, pieces)
            out += [PosTile(b, 1, d, 1, h0, min(size, oh - h0)) for d in range(od) for h0 in range(0, oh, size)]
    return out


def program_taps(g: ConvGeom, lnc: int, pid: int) -> tuple[int, int]:
    """[t0, t1): the taps whose dw program ``pid`` computes (LNC2: the taps split in halves)."""
    per = ceil_div(g.taps, lnc)
    return min(g.taps, pid * per), min(g.taps, (pid + 1) * per)


def chunks(g: ConvGeom, lnc: int, pid: int) -> list[Chunk]:
    """Program ``pid``'s stationary chunks, in dw's layout order (consecutive chunks are consecutive rows
    of dw viewed as [taps x C_in, C_out]): 128-row blocks of those rows when every slot they cut starts
    where a PE operand may start (``_slot_ok``: C_in a multiple of 64, or of 32 below 64), else whole
    C_in tiles of one tap, packed side by side while they fit 128."""
    t0, t1 = program_taps(g, lnc, pid)
    flat = _row_chunks(g, t0 * g.c_in, t1 * g.c_in)
    if all(_slot_ok(s) for c in flat for s in c.slots):
        return flat
    slots = [Slot(t, c0, min(PMAX, g.c_in - c0)) for t in range(t0, t1) for c0 in range(0, g.c_in, PMAX)]
    out: list[list[Slot]] = []
    used = PMAX
    for s in slots:
        if used + s.cs > PMAX:
            out.append([])
            used = 0
        out[-1].append(s)
        used += s.cs
    return [Chunk(tuple(c)) for c in out]


def _row_chunks(g: ConvGeom, r0: int, r1: int) -> list[Chunk]:
    """Rows [r0, r1) of dw as [taps x C_in, C_out] in blocks of 128, each cut into slots at tap and
    C_in tile boundaries."""
    out = []
    for a in range(r0, r1, PMAX):
        b = min(r1, a + PMAX)
        slots = []
        r = a
        while r < b:
            tap, ci = divmod(r, g.c_in)
            end = min(b, (tap + 1) * g.c_in, tap * g.c_in + (ci // PMAX + 1) * PMAX)
            slots.append(Slot(tap, ci, end - r))
            r = end
        out.append(Chunk(tuple(slots)))
    return out


def _slot_ok(s: Slot) -> bool:
    """The slot's partitions within its C_in tile start where a PE operand may start: 0; 64 for <= 64
    partitions; 32 or 96 for <= 32 (the compute engines' start-partition rule)."""
    p = s.ci0 % PMAX
    return p == 0 or (s.cs <= 64 and p == 64) or (s.cs <= 32 and p % 32 == 0)


def chunk_row(g: ConvGeom, c: Chunk) -> int:
    """The chunk's first row in dw viewed as [taps x C_in, C_out]."""
    return c.slots[0].tap * g.c_in + c.slots[0].ci0


def transpose_bank(g: ConvGeom) -> int:
    """Elements per partition of one PSUM bank in the input dtype (PE transposes keep the dtype)."""
    return PSUM_BANK_BYTES // g.dtype_bytes


def groups(g: ConvGeom, cs: list[Chunk]) -> list[list[int]]:
    """Indices of the chunks ``cs`` whose x^T is built together: consecutive chunks whose columns, for
    every position tile, fit one PSUM bank (at least one chunk)."""
    n_pt = len(pos_tiles(g))
    out: list[list[int]] = []
    width = 0
    for i, c in enumerate(cs):
        if out and (width + c.m) * n_pt <= transpose_bank(g):
            out[-1].append(i)
            width += c.m
        else:
            out.append([i])
            width = c.m
    return out


def group_width(cs: list[Chunk], grp: list[int]) -> int:
    """x^T columns of a group per position tile (its chunks side by side)."""
    return sum(cs[i].m for i in grp)


def xt_cols(g: ConvGeom) -> int:
    """Columns of one x^T group tile: a bank's worth, or one chunk for every position tile."""
    return max(transpose_bank(g), len(pos_tiles(g)) * PMAX)


def xt_packs(g: ConvGeom, width: int) -> list[tuple[int, int]]:
    """[t0, t1) ranges of position tiles whose x^T (``width`` columns per tile) share a PSUM bank."""
    n_pt = len(pos_tiles(g))
    per = max(1, transpose_bank(g) // width)
    return [(t, min(n_pt, t + per)) for t in range(0, n_pt, per)]


def equal_runs(sizes: list[int], t0: int, t1: int) -> list[tuple[int, int]]:
    """[a, b) runs of consecutive tiles in [t0, t1) with equal sizes (one eviction each)."""
    out: list[tuple[int, int]] = []
    for t in range(t0, t1):
        if out and sizes[out[-1][0]] == sizes[t]:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out


def stores(cs: list[Chunk]) -> list[list[int]]:
    """Indices of the chunks ``cs`` stored by one DMA: consecutive chunks of equal M (contiguous rows of
    dw), at most ``STORE_CHUNKS``."""
    out: list[list[int]] = []
    for i, c in enumerate(cs):
        if out and cs[out[-1][0]].m == c.m and len(out[-1]) < STORE_CHUNKS:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def co_tiles(g: ConvGeom) -> list[tuple[int, int]]:
    return [(c0, min(PMAX, g.c_out - c0)) for c0 in range(0, g.c_out, PMAX)]


def co_blocks(g: ConvGeom) -> list[tuple[int, int]]:
    """The moving blocks of C_out (<= 512: one fp32 PSUM bank per accumulator)."""
    return [(c0, min(MOVING_MAX, g.c_out - c0)) for c0 in range(0, g.c_out, MOVING_MAX)]


def x_extent(g: ConvGeom) -> tuple[int, int, int]:
    """The zero-padded x box every tap window of every output position lies in, per axis."""
    return tuple((a.o - 1) * a.s + (a.k - 1) * a.r + 1 for a in g.axes)


def x_loaded(g: ConvGeom) -> tuple[int, int, int]:
    """Input rows loaded per axis (those inside the padded box: rows no window reaches are not)."""
    return tuple(max(0, min(a.n, e - a.lo)) for a, e in zip(g.axes, x_extent(g)))


def x_needs_zeros(g: ConvGeom) -> bool:
    """True when some of the padded box is padding (zeroed once by a memset before the loads)."""
    return any(a.lo > 0 or a.lo + n < e for a, n, e in zip(g.axes, x_loaded(g), x_extent(g)))


def x_run_bytes(g: ConvGeom) -> int:
    """Contiguous bytes per descriptor of the x load: trailing loaded axes that fill the padded box."""
    ext, n = x_extent(g), x_loaded(g)
    run = n[2]
    if n[2] == ext[2] == g.axes[2].n:
        run *= n[1]
        if n[1] == ext[1] == g.axes[1].n:
            run *= n[0]
    return run * g.dtype_bytes


def x_staged(g: ConvGeom) -> bool:
    """x lands contiguously in a staging tile and GpSimd places it in the padded box when the box cuts
    the load into runs shorter than ``STAGE_RUN_BYTES`` and shorter than a whole sample (and the input
    rows are all loaded, so the staged load is one run per sample and channel)."""
    n = x_loaded(g)
    whole = n[0] * n[1] * n[2] * g.dtype_bytes
    return x_run_bytes(g) < min(STAGE_RUN_BYTES, whole) and n == g.in_size


def x_load_run_bytes(g: ConvGeom) -> int:
    """Contiguous bytes per descriptor of the x load as issued (staged: whole samples)."""
    n = x_loaded(g)
    return n[0] * n[1] * n[2] * g.dtype_bytes if x_staged(g) else x_run_bytes(g)


def psum_banks(compute_db: bool) -> dict[str, int]:
    """PSUM banks by pool: PE transposes, dw accumulators, db (when folded here; released before the
    accumulators are allocated, so the peak is the larger of the two). The kernel's shared transpose
    pool (3 banks) stays allocated beside them."""
    return {"transpose": T_PSUM_BUFS, "dw": 3, "db": 1 if compute_db else 0}


def psum_peak(compute_db: bool) -> int:
    """The most PSUM banks the method holds at once."""
    banks = psum_banks(compute_db)
    return banks["transpose"] + max(banks["dw"], banks["db"])


# ------------------------------------------------------------------------------------------- pools


def sbuf_parts(g: ConvGeom, lnc: int, compute_db: bool) -> dict[str, int]:
    """SBUF bytes per partition of each pool the body allocates."""
    ds = g.dtype_bytes
    od, oh, ow = g.out_size
    e = x_extent(g)
    n_pt = len(pos_tiles(g))
    n_ci = ceil_div(g.c_in, PMAX)
    parts = {
        "x padded": n_ci * g.batch * e[0] * e[1] * e[2] * ds,
        "dy": len(co_tiles(g)) * g.batch * od * oh * ow * ds,
        "dy^T": n_pt * g.c_out * ds,
        "x^T": XT_BUFS * xt_cols(g) * ds,
        "dw stores": STORE_BUFS * STORE_CHUNKS * g.c_out * ds,
    }
    if x_staged(g):
        xl = x_loaded(g)
        parts["x staging"] = n_ci * g.batch * xl[0] * xl[1] * xl[2] * ds
    if compute_db:
        parts["db"] = ds + g.c_out * ds
    return parts


# ------------------------------------------------------------------------------------------- work


def work_list(g: ConvGeom, lnc: int, pid: int, compute_db: bool) -> list[Work]:
    """Program ``pid``'s instructions, merged by kind (op, engine, operand figures), in the order the
    body first issues them. Walks the same lists as the body (``nki_body.run_dw_small_extent``)."""
    counts: dict[tuple, int] = {}
    for step in work_steps(g, lnc, pid, compute_db):
        for w in step:
            key = (w.op, w.engine, w.dims)
            counts[key] = counts.get(key, 0) + w.count
    return [Work(op, eng, dims, n) for (op, eng, dims), n in counts.items()]


class _Counter:
    """Instructions merged by kind (op, engine, operand figures) until taken as one step."""

    def __init__(self):
        self.counts: dict[tuple, int] = {}

    def add(self, op: str, engine: str, dims: tuple, n: int = 1) -> None:
        key = (op, engine, tuple(dims))
        self.counts[key] = self.counts.get(key, 0) + n

    def take(self) -> list[Work]:
        out = [Work(op, eng, dims, n) for (op, eng, dims), n in self.counts.items()]
        self.counts = {}
        return out


def work_steps(g: ConvGeom, lnc: int, pid: int, compute_db: bool) -> list[list[Work]]:
    """Program ``pid``'s instructions by pipeline step, each step's merged by kind: the head (x and dy
    loads, dy^T, db), then per x^T group its transposes, matmuls, evictions and the stores it completes."""
    cs = chunks(g, lnc, pid)
    db_here = compute_db and pid == 0
    if not cs and not db_here:
        return []
    k = _Counter()
    _head_work(k, g, bool(cs), db_here)
    steps = [k.take()]
    last_of = {st[-1]: st for st in stores(cs)}
    for grp in groups(g, cs):
        _group_work(k, g, cs, grp, last_of)
        steps.append(k.take())
    return steps


def _head_work(k: _Counter, g: ConvGeom, has_dw: bool, db_here: bool) -> None:
    """x (zeroed box, loads, staging) when the program has dw rows, dy, dy^T and the folded db."""
    ds = g.dtype_bytes
    od, oh, ow = g.out_size
    cot = co_tiles(g)
    sizes = [t.size(ow) for t in pos_tiles(g)]
    e, xl = x_extent(g), x_loaded(g)
    if has_dw and x_needs_zeros(g):
        for piece in free_pieces((ceil_div(g.c_in, PMAX), g.batch, *e)):   # the box, per engine access
            k.add("memset", "gpsimd", (PMAX, prod(s.stop - s.start for s in piece)))
    if has_dw and min(xl) > 0:
        for c0 in range(0, g.c_in, PMAX):
            cw = min(PMAX, g.c_in - c0)
            k.add("dma_copy", "dma", (cw * g.batch * xl[0] * xl[1] * xl[2] * ds, x_load_run_bytes(g), cw))
            if x_staged(g):
                k.add("tensor_copy", "gpsimd", (cw, g.batch * xl[0] * xl[1] * xl[2]))
    for _c0, cw in cot:
        k.add("dma_copy", "dma", (cw * g.batch * od * oh * ow * ds, od * oh * ow * ds, cw))
    for n in sizes:   # dy^T, C_out tiles packed per bank
        for pack in bank_packs([cw for _c0, cw in cot], transpose_bank(g)):
            for i in pack:
                k.add("nc_transpose", "tensor", (cot[i][1], n, cot[i][1]))
            k.add("tensor_copy", "evict", (n, sum(cot[i][1] for i in pack)))
    if db_here:
        k.add("memset", "vector", (PMAX, 1))
        for _b0, bn in co_blocks(g):
            for n in sizes:
                k.add("nc_matmul", "tensor", (n, 1, bn))
            k.add("tensor_copy", "evict", (1, bn))
        k.add("dma_copy", "dma", (g.c_out * ds, g.c_out * ds, 1))


def _group_work(k: _Counter, g: ConvGeom, cs: list[Chunk], grp: list[int], last_of: dict[int, list[int]]) -> None:
    """One x^T group: its transposes and evictions, each chunk's accumulation groups and evictions, and
    the stores whose last chunk it holds."""
    sizes = [t.size(g.axes[2].o) for t in pos_tiles(g)]
    w = group_width(cs, grp)
    for t0, t1 in xt_packs(g, w):
        for t in range(t0, t1):
            for i in grp:
                for s in cs[i].slots:   # data [cs, positions] -> [positions, cs]
                    k.add("nc_transpose", "tensor", (s.cs, sizes[t], s.cs))
        for a, b in equal_runs(sizes, t0, t1):
            k.add("tensor_copy", "evict", (sizes[a], (b - a) * w))
    for i in grp:
        for _b0, bn in co_blocks(g):
            for n in sizes:
                k.add("nc_matmul", "tensor", (n, cs[i].m, bn))
            k.add("tensor_copy", "evict", (cs[i].m, bn))
        if i in last_of:
            m = cs[i].m
            k.add("dma_copy", "dma", (len(last_of[i]) * m * g.c_out * g.dtype_bytes, g.c_out * g.dtype_bytes, m))
