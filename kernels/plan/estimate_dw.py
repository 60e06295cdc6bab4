"""The estimate of dw's work: per output box (rows or tap groups), its folds, finishes and stores."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..costs import CostSheet, TargetFigures
from ..geometry import ConvGeom, ceil_div
from ..schedule import (
    PMAX,
    border_slabs,
    box_block_sizes,
    box_blocks,
    dw_x_extent,
    dw_x_fill,
    n_tiles,
    needs_stage,
    tile_sizes,
)
from ..spec.compose import db_on_dw
from ..spec.dw_options import (
    dw_db_program,
    dw_direct,
    dw_own_taps,
    dw_w_bands,
)
from ..spec.dw_xs import (
    XS_MAX_BANKS,
    dw_xs_bundles,
    dw_xs_chunks,
    dw_xs_fold_runs,
    dw_xs_per_bank,
    dw_xs_row_chunks,
    xs_exchange_window,
    xs_store_runs,
)
from ..spec.psum import PSUM_BANK_BYTES
from ..spec.record import DwMethod, Plan, Strategy
from ..xt_rows import dyt_runs, xt_dma_bufs, xt_dma_cost


def _fold_cost(c: CostSheet, g: ConvGeom, p: Plan, n: int, count: int, first: bool = False) -> None:
    """Folding ``count`` PSUM accumulators of ``n`` elements (mirrors DwState._accumulate): ``first``
    (the first box or row pass of a DwState) copies, later ones add (two streams)."""
    if dw_direct(g, p):
        c.evict(n, g.dtype_bytes == 2, count)
    elif first:
        c.compute("vector", n, 1, 1.0, count, op="tensor_copy")
    else:
        c.compute("vector", n, 2, 1.0, count, op="tensor_tensor")


def _estimate_dw_item(c: CostSheet, g: ConvGeom, p: Plan, od: tuple[int, int], oh: tuple[int, int],
                      ci_tiles: list[int], chunk: int, n_chunks: int, xpad: bool, bank: int,
                      span: tuple[int, int], wcols: tuple[int, int] | None = None,
                      ones: tuple[int, int, int] | None = None, first: bool = False) -> None:
    """dw of one output box (mirrors DwState.add_box), without its dy load and db fold; ``wcols``: the W
    output columns run (box mode: a W band); ``ones``: the db_ones chunk (row mode); ``first``: the
    DwState's first box (its folds copy)."""
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    Wo = g.axes[2].o
    rows = (od[1] - od[0], oh[1] - oh[0])
    if p.dw_method is DwMethod.ROW_PACK:
        _estimate_rows(c, g, p, (od, oh), ci_tiles, chunk, n_chunks, xpad, bank, span, ones, first)
        return
    ow = wcols or (0, Wo)   # box mode: the box's W columns (a W band, dw_w_band)
    blocks = box_block_sizes((0, 0, 0), (rows[0], rows[1], ow[1] - ow[0]), PMAX)
    sizes = [(s_[0] * s_[1] * s_[2], cnt) for s_, cnt in blocks]
    G = p.dw_tap_group
    t_lo, t_hi = span
    groups = [min(G, t_hi - t) for t in range(t_lo, t_hi, G)]
    for (npos, cnt), (s_, _cnt) in zip(sizes, blocks):       # dy^T once per position tile
        if p.dw_dyt_dma:   # by dma_transpose from HBM, per C_out tile and d plane: dst [th*tw, co]
            for co_sz in tile_sizes(g.c_out, PMAX):
                n = s_[1] * s_[2]
                c.dma_transpose((n, co_sz), ds, count=cnt * s_[0], src_shape=(co_sz, n))
            continue
        c.transpose(co_t, npos, fp32, n_co * cnt)
        c.evict(g.c_out, two, max(1, ceil_div(g.c_out * ds, PSUM_BANK_BYTES)) * cnt)
    x0, xext, xlo, xhi = dw_x_fill(g, od, oh, ow)
    for ci in ci_tiles:
        _cost_fill(c, g, 1, ci, xlo, xhi, xext, [(x0[a] + xlo[a], x0[a] + xhi[a]) for a in range(3)], x_side=True)
        if p.dw_x_stationary:
            _estimate_xs_groups(c, g, p, ci, sizes, span, first)
            continue
        for gs in groups:
            for npos, cnt in sizes:
                c.transpose(ci, npos, fp32, gs * cnt * n_chunks)
                c.evict(gs * ci, two, cnt * n_chunks)
                c.matmul(co_t, gs * ci, fp32, n_co * cnt)
            _fold_cost(c, g, p, gs * ci, n_co, first)


