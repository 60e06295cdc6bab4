"""dw in W bands (``Plan.dw_w_band``): box-mode per-gradient dw whose whole-row x band does not fit SBUF runs
each box as bands of W output columns, each with the x columns its taps reach (the W halo). Forced on small
geometries (exact mode against the oracle, every box-mode method, gradient subsets, LNC1 and LNC2); the
geometries a random sweep found without a plan get one (trace-only where large)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DwMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.search import _label
from conv3d_bwd.kernels.spec.dw_options import dw_w_band_legal, dw_w_bands
from conv3d_bwd.verify.candidates import case_plan, run_candidates
from conv3d_bwd.verify.cases import Case

from .support import GRADS, assert_budget_bounds_peak, conv_shapes, plan_geom, run_and_compare


def _force_w_band(method, width, xs=None, split="positions"):
    """Edit: the first per-gradient candidate with dw ``method`` (x-stationary ``xs`` when given, dw
    ``split`` at LNC2) forced into W bands of ``width`` output columns (dyT dma off: whole W rows)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                     and a.dw_method is method and (xs is None or a.dw_x_stationary is xs)
                                     and (a.lnc == 1 or a.dw_split == split)
                                     and (not (a.dw_interleave or a.dx_prefetch)))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dw_w_band=width, dw_dyt_dma=False)
        g = plan_geom(q)
        assert dw_w_band_legal(g, q) and len(dw_w_bands(g, q)) >= 2, q.label
        why, budget = _check(g, q, TARGET_FIGURES[q.target])
        assert not why, (q.label, why)
        return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))
    return pick


# W stride 2, dilation 2 and both W sides padded: the bands' x windows overlap (the halo) and the last band is
# shorter than the others
BOX = {"batch": 2, "c_in": 3, "c_out": 5, "size": (3, 4, 13), "kernel": (2, 2, 3), "stride": (1, 1, 2),
       "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)}
STRIDE1 = {"batch": 1, "c_in": 4, "c_out": 6, "size": (2, 3, 11), "kernel": (1, 3, 3), "padding": (0, 0, 1, 1, 1, 1)}
POINTWISE = {"batch": 1, "c_in": 5, "c_out": 3, "size": (2, 2, 9), "kernel": (1, 1, 1)}


@pytest.mark.parametrize("method, xs, geom, width", [
    (DwMethod.TAP_GEMM, False, BOX, 3), (DwMethod.TAP_PACK, False, BOX, 2), (DwMethod.TAP_PACK, True, BOX, 4),
    (DwMethod.TAP_PACK, False, STRIDE1, 1), (DwMethod.TAP_PACK, True, STRIDE1, 5), (DwMethod.GEMM, None, POINTWISE, 4),
], ids=lambda v: getattr(v, "value", str(v)))
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_w_bands_are_exact(method, xs, geom, width, dtype):
    run_and_compare(**geom, dtype=dtype, grads=("dw", "db"), plan_edit=_force_w_band(method, width, xs))


@pytest.mark.parametrize("grads", [("dw",), ("dx", "dw"), GRADS], ids=lambda g: "+".join(g))
def test_w_bands_with_gradient_subsets_are_exact(grads):
    run_and_compare(**BOX, dtype="fp16", grads=grads, plan_edit=_force_w_band(DwMethod.TAP_PACK, 3))


@pytest.mark.parametrize("split", ["positions", "taps"])
@pytest.mark.parametrize("xs", [False, True])
def test_w_bands_at_lnc2_are_exact(split, xs):
    run_and_compare(**BOX, lnc=2, plan_edit=_force_w_band(DwMethod.TAP_PACK, 3, xs, split))


def test_w_bands_with_tap_passes_are_exact():
    edit = _force_w_band(DwMethod.TAP_GEMM, 4)
    run_and_compare(**BOX, dtype="fp32", grads=("dw",),
                    plan_edit=lambda p: dataclasses.replace(edit(p), dw_tap_range=3))


def test_w_bands_run_within_their_budget_trace_only():
    shapes = conv_shapes(**BOX)
    kw = {k: BOX[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    for width in (1, 3, 6):
        alt = _force_w_band(DwMethod.TAP_PACK, width)(plan)
        assert_budget_bounds_peak(alt, shapes, **kw)


def test_w_band_illegal_forms_are_rejected_by_name():
    shapes = conv_shapes(**BOX)
    kw = {k: BOX[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    rows = next(a for a in plan.feasible_candidates() if a.dw_method is DwMethod.ROW_PACK)
    shared = next(a for a in plan.feasible_candidates() if a.strategy is Strategy.SHARED_DY)
    for bad in (dataclasses.replace(rows, dw_w_band=3), dataclasses.replace(shared, dw_w_band=3),
                dataclasses.replace(_force_w_band(DwMethod.TAP_PACK, 3)(plan), dw_w_band=g.axes[2].o)):
        why = _check(g, bad, TARGET_FIGURES["trn2"])[0]
        assert why.startswith("dw_w_band needs"), (bad.label, why)


# (case, target): no plan before dw's x band could be banded in W (a W row of the band did not fit)
REPRODUCERS = [
    pytest.param(Case("one-channel-wide-dil", "w-band", 1, 1, 1, (16, 4, 132), (7, 7, 1), padding=(0, 3, 0, 3, 0, 3),
                      dilation=(3, 1, 1), dtype="fp32", grads=("dw",)), "trn2", id="c1-16x4x132-k771"),
    pytest.param(Case("strided-dilated-trn1", "w-band", 1, 17, 55, (40, 41, 91), (6, 7, 3), stride=(3, 2, 1),
                      padding=(11, 5, 7, 6, 5, 4), dilation=(3, 2, 3), dtype="fp32"), "trn1", id="c17-55-k673-trn1"),
    pytest.param(Case("lnc2-k756", "w-band", 3, 9, 158, (24, 19, 78), (7, 5, 6), stride=(1, 2, 2),
                      padding=(7, 3, 7, 5, 10, 4), dilation=(2, 3, 2), dtype="fp32", lnc=2), "trn2",
                 id="c9-158-k756-lnc2"),
]


def test_first_reproducer_pick_is_exact_and_w_banded():
    case, target = REPRODUCERS[0].values[:2]
    plan = case_plan(case, target)
    assert plan.dw_w_band and "W band" in plan.label, plan.label
    assert _check(plan_geom(plan), dataclasses.replace(plan, dw_w_band=0), TARGET_FIGURES[target])[0].startswith("SBUF")
    outcomes = run_candidates(case, target=target, plans=[plan])
    assert len(outcomes) == 1 and outcomes[0].passed, outcomes[0].describe()


@pytest.mark.nightly
@pytest.mark.parametrize("case, target", REPRODUCERS[1:])
def test_large_reproducers_plan_and_trace_within_budget(case, target):
    plan = case_plan(case, target)
    assert plan.dw_w_band, plan.label
    dt = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[case.dtype]
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, dt) for s in (case.dy_shape, case.x_shape, case.w_shape)),
                         lnc=case.lnc, target=target, trace_only=True, **case.kernel_kwargs())
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes <= TARGET_FIGURES[target].sbuf_usable
    assert res.peak_psum_banks <= plan.psum_banks
