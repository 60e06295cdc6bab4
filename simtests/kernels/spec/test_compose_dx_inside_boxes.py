"""dx^T items inside dw's boxes (``Plan.dx_inside_boxes``, with ``dx_inside_dw``): each row pass of dw
from the second issues its whole pass of x^T bundles (a ring of one tile per bundle), then runs one dx
item, then its matmuls; the items left run after dw. Bit-exact against the oracle via forced plans (LNC1
and LNC2, both dw splits, odd sizes, dilation 2, stride 2 with asymmetric padding, more and fewer dx
items than boxes, gradient subsets, fp16 and bf16), the planner's legality rule and label, and its
budget bounding the measured peak."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES, compose_ns
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DwMethod, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.estimate import BOXES_LOSS, _estimate_sheet, _sections, section_order
from conv3d_bwd.kernels.spec.compose import (
    dx_box_items,
    dx_inside_boxes_legal,
    dx_inside_dw_legal,
    dx_inside_dw_on,
)
from conv3d_bwd.kernels.spec.dw_options import dw_program_items
from conv3d_bwd.kernels.spec.dw_xs import dw_xt_ring
from conv3d_bwd.kernels.spec.dx_options import dx_program_items
from conv3d_bwd.kernels.xt_rows import XT_DMA_BUFS

from ..support import (
    INSIDE_DW_GEOMS,
    assert_candidates_within_budget,
    conv_shapes,
    forced_inside,
    geom_kw,
    geom_shapes,
    plan_geom,
    run_and_compare,
)


def _boxes(split=None, dw_band=None, dx_band=None):
    """Edit: a prefetched dx^T candidate with x-stationary ``xT dma`` dw (of dw ``split`` at LNC2), its dw
    band ``dw_band`` (default: one D row of whole H rows, so every program has several boxes) and dx band
    ``dx_band`` (default its own), forced to run dx inside dw's boxes."""
    def pick(p):
        g = plan_geom(p)
        q = forced_inside(p, split, dx_inside_boxes=True, dw_band=dw_band or (1, g.out_size[1]),
                          **({"dx_band": dx_band} if dx_band else {}))
        assert dx_inside_dw_on(g, q) and dx_inside_boxes_legal(g, q)
        return q
    return pick


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("geom", INSIDE_DW_GEOMS)
def test_dx_inside_boxes_is_exact(geom, lnc, inside_runs):
    run_and_compare(**geom, lnc=lnc, plan_edit=_boxes())
    assert inside_runs, "dw never ran a dx item inside a box"


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("split", ["taps", "positions"])
def test_dx_inside_boxes_lnc2_splits_and_subsets(split, grads, inside_runs):
    geom = INSIDE_DW_GEOMS[0].values[0]
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=_boxes(split))
    assert inside_runs, "dw never ran a dx item inside a box"


@pytest.mark.parametrize("dx_band", [(1, 8), (4, 4)], ids=["more-items", "items-and-h-bands"])
def test_dx_inside_boxes_item_counts(dx_band, inside_runs):
    """More dx items than boxes (several in one box, the last after dw), and H bands (items not whole
    planes); two batches, dw boxes of two D rows (positions split at LNC2: two boxes per program)."""
    geom = dict(INSIDE_DW_GEOMS[2].values[0], batch=2)
    for lnc in (1, 2):
        inside_runs.clear()
        edit = _boxes("positions", dw_band=(2, 8), dx_band=dx_band)
        run_and_compare(**geom, lnc=lnc, plan_edit=edit)
        assert inside_runs, "dw never ran a dx item inside a box"
        shapes, kw = geom_shapes(geom), geom_kw(geom)
        q = edit(plan_conv3d_bwd(*shapes, **kw, lnc=lnc))
        if dx_band == (1, 8):   # 8 (LNC2: 4) items, 4 (2) boxes: the path that runs several items in one box
            assert max(dx_box_items(plan_geom(q), q, 0)) >= 2


def test_dx_inside_boxes_fewer_items_than_boxes(inside_runs):
    """One dx item per program, four dw boxes: the item runs in the second box, the others only dw."""
    geom = INSIDE_DW_GEOMS[2].values[0]
    run_and_compare(**geom, lnc=2, plan_edit=_boxes(dx_band=(2, 8)))
    assert inside_runs, "dw never ran a dx item inside a box"


