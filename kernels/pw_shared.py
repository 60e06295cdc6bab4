"""Loop lists of the shared-dy GEMM kernel (``nki_pw_shared``): pure Python, shared by the kernel and the
planner.

Its domain (``shared_gemm_domain``): 1x1x1 (``g.pointwise``), and D-only kernels (K_d x 1 x 1, stride 1,
padding on D only, any D dilation) whose H x W planes are whole 128-position sub-tiles. There a tap kd is a
shift of the flat (d, h, w) positions by ``s = (kd * r_d - pad_d) * H * W``: dx[ci, p] = sum over kd of
W_kd^T dy[:, p - s] and dw_kd = sum over p of x[:, p + s] dy[:, p]^T -- per tap a pointwise GEMM, and since
s is a whole number of sub-tiles, one x^T sub-tile serves every tap. The kernel loads each position chunk of
dy once (C_out on partitions, as dx needs it) and makes dw's dy^T from it on the PE, so dy crosses HBM once
(dx's dy and dw:dma_gemm's dy^T read it twice) and x^T once (row-mode dw reads it once per tap).
Positions below are flat within a batch; a chunk is (batch, first x position, x positions).
"""
from __future__ import annotations

from dataclasses import dataclass

# BLOCK: positions per dx matmul (its moving free size) and per pipeline step
from .schedule import MOVING_MAX as BLOCK
from .schedule import PMAX

DX_LAG = 2    # at most this many last steps run their dx after the last dw: dw's finish overlaps them


