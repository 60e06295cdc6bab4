"""Row-mode dw with dy^T by ``dma_transpose`` from HBM (``Plan.dw_dyt_dma``, label ``dyT dma``): no dy box,
no dy^T PE transposes or evictions. Bit-exact forced plans over tiny / 64 / 130 channels, odd sizes, padding,
stride, dilation, several batches, chunks of whole H rows (one transfer) and of partial H rows (one per d
plane), both orientations, db fold and db_ones, tap passes, LNC2 (positions and taps
splits), every gradient subset with dw, bf16 and fp16; the transfer list; legality (fp32, shared_dy)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import dyt_dma_legal
from conv3d_bwd.kernels.xt_rows import dyt_runs

from .support import STEM_SMALL, assert_candidates_within_budget, geom_kw, geom_shapes, run_and_compare, spy


@pytest.fixture
def transfers(monkeypatch):
    """The row chunks whose dy^T came by DMA (so a test knows the path ran)."""
    return spy(monkeypatch, nki_dw.DwState, "_dyt_by_dma", lambda self, *args: args)


def _dyt(edit=None, xs=None, split=None, db_ones=None):
    """The first feasible candidate with dw_dyt_dma (x-stationary or not, LNC2 split, db_ones), edited."""
    def pick(p):
        # (row mode: box mode's dy^T by DMA is test_dw_dyt_box_dma.py's)
        alts = p.feasible_candidates(where=lambda a: a.dw_dyt_dma and a.dw_method is DwMethod.ROW_PACK
                                     and (xs is None or a.dw_x_stationary == xs)
                                     and (split is None or a.dw_split == split)
                                     and (db_ones is None or a.db_ones == db_ones))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], **(edit or {}))
        assert q.dw_dyt_dma and dyt_dma_legal(q.geometry(), q), q.label
        return q
    return pick


GEOMS = [
    # whole H rows per chunk (one transfer), db_ones
    pytest.param(STEM_SMALL, {"dw_band": (3, 7)}, True, id="stem-small"),
    # partial H rows (4 of 7): one transfer per d plane
    pytest.param(STEM_SMALL, {"dw_band": (3, 4)}, True, id="stem-small-h4"),
    # C_in 1, asymmetric padding, odd sizes, the dw^T orientation
    pytest.param({"batch": 1, "c_in": 1, "c_out": 5, "size": (6, 9, 11), "kernel": (3, 5, 3), "stride": (1, 2, 2),
                  "padding": (2, 0, 1, 3, 0, 2)}, {}, False, id="cin1-asym-dwT"),
    # C_in 64 with dilation, two batches
    pytest.param({"batch": 2, "c_in": 64, "c_out": 24, "size": (4, 6, 5), "kernel": (3, 3, 3), "dilation": (2, 2, 1),
                  "padding": (2, 2, 2, 2, 1, 1)}, {"dw_band": (2, 6)}, True, id="cin64-dil"),
    # C_in 130 (two C_in tiles), C_out 140 (two C_out tiles: two transfers per run), stride 2
    pytest.param({"batch": 2, "c_in": 130, "c_out": 140, "size": (4, 8, 5), "kernel": (2, 3, 2), "stride": (2, 2, 1),
                  "padding": (0, 1, 1, 1, 0, 1)}, {}, True, id="c130x140-s2"),
]


@pytest.mark.parametrize("geom, edit, xs", GEOMS)
def test_dyt_dma_is_exact(geom, edit, xs, transfers):
    run_and_compare(**geom, plan_edit=_dyt(edit, xs=xs))
    assert transfers


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_gradient_subsets_fp16(grads, transfers):
    run_and_compare(**STEM_SMALL, dtype="fp16", grads=grads, plan_edit=_dyt({"dw_band": (2, 7)}))
    assert transfers


@pytest.mark.parametrize("split", ["positions", "taps"])
def test_lnc2(split, transfers):
    run_and_compare(**STEM_SMALL, lnc=2, plan_edit=_dyt(split=split))
    assert transfers


def test_tap_passes(transfers):
    run_and_compare(**STEM_SMALL, plan_edit=_dyt({"dw_tap_range": 63, "dw_band": (2, 7)}))
    assert transfers


def test_runs_cover_the_chunk_rows_once():
    ho = 7
    for d0, h0, cd, ch in [(0, 0, 3, 7), (1, 0, 1, 5), (2, 3, 3, 4), (0, 2, 1, 5)]:
        rows = [(p0 + j, r0 + j) for p0, r0, n in dyt_runs(ho, d0, h0, cd, ch) for j in range(n)]
        want = [(i * ch + j, (d0 + i) * ho + h0 + j) for i in range(cd) for j in range(ch)]
        assert sorted(rows) == want


def test_not_for_fp32_or_shared_dy():
    shapes = geom_shapes(STEM_SMALL)
    kw = {"stride": STEM_SMALL["stride"], "padding": STEM_SMALL["padding"]}
    p32 = plan_conv3d_bwd(*shapes, **kw, dtype="fp32")
    assert not p32.feasible_candidates(where=lambda a: a.dw_dyt_dma)
    p = plan_conv3d_bwd(*shapes, **kw)
    assert not p.feasible_candidates(where=lambda a: a.dw_dyt_dma and a.strategy is Strategy.SHARED_DY)
    assert bool(p.feasible_candidates(where=lambda a: a.dw_dyt_dma))


@pytest.mark.parametrize("lnc", [1, 2])
def test_budget_bounds_the_measured_peak(lnc):
    assert_candidates_within_budget(geom_shapes(STEM_SMALL), lambda a: a.dw_dyt_dma, 4, lnc=lnc,
                                    **geom_kw(STEM_SMALL))
