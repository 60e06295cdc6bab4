"""The NKI kernel ``conv3d_bwd``: validation, the plan, and the dx / dw / db sections it runs."""
import os
from itertools import pairwise

import nki
import nki.isa as nisa
import nki.language as nl

from .errors import Conv3dBwdInputError
from .geometry import check_tensors, validate
from .methods.dw_kd_moving.nki_body import run_dw_kd_moving
from .methods.dw_small_extent.nki_body import run_dw_small_extent
from .methods.s2d_gemm.nki_body import run_s2d_gemm
from .methods.s2d_gemm.spec import S2dOptions
from .nki_common import Evictor, transpose_pool
from .nki_db import DbState
from .nki_dw import DwState, dw_streaming_steps, run_dw_streaming
from .nki_dw_gemm import run_dw_gemm_dma
from .nki_dx import (
    DxTPrefetch,
    DyBands,
    dx_item_steps,
    dx_program_groups,
    load_dx_filters,
    load_first_band,
    run_dx,
)
from .nki_dx_dpairs import DxSteps, dpairs_step_count, dx_dpairs_steps
from .nki_dx_toeplitz import load_toeplitz_filters, run_dx_toeplitz
from .nki_pw_shared import run_pw_shared
from .plan.search import plan_conv3d_bwd
from .schedule import axis_bands
from .spec.compose import (
    db_taps_local,
    dw_interleave_ok,
    dx_band_early_on,
    dx_between_on,
    dx_box_items,
    dx_inside_dw_on,
    dx_prefetched,
    filters_after_first_chunk,
)
from .spec.dw_options import dw_direct
from .spec.dx_options import dx_program_items
from .spec.forcing import current_forced_plan
from .spec.items import db_chunk
from .spec.psum import psum_transpose_banks
from .spec.record import DbMethod, DwMethod, DxMethod, Strategy

_NC_TARGET = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}
_ENV_TARGET = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
               "trn3": "trn3", "gen4": "trn3"}


