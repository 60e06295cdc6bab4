"""The analytic estimate of a candidate: its sections (dx, dw, db), their busy time per engine and
how they compose into a modelled time.
"""
from __future__ import annotations

from collections import Counter
from itertools import pairwise

from .. import dx_toeplitz as toeplitz
from .. import pw_shared as pw
from ..costs import CostSheet, TargetFigures, compose_ns, flow_shop_ns
from ..dx_dpairs import dpair_slot_map, slot_runs
from ..geometry import ConvGeom, ceil_div
from ..methods.dw_kd_moving import estimate as kdm_estimate
from ..methods.dw_small_extent import estimate as dws_estimate
from ..methods.s2d_gemm import estimate as s2d_estimate
from ..methods.s2d_gemm import spec as s2d_spec
from ..schedule import (
    FILTER_RUN_CI_MAX,
    FILTER_RUN_ROWS,
    MOVING_MAX,
    PMAX,
    AxisBand,
    axis_fill,
    dw_x_extent,
    dx_packs,
    filter_stage_cols,
    n_tiles,
    tile_sizes,
)
from ..spec.compose import (
    DB_SCALAR_CHUNK,
    STREAMING_DW,
    db_on_dw,
    dx_band_early_legal,
    dx_prefetched,
    filters_after_first_chunk,
    pw_shared_on,
)
from ..spec.dw_options import (
    cast_group,
    dw_co_pass_geoms,
    dw_db_program,
    dw_defer_finish,
    dw_direct,
    dw_fused_exchange,
    dw_own_taps,
    dw_program_items,
    dw_row_chunk_rows,
    dw_tap_passes,
)
from ..spec.dw_xs import db_ones_chunk, dw_xs_bundle
from ..spec.dx_options import (
    _filter_group,
    dx_ci_split_on,
    dx_co_chunks,
    dx_dy_clip_legal,
    dx_program_items,
    dx_t_active,
    dx_w_bands,
    filters_by_dma,
)
from ..spec.items import _split, db_chunk, dw_items
from ..spec.psum import PSUM_BANK_BYTES
from ..spec.record import DbMethod, DwMethod, DxMethod, Plan, Strategy, replace
from ..xt_rows import xt_dma_bufs, xt_dma_setup_cost
from .budget import _dx_dy_extent, _gemm_dma_chunks
from .estimate_dw import (
    DwPass,
    _cost_fill,
    _estimate_xs_finish,
    charge_dw_pass,
)
from .estimate_dx import _dx_band_sheet, _estimate_dpairs, _estimate_dx_t, _run_cached, estimate_dx_bands
from .estimate_waits import (
    _dw_exchange_ns,
    _dw_first_x_wait_ns,
    _dw_head_ns,
    _dx_head_ns,
    _dx_t_fill_ns,
    _dx_tail_ns,
    _first_band_placement,
    _lone_dma_ns,
    _shared_region_fills,
)


def _estimate(g: ConvGeom, p: Plan, hw: TargetFigures, memo: dict | None = None) -> tuple[float, dict[str, float]]:
    """Modelled time (under LNC2 the later program's, as nkisim's makespan) and program 0's per-engine
    busy time. ``memo``: one planning run's store of the work its candidates share (a dw tiling with every
    dx choice, dw:kd_moving's dx and db part with every plain plan), each entry keyed by everything its
    computation reads, so that an estimate is the same with or without it."""
    if p.s2d_group:   # from the method's work list (kernels/methods/s2d_gemm)
        return s2d_estimate.estimate_us(g, s2d_spec.S2dOptions(p.s2d_group), p.lnc,
                                        (p.compute_dx, p.compute_dw, p.compute_db), hw)
    if p.dw_method is DwMethod.KD_MOVING:   # dw alone, then dx and db (kernels/methods/dw_kd_moving)
        t, busy = _memoized(memo, ("kdm", p.lnc), lambda: kdm_estimate.estimate_us(g, hw, p.lnc))
        if p.compute_dx or p.compute_db:
            rest = replace(p, compute_dw=False, dw_method=None)
            t_rest, busy_rest = _memoized(memo, ("rest", rest), lambda: _estimate(g, rest, hw, memo))
            # the rest's first loads (its fill) run under dw's end
            rest_fill = _memoized(memo, ("rest_fill", rest), lambda: _estimate_sheet(g, rest, hw, memo=memo)[1])
            hidden = min(rest_fill / 1000.0, kdm_estimate.overlap_us(g, hw, p.lnc))
            t, busy = t + t_rest - hidden, {e: busy.get(e, 0.0) + busy_rest.get(e, 0.0)
                                            for e in busy.keys() | busy_rest.keys()}
        return t, busy
    c, fill = _estimate_sheet(g, p, hw, memo=memo)
    total = _compose(c, g, p, fill)
    for pid in range(1, p.lnc):   # the split is uneven (tap units, db on one program, odd item counts)
        c1, fill1 = _estimate_sheet(g, p, hw, pid, memo=memo)
        total = max(total, _compose(c1, g, p, fill1))
    return total / 1000.0, {e: v / 1000.0 for e, v in c.busy.items()}


def _memoized(memo: dict | None, key, make):
    """``make()``, computed once per planning run (``memo``; None: every time)."""
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


