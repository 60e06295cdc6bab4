"""dw in tap passes (``Plan.dw_tap_range``): big filters whose fp32 accumulators do not fit SBUF at once."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DwMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.spec.dw_options import dw_tap_passes

from .support import GRADS, conv_shapes, run_and_compare


def _force_passes(method, taps, split="positions", ci_range=None):
    """Edit: the first per-gradient candidate with ``method`` (and ``split``), forced into tap passes."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                     and a.dw_method is method and (a.lnc == 1 or a.dw_split == split))
        assert alts, p.explain()
        edit = {"dw_tap_range": taps}
        if ci_range is not None:
            edit.update(dw_ci_range=ci_range, dw_ci_tile=min(ci_range, alts[0].dw_ci_tile))
        q = dataclasses.replace(alts[0], **edit)
        assert len(dw_tap_passes(q.geometry(), q, 0)) >= 2, q.label   # really more than one pass
        return q
    return pick


BOX = {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1),
       "padding": (1, 0, 0, 1, 1, 1), "dilation": (1, 2, 1)}
ROWS = {"batch": 1, "c_in": 5, "c_out": 7, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1, 2, 1, 0, 2, 1)}


@pytest.mark.parametrize("method, geom, taps", [
    (DwMethod.TAP_GEMM, BOX, 5), (DwMethod.TAP_GEMM, BOX, 1), (DwMethod.TAP_PACK, BOX, 4),
    (DwMethod.ROW_PACK, ROWS, 3), (DwMethod.ROW_PACK, ROWS, 12)], ids=str)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_tap_passes_are_exact(method, geom, taps, dtype):
    run_and_compare(**geom, dtype=dtype, plan_edit=_force_passes(method, taps))


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), GRADS], ids=lambda g: "+".join(g))
def test_tap_passes_with_ci_ranges_are_exact(grads):
    run_and_compare(batch=2, c_in=6, c_out=5, size=(3, 4, 5), kernel=(3, 3, 2), padding=(1, 1, 1, 1, 0, 1),
                    dtype="fp16", grads=grads, plan_edit=_force_passes(DwMethod.TAP_GEMM, 7, ci_range=2))


@pytest.mark.parametrize("method, geom, taps", [
    (DwMethod.TAP_GEMM, BOX, 5), (DwMethod.ROW_PACK, ROWS, 6)], ids=str)
@pytest.mark.parametrize("split", ["positions", "taps"])
def test_tap_passes_at_lnc2_are_exact(method, geom, taps, split):
    run_and_compare(**geom, lnc=2, plan_edit=_force_passes(method, taps, split))


QA_LAYERS = [
    pytest.param({"batch": 1, "c_in": 128, "c_out": 256, "size": (8, 16, 16), "kernel": (7, 7, 7),
                  "padding": (3,) * 6}, GRADS, id="c128-256-k777"),
    pytest.param({"batch": 1, "c_in": 129, "c_out": 200, "size": (8, 16, 16), "kernel": (5, 5, 7)}, GRADS,
                 id="c129-200-k557"),
    pytest.param({"batch": 1, "c_in": 127, "c_out": 1, "size": (13, 13, 11), "kernel": (7, 7, 7),
                  "padding": (0, 0, 0, 0, 0, 2), "dilation": (2, 2, 1)}, ("dx", "dw"), id="c127-1-k777-dil"),
]


@pytest.mark.parametrize("geom, grads", QA_LAYERS)
@pytest.mark.parametrize("target", sorted(TARGET_FIGURES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_big_filter_layers_have_a_plan(geom, grads, target, dtype):
    shapes = conv_shapes(**geom)
    kw = {k: geom[k] for k in ("stride", "padding", "dilation") if k in geom}
    flags = {f"compute_{g}": g in grads for g in GRADS}
    for lnc in ((1, 2) if target != "trn1" else (1,)):
        plan = plan_conv3d_bwd(*shapes, **kw, **flags, dtype=dtype, target=target, lnc=lnc)
        assert plan.sbuf_bytes <= TARGET_FIGURES[target].sbuf_usable
        g = plan.geometry()
        whole = -(-g.c_out // 128) * g.taps * plan.dw_ci_range * 4   # every tap's fp32 accumulators
        # (dw:small_extent keeps no fp32 accumulators: each output tile is one PSUM group, evicted once)
        if whole > TARGET_FIGURES[target].sbuf_usable and plan.dw_method is not DwMethod.SMALL_EXTENT:
            assert plan.dw_tap_range and len(dw_tap_passes(g, plan, 0)) >= 2, plan.label
            assert "taps/pass" in plan.label
        if plan.dw_tap_range:   # passes only when one pass of every tap does not fit
            one_pass = dataclasses.replace(plan, dw_tap_range=0)
            assert _check(g, one_pass, TARGET_FIGURES[target])[0], plan.label


def test_tap_passes_only_when_needed():
    shapes = conv_shapes(1, 64, 64, (4, 8, 8), (3, 3, 3), padding=(1,) * 6)
    plan = plan_conv3d_bwd(*shapes, padding=(1,) * 6)
    assert all(a.dw_tap_range == 0 for a in plan.feasible_candidates())


def test_c128_to_c256_k777_runs_within_capacity_trace_only():
    geom = dict(QA_LAYERS[0].values[0])
    shapes = conv_shapes(**geom)
    plan = plan_conv3d_bwd(*shapes, padding=geom["padding"])
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), padding=geom["padding"],
                         trace_only=True)
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes <= TARGET_FIGURES["trn2"].sbuf_usable
    assert res.peak_psum_banks <= plan.psum_banks <= 8


def test_lnc2_tap_passes_trace_only_within_capacity():
    geom = dict(QA_LAYERS[1].values[0])
    shapes = conv_shapes(**geom)
    plan = plan_conv3d_bwd(*shapes, dtype="fp32", lnc=2)
    for alt in (plan, *plan.feasible_candidates(where=lambda a: a.dw_split != plan.dw_split)[:1]):
        with forced_plan(alt):
            res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "float32") for s in shapes), lnc=2,
                             trace_only=True)
        assert 0 < res.peak_sbuf_bytes_per_partition <= alt.sbuf_bytes, alt.label
        assert res.peak_psum_banks <= alt.psum_banks, alt.label


def test_filters_first_with_ci_outer_groups_stays_within_budget():
    """Regression: the first dx filter group, loaded before dw, must be freed with its group (it was kept
    live through all of dx, one group more than the planner counts)."""
    geom = dict(QA_LAYERS[2].values[0])
    shapes = conv_shapes(**geom)
    kw = {k: geom[k] for k in ("padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="fp32", target="trn1", compute_db=False)
    alts = plan.feasible_candidates(where=lambda a: a.filters_first and a.dx_ci_outer)[:2]
    assert alts, plan.explain()
    for alt in alts:
        with forced_plan(alt):
            res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "float32") for s in shapes), **kw, target="trn1",
                             compute_db=False, trace_only=True)
        assert 0 < res.peak_sbuf_bytes_per_partition <= alt.sbuf_bytes, alt.label
