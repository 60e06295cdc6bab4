"""The candidate plans of a problem: strategy x methods x tilings that fit first."""
from __future__ import annotations

from .. import pw_shared as pw
from ..costs import TargetFigures
from ..geometry import ConvGeom, ceil_div
from ..methods.dw_kd_moving import spec as kdm_spec
from ..methods.dw_small_extent import spec as dws_spec
from ..methods.s2d_gemm import spec as s2d_spec
from ..schedule import MOVING_MAX, PMAX, n_tiles
from ..spec.compose import db_on_dw, pw_shared_on
from ..spec.dw_options import W_BAND_METHODS, dw_tap_unit
from ..spec.dw_xs import XS_MAX_BANKS, dw_xs_fits, dw_xs_per_bank
from ..spec.dx_options import W_BAND_METHODS as DX_W_BAND_METHODS
from ..spec.record import DbMethod, DwMethod, DxMethod, Plan, Strategy, replace
from .budget import _check, _fold_ok
from .problem import _dx_method
from .variants import _band_options, _with_regions


def _first_fits(make, options, hw: TargetFigures, g: ConvGeom, keep: int = 2) -> list:
    """The first ``keep`` options whose plan (built by ``make``) fits; else the last one tried."""
    out, tried = [], None
    for opt in options:
        tried = opt
        if not _check(g, make(opt), hw)[0]:
            out.append(opt)
            if len(out) >= keep:
                break
    return out or ([tried] if tried is not None else [])


