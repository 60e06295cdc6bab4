"""shared_dy LNC1 with x-stationary stacked dw (a down_s2 candidate): the finish's casts and stores run under the
flushed pass's matmuls, only the last store run is a trail (the estimate's _estimate_xs_finish_shared)."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.costs import ENGINES, TARGET_FIGURES, CostSheet
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.estimate import _estimate_sheet
from conv3d_bwd.kernels.plan.estimate_dw import _estimate_xs_finish, _shared_stacked_xs, _xs_stores
from conv3d_bwd.kernels.spec.dw_options import dw_tap_passes
from conv3d_bwd.kernels.spec.dw_xs import dw_xs_chunks

TRN2 = TARGET_FIGURES["trn2"]


def test_a_scaled_sheet_is_a_share_of_the_busy_time():
    c = CostSheet(TRN2)
    c.dma(4096, 512, 3)
    c.compute("vector", 128, 1, 1.0, 2)
    s = c.scaled(0.25)
    assert all(s.busy[e] == pytest.approx(0.25 * c.busy[e]) for e in ENGINES)
    assert c.scaled(1.0).counts == c.counts


def _down_s2(lnc):
    from conv3d_bwd.verify.bench import BENCH_SHAPES
    s = next(s for s in BENCH_SHAPES if s.name == "down_s2")
    g = s.geometry
    plan = plan_conv3d_bwd(g.dy_shape, g.x_shape, g.w_shape, stride=s.stride, padding=s.padding,
                           dilation=s.dilation, dtype=s.dtype, target="trn2", lnc=lnc)
    return validate(g.dy_shape, g.x_shape, g.w_shape, s.stride, s.padding, s.dilation, s.dtype), plan


def test_down_s2_lnc1_charges_only_the_last_store_run_as_the_trail():
    g, pick = _down_s2(1)
    # the best-estimated shared-dy stacked x-stationary candidate (the subject, whether or not it is the pick)
    plan = min((p for p in (pick, *pick.feasible_candidates()) if _shared_stacked_xs(p)),
               key=lambda p: p.estimated_us)
    c, _fill = _estimate_sheet(g, plan, TRN2)
    c.section_busy()   # (closes the open section: ``c.sections`` holds each section's bandwidth time)
    span = dw_tap_passes(g, plan, 0)[0]
    whole = CostSheet(TRN2)
    _estimate_xs_finish(whole, g, plan, TRN2, g.c_in, span)
    runs = sum(n for _t, n in _xs_stores(g, plan, dw_xs_chunks(g, plan, span)))
    assert runs > 1
    assert c.sections["dw_finish"]["dma"] == pytest.approx(whole.busy["dma"] / runs)
    # the rest is in the body: the sheet's total is unchanged
    assert sum(s_["dma"] for s_ in c.sections.values()) == pytest.approx(c.busy["dma"])


def test_other_strategies_keep_the_whole_finish_a_trail():
    _g, plan = _down_s2(2)
    lnc2 = [p for p in plan.alternatives if p.dw_x_stationary and p.strategy is Strategy.SHARED_DY]
    assert lnc2 and not any(_shared_stacked_xs(p) for p in lnc2)   # LNC2: the exchange, charged as before
    _g1, plan1 = _down_s2(1)
    others = [p for p in plan1.alternatives if p.dw_x_stationary and not p.dw_row_stack]
    assert others and not any(_shared_stacked_xs(p) for p in others)