# plan fields dw's box and row costs (``_estimate_dw_item``) never read: its memo entries ignore them
_DX_ONLY_FIELDS = frozenset({
    "dx_ci_tile", "dx_ci_outer", "dx_regions", "dx_transposed", "dx_pair_copies", "dx_toeplitz",
    "dx_toeplitz_merge", "dx_toeplitz_w", "dx_toeplitz_pair", "dx_w_band", "dx_ci_split", "dx_band_early",
    "filters_first", "pw_db_scalar", "pw_dyt_dma",
    "sbuf_bytes", "psum_banks", "estimated_us", "engine_us", "label", "candidates", "alternatives"})
# per gradient, dw's own boxes: the fields besides dw_* that its costs read (its legality checks: a W band
# needs dx not prefetched)
_DW_BOX_FIELDS = ("dy_shape", "x_shape", "w_shape", "stride", "padding", "dilation", "dtype", "target", "lnc",
                  "compute_dw", "strategy", "db_ones", "dx_prefetch")


def dw_item_key(p: Plan) -> tuple:
    """The plan fields dw's box and row costs may read: per gradient (its own boxes), the dw fields and
    ``_DW_BOX_FIELDS``; shared dy (dx's bands are its boxes), every field but dx's filter, C_in and method
    choices."""
    if p.strategy is Strategy.PER_GRADIENT:
        return tuple((k, v) for k, v in p.__dict__.items() if k.startswith("dw_")) + \
            tuple(getattr(p, k) for k in _DW_BOX_FIELDS)
    return tuple((k, v) for k, v in p.__dict__.items() if k not in _DX_ONLY_FIELDS)


def _compose(c: CostSheet, g: ConvGeom, p: Plan, fill: float) -> float:
    """``compose_ns`` of one program's sheet: its sections (``_sections``), their DMA queues and ahead loads."""
    return compose_ns(_sections(c, g, p), section_order(g, p), fill, c.hw, c.steps, c.steps_head, c.flow,
                      _sections_of(c.ahead_queues(), g, p), c.ahead_tail, _sections_of(c.queue_times(), g, p),
                      {k: v[""] for k, v in _sections_of({k: {"": v} for k, v in c.serial_floors().items()},
                                                           g, p).items()}, c.units)


def _pw_flow(c: CostSheet, g: ConvGeom, p: Plan, hw: TargetFigures, chunks: list, items: list,
             filters: tuple[float, float], db: str, head: float) -> None:
    """The shared-dy GEMM kernel's body as a DMA -> PE flow shop of its steps (``pw_shared.flow_steps``):
    dx's band work per chunk (``_dx_band_sheet``: PE, store), the filters with the first step; the first
    step's loads the fill charges (``head``) are not counted again."""
    # the first step runs C_out tile outer when the filters come per (C_out tile, tap) (nki_pw_shared)
    co_major = filters_by_dma(g, p) and g.c_in > FILTER_RUN_CI_MAX
    dx_work = []
    for _b, bd, bh in items:
        sheet = _dx_band_sheet(g, hw.name, p.dx_ci_tile, bd, bh)
        dx_work.append((sheet.busy["tensor"], sheet.busy["dma"]))
    c.flow_shop(pw.flow_steps(lambda: CostSheet(hw), g, chunks, dx_work, filters, db, p.pw_dyt_dma), head,
                pw.first_parts(g, co_major))


