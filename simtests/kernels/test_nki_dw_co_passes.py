"""Box-mode dw in C_out passes (``Plan.dw_co_pass``): where dw's dy^T (every C_out column of a position tile) or
its output staging does not fit SBUF, dw runs C_out in passes of whole tiles, each streaming its dy boxes,
rebuilding x^T and storing its own C_out columns of dw. Forced on small geometries (exact mode against the
oracle: every box-mode method, a remainder pass, with W bands, tap passes and C_in ranges, every gradient,
LNC2); the traced peaks within the budget; illegal forms named; offered only where nothing else fits; the
geometry that had no plan (1 -> 100,000 channels) gets one."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DbMethod, DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.problem import _base
from conv3d_bwd.kernels.plan.search import _label
from conv3d_bwd.kernels.plan.smallest import smallest_plan
from conv3d_bwd.kernels.spec.dw_options import dw_co_pass_legal, dw_co_passes

from .support import GRADS, assert_budget_bounds_peak, conv_shapes, plan_geom, run_and_compare, spy


def _force_co_pass(method, tiles_per_pass, split="positions", **edit):
    """Edit: the first per-gradient candidate with dw ``method`` (not x-stationary, db not folded on dw; dw
    ``split`` at LNC2) forced into C_out passes of ``tiles_per_pass`` tiles, with the other fields ``edit``."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                     and a.dw_method is method and (not a.dw_x_stationary)
                                     and (a.db_method is not DbMethod.FOLD)
                                     and (a.lnc == 1 or a.dw_split == split)
                                     and (not (a.dw_interleave or a.dx_prefetch)))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dw_co_pass=tiles_per_pass, dw_dyt_dma=False, **edit)
        g = plan_geom(q)
        assert dw_co_pass_legal(g, q) and len(dw_co_passes(g, q)) >= 2, q.label
        why, budget = _check(g, q, TARGET_FIGURES[q.target])
        assert not why, (q.label, why)
        return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))
    return pick


def _passes(monkeypatch) -> list:
    """The C_out range of every dw state the kernel makes (so a test knows the passes ran)."""
    return spy(monkeypatch, nki_dw.DwState, "__init__", lambda *a, co_range=None, **k: co_range)


# C_out 300: three tiles, the last of 44 channels; W stride 2, dilation 2, both W sides padded
BOX = {"batch": 2, "c_in": 3, "c_out": 300, "size": (3, 4, 7), "kernel": (2, 2, 3), "stride": (1, 1, 2),
       "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)}
POINTWISE = {"batch": 1, "c_in": 5, "c_out": 257, "size": (2, 2, 3), "kernel": (1, 1, 1)}


@pytest.mark.parametrize("method, geom, tiles_per_pass", [
    (DwMethod.TAP_GEMM, BOX, 1), (DwMethod.TAP_PACK, BOX, 2), (DwMethod.GEMM, POINTWISE, 1),
], ids=["tap_gemm-pass1", "tap_pack-pass2-remainder", "gemm-pass1"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_co_passes_are_exact(method, geom, tiles_per_pass, dtype, monkeypatch):
    seen = _passes(monkeypatch)
    run_and_compare(**geom, dtype=dtype, grads=("dw", "db"), plan_edit=_force_co_pass(method, tiles_per_pass))
    step = 128 * tiles_per_pass
    assert seen == [(c0, min(geom["c_out"], c0 + step)) for c0 in range(0, geom["c_out"], step)]


def test_co_passes_with_w_bands_tap_passes_and_ci_ranges_are_exact(monkeypatch):
    seen = _passes(monkeypatch)
    run_and_compare(**dict(BOX, c_in=5), dtype="fp32", grads=("dw",),
                    plan_edit=_force_co_pass(DwMethod.TAP_GEMM, 2, dw_w_band=2, dw_tap_range=5, dw_ci_range=3))
    # C_out passes outermost, then the C_in ranges, then the tap passes: 2 x 2 x 3 states
    assert seen == [(0, 256)] * 6 + [(256, 300)] * 6


def test_co_passes_with_every_gradient_are_exact():
    run_and_compare(**BOX, dtype="fp16", grads=GRADS, plan_edit=_force_co_pass(DwMethod.TAP_PACK, 1))


@pytest.mark.parametrize("split", ["positions", "taps"])
def test_co_passes_at_lnc2_are_exact(split):
    run_and_compare(**BOX, lnc=2, grads=GRADS, plan_edit=_force_co_pass(DwMethod.TAP_PACK, 2, split))


def test_co_passes_run_within_their_budget_trace_only():
    shapes = conv_shapes(**BOX)
    kw = {k: BOX[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", compute_dx=False, compute_db=False)
    for tiles_per_pass, w_band in ((1, 0), (2, 0), (1, 3)):
        alt = _force_co_pass(DwMethod.TAP_PACK, tiles_per_pass, dw_w_band=w_band)(plan)
        assert_budget_bounds_peak(alt, shapes, **kw, compute_dx=False, compute_db=False)


def test_co_pass_illegal_forms_are_rejected_by_name():
    shapes = conv_shapes(**BOX)
    kw = {k: BOX[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    alts = plan.feasible_candidates()
    rows = next(a for a in alts if a.dw_method is DwMethod.ROW_PACK)
    shared = next(a for a in alts if a.strategy is Strategy.SHARED_DY)
    folded = next(a for a in alts if a.strategy is Strategy.PER_GRADIENT and a.db_method is DbMethod.FOLD
                  and a.dw_method in (DwMethod.TAP_GEMM, DwMethod.TAP_PACK))
    passes = _force_co_pass(DwMethod.TAP_PACK, 1)(plan)
    for bad in (dataclasses.replace(rows, dw_co_pass=1), dataclasses.replace(shared, dw_co_pass=1),
                dataclasses.replace(folded, dw_co_pass=1), dataclasses.replace(passes, dw_co_pass=3),
                dataclasses.replace(passes, dw_x_stationary=True)):
        why = _check(g, bad, TARGET_FIGURES["trn2"])[0]
        assert why.startswith("dw_co_pass needs"), (bad.label, why)


def test_co_passes_are_offered_only_where_nothing_else_fits():
    shapes = conv_shapes(**BOX)
    kw = {k: BOX[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    assert not plan.feasible_candidates(where=lambda c: c.dw_co_pass)


def test_one_to_100000_channels_plans_with_co_passes():
    """1 -> 100,000 fp32, every gradient: a dy^T of one position and every C_out column is 400 KB per
    partition, so no tiling that holds every C_out tile in dw fits; the plan runs dw in C_out passes."""
    shapes = conv_shapes(1, 1, 100_000, (2, 2, 2), (1, 1, 1))
    plan = plan_conv3d_bwd(*shapes, dtype="fp32")
    g = plan_geom(plan)
    assert plan.dw_co_pass and "co-tiles/pass" in plan.label, plan.label
    assert plan.sbuf_bytes <= TARGET_FIGURES["trn2"].sbuf_usable
    base = _base(g, *shapes, (1, 1, 1), (0,) * 6, (1, 1, 1), "trn2", 1, True, True, True)
    every = dataclasses.replace(smallest_plan(g, base), dw_co_pass=0)
    assert _check(g, every, TARGET_FIGURES["trn2"])[0].startswith("SBUF")
