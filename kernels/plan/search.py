"""Plan a problem: enumerate, check, estimate, pick the cheapest (cached per problem)."""
from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from .. import dx_toeplitz as toeplitz
from ..costs import TARGET_FIGURES
from ..errors import Conv3dBwdInputError, Conv3dBwdPlanError
from ..geometry import ConvGeom, validate
from ..spec.record import Candidate, DwMethod, DxMethod, Plan, Strategy, replace
from .bound import lower_bound_us
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
        rng += ", xT dma" if p.dw_xt_dma else ""
        rng += ", dyT dma" if p.dw_dyt_dma else ""
        rng += ", head split" if p.dw_head_split else ""
        rng += ", xT copy" if p.dw_xt_copy else ""
        rng += f", dy^T 1/{p.pw_dyt_dma} dma" if p.pw_dyt_dma else ""
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


# plans kept (a network's distinct layers, stepped through again every training step) and pruned searches'
# leftovers kept (each holds its search's memo, several MiB: asked for right after their search, if at all)
PLANS_CACHED = 64
LEFTOVERS_KEPT = 16


@lru_cache(maxsize=PLANS_CACHED)
def _plan_cached(g: ConvGeom, base_items: tuple) -> Plan:
    """The pick for a validated problem. Cached: the kernel (once per LNC program), the harness and the
    bench ask for the same problem's plan again and again, and planning checks thousands of candidates.
    Plans are frozen, so sharing one is safe. A plan may hold its alternatives (0.6-9 MiB for the bench
    shapes, once asked for)."""
    return _plan(g, dict(base_items))


def clear_plan_cache() -> None:
    """Forget every cached plan and pruned search's leftovers (for code that patches the planner's
    functions, e.g. tests)."""
    _plan_cached.cache_clear()
    _UNESTIMATED.clear()


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
        if self.stage == "checking":
            return f"{self.done}/{self.total} candidates checked"
        if self.stage == "estimating":
            return f"{self.done}/{self.total} feasible candidates estimated (the rest bounded above the best)"
        return self.stage


PROGRESS = PlanningProgress()


def _plan(g: ConvGeom, base: dict, prune: bool = True) -> Plan:
    """``_search`` with the run's checks memoized, its progress cleared after."""
    try:
        with memoized_checks():
            return _search(g, base, prune)
    finally:
        PROGRESS.stage, PROGRESS.done, PROGRESS.total = "", 0, 0


# the fields of a plan that name its problem (``problem._base``)
PROBLEM_FIELDS = ("dy_shape", "x_shape", "w_shape", "stride", "padding", "dilation", "dtype", "target", "lnc",
                  "compute_dx", "compute_dw", "compute_db")
# how far below its bound an estimate may round (the bound and the estimate sum the same busy times in
# different orders)
BOUND_SLACK = 1e-9


@dataclass(frozen=True)
class _Checked:
    """A feasible candidate before its estimate: the plan, its label and its budget."""

    plan: Plan
    label: str
    sbuf: int
    psum: int


@dataclass
class _Unestimated:
    """What a pruned search left: enough to estimate the rest when every alternative is asked for."""

    g: ConvGeom
    estimated: list[Plan]
    pending: list[_Checked]
    records: tuple[Candidate, ...]
    memo: dict   # the search's shared work (``estimate.py``): the rest's estimates reuse it
    late: dict[str, Plan] = field(default_factory=dict)   # estimated since, by label


# per problem (``PROBLEM_FIELDS``), the last pruned searches' leftovers (``LEFTOVERS_KEPT``)
_UNESTIMATED: OrderedDict[tuple, _Unestimated] = OrderedDict()
# estimated candidates that came in under their bound (each makes its search estimate every candidate):
# none is expected (``bound.py``); the tests check it stays 0
BOUND_MISSES = [0]


def _rank(p: Plan) -> tuple[float, str]:
    """The pick's order: the lowest estimate, ties broken by label."""
    return (round(p.estimated_us, 6), p.label)


def _checked(g: ConvGeom, base: dict, hw, records: list) -> list[_Checked]:
    """Enumerate and check; the rejections go to ``records``, a feasible candidate's place is held by its
    index in the list returned (its line is written once its fate is known)."""
    seen: set[str] = set()
    out: list[_Checked] = []
    PROGRESS.stage = "enumerating the candidates"
    candidates = _enumerate(g, base, hw)
    PROGRESS.stage, PROGRESS.done, PROGRESS.total = "checking", 0, len(candidates)
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
        records.append(len(out))
        out.append(_Checked(p, lab, b.sbuf, b.psum))
    return out


def _estimated(g: ConvGeom, c: _Checked, hw, memo: dict, bound_us: float = 0.0) -> Plan:
    """The candidate with its budget, estimate and label filled in (``bound_us``: its bound, checked)."""
    est, eng = _estimate(g, c.plan, hw, memo)
    if est < bound_us * (1.0 - BOUND_SLACK):
        BOUND_MISSES[0] += 1
    return replace(c.plan, sbuf_bytes=c.sbuf, psum_banks=c.psum, estimated_us=est,
                   engine_us=tuple(eng.items()), label=c.label)