def test_dx_inside_boxes_fp16(inside_runs):
    run_and_compare(**INSIDE_DW_GEOMS[1].values[0], dtype="fp16", lnc=2, plan_edit=_boxes())
    assert inside_runs, "dw never ran a dx item inside a box"


def test_dx_inside_boxes_legality_and_ring():
    """Listed with its label only where every program has two boxes of <= 128 rows; its x^T ring holds a
    whole pass of bundles."""
    two = dict(INSIDE_DW_GEOMS[2].values[0], batch=2)
    shapes, kw = geom_shapes(two), geom_kw(two)
    p = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    g = validate(*shapes, **kw)
    boxes = p.feasible_candidates(where=lambda a: a.dx_inside_boxes)
    assert boxes, p.explain()
    for a in boxes:
        assert a.dx_inside_dw and "dx inside dw boxes" in a.label and a.dw_method is DwMethod.ROW_PACK
        assert all(len(dw_program_items(g, a, q)) >= 2 for q in range(2))
        assert dw_xt_ring(g, a) >= XT_DMA_BUFS
    a = next(c for c in boxes if c.dw_split == "positions")   # (the taps split runs every box on both)
    one_box = dataclasses.replace(a, dw_band=(g.out_size[0], g.out_size[1]))   # one box per program
    assert not dx_inside_boxes_legal(g, one_box) and not dx_inside_dw_legal(g, one_box)
    for flags in ({"compute_dw": False}, {"compute_dx": False}):
        q = plan_conv3d_bwd(*shapes, **kw, lnc=2, **flags)
        assert not q.feasible_candidates(where=lambda c: c.dx_inside_boxes)
    q = plan_conv3d_bwd(*shapes, **kw, dtype="fp32", lnc=2)   # (no xT dma)
    assert not q.feasible_candidates(where=lambda c: c.dx_inside_boxes)


def _best_boxes(p):
    boxes = p.feasible_candidates(where=lambda a: a.dx_inside_boxes)
    assert boxes, p.explain()
    return min(boxes, key=lambda a: a.estimated_us)


def test_unet3d_lnc2_lists_it():
    """unet3d_c64 LNC2: the planner lists dx inside dw's boxes; of each program's dx items the last runs
    after dw, the others in its boxes. (Whether it is the pick depends on the cost model's figures.)"""
    kw = {"padding": (1,) * 6}
    shapes = conv_shapes(2, 64, 64, (8, 32, 32), (3, 3, 3), **kw)
    p = _best_boxes(plan_conv3d_bwd(*shapes, **kw, lnc=2))
    g = validate(*shapes, **kw)
    assert dx_inside_dw_on(g, p) and "dx inside dw boxes" in p.label, p.label
    assert dw_xt_ring(g, p) == 5   # 9 (kd, kh) pairs in bundles of 2
    for q in range(2):
        items = dx_program_items(g, p, q)
        assert sum(dx_box_items(g, p, q)) == len(items) - 1


def test_dilated_d2_lnc1_lists_it_and_its_body_uses_the_boxes_loss():
    """dilated_d2 LNC1: the planner lists dx inside dw's boxes; its estimate composes the merged dx body with
    BOXES_LOSS, not the generic stall share."""
    kw = {"padding": (2,) * 6, "dilation": (2, 2, 2)}
    shapes = conv_shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), **kw)
    p = _best_boxes(plan_conv3d_bwd(*shapes, **kw, lnc=1))
    g = validate(*shapes, **kw)
    assert dx_inside_dw_on(g, p), p.label
    hw = TARGET_FIGURES["trn2"]
    c, fill = _estimate_sheet(g, p, hw)
    secs = _sections(c, g, p)
    assert "dw_in" not in secs and "dx" in secs   # the boxes with items are merged into dx's body
    args = (secs, section_order(g, p), fill, hw, c.steps, c.steps_head)
    assert p.estimated_us == pytest.approx(compose_ns(*args, {"dx": BOXES_LOSS}) / 1000.0, rel=1e-9)
    assert compose_ns(*args) > compose_ns(*args, {"dx": BOXES_LOSS})


@pytest.mark.parametrize("geom, lnc", [(INSIDE_DW_GEOMS[1].values[0], 1), (dict(INSIDE_DW_GEOMS[2].values[0], batch=2), 2)],
                         ids=["stride2-asym-lnc1", "c64-2batches-lnc2"])
def test_dx_inside_boxes_budget_bounds_the_measured_peak(geom, lnc):
    assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dx_inside_boxes, 2, lnc=lnc, **geom_kw(geom))