def _filter_transposes(c: CostSheet, g: ConvGeom, p: Plan, ci: int, n_ci: int) -> float:
    """The dx filters of one C_in tile of ``ci`` channels by ``dma_transpose`` from HBM, as the body issues
    them (``nki_filters.load_filters_t`` / ``nki_dx_dpairs.dpair_filters``): per C_out tile, D-phase pairs: a
    ``[co, n slots, ci]`` transpose per run of slots and side; tiny C_in (one tile): ``[co, rows]`` runs of
    (tap, ci) rows; else ``[co, ci]`` per tap. Returns the DMA ns charged."""
    ds = g.dtype_bytes
    ns = 0.0
    runs = ()
    if p.dx_dphase_pairs:
        slots = dpair_slot_map(g, p)
        runs = [r for side in (0, 1) for r in slot_runs(slots, side)]
    for co in tile_sizes(g.c_out, PMAX):
        if p.dx_dphase_pairs:
            for _s0, _t0, _step, n in runs:
                ns += c.dma_transpose((co, n, g.c_in), ds, src_shape=(g.c_in, n, co))
        elif n_ci == 1 and ci == g.c_in <= FILTER_RUN_CI_MAX:
            rows = g.taps * g.c_in
            step = max(1, FILTER_RUN_ROWS // g.c_in) * g.c_in
            for r0 in range(0, rows, step):
                n = min(rows, r0 + step) - r0
                ns += c.dma_transpose((co, n), ds, src_shape=(n, co))
        else:
            ns += c.dma_transpose((co, ci), ds, count=g.taps, src_shape=(ci, co))
    return ns


# the depth of dx's plane rings (nki_dx, nki_dx_dpairs, nki_dx_toeplitz: Pool(2, ...)): how many bands' stores
# can be in flight while the next band computes
PLANE_BUFS = 2


def _store_lanes(items: list) -> int:
    """How many chains dx's serial stores form: the stores of one sample wait for one another (their spans
    overlap), those of different samples do not; when the bands alternate between samples (the band-major
    order of D-phase pairs under LNC2) their stores overlap as far as the plane ring lets them. (With one
    band per sample the ring holds the next sample's band back behind the first's stores: one chain.)"""
    samples = [b for b, _bd, _bh in items]
    alternate = len(samples) > len(set(samples)) > 1 and all(x != y for x, y in pairwise(samples))
    return min(PLANE_BUFS, len(set(samples))) if alternate else 1


def section_order(g: ConvGeom, p: Plan) -> list[str]:
    """The kernel's sections in issue order (conv3d_bwd.py); shared_dy runs dx and dw's boxes as one."""
    if p.strategy is Strategy.SHARED_DY:
        return ["dx_filters", "dx+dw", "dx_tail", "dw_finish", "db", "db_store"]
    if p.filters_first and p.compute_dw and not filters_after_first_chunk(g, p):
        # issued before dw: ahead of dw's first loads in the DMA queues
        head, dx = ["dx_filters", "dw"], ["dx_prefetch", "dx", "dx_tail"]
    else:
        head, dx = ["dw"], ["dx_filters", "dx_prefetch", "dx", "dx_tail"]
    if dw_defer_finish(g, p) and p.dw_method in STREAMING_DW:   # LNC2: dw's adds, casts and stores after dx
        # (dw:small_extent runs its own schedule: its last store follows its last matmul, before dx)
        return [*head, *dx, "dw_finish", "db", "db_store"]
    return [*head, "dw_finish", *dx, "db", "db_store"]


def _estimate_sheet(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0,
                    memo: dict | None = None) -> tuple[CostSheet, float]:
    """Program ``pid``'s busy time per engine and kernel section (``CostSheet.section``), and the fill (ns):
    the latencies no busy time covers (first loads, exposed waits, LNC2 rendezvous)."""
    c = CostSheet(hw)
    ds = g.dtype_bytes
    fp32 = g.dtype == "fp32"
    two = ds == 2
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    W, Wo = g.axes[2].n, g.axes[2].o
    fill = 2 * hw.dma_fixed_ns
    dw_head = 0.0
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dw_method not in (DwMethod.DMA_GEMM,
                                                                                    DwMethod.SMALL_EXTENT):
        # dw runs first: the PE waits for its first dy box and x (band or x^T tile)
        dw_head = _dw_head_ns(g, p, hw, pid)
        fill += dw_head
        if p.dw_head_split:   # the pipeline's first-step loads (section_ns) overlap the pieces: what it
            dw_head = _dw_head_ns(g, replace(p, dw_head_split=False), hw, pid)   # credits is the unsplit head
    # (dx's first filter group is the "dx_filters" lead section: compose_ns charges what the sections
    # before it do not hide; with dx first -- shared_dy, dx only -- all of it)
    if p.compute_dx:
        c.section("dx_filters")
        ci_tiles = tile_sizes(g.c_in, p.dx_ci_tile)
        items = dx_program_items(g, p, pid)
        if dx_ci_split_on(g, p):   # this program's C_in tiles
            ci_tiles = _split(ci_tiles, p.lnc, pid)
        grp = _filter_group(g, p)
        before_filters = dict(c.busy)   # (shared-dy pointwise: the filters join its first step's flow)
        if p.dx_regions > 1 and g.c_out < PMAX // p.dx_regions:   # dy ring zeroed once (gaps between regions)
            ext = _dx_dy_extent(g, p.dx_band)
            c.compute("gpsimd", ext[0] * ext[1] * ext[2], 0, 1.0, p.dy_bufs, op="memset")
        if p.dx_regions > 1:   # block-diagonal filters: a DMA per region and tap group, [128, 128] transposes
            grp = max(1, min(g.taps, PSUM_BANK_BYTES // (PMAX * ds)))
            c.compute("gpsimd", grp * PMAX, 0, 1.0, 3, op="memset")
            c.dma(g.c_in * g.c_out * ds * grp, g.c_out * ds, ceil_div(g.taps, grp) * p.dx_regions)
            c.transpose(PMAX, PMAX, fp32, g.taps)
            c.evict(grp * PMAX, two, ceil_div(g.taps, grp))
            ci_tiles = []
        chunks = dx_co_chunks(g, p)

        def charge_filters(sheet: CostSheet, ci: int) -> None:
            """One C_in tile's filters: per tap a DMA, per (co tile, tap group) transposes + evict."""
            if filters_by_dma(g, p):   # dma_transpose from HBM, the body's destination tiles
                _filter_transposes(sheet, g, p, ci, len(ci_tiles))
                return
            for t0, t1 in chunks:   # (a very wide C_out, or a C_out chunk, stages in column chunks)
                width = min(g.c_out, t1 * PMAX) - t0 * PMAX
                cols = filter_stage_cols(width, ds)
                sheet.dma(ci * cols * ds * grp, cols * ds, ceil_div(g.taps, grp) * ceil_div(width, cols))
            sheet.transpose(ci, co_t, fp32, g.taps * n_co)
            sheet.evict(grp * ci, two, n_co * ceil_div(g.taps, grp))

        for i, ci in enumerate(ci_tiles):
            # C_in-outer: later groups load while the group before them computes (part of dx)
            # (shared-dy pointwise issues them inside its body, behind the first step's dy)
            c.section("dx+dw" if pw_shared_on(p) else "dx_filters" if i == 0 or not p.dx_ci_outer else "dx")
            if filters_by_dma(g, p):   # dma_transpose from HBM, the body's destination tiles: ahead loads
                with c.ahead():        # (tiles of their own per C_in group: no buffer holds them)
                    _filter_transposes(c, g, p, ci, len(ci_tiles))
                if i > 0 and p.dx_ci_outer and not pw_shared_on(p):   # the last group's matmuls wait for it
                    c.ahead_share(1.0 / len(ci_tiles))
                continue
            charge_filters(c, ci)
        filters = (c.busy["dma"] - before_filters["dma"], c.busy["tensor"] - before_filters["tensor"])
        if len(chunks) > 1:   # dx_co_chunk: the filters load again for every band after the first
            c.section("dx")
            again = CostSheet(hw)
            for ci in ci_tiles:
                charge_filters(again, ci)
            c.add(again.scaled(max(0, len(items) * len(dx_w_bands(g, p)) - 1)))
        c.section("dx+dw" if p.strategy is Strategy.SHARED_DY else "dx")
        reloads = len(ci_tiles) if p.dx_ci_outer else 1
        loads = CostSheet(hw)   # one pass of dy band loads, charged once per reload
        if reloads:
            db_fold = p.compute_db and p.db_method is DbMethod.FOLD and not p.compute_dw
            w_bands = dx_w_bands(g, p)
            clip = dx_dy_clip_legal(g, p)   # (dx_dy_clip: the clipped buffers' fills)
            first_fill, loads = _memoized(memo, ("dx_loads", tuple(items), tuple(w_bands), db_fold, p.pw_db_scalar,
                                            p.dx_regions, clip),
                                     lambda: _dx_loads(g, p, hw, items, w_bands, db_fold, clip))
            if first_fill is not None and (p.strategy is Strategy.SHARED_DY or not p.compute_dw) \
                    and not pw_shared_on(p):   # (shared-dy pointwise: its first step, below)
                head = _dx_head_ns(g, hw, *first_fill)   # dx runs first: its first dy band
                if p.dx_dphase_pairs and filters_by_dma(g, p):
                    # the slot tiles come by a few 3-D transposes (``slot_runs``) issued with the first band:
                    # both are in flight from the start and the first group needs only its slots' runs, so
                    # the later of the two counts, not their sum (down_s2 LNC1 shared dy: head 2.9 us
                    # modelled, 3.8 summed)
                    head = max(0.0, head - _filter_transposes(CostSheet(hw), g, p, g.c_in, 1))
                if p.strategy is Strategy.SHARED_DY and p.compute_dw:
                    # dw's first box reads its x (band, or x^T tile) after the band's dy^T transposes: the
                    # wait for it beyond those, as per gradient (down_s2: a 1 MB x band on 64 partitions)
                    head += _dw_first_x_wait_ns(g, p, hw, pid)
                fill += head
            first_place = _first_band_placement(g, hw, [first_fill])
            if first_place and dx_band_early_legal(g, p):
                if p.dx_band_early:   # GpSimd places the first band (once), not VectorE
                    c.busy["vector"] -= n_co * first_place[0]
                    c.busy["gpsimd"] += n_co * first_place[1]
                else:   # dw runs first: the placement queues behind dw's last evictions on VectorE, exposed
                    fill += n_co * first_place[0]
        for _ in range(reloads):
            c.add(loads)
        if dx_t_active(p):
            _estimate_dx_t(c, g, p, hw, items, memo)
            if dx_prefetched(p):   # loaded during dw: a lead that dw's idle DMA time hides (compose_ns)
                c.exposed("dx_prefetch", _dx_t_fill_ns(g, p, hw, items))
            else:
                fill += _dx_t_fill_ns(g, p, hw, items)
        elif p.dx_method is DxMethod.TOEPLITZ:
            tzm = p.dx_toeplitz_merge
            if p.dx_toeplitz_w:
                toeplitz.estimate_grids_w(c, g, p.dx_toeplitz, tzm, p.dx_toeplitz_w, p.dx_toeplitz_pair,
                                          toeplitz.fast_grid(g, p))
            else:
                toeplitz.estimate_grids(c, g, p.dx_toeplitz, p.dx_toeplitz_pair, tzm, p.dx_toeplitz_quad)
            if items and p.dx_toeplitz_w:   # the first block's split pairs run during the first copy
                e, nb, _copy = toeplitz.first_block_expansion(g, hw.name, p.dx_toeplitz, tzm, p.dx_toeplitz_w,
                                                                p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band),
                                                                items[0][1], items[0][2])
                c.matmul(PMAX, nb, g.dtype == "fp32", e)
                toeplitz.first_band_adjust(c, g, p, _dx_dy_extent(g, p.dx_band), items[0][1], items[0][2])
                fill += max(0.0, toeplitz.first_copy_ns(g, hw, p.dx_toeplitz, p.dx_toeplitz_pair,
                                                        _dx_dy_extent(g, p.dx_band), items[0][1], items[0][2], tzm)
                            - 2 * e * max(64, nb) / hw.tensor_ghz)
            elif items:
                fill += toeplitz.first_copy_ns(g, hw, p.dx_toeplitz, p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band),
                                               items[0][1], items[0][2], tzm, p.dx_toeplitz_quad)
                tail = toeplitz.store_tail_ns(g, hw, p.dx_toeplitz, p.dx_band, items[-1][1], items[-1][2], tzm)
                fill += tail
                c.serial_trail(tail + hw.dma_fixed_ns)
            for _b, bd, bh in items:
                if p.dx_toeplitz_w:
                    c.add(_run_cached(memo, toeplitz.band_sheet_w, g, hw.name, p.dx_toeplitz, p.dx_band, bd, bh,
                                      p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band), tzm, p.dx_toeplitz_w))
                else:
                    c.add(_run_cached(memo, toeplitz.band_sheet, g, hw.name, p.dx_toeplitz, p.dx_band, bd, bh,
                                      p.dx_toeplitz_pair, _dx_dy_extent(g, p.dx_band), tzm, p.dx_toeplitz_quad))
        elif p.dx_dphase_pairs:
            _estimate_dpairs(c, g, p, hw, items, memo)
        elif p.dx_regions == 1:   # (the C_in split: this program's C_in tiles)
            estimate_dx_bands(c, g, p, hw, items, ci_tiles, dx_w_bands(g, p), len(chunks), dx_dy_clip_legal(g, p),
                              dx_ci_split_on(g, p), memo)
        else:   # one band's compute per pack; its store once per region
            for pack in dx_packs(g, items, p.dx_regions):
                _b, bd, bh = pack[0]
                c.add(_run_cached(memo, _dx_band_sheet, g, hw.name, PMAX, bd, bh, True))
                rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
                c.dma(g.c_in * rows * W * ds, (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W)
                      * ds, len(pack) - 1, serial=g.c_in if g.c_in > 1 else 0)
        if items:
            c.serial_lanes(_store_lanes(items))
            c.serial_start(len(items))
        if items and p.dx_method is not DxMethod.TOEPLITZ and not pw_shared_on(p):
            # (toeplitz: its store_tail_ns, in the fill; shared-dy pointwise: a step's store, below)
            tail = _dx_tail_ns(g, p, hw, items[-1])
            c.exposed("dx_tail", tail)
            c.serial_trail(tail + hw.dma_fixed_ns)
    if p.compute_dw:
        c.section("dx+dw" if p.strategy is Strategy.SHARED_DY else "dw")
    if pw_shared_on(p):   # dw's share of the shared-dy pointwise kernel (dx:gemm is charged above)
        chunks = [pw.chunk_of(g, it) for it in dx_program_items(g, p, pid)]
        head = pw.head_ns(g, hw, chunks)
        fill += head
        db_where = ("scalar" if p.pw_db_scalar else "pe") if db_on_dw(p) else ""
        pw.estimate_dw(c, g, chunks, db_where, p.lnc, p.pw_dyt_dma)
        if p.compute_dx:
            _pw_flow(c, g, p, hw, chunks, dx_program_items(g, p, pid), filters, db_where, head)
        nb, run = pw.store_tail_bytes(g, chunks)
        c.exposed("dx_tail", _lone_dma_ns(hw, nb, run, min(PMAX, g.c_in)) - hw.dma_fixed_ns if nb else 0.0)
        if p.lnc == 2:   # the reduce-scatter of dw:dma_gemm's positions split, under the last dx steps
            half = ceil_div(g.c_out, 2)
            ci_t = min(PMAX, g.c_in)
            mine = n_tiles(g.c_in, PMAX) * len(pw.lay_of(g).shifts)   # per tap and C_in tile
            c.compute("vector", g.c_out, 1, 1.0, mine, op="tensor_copy")
            c.dma(ci_t * half * 4, half * 4, mine)
            c.compute("vector", half, 2, 1.0, mine, op="tensor_tensor")
            c.dma(ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, mine)
            # the exchange (a rendezvous), the last add and store, beyond what runs after the last send
            # window's matmuls: the own columns' dw, the held-back dx steps and their store (charged above)
            ex = _lone_dma_ns(hw, ci_t * half * 4, half * 4, ci_t) * (1 if db_on_dw(p) else 0.5)
            add = (max(64, 2 * half) + 60) / hw.vector_ghz
            last = _lone_dma_ns(hw, ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, ci_t)
            after = pw.dx_tail_pe_ns(g, hw, chunks) + pw.own_after_send_pe_ns(g, hw, chunks, pid)
            fill += max(0.0, ex + add + last - after - (_lone_dma_ns(hw, nb, run, min(PMAX, g.c_in)) if nb else 0.0))
    elif p.compute_dw and p.dw_method is DwMethod.SMALL_EXTENT:   # its work list (methods/dw_small_extent)
        c.add(dws_estimate.program_sheet(g, p.lnc, pid, db_on_dw(p), hw))
        head = dws_estimate.head_ns(g, hw)
        fill += head
        # its DMA is a pipeline beside the PE (loads first, stores as groups complete), not a stall share
        c.flow_shop(dws_estimate.flow_steps(g, p.lnc, pid, db_on_dw(p), hw), head)
        c.exposed("dw_finish", dws_estimate.tail_ns(g, p.lnc, pid, hw))
    elif p.compute_dw and p.dw_method is DwMethod.DMA_GEMM:
        npos = g.axes[0].o * g.axes[1].o * Wo
        by_pos = p.lnc == 2 and p.dw_split == "positions"
        tiles_ = g.batch * ceil_div(npos, PMAX)
        mine = len(_gemm_dma_chunks(g, 1 if by_pos else p.lnc)[0 if by_pos else pid])
        if by_pos:   # half the position tiles; per C_in tile a reduce-scatter of the C_out halves
            tiles_ = ceil_div(tiles_, 2)
            half = ceil_div(g.c_out, 2)
            ci_t = min(PMAX, g.c_in)
            c.compute("vector", g.c_out, 1, 1.0, mine, op="tensor_copy")           # PSUM -> fp32 partial
            c.dma(ci_t * half * 4, half * 4, mine)                                  # the exchange
            c.compute("vector", half, 2, 1.0, mine, op="tensor_tensor")             # add into the output dtype
            c.dma(ci_t * (g.c_out - half) * ds, (g.c_out - half) * ds, mine)       # program 0's half: the larger
            # pipelined over the C_in tiles: the last tile's exchange (a rendezvous) is exposed
            fill += _lone_dma_ns(hw, ci_t * half * 4, half * 4, ci_t)
        blocks = [min(MOVING_MAX, g.c_out - s_) for s_ in range(0, g.c_out, MOVING_MAX)]
        # per position tile of n <= 128 positions, dma_transpose from HBM: dy^T [n, co] per C_out tile and
        # x^T [n, ci] per C_in tile of this program (nki_dw_gemm); n fills one block row whatever its size
        n = min(PMAX, npos)
        for co in tile_sizes(g.c_out, PMAX):
            c.dma_transpose((n, co), ds, count=tiles_, src_shape=(co, n))
        ci_sizes = tile_sizes(g.c_in, PMAX)
        for t in _gemm_dma_chunks(g, 1 if by_pos else p.lnc)[0 if by_pos else pid]:
            c.dma_transpose((n, ci_sizes[t]), ds, count=tiles_, src_shape=(ci_sizes[t], n))
        for cn in blocks:
            c.matmul(PMAX, cn, fp32, tiles_ * mine)
        if db_on_dw(p):
            c.matmul(co_t, 1, fp32, tiles_ * n_co)
        if not by_pos:
            c.evict(sum(blocks), two, mine)
            c.dma(min(PMAX, g.c_in) * g.c_out * ds, g.c_out * ds, mine)
    elif p.compute_dw:
        dw_key = dw_item_key(p) if memo is not None else None
        item_memo = memo.setdefault("dw_item", {}) if memo is not None else {}
        # C_out passes (dw_co_pass): each a whole dw of its C_out channels (dy and x^T streamed again)
        for gd in dw_co_pass_geoms(g, p):
            n_cp, co_tp = n_tiles(gd.c_out, PMAX), min(PMAX, gd.c_out)
            items = dw_items(gd, p) if p.dw_split == "taps" else dw_program_items(gd, p, pid)
            own0 = dw_own_taps(gd, p, pid)
            chunk = min(p.dw_co_chunk, n_cp)
            n_chunks = ceil_div(n_cp, chunk)
            xpad = any(a.k > 1 or a.lo or a.hi or a.s > 1 for a in gd.axes)
            bank = PSUM_BANK_BYTES // ds
            # a box's cost depends on its rows, its x fill, the C_in tiles and the number of taps in the pass
            # (not on which taps): shared by every C_in range and tap pass of the same shape
            cache: dict = {}
            pass_records: dict = {}   # per pass class (dw_pass_record): its items' charges
            item_groups: dict = {}    # the items' classes (dw_item_classes)
            # each item's row chunks (row mode)
            chunk_rows = dw_row_chunk_rows(gd, p, items) if p.dw_method is DwMethod.ROW_PACK else []
            for r0 in range(0, gd.c_in, p.dw_ci_range):
                width = min(p.dw_ci_range, gd.c_in - r0)
                ci_tiles = tile_sizes(width, p.dw_ci_tile)
                for pi, span in enumerate(dw_tap_passes(gd, p, pid)):
                    sec = "dx+dw" if p.strategy is Strategy.SHARED_DY else "dw"
                    c.section(sec)
                    if p.dw_xt_dma:
                        xt_dma_setup_cost(c, gd, p.dw_ci_tile, dw_xs_bundle(gd, p) if p.dw_x_stationary else 1)
                    # db_ones: the chunk whose stationary takes the ones slot (the db program's first pass)
                    ones = (db_ones_chunk(gd, p, span) if p.db_ones and r0 == 0 and pi == 0
                            and (own0 is None or dw_db_program(gd, p) == pid) else None)
                    if ones is not None:   # the ones slot of every bundle tile, once, when dw's state is made:
                        # ahead of dw's first x^T zero-row memsets on GpSimd, so exposed at dw's start (dilated_d2,
                        # C_in 64: 3 x 4.4k elements, ~6.5 us; the stem's 3 x 207 elements: ~0.3 us)
                        ones_sheet = CostSheet(hw)
                        ones_sheet.compute("gpsimd", dw_x_extent(gd.axes[2], Wo) * p.dw_ci_tile, 0, 1.0,
                                           xt_dma_bufs(p) if p.dw_xt_dma else 2, op="memset")
                        c.add(ones_sheet)
                        fill += ones_sheet.busy["gpsimd"]
                    first_pass = r0 == 0 and pi == 0
                    ps = DwPass(gd, p, hw, items, span, tuple(ci_tiles), ones, first_pass, own0, pid, chunk,
                                n_chunks, xpad, bank, dw_head, chunk_rows, cache, item_memo, dw_key,
                                item_groups)
                    charge_dw_pass(c, ps, sec, pass_records)
                    c.section("dw_finish")
                    if p.dw_x_stationary:
                        xs_fill = _estimate_xs_finish(c, gd, p, hw, width, span, pid)
                        if p.strategy is Strategy.SHARED_DY or p.compute_dx:
                            # a trail: shared_dy at the end, beside dx's last store; per gradient, the finish has
                            # no PE work, so the in-order PE goes on with dx while the LNC2 exchange, the adds and
                            # the stores run (unet3d LNC2: dx's matmuls start right after dw's last one)
                            c.exposed("dw_finish", xs_fill)
                        else:
                            fill += xs_fill
                        continue
                    # finalize: (LNC2) exchange + add, cast, transposes, stores
                    n_span = span[1] - span[0]
                    own = dw_own_taps(gd, p, pid)
                    # the reduce-scatter: program 0 stores the first ceil(n/2) taps, program 1 the rest
                    taps_here = n_span if own is not None else (ceil_div(n_span, p.lnc) if pid == 0
                                                                else n_span - ceil_div(n_span, p.lnc))
                    grp = cast_group(g, width)
                    fused = dw_fused_exchange(g, p)   # the add of the other's partial is the cast
                    if p.lnc == 2 and own is None:
                        ex = _dw_exchange_ns(c, gd, hw, co_tp, n_cp, taps_here, width, grp, fused, dw_defer_finish(gd, p))
                        if p.strategy is Strategy.SHARED_DY:   # at the end, beside dx's last store: a trail
                            c.exposed("dw_finish", ex)
                        else:
                            fill += ex
                    for t0 in range(0, taps_here, grp):
                        tn = min(grp, taps_here - t0)
                        for k in range(n_cp if not dw_direct(gd, p) else 0):
                            c.compute("vector" if k % 2 == 0 else "gpsimd", tn * width, 2 if fused else 1, 1.0, 1,
                                      op="tensor_tensor" if fused else "tensor_copy")
                    for ci in tile_sizes(width, PMAX):
                        c.transpose(co_tp, ci, fp32, taps_here * n_cp)
                        c.evict(gd.c_out, two, taps_here * max(1, ceil_div(gd.c_out * ds, PSUM_BANK_BYTES)))
                        c.dma(ci * gd.c_out * ds * grp, gd.c_out * ds, ceil_div(taps_here, grp))

    if p.compute_db:
        c.section("db" if p.db_method is DbMethod.STANDALONE else "db_store")
        if p.db_method is DbMethod.STANDALONE:
            npos = g.axes[0].o * g.axes[1].o * Wo
            chunk = db_chunk(g)
            per_b = ceil_div(npos, chunk)
            per = ceil_div(g.batch, p.lnc)
            bs = max(0, min(g.batch, (pid + 1) * per) - min(g.batch, pid * per))
            c.dma(co_t * min(chunk, npos) * ds, min(chunk, npos) * ds, bs * per_b * n_co)
            c.compute("vector", min(chunk, npos), 1, 1.0, bs * per_b * n_co, op="tensor_reduce")
            c.compute("vector", 1, 1, 1.0, bs * per_b * n_co, op="tensor_tensor")
        if p.db_ones:   # one row [1, C_out] of dw's accumulator
            c.dma(g.c_out * 4, g.c_out * 4, 1)
        elif p.dw_method is DwMethod.SMALL_EXTENT and db_on_dw(p):
            pass   # (its store is in dw:small_extent's work list)
        else:
            c.dma(co_t * 4, 4, n_co)
    if p.dw_interleave:
        _interleaved_flow(c, g, p)
    return c, fill


