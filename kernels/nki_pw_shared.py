"""1x1x1 with one dy load (shared_dy, dx:gemm + dw:dma_gemm): dx, dw and db from the same dy tiles.

Per position chunk of this program (a dx band: whole W rows), dy is loaded once, C_out on partitions, and
walked in steps of <= 512 positions. A step's work on the PE:
- ``T``: PE transposes of its 128-position sub-tiles into dy^T [pos, C_out] (C_out tiles side by side in
  one PSUM bank, several sub-tiles per bank, one eviction);
- ``dw``: stationary x^T [pos, ci] (by ``dma_transpose`` from HBM), moving dy^T [pos, C_out <= 512],
  accumulated in PSUM over every position of the program (db: ones-vector matmuls on dy^T, or
  ``Plan.pw_db_scalar``: ScalarE ``activation`` copies of the natural dy tiles whose free-axis sums accumulate
  into db's fp32 columns, ``reduce_cmd.load_reduce``; the dy^T evictions then go to VectorE);
- ``dx``: stationary W^T [co, ci], moving the dy step, one PSUM bank per C_in tile, evicted into a dx
  plane stored once per chunk and C_in tile (the last chunk: per step).
Issue order: step j's T, its dx, then step j-1's dw (its dy^T evictions had a whole dx step to land);
the dx of the last DX_LAG steps is held back until after the last dw, so dw's finish (the eviction and
store; at LNC2 the reduce-scatter of the fp32 partials by C_out halves and db's exchange) runs under those
dx steps instead of after everything.
dy crosses HBM once instead of twice (dw:dma_gemm's own dy^T transposes).
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import BANK_BYTES, BANK_FP32, PMAX, Pool, co_bank_packs
from .nki_dw_gemm import gemm_dma_halves
from .nki_filters import load_filters_t
from .planner import dx_program_items, filters_by_dma
from .pw_shared import (
    DX_LAG,
    chunk_of,
    dyt_by_dma,
    dyt_groups,
    load_events,
    npos_of,
    ring_depth,
    steps_of,
    subtiles,
)
from .schedule import tiles


def run_pw_shared(ctx, pid, lnc, db_state):
    """dx, dw (and db, when ``db_state`` is given: finished here) of this program's position chunks."""
    g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
    npos = npos_of(g)
    chunks = [chunk_of(g, it) for it in dx_program_items(g, plan, pid)]
    steps = steps_of(chunks)
    dy_flat = ctx.dy.reshape((g.batch, g.c_out, npos))
    dx_flat = ctx.dx.reshape((g.batch, g.c_in, npos))
    co_tiles = tiles(g.c_out, PMAX)
    ci_tiles = tiles(g.c_in, PMAX)
    co_blocks = tiles(g.c_out, BANK_FP32)
    big = max((n for _b, _q, n in chunks), default=PMAX)
    n_sub = -(-big // PMAX)
    # rings of chunk buffers deep enough for loads issued LOAD_AHEAD steps ahead (``ring_depth``)
    depth = ring_depth(chunks)
    dyn_pools = [Pool(depth, (PMAX, big), dtype, nl.sbuf, f"pw_dy{c}_") for c in range(len(co_tiles))]
    dyt_pool = Pool(depth, (PMAX, n_sub, g.c_out), dtype, nl.sbuf, "pw_dyt")
    xt_pool = Pool(depth, (PMAX, n_sub, len(ci_tiles) * PMAX), dtype, nl.sbuf, "pw_xt")
    every = plan.pw_dyt_dma
    plane_pool = Pool(2 * len(ci_tiles), (PMAX, big), dtype, nl.sbuf, "pw_plane")
    dx_ps = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_pwdx")
    accs = [nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name=f"ps_pwdw{i}")
            for i in range(len(ci_tiles) * len(co_blocks))]
    db_act = db_state is not None and plan.pw_db_scalar
    db_pe = db_state is not None and not plan.pw_db_scalar
    ones = db_ps = None
    if db_act:
        junk = nl.ndarray((PMAX, big), dtype, buffer=nl.sbuf, name="pw_db_scratch")
    if db_pe:
        ones = nl.ndarray((PMAX, 1), dtype, buffer=nl.sbuf, name="pw_ones")
        nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
        db_ps = nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name="ps_pwdb")
    bank_elems = BANK_BYTES // g.dtype_bytes
    packs = co_bank_packs(co_tiles, bank_elems)

    def load_dy(i, o, m):
        b, q0, _n = chunks[i]
        for c, (co0, co_sz) in enumerate(co_tiles):
            nisa.dma_copy(dst=dy_ring[i][c][:co_sz, o:o + m], src=dy_flat[b, co0:co0 + co_sz, q0 + o:q0 + o + m])

    def load_xt(i, o, m):
        b, q0, _n = chunks[i]
        xt = xt_ring[i]
        full, rest = m // PMAX, m % PMAX
        for k, (ci0, ci_sz) in enumerate(ci_tiles):
            base = (b * g.c_in + ci0) * npos + q0 + o
            if full:   # x[ci, sub-tiles, 128] -> [128, sub-tiles, ci]: one 3-D transpose
                nisa.dma_transpose(dst=xt[:PMAX, o // PMAX:o // PMAX + full, k * PMAX:k * PMAX + ci_sz],
                                   src=ctx.x.ap([[npos, ci_sz], [PMAX, full], [1, PMAX]], offset=base))
            if rest:
                nisa.dma_transpose(dst=xt[:rest, o // PMAX + full, k * PMAX:k * PMAX + ci_sz],
                                   src=ctx.x.ap([[npos, ci_sz], [1, rest]], offset=base + full * PMAX))

    def load_dyt(i, o, m):
        """The sub-tiles whose dy^T comes by DMA (``Plan.pw_dyt_dma``): the PE does fewer transposes."""
        b, q0, _n = chunks[i]
        for s, ns in subtiles(o, m):
            if dyt_by_dma(s, ns, every):
                for co0, co_sz in co_tiles:
                    nisa.dma_transpose(dst=dyt_of[i][:ns, s // PMAX, co0:co0 + co_sz],
                                       src=dy_flat[b, co0:co0 + co_sz, q0 + s:q0 + s + ns])

    dy_ring, xt_ring, dyt_of, planes = {}, {}, {}, {}
    w_t = None

    def transposes(j):
        i, off, n = steps[j]
        dyn, dyt = dy_ring[i], dyt_of[i]
        pe_subs = [st for st in subtiles(off, n) if not dyt_by_dma(st[0], st[1], every)]
        for grp in dyt_groups(pe_subs, g.c_out, bank_elems):
            ns = grp[0][1]
            for g0, members, width in packs:
                pt = ctx.psum_t.take()
                for u, (s, _ns) in enumerate(grp):
                    for c, col, co_sz in members:
                        nisa.nc_transpose(dst=pt[:ns, u * width + col:u * width + col + co_sz],
                                          data=dyn[c][:co_sz, s:s + ns])
                s0 = grp[0][0] // PMAX
                dst = dyt[:ns, s0:s0 + len(grp), g0:g0 + width]
                if db_act:   # ScalarE reduces db: the dy^T evictions go to VectorE
                    nisa.tensor_copy(dst=dst, src=pt[:ns, :len(grp) * width], engine=nisa.engine.vector)
                else:
                    ctx.evict.copy(dst, pt[:ns, :len(grp) * width])
        if db_act and (i == 0 or off == 0):   # the first chunk per step (it loads per step), later ones whole
            r0, r1 = (off, off + n) if i == 0 else (0, chunks[i][2])
            for c, (_co0, co_sz) in enumerate(co_tiles):
                # ScalarE: copy to a scratch tile, the sum along free added into db's fp32 column
                nisa.activation(dst=junk[:co_sz, :r1 - r0], op=nl.copy, data=dyn[c][:co_sz, r0:r1],
                                reduce_op=nl.add, reduce_res=db_state.acc[:co_sz, c:c + 1],
                                reduce_cmd=nisa.reduce_cmd.load_reduce)

    def dw(j):
        i, off, n = steps[j]
        dyt, xt = dyt_of[i], xt_ring[i]
        for si, (s, ns) in enumerate(subtiles(off, n)):
            p = s // PMAX
            first = j == 0 and si == 0
            for k, (_ci0, ci_sz) in enumerate(ci_tiles):
                for jb, (c0, cn) in enumerate(co_blocks):
                    nisa.nc_matmul(accs[k * len(co_blocks) + jb][:ci_sz, :cn],
                                   stationary=xt[:ns, p, k * PMAX:k * PMAX + ci_sz], moving=dyt[:ns, p, c0:c0 + cn],
                                   accumulate=not first)
            if db_pe:
                for c, (co0, co_sz) in enumerate(co_tiles):
                    nisa.nc_matmul(db_ps[:co_sz, c:c + 1], stationary=dyt[:ns, p, co0:co0 + co_sz],
                                   moving=ones[:ns, :], accumulate=not first)

    def dx(j, evict=None):
        i, off, n = steps[j]
        b, q0, cn = chunks[i]
        if off == 0:
            planes[i] = [plane_pool.take() for _ in ci_tiles]
        for k, (ci0, ci_sz) in enumerate(ci_tiles):
            ps = dx_ps.take()
            for c, (_co0, co_sz) in enumerate(co_tiles):
                nisa.nc_matmul(ps[:ci_sz, :n], stationary=w_t[c][:co_sz, 0, ci0:ci0 + ci_sz],
                               moving=dy_ring[i][c][:co_sz, off:off + n], accumulate=c > 0)
            if evict is None:
                ctx.evict.copy(planes[i][k][:ci_sz, off:off + n], ps[:ci_sz, :n])
            else:
                nisa.tensor_copy(dst=planes[i][k][:ci_sz, off:off + n], src=ps[:ci_sz, :n], engine=evict)
            if i + 1 == len(chunks):   # the last chunk: per step (a short tail after the last eviction)
                nisa.dma_copy(dst=dx_flat[b, ci0:ci0 + ci_sz, q0 + off:q0 + off + n],
                              src=planes[i][k][:ci_sz, off:off + n])
            elif off + n == cn:   # the chunk's last step: store its plane
                nisa.dma_copy(dst=dx_flat[b, ci0:ci0 + ci_sz, q0:q0 + cn], src=planes[i][k][:ci_sz, :cn])

    events = load_events(chunks)
    at = 0

    def issue_loads(step):
        """The loads due before ``step`` (``load_events``: in the order the PE needs them)."""
        nonlocal at, w_t
        while at < len(events) and events[at][0] <= step:
            _s, kind, i, o, m = events[at]
            at += 1
            if kind == "w":
                w_t = load_filters_t(g, ctx.filters, list(ci_tiles), dtype, ctx.psum_t, ctx.evict, 1,
                                     by_dma=filters_by_dma(g, plan))
            elif kind == "dy":
                if i not in dy_ring:   # a chunk's buffers, taken in chunk order (ring slot = chunk mod depth)
                    dy_ring[i] = [pool.take() for pool in dyn_pools]
                    xt_ring[i] = xt_pool.take()
                    dyt_of[i] = dyt_pool.take()
                load_dy(i, o, m)
            else:
                load_xt(i, o, m)
                load_dyt(i, o, m)

    tail = list(range(max(0, len(steps) - DX_LAG), len(steps)))
    for j in range(len(steps)):
        issue_loads(j)
        transposes(j)
        if j not in tail:
            dx(j)
        if j >= 1:
            dw(j - 1)
    if steps:
        dw(len(steps) - 1)
    # dw's finish is issued before the last dx steps (it overlaps them); its adds after them at LNC2
    finish = _DwFinish(ctx, pid, lnc, ci_tiles, co_blocks, accs if steps else None)
    finish.start()
    if db_pe and steps:
        for c, (_co0, co_sz) in enumerate(co_tiles):
            db_state.add_psum(c, db_ps[:co_sz, c:c + 1])
    if db_state is not None:   # (LNC2: db's exchange, also under the last dx steps)
        db_state.finish(pid, lnc)
    for j in tail:   # (ScalarE evicts: VectorE holds dw's and db's finish, which wait for the exchanges)
        dx(j, nisa.engine.scalar if lnc == 2 else None)
    finish.complete()


class _DwFinish:
    """dw's accumulators to the output: LNC1 one eviction and store per C_in tile; LNC2 the positions
    split's reduce-scatter (``nki_dw_gemm``'s halves: per C_in tile each program sends the C_out half the
    other stores and adds the other's partial of its own half into the output dtype), in two parts so the
    exchange is issued before the last dx steps and the adds (which wait for it) after them."""

    def __init__(self, ctx, pid, lnc, ci_tiles, co_blocks, accs):
        self.ctx, self.pid, self.lnc = ctx, pid, lnc
        self.ci_tiles, self.co_blocks, self.accs = ci_tiles, co_blocks, accs
        self.dw_flat = ctx.dw.reshape((ctx.g.c_in, ctx.g.c_out))
        self.pending = []

    def start(self):
        ctx, g = self.ctx, self.ctx.g
        n_ci = len(self.ci_tiles)
        if self.lnc == 1:
            outs = Pool(min(2, n_ci), (PMAX, g.c_out), ctx.dtype, nl.sbuf, "pw_dw_out")
            for k, (ci0, ci_sz) in enumerate(self.ci_tiles):
                out = outs.take()
                for jb, (c0, cn) in enumerate(self.co_blocks):
                    ctx.evict.copy(out[:ci_sz, c0:c0 + cn], self.accs[k * len(self.co_blocks) + jb][:ci_sz, :cn])
                nisa.dma_copy(dst=self.dw_flat[ci0:ci0 + ci_sz, :], src=out[:ci_sz, :g.c_out])
            return
        (lo, hi), recv, send = gemm_dma_halves(g.c_out, self.pid)
        h = recv[1] - recv[0]
        for k, (ci0, ci_sz) in enumerate(self.ci_tiles):
            part = nl.ndarray((PMAX, g.c_out), nl.float32, buffer=nl.sbuf, name=f"pw_part{k}")
            other = nl.ndarray((PMAX, h), nl.float32, buffer=nl.sbuf, name=f"pw_other{k}")
            for jb, (c0, cn) in enumerate(self.co_blocks):
                if self.accs is not None:
                    nisa.tensor_copy(dst=part[:ci_sz, c0:c0 + cn],
                                     src=self.accs[k * len(self.co_blocks) + jb][:ci_sz, :cn],
                                     engine=nisa.engine.vector)
                else:   # a program with no position: its partial sum is zero
                    nisa.memset(part[:ci_sz, c0:c0 + cn], 0.0, engine=nisa.engine.vector)
            nisa.sendrecv(src=part[:ci_sz, send[0]:send[1]], dst=other[:ci_sz, :], send_to_rank=1 - self.pid,
                          recv_from_rank=1 - self.pid, pipe_id=0)
            self.pending.append((ci0, ci_sz, part, other, lo, hi, recv))

    def complete(self):
        ctx = self.ctx
        for ci0, ci_sz, part, other, lo, hi, recv in self.pending:
            if hi > lo:
                out = nl.ndarray((PMAX, hi - lo), ctx.dtype, buffer=nl.sbuf, name=f"pw_half{ci0}")
                nisa.tensor_tensor(dst=out[:ci_sz, :hi - lo], data1=part[:ci_sz, lo:hi],
                                   data2=other[:ci_sz, lo - recv[0]:hi - recv[0]], op=nl.add, engine=nisa.engine.vector)
                nisa.dma_copy(dst=self.dw_flat[ci0:ci0 + ci_sz, lo:hi], src=out[:ci_sz, :hi - lo])
