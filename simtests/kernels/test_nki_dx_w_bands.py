"""Gather dx in W bands (``Plan.dx_w_band``): a dx band whose whole-row dy buffer (every C_out tile) does not
fit SBUF runs as bands of W input columns, each loading the dy columns its inputs read (the W halo). Forced on
small geometries (exact mode against the oracle: gather_s1, phase_gather, gemm, C_in-outer, gradient subsets,
LNC1 and LNC2); the geometry a random sweep found without a plan gets one (trace-only)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DxMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.search import _label
from conv3d_bwd.kernels.spec.dx_options import dx_w_band_legal, dx_w_bands

from .support import GRADS, assert_budget_bounds_peak, conv_shapes, plan_geom, run_and_compare


def _force_w_band(width, ci_outer=None, split=None):
    """Edit: the first per-gradient gather candidate (C_in-outer ``ci_outer`` and LNC2 ``ci split`` when
    given) forced into W bands of ``width`` input columns."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT and a.dx_regions == 1
                                     and (a.dx_method in (DxMethod.GEMM, DxMethod.GATHER_S1, DxMethod.PHASE_GATHER))
                                     and (not (a.dx_transposed or a.dx_dphase_pairs or a.dx_prefetch or a.dw_interleave or a.dx_band_early))
                                     and (ci_outer is None or a.dx_ci_outer is ci_outer)
                                     and (split is None or a.dx_ci_split is split) and (not (a.compute_db
                                     and (not a.compute_dw) and (a.db_method.value == 'fold'))))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dx_w_band=width)
        g = plan_geom(q)
        assert dx_w_band_legal(g, q) and len(dx_w_bands(g, q)) >= 2, q.label
        why, budget = _check(g, q, TARGET_FIGURES[q.target])
        assert not why, (q.label, why)
        return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))
    return pick


# W stride 2 and dilation 2, both W sides padded (phase_gather): the bands' dy windows overlap
STRIDED = {"batch": 2, "c_in": 3, "c_out": 5, "size": (3, 4, 13), "kernel": (2, 2, 3), "stride": (1, 1, 2),
           "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)}
STRIDE1 = {"batch": 1, "c_in": 4, "c_out": 130, "size": (2, 3, 11), "kernel": (1, 3, 3),
           "padding": (0, 0, 1, 1, 1, 1)}
POINTWISE = {"batch": 1, "c_in": 5, "c_out": 3, "size": (2, 2, 9), "kernel": (1, 1, 1)}


@pytest.mark.parametrize("geom, width", [(STRIDED, 4), (STRIDED, 1), (STRIDE1, 3), (STRIDE1, 5), (POINTWISE, 4)],
                         ids=["phase-w4", "phase-w1", "stride1-co130-w3", "stride1-co130-w5", "gemm-w4"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_w_bands_are_exact(geom, width, dtype):
    run_and_compare(**geom, dtype=dtype, grads=("dx",), plan_edit=_force_w_band(width))


@pytest.mark.parametrize("grads", [("dx", "db"), ("dx", "dw"), GRADS], ids=lambda g: "+".join(g))
def test_w_bands_with_gradient_subsets_are_exact(grads):
    run_and_compare(**STRIDED, dtype="fp16", grads=grads, plan_edit=_force_w_band(3))


def test_w_bands_with_ci_outer_groups_are_exact():
    run_and_compare(batch=1, c_in=130, c_out=3, size=(2, 2, 7), kernel=(1, 2, 3), padding=(0, 0, 1, 0, 1, 1),
                    dtype="bf16", grads=("dx",), plan_edit=_force_w_band(3, ci_outer=True))


@pytest.mark.parametrize("grads", [("dx",), GRADS], ids=lambda g: "+".join(g))
def test_w_bands_at_lnc2_are_exact(grads):
    run_and_compare(**STRIDED, lnc=2, grads=grads, plan_edit=_force_w_band(4))


def test_w_bands_run_within_their_budget_trace_only():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", compute_dw=False, compute_db=False)
    for width in (1, 4, 7):
        alt = _force_w_band(width)(plan)
        assert_budget_bounds_peak(alt, shapes, **kw, compute_dw=False, compute_db=False)


def test_w_band_illegal_forms_are_rejected_by_name():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    shared = next(a for a in plan.feasible_candidates() if a.strategy is Strategy.SHARED_DY)
    for bad in (dataclasses.replace(shared, dx_w_band=3),
                dataclasses.replace(_force_w_band(3)(plan), dx_w_band=g.axes[2].n)):
        why = _check(g, bad, TARGET_FIGURES["trn2"])[0]
        assert why.startswith("dx_w_band needs"), (bad.label, why)
    only_dx_db = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", compute_dw=False)
    fold = next(a for a in only_dx_db.feasible_candidates() if a.db_method.value == "fold")
    assert _check(g, dataclasses.replace(fold, dx_w_band=3), TARGET_FIGURES["trn2"])[0].startswith("dx_w_band needs")


def test_all_c_out_band_reproducer_gets_a_w_banded_plan_within_budget():
    """C_out 1024 (8 tiles) with a 7x7 kernel over rows of 128: the one-row band's dy buffer of every C_out
    tile did not fit whole W rows (no plan before W bands)."""
    kw = {"padding": (3, 3, 3, 3, 0, 0), "compute_dw": False, "compute_db": False}
    shapes = conv_shapes(1, 1, 1024, (8, 8, 128), (7, 7, 1), padding=kw["padding"])
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    assert plan.dx_w_band and "W band" in plan.label, plan.label
    assert _check(plan_geom(plan), dataclasses.replace(plan, dx_w_band=0), TARGET_FIGURES["trn2"])[0].startswith("SBUF")
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), **kw, trace_only=True)
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes <= TARGET_FIGURES["trn2"].sbuf_usable
