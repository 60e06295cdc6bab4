"""The shared-dy GEMM kernel (shared_dy, dx:gemm / dx:gather_s1 + dw:dma_gemm): dx, dw and db from one dy load.

Its domain (``pw_shared.shared_gemm_domain``): 1x1x1, and K_d x 1 x 1 kernels whose D planes are whole
128-position sub-tiles (a tap is a shift of the flat positions by whole sub-tiles; one chunk per batch).
Per position chunk of this program, dy is loaded once into a buffer (C_out on partitions; zeros where a
tap's shift reaches outside the batch) and walked in steps of <= 512 positions. A step's work on the PE:
- ``T``: PE transposes of its 128-position dy sub-tiles into dy^T [pos, C_out] (C_out tiles side by side
  in one PSUM bank, several sub-tiles per bank, one eviction);
- ``dw``: per tap, stationary x^T [pos, ci] of the x sub-tile the tap pairs with (by ``dma_transpose`` from
  HBM, once per x position for every tap), moving dy^T [pos, C_out <= 512], accumulated in PSUM over every
  position of the program (db: ones-vector matmuls on dy^T, or ``Plan.pw_db_scalar``: ScalarE
  ``activation`` copies of the natural dy tiles whose free-axis sums accumulate into db's fp32 columns,
  ``reduce_cmd.load_reduce``; the dy^T evictions then go to VectorE);
- ``dx``: per tap and C_out tile, stationary W_kd^T [co, ci], moving the dy buffer shifted by the tap; one
  PSUM bank per C_in tile, evicted into a dx plane stored once per chunk and C_in tile (the last chunk: per
  step).
Issue order: step j's T, its dx, then step j-1's dw (its dy^T evictions had a whole dx step to land);
the dx of the last ``dx_lag`` steps (<= 2) is held back until after the last dw, so dw's finish (the evictions and
stores; at LNC2 the reduce-scatter of the fp32 partials by C_out halves and db's exchange) runs under those
dx steps instead of after everything.
"""
import nki.isa as nisa
import nki.language as nl

from .nki_common import BANK_BYTES, BANK_FP32, PMAX, Pool, co_bank_packs
from .nki_dw_gemm import gemm_dma_halves
from .nki_filters import load_filters_t
from .planner import dx_program_items, filters_by_dma
from .pw_shared import (
    acc_slots,
    chunk_of,
    dw_pairs,
    dx_lag,
    dy_halos,
    dy_size,
    dyt_by_dma,
    dyt_groups,
    lay_of,
    load_events,
    ring_depth,
    steps_of,
    subtiles,
    x_halos,
    x_span,
)
from .schedule import tiles