def dx_lag(n_steps: int, taps: int = 1) -> int:
    """The last steps whose dx is held back (DX_LAG, fewer when the program has few steps: with 2 steps
    holding both back serialised dw and dx, 20.1 us against 16.6 with none on a 512 -> 256 layer). D kernels
    (several taps: a finish per tap) hold back up to half the steps (temporal LNC2, 4 steps per program:
    27.3 us with one held back, 26.7 with two)."""
    return min(DX_LAG, n_steps // (4 if taps == 1 else 2))
LOAD_AHEAD = 2   # a load is issued this many steps before the step that needs it


@dataclass(frozen=True)
class Lay:
    """The flat position layout: x and dy positions per batch, the taps' shifts, whole-batch chunks."""

    hw: int                      # H x W positions per D plane
    nx: int                      # x positions per batch
    ny: int                      # dy positions per batch
    shifts: tuple[int, ...]      # per tap kd: dy position p pairs with x position p + s
    whole: bool                  # one chunk per batch (D kernels: the taps cross planes)

    @property
    def lead(self) -> int:
        """dy buffer positions before the chunk's first dy position (zeros: dx's taps reach below 0)."""
        return max(0, max(self.shifts))

    def ext(self, nx_c: int, ny_c: int) -> int:
        """dy buffer length of a chunk: what dx's taps read (zeros beyond the chunk's dy)."""
        return self.lead + max(ny_c, nx_c - min(self.shifts))


def shared_gemm_domain(g) -> str:
    """'' when the shared-dy GEMM kernel serves ``g``, else why not."""
    if g.pointwise:
        return ""
    k = g.kernel
    if k[1] != 1 or k[2] != 1 or k[0] < 2:
        return f"kernel {k}: needs 1x1x1 or K_d x 1 x 1"
    if any(a.s != 1 for a in g.axes) or any(g.axes[a].lo or g.axes[a].hi for a in (1, 2)):
        return "needs unit stride and padding on D only"
    hw = g.axes[1].n * g.axes[2].n
    if hw % PMAX:
        return f"H x W = {hw}: a D plane must be whole 128-position sub-tiles"
    return ""


def lay_of(g) -> Lay:
    hw = g.axes[1].n * g.axes[2].n
    o = g.out_size
    if g.pointwise:
        return Lay(hw, g.axes[0].n * hw, o[0] * o[1] * o[2], (0,), False)
    a = g.axes[0]
    return Lay(hw, a.n * hw, o[0] * o[1] * o[2], tuple((kd * a.r - a.lo) * hw for kd in range(a.k)), True)


def chunk_of(g, item) -> tuple[int, int, int]:
    """(batch, first flat x position, x positions) of a dx (batch, D band, H band) item; a band is whole W
    rows and either whole H planes or one D row, so its positions are one contiguous run of the flat volume
    (D kernels: the whole volume)."""
    b, bd, bh = item
    H, W = g.axes[1].n, g.axes[2].n
    nd, nh = bd.i1 - bd.i0, bh.i1 - bh.i0
    if nh != H and nd > 1:
        raise ValueError(f"shared-dy GEMM: band {nd}x{nh} of H={H} is not one contiguous position run")
    if lay_of(g).whole and nh != H:
        raise ValueError(f"shared-dy GEMM with a {g.kernel} kernel: the band must be whole D planes")
    return b, (bd.i0 * H + bh.i0) * W, nd * nh * W


def dy_size(lay: Lay, chunk: tuple[int, int, int]) -> int:
    """dy positions of a chunk, from its first x position's flat position (its dy window: pointwise its x
    positions; D kernels, whose chunk is a run of whole D planes -- the LNC2 split gives each program part of
    a batch's planes -- the dy positions from there to the chunk's x end, the batch's last chunk to the end
    of dy: the windows of a batch's chunks partition its dy, so dw and db see every dy position once)."""
    if not lay.whole:
        return chunk[2]
    q0, n = chunk[1], chunk[2]
    hi = lay.ny if q0 + n >= lay.nx else min(q0 + n, lay.ny)
    return max(0, hi - q0)


def x_span(lay: Lay, chunk: tuple[int, int, int]) -> tuple[int, int]:
    """The chunk-local x positions [lo, hi) its x^T buffer holds: its own x positions and, for D kernels
    split by planes, the halo planes dw's taps pair its dy window with (within the batch)."""
    q0, n = chunk[1], chunk[2]
    if not lay.whole or not dy_size(lay, chunk):
        return 0, n
    lo = max(-q0, min(0, min(lay.shifts)))
    hi = min(lay.nx - q0, max(n, dy_size(lay, chunk) + max(lay.shifts)))
    return lo, max(hi, n)


def dy_halos(lay: Lay, chunk: tuple[int, int, int]) -> list[tuple[int, int]]:
    """The chunk-local dy runs [u0, u1) beyond its dy window that dx's taps read and that lie in the batch's
    dy (loaded with the chunk's buffer; the rest of the buffer beyond the window is zeros)."""
    q0, ny_c = chunk[1], dy_size(lay, chunk)
    e = lay.ext(chunk[2], ny_c) - lay.lead
    out = []
    for u0, u1 in ((-lay.lead, 0), (ny_c, e)):
        a, b = max(u0, -q0), min(u1, lay.ny - q0)
        if b > a:
            out.append((a, b))
    return out


def x_halos(lay: Lay, chunk: tuple[int, int, int]) -> list[tuple[int, int]]:
    """The chunk-local x runs of its x^T buffer outside its own x positions (``x_span``)."""
    lo, hi = x_span(lay, chunk)
    return [(a, b) for a, b in ((lo, 0), (chunk[2], hi)) if b > a]


def steps_of(lay: Lay, chunks: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The pipeline steps: (chunk index, offset in the chunk, x positions (dx), dy positions (T, dw)),
    each <= BLOCK (one may be 0 where x and dy sizes differ)."""
    out = []
    for i, c in enumerate(chunks):
        n, ny = c[2], dy_size(lay, c)
        for o in range(0, max(n, ny), BLOCK):
            out.append((i, o, max(0, min(BLOCK, n - o)), max(0, min(BLOCK, ny - o))))
    return out


def load_events(lay: Lay, chunks: list[tuple[int, int, int]]) -> list[tuple[int, str, int, int, int]]:
    """The kernel's loads in issue order: (issued before step, kind, chunk, offset, positions). The first
    chunk loads per step, later chunks whole. Kinds, by the step that needs them first: "dy" (step f's
    transposes; dx's taps read up to -min(shift) positions further), "w" (the filters: the first dx, after
    the first step's transposes), "x" (x^T: step f's dw, issued after step f + 1's transposes and dx; dw's
    taps read up to max(shift) x positions further), "yt" (the DMA-made dy^T sub-tiles of step f's dy, for
    its dw). Issued LOAD_AHEAD steps ahead."""
    steps = steps_of(lay, chunks)
    first = {}
    for j, (i, o, _n, _ny) in enumerate(steps):
        first.setdefault((i, o), j)
    dy_early = -(-max(0, -min(lay.shifts)) // BLOCK)
    x_early = -(-max(0, max(lay.shifts)) // BLOCK)
    keyed = []
    for i, c in enumerate(chunks):
        runs = [(o, n, ny) for (i_, o, n, ny) in steps if i_ == i] if i == 0 else [(0, c[2], dy_size(lay, c))]
        for o, n, ny in runs:
            if ny:
                keyed.append((first[(i, o)] - dy_early, 0, "dy", i, o, ny))
            if n:
                keyed.append((max(first[(i, o)] - x_early, 0) + 1.5, 1, "x", i, o, n))
            if ny:
                keyed.append((first[(i, o)] + 1.5, 1, "yt", i, o, ny))
    if chunks:
        keyed.append((0.5, 0, "w", 0, 0, 0))
    keyed.sort(key=lambda e: (e[0], e[1]))
    return [(max(0, int(k) - LOAD_AHEAD), kind, i, o, m) for k, _t, kind, i, o, m in keyed]


def ring_depth(lay: Lay, chunks: list[tuple[int, int, int]]) -> int:
    """Chunk buffers (dy, x^T, dy^T) live at once: a load issued before step s writes chunk i while the
    chunk of step s - 1 (its dw runs after the loads) is still read."""
    steps = steps_of(lay, chunks)
    depth = 1
    for s, _kind, i, _o, _m in load_events(lay, chunks):
        oldest = steps[max(0, s - 1)][0] if steps else 0
        depth = max(depth, i - oldest + 1)
    return depth


def subtiles(off: int, n: int) -> list[tuple[int, int]]:
    """The 128-position sub-tiles (offset in the chunk, positions) of a step."""
    return [(off + s, min(PMAX, n - s)) for s in range(0, n, PMAX)]


def dw_pairs(lay: Lay, s: int, ns: int, span: tuple[int, int]) -> list[tuple[int, int]]:
    """(tap, x position in the chunk) of the taps a dy sub-tile meets (its x sub-tile lies in the chunk's
    x^T span, ``x_span``)."""
    return [(kd, s + sh) for kd, sh in enumerate(lay.shifts) if span[0] <= s + sh and s + sh + ns <= span[1]]


def dyt_by_dma(s: int, ns: int, every: int) -> bool:
    """Whether the sub-tile at chunk offset ``s`` (``ns`` positions) gets its dy^T by ``dma_transpose`` from
    HBM instead of PE transposes (``Plan.pw_dyt_dma`` = every: one full sub-tile in ``every``; 0: none)."""
    return every > 0 and ns == PMAX and (s // PMAX) % every == every - 1


def dyt_groups(subs: list[tuple[int, int]], c_out: int, bank_elems: int) -> list[list[tuple[int, int]]]:
    """Sub-tiles whose dy^T share one PSUM transpose bank (and one eviction): adjacent sub-tiles of equal
    size, ``bank_elems // C_out`` of them when all of C_out fits a bank, else one each."""
    per = max(1, bank_elems // c_out) if c_out <= bank_elems else 1
    out: list[list[tuple[int, int]]] = []
    for s in subs:
        if out and len(out[-1]) < per and out[-1][-1][1] == s[1] and out[-1][-1][0] + PMAX == s[0]:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def acc_slots(taps: int, c_in: int, c_out: int) -> list[tuple[int, int, int, int, int]]:
    """dw's PSUM accumulators, (tap, C_in tile, C_out block, bank, first column), packed in order into banks
    of BLOCK fp32 columns."""
    blocks = [(c0, min(BLOCK, c_out - c0)) for c0 in range(0, c_out, BLOCK)]
    out, bank, col = [], 0, 0
    for kd in range(taps):
        for k in range(-(-c_in // PMAX)):
            for jb, (_c0, cn) in enumerate(blocks):
                if col + cn > BLOCK:
                    bank, col = bank + 1, 0
                out.append((kd, k, jb, bank, col))
                col += cn
    return out


def chunk_positions(g, band: tuple[int, int]) -> int:
    """x positions of the largest chunk of a dx band (D rows x H rows x W)."""
    return min(band[0], g.axes[0].n) * min(band[1], g.axes[1].n) * g.axes[2].n


def sbuf_bytes(g, band: tuple[int, int], lnc: int, chunks: list[tuple[int, int, int]], dy_bufs: int) -> int:
    """The kernel's pools beyond what dx's budget counts (two planes, the filters, db; its ``dy_bufs`` dy
    band buffers are counted again here, whole): the dy ring (``ring_depth`` chunk buffers of ``Lay.ext``
    positions), the dy^T and x^T rings, the other planes (two per C_in tile), db's scratch tile and ones
    column, and the dw output tiles (LNC2 per C_in tile: the fp32 partial, the received half and the output
    half)."""
    ds = g.dtype_bytes
    lay = lay_of(g)
    big = chunk_positions(g, band)
    ybig = max([dy_size(lay, c) for c in chunks] + [1])
    n_suby = -(-ybig // PMAX)
    n_sub = max([-(-(b - a) // PMAX) for a, b in (x_span(lay, c) for c in chunks)] + [-(-big // PMAX)])
    n_ci = -(-g.c_in // PMAX)
    n_co = -(-g.c_out // PMAX)
    out = min(2, n_ci * len(lay.shifts)) * g.c_out * ds
    if lnc == 2:
        half = -(-g.c_out // 2)
        out = n_ci * len(lay.shifts) * (g.c_out * 4 + half * (4 + ds))
    depth = ring_depth(lay, chunks)
    ext = max([lay.ext(c[2], dy_size(lay, c)) for c in chunks] + [1])
    return (depth * n_co * ext * ds + depth * n_suby * g.c_out * ds + depth * n_sub * n_ci * PMAX * ds
            + (2 * n_ci - 2) * big * ds + ybig * ds + ds + out)


def psum_banks(g, db: bool) -> int:
    """dw's accumulator banks (``acc_slots``) and db's bank (the transpose and dx banks are counted with
    them by the planner)."""
    slots = acc_slots(len(lay_of(g).shifts), g.c_in, g.c_out)
    return slots[-1][3] + 1 + (1 if db else 0)


def estimate_dw(c, g, chunks: list[tuple[int, int, int]], db: str, lnc: int, every: int = 0) -> None:
    """dw's (and db's) share of the kernel beyond dx's (mirrors ``nki_pw_shared``): the dy^T PE transposes
    and their evictions (or DMA transposes), the x^T transposes from HBM, the dw matmuls of every tap a
    sub-tile meets, db (``db``: "pe" ones-vector matmuls, "scalar" activation reduces of the dy chunks, ""
    none); at LNC1 the final evictions and stores (LNC2: the planner charges the reduce-scatter)."""
    lay = lay_of(g)
    ds = g.dtype_bytes
    two = ds == 2
    co_t = min(PMAX, g.c_out)
    n_co = -(-g.c_out // PMAX)
    ci_sizes = [min(PMAX, g.c_in - s) for s in range(0, g.c_in, PMAX)]
    blocks = [min(BLOCK, g.c_out - s) for s in range(0, g.c_out, BLOCK)]
    for (i, off, _n, ny) in steps_of(lay, chunks):
        _dw_step(c, g, lay, chunks, i, off, ny, db, every)
    for _s, kind, i, _o, m in load_events(lay, chunks):   # x^T by dma_transpose from HBM, with its halos
        if kind == "x":
            xt_transposes(c, g, m)
    for ch in chunks:   # the LNC2 plane split's halo planes
        for a, b in x_halos(lay, ch):
            xt_transposes(c, g, b - a)
    yh = [h for ch in chunks for h in dy_halos(lay, ch)]
    for u0, u1 in yh:   # dx's dy halo planes (loaded with the chunk's buffer, per C_out tile)
        c.dma((u1 - u0) * co_t * ds, (u1 - u0) * ds, n_co)
    if lnc == 1:
        c.evict(sum(blocks), two, len(ci_sizes) * len(lay.shifts))
        c.dma(min(PMAX, g.c_in) * g.c_out * ds, g.c_out * ds, len(ci_sizes) * len(lay.shifts))


def xt_transposes(c, g, m: int) -> None:
    """x^T of ``m`` positions by ``dma_transpose`` from HBM, as ``nki_pw_shared``'s ``load_xt`` issues them:
    per C_in tile one 3-D transpose of the whole 128-position sub-tiles (dst ``[128, full, ci]``) and one
    2-D transpose of the rest (dst ``[rest, ci]``)."""
    full, rest = divmod(m, PMAX)
    for ci in range(0, g.c_in, PMAX):
        ci_sz = min(PMAX, g.c_in - ci)
        if full:
            c.dma_transpose((PMAX, full, ci_sz), g.dtype_bytes, src_shape=(ci_sz, full, PMAX))
        if rest:
            c.dma_transpose((rest, ci_sz), g.dtype_bytes, src_shape=(ci_sz, rest))


def dyt_transposes(c, g, ns: int) -> None:
    """A sub-tile's dy^T of ``ns`` positions by ``dma_transpose`` from HBM (``load_dyt``): dst ``[ns, co]``
    per C_out tile."""
    for co in range(0, g.c_out, PMAX):
        co_sz = min(PMAX, g.c_out - co)
        c.dma_transpose((ns, co_sz), g.dtype_bytes, src_shape=(co_sz, ns))


def _dw_step(c, g, lay: Lay, chunks: list[tuple[int, int, int]], i: int, off: int, ny: int, db: str,
             every: int) -> None:
    """One pipeline step's dw (and db) work (``estimate_dw``): its dy^T (``_dyt_step``), then the dw matmuls
    of every tap its sub-tiles meet and db's share (``_dw_mm_step``)."""
    _dyt_step(c, g, off, ny, db, every)
    _dw_mm_step(c, g, lay, chunks, i, off, ny, db)


def _dyt_step(c, g, off: int, ny: int, db: str, every: int) -> None:
    """A step's dy^T: PE transposes and their evictions, or ``dma_transpose`` from HBM (``dyt_by_dma``)."""
    ds = g.dtype_bytes
    fp32, two = g.dtype == "fp32", ds == 2
    co_t = min(PMAX, g.c_out)
    n_co = -(-g.c_out // PMAX)
    bank = 2048 // ds
    width = min(g.c_out, bank)
    packs = -(-g.c_out // bank) if g.c_out > bank else 1
    subs = subtiles(off, ny)
    for _s, ns in subs:
        if dyt_by_dma(_s, ns, every):   # dma_transpose from HBM
            dyt_transposes(c, g, ns)
    for grp in dyt_groups([st for st in subs if not dyt_by_dma(st[0], st[1], every)], g.c_out, bank):
        ns = grp[0][1]
        c.transpose(co_t, ns, fp32, n_co * len(grp))
        if db == "scalar":   # the dy^T evictions on VectorE
            c.compute("vector", len(grp) * width, 1, c.copy_speedup("vector", two, True, True), packs)
        else:
            c.evict(len(grp) * width, two, packs)


def _dw_mm_step(c, g, lay: Lay, chunks: list[tuple[int, int, int]], i: int, off: int, ny: int, db: str) -> None:
    """A step's dw matmuls (every tap each sub-tile meets) and db's share."""
    fp32 = g.dtype == "fp32"
    co_t = min(PMAX, g.c_out)
    n_co = -(-g.c_out // PMAX)
    ci_sizes = [min(PMAX, g.c_in - s) for s in range(0, g.c_in, PMAX)]
    blocks = [min(BLOCK, g.c_out - s) for s in range(0, g.c_out, BLOCK)]
    for _s, ns in subtiles(off, ny):
        for _kd in dw_pairs(lay, _s, ns, x_span(lay, chunks[i])):
            for ci in ci_sizes:
                for cn in blocks:
                    c.matmul(ci, cn, fp32)
        if db == "pe":
            c.matmul(co_t, 1, fp32, n_co)
    if db == "scalar" and ny and (i == 0 or off == 0):   # per step in the first chunk, per chunk after
        m = ny if i == 0 else dy_size(lay, chunks[i])
        c.compute("scalar", m, 1, 1.0, n_co, op="activation")

def first_parts(g, co_major: bool) -> int:
    """The parts of the first step that start as their loads land (``costs.flow_shop_ns``): its C_out tiles
    when the first step runs C_out tile outer (``co_major``: ``nki_pw_shared._filters_co_major``), else 1."""
    return -(-g.c_out // PMAX) if co_major else 1


def flow_steps(c_new, g, chunks: list[tuple[int, int, int]], dx_work: list[tuple[float, float]],
               filters: tuple[float, float], db: str, every: int = 0
               ) -> list[tuple[list[tuple[float, int]], float, float]]:
    """The program as PE units in issue order for ``costs.flow_shop_ns`` (mirrors ``nki_pw_shared``): unit j
    (per step j) is step j's dy^T and dx and step j - 1's dw; a last unit runs the last two steps' dw and the
    held-back dx steps (``dx_lag``). Per unit: the loads issued before it (``load_events``: dy per C_out tile
    with its halos, read by the unit of its step; x^T by ``dma_transpose`` with its halos and the DMA-made
    dy^T, read by the unit of the step's dw; the filters, ``filters`` = (DMA ns, PE ns), read by unit 0),
    its PE ns (dw: ``_dyt_step`` / ``_dw_mm_step`` on fresh sheets ``c_new()``, the same formulas as
    ``estimate_dw``; dx: the chunk's PE of ``dx_work`` = [(PE ns, store DMA ns)] per chunk, spread over its
    steps by x positions) and its dx store (the held-back steps' stores are the trails the planner charges)."""
    lay = lay_of(g)
    ds = g.dtype_bytes
    co_t = min(PMAX, g.c_out)
    n_co = -(-g.c_out // PMAX)
    steps = steps_of(lay, chunks)
    n = len(steps)
    if not n:
        return []
    lag = dx_lag(n, len(lay.shifts))

    def dw_unit(j: int) -> int:   # the unit that runs step j's dw
        return j + 1 if j + 1 < n - 1 else n

    at = {}
    for j, (i, off, _n, _ny) in enumerate(steps):
        at.setdefault((i, off), j)
    loads: list[list[tuple[float, int]]] = [[] for _ in range(n + 1)]
    for s, kind, i, off, m in load_events(lay, chunks):
        f = at.get((i, off), 0)
        one = c_new()
        ch = chunks[i]
        if kind == "w":
            loads[s].append((filters[0], 0))
            continue
        if kind == "dy":
            one.dma(co_t * m * ds, m * ds, n_co)
            if off == 0:
                for u0, u1 in dy_halos(lay, ch):
                    one.dma((u1 - u0) * co_t * ds, (u1 - u0) * ds, n_co)
        elif kind == "x":
            xt_transposes(one, g, m)
            for a, b in x_halos(lay, ch) if off == 0 else ():
                xt_transposes(one, g, b - a)
        else:   # "yt": the sub-tiles whose dy^T comes by dma_transpose
            for st, ns in subtiles(off, m):
                if dyt_by_dma(st, ns, every):
                    dyt_transposes(one, g, ns)
        loads[s].append((one.busy["dma"], f if kind == "dy" else dw_unit(f)))
    pe = [0.0] * (n + 1)
    store = [0.0] * (n + 1)
    pe[0] += filters[1]
    for j, (i, off, nx, ny) in enumerate(steps):
        t, mm = c_new(), c_new()
        _dyt_step(t, g, off, ny, db, every)
        _dw_mm_step(mm, g, lay, chunks, i, off, ny, db)
        share = nx / chunks[i][2] if chunks[i][2] else 0.0
        dx_pe, dx_store = dx_work[i]
        pe[j] += t.busy["tensor"]
        pe[dw_unit(j)] += mm.busy["tensor"]
        if j < n - lag:
            pe[j] += dx_pe * share
            store[j] += dx_store * share
        else:
            pe[n] += dx_pe * share
    return [(loads[u], pe[u], store[u]) for u in range(n + 1)]

def dx_tail_pe_ns(g, hw, chunks: list[tuple[int, int, int]]) -> float:
    """The PE time of the last ``dx_lag`` dx steps (what dw's finish runs under)."""
    lay = lay_of(g)
    steps = steps_of(lay, chunks)
    lag = dx_lag(len(steps), len(lay.shifts))
    st = steps[len(steps) - lag:] if lag else []
    n_ci = -(-g.c_in // PMAX)
    n_co = -(-g.c_out // PMAX)
    mult = 4 if g.dtype == "fp32" else 1
    return sum(max(64, n) * mult * n_ci * n_co * len(lay.shifts) for _i, _o, n, _y in st if n) / hw.tensor_ghz


def send_parts(blocks: list[tuple[int, int]], send: tuple[int, int]) -> list[dict[int, tuple[int, int]]] | None:
    """LNC2, the last dw (C_in tile outer): [send window, rest] as {C_out block: block-relative columns}, so
    the columns the other program stores are final (and their copy and exchange start) while the rest runs;
    None when a part would be < 128 columns (a matmul below the PE's 64-column floor costs extra)."""
    first, rest = {}, {}
    for jb, (c0, cn) in enumerate(blocks):
        a0, a1 = max(0, send[0] - c0), min(cn, send[1] - c0)
        if a1 <= a0:
            rest[jb] = (0, cn)
            continue
        if (a0 and a0 < PMAX) or (cn - a1 and cn - a1 < PMAX) or a1 - a0 < PMAX:
            return None
        first[jb] = (a0, a1)
        if a0 or a1 < cn:   # (the window touches an end of C_out: one side of it is empty)
            rest[jb] = (0, a0) if a0 else (a1, cn)
    return [first, rest]


def send_window(c_out: int, pid: int) -> tuple[int, int]:
    """The C_out columns program ``pid`` sends in the LNC2 reduce-scatter (``nki_dw_gemm.gemm_dma_halves``)."""
    h = -(-c_out // 2)
    return (c_out - h, c_out) if pid == 0 else (0, h)


def own_after_send_pe_ns(g, hw, chunks: list[tuple[int, int, int]], pid: int) -> float:
    """LNC2: the PE time of the last dw's own columns (``send_parts``), which runs after the last send window's
    matmuls (under the exchange), when the program has more than two steps (the last two steps' dw runs C_in tile
    outer; with two or fewer its accumulators start there and are not split)."""
    lay = lay_of(g)
    steps = steps_of(lay, chunks)
    blocks = [(c0, min(BLOCK, g.c_out - c0)) for c0 in range(0, g.c_out, BLOCK)]
    parts = send_parts(blocks, send_window(g.c_out, pid))
    if len(steps) <= 2 or parts is None:
        return 0.0
    mult = 4 if g.dtype == "fp32" else 1
    n_ci = -(-g.c_in // PMAX)
    cyc = 0.0
    for i, off, _n, ny in steps[-2:]:
        for s, ns in subtiles(off, ny):
            for _kd in dw_pairs(lay, s, ns, x_span(lay, chunks[i])):
                cyc += sum(max(64, a1 - a0) for a0, a1 in parts[1].values()) * mult * n_ci
    return cyc / hw.tensor_ghz


def store_tail_bytes(g, chunks: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(bytes, run bytes) of one C_in tile's store of the last step (the last chunk stores per step)."""
    steps = [s for s in steps_of(lay_of(g), chunks) if s[2]]
    if not steps:
        return 0, 0
    n = steps[-1][2]
    return min(PMAX, g.c_in) * n * g.dtype_bytes, n * g.dtype_bytes


def head_ns(g, hw, chunks: list[tuple[int, int, int]]) -> float:
    """How long the PE waits for its first transposes beyond the fill's DMA latency: the first step's first
    C_out tile (the first chunk loads per step, one DMA per C_out tile sharing the bandwidth)."""
    if not chunks:
        return 0.0
    n = min(BLOCK, dy_size(lay_of(g), chunks[0]))
    if not n:   # (a chunk with no dy window: its program's dx reads halo planes only)
        return 0.0
    run = n * g.dtype_bytes
    return min(PMAX, g.c_out) * n * g.dtype_bytes / (hw.dma_bytes_per_ns * hw.descriptor_efficiency(run))
