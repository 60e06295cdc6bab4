"""dx's band work and dy band loads costed per class of identical bands (``estimate_dx.dx_band_classes``,
``dx_t_band_classes``, ``estimate._dx_loads``) and multiplied: the same estimate, within rounding, as
charging band by band, for every banded form of the gather (W bands, dy clipped to the live taps, C_out
chunks, the LNC2 C_in split) and for dx^T."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.costs import ENGINES, TARGET_FIGURES, CostSheet
from conv3d_bwd.kernels.plan import DxMethod, Strategy, estimate_dx, plan_conv3d_bwd
from conv3d_bwd.kernels.plan import estimate as est
from conv3d_bwd.kernels.plan.estimate_dw import _cost_fill
from conv3d_bwd.kernels.plan.estimate_dx import _dx_band_sheet, _estimate_dx_band, dx_band_classes
from conv3d_bwd.kernels.schedule import PMAX, n_tiles
from conv3d_bwd.kernels.spec.dx_options import (
    dx_ci_split_on,
    dx_co_chunk_legal,
    dx_dy_clip_legal,
    dx_program_items,
    dx_w_band_legal,
    dx_w_bands,
)

from ..support import geom_kw, geom_shapes, plan_geom

TRN2 = TARGET_FIGURES["trn2"]

# interior bands of equal size and clipping, and edge bands that differ: stride 1, strided and dilated
# (whose edge bands' W taps miss dy), C_out over one tile (chunks)
STRIDE1 = {"batch": 1, "c_in": 4, "c_out": 130, "size": (5, 6, 11), "kernel": (3, 3, 3), "padding": (1,) * 6}
STRIDED = {"batch": 2, "c_in": 3, "c_out": 5, "size": (5, 6, 13), "kernel": (2, 2, 3), "stride": (1, 2, 2),
           "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)}
DILATED = {"batch": 1, "c_in": 3, "c_out": 4, "size": (5, 6, 9), "kernel": (3, 3, 3), "dilation": (2, 2, 4),
           "padding": (2, 2, 2, 2, 4, 4)}
CASES = {
    "stride1-w-bands": (STRIDE1, {"dx_w_band": 3}, 1),
    "stride1-co-chunks": (STRIDE1, {"dx_co_chunk": 1}, 1),
    "stride1-co-chunks-w-bands": (STRIDE1, {"dx_co_chunk": 1, "dx_w_band": 4}, 1),
    "stride1-ci-split-w-bands": (STRIDE1, {"dx_ci_split": True, "dx_ci_outer": True, "dx_ci_tile": 2, "dx_w_band": 2}, 2),
    "strided-w-bands": (STRIDED, {"dx_w_band": 4}, 1),
    "strided-dy-clip": (STRIDED, {"dx_dy_clip": True}, 1),
    "dilated-dy-clip-w-bands": (DILATED, {"dx_dy_clip": True, "dx_w_band": 2}, 1),
    "dilated-lnc2-w-bands": (DILATED, {"dx_w_band": 3}, 2),
}


def _banded(geom: dict, edit: dict, lnc: int, dtype: str = "bf16"):
    """The first per-gradient gather candidate in one-row bands, with ``edit``, checked to take effect."""
    p = plan_conv3d_bwd(*geom_shapes(geom), **geom_kw(geom), dtype=dtype, lnc=lnc)
    alts = [a for a in (p, *p.feasible_candidates()) if a.strategy is Strategy.PER_GRADIENT and a.dx_regions == 1
            and a.dx_method in (DxMethod.GEMM, DxMethod.GATHER_S1, DxMethod.PHASE_GATHER)
            and not (a.dx_transposed or a.dx_dphase_pairs or a.dx_prefetch
                     or a.dw_interleave or a.dx_band_early or a.filters_first)]
    assert alts, p.explain()
    q = dataclasses.replace(alts[0], dx_band=(1, 1), **edit)
    g = plan_geom(q)
    assert ("dx_w_band" not in edit or dx_w_band_legal(g, q)) and ("dx_co_chunk" not in edit or dx_co_chunk_legal(g, q))
    assert ("dx_dy_clip" not in edit or dx_dy_clip_legal(g, q)) and ("dx_ci_split" not in edit or dx_ci_split_on(g, q))
    return g, q


def _band_by_band(c, g, p, hw, items, ci_tiles, w_bands, chunks, clip, split, memo=None):
    """``estimate_dx_bands`` as an explicit loop: every band costed and charged on its own."""
    for _b, bd, bh in items:
        for bw in w_bands:
            if split:
                _estimate_dx_band(c, g, None, bd, bh, ci_tiles, n_tiles(g.c_out, PMAX), g.dtype == "fp32",
                                  g.dtype_bytes == 2, g.axes[2].n, bw, chunks, clip=clip)
            else:
                c.add(_dx_band_sheet(g, hw.name, p.dx_ci_tile, bd, bh, False, bw, chunks, clip))


def _assert_sheets_agree(a: CostSheet, b: CostSheet) -> None:
    assert b.busy["tensor"] > 0 or b.busy["dma"] > 0
    for e in ENGINES:
        assert a.busy[e] == pytest.approx(b.busy[e], rel=1e-9, abs=1e-9), e
    assert a.counts == b.counts
    assert a.serial_ns == pytest.approx(b.serial_ns, rel=1e-9, abs=1e-9)
    assert a.queue_issue.keys() == b.queue_issue.keys()
    for q in a.queue_issue:
        assert a.queue_issue[q] == pytest.approx(b.queue_issue[q], rel=1e-9), q


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("case", list(CASES))
def test_band_classes_charge_what_every_band_charges(case, dtype, monkeypatch):
    geom, edit, lnc = CASES[case]
    g, p = _banded(geom, edit, lnc, dtype)
    for pid in range(lnc):
        items = dx_program_items(g, p, pid)
        n_bands = len(items) * len(dx_w_bands(g, p))
        classes = dx_band_classes(g, items, dx_w_bands(g, p), dx_dy_clip_legal(g, p))
        assert sum(n for _rep, n in classes) == n_bands and len(classes) < n_bands   # (bands did share a class)
        closed = est._estimate_sheet(g, p, TRN2, pid)[0]
        with monkeypatch.context() as m:
            m.setattr(est, "estimate_dx_bands", _band_by_band)
            explicit = est._estimate_sheet(g, p, TRN2, pid)[0]
        _assert_sheets_agree(closed, explicit)
    closed_us = est._estimate(g, p, TRN2)[0]
    monkeypatch.setattr(est, "estimate_dx_bands", _band_by_band)
    assert closed_us == pytest.approx(est._estimate(g, p, TRN2)[0], rel=1e-9)


@pytest.mark.parametrize("case", ["stride1-w-bands", "strided-dy-clip", "dilated-dy-clip-w-bands"])
@pytest.mark.parametrize("db_fold", [False, True], ids=["no-db", "db-fold"])
def test_dy_band_loads_charge_what_every_load_charges(case, db_fold):
    """``_dx_loads`` charges each kind of load once from the fills per axis, times its loads: as a fill per
    band (and db's fold on each band's owned rows) would, and its first fill is the first band's."""
    geom, edit, _lnc = CASES[case]
    g, p = _banded(geom, edit, 1)
    items, w_bands, clip = dx_program_items(g, p, 0), dx_w_bands(g, p), dx_dy_clip_legal(g, p)
    first, loads = est._dx_loads(g, p, TRN2, items, w_bands, db_fold, clip)
    fills, _ = est._dx_loads_by_band(g, p, TRN2, items, w_bands, db_fold, clip)
    assert first == fills[0] and len(fills) == len(items) * len(w_bands)
    n_co, co_t = n_tiles(g.c_out, PMAX), min(PMAX, g.c_out)
    ref = CostSheet(TRN2)
    for ((_b, bd, bh), _bw), f in zip(((it, bw) for it in items for bw in w_bands), fills):
        if db_fold and f is not None:
            own = (bd.own1 - bd.own0) * (bh.own1 - bh.own0) * g.axes[2].o
            ref.compute("vector", own, 1, 1.0, n_co, op="tensor_reduce")
            ref.compute("vector", 1, 1, 1.0, n_co, op="tensor_tensor")
        if f is not None:
            _cost_fill(ref, g, n_co, co_t, *f)
    _assert_sheets_agree(loads, ref)