def _enumerate(g: ConvGeom, base: dict, hw: TargetFigures) -> list[Plan]:
    """Candidate plans: strategy x dw method x db method x (dx tiling, dw tiling) that fit first."""
    cdx, cdw, cdb = base["compute_dx"], base["compute_dw"], base["compute_db"]
    n_co = n_tiles(g.c_out, PMAX)
    dw_ci = min(PMAX, g.c_in)
    gmax = max(1, min(g.taps, MOVING_MAX // dw_ci))
    if g.pointwise or g.taps == 1:
        dw_opts = [(DwMethod.GEMM if g.pointwise else DwMethod.TAP_GEMM, 1)]
    else:
        dw_opts = [(DwMethod.TAP_GEMM, 1)] + ([(DwMethod.TAP_PACK, gmax)] if gmax > 1 else [])
    dw_opts.append((DwMethod.ROW_PACK, max(1, min(g.axes[2].k, MOVING_MAX // dw_ci))))
    if g.pointwise and g.dtype_bytes == 2 and hw.name != "trn1":   # dma_transpose: 2-byte, NC-v3+
        dw_opts.append((DwMethod.DMA_GEMM, 1))
    elif not pw.shared_gemm_domain(g) and g.dtype_bytes == 2 and hw.name != "trn1" and cdx:
        dw_opts.append((DwMethod.DMA_GEMM, 1))   # K_d x 1 x 1: the shared-dy GEMM kernel only
    dw_opts = [(m, G_, False) for m, G_ in dw_opts]
    if not g.pointwise and dw_xs_fits(g):   # x^T stationary: box mode (tap groups) and row mode
        slots = max(1, PMAX // dw_ci)
        gx = max(1, min(g.taps, MOVING_MAX // dw_ci, slots * dw_xs_per_bank(g) * XS_MAX_BANKS))
        dw_opts += [(DwMethod.TAP_PACK if gx > 1 else DwMethod.TAP_GEMM, gx, True),
                    (DwMethod.ROW_PACK, max(1, min(g.axes[2].k, slots)), True)]
    if not cdw:
        dw_opts = [(None, 1, False)]
    dbs: list[DbMethod | None] = [None]
    if cdb:
        dbs = [DbMethod.FOLD, DbMethod.STANDALONE] if (cdx or cdw) else [DbMethod.STANDALONE]
    strategies = [Strategy.SHARED_DY, Strategy.PER_GRADIENT] if (cdx and cdw) else [Strategy.PER_GRADIENT]
    full = (g.axes[0].n, g.axes[1].n)
    dx_bands = [(d, g.axes[1].n) for d in _band_options(g.axes[0].n)] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:]]
    dw_bands = [(d, g.axes[1].o) for d in _band_options(g.axes[0].o)] + \
        [(1, h) for h in _band_options(g.axes[1].o)[1:]]
    ci_opts = [(dw_ci, False), (dw_ci, True)] + [(t, True) for t in (64, 32, 16, 8, 4, 2, 1) if t < dw_ci]
    ranges = [g.c_in] + [r for r in (512, 256, 128) if r < g.c_in] + ([dw_ci] if dw_ci < min(128, g.c_in) else [])
    ranges = [r for r in ranges if r % dw_ci == 0 or r == g.c_in]

    def plan(strat, dw_m, G, db, dxb, ci_tile, ci_outer, dwb, rng, cdx_=cdx, cdw_=cdw, taps=0, wband=0,
             dx_wband=0, dx_co=0, dw_co=0, dx_clip=False) -> Plan:
        b = dict(base, compute_dx=cdx_, compute_dw=cdw_)
        return Plan(**b, strategy=strat, dx_method=_dx_method(g) if cdx_ else None,
                    dw_method=dw_m if cdw_ else None, db_method=db, dx_band=dxb, dw_band=dwb,
                    dx_ci_tile=ci_tile, dx_ci_outer=ci_outer, dw_ci_tile=dw_ci, dw_tap_group=G,
                    dw_co_chunk=min(n_co, 2 if strat is Strategy.SHARED_DY else 3), dw_ci_range=rng,
                    dy_bufs=2, dw_tap_range=taps, dw_x_stationary=xs and cdw_,   # xs: the loop's dw option
                    dw_w_band=wband if cdw_ else 0, dx_w_band=dx_wband if cdx_ else 0,
                    dx_co_chunk=dx_co if cdx_ else 0, dw_co_pass=dw_co if cdw_ else 0,
                    dx_dy_clip=dx_clip and cdx_)

    plans: list[Plan] = []
    for dw_m, G, xs in dw_opts:
        # dx tilings that fit alone (the per-gradient dx section)
        dx_cfgs = [(full, dw_ci, False, 0, 0, False)]
        if cdx:
            dx_cfgs = []
            fitting = 0
            for ci_tile, ci_outer in ci_opts:
                fits = _first_fits(lambda band, t=ci_tile, o=ci_outer, m=dw_m, gg=G: plan(
                    Strategy.PER_GRADIENT, m, gg, None, band, t, o, full, g.c_in, cdw_=False),
                    dx_bands, hw, g)
                dx_cfgs += [(band, ci_tile, ci_outer) for band in fits]
                if not _check(g, plan(Strategy.PER_GRADIENT, dw_m, G, None, fits[0], ci_tile, ci_outer, full,
                                      g.c_in, cdw_=False), hw)[0]:
                    fitting += 1
                    # keep the C_in-outer variant too when it exists: smaller filter residency lets
                    # the filters load before dw
                    if fitting >= 2 or len(ci_opts) < 2 or g.c_in <= dw_ci:
                        break
            dx_cfgs = [cfg + (0, 0, False) for cfg in dx_cfgs]
            if not fitting:   # no whole-row dx band fits: W bands (dx_w_band), else C_out chunks (dx_co_chunk),
                # else (the kernel's reach far beyond dy) the same with dy bands clipped to the live taps' rows
                for clip in (False, True):
                    def dx_only(band, t, o, wb, co=0, m=dw_m, gg=G, c_=clip):
                        return plan(Strategy.PER_GRADIENT, m, gg, None, band, t, o, full, g.c_in, cdw_=False,
                                    dx_wband=wb, dx_co=co, dx_clip=c_)
                    whole = _dx_clip_rows(g, hw, dx_bands, ci_opts, dx_only) if clip else []
                    found = (whole or [cfg + (0,) for cfg in _dx_w_tilings(g, hw, dx_bands, ci_opts, dx_only)]
                             or _dx_co_tilings(g, hw, dx_bands, ci_opts, dx_only))
                    if found:
                        dx_cfgs = [cfg + (clip,) for cfg in found]
                        break
        dw_cfgs = [((g.axes[0].o, g.axes[1].o), g.c_in, 0, 0, 0)]
        if cdw and dw_m is not DwMethod.DMA_GEMM:
            def dw_only(band, r, taps, wb=0, co=0, m=dw_m, gg=G):
                return plan(Strategy.PER_GRADIENT, m, gg, None, full, dw_ci, False, band, r, cdx_=False, taps=taps,
                            wband=wb, dw_co=co)
            dw_cfgs = [cfg + (0,) for cfg in _dw_tilings(g, hw, dw_bands, ranges, dw_only)]
            if all(_check(g, dw_only(*cfg), hw)[0] for cfg in dw_cfgs):   # nothing fits: C_out passes
                dw_cfgs = _dw_co_tilings(g, hw, dw_bands, ranges, dw_only) or dw_cfgs
        for strat in strategies:
            if dw_m is DwMethod.DMA_GEMM and not g.pointwise and strat is not Strategy.SHARED_DY:
                continue   # (nki_dw_gemm is 1x1x1 only)
            for db in dbs:
                if strat is Strategy.SHARED_DY:
                    # the shared-dy GEMM kernel with a D kernel: one chunk per batch (the taps cross D planes)
                    # (LNC2: also half of each batch's D planes per item, so a program takes half a batch)
                    bands = ([full] + ([(ceil_div(g.axes[0].n, 2), g.axes[1].n)] if base["lnc"] == 2 and g.axes[0].n > 1
                                       else []) if dw_m is DwMethod.DMA_GEMM and not g.pointwise else dx_bands)
                    shared = _first_fits(lambda band, st=strat, m=dw_m, gg=G, d=db: plan(st, m, gg, d, band, dw_ci, False,
                                                           (g.axes[0].o, g.axes[1].o), g.c_in),
                                         bands, hw, g)
                    for band in shared:
                        p = plan(strat, dw_m, G, db, band, dw_ci, False, (g.axes[0].o, g.axes[1].o), g.c_in)
                        if db is not DbMethod.FOLD or _fold_ok(g, p):
                            # shared-dy pointwise (nki_pw_shared) has no dx variants
                            plans += _pw_variants(p) if pw_shared_on(p) else _with_regions(g, p, hw)
                    continue
                for dxb, ci_tile, ci_outer, dx_wb, dx_co, dx_clip in dx_cfgs:
                    for dwb, rng, taps, wb, dw_co in dw_cfgs:
                        p = plan(strat, dw_m, G, db, dxb, ci_tile, ci_outer, dwb, rng, taps=taps, wband=wb,
                                 dx_wband=dx_wb, dx_co=dx_co, dw_co=dw_co, dx_clip=dx_clip)
                        if db is not DbMethod.FOLD or _fold_ok(g, p):
                            plans += _with_regions(g, p, hw)
    return plans + _small_extent_plans(g, plans) + _s2d_plans(g, base, hw) + _kd_moving_plans(g, base, hw)


# the per-gradient plan fields that describe a streaming dw or its composition with dx, at their defaults:
# dw:small_extent runs alone before dx and takes its loops from the geometry
_SMALL_EXTENT_RESET = {
    "dw_tap_group": 1, "dw_co_chunk": 1, "dw_tap_range": 0, "dw_split": "positions",
    "dw_x_stationary": False, "dx_prefetch": False, "dw_xt_dma": False,
    "dw_interleave": False, "db_ones": False, "dw_dyt_dma": False, "dx_band_early": False, "dw_head_split": False}


def _small_extent_plans(g: ConvGeom, plans: list[Plan]) -> list[Plan]:
    """dw:small_extent (kernels/methods/dw_small_extent) with each distinct dx (and db) choice of the
    per-gradient candidates: few positions over the whole batch. ``filters_first`` is kept: dx's first
    filters load before dw, or (by DMA) right behind dw's x and dy loads, under dw's compute."""
    if dws_spec.applies(g):
        return []
    out: dict[Plan, None] = {}
    for p in plans:
        if p.compute_dw and p.strategy is Strategy.PER_GRADIENT and p.dw_method is not None:
            q = replace(p, dw_method=DwMethod.SMALL_EXTENT, dw_band=(g.axes[0].o, g.axes[1].o),
                        dw_ci_tile=min(PMAX, g.c_in), dw_ci_range=g.c_in, **_SMALL_EXTENT_RESET)
            out[q] = None
            out[replace(q, filters_first=False)] = None
    return list(out)


def _s2d_plans(g: ConvGeom, base: dict, hw: TargetFigures) -> list[Plan]:
    """The space-to-depth GEMM method's candidates (kernels/methods/s2d_gemm), one per tiling option."""
    cdx, cdw, cdb = base["compute_dx"], base["compute_dw"], base["compute_db"]
    if not (cdx or cdw):
        return []
    flags = (cdx, cdw, cdb)
    ci = min(PMAX, g.c_in)
    return [Plan(**base, strategy=Strategy.SHARED_DY, dx_method=DxMethod.S2D_GEMM if cdx else None,
                 dw_method=DwMethod.S2D_GEMM if cdw else None, db_method=DbMethod.FOLD if cdb else None,
                 dx_band=(1, 1), dw_band=(1, 1), dx_ci_tile=ci, dx_ci_outer=False, dw_ci_tile=ci,
                 dw_tap_group=1, dw_co_chunk=1, dw_ci_range=g.c_in, dy_bufs=1, s2d_group=o.group_tiles)
            for o in s2d_spec.options(g, base["lnc"], flags, hw.sbuf_usable)]


def _kd_moving_plans(g: ConvGeom, base: dict, hw: TargetFigures) -> list[Plan]:
    """dw:kd_moving (kernels/methods/dw_kd_moving) runs alone before dx: each dx (+ db) candidate of the
    problem without dw, with this dw in front; db folds on dx's bands or runs standalone."""
    if not base["compute_dw"] or kdm_spec.applies(g, base["lnc"], base["target"]):
        return []
    kd = {"compute_dw": True, "dw_method": DwMethod.KD_MOVING, "strategy": Strategy.PER_GRADIENT,
          "filters_first": False, "dx_prefetch": False, "dx_band_early": False, "dw_interleave": False}
    if base["compute_dx"]:
        rest = _enumerate(g, dict(base, compute_dw=False), hw)
        out = [replace(p, **kd) for p in rest if not p.s2d_group and p.strategy is Strategy.PER_GRADIENT]
        # db on dx's bands: VectorE tensor_reduce, or ScalarE activation accumulates (ScalarE is idle
        # beside dx's half of the evictions, VectorE also places dx's bands)
        return out + [replace(p, pw_db_scalar=True) for p in out if p.db_method is DbMethod.FOLD]
    ci = min(PMAX, g.c_in)
    return [Plan(**base, strategy=Strategy.PER_GRADIENT, dx_method=None, dw_method=DwMethod.KD_MOVING,
                 db_method=DbMethod.STANDALONE if base["compute_db"] else None, dx_band=(1, 1), dw_band=(1, 1),
                 dx_ci_tile=ci, dx_ci_outer=False, dw_ci_tile=ci, dw_tap_group=1, dw_co_chunk=1,
                 dw_ci_range=g.c_in, dy_bufs=1)]


# N: one dy^T sub-tile in N by DMA
_PW_DYT_DMA = (2, 4)


def _pw_variants(p: Plan) -> list[Plan]:
    """Shared-dy pointwise: db folded on the PE (ones-vector matmuls on dy^T) or by ScalarE activation reduces
    of the natural dy tiles (the PE is the bottleneck there; the dy^T evictions move to VectorE)."""
    out = [p]
    if db_on_dw(p):
        out.append(replace(p, pw_db_scalar=True))
    return out + [replace(q, pw_dyt_dma=k) for q in out for k in _PW_DYT_DMA]


def _dw_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ranges: list[int], make) -> list:
    """(band, C_in range, taps per pass, W band) of per-gradient dw: the C_in ranges largest first, the
    first that fits kept; only when none fits with every tap in one pass (the fp32 accumulators of a big
    filter, taps x C_out x 4 B per partition), tap passes: for each C_in range the fewest passes
    that fit (dy and x are streamed once per pass), from the two largest ranges that have one; only
    when none of those fits with whole W rows (box mode), W bands (``_dw_w_tilings``)."""
    found = _dw_row_tilings(g, hw, bands, ranges, make)
    if any(not _check(g, make(band, rng, taps), hw)[0] for band, rng, taps in found):
        return [(band, rng, taps, 0) for band, rng, taps in found]
    return _dw_w_tilings(g, hw, bands, ranges, make) or [(band, rng, taps, 0) for band, rng, taps in found]


def _dx_w_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ci_opts: list, make) -> list:
    """(band, C_in tile, C_in-outer, W band) of W-banded gather dx (``Plan.dx_w_band``) when no whole-row band
    fits: the widest W band whose smallest tiling (the last band and C_in option) fits, then at that width the
    first two fitting bands of the first C_in option that has one."""
    if make(bands[-1], *ci_opts[-1], 1).dx_method not in DX_W_BAND_METHODS:
        return []
    for wb in _band_options(g.axes[2].n)[1:]:
        if _check(g, make(bands[-1], *ci_opts[-1], wb), hw)[0]:
            continue
        for t, o in ci_opts:
            fits = [b for b in _first_fits(lambda band, t_=t, o_=o, w=wb: make(band, t_, o_, w), bands, hw, g)
                    if not _check(g, make(b, t, o, wb), hw)[0]]
            if fits:
                return [(band, t, o, wb) for band in fits]
    return []


def _dx_clip_rows(g: ConvGeom, hw: TargetFigures, bands: list, ci_opts: list, make) -> list:
    """(band, C_in tile, C_in-outer, W band, C_out chunk) of whole-row gather dx with clipped dy bands
    (``make`` builds them): the first two fitting bands of the first C_in option that has one."""
    for t, o in ci_opts:
        fits = [b for b in _first_fits(lambda band, t_=t, o_=o: make(band, t_, o_, 0), bands, hw, g)
                if not _check(g, make(b, t, o, 0), hw)[0]]
        if fits:
            return [(band, t, o, 0, 0) for band in fits]
    return []


def _dx_co_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ci_opts: list, make) -> list:
    """(band, C_in tile, C_in-outer, W band, C_out chunk) of gather dx in C_out chunks (``Plan.dx_co_chunk``) when
    no tiling of every C_out tile fits, whole rows or W bands. For each chunk (the C_out tiles halved down to
    one) whose smallest tiling (the last band and C_in option, one W column) fits: the first two fitting
    whole-row bands of the first C_in option that has one, else the W-banded tilings (``_dx_w_tilings``).
    Every chunk size is offered: a smaller chunk leaves room for larger bands (fewer, longer matmuls and
    fewer filter reloads), which the estimate weighs against more chunks."""
    n_co = n_tiles(g.c_out, PMAX)
    one_col = 1 if g.axes[2].n > 1 else 0
    if n_co < 2 or make(bands[-1], *ci_opts[-1], one_col, 1).dx_method not in DX_W_BAND_METHODS:
        return []
    out = []
    chunk = n_co
    while chunk > 1:
        chunk = ceil_div(chunk, 2)
        if _check(g, make(bands[-1], *ci_opts[-1], one_col, chunk), hw)[0]:
            continue
        for t, o in ci_opts:
            fits = [b for b in _first_fits(lambda band, t_=t, o_=o, k=chunk: make(band, t_, o_, 0, k), bands, hw, g)
                    if not _check(g, make(b, t, o, 0, chunk), hw)[0]]
            if fits:
                out += [(band, t, o, 0, chunk) for band in fits]
                break
        else:
            out += [cfg + (chunk,) for cfg in
                    _dx_w_tilings(g, hw, bands, ci_opts, lambda band, t, o, wb, k=chunk: make(band, t, o, wb, k))]
    return out


def _dw_co_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ranges: list[int], make) -> list:
    """(band, C_in range, taps per pass, W band, C_out pass) of box-mode dw in C_out passes (``Plan.dw_co_pass``)
    when no tiling of every C_out tile fits (``_dw_tilings``): the largest pass (the C_out tiles halved down to
    one) whose smallest tiling (the last band and C_in range, the fewest taps per pass, one W column) fits,
    with ``_dw_tilings``' fitting tilings at that pass; and the next smaller pass, which leaves room for
    larger boxes at the price of one more x^T rebuild per pass (the estimate weighs them)."""
    n_co = n_tiles(g.c_out, PMAX)
    if n_co < 2 or make(bands[-1], ranges[-1], 0).dw_method not in W_BAND_METHODS:
        return []
    unit = dw_tap_unit(g, make(bands[0], ranges[0], 0))
    taps = unit if unit < g.taps else 0
    one_col = 1 if g.axes[2].o > 1 else 0
    out = []
    chunk = n_co
    while chunk > 1 and len({cfg[-1] for cfg in out}) < 2:
        chunk = ceil_div(chunk, 2)
        if _check(g, make(bands[-1], ranges[-1], taps, one_col, chunk), hw)[0]:
            continue
        out += [cfg + (chunk,) for cfg in _dw_tilings(g, hw, bands, ranges,
                                                      lambda band, r, t, wb=0, k=chunk: make(band, r, t, wb, k))
                if not _check(g, make(*cfg, chunk), hw)[0]]
    return out


def _dw_w_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ranges: list[int], make) -> list:
    """W-banded box-mode dw (``Plan.dw_w_band``) when no whole-row tiling fits: the widest W band whose
    smallest tiling (the last row band, C_in range and tap-pass option) fits, then, at that width, the
    first fitting tilings in the order of ``_dw_row_tilings`` (C_in range largest first, tap passes
    fewest first). Checking the smallest tiling first keeps a hopeless geometry to a few checks per width."""
    if make(bands[-1], ranges[-1], 0).dw_method not in W_BAND_METHODS:
        return []
    unit = dw_tap_unit(g, make(bands[0], ranges[0], 0))
    units = ceil_div(g.taps, unit)
    taps_opts = [0] + sorted({ceil_div(units, n) * unit for n in range(2, units + 1)} - {g.taps}, reverse=True)
    for wb in _band_options(g.axes[2].o)[1:]:
        if _check(g, make(bands[-1], ranges[-1], taps_opts[-1], wb), hw)[0]:
            continue
        for rng in ranges:
            for taps in taps_opts:
                fits = [b for b in _first_fits(lambda band, r=rng, t=taps, w=wb: make(band, r, t, w), bands, hw, g)
                        if not _check(g, make(b, rng, taps, wb), hw)[0]]
                if fits:
                    return [(band, rng, taps, wb) for band in fits]
    return []


def _dw_row_tilings(g: ConvGeom, hw: TargetFigures, bands: list, ranges: list[int], make) -> list:
    """(band, C_in range, taps per pass) of whole-row dw tilings (``_dw_tilings``)."""
    out = []
    for rng in ranges:
        fits = _first_fits(lambda band, r=rng: make(band, r, 0), bands, hw, g)
        out += [(band, rng, 0) for band in fits]
        if not _check(g, make(fits[0], rng, 0), hw)[0]:
            return out
    unit = dw_tap_unit(g, make(bands[0], ranges[0], 0))
    units = ceil_div(g.taps, unit)
    tap_opts = sorted({ceil_div(units, n) * unit for n in range(2, units + 1)} - {g.taps}, reverse=True)
    found = []
    for rng in ranges:
        for taps in tap_opts:
            fits = [b for b in _first_fits(lambda band, r=rng, t=taps: make(band, r, t), bands, hw, g)
                    if not _check(g, make(b, rng, taps), hw)[0]]
            if fits:
                found += [(band, rng, taps) for band in fits]
                break
        if len({r for _b, r, _t in found}) >= 2:
            break
    return found or out