def _estimate_bounded(g: ConvGeom, checked: list[_Checked], hw, memo: dict,
                      prune: bool) -> tuple[dict[int, Plan], dict[int, float]]:
    """Estimate in order of increasing bound until the next bound is above the best estimate so far (that
    candidate and those after it can neither win nor tie). A candidate's bound is refined as it comes up:
    first dx's part alone, then dx's and dw's, then the estimate. Every candidate is estimated without
    ``prune`` or once an estimate comes in under its bound. Returns the estimates and the last bounds."""
    heap = [(0.0, c.label, 0, i) for i, c in enumerate(checked)]   # (bound, label, stage, index)
    heapq.heapify(heap)
    done: dict[int, Plan] = {}
    bounds: dict[int, float] = {}
    best: tuple[float, str] | None = None
    misses = BOUND_MISSES[0]
    PROGRESS.stage, PROGRESS.done, PROGRESS.total = "estimating", 0, len(checked)
    while heap:
        bound, label, stage, i = heapq.heappop(heap)
        pruning = prune and BOUND_MISSES[0] == misses
        if pruning and best is not None and round(bound * (1.0 - BOUND_SLACK), 6) > best[0]:
            heapq.heappush(heap, (bound, label, stage, i))
            break
        if pruning and stage < 2:   # refine: dx's part, then dx's and dw's
            bounds[i] = lower_bound_us(g, checked[i].plan, hw, memo, dw=stage == 1)
            heapq.heappush(heap, (max(bound, bounds[i]), label, stage + 1, i))
            continue
        PROGRESS.done += 1
        done[i] = _estimated(g, checked[i], hw, memo, bounds.get(i, 0.0))
        best = min(best, _rank(done[i])) if best is not None else _rank(done[i])
    for bound, _label, _stage, i in heap:
        bounds[i] = bound
    return done, bounds


def _search(g: ConvGeom, base: dict, prune: bool = True) -> Plan:
    """Enumerate, check, bound, estimate (``prune``: only what may win) and pick."""
    target = base["target"]
    hw = TARGET_FIGURES[target]
    records: list = []
    if base["compute_dx"] and (why := toeplitz.toeplitz_domain(g)):   # the method's domain, named once
        records.append(Candidate("dx:toeplitz (any tiling)", False, why, None, 0, 0))
    memo: dict = {}   # the work candidates share (estimate.py, bound.py)
    checked = _checked(g, base, hw, records)
    if not checked:
        raise Conv3dBwdPlanError(no_plan_message(target, records, hw.sbuf_usable, hw.psum_banks)
                                 + _smallest_note(g, base, hw.sbuf_usable))
    done, bounds = _estimate_bounded(g, checked, hw, memo, prune)
    pick = min(done.values(), key=_rank)
    lines = [_record_line(r, checked, done, bounds, pick) for r in records]
    records_t = tuple(lines)
    estimated = sorted(done.values(), key=_rank)
    if len(done) == len(checked):
        alts = tuple(replace(q, candidates=records_t) for q in estimated)
        return replace(alts[0], candidates=records_t, alternatives=alts)
    key = tuple(base[k] for k in PROBLEM_FIELDS)
    _UNESTIMATED[key] = _Unestimated(g, estimated, [c for i, c in enumerate(checked) if i not in done], records_t,
                                      memo)
    _UNESTIMATED.move_to_end(key)
    while len(_UNESTIMATED) > LEFTOVERS_KEPT:
        _UNESTIMATED.popitem(last=False)
    return replace(pick, candidates=records_t, alternatives=(), alternatives_lazy=True)


def _record_line(r, checked: list[_Checked], done: dict[int, Plan], bounds: dict[int, float],
                 pick: Plan) -> Candidate:
    """A rejection as it is; a feasible candidate with its estimate, or why it was not estimated."""
    if isinstance(r, Candidate):
        return r
    c = checked[r]
    if r in done:
        return Candidate(c.label, True, "", done[r].estimated_us, c.sbuf, c.psum)
    return Candidate(c.label, True, f"not estimated: its bound {bounds[r]:.2f} us is above the pick's "
                     f"{pick.estimated_us:.2f} us", None, c.sbuf, c.psum)


def every_alternative(pick: Plan, where: Callable[[Plan], bool] | None = None) -> tuple[Plan, ...]:
    """Every feasible alternative of a pruned pick's problem, estimated, cheapest first (``Plan.
    feasible_candidates``): the pruned search's estimates and the rest's; planned again exhaustively when
    that search's leftovers are gone (another process, or many problems planned since). ``where``: only the
    alternatives it holds for, and only those estimated (a candidate's fields and label are known before
    its estimate)."""
    key = tuple(getattr(pick, k) for k in PROBLEM_FIELDS)
    left = _UNESTIMATED.get(key)
    if left is None:
        g = pick.geometry()
        base = {k: getattr(pick, k) for k in PROBLEM_FIELDS}
        every = _plan(g, base, prune=False).alternatives
        return every if where is None else tuple(q for q in every if where(q))
    hw = TARGET_FIGURES[pick.target]
    wanted = [c for c in left.pending if where is None or where(_unestimated_plan(c))]
    with memoized_checks():
        for c in wanted:
            left.late[c.label] = _estimated(left.g, c, hw, left.memo)
    taken = {c.label for c in wanted}
    left.pending = [c for c in left.pending if c.label not in taken]
    every = sorted(left.estimated + list(left.late.values()), key=_rank)
    if where is not None:
        return tuple(q for q in every if where(q))
    # the candidate table with every estimate (as the exhaustive search writes it)
    records = tuple(replace(r, reason="", estimated_us=left.late[r.label].estimated_us)
                    if r.feasible and r.label in left.late else r for r in left.records)
    return tuple(replace(q, candidates=records) for q in every)


def _unestimated_plan(c: _Checked) -> Plan:
    """A checked candidate as its Plan will read, but for the estimate."""
    return replace(c.plan, sbuf_bytes=c.sbuf, psum_banks=c.psum, label=c.label)
