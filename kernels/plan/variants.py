"""Option variants of a base candidate: region packing, dx^T, toeplitz tilings, dw options, LNC2 splits."""
from __future__ import annotations

from .. import dx_toeplitz as toeplitz
from ..costs import TargetFigures
from ..dx_pairs import pair_axes, pairs_possible
from ..geometry import ConvGeom, ceil_div
from ..schedule import PMAX, region_fits
from ..spec.compose import (
    dw_interleave_ok,
    dx_band_early_legal,
    dx_prefetched,
)
from ..spec.dw_options import (
    db_ones_legal,
    dw_head_split_legal,
    dyt_box_dma_legal,
    dyt_dma_legal,
    xt_copy_legal,
    xt_dma_legal,
)
from ..spec.dx_options import dpairs_illegal, dx_ci_split_legal
from ..spec.items import _split, dx_items
from ..spec.record import DwMethod, DxMethod, Plan, Strategy, replace
from .budget import _check
from .estimate_waits import _first_band_staged
from .problem import _dx_method


def _band_options(n: int) -> list[int]:
    out = []
    b = n
    while b >= 1:
        if b not in out:
            out.append(b)
        if b == 1:
            break
        b = ceil_div(b, 2)
    return out


def _toeplitz_variants(g: ConvGeom, p: Plan, hw: TargetFigures | None) -> list[Plan]:
    """dx:toeplitz variants of ``p`` (tiny C_in), with the plan's dx band and with the largest band
    that fits (its (u, ci) planes are far smaller than the gather's), each with its best (U_d, U_h)."""
    if toeplitz.toeplitz_domain(g):
        return []
    bands = [(d, g.axes[1].n) for d in _band_options(g.axes[0].n)] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:]]
    bands = bands[:bands.index(p.dx_band)] if p.dx_band in bands else []
    def variant(b: tuple[int, int], u: tuple[int, int], m: tuple[bool, bool]) -> Plan:
        return replace(p, dx_method=DxMethod.TOEPLITZ, dx_band=b, dx_toeplitz=u, dx_toeplitz_merge=m,
                       dx_toeplitz_pair=toeplitz.pair_axis(g, u, m))
    larger = [b for b in bands if hw is not None and toeplitz.toeplitz_options(g, b)
              and not _check(g, variant(b, *toeplitz.toeplitz_options(g, b)[0]), hw)[0]]
    out = [variant(b, u, m) for b in larger[:1] + [p.dx_band] for u, m in toeplitz.toeplitz_options(g, b)]
    # K quads (C_out <= 32): the h offset pairs share the d pairs' matmuls too
    out += [replace(q, dx_toeplitz_quad=True) for q in out
            if toeplitz.quad_legal(g, q.dx_toeplitz, q.dx_toeplitz_merge, q.dx_toeplitz_pair)]
    # W positions on M too (PSUM quadrants), with the same bands
    for b in larger[:1] + [p.dx_band]:
        for u, m, uw in toeplitz.toeplitz_w_options(g, b):
            q = replace(p, dx_method=DxMethod.TOEPLITZ, dx_band=b, dx_toeplitz=u, dx_toeplitz_merge=m, dx_toeplitz_w=uw,
                        dx_toeplitz_pair=toeplitz.pair_axis_w(g, u, m, uw))
            if hw is None or not _check(g, q, hw)[0]:
                out.append(q)
    return out


