"""A cost sheet's scaled share; dw's items and tap passes charged per class of identical ones
(``charge_dw_pass``): as charging item by item."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.costs import ENGINES, TARGET_FIGURES, CostSheet
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.plan import estimate as est
from conv3d_bwd.kernels.plan.estimate import _estimate_sheet
from conv3d_bwd.kernels.plan.estimate_dw import charge_dw_item, dw_item_classes, dw_pass_record
from conv3d_bwd.kernels.spec.dw_options import (
    W_BAND_METHODS,
    dw_co_pass_legal,
    dw_co_passes,
    dw_tap_passes,
    dw_w_band_legal,
    dw_w_bands,
)

TRN2 = TARGET_FIGURES["trn2"]


def test_a_scaled_sheet_is_a_share_of_the_busy_time():
    c = CostSheet(TRN2)
    c.dma(4096, 512, 3)
    c.compute("vector", 128, 1, 1.0, 2)
    s = c.scaled(0.25)
    assert all(s.busy[e] == pytest.approx(0.25 * c.busy[e]) for e in ENGINES)
    assert c.scaled(1.0).counts == c.counts


# --- dw's items and passes per class -----------------------------------------------------------------------

def _item_by_item(c, ps, section, records):
    """``charge_dw_pass`` as an explicit loop: every item of every pass charged on its own."""
    for it in range(len(ps.items)):
        charge_dw_item(c, ps, it)


def _assert_same_estimate(g, p, monkeypatch) -> None:
    """Program by program, the sheet (busy time, counts, ring units, steps) and the estimate agree, within
    rounding, with dw's items charged one by one."""
    closed = [_estimate_sheet(g, p, TRN2, pid) for pid in range(p.lnc)]
    closed_us = est._estimate(g, p, TRN2)[0]
    with monkeypatch.context() as m:
        m.setattr(est, "charge_dw_pass", _item_by_item)
        explicit = [_estimate_sheet(g, p, TRN2, pid) for pid in range(p.lnc)]
        explicit_us = est._estimate(g, p, TRN2)[0]
    for (a, fa), (b, fb) in zip(closed, explicit):
        assert fa == pytest.approx(fb, rel=1e-9)
        for e in ENGINES:
            assert a.busy[e] == pytest.approx(b.busy[e], rel=1e-9, abs=1e-9), (p.label, e)
        assert (a.counts, a.units, a.steps, a.steps_head) == (b.counts, b.units, b.steps, b.steps_head), p.label
        for k in a.section_busy().keys() | b.section_busy().keys():
            for e in ENGINES:
                assert a.section_busy()[k][e] == pytest.approx(b.section_busy()[k][e], rel=1e-9, abs=1e-9)
    assert closed_us == pytest.approx(explicit_us, rel=1e-9)


# W stride 2 and dilation 2 with both W sides padded (bands of unequal halo), C_out over one tile (C_out passes)
BANDED = {"batch": 2, "c_in": 3, "c_out": 130, "size": (5, 6, 13), "kernel": (2, 3, 3), "stride": (1, 1, 2),
          "padding": (1, 1, 1, 1, 2, 3), "dilation": (1, 1, 2)}


def _banded_dw(lnc: int, method: DwMethod, **edit):
    """The first per-gradient candidate with dw ``method`` in one-row boxes, with ``edit`` checked to take
    effect (W bands, C_out passes, taps per pass)."""
    from ..support import geom_kw, geom_shapes, plan_geom
    p = plan_conv3d_bwd(*geom_shapes(BANDED), **geom_kw(BANDED), lnc=lnc)
    alts = [a for a in (p, *p.feasible_candidates()) if a.strategy is Strategy.PER_GRADIENT and a.dw_method is method
            and not (a.dw_interleave or a.dx_prefetch or a.dw_x_stationary)
            and (a.lnc == 1 or a.dw_split == "positions")]
    assert alts, p.explain()
    q = dataclasses.replace(alts[0], dw_band=(1, 1), dw_dyt_dma=False, **edit)
    g = plan_geom(q)
    assert "dw_w_band" not in edit or (dw_w_band_legal(g, q) and len(dw_w_bands(g, q)) >= 2)
    assert "dw_co_pass" not in edit or (dw_co_pass_legal(g, q) and len(dw_co_passes(g, q)) >= 2)
    assert "dw_tap_range" not in edit or len(dw_tap_passes(g, q, 0)) >= 2
    return g, q


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("method", W_BAND_METHODS[1:], ids=lambda m: m.value)
@pytest.mark.parametrize("edit", [{"dw_w_band": 3}, {"dw_tap_range": 2, "dw_tap_group": 1},
                                  {"dw_co_pass": 1, "compute_db": False, "dw_w_band": 2}],
                         ids=["w-bands", "tap-passes", "co-passes-w-bands"])
def test_dw_item_and_pass_classes_charge_what_every_item_charges(lnc, method, edit, monkeypatch):
    g, p = _banded_dw(lnc, method, **edit)
    _assert_same_estimate(g, p, monkeypatch)


def test_a_pass_record_groups_items_by_class(monkeypatch):
    """The closed form is not the loop in disguise: a pass of one-row boxes records a few item classes."""
    g, p = _banded_dw(1, DwMethod.TAP_PACK, dw_w_band=3)
    seen = []
    monkeypatch.setattr(est, "charge_dw_pass", lambda c, ps, sec, rec: seen.append(ps) or _item_by_item(c, ps, sec, rec))
    _estimate_sheet(g, p, TRN2)
    ps = seen[0]
    classes, of = dw_item_classes(ps)
    assert 1 < len(classes) < len(ps.items) and sum(n for _it, n in classes) == len(of) == len(ps.items)
    rec = dw_pass_record(ps, "dw")
    assert rec.units["dw"] == len(ps.items) * len(dw_w_bands(g, p))


@pytest.mark.parametrize("lnc", [1, 2])
def test_every_candidates_dw_charges_what_its_items_charge(lnc, monkeypatch):
    """Every feasible candidate of a small problem (row and box modes, x-stationary, shared dy, tap splits)."""
    from ..support import geom_kw, geom_shapes
    geom = {"batch": 1, "c_in": 16, "c_out": 24, "size": (4, 6, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
    plan = plan_conv3d_bwd(*geom_shapes(geom), **geom_kw(geom), lnc=lnc)
    g = plan.geometry()
    cands = plan.feasible_candidates(where=lambda q: q.dw_method not in (None, DwMethod.SMALL_EXTENT, DwMethod.DMA_GEMM, DwMethod.KD_MOVING))
    assert {q.dw_method for q in cands} >= {DwMethod.ROW_PACK, DwMethod.TAP_PACK}
    for q in cands[::max(1, len(cands) // 40)]:
        _assert_same_estimate(g, q, monkeypatch)