def _dx_loads(g: ConvGeom, p: Plan, hw: TargetFigures, items: list, w_bands: list, db_fold: bool,
              clip: bool = False) -> tuple[tuple | None, CostSheet]:
    """One pass of dx's dy band loads (a load per item and W band): the first load's (lo, hi, ext, valid) fill
    (None: no dy rows) and their cost, each kind of load costed once and charged as many times as there are
    loads of it (``_dx_loads_by_axis``; band by band where packs share fills: ``_dx_loads_by_band``);
    ``db_fold``: db folds on these loads; ``clip``: the clipped bands' buffers (``dx_dy_clip``). Reads of ``p``:
    its ``dx_regions`` (packs sharing a fill) and ``pw_db_scalar`` (db's engine), which the caller's memo key
    holds."""
    first = _band_fill(g, items[0], w_bands[0], clip) if items and w_bands else None
    if p.dx_regions > 1:
        return first, _dx_loads_by_band(g, p, hw, items, w_bands, db_fold, clip)[1]
    return first, _dx_loads_by_axis(g, p, hw, items, w_bands, db_fold, clip)


def _band_fill(g: ConvGeom, item: tuple, bw: AxisBand, clip: bool) -> tuple | None:
    """The (lo, hi, ext, valid) fill of one load (an item's D and H bands, W band ``bw``); None: no dy rows."""
    _b, bd, bh = item
    axes = [axis_fill(g.axes[a], b_, clip) for a, b_ in enumerate((bd, bh, bw))]
    if any(f is None for f in axes):
        return None
    return tuple(list(v) for v in zip(*axes))


