"""Plan a problem: enumerate, check, estimate, pick the cheapest (cached per problem)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import dx_toeplitz as toeplitz
from ..costs import TARGET_FIGURES
from ..errors import Conv3dBwdInputError, Conv3dBwdPlanError
from ..geometry import ConvGeom, validate
from ..spec.record import Candidate, DwMethod, DxMethod, Plan, Strategy, replace
from .budget import _check, memoized_checks
from .candidates import _enumerate
from .estimate import _estimate
from .no_plan import no_plan_message
from .problem import _base
from .smallest import smallest_working_set


def _label(p: Plan) -> str:
    if p.s2d_group:
        grads = ",".join(n for n, on in (("dx", p.compute_dx), ("dw", p.compute_dw), ("db", p.compute_db)) if on)
        return f"s2d_gemm[{grads}, {p.s2d_group} row tiles per group]"
    parts = [p.strategy.value]
    if p.dw_method is DwMethod.KD_MOVING:   # dw alone first, then the dx / db plan's sections
        rest = _label(replace(p, compute_dw=False, dw_method=None))
        return rest.replace(p.strategy.value, f"{p.strategy.value} dw:kd_moving", 1)
    if p.dx_method:
        parts.append(f"dx:{p.dx_method.value}[band {p.dx_band[0]}x{p.dx_band[1]}, ci {p.dx_ci_tile}"
                     + (", ci-outer" if p.dx_ci_outer else "")
                     + (f", {p.dx_regions} regions" if p.dx_regions > 1 else "")
                     + (f", dx^T pairs x{p.dx_pair_copies}" if p.dx_transposed else "")
                     + (", D-phase pairs" if p.dx_dphase_pairs else "")
                     + (", band prefetch" if p.dx_prefetch else "")
                     + (f", U {p.dx_toeplitz[0]}x{p.dx_toeplitz[1]}" if p.dx_method is DxMethod.TOEPLITZ else "")
                     + (f", {''.join(a for a, m in zip('dh', p.dx_toeplitz_merge) if m)} phases on M"
                        if p.dx_method is DxMethod.TOEPLITZ and any(p.dx_toeplitz_merge) else "")
                     + (f", W {p.dx_toeplitz_w} on M" if p.dx_method is DxMethod.TOEPLITZ and p.dx_toeplitz_w else "")
                     + (", K quads dh" if p.dx_method is DxMethod.TOEPLITZ and p.dx_toeplitz_quad
                        else f", K pairs {'dhw'[p.dx_toeplitz_pair]}" if p.dx_method is DxMethod.TOEPLITZ
                        and p.dx_toeplitz_pair >= 0 else "")
                     + (f", W band {p.dx_w_band}" if p.dx_w_band else "")
                     + (f", co chunk {p.dx_co_chunk}" if p.dx_co_chunk else "")
                     + (", dy clipped" if p.dx_dy_clip else "")
                     + (", ci split" if p.dx_ci_split else "")
                     + (", early band" if p.dx_band_early else "")
                     + (", filters first" if p.filters_first else "") + "]")
    if p.dw_interleave:
        parts.append("dw-interleaved")
    if p.dx_inside_dw:
        parts.append("dx inside dw boxes" if p.dx_inside_boxes else "dx inside dw")
    if p.dx_between_bundles:
        parts.append("dx between bundles")
    if p.dw_method is DwMethod.SMALL_EXTENT:   # its loops follow from the geometry (methods/dw_small_extent)
        parts.append("dw:small_extent" + ("[taps split]" if p.lnc == 2 else ""))
    elif p.dw_method:
        band = "" if p.strategy is Strategy.SHARED_DY else f"band {p.dw_band[0]}x{p.dw_band[1]}, "
        band += f"W band {p.dw_w_band}, " if p.dw_w_band else ""
        band += f"{p.dw_split} split, " if (p.lnc == 2 and p.dw_split != "positions") else ""
        rng = f", ci-range {p.dw_ci_range}" if p.dw_ci_range < p.x_shape[1] else ""
        rng += f", taps/pass {p.dw_tap_range}" if p.dw_tap_range else ""
        rng += f", co-tiles/pass {p.dw_co_pass}" if p.dw_co_pass else ""
        xs = "x-stationary, " if p.dw_x_stationary else ""
        band += "fine taps, " if p.dw_tap_fine else ""
        rng += ", xT dma" if p.dw_xt_dma else ""
        rng += ", dyT dma" if p.dw_dyt_dma else ""
        rng += ", head split" if p.dw_head_split else ""
        rng += ", rows stacked" if p.dw_row_stack else ""
        rng += ", xT merged" if p.dw_xt_merge else ""
        rng += ", xT copy" if p.dw_xt_copy else ""
        rng += f", dy^T 1/{p.pw_dyt_dma} dma" + (" late" if p.pw_dyt_late else "") if p.pw_dyt_dma else ""
        parts.append(f"dw:{p.dw_method.value}[{xs}{band}G{p.dw_tap_group}, ci {p.dw_ci_tile}{rng}]")
    if p.db_method:
        parts.append(f"db:{p.db_method.value}" + ("[ScalarE]" if p.pw_db_scalar else "")
                     + ("[ones row]" if p.db_ones else ""))
    parts.append(f"dy x{p.dy_bufs}")
    return " ".join(parts)


def plan_conv3d_bwd(dy_shape, x_shape, w_shape, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                    dtype="bf16", target="trn2", lnc=1, compute_dx=True, compute_dw=True,
                    compute_db=True) -> Plan:
    """Enumerate, check, cost and pick (see the module docstring)."""
    g = validate(dy_shape, x_shape, w_shape, stride, padding, dilation, dtype,
                 compute_dx=compute_dx, compute_dw=compute_dw, compute_db=compute_db)
    if target not in TARGET_FIGURES:
        raise Conv3dBwdInputError(f"target={target!r}: must be one of {sorted(TARGET_FIGURES)}")
    if lnc not in (1, 2):
        raise Conv3dBwdInputError(f"lnc={lnc!r}: must be 1 or 2")
    if lnc == 2 and target == "trn1":
        raise Conv3dBwdInputError("lnc=2 with target='trn1': LNC2 needs trn2 or later")
    base = _base(g, dy_shape, x_shape, w_shape, stride, padding, dilation, target, lnc,
                 bool(compute_dx), bool(compute_dw), bool(compute_db))
    return _plan_cached(g, tuple(base.items()))


@lru_cache(maxsize=16)
def _plan_cached(g: ConvGeom, base_items: tuple) -> Plan:
    """The pick for a validated problem. Cached: the kernel (once per LNC program), the harness and the
    bench ask for the same problem's plan again and again, and planning costs and checks thousands of
    candidates (0.3-1.5 s). Plans are frozen, so sharing one is safe. A plan holds its alternatives
    (0.6-9 MiB for the bench shapes), hence the small bound: the repeats come back to back."""
    return _plan(g, dict(base_items))


def clear_plan_cache() -> None:
    """Forget every cached plan (for code that patches the planner's functions, e.g. tests)."""
    _plan_cached.cache_clear()


def _smallest_note(g: ConvGeom, base: dict, usable: int) -> str:
    """What the smallest tiling needs (``smallest.py``): the buffer that does not fit and by how much."""
    sbuf, (name, size) = smallest_working_set(g, base)
    if sbuf <= usable:
        return f"; the smallest tiling fits ({sbuf} B per partition): a missing plan, please report it"
    return (f"; even the smallest tiling (one-row bands, one W column, one C_in channel, C_out tile or tap at a "
            f"time, dx's dy rows only where taps read dy) needs {sbuf} B per partition, {sbuf - usable} B over the {usable} B usable (largest: {name} {size} B)")


@dataclass
class PlanningProgress:
    """Where the planning under way is: read by a progress display on another thread (so mutable)."""

    stage: str = ""
    done: int = 0
    total: int = 0

    def describe(self) -> str:
        if self.stage == "estimating":
            return f"{self.done}/{self.total} candidates checked and estimated"
        return self.stage


PROGRESS = PlanningProgress()


def _plan(g: ConvGeom, base: dict) -> Plan:
    """``_search`` with the run's checks memoized, its progress cleared after."""
    try:
        with memoized_checks():
            return _search(g, base)
    finally:
        PROGRESS.stage, PROGRESS.done, PROGRESS.total = "", 0, 0


def _search(g: ConvGeom, base: dict) -> Plan:
    """Enumerate, check, cost and pick."""
    target = base["target"]
    hw = TARGET_FIGURES[target]
    records: list[Candidate] = []
    if base["compute_dx"] and (why := toeplitz.toeplitz_domain(g)):   # the method's domain, named once
        records.append(Candidate("dx:toeplitz (any tiling)", False, why, None, 0, 0))
    feasible: list[Plan] = []
    seen = set()
    memo: dict = {}   # the work candidates share (estimate.py)
    PROGRESS.stage = "enumerating the candidates"
    candidates = _enumerate(g, base, hw)
    PROGRESS.stage, PROGRESS.done, PROGRESS.total = "estimating", 0, len(candidates)
    for p in candidates:
        PROGRESS.done += 1
        lab = _label(p)
        if lab in seen:
            continue
        seen.add(lab)
        reason, b = _check(g, p, hw)
        if reason:
            records.append(Candidate(lab, False, reason, None, b.sbuf, b.psum))
            continue
        est, eng = _estimate(g, p, hw, memo)
        p = replace(p, sbuf_bytes=b.sbuf, psum_banks=b.psum, estimated_us=est,
                    engine_us=tuple(eng.items()), label=lab)
        records.append(Candidate(lab, True, "", est, b.sbuf, b.psum))
        feasible.append(p)
    if not feasible:
        raise Conv3dBwdPlanError(no_plan_message(target, records, hw.sbuf_usable, hw.psum_banks)
                                 + _smallest_note(g, base, hw.sbuf_usable))
    feasible.sort(key=lambda q: (round(q.estimated_us, 6), q.label))
    records_t = tuple(records)
    alts = tuple(replace(q, candidates=records_t) for q in feasible)
    best = alts[0]
    return replace(best, candidates=records_t, alternatives=alts)