def _with_regions(g: ConvGeom, p: Plan, hw: TargetFigures | None = None) -> list[Plan]:
    """The plan, plus its dx region-packed variants when the channels leave the array half empty;
    per gradient, dx's first filters load before dw when SBUF allows it."""
    out = [p]
    if p.compute_dx and not p.dx_ci_outer:
        out += [replace(p, dx_regions=r) for r in (2, 4) if region_fits(g.c_in, g.c_out, r)]
        out += _toeplitz_variants(g, p, hw)
        out += _lnc2_packed_bands(g, p)
    if hw is not None:
        out += _dx_t_variants(g, p, hw)
    if p.compute_dx and not dpairs_illegal(g, q_ := replace(p, dx_dphase_pairs=True, dx_ci_tile=g.c_in)):
        out.append(q_)
    if xt_dma_legal(g, p):   # row-mode x^T by DMA transpose (with either dw orientation): both variants stay
        out += [replace(q, dw_xt_dma=True) for q in out]
        out += _xt_dma_full_rows(g, out, hw)
        # and dy^T by DMA too (per gradient): no dy box, no dy^T PE transposes or evictions
        out += [q2 for q in out if q.dw_xt_dma and dyt_dma_legal(g, q)
                and (hw is None or not _check(g, q2 := replace(q, dw_dyt_dma=True), hw)[0])]
        # and the first row pass's dy^T and x^T by column pieces (kernels/dw_head.py)
        out += [q2 for q in out if dw_head_split_legal(g, q2 := replace(q, dw_head_split=True))]
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT and dyt_box_dma_legal(g, p):
        # box-mode dw's dy^T by DMA too
        out += [q2 for q in out if dyt_dma_legal(g, q2 := replace(q, dw_dyt_dma=True))
                and (hw is None or not _check(g, q2, hw)[0])]
    if hw is not None and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT:
        out = [q2 if not _check(g, q2 := replace(q, filters_first=True), hw)[0] else q for q in out]
        # dx^T's first band loads during dw's last row chunk when its pools fit beside dw's
        out = [q2 if dx_prefetched(q2 := replace(q, dx_prefetch=True)) and not _check(g, q2, hw)[0] else q
               for q in out]
        # dw's boxes between dx:toeplitz's items or the gather's bands (the fast dw variants: x-stationary, xT dma)
        out += [q2 for q in out if dw_interleave_ok(g, q) and q.dw_x_stationary and q.dw_xt_dma
                and not _check(g, q2 := replace(q, dw_interleave=True), hw)[0]]
    if p.lnc == 2 and p.compute_dw and p.strategy is Strategy.PER_GRADIENT and g.taps >= 2 \
            and p.dw_method is not DwMethod.DMA_GEMM:
        split = [replace(q, dw_split="taps") for q in out]
        # a program's own taps may fit in one pass where the whole filter needed tap passes
        out += [q1 if q.dw_tap_range and hw is not None and not _check(g, q1 := replace(q, dw_tap_range=0), hw)[0]
                else q for q in split]
    if p.lnc == 2 and p.dw_method is DwMethod.DMA_GEMM:   # C_in tiles per program, or positions
        out += [replace(q, dw_split="channels") for q in out]
    if p.lnc == 2:   # dx split by C_in groups
        out += [replace(q, dx_ci_split=True) for q in out if dx_ci_split_legal(g, q)]
        # like filters first, it replaces its twin where it is legal and fits (it only moves work off
        # the critical path); with filters first, only where the first band is staged (else no gain)
        out = [q2 if (dx_band_early_legal(g, q) and (not q.filters_first or _first_band_staged(g, q))
                      and hw is not None and not _check(g, q2 := replace(q, dx_band_early=True), hw)[0]) else q
               for q in out]
    # db inside dw's x-stationary matmuls where a stationary chunk has room for the ones slot
    if hw is not None:
        out += [q2 for q in out if db_ones_legal(g, q) and not _check(g, q2 := replace(q, db_ones=True), hw)[0]]
    # x^T tiles channel-major, filled by plain dma_copy: where a transpose's [128, 16] blocks would stay
    # mostly empty (few rows per run, tiny C_in), not where full blocks beat the copies' short runs
    out += [replace(q, dw_xt_copy=True) for q in out if xt_copy_legal(g, q)]
    return out


