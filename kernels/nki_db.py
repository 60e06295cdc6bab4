"""db: per-channel sums of dy in fp32, folded on a dy band already in SBUF or in its own pass."""
import nki.isa as nisa
import nki.language as nl

from .nki_common import PMAX, Pool
from .schedule import tiles
from .spec.compose import DB_SCALAR_CHUNK, db_taps_local
from .spec.dw_options import dw_db_program
from .spec.record import Strategy


class DbState:
    """An fp32 [C_out (partitions), n_co_tiles] accumulator of this program."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.co_tiles = tiles(ctx.g.c_out, PMAX)
        self.acc = nl.ndarray((PMAX, len(self.co_tiles)), nl.float32, buffer=nl.sbuf, name="db_acc")
        self.part = Pool(2, (PMAX, 1), nl.float32, nl.sbuf, "db_part")
        self.finished = False   # a section may finish db early (nki_pw_shared); finish runs once
        # ScalarE sums of dx's bands: the activation's copy output is discarded (one scratch tile)
        self.junk = None
        if ctx.plan.pw_db_scalar and ctx.plan.strategy is Strategy.PER_GRADIENT:
            self.junk = nl.ndarray((PMAX, DB_SCALAR_CHUNK), ctx.dtype, buffer=nl.sbuf, name="db_junk")
        for c, (_co0, co_sz) in enumerate(self.co_tiles):
            nisa.memset(self.acc[:co_sz, c:c + 1], 0.0, engine=nisa.engine.vector)

    def add(self, c, view):
        """Add the sum over the free dims of ``view`` ([co, ...], C_out tile c) into the accumulator."""
        co_sz = self.co_tiles[c][1]
        if self.junk is not None:   # ScalarE: the free-axis sums accumulate straight into db's fp32 column
            for piece in _pieces(view, DB_SCALAR_CHUNK):
                n = _elems(piece)
                nisa.activation(dst=self.junk[:co_sz, :n], op=nl.copy, data=piece, reduce_op=nl.add,
                                reduce_res=self.acc[:co_sz, c:c + 1], reduce_cmd=nisa.reduce_cmd.load_reduce)
            return
        nd = len(view.shape)
        part = self.part.take()
        nisa.tensor_reduce(dst=part[:co_sz, :], op=nl.add, data=view, axis=tuple(range(1, nd)))
        dst = self.acc[:co_sz, c:c + 1]
        nisa.tensor_tensor(dst=dst, data1=dst, data2=part[:co_sz, :], op=nl.add, engine=nisa.engine.vector)

    def add_psum(self, c, ps):
        """Add a [co, 1] fp32 PSUM partial sum of C_out tile c into the accumulator."""
        dst = self.acc[:self.co_tiles[c][1], c:c + 1]
        nisa.tensor_tensor(dst=dst, data1=dst, data2=ps, op=nl.add, engine=nisa.engine.vector)

    def standalone(self, batches, chunk):
        """Its own pass over dy for ``batches`` (contiguous chunks of positions per C_out tile)."""
        ctx, g = self.ctx, self.ctx.g
        npos = g.out_size[0] * g.out_size[1] * g.out_size[2]
        flat = ctx.dy.reshape((g.batch, g.c_out, npos))
        size = min(chunk, npos)
        pool = Pool(2, (PMAX, size), ctx.dtype, nl.sbuf, "db_dy")
        for b in batches:
            for c, (co0, co_sz) in enumerate(self.co_tiles):
                for p0 in range(0, npos, size):
                    n = min(size, npos - p0)
                    t = pool.take()
                    nisa.dma_copy(dst=t[:co_sz, :n], src=flat[b, co0:co0 + co_sz, p0:p0 + n])
                    self.add(c, t[:co_sz, :n])

    def finish(self, pid, lnc):
        """(LNC2: exchange and add;) program 0 stores db in the output dtype (the DMA casts).
        Nothing with ``plan.db_ones``: dw's x-stationary accumulator holds db and dw stores it."""
        if self.finished:
            return
        self.finished = True
        ctx = self.ctx
        if ctx.plan.db_ones:
            return
        if db_taps_local(ctx.g, ctx.plan):   # whole on one program: it stores, nothing to exchange
            if pid == dw_db_program(ctx.g, ctx.plan):
                for c, (co0, co_sz) in enumerate(self.co_tiles):
                    nisa.dma_copy(dst=ctx.db[co0:co0 + co_sz], src=self.acc[:co_sz, c:c + 1])
            return
        if lnc == 2:
            other = nl.ndarray((PMAX, len(self.co_tiles)), nl.float32, buffer=nl.sbuf, name="db_other")
            for c, (_co0, co_sz) in enumerate(self.co_tiles):
                nisa.sendrecv(src=self.acc[:co_sz, c:c + 1], dst=other[:co_sz, c:c + 1], send_to_rank=1 - pid,
                              recv_from_rank=1 - pid, pipe_id=1)
                dst = self.acc[:co_sz, c:c + 1]
                nisa.tensor_tensor(dst=dst, data1=dst, data2=other[:co_sz, c:c + 1], op=nl.add,
                                   engine=nisa.engine.vector)
        if pid == 0:
            for c, (co0, co_sz) in enumerate(self.co_tiles):
                nisa.dma_copy(dst=ctx.db[co0:co0 + co_sz], src=self.acc[:co_sz, c:c + 1])


def _elems(view):
    n = 1
    for s in view.shape[1:]:
        n *= s
    return n


def _pieces(view, limit):
    """``view`` [co, ...] split along its leading free axes into pieces of at most ``limit`` elements
    (whole trailing rows; a row longer than ``limit`` in column runs)."""
    if _elems(view) <= limit:
        return [view]
    if len(view.shape) == 2:
        w = view.shape[1]
        return [view[:, a:min(a + limit, w)] for a in range(0, w, limit)]
    inner = _elems(view) // view.shape[1]
    if inner > limit:
        return [p for i in range(view.shape[1]) for p in _pieces(view[:, i], limit)]
    k = limit // inner
    return [view[:, a:min(a + k, view.shape[1])] for a in range(0, view.shape[1], k)]
