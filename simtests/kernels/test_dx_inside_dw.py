"""dx^T run inside dw's last row pass (``Plan.dx_inside_dw``): dw's last pass issues its first x^T
bundles, dx runs (its first band prefetched during dw's first box), then the pass's matmuls. Bit-exact
against the oracle via forced plans (LNC1 and LNC2, odd sizes, dilation 2, stride 2, gradient subsets,
fp16 and bf16), the planner's legality rules, and its budget bounding the measured peak."""
from __future__ import annotations

import dataclasses

import pytest

from kernels.geometry import validate
from kernels.planner import (
    DwMethod,
    Strategy,
    dx_inside_dw_legal,
    dx_inside_dw_on,
    plan_conv3d_bwd,
)

from .conftest import geom_kw, geom_shapes
from .test_dw_tap_passes import _shapes
from .test_kernel_dev import assert_candidates_within_budget, run_and_compare


def plan_geom(p):
    """The validated geometry of plan ``p``, with its gradient flags."""
    return validate(p.dy_shape, p.x_shape, p.w_shape, p.stride, p.padding, p.dilation, p.dtype,
                    compute_dx=p.compute_dx, compute_dw=p.compute_dw, compute_db=p.compute_db)


def forced_inside(p, split=None, **edit):
    """The best-estimated prefetched dx^T candidate with x-stationary ``xT dma`` dw (of dw ``split`` at LNC2)
    that is legal forced to run dx inside dw with ``edit``; so forced."""
    g = plan_geom(p)
    alts = [q for a in p.feasible_candidates()
            if a.dx_prefetch and a.dw_x_stationary and a.dw_xt_dma and not a.dw_row_stack and not a.dw_interleave
            and (split is None or a.dw_split == split)
            and dx_inside_dw_legal(g, q := dataclasses.replace(a, dx_inside_dw=True, **edit))]
    assert alts, p.explain()
    return min(alts, key=lambda a: a.estimated_us)


def _inside(split=None):
    """Edit: the best-estimated dx-inside-dw candidate (of dw ``split`` at LNC2); where the planner lists
    none, ``forced_inside`` with its dx band one item per program."""
    def pick(p):
        g = plan_geom(p)
        alts = [a for a in p.feasible_candidates() if a.dx_inside_dw and not a.dx_inside_boxes
                and (split is None or a.dw_split == split)]
        q = min(alts, key=lambda a: a.estimated_us) if alts else \
            forced_inside(p, split, dx_band=(-(-g.axes[0].n // p.lnc), g.axes[1].n))
        assert dx_inside_dw_on(g, q) and "dx inside dw" in q.label
        return q
    return pick


GEOMS = [   # C_out <= 64 (dx^T pairs), row-mode dw
    pytest.param({"batch": 1, "c_in": 8, "c_out": 6, "size": (4, 6, 7), "kernel": (3, 3, 3), "dilation": (2, 2, 2),
                  "padding": (2,) * 6}, id="dil2-odd"),
    pytest.param({"batch": 1, "c_in": 12, "c_out": 10, "size": (5, 8, 9), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1, 0, 1, 1, 0, 1)}, id="s2-asym"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 8, 8), "kernel": (3, 3, 3),
                  "padding": (1,) * 6}, id="c64"),
]


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("geom", GEOMS)
def test_dx_inside_dw_is_exact(geom, lnc, inside_runs):
    run_and_compare(**geom, lnc=lnc, plan_edit=_inside())
    assert inside_runs, "dw never ran dx inside its last pass"


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("split", ["taps", "positions"])
def test_dx_inside_dw_lnc2_splits_and_subsets(split, grads, inside_runs):
    geom = GEOMS[0].values[0]
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=_inside(split))
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_lnc2_two_batches(inside_runs):
    """One batch per program (the item split), each with one whole-volume dx band."""
    geom = dict(GEOMS[2].values[0], batch=2)
    run_and_compare(**geom, lnc=2, plan_edit=_inside())
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_fp16(inside_runs):
    run_and_compare(**GEOMS[0].values[0], dtype="fp16", lnc=2, plan_edit=_inside())
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_is_never_listed_where_it_cannot_run():
    """dx only or dw only, fp32 (no xT dma), several dx items per program: no candidate."""
    geom = dict(GEOMS[2].values[0], batch=3)
    shapes, kw = geom_shapes(geom), geom_kw(geom)
    for flags in ({"compute_dw": False}, {"compute_dx": False}):
        p = plan_conv3d_bwd(*shapes, **kw, lnc=2, **flags)
        assert not any(a.dx_inside_dw for a in p.feasible_candidates())
    p = plan_conv3d_bwd(*shapes, **kw, dtype="fp32", lnc=2)
    assert not any(a.dx_inside_dw for a in p.feasible_candidates())
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    # 3 batches: 2 items on a program (only the boxes variant, test_dx_inside_boxes.py, may run them)
    assert not any(a.dx_inside_dw and not a.dx_inside_boxes for a in p.feasible_candidates())
    shapes, kw = geom_shapes(GEOMS[2].values[0]), geom_kw(GEOMS[2].values[0])   # one batch: listed, and only where it is legal
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    g = validate(*shapes, **kw)
    assert any(a.dx_inside_dw for a in p.feasible_candidates()), p.explain()
    for a in p.feasible_candidates():
        if a.dx_inside_dw:
            assert a.strategy is Strategy.PER_GRADIENT and a.dw_method is DwMethod.ROW_PACK
            assert dx_inside_dw_legal(g, a) and not a.dw_row_stack


def test_dx_inside_dw_listed_on_dilated_d2_lnc2():
    """dilated_d2 LNC2: dx inside dw with the taps split is a feasible candidate. (Whether it is the pick
    depends on the cost model's figures.)"""
    kw = {"padding": (2,) * 6, "dilation": (2, 2, 2)}
    shapes = _shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), **kw)
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    inside = [a for a in p.feasible_candidates() if a.dx_inside_dw and not a.dx_inside_boxes and a.dw_split == "taps"]
    assert inside, p.explain()
    assert all("dx inside dw" in a.label and "taps split" in a.label for a in inside)


@pytest.mark.parametrize("geom", GEOMS[:2])
def test_dx_inside_dw_budget_bounds_the_measured_peak(geom):
    for lnc in (1, 2):
        assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dx_inside_dw and not a.dx_inside_boxes, 2,
                                        lnc=lnc, **geom_kw(geom))
