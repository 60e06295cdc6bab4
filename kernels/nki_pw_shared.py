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
from .nki_filters import FILTER_RUN_CI_MAX, load_filters_t
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
    send_parts,
    steps_of,
    subtiles,
    x_halos,
    x_span,
)
from .schedule import tiles
from .spec.dx_options import dx_program_items, filters_by_dma


def run_pw_shared(ctx, pid, lnc, db_state):
    """dx, dw (and db, when ``db_state`` is given: finished here) of this program's position chunks."""
    _PwShared(ctx, pid, lnc, db_state).run()


class _PwShared:
    """One program's pass: the layout, the buffers (allocated in ``__init__``, in this order), the loads
    issued so far (``at``), the filters (``w_t``) and the dw accumulators started so far."""

    def __init__(self, ctx, pid: int, lnc: int, db_state):
        self.ctx, self.pid, self.lnc, self.db_state = ctx, pid, lnc, db_state
        self.g, self.plan, self.dtype = ctx.g, ctx.plan, ctx.dtype
        sizes = self._layout()
        self._alloc_pools(*sizes)
        self._alloc_db(sizes[1])
        self.bank_elems = BANK_BYTES // self.g.dtype_bytes
        self.packs = co_bank_packs(self.co_tiles, self.bank_elems)
        self.dy_ring, self.xt_ring, self.dyt_of, self.planes = {}, {}, {}, {}
        self.w_t = None
        self.events = load_events(self.lay, self.chunks)
        self.at = 0   # the next of ``events`` to issue
        # the first dx step's taps in the order their dy lands: no shift (the step's own dy), positive shifts
        # (the zeros / halo below), then negative ones (the next step's dy, loaded after the filters)
        shifts = self.lay.shifts
        self.first_taps = sorted(range(self.taps), key=lambda kd: (shifts[kd] < 0, abs(shifts[kd])))

    # ------------------------------------------------------------------ setup

    def _layout(self) -> tuple[int, int, int]:
        """Chunks, steps, tiles and flat views; returns the largest chunk, dy window and buffer extent."""
        g, ctx = self.g, self.ctx
        lay = self.lay = lay_of(g)
        chunks = self.chunks = [chunk_of(g, it) for it in dx_program_items(g, self.plan, self.pid)]
        self.steps = steps_of(lay, chunks)
        self.dy_flat = ctx.dy.reshape((g.batch, g.c_out, lay.ny))
        self.dx_flat = ctx.dx.reshape((g.batch, g.c_in, lay.nx))
        self.co_tiles = tiles(g.c_out, PMAX)
        self.ci_tiles = tiles(g.c_in, PMAX)
        self.co_blocks = tiles(g.c_out, BANK_FP32)
        self.taps = len(lay.shifts)
        big = max((n for _b, _q, n in chunks), default=PMAX)
        ybig = max(1, max((dy_size(lay, c) for c in chunks), default=PMAX))   # (a chunk may own no dy)
        ext = max((lay.ext(c[2], dy_size(lay, c)) for c in chunks), default=PMAX)
        self.lead = lay.lead
        return big, ybig, ext

    def _alloc_pools(self, big: int, ybig: int, ext: int) -> None:
        """The chunk rings, dx's planes and PSUM banks, and dw's PSUM accumulators."""
        g, lay, chunks, dtype = self.g, self.lay, self.chunks, self.dtype
        # rings of chunk buffers deep enough for loads issued LOAD_AHEAD steps ahead (``ring_depth``)
        depth = ring_depth(lay, chunks)
        self.dyn_pools = [Pool(depth, (PMAX, ext), dtype, nl.sbuf, f"pw_dy{c}_") for c in range(len(self.co_tiles))]
        self.dyt_pool = Pool(depth, (PMAX, -(-ybig // PMAX), g.c_out), dtype, nl.sbuf, "pw_dyt")
        spans = self.spans = [x_span(lay, c) for c in chunks]   # (the LNC2 plane split: halo planes beside a chunk's own x)
        xslots = max([-(-(hi - lo) // PMAX) for lo, hi in spans] + [-(-big // PMAX)])
        # [pos, C_in tile, sub-tile, ci]: each C_in tile's transposes write their own span (nkisim orders writes
        # whose span hulls overlap: interleaved C_in tiles serialised the two tiles' x^T transfers)
        self.xt_pool = Pool(depth, (PMAX, xslots, len(self.ci_tiles), PMAX), dtype, nl.sbuf, "pw_xt")
        self.plane_pool = Pool(2 * len(self.ci_tiles), (PMAX, big), dtype, nl.sbuf, "pw_plane")
        self.dx_ps = Pool(2, (PMAX, BANK_FP32), nl.float32, nl.psum, "ps_pwdx")
        slots = acc_slots(self.taps, g.c_in, g.c_out)
        banks = [nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name=f"ps_pwdw{i}")
                 for i in range(slots[-1][3] + 1)]
        # accumulator (tap, C_in tile, C_out block) -> its PSUM view
        self.accs = {(kd, k, jb): banks[bk][:, col:col + self.co_blocks[jb][1]] for kd, k, jb, bk, col in slots}
        self.started = set()

    def _alloc_db(self, ybig: int) -> None:
        """db's buffers: ScalarE's scratch (``Plan.pw_db_scalar``), else the ones vector and its PSUM bank."""
        db_state, dtype = self.db_state, self.dtype
        self.db_act = db_state is not None and self.plan.pw_db_scalar
        self.db_pe = db_state is not None and not self.plan.pw_db_scalar
        self.ones = self.db_ps = self.junk = None
        if self.db_act:
            self.junk = nl.ndarray((PMAX, ybig), dtype, buffer=nl.sbuf, name="pw_db_scratch")
        if self.db_pe:
            self.ones = nl.ndarray((PMAX, 1), dtype, buffer=nl.sbuf, name="pw_ones")
            nisa.memset(self.ones, 1.0, engine=nisa.engine.gpsimd)
            self.db_ps = nl.ndarray((PMAX, BANK_FP32), nl.float32, buffer=nl.psum, name="ps_pwdb")

    # ------------------------------------------------------------------ loads

    def y0(self, i):
        """The chunk's first dy position: its first x position (D kernels: a plane boundary)."""
        return self.chunks[i][1]

    def load_dy(self, i, o, m, cs=None):
        b = self.chunks[i][0]
        for c, (co0, co_sz) in enumerate(self.co_tiles):
            if cs is not None and c not in cs:
                continue
            nisa.dma_copy(dst=self.dy_ring[i][c][:co_sz, self.lead + o:self.lead + o + m],
                          src=self.dy_flat[b, co0:co0 + co_sz, self.y0(i) + o:self.y0(i) + o + m])

    def zero_halo(self, i):
        """Buffer positions outside the batch's dy: dx's shifted taps read zeros there."""
        lay, lead = self.lay, self.lead
        ny_c = dy_size(lay, self.chunks[i])
        e = lay.ext(self.chunks[i][2], ny_c)
        q0 = self.y0(i)
        for c, (_co0, co_sz) in enumerate(self.co_tiles):
            for z0, z1 in ((0, min(e, lead - q0)), (max(0, lead + lay.ny - q0), e)):
                if z1 > z0:
                    nisa.memset(self.dy_ring[i][c][:co_sz, z0:z1], 0.0, engine=nisa.engine.gpsimd)

    def load_dy_halos(self, i, below, cs=None):
        """The LNC2 plane split: the batch's dy planes below (or above) the chunk's window that dx's taps
        read, loaded beside the window's first (last) run."""
        b, lead = self.chunks[i][0], self.lead
        for u0, u1 in dy_halos(self.lay, self.chunks[i]):
            if (u1 <= 0) == below:
                for c, (co0, co_sz) in enumerate(self.co_tiles):
                    if cs is not None and c not in cs:
                        continue
                    nisa.dma_copy(dst=self.dy_ring[i][c][:co_sz, lead + u0:lead + u1],
                                  src=self.dy_flat[b, co0:co0 + co_sz, self.y0(i) + u0:self.y0(i) + u1])

    def load_x_halos(self, i, below):
        """The x^T halo planes dw's taps pair the window with, beside the own x."""
        for u0, u1 in x_halos(self.lay, self.chunks[i]):
            if (u1 <= 0) == below:
                self.load_xt(i, u0, u1 - u0)

    def load_xt(self, i, o, m):
        g, lay = self.g, self.lay
        b, q0, _n = self.chunks[i]
        xt = self.xt_ring[i]
        full, rest = m // PMAX, m % PMAX
        t0 = (o - self.spans[i][0]) // PMAX   # the buffer's first sub-tile (x_span's lo: a whole sub-tile)
        for k, (ci0, ci_sz) in enumerate(self.ci_tiles):
            base = (b * g.c_in + ci0) * lay.nx + q0 + o
            if full:   # x[ci, sub-tiles, 128] -> [128, sub-tiles, ci]: one 3-D transpose
                nisa.dma_transpose(dst=xt[:PMAX, t0:t0 + full, k, :ci_sz],
                                   src=self.ctx.x.ap([[lay.nx, ci_sz], [PMAX, full], [1, PMAX]], offset=base))
            if rest:
                nisa.dma_transpose(dst=xt[:rest, t0 + full, k, :ci_sz],
                                   src=self.ctx.x.ap([[lay.nx, ci_sz], [1, rest]], offset=base + full * PMAX))

    def load_dyt(self, i, o, m):
        """The sub-tiles whose dy^T comes by DMA (``Plan.pw_dyt_dma``): the PE does fewer transposes."""
        b = self.chunks[i][0]
        for s, ns in subtiles(o, m):
            if dyt_by_dma(s, ns, self.plan.pw_dyt_dma):
                for co0, co_sz in self.co_tiles:
                    nisa.dma_transpose(dst=self.dyt_of[i][:ns, s // PMAX, co0:co0 + co_sz],
                                       src=self.dy_flat[b, co0:co0 + co_sz, self.y0(i) + s:self.y0(i) + s + ns])

    def new_chunk(self, i):
        """A chunk's buffers, taken in chunk order (ring slot = chunk mod depth)."""
        if i in self.dy_ring:
            return
        self.dy_ring[i] = [pool.take() for pool in self.dyn_pools]
        self.xt_ring[i] = self.xt_pool.take()
        self.dyt_of[i] = self.dyt_pool.take()
        self.zero_halo(i)
        if not dy_size(self.lay, self.chunks[i]):   # no dy window (so no dy load to go beside)
            self.load_dy_halos(i, True)
            self.load_dy_halos(i, False)

    def load_dy_event(self, i, o, m, cs=None):
        self.load_dy(i, o, m, cs)
        if o == 0:
            self.load_dy_halos(i, True, cs)
        if o + m == dy_size(self.lay, self.chunks[i]):
            self.load_dy_halos(i, False, cs)

    def issue_first(self):
        """The dy the first dx step reads and the filters, interleaved by C_out tile (dy tile c, then W^T of
        tile c): the first dx step runs C_out tile outer (``dx(co_outer=True)``) and starts on tile 0."""
        events = self.events
        head = []
        while self.at < len(events) and events[self.at][1] == "dy":
            head.append(events[self.at])
            self.at += 1
        assert self.at < len(events) and events[self.at][1] == "w", events[:self.at + 1]
        self.at += 1
        for _s, _k, i, _o, _m in head:
            self.new_chunk(i)
        self.w_t = _alloc_filters_t(self.g, self.ci_tiles, self.co_tiles, self.dtype)
        for c in range(len(self.co_tiles)):   # (the later steps' dy -- D kernels: the negative shifts' reach -- last)
            for _s, _k, i, o, m in head[:1]:
                self.load_dy_event(i, o, m, [c])
            _load_filters_co(self.g, self.ctx.filters, self.ci_tiles, self.co_tiles, self.w_t, c, self.first_taps)
            for _s, _k, i, o, m in head[1:]:
                self.load_dy_event(i, o, m, [c])

    def issue_loads(self, step):
        """The loads due before ``step`` (``load_events``: in the order the PE needs them)."""
        events, g, ctx = self.events, self.g, self.ctx
        while self.at < len(events) and events[self.at][0] <= step:
            _s, kind, i, o, m = events[self.at]
            self.at += 1
            if kind == "w":
                self.w_t = load_filters_t(g, ctx.filters, list(self.ci_tiles), self.dtype, ctx.psum_t, ctx.evict, 1,
                                          by_dma=filters_by_dma(g, self.plan))
                continue
            self.new_chunk(i)
            if kind == "dy":
                self.load_dy_event(i, o, m)
            elif kind == "x":
                if o == 0:
                    self.load_x_halos(i, True)
                self.load_xt(i, o, m)
                if o + m == self.chunks[i][2]:
                    self.load_x_halos(i, False)
            else:
                self.load_dyt(i, o, m)

    # ------------------------------------------------------------------ dy^T and db

    def t_units(self, j):
        """Step j's PE transpose units: (sub-tile group sharing a PSUM bank, C_out pack)."""
        _i, off, _n, ny = self.steps[j]
        pe_subs = [st for st in subtiles(off, ny) if not dyt_by_dma(st[0], st[1], self.plan.pw_dyt_dma)]
        return [(grp, pack) for grp in dyt_groups(pe_subs, self.g.c_out, self.bank_elems) for pack in self.packs]

    def t_emit(self, j, unit, pt, cs=None):
        """The transposes of ``unit`` (of C_out tiles ``cs``: all when None), C_out tile outer: a tile's
        transposes run as soon as its dy lands."""
        i, lead = self.steps[j][0], self.lead
        grp, (_g0, members, width) = unit
        ns = grp[0][1]
        for c, col, co_sz in members:
            if cs is not None and c not in cs:
                continue
            for u, (s, _ns) in enumerate(grp):
                nisa.nc_transpose(dst=pt[:ns, u * width + col:u * width + col + co_sz],
                                  data=self.dy_ring[i][c][:co_sz, lead + s:lead + s + ns])

    def t_evict(self, j, unit, pt):
        grp, (g0, _members, width) = unit
        ns = grp[0][1]
        s0 = grp[0][0] // PMAX
        dst = self.dyt_of[self.steps[j][0]][:ns, s0:s0 + len(grp), g0:g0 + width]
        if self.db_act:   # ScalarE reduces db: the dy^T evictions go to VectorE
            nisa.tensor_copy(dst=dst, src=pt[:ns, :len(grp) * width], engine=nisa.engine.vector)
        else:
            self.ctx.evict.copy(dst, pt[:ns, :len(grp) * width])

    def db_reduce(self, j):
        i, off, _n, ny = self.steps[j]
        if self.db_act and ny and (i == 0 or off == 0):   # the first chunk per step (it loads per step), later whole
            r0, r1 = (off, off + ny) if i == 0 else (0, dy_size(self.lay, self.chunks[i]))
            lead = self.lead
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                # ScalarE: copy to a scratch tile, the sum along free added into db's fp32 column
                nisa.activation(dst=self.junk[:co_sz, :r1 - r0], op=nl.copy,
                                data=self.dy_ring[i][c][:co_sz, lead + r0:lead + r1], reduce_op=nl.add,
                                reduce_res=self.db_state.acc[:co_sz, c:c + 1],
                                reduce_cmd=nisa.reduce_cmd.load_reduce)

    def transposes(self, j):
        for unit in self.t_units(j):
            pt = self.ctx.psum_t.take()
            self.t_emit(j, unit, pt)
            self.t_evict(j, unit, pt)
        self.db_reduce(j)

    def first_step(self, j):
        """The first dx step C_out tile outer, each tile's transposes right after its matmuls when all of
        the step's transpose units fit the PSUM transpose pool at once (the PE fills the waits for the next
        tile's dy and filters)."""
        units = self.t_units(j)
        if len(units) > len(self.ctx.psum_t.items) or len(self.ci_tiles) > 2:
            self.dx(j, co_outer=True)
            self.transposes(j)
            return
        pts = [self.ctx.psum_t.take() for _ in units]
        self.dx(j, co_outer=True, after_co=lambda c: [self.t_emit(j, u, pt, [c]) for u, pt in zip(units, pts)])
        for u, pt in zip(units, pts):
            self.t_evict(j, u, pt)
        self.db_reduce(j)

    # ------------------------------------------------------------------ dw

    def dw(self, js, ci_major=False):
        """The dw matmuls (and db's ones-vector matmuls) of steps ``js``; ``ci_major``: C_in tile outer, so
        each C_in tile's accumulators are final (and its finish can start) while the next tile runs; at LNC2
        then the columns the other program stores first (``send_first``): their copy and exchange start while
        the own columns' matmuls run."""
        work = [(j, s, ns) for j in js for s, ns in subtiles(self.steps[j][1], self.steps[j][3])]
        order = [(None, list(range(len(self.ci_tiles))))]
        if ci_major:   # every C_in tile's send window, then every tile's own columns (or whole blocks)
            parts = [self.send_first([k]) for k in range(len(self.ci_tiles))]
            order = [(ps[r], [k]) for r in range(2) for k, ps in enumerate(parts) if r < len(ps)]
        for part, k_sel in order:
            for j, s, ns in work:
                self._dw_matmuls(j, s, ns, part, k_sel)
        if self.db_pe:
            self._db_matmuls(work)

    def _dw_matmuls(self, j, s, ns, part, k_sel):
        """One sub-tile's dw matmuls: per tap pairing it with an x sub-tile, C_in tile and C_out block
        (``part``: the block columns to cover, whole blocks when None)."""
        i = self.steps[j][0]
        dyt, xt, span0 = self.dyt_of[i], self.xt_ring[i], self.spans[i][0]
        p = s // PMAX
        for kd, xs in dw_pairs(self.lay, s, ns, self.spans[i]):
            for k in k_sel:
                ci_sz = self.ci_tiles[k][1]
                for jb, (c0, cn) in enumerate(self.co_blocks):
                    key = (kd, k, jb)
                    a0, a1 = (0, cn) if part is None else part.get(jb, (0, 0))
                    if a1 <= a0:
                        continue
                    nisa.nc_matmul(self.accs[key][:ci_sz, a0:a1],
                                   stationary=xt[:ns, (xs - span0) // PMAX, k, :ci_sz],
                                   moving=dyt[:ns, p, c0 + a0:c0 + a1], accumulate=key in self.started)
                    self.started.add(key)

    def _db_matmuls(self, work):
        """db's ones-vector matmuls on the dy^T sub-tiles of ``work``."""
        for j, s, ns in work:
            dyt, p = self.dyt_of[self.steps[j][0]], s // PMAX
            for c, (co0, co_sz) in enumerate(self.co_tiles):
                nisa.nc_matmul(self.db_ps[:co_sz, c:c + 1], stationary=dyt[:ns, p, co0:co0 + co_sz],
                               moving=self.ones[:ns, :], accumulate=("db", c) in self.started)
                self.started.add(("db", c))

    def send_first(self, k_sel):
        """The column parts of the last dw of C_in tiles ``k_sel`` (``pw_shared.send_parts``): at LNC2, when every
        accumulator of these tiles is started (a first matmul must write the whole block), the send window, then
        the rest; else the whole blocks."""
        co_blocks = self.co_blocks
        whole = [{jb: (0, cn) for jb, (_c0, cn) in enumerate(co_blocks)}]
        if self.lnc != 2 or any((kd, k, jb) not in self.started for kd in range(self.taps) for k in k_sel
                                for jb in range(len(co_blocks))):
            return whole
        return send_parts(co_blocks, gemm_dma_halves(self.g.c_out, self.pid)[2]) or whole

    # ------------------------------------------------------------------ dx

    def dx(self, j, evict=None, co_outer=False, last=False, after_co=None):
        """dx of step j; ``co_outer`` (the first step): C_out tile outer over pairs of C_in tiles (two PSUM
        banks), so the PE starts on the first C_out tile's dy and filters while the others load; ``last`` (the
        program's last dx step): each C_in tile in 128-position pieces, each evicted as soon as its matmuls
        end (the same PE cycles while a piece is >= 128 wide), so the kernel's tail is one piece's eviction
        and the last tile's store."""
        i, off, n, _ny = self.steps[j]
        if not n:
            return
        if i not in self.planes:
            self.planes[i] = [self.plane_pool.take() for _ in self.ci_tiles]
        groups, mm = self._dx_order(co_outer)
        for grp in groups:
            pss = {k: self.dx_ps.take() for k in grp}
            split = last and len(grp) == 1 and n >= 2 * PMAX
            pieces = [(a, min(n, a + PMAX)) for a in range(0, n, PMAX)] if split else [(0, n)]
            for a0, a1 in pieces:
                self._dx_matmuls(i, off, grp, pss, mm, (a0, a1), after_co)
                if split:
                    self._dx_evict_piece(i, off, grp[-1], pss, (a0, a1), evict)
            for k in grp:
                self.dx_out(i, k, off, n, pss[k], None if split else evict, evicted=split)

    def _dx_order(self, co_outer):
        """dx's C_in tile groups (pairs when ``co_outer``, else single tiles) and its (tap, C_out tile) order
        (``co_outer``: C_out tile outer, the first step's taps in the order their dy lands)."""
        n_ci, n_co = len(self.ci_tiles), len(self.co_tiles)
        if co_outer:
            return ([list(range(a, min(a + 2, n_ci))) for a in range(0, n_ci, 2)],
                    [(kd, c) for c in range(n_co) for kd in self.first_taps])
        return [[k] for k in range(n_ci)], [(kd, c) for kd in range(self.taps) for c in range(n_co)]

    def _dx_matmuls(self, i, off, grp, pss, mm, piece, after_co):
        """The matmuls of positions ``piece`` of C_in tiles ``grp``, in the (tap, C_out tile) order ``mm``;
        ``after_co(c)`` after C_out tile c's last."""
        a0, a1 = piece
        for t, (kd, c) in enumerate(mm):
            u = self.lead + off - self.lay.shifts[kd]   # the tap's dy window in the buffer
            co_sz = self.co_tiles[c][1]
            for k in grp:
                ci0, ci_sz = self.ci_tiles[k]
                nisa.nc_matmul(pss[k][:ci_sz, a0:a1],
                               stationary=self.w_t[c][:co_sz, self.g.tap_index(kd, 0, 0), ci0:ci0 + ci_sz],
                               moving=self.dy_ring[i][c][:co_sz, u + a0:u + a1], accumulate=t > 0)
            if after_co is not None and (t + 1 == len(mm) or mm[t + 1][1] != c):
                after_co(c)

    def _dx_evict_piece(self, i, off, k, pss, piece, evict):
        """The last step's piece of C_in tile k into its plane, as soon as its matmuls end."""
        a0, a1 = piece
        ci_sz = self.ci_tiles[k][1]
        dst, src = self.planes[i][k][:ci_sz, off + a0:off + a1], pss[k][:ci_sz, a0:a1]
        if evict is None:
            self.ctx.evict.copy(dst, src)
        else:
            nisa.tensor_copy(dst=dst, src=src, engine=evict)

    def dx_out(self, i, k, off, n, ps, evict, evicted=False):
        """Evict dx's PSUM bank of C_in tile k into its plane (unless ``evicted``); store (per step in the
        last chunk)."""
        b, q0, cn = self.chunks[i]
        ci0, ci_sz = self.ci_tiles[k]
        plane = self.planes[i][k]
        if evicted:
            pass
        elif evict is None:
            self.ctx.evict.copy(plane[:ci_sz, off:off + n], ps[:ci_sz, :n])
        else:
            nisa.tensor_copy(dst=plane[:ci_sz, off:off + n], src=ps[:ci_sz, :n], engine=evict)
        if i + 1 == len(self.chunks):   # the last chunk: per step (a short tail after the last eviction)
            nisa.dma_copy(dst=self.dx_flat[b, ci0:ci0 + ci_sz, q0 + off:q0 + off + n],
                          src=plane[:ci_sz, off:off + n])
        elif off + n == cn:   # the chunk's last step: store its plane
            nisa.dma_copy(dst=self.dx_flat[b, ci0:ci0 + ci_sz, q0:q0 + cn], src=plane[:ci_sz, :cn])

    # ------------------------------------------------------------------ the pass

    def run(self):
        """Per step: its loads, its dy^T transposes and dx, the previous step's dw; then the finish."""
        steps = self.steps
        first_co = bool(steps) and steps[0][2] > 0 and _filters_co_major(self.g, self.plan, self.ci_tiles)
        if first_co:
            self.issue_first()
        tail = list(range(len(steps) - dx_lag(len(steps), self.taps), len(steps)))
        for j in range(len(steps)):
            self.issue_loads(j)
            if j == 0 and first_co and j not in tail:   # the first dx before its transposes (less data first)
                self.first_step(j)
            else:
                self.transposes(j)
            if j not in tail and not (j == 0 and first_co):
                self.dx(j)
            if 1 <= j < len(steps) - 1:
                self.dw([j - 1])
        if steps:   # the last two steps' dw together, C_in tile outer (the finish of a tile starts early)
            self.dw(list(range(max(0, len(steps) - 2), len(steps))), ci_major=True)
        self._finish(tail)

    def _finish(self, tail):
        """dw's finish issued before the last dx steps (it overlaps them); its adds after them at LNC2."""
        finish = _DwFinish(self.ctx, self.pid, self.lnc, self.ci_tiles, self.co_blocks, self.accs, self.started,
                           self.taps)
        finish.start()
        db_state = self.db_state
        if self.db_pe and self.started:
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                db_state.add_psum(c, self.db_ps[:co_sz, c:c + 1])
        if db_state is not None:   # (LNC2: db's exchange, also under the last dx steps)
            db_state.finish(self.pid, self.lnc)
        for j in tail:   # (ScalarE evicts: VectorE holds dw's and db's finish, which wait for the exchanges)
            self.dx(j, nisa.engine.scalar if self.lnc == 2 else None, last=j == tail[-1])
        finish.complete()


def _filters_co_major(g, plan, ci_tiles) -> bool:
    """The filters come by one ``dma_transpose`` per (C_out tile, tap, C_in tile) (``load_filters_t``'s DMA
    form, issued here C_out tile by C_out tile); not for the tiny-C_in runs of taps."""
    return filters_by_dma(g, plan) and not (len(ci_tiles) == 1 and g.c_in <= FILTER_RUN_CI_MAX)


def _alloc_filters_t(g, ci_tiles, co_tiles, dtype):
    """Per C_out tile W^T [co, taps, C_in] (``load_filters_t``'s layout)."""
    width = sum(sz for _c, sz in ci_tiles)
    return [nl.ndarray((PMAX, g.taps, width), dtype, buffer=nl.sbuf, name=f"w_t{i}") for i in range(len(co_tiles))]


def _load_filters_co(g, filters, ci_tiles, co_tiles, w_t, c, taps):
    """C_out tile c's W^T: one ``dma_transpose`` per (tap, C_in tile) of W[tap, ci, co], taps in the order
    ``taps`` (the first dx step's), each tap's C_in tiles together (its matmuls run them back to back)."""
    flat = filters.reshape((g.taps, g.c_in, g.c_out))
    co0, co_sz = co_tiles[c]
    for t in taps:
        for ci0, ci_sz in ci_tiles:   # (W^T's columns are C_in: tile k at ci0)
            nisa.dma_transpose(dst=w_t[c][:co_sz, t, ci0:ci0 + ci_sz], src=flat[t, ci0:ci0 + ci_sz, co0:co0 + co_sz])


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
            # only the window the other program stores leaves PSUM here (half the copy); the own half is
            # added straight from PSUM in ``complete``
            part = nl.ndarray((PMAX, send[1] - send[0]), nl.float32, buffer=nl.sbuf, name=f"pw_part{kd}_{k}")
            other = nl.ndarray((PMAX, h), nl.float32, buffer=nl.sbuf, name=f"pw_other{kd}_{k}")
            for jb, a0, a1 in self._cut(send):
                dst = part[:ci_sz, a0 - send[0]:a1 - send[0]]
                if (kd, k, jb) in self.started:
                    c0 = self.co_blocks[jb][0]
                    nisa.tensor_copy(dst=dst, src=self.accs[(kd, k, jb)][:ci_sz, a0 - c0:a1 - c0],
                                     engine=nisa.engine.vector)
                else:   # a program with no position (or a tap that meets none of its x): a zero partial
                    nisa.memset(dst, 0.0, engine=nisa.engine.vector)
            nisa.sendrecv(src=part[:ci_sz, :], dst=other[:ci_sz, :], send_to_rank=1 - self.pid,
                          recv_from_rank=1 - self.pid, pipe_id=0)
            self.pending.append((kd, k, ci0, ci_sz, other, lo, hi, recv))

    def _cut(self, span):
        """(C_out block, first, end) of the blocks' parts inside ``span`` = [first C_out, end)."""
        return [(jb, max(c0, span[0]), min(c0 + cn, span[1])) for jb, (c0, cn) in enumerate(self.co_blocks)
                if max(c0, span[0]) < min(c0 + cn, span[1])]

    def complete(self):
        ctx = self.ctx
        for kd, k, ci0, ci_sz, other, lo, hi, recv in self.pending:
            if hi > lo:
                out = nl.ndarray((PMAX, hi - lo), ctx.dtype, buffer=nl.sbuf, name=f"pw_half{kd}_{ci0}")
                for jb, a0, a1 in self._cut((lo, hi)):
                    dst = out[:ci_sz, a0 - lo:a1 - lo]
                    theirs = other[:ci_sz, a0 - recv[0]:a1 - recv[0]]
                    if (kd, k, jb) in self.started:   # own partial (PSUM) + the other's, cast to the output dtype
                        c0 = self.co_blocks[jb][0]
                        nisa.tensor_tensor(dst=dst, data1=self.accs[(kd, k, jb)][:ci_sz, a0 - c0:a1 - c0],
                                           data2=theirs, op=nl.add, engine=nisa.engine.vector)
                    else:
                        nisa.tensor_copy(dst=dst, src=theirs, engine=nisa.engine.vector)
                nisa.dma_copy(dst=self.dw_flat[kd, ci0:ci0 + ci_sz, lo:hi], src=out[:ci_sz, :hi - lo])