def run_pw_shared(ctx, pid, lnc, db_state):
    """dx, dw (and db, when ``db_state`` is given: finished here) of this program's position chunks."""
    g, plan, dtype = ctx.g, ctx.plan, ctx.dtype
    lay = lay_of(g)
    chunks = [chunk_of(g, it) for it in dx_program_items(g, plan, pid)]
    steps = steps_of(lay, chunks)
    dy_flat = ctx.dy.reshape((g.batch, g.c_out, lay.ny))
    dx_flat = ctx.dx.reshape((g.batch, g.c_in, lay.nx))
    co_tiles = tiles(g.c_out, PMAX)
    ci_tiles = tiles(g.c_in, PMAX)
    co_blocks = tiles(g.c_out, BANK_FP32)
    taps = len(lay.shifts)
    big = max((n for _b, _q, n in chunks), default=PMAX)
    ybig = max(1, max((dy_size(lay, c) for c in chunks), default=PMAX))   # (a chunk may own no dy)
    ext = max((lay.ext(c[2], dy_size(lay, c)) for c in chunks), default=PMAX)
    lead = lay.lead
    # rings of chunk buffers deep enough for loads issued LOAD_AHEAD steps ahead (``ring_depth``)
    depth = ring_depth(lay, chunks)
    dyn_pools = [Pool(depth, (PMAX, ext), dtype, nl.sbuf, f"pw_dy{c}_") for c in range(len(co_tiles))]
    dyt_pool = Pool(depth, (PMAX, -(-ybig // PMAX), g.c_out), dtype, nl.sbuf, "pw_dyt")
    spans = [x_span(lay, c) for c in chunks]   # (the LNC2 plane split: halo planes beside a chunk's own x)
    xslots = max([-(-(hi - lo) // PMAX) for lo, hi in spans] + [-(-big // PMAX)])
    xt_pool = Pool(depth, (PMAX, xslots, len(ci_tiles) * PMAX), dtype, nl.sbuf, "pw_xt")
    every = plan.pw_dyt_dma
    plane_pool = Pool(2 * len(ci_tiles), (PMAX, big), dtype, nl.sbuf, "pw_plane")
    dx_ps = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_pwdx")
    slots = acc_slots(taps, g.c_in, g.c_out)
    banks = [nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name=f"ps_pwdw{i}")
             for i in range(slots[-1][3] + 1)]
    # accumulator (tap, C_in tile, C_out block) -> its PSUM view
    accs = {(kd, k, jb): banks[bk][:, col:col + co_blocks[jb][1]] for kd, k, jb, bk, col in slots}
    started = set()
    db_act = db_state is not None and plan.pw_db_scalar
    db_pe = db_state is not None and not plan.pw_db_scalar
    ones = db_ps = junk = None
    if db_act:
        junk = nl.ndarray((PMAX, ybig), dtype, buffer=nl.sbuf, name="pw_db_scratch")
    if db_pe:
        ones = nl.ndarray((PMAX, 1), dtype, buffer=nl.sbuf, name="pw_ones")
        nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
        db_ps = nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name="ps_pwdb")
    bank_elems = BANK_BYTES // g.dtype_bytes
    packs = co_bank_packs(co_tiles, bank_elems)

    def y0(i):   # the chunk's first dy position: its first x position (D kernels: a plane boundary)
        return chunks[i][1]

    def load_dy(i, o, m):
        b = chunks[i][0]
        for c, (co0, co_sz) in enumerate(co_tiles):
            nisa.dma_copy(dst=dy_ring[i][c][:co_sz, lead + o:lead + o + m],
                          src=dy_flat[b, co0:co0 + co_sz, y0(i) + o:y0(i) + o + m])

    def zero_halo(i):   # buffer positions outside the batch's dy: dx's shifted taps read zeros there
        ny_c = dy_size(lay, chunks[i])
        e = lay.ext(chunks[i][2], ny_c)
        q0 = y0(i)
        for c, (_co0, co_sz) in enumerate(co_tiles):
            for z0, z1 in ((0, min(e, lead - q0)), (max(0, lead + lay.ny - q0), e)):
                if z1 > z0:
                    nisa.memset(dy_ring[i][c][:co_sz, z0:z1], 0.0, engine=nisa.engine.gpsimd)

    def load_dy_halos(i, below):
        """The LNC2 plane split: the batch's dy planes below (or above) the chunk's window that dx's taps
        read, loaded beside the window's first (last) run."""
        b = chunks[i][0]
        for u0, u1 in dy_halos(lay, chunks[i]):
            if (u1 <= 0) == below:
                for c, (co0, co_sz) in enumerate(co_tiles):
                    nisa.dma_copy(dst=dy_ring[i][c][:co_sz, lead + u0:lead + u1],
                                  src=dy_flat[b, co0:co0 + co_sz, y0(i) + u0:y0(i) + u1])

    def load_x_halos(i, below):   # the x^T halo planes dw's taps pair the window with, beside the own x
        for u0, u1 in x_halos(lay, chunks[i]):
            if (u1 <= 0) == below:
                load_xt(i, u0, u1 - u0)

    def load_xt(i, o, m):
        b, q0, _n = chunks[i]
        xt = xt_ring[i]
        full, rest = m // PMAX, m % PMAX
        t0 = (o - spans[i][0]) // PMAX   # the buffer's first sub-tile (x_span's lo: a whole sub-tile)
        for k, (ci0, ci_sz) in enumerate(ci_tiles):
            base = (b * g.c_in + ci0) * lay.nx + q0 + o
            if full:   # x[ci, sub-tiles, 128] -> [128, sub-tiles, ci]: one 3-D transpose
                nisa.dma_transpose(dst=xt[:PMAX, t0:t0 + full, k * PMAX:k * PMAX + ci_sz],
                                   src=ctx.x.ap([[lay.nx, ci_sz], [PMAX, full], [1, PMAX]], offset=base))
            if rest:
                nisa.dma_transpose(dst=xt[:rest, t0 + full, k * PMAX:k * PMAX + ci_sz],
                                   src=ctx.x.ap([[lay.nx, ci_sz], [1, rest]], offset=base + full * PMAX))

    def load_dyt(i, o, m):
        """The sub-tiles whose dy^T comes by DMA (``Plan.pw_dyt_dma``): the PE does fewer transposes."""
        b = chunks[i][0]
        for s, ns in subtiles(o, m):
            if dyt_by_dma(s, ns, every):
                for co0, co_sz in co_tiles:
                    nisa.dma_transpose(dst=dyt_of[i][:ns, s // PMAX, co0:co0 + co_sz],
                                       src=dy_flat[b, co0:co0 + co_sz, y0(i) + s:y0(i) + s + ns])

    dy_ring, xt_ring, dyt_of, planes = {}, {}, {}, {}
    w_t = None

    def transposes(j):
        i, off, _n, ny = steps[j]
        dyn, dyt = dy_ring[i], dyt_of[i]
        pe_subs = [st for st in subtiles(off, ny) if not dyt_by_dma(st[0], st[1], every)]
        for grp in dyt_groups(pe_subs, g.c_out, bank_elems):
            ns = grp[0][1]
            for g0, members, width in packs:
                pt = ctx.psum_t.take()
                for u, (s, _ns) in enumerate(grp):
                    for c, col, co_sz in members:
                        nisa.nc_transpose(dst=pt[:ns, u * width + col:u * width + col + co_sz],
                                          data=dyn[c][:co_sz, lead + s:lead + s + ns])
                s0 = grp[0][0] // PMAX
                dst = dyt[:ns, s0:s0 + len(grp), g0:g0 + width]
                if db_act:   # ScalarE reduces db: the dy^T evictions go to VectorE
                    nisa.tensor_copy(dst=dst, src=pt[:ns, :len(grp) * width], engine=nisa.engine.vector)
                else:
                    ctx.evict.copy(dst, pt[:ns, :len(grp) * width])
        if db_act and ny and (i == 0 or off == 0):   # the first chunk per step (it loads per step), later whole
            r0, r1 = (off, off + ny) if i == 0 else (0, dy_size(lay, chunks[i]))
            for c, (_co0, co_sz) in enumerate(co_tiles):
                # ScalarE: copy to a scratch tile, the sum along free added into db's fp32 column
                nisa.activation(dst=junk[:co_sz, :r1 - r0], op=nl.copy,
                                data=dyn[c][:co_sz, lead + r0:lead + r1], reduce_op=nl.add, reduce_res=db_state.acc[:co_sz, c:c + 1],
                                reduce_cmd=nisa.reduce_cmd.load_reduce)

    def dw(j):
        i, off, _n, ny = steps[j]
        dyt, xt = dyt_of[i], xt_ring[i]
        for s, ns in subtiles(off, ny):
            p = s // PMAX
            for kd, xs in dw_pairs(lay, s, ns, spans[i]):
                for k, (_ci0, ci_sz) in enumerate(ci_tiles):
                    for jb, (c0, cn) in enumerate(co_blocks):
                        key = (kd, k, jb)
                        nisa.nc_matmul(accs[key][:ci_sz, :cn],
                                       stationary=xt[:ns, (xs - spans[i][0]) // PMAX, k * PMAX:k * PMAX + ci_sz],
                                       moving=dyt[:ns, p, c0:c0 + cn], accumulate=key in started)
                        started.add(key)
            if db_pe:
                for c, (co0, co_sz) in enumerate(co_tiles):
                    nisa.nc_matmul(db_ps[:co_sz, c:c + 1], stationary=dyt[:ns, p, co0:co0 + co_sz],
                                   moving=ones[:ns, :], accumulate=("db", c) in started)
                    started.add(("db", c))

    def dx(j, evict=None):
        i, off, n, _ny = steps[j]
        if not n:
            return
        b, q0, cn = chunks[i]
        if i not in planes:
            planes[i] = [plane_pool.take() for _ in ci_tiles]
        for k, (ci0, ci_sz) in enumerate(ci_tiles):
            ps = dx_ps.take()
            mm = [(kd, c) for kd in range(taps) for c in range(len(co_tiles))]
            for t, (kd, c) in enumerate(mm):
                u = lead + off - lay.shifts[kd]   # the tap's dy window in the buffer
                co_sz = co_tiles[c][1]
                nisa.nc_matmul(ps[:ci_sz, :n], stationary=w_t[c][:co_sz, g.tap_index(kd, 0, 0), ci0:ci0 + ci_sz],
                               moving=dy_ring[i][c][:co_sz, u:u + n], accumulate=t > 0)
            if evict is None:
                ctx.evict.copy(planes[i][k][:ci_sz, off:off + n], ps[:ci_sz, :n])
            else:
                nisa.tensor_copy(dst=planes[i][k][:ci_sz, off:off + n], src=ps[:ci_sz, :n], engine=evict)
            if i + 1 == len(chunks):   # the last chunk: per step (a short tail after the last eviction)
                nisa.dma_copy(dst=dx_flat[b, ci0:ci0 + ci_sz, q0 + off:q0 + off + n],
                              src=planes[i][k][:ci_sz, off:off + n])
            elif off + n == cn:   # the chunk's last step: store its plane
                nisa.dma_copy(dst=dx_flat[b, ci0:ci0 + ci_sz, q0:q0 + cn], src=planes[i][k][:ci_sz, :cn])

    events = load_events(lay, chunks)
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
                continue
            if i not in dy_ring:   # a chunk's buffers, taken in chunk order (ring slot = chunk mod depth)
                dy_ring[i] = [pool.take() for pool in dyn_pools]
                xt_ring[i] = xt_pool.take()
                dyt_of[i] = dyt_pool.take()
                zero_halo(i)
                if not dy_size(lay, chunks[i]):   # no dy window (so no dy load to go beside)
                    load_dy_halos(i, True)
                    load_dy_halos(i, False)
            if kind == "dy":
                load_dy(i, o, m)
                if o == 0:
                    load_dy_halos(i, True)
                if o + m == dy_size(lay, chunks[i]):
                    load_dy_halos(i, False)
            elif kind == "x":
                if o == 0:
                    load_x_halos(i, True)
                load_xt(i, o, m)
                if o + m == chunks[i][2]:
                    load_x_halos(i, False)
            else:
                load_dyt(i, o, m)

    tail = list(range(len(steps) - dx_lag(len(steps), taps), len(steps)))
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
    finish = _DwFinish(ctx, pid, lnc, ci_tiles, co_blocks, accs, started, taps)
    finish.start()
    if db_pe and started:
        for c, (_co0, co_sz) in enumerate(co_tiles):
            db_state.add_psum(c, db_ps[:co_sz, c:c + 1])
    if db_state is not None:   # (LNC2: db's exchange, also under the last dx steps)
        db_state.finish(pid, lnc)
    for j in tail:   # (ScalarE evicts: VectorE holds dw's and db's finish, which wait for the exchanges)
        dx(j, nisa.engine.scalar if lnc == 2 else None)
    finish.complete()


class _DwFinish:
    """dw's accumulators to the output: LNC1 one eviction and store per tap and C_in tile (an accumulator no
    matmul reached -- a tap that meets no x position -- stores zeros); LNC2 (one tap) the positions split's
    reduce-scatter (``nki_dw_gemm``'s halves: per C_in tile each program sends the C_out half the other
    stores and adds the other's partial of its own half into the output dtype), in two parts so the exchange
    is issued before the last dx steps and the adds (which wait for it) after them."""

    def __init__(self, ctx, pid, lnc, ci_tiles, co_blocks, accs, started, taps):
        self.ctx, self.pid, self.lnc = ctx, pid, lnc
        self.ci_tiles, self.co_blocks, self.accs, self.started = ci_tiles, co_blocks, accs, started
        self.taps = taps
        self.dw_flat = ctx.dw.reshape((taps, ctx.g.c_in, ctx.g.c_out))
        self.pending = []

    def start(self):
        ctx, g = self.ctx, self.ctx.g
        if self.lnc == 1:
            outs = Pool(min(2, len(self.ci_tiles) * self.taps), (PMAX, g.c_out), ctx.dtype, nl.sbuf, "pw_dw_out")
            for kd in range(self.taps):
                for k, (ci0, ci_sz) in enumerate(self.ci_tiles):
                    out = outs.take()
                    for jb, (c0, cn) in enumerate(self.co_blocks):
                        if (kd, k, jb) in self.started:
                            ctx.evict.copy(out[:ci_sz, c0:c0 + cn], self.accs[(kd, k, jb)][:ci_sz, :cn])
                        else:
                            nisa.memset(out[:ci_sz, c0:c0 + cn], 0.0, engine=nisa.engine.vector)
                    nisa.dma_copy(dst=self.dw_flat[kd, ci0:ci0 + ci_sz, :], src=out[:ci_sz, :g.c_out])
            return
        (lo, hi), recv, send = gemm_dma_halves(g.c_out, self.pid)
        h = recv[1] - recv[0]
        for kd, (k, (ci0, ci_sz)) in ((kd, kc) for kd in range(self.taps) for kc in enumerate(self.ci_tiles)):
            part = nl.ndarray((PMAX, g.c_out), nl.float32, buffer=nl.sbuf, name=f"pw_part{kd}_{k}")
            other = nl.ndarray((PMAX, h), nl.float32, buffer=nl.sbuf, name=f"pw_other{kd}_{k}")
            for jb, (c0, cn) in enumerate(self.co_blocks):
                if (kd, k, jb) in self.started:
                    nisa.tensor_copy(dst=part[:ci_sz, c0:c0 + cn], src=self.accs[(kd, k, jb)][:ci_sz, :cn],
                                     engine=nisa.engine.vector)
                else:   # a program with no position (or a tap that meets none of its x): a zero partial
                    nisa.memset(part[:ci_sz, c0:c0 + cn], 0.0, engine=nisa.engine.vector)
            nisa.sendrecv(src=part[:ci_sz, send[0]:send[1]], dst=other[:ci_sz, :], send_to_rank=1 - self.pid,
                          recv_from_rank=1 - self.pid, pipe_id=0)
            self.pending.append((kd, ci0, ci_sz, part, other, lo, hi, recv))

    def complete(self):
        ctx = self.ctx
        for kd, ci0, ci_sz, part, other, lo, hi, recv in self.pending:
            if hi > lo:
                out = nl.ndarray((PMAX, hi - lo), ctx.dtype, buffer=nl.sbuf, name=f"pw_half{kd}_{ci0}")
                nisa.tensor_tensor(dst=out[:ci_sz, :hi - lo], data1=part[:ci_sz, lo:hi],
                                   data2=other[:ci_sz, lo - recv[0]:hi - recv[0]], op=nl.add, engine=nisa.engine.vector)
                nisa.dma_copy(dst=self.dw_flat[kd, ci0:ci0 + ci_sz, lo:hi], src=out[:ci_sz, :hi - lo])