def _charge_folds(loads: CostSheet, p: Plan, n_co: int, folds: Counter) -> None:
    """db folded on the loads: ``folds`` counts the loads by their owned positions."""
    for own, n in folds.items():
        if p.pw_db_scalar:   # ScalarE activations accumulating into db's column
            per = max(1, ceil_div(own, DB_SCALAR_CHUNK))
            loads.compute("scalar", own / per, 1, 1.0, n * n_co * per, op="activation")
        else:
            loads.compute("vector", own, 1, 1.0, n * n_co, op="tensor_reduce")
            loads.compute("vector", 1, 1, 1.0, n * n_co, op="tensor_tensor")


def _dx_loads_by_axis(g: ConvGeom, p: Plan, hw: TargetFigures, items: list, w_bands: list, db_fold: bool,
                      clip: bool) -> CostSheet:
    """The loads' cost from their fills per axis: a load's fill is its D, H and W bands'
    (``schedule.axis_fill``), every item has the same W bands, so the loads of one kind are (items of a D, H
    fill) x (W bands of a W fill)."""
    n_co, co_t, Wo = n_tiles(g.c_out, PMAX), min(PMAX, g.c_out), g.axes[2].o
    loads = CostSheet(hw)
    # (a fill's cost reads its lo, hi and extent per axis, not which dy rows it holds)
    w_fills = Counter(f[:3] if f else None for f in (axis_fill(g.axes[2], bw, clip) for bw in w_bands))
    w_live = sum(n for f, n in w_fills.items() if f is not None)
    dh: Counter = Counter()
    folds: Counter = Counter()   # db's folds by owned positions
    for _b, bd, bh in items:
        fd, fh = axis_fill(g.axes[0], bd, clip), axis_fill(g.axes[1], bh, clip)
        if fd is not None and fh is not None and w_live:
            dh[(fd[:3], fh[:3])] += 1
            if db_fold:
                folds[(bd.own1 - bd.own0) * (bh.own1 - bh.own0) * Wo] += w_live
    _charge_folds(loads, p, n_co, folds)
    for (fd, fh), n in dh.items():
        for fw, m in w_fills.items():
            if fw is not None:
                lo, hi, ext = zip(fd, fh, fw)
                _cost_fill(loads, g, n_co * n * m, co_t, list(lo), list(hi), list(ext), [])
    return loads


