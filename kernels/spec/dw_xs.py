"""x-stationary dw: its stationary chunks, x^T bundles, accumulation banks, folds and stores."""
from __future__ import annotations

from ..geometry import ConvGeom, ceil_div
from ..schedule import PMAX
from .psum import PSUM_BANK_BYTES
from .record import DwMethod, Plan

XS_MAX_BANKS = 3   # PSUM banks of one x-stationary accumulation group (the ring holds one more)


def dw_xs_slots(g: ConvGeom, p: Plan) -> int:
    """x-stationary dw: taps per stationary operand, each ``dw_ci_tile`` partitions of the output
    (M = taps x ci <= 128): within one tap group (box mode), within one kw row (row mode: the kw taps
    of one (kd, kh) at once; ``dw_xs_bundle`` adds the rows of several (kd, kh))."""
    unit = g.axes[2].k if p.dw_method is DwMethod.ROW_PACK else p.dw_tap_group
    return max(1, min(unit, PMAX // p.dw_ci_tile))


def dw_xs_bundle(g: ConvGeom, p: Plan) -> int:
    """Row mode, x-stationary: the (kd, kh) pairs whose x^T share one tile [rows, pairs, cols, ci], so
    that a stationary can take the same kw taps of several pairs (a uniform stride between them):
    m = 128 // ci taps fit M; K_w <= m: m // K_w whole kw rows per stationary; else the K_w mod m
    leftover taps of m // leftover pairs together."""
    if p.dw_method is not DwMethod.ROW_PACK:
        return 1
    m = max(1, PMAX // p.dw_ci_tile)
    kw = g.axes[2].k
    r = kw if kw <= m else kw % m
    return max(1, min(g.axes[0].k * g.axes[1].k, m // r if r else 1))


def dw_xs_per_bank(g: ConvGeom) -> int:
    """x-stationary accumulators [(tap, ci), C_out] fp32 per PSUM bank."""
    return max(1, PSUM_BANK_BYTES // (4 * g.c_out))


def dw_xs_fits(g: ConvGeom) -> bool:
    """The x-stationary orientation serves C_out <= 512 (one moving operand, one PSUM bank)."""
    return g.c_out * 4 <= PSUM_BANK_BYTES


def dw_xs_row_chunks(g: ConvGeom, p: Plan, pair0: int, n_pairs: int) -> list[tuple[int, int, int]]:
    """Row mode: the stationary chunks (first tap, pairs, kw taps) of the ``n_pairs`` (kd, kh) pairs of
    one x^T bundle from flat pair ``pair0``: taps ``first + b * K_w + j`` (b < pairs, j < kw taps)."""
    kw = g.axes[2].k
    m = max(1, PMAX // p.dw_ci_tile)
    out = []
    if kw <= m:
        q = m // kw
        return [((pair0 + b) * kw, min(q, n_pairs - b), kw) for b in range(0, n_pairs, q)]
    r = kw % m
    for b in range(n_pairs):
        out += [((pair0 + b) * kw + k0, 1, m) for k0 in range(0, kw - r, m)]
    if r:
        q = m // r
        out += [((pair0 + b) * kw + kw - r, min(q, n_pairs - b), r) for b in range(0, n_pairs, q)]
    return out


def dw_xs_bundles(g: ConvGeom, p: Plan, span: tuple[int, int]) -> list[tuple[int, int]]:
    """Row mode: (first flat pair, pairs) of the x^T bundles of a pass (whole pairs)."""
    kw = g.axes[2].k
    lo, hi = span[0] // kw, ceil_div(span[1], kw)
    nb = dw_xs_bundle(g, p)
    return [(q, min(nb, hi - q)) for q in range(lo, hi, nb)]


def dw_xs_chunks(g: ConvGeom, p: Plan, span: tuple[int, int]) -> list[tuple[int, int, int]]:
    """(first tap, blocks, taps per block) of the stationary chunks of a pass, in accumulator order:
    box mode, ``dw_xs_slots`` consecutive taps of a tap group (one block); row mode, per x^T bundle
    ``dw_xs_row_chunks``. Passes start at whole units (tap groups / pairs)."""
    if p.dw_method is DwMethod.ROW_PACK:
        return [ch for q, n in dw_xs_bundles(g, p, span) for ch in dw_xs_row_chunks(g, p, q, n)]
    lo, hi = span
    m = dw_xs_slots(g, p)
    out = []
    for t0 in range(lo, hi, p.dw_tap_group):
        end = min(hi, t0 + p.dw_tap_group)
        out += [(t, 1, min(m, end - t)) for t in range(t0, end, m)]
    return out


def dw_xs_group_banks(g: ConvGeom, p: Plan) -> int:
    """PSUM banks of one x-stationary accumulation group (box: a tap group; row: a batch of the
    chunks of one x^T bundle, at most ``XS_MAX_BANKS``)."""
    if p.dw_method is DwMethod.ROW_PACK:
        units = len(dw_xs_row_chunks(g, p, 0, dw_xs_bundle(g, p)))
    else:
        units = ceil_div(p.dw_tap_group, dw_xs_slots(g, p))
    return min(XS_MAX_BANKS, ceil_div(units, dw_xs_per_bank(g)))


def dw_xs_fold_runs(chunks: list[tuple[int, int, int]], per_bank: int,
                    alone: int | None = None) -> list[tuple[int, int, int, int]]:
    """(bank, first unit, units, taps per unit) of the fold copies of one accumulation group: the
    consecutive units of one bank with the same tap count fold in one instruction (unit ``alone``, the
    db ones chunk whose fold takes one more partition, in its own)."""
    runs: list[tuple[int, int, int, int]] = []
    for u, (_t, nb, tn) in enumerate(chunks):
        b = u // per_bank
        if runs and runs[-1][0] == b and runs[-1][3] == nb * tn and alone not in (u, runs[-1][1] + runs[-1][2] - 1):
            bb, u0, k, taps = runs[-1]
            runs[-1] = (bb, u0, k + 1, taps)
        else:
            runs.append((b, u, 1, nb * tn))
    return runs


def db_ones_chunk(g: ConvGeom, p: Plan, span: tuple[int, int]) -> tuple[int, int, int] | None:
    """``Plan.db_ones``: the stationary chunk (first tap, pairs, kw taps) of the pass ``span`` that also
    takes the bundle tile's ones slot (the slot after the bundle's last pair, all ones), so its matmuls
    put ``sum over positions of dy^T`` (= db's partial) on the M rows after its own: the last chunk that
    ends at its bundle's last pair with room for one more pair's ``taps x ci`` rows on M. None: no room
    (row-mode x-stationary only)."""
    if p.dw_method is not DwMethod.ROW_PACK or not p.dw_x_stationary:
        return None
    kw = g.axes[2].k
    out = None
    for q, n in dw_xs_bundles(g, p, span):
        for t, nb, tn in dw_xs_row_chunks(g, p, q, n):
            if span[0] <= t < span[1] and t // kw + nb == q + n and (nb + 1) * tn * p.dw_ci_tile <= PMAX:
                out = (t, nb, tn)
    return out


def xs_exchange_window(n_chunks: int, n_ci_tiles: int) -> tuple[int, int] | None:
    """LNC2 x-stationary exchange (DwState._send_xacc): (chunks, chunks sent) when each program sends
    only the ceil(n/2) chunks covering the other's share (one C_in tile: the window is contiguous);
    None: the whole accumulator."""
    if n_ci_tiles != 1 or n_chunks < 2:
        return None
    return n_chunks, ceil_div(n_chunks, 2)


def xs_store_runs(chunks: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int, bool]]:
    """(first chunk index, first tap, blocks, taps per block, single) of the x-stationary store DMAs:
    single-tap chunks of consecutive taps store together (``single``: [ci, taps, C_out], taps in
    ``taps per block``); any other chunk, [(block, tap, ci), C_out], alone."""
    runs: list[tuple[int, int, int, int, bool]] = []
    for i, (t, nb, tn) in enumerate(chunks):
        one = nb == 1 and tn == 1
        if one and runs and runs[-1][4] and runs[-1][1] + runs[-1][3] == t:
            i0, t0, _nb, k, _ = runs[-1]
            runs[-1] = (i0, t0, 1, k + 1, True)
        else:
            runs.append((i, t, nb, tn, one))
    return runs
