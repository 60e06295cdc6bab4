"""Gather dx with clipped dy bands (``Plan.dx_dy_clip``): where a band's virtual dy rows (the kernel's whole reach,
zeros beyond dy) do not fit SBUF, each buffer holds only the rows the band's live taps read, and the taps whose
window misses dy are skipped. Forced on small geometries (exact mode against the oracle: gather_s1 and
phase_gather with dead taps, gemm, W bands, C_out chunks, every gradient, LNC2); the clipped extents and the
traced peaks within the budget; illegal forms named; offered only where nothing else fits; the geometry that had
no plan (1 -> 256, dilation 40 over a 2 x 2 x 2 input) gets one."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd, nki_dx
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DxMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check, _dx_dy_extent
from conv3d_bwd.kernels.plan.search import _label
from conv3d_bwd.kernels.schedule import axis_bands, axis_live
from conv3d_bwd.kernels.spec.dx_options import dx_dy_clip_legal

from .support import GRADS, assert_budget_bounds_peak, conv_shapes, plan_geom, run_and_compare, spy


def _force_clip(**edit):
    """Edit: the first per-gradient gather candidate forced to clip its dy bands (with the fields ``edit``)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT and a.dx_regions == 1
                                     and (a.dx_method in (DxMethod.GEMM, DxMethod.GATHER_S1, DxMethod.PHASE_GATHER))
                                     and (not (a.dx_transposed or a.dx_dphase_pairs or a.dx_prefetch or a.dw_interleave or a.dx_band_early))
                                     and (not (a.compute_db and (not a.compute_dw)
                                     and (a.db_method.value == 'fold'))))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dx_dy_clip=True, **edit)
        g = plan_geom(q)
        assert dx_dy_clip_legal(g, q), q.label
        why, budget = _check(g, q, TARGET_FIGURES[q.target])
        assert not why, (q.label, why)
        return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))
    return pick


def _buffer_shapes(monkeypatch) -> list:
    """The extent of every dy band buffer the gather loads (so a test knows the clipped loads ran)."""
    return spy(monkeypatch, nki_dx.DyBands, "load",
               lambda self, b, bd, bh, place_engine=None, bw=None, co=None: self.ext if self.clip else None)


# a 2 x 3 x 2 input under dilations 5, 4 and 6: most taps of every band read only the padding's zeros
DEAD = {"batch": 2, "c_in": 3, "c_out": 5, "size": (2, 3, 2), "kernel": (3, 3, 3), "padding": (5, 5, 4, 4, 6, 6),
        "dilation": (5, 4, 6)}
# stride 2 (phase_gather), asymmetric padding: dead taps in some phases only, a remainder C_out tile
STRIDED = {"batch": 1, "c_in": 2, "c_out": 300, "size": (3, 2, 5), "kernel": (3, 2, 3), "stride": (2, 1, 2),
           "padding": (4, 3, 3, 2, 5, 1), "dilation": (3, 3, 2)}
POINTWISE = {"batch": 1, "c_in": 5, "c_out": 7, "size": (2, 2, 3), "kernel": (1, 1, 1)}