def _dx_loads_by_band(g: ConvGeom, p: Plan, hw: TargetFigures, items: list, w_bands: list, db_fold: bool,
                      clip: bool = False) -> tuple[list, CostSheet]:
    """The loads one by one: each load's fill (``_band_fill``) and their cost, each kind of fill (its extents,
    shared or not) costed once, times its loads."""
    n_co, co_t, Wo = n_tiles(g.c_out, PMAX), min(PMAX, g.c_out), g.axes[2].o
    loads = CostSheet(hw)
    fills = []
    folds: Counter = Counter()   # db's folds by owned positions
    fill_items = [it for it in items for _bw in w_bands]
    for it, bw in ((it, bw) for it in items for bw in w_bands):
        fills.append(_band_fill(g, it, bw, clip))
        if db_fold and fills[-1] is not None:
            folds[(it[1].own1 - it[1].own0) * (it[2].own1 - it[2].own0) * Wo] += 1
    _charge_folds(loads, p, n_co, folds)
    shared = _shared_region_fills(g, p, fill_items, fills)
    kinds: Counter = Counter()   # (a fill's cost reads its lo, hi and extents, not where its rows lie)
    for i, f in enumerate(fills):
        if f is not None:
            # a shared pack fill: its first region pays the memsets and placement
            kinds[(tuple(f[0]), tuple(f[1]), tuple(f[2]), shared.get(i, True))] += 1
    for (lo, hi, ext, fill_work), n in kinds.items():
        _cost_fill(loads, g, n_co * n, co_t, list(lo), list(hi), list(ext), [], fill_work=fill_work)
    return fills, loads