@pytest.mark.parametrize("geom, lnc", [
    pytest.param({"batch": 2, "c_in": 12, "c_out": 16, "size": (5, 9, 7), "kernel": (3, 3, 3),
                  "padding": (1,) * 6}, 1, id="pairs"),
    pytest.param({"batch": 1, "c_in": 8, "c_out": 6, "size": (5, 7, 7), "kernel": (3, 3, 3),
                  "dilation": (2, 2, 2), "padding": (2, 2, 2, 2, 2, 2)}, 2, id="dilated-lnc2"),
])
def test_dx_t_band_classes_charge_what_every_band_charges(geom, lnc, monkeypatch):
    """dx^T in two-row bands over odd sizes (a last band of one row): its bands costed once per class and
    multiplied estimate what charging every band does (the bands did share classes, and not one)."""
    p = plan_conv3d_bwd(*geom_shapes(geom), **geom_kw(geom), lnc=lnc)
    alts = p.feasible_candidates(where=lambda a: a.dx_transposed and a.strategy is Strategy.PER_GRADIENT)
    assert alts, p.explain()
    q = dataclasses.replace(alts[0], dx_band=(2, 2))
    g = plan_geom(q)
    items = dx_program_items(g, q, 0)
    assert 1 < len(estimate_dx.dx_t_band_classes(g, items)) < len(items)
    closed = est._estimate(g, q, TRN2)[0]
    monkeypatch.setattr(estimate_dx, "dx_t_band_classes",
                        lambda g_, items_: [((bd, bh), 1) for _b, bd, bh in items_])
    assert closed == pytest.approx(est._estimate(g, q, TRN2)[0], rel=1e-9)
