"""dw with the kd taps on the moving axis: the NKI code (``spec.py`` has the layout, ``design.md`` the
pseudocode).

Uses only ``nki.language`` / ``nki.isa`` plus the pure-Python spec beside it, so the same code runs on
nkisim and on a NeuronCore. Per chunk (x planes of one batch x H_out rows on the partitions):
- dy^T ``[rows, K_d slots, W_out, co]``: per slot one ``dma_transpose`` of the dy rows that exist,
  zero rows (D padding) copied from a zero tile;
- per kh an x^T ``[rows, x columns, ci]``: ``dma_transpose`` of the x rows (H padding rows and W
  padding columns were zeroed once: each buffer always serves the same kh);
- per (kh, kw group, w_o): one matmul into that (kh, kw group)'s PSUM bank, which accumulates over the
  whole layer; at the end each bank is cast once and stored as K_d rows of dw.
LNC2: each program contracts half the chunks, the fp32 partials are exchanged once with ``sendrecv``,
and each program adds and stores half the accumulators.
"""
import nki.isa as nisa
import nki.language as nl

from . import spec

_P = spec.PMAX


def run_dw_kd_moving(g, dy, x, dw, dtype, evict, pid=0, lnc=1):
    """Program ``pid``'s share of dw, written to ``dw`` ``[K_d, K_h, K_w, C_in, C_out]``."""
    kd_n, kh_n = g.axes[0].k, g.axes[1].k
    ow, oh = g.axes[2].o, g.axes[1].o
    ci, co = g.c_in, g.c_out
    ncols = spec.x_cols(g)
    c0, c1 = spec.x_col_range(g)
    groups = spec.kw_groups(g)
    zero = None
    if spec.zero_cols(g):   # padding rows written after a fill are DMA'd from it (any start partition)
        zero = nl.ndarray((_P, spec.zero_cols(g)), dtype, buffer=nl.sbuf, name="kdm_zero")
        nisa.memset(zero, 0.0, engine=nisa.engine.vector)
    xts = [[nl.ndarray((_P, ncols, ci), dtype, buffer=nl.sbuf, name=f"kdm_xt{kh}_{i}")
            for i in range(spec.XT_BUFS)] for kh in range(kh_n)]
    if spec.xt_has_padding(g):
        # H and W padding is the same rows and columns in every chunk and no transfer writes them: each
        # buffer (it always serves the same kh) is zeroed once
        for t in (t for bufs in xts for t in bufs):
            nisa.memset(t, 0.0, engine=nisa.engine.vector)
    dyts = [nl.ndarray((_P, kd_n, ow, co), dtype, buffer=nl.sbuf, name=f"kdm_dyt{i}")
            for i in range(spec.DYT_BUFS)]
    acc = [[nl.ndarray((_P, kd_n * co), nl.float32, buffer=nl.psum, name=f"kdm_acc{kh}_{k}")
            for k in range(len(groups))] for kh in range(kh_n)]
    mine = spec.program_chunks(g, lnc, pid)
    for i, c in enumerate(mine):
        rows = c.nd * oh
        dyt = dyts[i % spec.DYT_BUFS]
        for kd in range(kd_n):
            for r in spec.dyt_runs(g, c, kd):
                dst = dyt[r.p0:r.p0 + r.rows, kd, :, :]
                if r.src_row < 0:
                    nisa.dma_copy(dst=dst, src=zero[:r.rows, :ow * co].reshape((r.rows, ow, co)))
                else:
                    nisa.dma_transpose(dst=dst, src=_dy_rows(dy, g, c.b, r))
        for kh in range(kh_n):
            xt = xts[kh][i % spec.XT_BUFS]
            for r in spec.xt_runs(g, c, kh):
                dst = xt[r.p0:r.p0 + r.rows, c0:c1, :]
                if r.src_row < 0:   # H padding between two planes, after the transpose that read x there
                    nisa.dma_copy(dst=dst, src=zero[:r.rows, :(c1 - c0) * ci].reshape((r.rows, c1 - c0, ci)))
                else:
                    nisa.dma_transpose(dst=dst, src=_x_rows(x, g, c.b, r, c0, c1))
            for w_o in range(ow):
                col = w_o * g.axes[2].s
                for k, (k0, n) in enumerate(groups):
                    a = col + k0 * g.axes[2].r
                    stat = xt[:rows, a:a + (n - 1) * g.axes[2].r + 1:g.axes[2].r, :]
                    # (every accumulator starts at the first chunk's first column)
                    nisa.nc_matmul(acc[kh][k][:n * ci, :], stationary=stat, moving=dyt[:rows, :, w_o, :],
                                   accumulate=i > 0 or w_o > 0)
    outs = [nl.ndarray((_P, kd_n * co), dtype, buffer=nl.sbuf, name=f"kdm_out{i}") for i in range(spec.OUT_BUFS)]
    if lnc == 2:
        _exchange_and_store(g, dw, acc, outs, mine, pid, lnc)
        return
    for kh in range(kh_n):
        for k, (k0, n) in enumerate(groups):
            out = outs[(kh * len(groups) + k) % spec.OUT_BUFS]
            evict.copy(out[:n * ci, :], acc[kh][k][:n * ci, :])
            nisa.dma_copy(dst=_dw_rows(dw, g, kh, k0, n), src=out[:n * ci, :].reshape((n * ci, kd_n, co)))