def _interleaved_flow(c: CostSheet, g: ConvGeom, p: Plan) -> None:
    """dw-interleaved (dx:toeplitz with dw's boxes between dx's items, one body): the body's loads -- dx's
    bands and dw's x^T bundles and dy^T by DMA -- stream ahead of the PE through the item and bundle rings,
    so its DMA is an even pipeline of dw's x^T tiles (``c.steps``' "dw"), not a stall share: it costs the PE
    the first step's loads beyond dw's head, which the fill charges (stem LNC1: no PE gap > 0.2 us in the
    body, the DMA share charged 5.2 us)."""
    secs = _sections(c, g, p)
    n = c.steps.get("dw", 0)
    if "dx" not in secs or n <= 0:
        return
    b = secs["dx"]
    even = [([(b["dma"] / n, k)], b["tensor"] / n, 0.0) for k in range(n)]
    c.flow["dx"] = flow_shop_ns(even, 1, c.hw.dma_fixed_ns) - c.steps_head.get("dw", 0.0)


def _sections_of(per_section: dict[str, dict[str, float]], g: ConvGeom, p: Plan) -> dict[str, dict[str, float]]:
    """Per-section figures keyed by queue (``CostSheet.queue_times``, ``ahead_queues``) merged as ``_sections``
    merges the busy time."""
    out = {k: dict(v) for k, v in per_section.items()}
    if p.dw_interleave and "dw" in out and "dx" in out:
        for q, ns in out.pop("dw").items():
            out["dx"][q] = out["dx"].get(q, 0.0) + ns
    return out


def _sections(c: CostSheet, g: ConvGeom, p: Plan) -> dict[str, dict[str, float]]:
    """The busy time per section of a cost sheet; with ``dw_interleave`` dw's boxes run between dx's
    items, so the two bodies are one section (dw's DMA and GpSimd work under dx's PE stream), as the kernel
    runs them and the budget counts them."""
    secs = c.section_busy()
    if p.dw_interleave and "dw" in secs and "dx" in secs:
        dw = secs.pop("dw")
        secs["dx"] = {e: secs["dx"][e] + dw[e] for e in dw}
        secs["dx"]["dma"] = c.merged_dma_ns(("dx", "dw"))
    return secs
