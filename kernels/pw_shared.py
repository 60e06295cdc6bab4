"""Loop lists of the shared-dy pointwise kernel (``nki_pw_shared``): pure Python, shared by the kernel and
the planner.

1x1x1, unit stride, no padding (``g.pointwise``): dx and dw read the same dy, positions for positions.
The kernel loads each position chunk of dy once (C_out on partitions, as dx:gemm needs it) and makes dw's
dy^T from it on the PE, so dy crosses HBM once instead of twice (dx's dy and dw:dma_gemm's dy^T).
"""
from __future__ import annotations

PMAX = 128
BLOCK = 512   # positions per dx matmul (moving free size) and per pipeline step
DX_LAG = 2    # the last steps whose dx runs after the last dw: dw's finish overlaps them


def npos_of(g) -> int:
    o = g.out_size
    return o[0] * o[1] * o[2]


def chunk_of(g, item) -> tuple[int, int, int]:
    """(batch, first flat position, positions) of a dx (batch, D band, H band) item; a band is whole W rows
    and either whole H planes or one D row, so its positions are one contiguous run of the flat volume."""
    b, bd, bh = item
    H, W = g.axes[1].n, g.axes[2].n
    nd, nh = bd.i1 - bd.i0, bh.i1 - bh.i0
    if nh != H and nd > 1:
        raise ValueError(f"pointwise shared dy: band {nd}x{nh} of H={H} is not one contiguous position run")
    return b, (bd.i0 * H + bh.i0) * W, nd * nh * W