def _xt_dma_full_rows(g: ConvGeom, plans: list[Plan], hw: TargetFigures | None) -> list[Plan]:
    """Per gradient, row-mode dw with x^T by DMA holds no x band, so a dw band that had to stay small
    for the x band (a 7x7 halo: whole H rows of a 32-row output give 2x32 rows, of a 56-row output
    half rows, 1x28, i.e. K = 64 or 28 on the PE) can grow: the variant of each such ``xT dma`` plan
    with the largest dw band of at most 128 (d, h) rows that fits (whole H rows first, then H bands)."""
    if hw is None:
        return []
    ho = g.axes[1].o
    rows = [(d, ho) for d in _band_options(g.axes[0].o) if d * ho <= PMAX] + \
        [(1, h) for h in _band_options(ho)[1:] if h <= PMAX]
    out = []
    for q in plans:
        n = q.dw_band[0] * q.dw_band[1]
        if not (q.dw_xt_dma and q.compute_dw and q.strategy is Strategy.PER_GRADIENT and q.dw_tap_range == 0
                and n < PMAX):
            continue
        for band in rows:
            if band[0] * band[1] <= n:
                break
            q2 = replace(q, dw_band=band)
            if not _check(g, q2, hw)[0]:
                out.append(q2)
                break
    return out


def _lnc2_packed_bands(g: ConvGeom, p: Plan) -> list[Plan]:
    """LNC2 region packing: each program packs only its own dx items, so a band split that gives a
    program fewer than R items leaves its dx unpacked (dilated_d2: two D bands, one per program,
    ran at LNC1's packed PE time). The region variant with the dx band halved (D first, then H)
    until program 0 holds R items; the estimate weighs the smaller bands' extra halo."""
    if p.lnc != 2:
        return []
    out = []
    for r in (2, 4):
        if not region_fits(g.c_in, g.c_out, r):
            continue
        band = p.dx_band
        while len(_split(dx_items(g, replace(p, dx_band=band)), p.lnc, 0)) < r:
            if band[0] > 1:
                band = (ceil_div(band[0], 2), band[1])
            elif band[1] > 1:
                band = (band[0], ceil_div(band[1], 2))
            else:
                break
        if band != p.dx_band and len(_split(dx_items(g, replace(p, dx_band=band)), p.lnc, 0)) >= r:
            out.append(replace(p, dx_band=band, dx_regions=r))
    return out


def _dx_t_variants(g: ConvGeom, p: Plan, hw: TargetFigures) -> list[Plan]:
    """dx^T variants of ``p`` (all filters resident): tap pairs over 1..3 shifted copies when
    C_out <= 64, else (stride 1 only) positions on M alone (when C_in < 128 leaves the classic M
    short); each on the largest dx band that fits."""
    if not p.compute_dx or p.dx_ci_outer or p.dx_regions != 1 or _dx_method(g) is DxMethod.GEMM:
        return []
    if pairs_possible(g):
        opts = list(range(1, len(pair_axes(g)) + 1))
    elif (g.c_in < PMAX or g.c_out <= PMAX // 2) and _dx_method(g) is DxMethod.GATHER_S1:
        # (strided without pairs: the phase placements and short phase groups stall more than
        # M = 128 saves; down_s2 measured 79.6 us against 76.5 with the classic gather)
        opts = [0]
    else:
        return []
    bands = [p.dx_band] + [(d, g.axes[1].n) for d in _band_options(g.axes[0].n) if d < p.dx_band[0]] + \
        [(1, h) for h in _band_options(g.axes[1].n)[1:] if p.dx_band[0] > 1 or h < p.dx_band[1]]
    out = []
    for n in opts:
        q = replace(p, dx_transposed=True, dx_pair_copies=n, dx_ci_tile=min(PMAX, g.c_in))
        for band in bands:
            qb = replace(q, dx_band=band)
            if not _check(g, qb, hw)[0]:
                out.append(qb)
                break
        else:
            out.append(q)   # listed (and rejected with its reason)
    return out