def _estimate_xs_groups(c: CostSheet, g: ConvGeom, p: Plan, ci: int, sizes: list[tuple[int, int]],
                        span: tuple[int, int], first: bool = False) -> None:
    """Box-mode x-stationary dw of one C_in tile (mirrors DwState.add_box): per tap group and position
    tile the x^T transposes, then one matmul per stationary chunk (M = taps x ci, N = C_out)."""
    fp32 = g.dtype == "fp32"
    two = g.dtype_bytes == 2
    chunks = dw_xs_chunks(g, p, span)
    per_bank = dw_xs_per_bank(g)
    for t0 in range(span[0], span[1], p.dw_tap_group):
        gs = min(p.dw_tap_group, span[1] - t0)
        grp = [ch for ch in chunks if t0 <= ch[0] < t0 + gs]
        for npos, cnt in sizes:
            c.transpose(ci, npos, fp32, gs * cnt)
            c.evict(gs * ci, two, cnt)
            for _t, _nb, tn in grp:
                c.matmul(tn * ci, g.c_out, fp32, cnt)
        for _b, _u0, k, _tn in dw_xs_fold_runs(grp, per_bank):
            _fold_cost(c, g, p, k * g.c_out, 1, first)


def _estimate_xs_finish(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, width: int,
                        span: tuple[int, int], pid: int = 0) -> float:
    """The end of an x-stationary pass (mirrors DwState._finish_xs): LNC2 exchange and add of this
    program's chunks, one cast per C_in tile, stores straight into dw. Returns the exposed fill (ns)."""
    ds = g.dtype_bytes
    chunks = dw_xs_chunks(g, p, span)
    cis = tile_sizes(width, p.dw_ci_tile)
    own = dw_own_taps(g, p, pid)
    half = ceil_div(len(chunks), p.lnc)
    mine = chunks if (own is not None or p.lnc == 1) else (chunks[:half] if pid == 0 else chunks[half:])
    fill = 0.0
    if p.lnc == 2 and own is None:
        win = xs_exchange_window(len(chunks), len(cis))
        sent = len(cis) * len(chunks) if win is None else win[1]   # chunks sent (one C_in tile: a window)
        nbytes = sent * g.c_out * 4 * PMAX
        c.dma(nbytes, sent * g.c_out * 4, 1)
        add = len(cis) * (len(mine) * g.c_out * 2 + 60) / hw.vector_ghz
        c.compute("vector", len(mine) * g.c_out, 2, 1.0, len(cis), op="tensor_tensor")
        fill += 2 * hw.dma_fixed_ns + nbytes / hw.dma_bytes_per_ns + add
    for ci in cis:
        if not dw_direct(g, p):
            c.compute("vector", len(mine) * g.c_out, 1, 1.0, 1, op="tensor_copy")
        for n_taps, count in _xs_stores(mine):
            c.dma(n_taps * ci * g.c_out * ds, g.c_out * ds, count)
    return fill