@pytest.mark.parametrize("geom, band", [(DEAD, (1, 1)), (DEAD, (2, 3)), (STRIDED, (1, 2)), (POINTWISE, (1, 2))],
                         ids=["dead-rows", "dead-whole", "strided", "gemm"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_clipped_bands_are_exact(geom, band, dtype, monkeypatch):
    seen = _buffer_shapes(monkeypatch)
    run_and_compare(**geom, dtype=dtype, grads=("dx",), plan_edit=_force_clip(dx_band=band))
    assert seen


def test_clipped_bands_hold_only_the_live_rows():
    """DEAD's virtual band spans the reach (11 x 9 x 14 rows: a one-row band in D and H, all of W); the buffer holds the dy rows (2 x 3 x 2)."""
    g = plan_geom(plan_conv3d_bwd(*conv_shapes(**DEAD), padding=DEAD["padding"], dilation=DEAD["dilation"],
                                  compute_dw=False, compute_db=False))
    assert _dx_dy_extent(g, (1, 1), 0) == (11, 9, 14)
    assert _dx_dy_extent(g, (1, 1), 0, clip=True) == (2, 3, 2)
    for a in range(3):   # every live window lies inside the clipped rows, which lie inside the virtual ones
        for bb in axis_bands(g.axes[a], 1):
            c, live = axis_live(g.axes[a], bb)
            assert bb.q0 <= c.q0 <= c.q1 <= bb.q1 and (c.i0, c.i1, c.own0, c.own1) == (bb.i0, bb.i1, bb.own0, bb.own1)
            assert len(live) == g.axes[a].s and all(live)


def test_clipped_bands_with_w_bands_and_co_chunks_and_every_gradient_are_exact():
    run_and_compare(**STRIDED, dtype="fp16", grads=GRADS,
                    plan_edit=_force_clip(dx_band=(1, 1), dx_w_band=2, dx_co_chunk=2, filters_first=False))


@pytest.mark.parametrize("grads", [("dx",), GRADS], ids=lambda g: "+".join(g))
def test_clipped_bands_at_lnc2_are_exact(grads):
    run_and_compare(**DEAD, lnc=2, grads=grads, plan_edit=_force_clip(dx_band=(1, 3)))


def test_clipped_bands_run_within_their_budget_trace_only():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", compute_dw=False, compute_db=False)
    for edit in ({"dx_band": (1, 1)}, {"dx_band": (3, 2)}, {"dx_band": (1, 1), "dx_w_band": 2}):
        alt = _force_clip(**edit)(plan)
        assert_budget_bounds_peak(alt, shapes, **kw, compute_dw=False, compute_db=False)


def test_clip_illegal_forms_are_rejected_by_name():
    shapes = conv_shapes(**DEAD)
    kw = {k: DEAD[k] for k in ("padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    shared = next(a for a in plan.feasible_candidates() if a.strategy is Strategy.SHARED_DY)
    clipped = _force_clip()(plan)
    for bad in (dataclasses.replace(shared, dx_dy_clip=True), dataclasses.replace(clipped, dx_regions=2),
                dataclasses.replace(clipped, dx_band_early=True, lnc=2)):
        why = _check(g, bad, TARGET_FIGURES["trn2"])[0]
        assert why.startswith("dx_dy_clip needs"), (bad.label, why)


def test_clipping_is_offered_only_where_nothing_else_fits():
    shapes = conv_shapes(**DEAD)
    plan = plan_conv3d_bwd(*shapes, padding=DEAD["padding"], dilation=DEAD["dilation"], dtype="bf16")
    assert not plan.feasible_candidates(where=lambda c: c.dx_dy_clip)


def test_dilation_40_over_a_tiny_input_plans_with_clipped_bands_within_budget():
    """1 -> 256, 3 x 3 x 3 dilated 40 over 2 x 2 x 2: a one-row band of one C_out tile spans 81 x 81 x 81 virtual
    dy rows (two buffers: 2.6 MB per partition in bf16); the dy itself is 2 x 2 x 2."""
    pad, dil = (40,) * 6, (40, 40, 40)
    shapes = conv_shapes(1, 1, 256, (2, 2, 2), (3, 3, 3), padding=pad, dilation=dil)
    kw = {"padding": pad, "dilation": dil, "compute_dw": False, "compute_db": False}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    assert plan.dx_dy_clip and "dy clipped" in plan.label, plan.label
    assert _check(plan_geom(plan), dataclasses.replace(plan, dx_dy_clip=False),
                  TARGET_FIGURES["trn2"])[0].startswith("SBUF")
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), **kw, trace_only=True)
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes <= TARGET_FIGURES["trn2"].sbuf_usable
    assert res.peak_psum_banks <= plan.psum_banks