def steps_of(chunks: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The pipeline steps: (chunk index, offset in the chunk, positions <= BLOCK) in order."""
    return [(i, o, min(BLOCK, n - o)) for i, (_b, _q, n) in enumerate(chunks) for o in range(0, n, BLOCK)]


LOAD_AHEAD = 2   # a load is issued this many steps before the step that needs it


def load_events(chunks: list[tuple[int, int, int]]) -> list[tuple[int, str, int, int, int]]:
    """The kernel's loads in issue order: (issued before step, kind, chunk, offset, positions). The first
    chunk loads per step, later chunks whole. Kinds, by the step that needs them first: "dy" (step f's
    transposes), "w" (the filters: the first dx, after the first step's transposes), "x" (x^T and the DMA-made
    dy^T: step f's dw, issued after step f + 1's transposes and dx). Issued LOAD_AHEAD steps ahead."""
    steps = steps_of(chunks)
    first = {}
    for j, (i, o, _m) in enumerate(steps):
        first.setdefault((i, o), j)
    units = [(i, o, m) for (i, o, m) in steps if i == 0] + [(i, 0, n) for i, (_b, _q, n) in enumerate(chunks) if i]
    keyed = [(first[(i, o)], 0, "dy", i, o, m) for i, o, m in units]
    keyed += [(first[(i, o)] + 1.5, 1, "x", i, o, m) for i, o, m in units]
    if chunks:
        keyed.append((0.5, 0, "w", 0, 0, 0))
    keyed.sort(key=lambda e: (e[0], e[1]))
    return [(max(0, int(k) - LOAD_AHEAD), kind, i, o, m) for k, _t, kind, i, o, m in keyed]


def ring_depth(chunks: list[tuple[int, int, int]]) -> int:
    """Chunk buffers (dy, x^T, dy^T) live at once: a load issued before step s writes chunk i while the
    chunk of step s - 1 (its dw runs after the loads) is still read."""
    steps = steps_of(chunks)
    depth = 1
    for s, _kind, i, _o, _m in load_events(chunks):
        oldest = steps[max(0, s - 1)][0] if steps else 0
        depth = max(depth, i - oldest + 1)
    return depth


def subtiles(off: int, n: int) -> list[tuple[int, int]]:
    """The 128-position sub-tiles (offset in the chunk, positions) of a step."""
    return [(off + s, min(PMAX, n - s)) for s in range(0, n, PMAX)]


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


def chunk_positions(g, band: tuple[int, int]) -> int:
    """Positions of the largest chunk of a dx band (D rows x H rows x W)."""
    return min(band[0], g.axes[0].n) * min(band[1], g.axes[1].n) * g.axes[2].n


def sbuf_bytes(g, band: tuple[int, int], lnc: int, chunks: list[tuple[int, int, int]], dy_bufs: int) -> int:
    """The kernel's pools beyond what dx:gemm's budget already counts (``dy_bufs`` dy chunks, two planes,
    the filters, db): the deeper dy ring, the dy^T and x^T rings (``ring_depth`` chunks each), the other
    planes (two per C_in tile), db's scratch tile and ones column, and the dw output tiles (LNC2 per C_in
    tile: the fp32 partial, the received half and the output half)."""
    ds = g.dtype_bytes
    big = chunk_positions(g, band)
    n_sub = -(-big // PMAX)
    n_ci = -(-g.c_in // PMAX)
    out = min(2, n_ci) * g.c_out * ds
    if lnc == 2:
        half = -(-g.c_out // 2)
        out = n_ci * (g.c_out * 4 + half * (4 + ds))
    depth = ring_depth(chunks)
    n_co = -(-g.c_out // PMAX)
    return (max(0, depth - dy_bufs) * n_co * big * ds + depth * n_sub * g.c_out * ds
            + depth * n_sub * n_ci * PMAX * ds + (2 * n_ci - 2) * big * ds + big * ds + ds + out)


def psum_banks(g, db: bool) -> int:
    """dw's accumulators (C_in tiles x C_out blocks of 512) and db's bank (the transpose and dx banks are
    counted with them by the planner)."""
    return -(-g.c_in // PMAX) * -(-g.c_out // BLOCK) + (1 if db else 0)


def estimate_dw(c, g, chunks: list[tuple[int, int, int]], db: str, lnc: int, every: int = 0) -> None:
    """dw's (and db's) share of the kernel beyond dx:gemm's (mirrors ``nki_pw_shared``): the dy^T PE
    transposes and their evictions, the x^T transposes from HBM, the dw matmuls, db (``db``: "pe" ones-vector
    matmuls, "scalar" activation reduces of the dy chunks, "" none); at LNC1 the final eviction and store (LNC2: the
    planner charges the reduce-scatter)."""
    hw = c.hw
    ds = g.dtype_bytes
    fp32, two = g.dtype == "fp32", ds == 2
    co_t = min(PMAX, g.c_out)
    n_co = -(-g.c_out // PMAX)
    ci_sizes = [min(PMAX, g.c_in - s) for s in range(0, g.c_in, PMAX)]
    blocks = [min(BLOCK, g.c_out - s) for s in range(0, g.c_out, BLOCK)]
    bank = 2048 // ds
    width = min(g.c_out, bank)
    packs = -(-g.c_out // bank) if g.c_out > bank else 1
    for (i, off, n) in steps_of(chunks):
        subs = subtiles(off, n)
        for _s, ns in subs:
            if dyt_by_dma(_s, ns, every):   # dma_transpose from HBM
                c.busy["dma"] += ns * g.c_out * ds / (hw.dma_bytes_per_ns * 0.9)
                c._count("dma_transpose", n_co)
        for grp in dyt_groups([st for st in subs if not dyt_by_dma(st[0], st[1], every)], g.c_out, bank):
            ns = grp[0][1]
            c.transpose(co_t, ns, fp32, n_co * len(grp))
            if db == "scalar":   # the dy^T evictions on VectorE
                c.compute("vector", len(grp) * width, 1, c.copy_speedup("vector", two, True, True), packs)
            else:
                c.evict(len(grp) * width, two, packs)
        for _s, ns in subtiles(off, n):
            for ci in ci_sizes:
                for cn in blocks:
                    c.matmul(ci, cn, fp32)
            if db == "pe":
                c.matmul(co_t, 1, fp32, n_co)
        if db == "scalar" and (i == 0 or off == 0):   # per step in the first chunk, per chunk after
            m = n if i == 0 else chunks[i][2]
            c.compute("scalar", m, 1, 1.0, n_co, op="activation")
    total = sum(n for _b, _q, n in chunks)
    c.busy["dma"] += total * g.c_in * ds / (hw.dma_bytes_per_ns * 0.9)   # dma_transpose from HBM
    c._count("dma_transpose", len(chunks) * len(ci_sizes))
    if lnc == 1:
        c.evict(sum(blocks), two, len(ci_sizes))
        c.dma(min(PMAX, g.c_in) * g.c_out * ds, g.c_out * ds, len(ci_sizes))


def dx_tail_pe_ns(g, hw, chunks: list[tuple[int, int, int]]) -> float:
    """The PE time of the last DX_LAG dx steps (what dw's finish runs under)."""
    st = steps_of(chunks)[-DX_LAG:]
    n_ci = -(-g.c_in // PMAX)
    n_co = -(-g.c_out // PMAX)
    mult = 4 if g.dtype == "fp32" else 1
    return sum(max(64, n) * mult * n_ci * n_co for _i, _o, n in st) / hw.tensor_ghz


def store_tail_bytes(g, chunks: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(bytes, run bytes) of one C_in tile's store of the last step (the last chunk stores per step)."""
    if not chunks:
        return 0, 0
    n = steps_of(chunks)[-1][2]
    return min(PMAX, g.c_in) * n * g.dtype_bytes, n * g.dtype_bytes


def head_ns(g, hw, chunks: list[tuple[int, int, int]]) -> float:
    """How long the PE waits for its first transposes beyond the fill's DMA latency: the first step's first
    C_out tile (the first chunk loads per step, one DMA per C_out tile sharing the bandwidth)."""
    if not chunks:
        return 0.0
    n = min(BLOCK, chunks[0][2])
    run = n * g.dtype_bytes
    return min(PMAX, g.c_out) * n * g.dtype_bytes / (hw.dma_bytes_per_ns * run / (run + 256.0))