def _exchange_and_store(g, dw, acc, outs, mine, pid, lnc):
    """LNC2: both programs' fp32 partials of every accumulator in one ``sendrecv``; each program adds the
    other's partials of the accumulators it owns (into the output dtype) and stores them."""
    groups = spec.kw_groups(g)
    n_acc = spec.accumulators(g)
    width = g.axes[0].k * g.c_out
    m_max = max(n for _k0, n in groups) * g.c_in
    part = nl.ndarray((_P, n_acc, width), nl.float32, buffer=nl.sbuf, name="kdm_part")
    other = nl.ndarray((_P, n_acc, width), nl.float32, buffer=nl.sbuf, name="kdm_other")
    # (rows beyond a group's C_in columns, and a program without chunks, exchange zeros)
    nisa.memset(part[:m_max, :, :], 0.0, engine=nisa.engine.vector)
    if mine:
        for kh in range(g.axes[1].k):
            for k, (_k0, n) in enumerate(groups):
                nisa.tensor_copy(dst=part[:n * g.c_in, kh * len(groups) + k, :], src=acc[kh][k][:n * g.c_in, :],
                                 engine=nisa.engine.vector)
    nisa.sendrecv(src=part[:m_max, :, :], dst=other[:m_max, :, :], send_to_rank=1 - pid, recv_from_rank=1 - pid,
                  pipe_id=0)
    for i, a in enumerate(spec.owned(g, lnc, pid)):
        kh, k = divmod(a, len(groups))
        k0, n = groups[k]
        out = outs[i % spec.OUT_BUFS]
        nisa.tensor_tensor(dst=out[:n * g.c_in, :], data1=part[:n * g.c_in, a, :], data2=other[:n * g.c_in, a, :],
                           op=nl.add, engine=nisa.engine.vector)
        nisa.dma_copy(dst=_dw_rows(dw, g, kh, k0, n),
                      src=out[:n * g.c_in, :].reshape((n * g.c_in, g.axes[0].k, g.c_out)))


def _x_rows(x, g, b, r, c0, c1):
    """x rows of run ``r`` as the transpose source ``[ci, x columns, rows]`` (x ``[B, C_in, D, H, W]``)."""
    D, H, W = g.in_size
    w = g.axes[2]
    offset = (b * g.c_in * D * H + r.src_row) * W + (c0 - w.lo)
    return x.ap(pattern=[[D * H * W, g.c_in], [1, c1 - c0], [g.axes[1].s * W, r.rows]], offset=offset)


def _dy_rows(dy, g, b, r):
    """dy rows of run ``r`` as the transpose source ``[co, W_out, rows]`` (dy ``[B, C_out, D', H', W']``)."""
    od, oh, ow = g.out_size
    offset = (b * g.c_out * od * oh + r.src_row) * ow
    return dy.ap(pattern=[[od * oh * ow, g.c_out], [1, ow], [ow, r.rows]], offset=offset)


def _dw_rows(dw, g, kh, k0, n):
    """dw ``[K_d, K_h, K_w, C_in, C_out]`` as ``[(kw in [k0, k0+n), ci), kd, co]`` for one kh: per row
    K_d runs of C_out."""
    kd_n, kh_n, kw_n = g.kernel
    offset = (kh * kw_n + k0) * g.c_in * g.c_out
    return dw.ap(pattern=[[g.c_out, n * g.c_in], [kh_n * kw_n * g.c_in * g.c_out, kd_n], [1, g.c_out]],
                 offset=offset)
