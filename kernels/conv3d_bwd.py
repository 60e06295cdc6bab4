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
    dx_program_groups,
    load_dx_filters,
    load_first_band,
    run_dx,
)
from .nki_dx_toeplitz import load_toeplitz_filters, run_dx_toeplitz
from .nki_pw_shared import run_pw_shared
from .plan.search import plan_conv3d_bwd
from .schedule import axis_bands
from .spec.compose import (
    db_taps_local,
    dw_interleave_ok,
    dx_band_early_on,
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
    plan = _kernel_plan(g, (dy.shape, x_in.shape, filters.shape, stride, padding, dilation, flags), target, lnc)
    dtype = dy.dtype
    dx = nl.ndarray(tuple(x_in.shape), dtype, buffer=nl.shared_hbm, name="dx") if compute_dx else None
    dw = nl.ndarray(tuple(filters.shape), dtype, buffer=nl.shared_hbm, name="dw") if compute_dw else None
    db = nl.ndarray((g.c_out,), dtype, buffer=nl.shared_hbm, name="db") if compute_db else None
    if plan.s2d_group:   # stride == kernel: one GEMM over the patches (kernels/methods/s2d_gemm)
        run_s2d_gemm(g, S2dOptions(plan.s2d_group), dy, x_in, filters, dx, dw, db, dy.dtype, target, pid, lnc)
    else:
        _Sections(_Ctx(g, plan, dy, x_in, filters, dx, dw, db, dtype, target), pid, lnc, flags, target).run()
    outs = tuple(t for t in (dx, dw, db) if t is not None)
    return outs[0] if len(outs) == 1 else outs


def _kernel_plan(g, args, target, lnc):
    """The forced plan (its problem must be the call's), else the planner's."""
    dy_shape, x_shape, w_shape, stride, padding, dilation, flags = args
    plan = current_forced_plan()
    if plan is None:
        return plan_conv3d_bwd(dy_shape, x_shape, w_shape, stride, padding, dilation, g.dtype, target, lnc, *flags)
    if not _same_problem(plan, g, args) or plan.lnc != lnc:
        raise Conv3dBwdInputError(f"forced plan {plan.label!r}: its problem (shapes, stride, padding, "
                                  f"dilation, dtype, gradients, lnc={plan.lnc}) must equal the call's (lnc={lnc})")
    return plan


class _Sections:
    """One program's dx / dw / db sections in order, and what they hand one another: dx's filters loaded
    during dw, dw's boxes paced by dx's items, dw's deferred finish."""

    def __init__(self, ctx, pid, lnc, flags, target):
        g, plan = ctx.g, ctx.plan
        self.ctx, self.g, self.plan, self.pid, self.lnc, self.target = ctx, g, plan, pid, lnc, target
        compute_dx, compute_dw, compute_db = flags
        self.compute_dx, self.compute_dw = compute_dx, compute_dw
        self.fold = compute_db and plan.db_method is DbMethod.FOLD
        # few positions: dw (and a folded db) by its own method (kernels/methods/dw_small_extent)
        self.small = compute_dw and plan.dw_method is DwMethod.SMALL_EXTENT
        self.db_state = DbState(ctx) if compute_db and not (self.small and self.fold) else None
        self.shared = plan.strategy is Strategy.SHARED_DY
        self.kd_moving = plan.dw_method is DwMethod.KD_MOVING   # dw alone first (kernels/methods/dw_kd_moving)
        self.db_in_dx = self.fold and (not compute_dw or self.kd_moving)   # with dw, db folds on dw's dy^T tiles (PE)
        self.db_in_dw = self.db_state if (self.fold and compute_dw and not (self.small or self.kd_moving)) else None
        self.toeplitz = plan.dx_method is DxMethod.TOEPLITZ
        self.first_filters, self.after_first = self._first_filters()
        self.dw_deferred = None   # LNC2: dw's exchange overlaps dx, its finish runs after it
        self.dw_steps = None      # dw_interleave: dw's boxes issued between dx's items
        self.mine = dx_program_items(g, plan, pid) if compute_dx else []
        # dx^T's first band loads during dw's last row chunk (dw calls it)
        self.prefetch = DxTPrefetch(ctx, self.mine) if dx_prefetched(plan) else None
        # LNC2, gather: dx's first dy band loads before dw's last finish (ahead of its stores in the DMA queues)
        self.early = [] if compute_dx and compute_dw and not self.shared and dx_band_early_on(g, plan) else None

    def _first_filters(self):
        """dx's filters issued before dw's stores: the DMA queues load them while dw computes (no head-of-line
        wait later), in a list that run_dx empties (no reference may keep them live past their group); with
        ``filters_after_first_chunk`` by DMA alone, behind dw's first row chunk's loads (dw calls the loader)."""
        g, plan = self.g, self.plan
        if not (self.compute_dx and self.compute_dw and not self.shared and plan.filters_first):
            return None, None
        first_group = dx_program_groups(g, plan, self.pid, self.lnc)[0]
        if filters_after_first_chunk(g, plan):
            self._first_group = first_group
            return [], self._load_first_filters
        return [load_toeplitz_filters(self.ctx) if self.toeplitz else load_dx_filters(self.ctx, first_group)], None

    def _load_first_filters(self):
        self.first_filters.append(load_dx_filters(self.ctx, self._first_group))

    def _load_early_band(self):
        self.early.append(load_first_band(self.ctx, self.mine))

    def run(self):
        """dw first (its PE work hides the start of dx), then dx (or the shared-dy GEMM), then the finishes."""
        g, plan, pid, lnc = self.g, self.plan, self.pid, self.lnc
        if self.compute_dw and (self.small or not self.shared):
            self._dw_first()
        if self.db_in_dw is not None and self.dw_steps is None and db_taps_local(g, plan):
            self.db_state.finish(pid, lnc)   # the taps split's db is whole on one program: stored now, under dx
        if self.shared and plan.dw_method is DwMethod.DMA_GEMM:   # 1x1x1: dx, dw and db from one dy load
            run_pw_shared(self.ctx, pid, lnc, self.db_in_dw)
        elif self.compute_dx:
            self._dx()
        self._finish()

    def _dw_first(self):
        """dw by the plan's method (dw:small_extent always runs alone: under a forced shared-dy plan dx then
        runs without dw)."""
        ctx, g, plan, pid, lnc = self.ctx, self.g, self.plan, self.pid, self.lnc
        if self.small:
            run_dw_small_extent(g, ctx.dy, ctx.x, ctx.dw, ctx.db if self.fold else None, ctx.dtype, self.target,
                                pid, lnc, self.after_first)
        elif self.kd_moving:
            run_dw_kd_moving(g, ctx.dy, ctx.x, ctx.dw, ctx.dtype, ctx.evict, pid, lnc)
        elif plan.dw_method is DwMethod.DMA_GEMM:
            run_dw_gemm_dma(ctx, pid, lnc, self.db_in_dw)
        elif plan.dw_interleave and self.compute_dx and dw_interleave_ok(g, plan):
            self.dw_steps = _Steps(dw_streaming_steps(ctx, pid, lnc, self.db_in_dw))
        else:
            self._dw_streaming()

    def _dw_streaming(self):
        """dw's streaming passes, with what dx runs before them."""
        self.dw_deferred = run_dw_streaming(self.ctx, self.pid, self.lnc, self.db_in_dw, self.prefetch,
                                            self.after_first, self._load_early_band if self.early is not None else None)

    def _dx(self):
        """dx by the Toeplitz pass or the gather, with dw's boxes (shared dy) and a folded db on its dy bands."""
        ctx, g, plan, pid, lnc = self.ctx, self.g, self.plan, self.pid, self.lnc
        dw_state = None
        if self.compute_dw and self.shared and not self.small:
            rows = [max((bb.own1 - bb.own0 for bb in _bands(g, plan, a)), default=0) for a in range(2)]
            dw_state = DwState(ctx, rows, direct=dw_direct(g, plan), db_state=self.db_in_dw)
        hook = _BandHook(g, self.mine, self.db_in_dx, self.db_state, dw_state) \
            if (self.db_in_dx or dw_state) else None
        dw_steps = self.dw_steps
        if self.toeplitz:
            run_dx_toeplitz(ctx, self.mine, hook, self.first_filters, dw_steps.between(len(self.mine)) if dw_steps else None)
        else:   # under the LNC2 C_in split: every item, this program's C_in groups
            run_dx(ctx, self.mine, hook, self.first_filters, self.prefetch, dx_program_groups(g, plan, pid, lnc),
                   self.early.pop() if self.early else None, dw_steps.between_bands() if dw_steps else None)
        if dw_state is not None:
            dw_state.finish(pid, lnc)

    def _finish(self):
        """dw's boxes dx's items did not take and its deferred finish; db's standalone sums and finish."""
        g, pid, lnc = self.g, self.pid, self.lnc
        if self.dw_steps is not None:   # the boxes dx's items did not take, then dw's finish
            self.dw_deferred = self.dw_steps.drain()
            if self.dw_deferred is not None:
                self.dw_deferred.finish(pid, lnc)
        elif self.dw_deferred is not None:
            self.dw_deferred.finish(pid, lnc)
        if self.db_state is not None:
            if not self.fold:
                per = -(-g.batch // lnc)
                self.db_state.standalone(range(min(g.batch, pid * per), min(g.batch, (pid + 1) * per)), db_chunk(g))
            self.db_state.finish(pid, lnc)


class _BandHook:
    """What dx calls on each of its dy bands: db folded on the band's own rows, and (shared dy) dw's box."""

    def __init__(self, g, mine, db_in_dx, db_state, dw_state):
        self.g, self.db_in_dx, self.db_state, self.dw_state = g, db_in_dx, db_state, dw_state
        boxes = [(b, (bd.own0, bd.own1), (bh.own0, bh.own1)) for b, bd, bh in mine]
        self.next_box = dict(pairwise(boxes))

    def __call__(self, b, bd, bh, bw, bufs):
        if bufs is None:
            return
        views = [DyBands.own_view(buf, bd, bh, bw, co_sz) for buf, (_c0, co_sz) in zip(bufs, _co_tiles(self.g))]
        if self.db_in_dx and bd.own1 > bd.own0 and bh.own1 > bh.own0:
            for c, v in enumerate(views):
                self.db_state.add(c, v)
        if self.dw_state is not None:
            box = (b, (bd.own0, bd.own1), (bh.own0, bh.own1))
            if box in self.next_box:   # (the bands come in item order: the next item's box follows)
                self.dw_state.expect(*self.next_box[box])
            self.dw_state.add_box(*box, views)


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