def _target():
    """The planner target: from nisa.get_nc_version(), else NEURON_PLATFORM_TARGET_OVERRIDE (default trn2)."""
    get = getattr(nisa, "get_nc_version", None)
    if get is not None:
        version = get()
        name = getattr(version, "name", str(version))
        if name in _NC_TARGET:
            return _NC_TARGET[name]
    return _ENV_TARGET.get(os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2").strip().lower(), "trn2")


class _Ctx:
    """What every section needs: geometry, plan, tensors, shared PSUM transpose pool, evictor."""

    def __init__(self, g, plan, dy, x, filters, dx, dw, db, dtype, target):
        self.g, self.plan = g, plan
        self.dy, self.x, self.filters = dy, x, filters
        self.dx, self.dw, self.db = dx, dw, db
        self.dtype = dtype
        self.psum_t = transpose_pool(g.dtype_bytes, dtype, psum_transpose_banks(plan))
        self.evict = Evictor(target)


def _same_problem(plan, g, args):
    dy_shape, x_shape, w_shape, stride, padding, dilation, flags = args
    return (tuple(plan.dy_shape) == tuple(dy_shape) and tuple(plan.x_shape) == tuple(x_shape)
            and tuple(plan.w_shape) == tuple(w_shape) and tuple(plan.stride) == tuple(stride)
            and tuple(plan.padding) == tuple(padding) and tuple(plan.dilation) == tuple(dilation)
            and plan.dtype == g.dtype
            and (plan.compute_dx, plan.compute_dw, plan.compute_db) == flags)


@nki.jit
def conv3d_bwd(dy, x_in, filters, stride=(1, 1, 1), padding=(0, 0, 0, 0, 0, 0), dilation=(1, 1, 1),
               compute_dx=True, compute_dw=True, compute_db=True):
    """Gradients of a 3D convolution: (dx, dw, db), keeping the requested ones (bare when one)."""
    check_tensors(dy=dy, x_in=x_in, filters=filters)
    g = validate(dy.shape, x_in.shape, filters.shape, stride, padding, dilation,
                 dtypes=(dy.dtype, x_in.dtype, filters.dtype), compute_dx=compute_dx,
                 compute_dw=compute_dw, compute_db=compute_db)
    lnc = nl.num_programs(axes=0)
    pid = nl.program_id(axis=0)
    target = _target()
    flags = (bool(compute_dx), bool(compute_dw), bool(compute_db))
    plan = current_forced_plan()
    if plan is None:
        plan = plan_conv3d_bwd(dy.shape, x_in.shape, filters.shape, stride, padding, dilation, g.dtype,
                               target, lnc, *flags)
    elif not _same_problem(plan, g, (dy.shape, x_in.shape, filters.shape, stride, padding, dilation, flags)) \
            or plan.lnc != lnc:
        raise Conv3dBwdInputError(f"forced plan {plan.label!r}: its problem (shapes, stride, padding, "
                                  f"dilation, dtype, gradients, lnc={plan.lnc}) must equal the call's (lnc={lnc})")
    dtype = dy.dtype
    dx = nl.ndarray(tuple(x_in.shape), dtype, buffer=nl.shared_hbm, name="dx") if compute_dx else None
    dw = nl.ndarray(tuple(filters.shape), dtype, buffer=nl.shared_hbm, name="dw") if compute_dw else None
    db = nl.ndarray((g.c_out,), dtype, buffer=nl.shared_hbm, name="db") if compute_db else None
    if plan.s2d_group:   # stride == kernel: one GEMM over the patches (kernels/methods/s2d_gemm)
        run_s2d_gemm(g, S2dOptions(plan.s2d_group), dy, x_in, filters, dx, dw, db, dy.dtype, target, pid, lnc)
        outs = tuple(t for t in (dx, dw, db) if t is not None)
        return outs[0] if len(outs) == 1 else outs
    ctx = _Ctx(g, plan, dy, x_in, filters, dx, dw, db, dtype, target)
    fold = compute_db and plan.db_method is DbMethod.FOLD
    # few positions: dw (and a folded db) by its own method (kernels/methods/dw_small_extent)
    small = compute_dw and plan.dw_method is DwMethod.SMALL_EXTENT
    db_state = DbState(ctx) if compute_db and not (small and fold) else None
    shared = plan.strategy is Strategy.SHARED_DY

    kd_moving = plan.dw_method is DwMethod.KD_MOVING   # dw alone first (kernels/methods/dw_kd_moving)
    db_in_dx = fold and (not compute_dw or kd_moving)   # with dw, db folds on dw's dy^T tiles (PE)
    db_in_dw = db_state if (fold and compute_dw and not (small or kd_moving)) else None
    first_filters = None
    toeplitz = plan.dx_method is DxMethod.TOEPLITZ
    after_first = None
    if compute_dx and compute_dw and not shared and plan.filters_first:
        # issued before dw's stores: the DMA queues load them while dw computes (no head-of-line wait later)
        # (in a list that run_dx empties: no reference may keep them live past their group)
        first_group = dx_program_groups(g, plan, pid, lnc)[0]
        if filters_after_first_chunk(g, plan):   # by DMA alone: behind dw's first row chunk's loads
            first_filters = []

            def after_first():
                first_filters.append(load_dx_filters(ctx, first_group))
        else:
            first_filters = [load_toeplitz_filters(ctx) if toeplitz else load_dx_filters(ctx, first_group)]
    dw_deferred = None   # LNC2: dw's exchange overlaps dx, its finish runs after it
    dx_runs = []         # dx inside dw (``plan.dx_inside_dw``): dw ran it before its last matmul pass
    dx_between = None    # D-phase-pairs dx between dw's x^T bundles (``plan.dx_between_bundles``)
    dw_steps = None      # dw_interleave: dw's boxes issued between dx's items
    mine = dx_program_items(g, plan, pid) if compute_dx else []
    # dx^T's first band loads during dw's last row chunk (dw calls it)
    prefetch = DxTPrefetch(ctx, mine) if dx_prefetched(plan) else None
    # LNC2, gather: dx's first dy band loads before dw's last finish (ahead of its stores in the DMA queues)
    early = [] if compute_dx and compute_dw and not shared and dx_band_early_on(g, plan) else None
    inside = None   # dx inside dw: what dw calls in its (last, or with dx_inside_boxes each) row pass
    dx_gen = None
    if compute_dx and compute_dw and not shared and dx_inside_dw_on(g, plan):
        if plan.dx_inside_boxes:   # one dx item per call (each of dw's row passes)
            dx_gen = dx_item_steps(ctx, mine, first_filters, prefetch)
            dx_runs.append(True)
            per_box = iter(dx_box_items(g, plan, pid))
            box_items = [0]

            def inside(before=False):
                """dw calls this twice per box: ``before`` its pass's x^T bundles (the box's first item's start:
                the next item's band, ahead of them in the DMA queues), then after them (the items' matmuls)."""
                if before:
                    box_items[0] = next(per_box, 0)
                    if box_items[0]:
                        next(dx_gen, None)
                    return
                for k in range(box_items[0]):   # (the generator yields after each item's start and body)
                    if k:
                        next(dx_gen, None)
                    next(dx_gen, None)
        else:
            def inside():
                dx_runs.append(_run_gather_dx(ctx, mine, None, first_filters, prefetch, pid, lnc, early))
    if compute_dw and (small or not shared):
        # dw first: its PE work hides the start of dx (the filter loads and the first dy band)
        # (dw:small_extent always runs alone: under a forced shared-dy plan dx then runs without dw)
        if small:
            run_dw_small_extent(g, dy, x_in, dw, db if fold else None, dtype, target, pid, lnc, after_first)
        elif kd_moving:
            run_dw_kd_moving(g, dy, x_in, dw, dtype, ctx.evict, pid, lnc)
        elif plan.dw_method is DwMethod.DMA_GEMM:
            run_dw_gemm_dma(ctx, pid, lnc, db_in_dw)
        elif plan.dw_interleave and compute_dx and dw_interleave_ok(g, plan):
            dw_steps = _Steps(dw_streaming_steps(ctx, pid, lnc, db_in_dw))
        else:
            if compute_dx and dx_between_on(g, plan):   # D-phase-pairs dx steps between dw's x^T bundles
                bands = DyBands(g, ctx.dy, plan, dtype)
                if first_filters == [] and prefetch is None:   # filters_after_first_chunk: behind dw's dy loads
                    late = LateFilters(ctx, dx_program_groups(g, plan, pid, lnc)[0])
                    after_first, prefetch = None, late.load
                    steps = late.steps(mine, bands)
                else:
                    after_first = None   # (the filters load here, once)
                    pair_t = first_filters.pop() if first_filters else load_dx_filters(
                        ctx, dx_program_groups(g, plan, pid, lnc)[0])
                    steps = dx_dpairs_steps(ctx, mine, bands, pair_t, None)
                dx_between = DxSteps(steps, dpairs_step_count(g, plan, mine), bands.resident)
            dw_deferred = run_dw_streaming(ctx, pid, lnc, db_in_dw, prefetch, after_first,
                                           (lambda: early.append(load_first_band(ctx, mine)))
                                           if early is not None else None, inside,
                                           **({"between": dx_between} if dx_between is not None else {}))
            if dx_between is not None:
                dx_between.drain()
                dx_runs.append(True)
    if db_in_dw is not None and dw_steps is None and db_taps_local(g, plan):
        db_state.finish(pid, lnc)   # the taps split's db is whole on one program: stored now, under dx
    if dx_gen is not None:   # the items dw's passes did not take
        for _ in dx_gen:
            pass
    if shared and plan.dw_method is DwMethod.DMA_GEMM:   # 1x1x1: dx, dw and db from one dy load
        run_pw_shared(ctx, pid, lnc, db_in_dw)
    elif compute_dx:
        dw_state = None
        if compute_dw and shared and not small:
            rows = [max((bb.own1 - bb.own0 for bb in _bands(g, plan, a)), default=0) for a in range(2)]
            dw_state = DwState(ctx, rows, direct=dw_direct(g, plan), db_state=db_in_dw)

        boxes = [(b, (bd.own0, bd.own1), (bh.own0, bh.own1)) for b, bd, bh in mine]
        next_box = dict(pairwise(boxes))

        def on_band(b, bd, bh, bw, bufs):
            if bufs is None:
                return
            views = [DyBands.own_view(buf, bd, bh, bw, co_sz)
                     for buf, (_c0, co_sz) in zip(bufs, _co_tiles(g))]
            if db_in_dx and bd.own1 > bd.own0 and bh.own1 > bh.own0:
                for c, v in enumerate(views):
                    db_state.add(c, v)
            if dw_state is not None:
                box = (b, (bd.own0, bd.own1), (bh.own0, bh.own1))
                if box in next_box:   # (the bands come in item order: the next item's box follows)
                    dw_state.expect(*next_box[box])
                dw_state.add_box(*box, views)

        hook = on_band if (db_in_dx or dw_state) else None
        if toeplitz:
            run_dx_toeplitz(ctx, mine, hook, first_filters, dw_steps.between(len(mine)) if dw_steps else None)
        elif not dx_runs:   # under the LNC2 C_in split: every item, this program's C_in groups
            _run_gather_dx(ctx, mine, hook, first_filters, prefetch, pid, lnc, early,
                           dw_steps.between_bands() if dw_steps else None)
        if dw_state is not None:
            dw_state.finish(pid, lnc)
    if dw_steps is not None:   # the boxes dx's items did not take, then dw's finish
        dw_deferred = dw_steps.drain()
        if dw_deferred is not None:
            dw_deferred.finish(pid, lnc)
    elif dw_deferred is not None:
        dw_deferred.finish(pid, lnc)
    if db_state is not None:
        if not fold:
            per = -(-g.batch // lnc)
            db_state.standalone(range(min(g.batch, pid * per), min(g.batch, (pid + 1) * per)), db_chunk(g))
        db_state.finish(pid, lnc)
    outs = tuple(t for t in (dx, dw, db) if t is not None)
    return outs[0] if len(outs) == 1 else outs


class LateFilters:
    """dx between dw's bundles (``dx_between_bundles``) with ``filters_after_first_chunk``: dx's filters
    load by dw's ``prefetch`` hook (at its pass's last row chunk, after that chunk's dy^T: behind all of
    dw's dy loads, ahead of the pass's x^T fills and of dx's first step), or at dx's first step if that
    comes first. The DMA bandwidth serves transfers in issue order, and dw's first matmuls wait for its
    dy boxes (row-stacked: all of them), not for the filters. Loading them at dx's first step instead makes the PE wait for them before
    the first bundle."""

    def __init__(self, ctx, group):
        self.ctx, self.group = ctx, group
        self.tiles = None

    def load(self, *_engine):
        """(``_engine``: the prefetch hook's engine argument; the filters load by DMA alone)"""
        if self.tiles is None:
            self.tiles = load_dx_filters(self.ctx, self.group)

    def steps(self, mine, bands):
        """``dx_dpairs_steps`` with these filters, loaded (if not yet) when the first step runs."""
        self.load()
        yield from dx_dpairs_steps(self.ctx, mine, bands, self.tiles, None)


def _run_gather_dx(ctx, mine, hook, first_filters, prefetch, pid, lnc, early, between=None):
    run_dx(ctx, mine, hook, first_filters, prefetch, dx_program_groups(ctx.g, ctx.plan, pid, lnc),
           early.pop() if early else None, between)
    return True


def _co_tiles(g):
    return [(c, min(128, g.c_out - c)) for c in range(0, g.c_out, 128)]


def _bands(g, plan, a):
    return axis_bands(g.axes[a], plan.dx_band[a])



class _Steps:
    """dw's box generator (``dw_streaming_steps``) driven from dx's item loop (``Plan.dw_interleave``)."""

    def __init__(self, gen):
        self.gen = gen
        self.boxes = next(gen)   # the generator announces its box count first
        self.done = 0
        self.result = None

    def _step(self):
        try:
            next(self.gen)
            self.done += 1
        except StopIteration as stop:
            self.result = stop.value
            self.done = self.boxes + 1

    def between(self, n_items):
        """Before dx item i: dw's boxes up to ceil(i * boxes / items) (dx's first item goes first: dw's
        first x^T loads would hold the PE), with one item: every box before it."""
        def run(i):
            while self.done < -(-(i if n_items > 1 else i + 1) * self.boxes // n_items):
                self._step()
        return run

    def between_bands(self):
        """``between`` for the gather (``run_dx``): before dx band k of n, dw's boxes up to k * boxes / n."""
        def run(k, n):
            self.between(n)(k)
        return run

    def drain(self):
        """The boxes left, then the generator's return value (the deferred finish or None)."""
        while self.done <= self.boxes:
            self._step()
        return self.result
