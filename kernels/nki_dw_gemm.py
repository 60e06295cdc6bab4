"""dw for 1x1x1 filters with unit stride and no padding: a plain GEMM fed by DMA transposes.

dw[ci, co] = sum over (batch, position) of x[ci, p] * dy[co, p]. Both operands are brought
positions-major straight from HBM by ``dma_transpose`` (2-byte dtypes), so the PE does nothing but
the GEMM: stationary x^T [pos, ci tile], moving dy^T [pos, C_out block <= 512], one PSUM group per
(C_in tile, C_out block) over every position of every batch, evicted once to the output dtype.
db, when folded here, is a ones-vector matmul on the same dy^T tiles.
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import BANK_FP32, PMAX, Pool
from .schedule import tiles


def run_dw_gemm_dma(ctx, pid, lnc, db_state):
    g = ctx.g
    npos = g.out_size[0] * g.out_size[1] * g.out_size[2]
    x_flat = ctx.x.reshape((g.batch, g.c_in, npos))
    dy_flat = ctx.dy.reshape((g.batch, g.c_out, npos))
    dw_flat = ctx.dw.reshape((g.c_in, g.c_out))
    ci_tiles = tiles(g.c_in, PMAX)
    co_blocks = tiles(g.c_out, BANK_FP32)
    split_positions = lnc == 2 and ctx.plan.dw_split == "positions"
    chunks = gemm_dma_chunks(g, 1 if split_positions else lnc)
    mine = chunks[pid] if (pid < len(chunks) and not split_positions) else (chunks[0] if split_positions else [])
    pos = [(b, p0, min(PMAX, npos - p0)) for b in range(g.batch) for p0 in range(0, npos, PMAX)]
    if split_positions:   # each program half of the position tiles; fp32 partials exchanged at the end
        per = -(-len(pos) // lnc)
        pos = pos[pid * per:(pid + 1) * per]
    dyt_pool = Pool(3, (PMAX, g.c_out), ctx.dtype, nl.sbuf, "dwg_dyt")
    xt_pool = Pool(3, (PMAX, max(1, len(mine)) * PMAX), ctx.dtype, nl.sbuf, "dwg_xt")
    out_pool = Pool(2, (PMAX, g.c_out), ctx.dtype, nl.sbuf, "dwg_out")
    n_acc = max(1, len(mine)) * len(co_blocks)
    accs = [nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name=f"ps_dwg{i}") for i in range(n_acc)]
    fold_db = db_state is not None and (pid == 0 or split_positions)
    if fold_db:
        ones = nl.ndarray((PMAX, 1), ctx.dtype, buffer=nl.sbuf, name="dwg_ones")
        nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
        db_ps = nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name="ps_dwg_db")
    co_tiles = tiles(g.c_out, PMAX)
    for i, (b, p0, n) in enumerate(pos):
        if not mine and not fold_db:
            break
        dyt = dyt_pool.take()
        for co0, co_sz in co_tiles:
            nisa.dma_transpose(dst=dyt[:n, co0:co0 + co_sz], src=dy_flat[b, co0:co0 + co_sz, p0:p0 + n])
        xt = xt_pool.take()
        for k, t in enumerate(mine):
            ci0, ci_sz = ci_tiles[t]
            nisa.dma_transpose(dst=xt[:n, k * PMAX:k * PMAX + ci_sz], src=x_flat[b, ci0:ci0 + ci_sz, p0:p0 + n])
        for k, t in enumerate(mine):
            ci_sz = ci_tiles[t][1]
            for j, (c0, cn) in enumerate(co_blocks):
                nisa.nc_matmul(accs[k * len(co_blocks) + j][:ci_sz, :cn],
                               stationary=xt[:n, k * PMAX:k * PMAX + ci_sz], moving=dyt[:n, c0:c0 + cn],
                               accumulate=i > 0)
        if fold_db:
            for c, (co0, co_sz) in enumerate(co_tiles):
                nisa.nc_matmul(db_ps[:co_sz, c:c + 1], stationary=dyt[:n, co0:co0 + co_sz], moving=ones[:n, :],
                               accumulate=i > 0)
    if fold_db and pos:   # a program with no position tile has no partial sum to add
        for c, (_co0, co_sz) in enumerate(co_tiles):
            db_state.add_psum(c, db_ps[:co_sz, c:c + 1])
    if split_positions:
        _combine_column_halves(ctx, pid, mine, ci_tiles, co_blocks, accs if pos else None, dw_flat)
        return
    for k, t in enumerate(mine):
        ci0, ci_sz = ci_tiles[t]
        out = out_pool.take()
        for j, (c0, cn) in enumerate(co_blocks):
            ctx.evict.copy(out[:ci_sz, c0:c0 + cn], accs[k * len(co_blocks) + j][:ci_sz, :cn])
        nisa.dma_copy(dst=dw_flat[ci0:ci0 + ci_sz, :], src=out[:ci_sz, :g.c_out])


def gemm_dma_halves(c_out, pid):
    """LNC2 positions split: (columns [lo, hi) program ``pid`` adds and stores, the window of
    ceil(C_out / 2) columns it receives (covering them), the window it sends)."""
    h = -(-c_out // 2)
    windows = ((0, h), (c_out - h, c_out))
    own = (0, h) if pid == 0 else (h, c_out)
    return own, windows[pid], windows[1 - pid]


def _combine_column_halves(ctx, pid, mine, ci_tiles, co_blocks, accs, dw_flat):
    """A reduce-scatter of the fp32 partials: per C_in tile each program sends the other only the
    C_out half the other stores, adds the other's partial of its own half straight into the output
    dtype, and stores that half (both programs store every C_in tile, half the columns each)."""
    g = ctx.g
    (lo, hi), recv, send = gemm_dma_halves(g.c_out, pid)
    h = recv[1] - recv[0]
    # two of each, software pipelined: tile k+1's copies and exchange are issued before tile k's add
    # and store, so the in-order VectorE never waits for an exchange it could overlap
    parts = Pool(2, (PMAX, g.c_out), nl.float32, nl.sbuf, "dwg_part")
    others = Pool(2, (PMAX, h), nl.float32, nl.sbuf, "dwg_other")
    outs = Pool(2, (PMAX, h), ctx.dtype, nl.sbuf, "dwg_half")

    def add_and_store(ci0, ci_sz, part, other):
        if hi > lo:
            out = outs.take()
            nisa.tensor_tensor(dst=out[:ci_sz, :hi - lo], data1=part[:ci_sz, lo:hi],
                               data2=other[:ci_sz, lo - recv[0]:hi - recv[0]], op=nl.add, engine=nisa.engine.vector)
            nisa.dma_copy(dst=dw_flat[ci0:ci0 + ci_sz, lo:hi], src=out[:ci_sz, :hi - lo])

    pending = None
    for k, t in enumerate(mine):
        ci0, ci_sz = ci_tiles[t]
        part, other = parts.take(), others.take()
        for j, (c0, cn) in enumerate(co_blocks):
            if accs is not None:
                nisa.tensor_copy(dst=part[:ci_sz, c0:c0 + cn], src=accs[k * len(co_blocks) + j][:ci_sz, :cn],
                                 engine=nisa.engine.vector)
            else:   # a program with no position tile has no partial sum: zeros
                nisa.memset(part[:ci_sz, c0:c0 + cn], 0.0, engine=nisa.engine.vector)
        nisa.sendrecv(src=part[:ci_sz, send[0]:send[1]], dst=other[:ci_sz, :], send_to_rank=1 - pid,
                      recv_from_rank=1 - pid, pipe_id=0)
        if pending is not None:
            add_and_store(*pending)
        pending = (ci0, ci_sz, part, other)
    if pending is not None:
        add_and_store(*pending)


def gemm_dma_chunks(g, lnc):
    """C_in tiles per program: split between the programs (no partial sums to combine)."""
    n_ci = -(-g.c_in // PMAX)
    per = -(-n_ci // lnc)
    return [list(range(p * per, min(n_ci, (p + 1) * per))) for p in range(lnc)]
