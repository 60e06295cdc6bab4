"""dx^T run inside dw's last row pass (``Plan.dx_inside_dw``): dw's last pass issues its first x^T
bundles, dx runs (its first band prefetched during dw's first box), then the pass's matmuls. Bit-exact
against the oracle via forced plans (LNC1 and LNC2, odd sizes, dilation 2, stride 2, gradient subsets,
fp16 and bf16), the planner's legality rules, and its budget bounding the measured peak."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import dx_inside_dw_legal

from ..support import (
    INSIDE_DW_GEOMS,
    assert_candidates_within_budget,
    conv_shapes,
    geom_kw,
    geom_shapes,
    inside_dw_edit,
    run_and_compare,
)


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("geom", INSIDE_DW_GEOMS)
def test_dx_inside_dw_is_exact(geom, lnc, inside_runs):
    run_and_compare(**geom, lnc=lnc, plan_edit=inside_dw_edit())
    assert inside_runs, "dw never ran dx inside its last pass"


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("split", ["taps", "positions"])
def test_dx_inside_dw_lnc2_splits_and_subsets(split, grads, inside_runs):
    geom = INSIDE_DW_GEOMS[0].values[0]
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=inside_dw_edit(split))
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_lnc2_two_batches(inside_runs):
    """One batch per program (the item split), each with one whole-volume dx band."""
    geom = dict(INSIDE_DW_GEOMS[2].values[0], batch=2)
    run_and_compare(**geom, lnc=2, plan_edit=inside_dw_edit())
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_fp16(inside_runs):
    run_and_compare(**INSIDE_DW_GEOMS[0].values[0], dtype="fp16", lnc=2, plan_edit=inside_dw_edit())
    assert inside_runs, "dw never ran dx inside its last pass"


def test_dx_inside_dw_is_never_listed_where_it_cannot_run():
    """dx only or dw only, fp32 (no xT dma), several dx items per program: no candidate."""
    geom = dict(INSIDE_DW_GEOMS[2].values[0], batch=3)
    shapes, kw = geom_shapes(geom), geom_kw(geom)
    for flags in ({"compute_dw": False}, {"compute_dx": False}):
        p = plan_conv3d_bwd(*shapes, **kw, lnc=2, **flags)
        assert not p.feasible_candidates(where=lambda a: a.dx_inside_dw)
    p = plan_conv3d_bwd(*shapes, **kw, dtype="fp32", lnc=2)
    assert not p.feasible_candidates(where=lambda a: a.dx_inside_dw)
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    # 3 batches: 2 items on a program (only the boxes variant, test_dx_inside_boxes.py, may run them)
    assert not p.feasible_candidates(where=lambda a: a.dx_inside_dw and (not a.dx_inside_boxes))
    shapes, kw = geom_shapes(INSIDE_DW_GEOMS[2].values[0]), geom_kw(INSIDE_DW_GEOMS[2].values[0])   # one batch: listed, and only where it is legal
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    g = validate(*shapes, **kw)
    assert bool(p.feasible_candidates(where=lambda a: a.dx_inside_dw)), p.explain()
    for a in p.feasible_candidates():
        if a.dx_inside_dw:
            assert a.strategy is Strategy.PER_GRADIENT and a.dw_method is DwMethod.ROW_PACK
            assert dx_inside_dw_legal(g, a)


def test_dx_inside_dw_listed_on_dilated_d2_lnc2():
    """dilated_d2 LNC2: dx inside dw with the taps split is a feasible candidate. (Whether it is the pick
    depends on the cost model's figures.)"""
    kw = {"padding": (2,) * 6, "dilation": (2, 2, 2)}
    shapes = conv_shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), **kw)
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    inside = p.feasible_candidates(where=lambda a: a.dx_inside_dw and (not a.dx_inside_boxes)
                                   and (a.dw_split == 'taps'))
    assert inside, p.explain()
    assert all("dx inside dw" in a.label and "taps split" in a.label for a in inside)


@pytest.mark.parametrize("geom", INSIDE_DW_GEOMS[:2])
def test_dx_inside_dw_budget_bounds_the_measured_peak(geom):
    for lnc in (1, 2):
        assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dx_inside_dw and not a.dx_inside_boxes, 2,
                                        lnc=lnc, **geom_kw(geom))
