"""Capacity checks: the SBUF bytes and PSUM banks a candidate takes, and why a candidate is rejected."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from .. import dx_dpairs as dpairs
from .. import dx_toeplitz as toeplitz
from .. import pw_shared as pw
from ..costs import TargetFigures
from ..dx_pairs import BANK_FP32, DXT_BUFS, ci_tile_t, copies_made, phase_stage_elems
from ..geometry import ConvGeom, ceil_div
from ..methods.dw_kd_moving import estimate as kdm_estimate
from ..methods.dw_small_extent import estimate as dws_estimate
from ..methods.dw_small_extent import spec as dws_spec
from ..methods.s2d_gemm import estimate as s2d_estimate
from ..methods.s2d_gemm import spec as s2d_spec
from ..schedule import (
    MOVING_MAX,
    PMAX,
    axis_bands,
    axis_covered,
    axis_live,
    box_block_sizes,
    dw_x_extent,
    dw_x_stage_elems,
    dx_stage_elems,
    filter_stage_cols,
    n_tiles,
)
from ..spec.compose import (
    DB_SCALAR_CHUNK,
    db_on_dw,
    dx_band_early_on,
    dx_prefetched,
    pw_shared_on,
)
from ..spec.dw_options import (
    DYT_DMA_BUFS,
    cast_group,
    db_ones_legal,
    dw_acc_banks,
    dw_co_pass_legal,
    dw_defer_finish,
    dw_direct,
    dw_fused_exchange,
    dw_head_split_legal,
    dw_out_bufs,
    dw_stage_rows,
    dw_tap_passes,
    dw_w_band_legal,
    dw_w_cols,
    dyt_dma_legal,
    xt_dma_legal,
)
from ..spec.dw_xs import dw_xs_bundle, dw_xs_chunks, dw_xs_group_banks
from ..spec.dx_options import (
    _dpair_slot_count,
    _filter_group,
    dpairs_illegal,
    dx_co_chunk_legal,
    dx_co_resident,
    dx_dy_clip_legal,
    dx_program_items,
    dx_t_active,
    dx_w_band_legal,
    dx_w_cols,
)
from ..spec.items import db_chunk
from ..spec.psum import PSUM_BANK_BYTES, PSUM_DX_BANKS, psum_transpose_banks
from ..spec.record import DbMethod, DwMethod, DxMethod, Plan, Strategy, replace
from ..xt_rows import xt_dma_bufs, zero_by_memset


@lru_cache(maxsize=4096)
def _dx_dy_extent(g: ConvGeom, band: tuple[int, int], w_band: int = 0, clip: bool = False) -> tuple[int, int, int]:
    """The largest dy buffer extent (D, H, W) over the dx bands (``w_band``: W input columns per band, 0
    whole rows; ``clip``: the bands clipped to their live taps' rows, ``Plan.dx_dy_clip``). Cached: every
    candidate's check and estimate asks, and a long axis has thousands of bands."""
    ext = []
    for a, rows in enumerate((band[0], band[1], w_band or g.axes[2].n)):
        ext.append(max(((axis_live(g.axes[a], b)[0] if clip else b).extent for b in axis_bands(g.axes[a], rows)),
                       default=0))
    return ext[0], ext[1], ext[2]


def _own_rows(g: ConvGeom, band: tuple[int, int]) -> tuple[int, int]:
    return tuple(max((b.own1 - b.own0 for b in axis_bands(g.axes[a], band[a])), default=0)
                 for a in range(2))  # type: ignore[return-value]


@dataclass(frozen=True)
class _Budget:
    sbuf: int
    psum: int
    parts: tuple[tuple[str, int], ...]


def _budget(g: ConvGeom, p: Plan) -> _Budget:
    """Live SBUF bytes per partition and PSUM banks of the plan's biggest phase (the kernel's pools)."""
    ds = g.dtype_bytes
    n_co = n_tiles(g.c_out, PMAX)
    W, Wo = g.axes[2].n, g.axes[2].o
    phase_sbuf: dict[str, int] = {}
    psum_dx = psum_dw = 0
    parts: list[tuple[str, int]] = []
    if p.compute_dx:
        ci_res = p.dx_ci_tile if p.dx_ci_outer else g.c_in
        chunked = dx_co_chunk_legal(g, p)
        co_res = dx_co_resident(g, p)   # (dx_co_chunk: one chunk's C_out tiles of dy band and filters)
        # (chunked: the next chunk's filters load while the current chunk's are in use)
        filt = ((2 if chunked else 1) * co_res * g.taps * ci_res * ds if p.dx_regions == 1
                else g.taps * PMAX * ds)
        wcols = dx_w_cols(g, p)   # (dx_w_band: a band's W columns and its dy halo)
        ext = _dx_dy_extent(g, p.dx_band, wcols, dx_dy_clip_legal(g, p))
        dyb = p.dy_bufs * co_res * ext[0] * ext[1] * ext[2] * ds
        plane = 2 * p.dx_band[0] * p.dx_band[1] * (wcols or W) * ds
        # (chunked: the band's fp32 sums, one per C_in tile of the group)
        sums = (n_tiles(ci_res, p.dx_ci_tile) * p.dx_band[0] * p.dx_band[1] * (wcols or W) * 4) if chunked else 0
        if p.dx_method is DxMethod.TOEPLITZ:   # W^T plus its tap grids; planes of (u, ci) partitions
            grids, plane = toeplitz.sbuf_bytes(g, p.dx_band, p.dx_toeplitz, p.dx_toeplitz_merge, p.dx_toeplitz_w)
            filt += grids
        parts += [("filters", filt), ("dx dy band", dyb), ("dx plane", plane)]
        parts += [("dx fp32 sums", sums)] if sums else []
        stage = 2 * dx_stage_elems(g, p.dx_band, wcols) * ds
        if p.dx_ci_outer and p.dx_regions == 1 and g.c_in > p.dx_ci_tile and not chunked:
            filt *= 2                                       # the next group's filters prefetch
        # the filter staging ring (load_filters_t: C_out in column chunks when very wide)
        wstage = 3 * _filter_group(g, p) * filter_stage_cols(min(g.c_out, co_res * PMAX), ds) * ds
        if p.dx_regions > 1:
            wstage = 3 * max(1, min(g.taps, PSUM_BANK_BYTES // (PMAX * ds))) * PMAX * ds
        if dx_t_active(p):
            plane, extra = _dx_t_sbuf(g, p, ext)
            parts += [("dx^T copies and tiles", extra)]
            dyb += extra
        if p.dx_dphase_pairs and not dpairs.dpairs_domain(g):   # planes of half the D rows; the slot tiles
            plane = 2 * ceil_div(p.dx_band[0], 2) * p.dx_band[1] * W * ds
            extra = n_co * max(1, _dpair_slot_count(g, p)) * PMAX * ds
            parts += [("dx D-phase pair filters", extra)]
            filt += extra
        db = (4 * n_co * 4 if p.compute_db else 0) + (
            DB_SCALAR_CHUNK * ds if p.compute_db and p.pw_db_scalar and not pw_shared_on(p) else 0)
        phase_sbuf["dx"] = filt + wstage + dyb + plane + sums + stage + db
        psum_dx = PSUM_DX_BANKS
    if pw_shared_on(p):   # dx:gemm's pools (counted above) plus dw's rings, planes and outputs
        extra = max(pw.sbuf_bytes(g, p.dx_band, p.lnc, [pw.chunk_of(g, it) for it in dx_program_items(g, p, q)],
                                  p.dy_bufs) for q in range(p.lnc))
        parts += [("shared-dy dw rings, planes, outputs", extra)]
        phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + extra
        psum_dw = pw.psum_banks(g, db_on_dw(p) and not p.pw_db_scalar)
    elif p.compute_dw and p.dw_method is DwMethod.SMALL_EXTENT:   # its own pools (methods/dw_small_extent)
        mine = dws_spec.sbuf_parts(g, p.lnc, db_on_dw(p))
        parts += [(f"dw {k}", v) for k, v in mine.items()]
        phase_sbuf["dw"] = sum(mine.values()) + (_first_filters_sbuf(g, p) if p.filters_first and p.compute_dx else 0)
        psum_dw = dws_spec.psum_peak(db_on_dw(p))
    elif p.compute_dw and p.dw_method is DwMethod.DMA_GEMM:
        by_pos = p.lnc == 2 and p.dw_split == "positions"
        mine = max(len(c_) for c_ in _gemm_dma_chunks(g, 1 if by_pos else p.lnc))
        blocks = ceil_div(g.c_out, MOVING_MAX)
        dw_total = 3 * g.c_out * ds + 3 * max(1, mine) * PMAX * ds + 2 * g.c_out * ds + (4 * n_co * 4 if p.compute_db else 0)
        if by_pos:   # two fp32 partials, two received halves (fp32) and two output halves
            dw_total += 2 * g.c_out * 4 + 2 * ceil_div(g.c_out, 2) * (4 + ds)
        parts += [("dw dy^T/x^T rings", dw_total)]
        phase_sbuf["dw"] = dw_total
        psum_dw = max(1, mine) * blocks + (1 if db_on_dw(p) else 0)
    elif p.compute_dw:
        co_w = min(g.c_out, p.dw_co_pass * PMAX) if p.dw_co_pass else g.c_out   # C_out of one pass (dw_co_pass)
        n_cp = n_tiles(co_w, PMAX)
        if p.strategy is Strategy.SHARED_DY:
            rows = _own_rows(g, p.dx_band)
            dyb = 0
        else:
            rows = p.dw_band
            dyb = 0 if p.dw_dyt_dma else p.dy_bufs * n_cp * rows[0] * rows[1] * dw_w_cols(g, p) * ds
        xw = dw_x_extent(g.axes[2], Wo)
        if p.dw_method is DwMethod.ROW_PACK:
            cap = (min(rows[0], PMAX), min(rows[1], PMAX))
            dyt = (DYT_DMA_BUFS if p.dw_dyt_dma else 1) * Wo * g.c_out * ds
            xb = 2 * dw_x_extent(g.axes[0], cap[0]) * dw_x_extent(g.axes[1], cap[1]) * xw * ds
            slots = dw_xs_bundle(g, p) if p.dw_x_stationary else 1   # x-stationary: a ring of bundle tiles
            slots += 1 if p.db_ones else 0   # (db_ones: each bundle tile's ones slot)
            xt = 2 * slots * xw * p.dw_ci_tile * ds
            if p.dw_xt_dma:   # no x band; the x^T ring (xt_dma_bufs tiles) and its zero-row source
                # (tiny C_in's merged fills: a bundle's zero rows of every slot in one DMA)
                merged = p.dw_x_stationary and zero_by_memset(g, p.dw_ci_tile)
                xb, xt = 0, (xt_dma_bufs(p) * slots + (slots if merged else 1)) * xw * p.dw_ci_tile * ds
        else:
            cols = dw_w_cols(g, p)   # (a W band: its columns and their halo)
            npos = _dw_pos_tiles(rows, cols)
            dyt = max(1, npos) * co_w * ds
            xb = 2 * dw_x_extent(g.axes[0], rows[0]) * dw_x_extent(g.axes[1], rows[1]) * \
                dw_x_extent(g.axes[2], cols) * ds
            xt = 4 * p.dw_tap_group * p.dw_ci_tile * ds
        width = p.dw_ci_range
        # taps of one pass (the whole filter unless dw runs in tap passes)
        span = max(hi - lo for lo, hi in dw_tap_passes(g, p, 0)) if p.dw_tap_range else g.taps
        acc = n_cp * span * width * 4
        store = 3 * n_cp * cast_group(g, width) * width * ds + dw_out_bufs(g, width) * cast_group(g, width) * co_w * ds
        # LNC2 positions split: the other program's partial of this one's half of the taps, per C_out tile
        other = ((n_cp if dw_fused_exchange(g, p) else 1) * ceil_div(span, 2) * width * 4
                 if (p.lnc == 2 and p.dw_split != "taps") else 0)
        if p.dw_x_stationary:   # [(tap-slot, ci), C_in tiles x chunks, C_out]: one cast tile per C_in tile
            units = n_tiles(width, p.dw_ci_tile) * _xs_max_chunks(g, p)
            acc = units * g.c_out * 4
            store = 0 if dw_direct(g, p) else 2 * _xs_max_chunks(g, p) * g.c_out * ds
            other = acc if (p.lnc == 2 and p.dw_split != "taps") else 0
        db = 4 * n_co * 4 if p.compute_db else 0
        xstage = 0 if p.dw_xt_dma else 2 * dw_x_stage_elems(g, dw_stage_rows(p, rows), dw_w_cols(g, p)) * ds
        dw_total = dyb + dyt + xb + xt + acc + db + xstage
        parts += [("dw dyT", dyt), ("dw x band", xb), ("dw xT", xt), ("dw fp32 acc", acc)]
        if dyb:
            parts.append(("dw dy band", dyb))
        if p.strategy is Strategy.SHARED_DY:   # dw's pools live through the whole dx section
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + dw_total
        else:
            phase_sbuf["dw"] = dw_total
        if p.filters_first and p.compute_dx:
            first = _first_filters_sbuf(g, p)
            phase_sbuf["dw"] = phase_sbuf.get("dw", 0) + first
            dw_total += first
        if dx_prefetched(p):   # dx^T's first band (and its pools) arrives during dw
            dw_total += _dx_t_prefetch_sbuf(g, p)
            phase_sbuf["dw"] = phase_sbuf.get("dw", 0) + _dx_t_prefetch_sbuf(g, p)
        # the store runs while every dw pool (and, per gradient, dw's dy ring) is still live
        phase_sbuf["dw store"] = dw_total + store + other
        if p.dw_interleave:   # dw's boxes run between dx's items: its pools live through dx
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + dw_total
        if dx_band_early_on(g, p):   # dx's dy band ring (and its staging) is already loaded
            ext = _dx_dy_extent(g, p.dx_band)
            early = (p.dy_bufs * n_co * ext[0] * ext[1] * ext[2] + 2 * dx_stage_elems(g, p.dx_band)) * ds
            phase_sbuf["dw store"] += early
        if dw_defer_finish(g, p):   # the accumulators and the received halves stay live through dx
            phase_sbuf["dx"] = phase_sbuf.get("dx", 0) + acc + other
        psum_dw = dw_acc_banks(p.dw_co_chunk, n_cp) + (1 if db_on_dw(p) else 0)
        if p.dw_x_stationary:
            psum_dw = dw_xs_group_banks(g, p) + 1 + (1 if db_on_dw(p) else 0)
    if p.compute_db and p.db_method is DbMethod.STANDALONE:
        phase_sbuf["db"] = 2 * min(db_chunk(g), g.batch * Wo * g.axes[0].o * g.axes[1].o) * ds + 4 * n_co * 4
    sbuf = max(phase_sbuf.values(), default=0)
    psum = psum_transpose_banks(p) + (psum_dx + psum_dw if (p.strategy is Strategy.SHARED_DY or p.dw_interleave)
                                   else max(psum_dx, psum_dw))
    return _Budget(sbuf, psum, tuple(parts))


def _first_filters_sbuf(g: ConvGeom, p: Plan) -> int:
    """Bytes per partition of dx's first filter group, live during dw with ``filters_first``."""
    ds = g.dtype_bytes
    n_co = n_tiles(g.c_out, PMAX)
    first = (n_co * g.taps * (p.dx_ci_tile if p.dx_ci_outer else g.c_in) * ds if p.dx_regions == 1
             else g.taps * PMAX * ds)
    if p.dx_method is DxMethod.TOEPLITZ:
        first += toeplitz.sbuf_bytes(g, p.dx_band, p.dx_toeplitz, p.dx_toeplitz_merge, p.dx_toeplitz_w)[0]
    if p.dx_dphase_pairs and not dpairs.dpairs_domain(g):   # the slot tiles (and W^T when built on the PE)
        first += n_co * max(1, _dpair_slot_count(g, p)) * PMAX * ds
    return first


def _xs_max_chunks(g: ConvGeom, p: Plan) -> int:
    """Stationary chunks of the largest tap pass (x-stationary accumulator columns per C_in tile)."""
    spans = dw_tap_passes(g, p, 0) if p.dw_tap_range else [(0, g.taps)]
    return max(len(dw_xs_chunks(g, p, sp)) for sp in spans)


def _dw_pos_tiles(rows: tuple[int, int], wo: int) -> int:
    # (counted, not listed: a huge box has millions of tiles, and its plan is rejected anyway)
    return sum(n for _shape, n in box_block_sizes((0, 0, 0), (rows[0], rows[1], wo), PMAX)) if min(rows) > 0 else 0


_RUN_CHECKS: list[dict] = []   # the planning runs under way (``memoized_checks``), innermost last


@contextmanager
def memoized_checks():
    """Within: ``_check`` answers a plan it checked before from memory. Planning checks most candidates
    twice (the enumeration keeps the tilings and variants that fit, the search checks every candidate);
    a check is a function of the geometry, the plan and the target alone."""
    _RUN_CHECKS.append({})
    try:
        yield
    finally:
        _RUN_CHECKS.pop()


def _check(g: ConvGeom, p: Plan, hw: TargetFigures) -> tuple[str, _Budget]:
    """'' when the plan fits the target, else the first limit it breaks."""
    if not _RUN_CHECKS:
        return _check_plan(g, p, hw)
    memo = _RUN_CHECKS[-1]
    key = (g, p, hw)
    if key not in memo:
        memo[key] = _check_plan(g, p, hw)
    return memo[key]


_GATHER = "the per-gradient gather (gemm / gather_s1 / phase_gather, one band per plane, no dx^T or D-phase pairs)"
_BOX_DW = "per-gradient box-mode dw (gemm / tap_gemm / tap_pack)"
# The tiling options offered only where nothing else fits: the plan field, its legality, the rule it breaks.
_OPTION_RULES = (
    ("dx_co_chunk", dx_co_chunk_legal,
     (f"{_GATHER} with fewer C_out tiles per chunk than C_out has, db not folded on dx, filters loaded in dx "
     "(not first), no dw-interleaving, prefetch or early band")),
    ("dx_dy_clip", dx_dy_clip_legal,
     f"{_GATHER}, db not folded on dx, no dw-interleaving, prefetch or early band"),
    ("dx_w_band", dx_w_band_legal,
     (f"{_GATHER} with fewer columns than W, db not folded on dx, no dw-interleaving, "
     "prefetch or early band")),
    ("dw_co_pass", dw_co_pass_legal,
     (f"{_BOX_DW} with fewer C_out tiles per pass than C_out has, not x-stationary, db not folded on dw, without "
     "dyT dma, dw-interleaving or dx^T's band prefetch")),
    ("dw_w_band", dw_w_band_legal,
     (f"{_BOX_DW} with fewer columns than W_out, without dyT dma, dw-interleaving or "
     "dx^T's band prefetch")),
)


def _check_plan(g: ConvGeom, p: Plan, hw: TargetFigures) -> tuple[str, _Budget]:
    if p.s2d_group:   # the method's own pools (kernels/methods/s2d_gemm)
        why, sbuf, psum, parts = s2d_estimate.check(g, s2d_spec.S2dOptions(p.s2d_group), p.lnc,
                                                    (p.compute_dx, p.compute_dw, p.compute_db), hw)
        return why, _Budget(sbuf, psum, tuple(parts.items()))
    if p.dw_method is DwMethod.KD_MOVING:   # dw alone, then dx and db (kernels/methods/dw_kd_moving)
        why, rest = ("", _Budget(0, 0, ())) if not (p.compute_dx or p.compute_db) else \
            _check(g, replace(p, compute_dw=False, dw_method=None), hw)
        # (db's accumulators are live beside dw: DbState, allocated first)
        db_bytes = (ceil_div(g.c_out, PMAX) * 4 + 2 * 4) if p.compute_db else 0
        db_bytes += DB_SCALAR_CHUNK * g.dtype_bytes if p.compute_db and p.pw_db_scalar else 0   # (its scratch)
        why_dw, sbuf, psum, parts = kdm_estimate.check(g, p.lnc, p.target, hw, db_bytes)
        return why_dw or why, _Budget(max(sbuf, rest.sbuf), max(psum, rest.psum), rest.parts + tuple(parts.items()))
    b = _budget(g, p)
    if p.compute_dw and p.dw_method is DwMethod.SMALL_EXTENT:
        why = dws_estimate.check(g, p.lnc, db_on_dw(p), hw, hw.psum_banks - psum_transpose_banks(p))[0]
        if why:
            return why, b
    if p.dw_method is not None and p.dw_tap_group * p.dw_ci_tile > MOVING_MAX:
        return (f"dw moving free {p.dw_tap_group}x{p.dw_ci_tile} = {p.dw_tap_group * p.dw_ci_tile} "
                f"exceeds {MOVING_MAX}"), b
    for on, legal, rule in _OPTION_RULES:
        if getattr(p, on) and not legal(g, p):
            return f"{on} needs {rule}", b
    if p.dw_xt_dma and not xt_dma_legal(g, p):
        return (f"dw_xt_dma needs dw:row_pack, a 2-byte dtype and trn2/trn3 (dma_transpose), got "
                f"{p.dw_method.value if p.dw_method else None}, {g.dtype}, {p.target}"), b
    if p.dx_dphase_pairs and (why := dpairs_illegal(g, p)):
        return f"dx_dphase_pairs: {why}", b
    if p.dw_head_split and not dw_head_split_legal(g, p):
        return ("dw_head_split needs x-stationary row-mode dw with xT dma and dyT dma, one pair per bundle, "
                "no ones slot, C_in columns above the tiny-C_in memset"), b
    if p.dw_dyt_dma and not dyt_dma_legal(g, p):
        return ("dw_dyt_dma needs per-gradient dw:row_pack (or box mode with W_out <= 128), a 2-byte dtype "
                "and trn2/trn3 (dma_transpose)"), b
    if p.db_method is DbMethod.FOLD and not _fold_ok(g, p):   # (e.g. a variant's smaller dx bands)
        return "db:fold needs dy loads that own every dy row (padding beyond the reach leaves rows unowned)", b
    if p.db_ones and not db_ones_legal(g, p):
        return "db_ones needs db:fold with row-mode x-stationary dw and a stationary chunk with room on M", b
    if b.sbuf > hw.sbuf_usable:
        big = max(b.parts, key=lambda kv: kv[1]) if b.parts else ("?", 0)
        return (f"SBUF {b.sbuf} B per partition exceeds {hw.sbuf_usable} B usable "
                f"(largest: {big[0]} {big[1]} B)"), b
    if b.psum > hw.psum_banks:
        return f"PSUM {b.psum} banks exceed {hw.psum_banks}", b
    return "", b


def _gemm_dma_chunks(g: ConvGeom, lnc: int) -> list[list[int]]:
    """C_in tiles per program of dw:dma_gemm (mirrors nki_dw_gemm.gemm_dma_chunks)."""
    n_ci = ceil_div(g.c_in, PMAX)
    per = ceil_div(n_ci, lnc)
    return [list(range(q * per, min(n_ci, (q + 1) * per))) for q in range(lnc)]


def _dx_t_prefetch_sbuf(g: ConvGeom, p: Plan) -> int:
    """Bytes per partition of dx^T's band pools live during dw when prefetched: the dy band ring, the
    shifted copies' pools and the band staging ring (mirrors DxTPrefetch: DyBands + DxTBands)."""
    if not dx_prefetched(p):
        return 0
    ds = g.dtype_bytes
    ext = _dx_dy_extent(g, p.dx_band)
    ring = p.dy_bufs * n_tiles(g.c_out, PMAX) * ext[0] * ext[1] * ext[2] * ds
    copies = max(0, _dx_t_copies(g, p) - 1) * p.dy_bufs * ext[0] * ext[1] * ext[2] * ds
    return ring + copies + 2 * dx_stage_elems(g, p.dx_band) * ds


def _dx_t_copies(g: ConvGeom, p: Plan) -> int:
    """Shifted dy copies the kernel makes (copies that pair no tap are not made)."""
    return copies_made(g, p.dx_pair_copies)


def _dx_t_sbuf(g: ConvGeom, p: Plan, ext: tuple[int, int, int]) -> tuple[int, int]:
    """(dx planes, shifted dy copies + dx^T tiles) bytes per partition of dx^T (mirrors run_dx_t's pools)."""
    ds = g.dtype_bytes
    ci_t = ci_tile_t(g)
    slots = max(1, BANK_FP32 // ci_t)
    plane = 2 * n_tiles(ci_t, PMAX) * p.dx_band[0] * p.dx_band[1] * g.axes[2].n * ds
    copies = max(0, _dx_t_copies(g, p) - 1) * p.dy_bufs * ext[0] * ext[1] * ext[2] * ds
    stage = 2 * n_tiles(ci_t, PMAX) * phase_stage_elems(g, p.dx_band) * ds if any(a.s > 1 for a in g.axes) else 0
    return plane, copies + DXT_BUFS * slots * ci_t * ds + stage


def _fold_ok(g: ConvGeom, p: Plan) -> bool:
    """db can fold on a dy load only when those loads cover every dy row."""
    if p.compute_dw and p.strategy is Strategy.PER_GRADIENT:
        return True
    if p.compute_dw or p.compute_dx:
        return axis_covered(g.axes[0], p.dx_band[0]) and axis_covered(g.axes[1], p.dx_band[1]) \
            and axis_covered(g.axes[2], g.axes[2].n)
    return False