def _xs_stores(chunks: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(taps, count) of the store DMAs of one C_in tile (mirrors DwState._finish_xs)."""
    out: dict[int, int] = {}
    for _i, _t0, nb, tn, _single in xs_store_runs(chunks):
        out[nb * tn] = out.get(nb * tn, 0) + 1
    return sorted(out.items())


def _cost_fill(c: CostSheet, g: ConvGeom, count: int, parts: int, lo: list[int], hi: list[int], ext: list[int],
               valid: list[tuple[int, int]], x_side: bool = False, fill_work: bool = True) -> None:
    """``count`` loads of a zero-padded buffer (mirrors nki_common.load_padded); without
    ``fill_work`` only the DMA (a region whose pack shares the memsets and placement)."""
    ds = g.dtype_bytes
    for n_slab in border_slabs(lo, hi, ext) if fill_work else ():
        c.compute("gpsimd", n_slab, 0, 1.0, count, op="memset")
    if any(h_ <= l_ for l_, h_ in zip(lo, hi)):
        return
    n = [hi[a] - lo[a] for a in range(3)]
    full = [g.axes[a].n if x_side else g.axes[a].o for a in range(3)]
    # HBM side: the innermost run of full rows/planes
    run = n[2]
    if n[2] == full[2]:
        run *= n[1]
        if n[1] == full[1]:
            run *= n[0]
    elems = n[0] * n[1] * n[2]
    staged = needs_stage(lo, hi, ext)
    sbuf_run = elems if staged or not needs_stage(lo, hi, ext) else n[2]
    c.dma(parts * elems * ds, min(run, sbuf_run) * ds, count)
    if staged and fill_work:
        c.compute("vector", elems, 1, c.copy_speedup("vector", ds == 2, False, True), count, op="tensor_copy")


def _estimate_rows(c: CostSheet, g: ConvGeom, p: Plan, box: tuple[tuple[int, int], tuple[int, int]],
                   ci_tiles: list[int], chunk: int, n_chunks: int, xpad: bool, bank: int,
                   span: tuple[int, int], ones: tuple[int, int, int] | None = None, first: bool = False) -> None:
    """The row-mode dw of one output box (mirrors DwState._add_rows); ``ones``: the db_ones chunk (C_in
    tile 0: one more pair's rows on M, folded alone)."""
    (d_base, d_end), (h_base, h_end) = box
    rows = (d_end - d_base, h_end - h_base)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    Wo = g.axes[2].o   # matmul steps, dy^T columns
    kw_n = g.kernel[2]
    xw = dw_x_extent(g.axes[2], g.axes[2].o)
    gk = p.dw_tap_group
    kgroups = [min(gk, kw_n - k) for k in range(0, kw_n, gk)]
    for ck, (st, (cd, ch, _one)) in enumerate(box_blocks((0, 0, 0), (rows[0], rows[1], 1), PMAX)):
        nrows = cd * ch
        copies = first and ck == 0   # the DwState's first row pass copies its folds (``first``: its box)
        if p.dw_dyt_dma:   # dy^T by dma_transpose from HBM, per C_out tile and run of rows
            for co_sz in tile_sizes(g.c_out, PMAX):   # dst [rows, W columns, co], src [co, W columns, rows]
                for _p0, _r0, n in dyt_runs(g.axes[1].o, d_base + st[0], h_base + st[1], cd, ch):
                    c.dma_transpose((n, Wo, co_sz), ds, src_shape=(co_sz, Wo, n))
        else:   # PE transposes and their evictions
            c.transpose(co_t, nrows, fp32, Wo * n_co)
            if g.c_out <= bank:
                per_bank = bank // g.c_out
                for w0 in range(0, Wo, per_bank):
                    c.evict(min(per_bank, Wo - w0) * g.c_out, two, 1)
            else:
                c.evict(co_t, two, Wo * n_co)
        x0, xext, xlo, xhi = dw_x_fill(g, (d_base + st[0], d_base + st[0] + cd), (h_base + st[1], h_base + st[1] + ch))
        for i_ci, ci in enumerate(ci_tiles):
            pairs = (span[1] - span[0]) // kw_n   # whole (kd, kh) pairs per pass
            one = ones if i_ci == 0 else None

            def m_of(t, nb, tn, one=one, ci=ci):   # M of a chunk (the ones chunk: one more pair's rows)
                return (nb + (1 if one is not None and t == one[0] else 0)) * tn * ci

            if p.dw_xt_dma and p.dw_x_stationary:   # one ring tile per bundle: its DMAs, its matmuls' PE time
                for q, n in dw_xs_bundles(g, p, span):
                    bundle_pe = sum(max(min(64, m_of(t, nb, tn)), g.c_out) for t, nb, tn in
                                    dw_xs_row_chunks(g, p, q, n)) * Wo * (4 if fp32 else 1)
                    xt_dma_cost(c, g, p.dw_ci_tile, ci, (d_base + st[0], h_base + st[1], cd, ch),
                                (q * kw_n, (q + n) * kw_n), bundle_pe / c.hw.tensor_ghz, one_tile=True,
                                bufs=xt_dma_bufs(p), copy=p.dw_xt_copy)
            elif p.dw_xt_dma:   # the PE work of one tile: its matmuls (every kw group and C_out tile)
                tile_pe = sum(max(min(64, co_t), kn * ci) for kn in kgroups) * n_co * Wo * (4 if fp32 else 1)
                xt_dma_cost(c, g, p.dw_ci_tile, ci, (d_base + st[0], h_base + st[1], cd, ch), span,
                            tile_pe / c.hw.tensor_ghz)
            else:
                _cost_fill(c, g, 1, ci, xlo, xhi, xext, [(x0[a] + xlo[a], x0[a] + xhi[a]) for a in range(3)],
                           x_side=True)
                cols = max(1, bank // ci)
                c.transpose(ci, nrows, fp32, pairs * xw)
                for c0 in range(0, xw, cols):
                    c.evict(min(cols, xw - c0) * ci, two, pairs)
            if p.dw_x_stationary:   # per bundle: stationary chunks (pairs x kw taps x ci), moving dy^T [rows, C_out]
                for q, n in dw_xs_bundles(g, p, (0, pairs * kw_n)):
                    bundle = dw_xs_row_chunks(g, p, q, n)
                    for t, nb, tn in bundle:
                        c.matmul(m_of(t, nb, tn), g.c_out, fp32, Wo)
                    for batch in _xs_row_batches(g, bundle):
                        alone = next((u for u, ch in enumerate(batch) if one is not None and ch[0] == one[0]), None)
                        for _b, _u0, k, _tn in dw_xs_fold_runs(batch, dw_xs_per_bank(g), alone):
                            _fold_cost(c, g, p, k * g.c_out, 1, copies)
                continue
            for kn in kgroups:
                c.matmul(co_t, kn * ci, fp32, pairs * n_co * Wo)
                _fold_cost(c, g, p, kn * ci, pairs * n_co, copies)


def _xs_row_batches(g: ConvGeom, row: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """The chunks of one x^T bundle in batches whose accumulators fit ``XS_MAX_BANKS`` banks."""
    per = dw_xs_per_bank(g) * XS_MAX_BANKS
    return [row[i:i + per] for i in range(0, len(row), per)]


def replay(c: CostSheet, rec: CostSheet, times: int = 1) -> None:
    """Charge ``rec`` (work recorded in one section, ``dw_pass_record``) to ``c``'s open section ``times``
    times: its busy time and counts, its load-ring units and pipelined steps, its first step's head."""
    c.add(rec, times=times)
    for name, n in rec.units.items():
        c.units[name] = c.units.get(name, 0) + n * times
    for name, n in rec.steps.items():
        c.steps[name] = c.steps.get(name, 0) + n * times
    for name, ns in rec.steps_head.items():
        c.steps_head[name] = max(c.steps_head.get(name, 0.0), ns)


@dataclass(frozen=True, eq=False)
class DwPass:
    """What charging one tap pass's dw items reads (``charge_dw_item``): the C_out pass's geometry ``g``, the
    pass's taps and C_in tiles, its flags, the row chunks per item and the box caches."""

    g: ConvGeom
    p: Plan
    hw: TargetFigures
    items: list
    span: tuple[int, int]
    ci_tiles: tuple[int, ...]
    ones: tuple[int, int, int] | None
    first_pass: bool        # the first C_in range's first tap pass (db's matmuls, the db_ones slot)
    own0: tuple[int, int] | None
    pid: int
    chunk: int
    n_chunks: int
    xpad: bool
    bank: int
    dw_head: float
    chunk_rows: list
    cache: dict             # box sheets by shape (every pass of the C_out pass)
    item_memo: dict         # box sheets by dw fields and box (the planning run)
    dw_key: tuple | None
    groups: dict            # the items' classes (``dw_item_classes``), once per C_out pass


def _box_sheet(ps: DwPass, od: tuple[int, int], oh: tuple[int, int], ow: tuple[int, int],
               first_box: bool) -> CostSheet:
    """The cost of one dw box (``_estimate_dw_item``), from the pass's cache or the planning memo."""
    g, p, span = ps.g, ps.p, ps.span
    row = p.dw_method is DwMethod.ROW_PACK
    _x0, xext, xlo, xhi = dw_x_fill(g, od, oh, None if row else ow)
    # (box mode: a band's cost depends on its width and x fill, not on where it lies)
    key = ((od[1] - od[0], oh[1] - oh[0]), tuple(xlo), tuple(xhi), tuple(xext), od[0] == 0, oh[0] == 0,
           span if p.dw_xt_dma else span[1] - span[0], ps.ci_tiles, ow if row else ow[1] - ow[0],
           ps.ones, first_box)
    if key not in ps.cache:
        # (the first box of this shape computes it: from the planning memo when a candidate with the same dw
        # fields computed that very box before; the pass's geometry in the key, as C_out passes of different
        # widths cost differently)
        mkey = (ps.dw_key, g, key, *od, *oh, ow, span) if ps.dw_key is not None else None
        ps.cache[key] = ps.item_memo.get(mkey) if mkey is not None else None
        if ps.cache[key] is None:
            ps.cache[key] = CostSheet(ps.hw)
            _estimate_dw_item(ps.cache[key], g, p, od, oh, list(ps.ci_tiles), ps.chunk, ps.n_chunks, ps.xpad,
                              ps.bank, span, ow, ps.ones, first_box)
            if mkey is not None:
                ps.item_memo[mkey] = ps.cache[key]
    return ps.cache[key]


def charge_dw_item(sheet: CostSheet, ps: DwPass, it: int) -> None:
    """Item ``it``'s dw (a box per W band, its dy loads, db's matmuls) charged to ``sheet``."""
    g, p = ps.g, ps.p
    _b, od, oh = ps.items[it]
    rows = (od[1] - od[0], oh[1] - oh[0])
    if rows[0] <= 0 or rows[1] <= 0:
        return
    row = p.dw_method is DwMethod.ROW_PACK
    ds, Wo = g.dtype_bytes, g.axes[2].o
    n_cp, co_tp = n_tiles(g.c_out, PMAX), min(PMAX, g.c_out)
    # a DwState per (C_in range, tap pass), one in all under shared dy: its first box copies
    first = it == 0 and (p.strategy is not Strategy.SHARED_DY or ps.first_pass)
    # box mode: one box per W band (dw_w_band), each with its own x band; row mode: whole rows
    for wi, ow in enumerate(((0, Wo),) if row else dw_w_bands(g, p)):
        sheet.add(_box_sheet(ps, od, oh, ow, first and wi == 0))
        sheet.ring_units(1)
    if row and p.strategy is not Strategy.SHARED_DY:
        # the x^T tiles its row passes stream: section_ns's steps
        tiles = (len(dw_xs_bundles(g, p, ps.span)) if p.dw_x_stationary
                 else max(1, (ps.span[1] - ps.span[0]) // g.kernel[2]))
        sheet.pipeline_steps(len(ps.chunk_rows[it]) * len(ps.ci_tiles) * tiles)
        sheet.pipeline_head(ps.dw_head)
    if p.strategy is not Strategy.SHARED_DY and not p.dw_dyt_dma:
        for w0, w1 in dw_w_bands(g, p):   # (W bands: one strided dy box each, runs of a row's band)
            wn = w1 - w0
            sheet.dma(co_tp * rows[0] * rows[1] * wn * ds,
                      (rows[1] * wn if (rows[1] == g.axes[1].o and wn == Wo) else wn) * ds, n_cp)
    if db_on_dw(p) and ps.first_pass and (ps.own0 is None or dw_db_program(g, p) == ps.pid):
        # ones-vector matmuls per dy^T column, one add per tile (tap split: one program)
        cols = (len(ps.chunk_rows[it]) * Wo if row
                else sum(cnt for w0, w1 in dw_w_bands(g, p)
                         for _s, cnt in box_block_sizes((0, 0, 0), (rows[0], rows[1], w1 - w0), PMAX)))
        sheet.matmul(co_tp, 1, g.dtype == "fp32", cols * n_cp)
        sheet.compute("vector", 1, 2, 1.0, n_cp, op="tensor_tensor")


def dw_item_classes(ps: DwPass) -> tuple[list[tuple[int, int]], list[int]]:
    """The items in classes of identical charges (``charge_dw_item``; the pass's and W bands' parts are the
    same for every item): their rows, whether each is the first item or starts an axis, its x band's fill
    on D and H, its row chunks. Returns (representative item, class size) per class and
    the class of each item, kept in ``ps.groups`` (the items are those of every pass of the C_out pass)."""
    if "classes" not in ps.groups:
        axis_parts: dict = {}   # (axis, rows) -> its part of the class (a few per axis)

        def part(a: int, rows: tuple[int, int]) -> tuple:
            if (a, rows) not in axis_parts:
                axis_parts[(a, rows)] = (rows[1] - rows[0], rows[0] == 0, _x_fill_axis(ps.g, a, rows))
            return axis_parts[(a, rows)]

        index: dict[tuple, int] = {}
        reps: list[list[int]] = []
        of = []
        for it, (_b, od, oh) in enumerate(ps.items):
            k = (it == 0, part(0, od), part(1, oh), tuple(ps.chunk_rows[it]) if ps.chunk_rows else ())
            if k not in index:
                index[k] = len(reps)
                reps.append([it, 0])
            reps[index[k]][1] += 1
            of.append(index[k])
        ps.groups["classes"] = ([(it, n) for it, n in reps], of)
    return ps.groups["classes"]


@lru_cache(maxsize=65536)
def _x_fill_axis(g: ConvGeom, a: int, rows: tuple[int, int]) -> tuple[int, int, int]:
    """(extent, valid lo, valid hi) of axis ``a`` (D or H) of the x band ``dw_x_fill`` gives output rows
    ``rows`` on it (its axes are independent)."""
    _x0, ext, lo, hi = dw_x_fill(g, rows if a == 0 else (0, 1), rows if a == 1 else (0, 1))
    return ext[a], lo[a], hi[a]


def dw_pass_record(ps: DwPass, section: str) -> CostSheet:
    """One tap pass's items charged (``charge_dw_item``) once per class of identical items
    (``dw_item_classes``) and times its size, in ``section``: the record (``replay``)."""
    classes, _of = dw_item_classes(ps)
    rec = CostSheet(ps.hw)
    rec.section(section)
    for it, n in classes:
        one = CostSheet(ps.hw)
        one.section(section)
        charge_dw_item(one, ps, it)
        replay(rec, one, n)
    return rec


def charge_dw_pass(c: CostSheet, ps: DwPass, section: str, records: dict) -> None:
    """One tap pass's items charged to ``c`` (open in ``section``). The passes of one C_out pass alike in
    what their items read (the first pass or not, the taps -- their count where only that matters -- and the
    C_in tiles) charge the same: ``records`` keeps each kind's ``dw_pass_record``."""
    p, span = ps.p, ps.span
    key = (ps.first_pass, span if (p.dw_xt_dma or p.dw_x_stationary) else span[1] - span[0], ps.ci_tiles)
    if key not in records:
        records[key] = dw_pass_record(ps, section)
    replay(c, records[key])
