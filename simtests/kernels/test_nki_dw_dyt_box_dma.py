"""Box-mode dw (tap_pack / tap_gemm) with dy^T by ``dma_transpose`` (``Plan.dw_dyt_dma`` with
``spec.dw_options.dyt_box_dma_legal``, label ``dyT dma``): one 2-D transfer per (C_out tile, d plane) of each
whole-W-rows position tile, no dy box, no dy^T PE transposes or evictions. Bit-exact forced plans: odd sizes,
padding, stride, dilation, two batches, two C_out tiles, x-stationary and dw^T orientations, LNC2 (taps and
positions splits), every gradient subset with dw, bf16 and fp16; legality, estimate, budget."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.plan import DwMethod, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import dyt_box_dma_legal

from .support import assert_budget_bounds_peak, geom_shapes, run_and_compare


@pytest.fixture
def transfers(monkeypatch):
    """The position tiles whose dy^T came by DMA (so a test knows the path ran)."""
    seen = []
    original = nki_dw.DwState._dyt_box_by_dma

    def counted(self, *args):
        seen.append(args)
        return original(self, *args)

    monkeypatch.setattr(nki_dw.DwState, "_dyt_box_by_dma", counted)
    return seen


def _box(xs=None, split=None, edit=None):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_dyt_dma
                                     and a.dw_method in (DwMethod.TAP_PACK, DwMethod.TAP_GEMM)
                                     and (xs is None or a.dw_x_stationary == xs)
                                     and (split is None or a.dw_split == split))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], **(edit or {}))
        assert dyt_box_dma_legal(q.geometry(), q), q.label
        return q
    return pick


GEOMS = [
    # odd sizes, padding, two batches: position tiles of several d planes (W_out 5, H_out 4)
    pytest.param({"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 4, 5), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 {}, True, id="b2-odd"),
    # two C_out tiles (140), stride 2, asymmetric padding, the dw^T orientation
    pytest.param({"batch": 1, "c_in": 7, "c_out": 140, "size": (5, 6, 9), "kernel": (3, 2, 3), "stride": (2, 1, 2),
                  "padding": (1, 0, 0, 1, 1, 1)}, {}, False, id="co140-s2-dwT"),
    # dilation, a box of partial D (dw_band 2 of 3 planes), x-stationary
    pytest.param({"batch": 1, "c_in": 9, "c_out": 12, "size": (3, 7, 6), "kernel": (2, 3, 3), "dilation": (2, 1, 1),
                  "padding": (1, 1, 1, 1, 1, 1)}, {"dw_band": (2, 7)}, True, id="dil-band2"),
]


@pytest.mark.parametrize("geom, edit, xs", GEOMS)
def test_box_dyt_dma_is_exact(geom, edit, xs, transfers):
    run_and_compare(**geom, plan_edit=_box(xs=xs, edit=edit))
    assert transfers


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_gradient_subsets_fp16(grads, transfers):
    run_and_compare(**GEOMS[0].values[0], dtype="fp16", grads=grads, plan_edit=_box())
    assert transfers


@pytest.mark.parametrize("split", ["taps", "positions"])
def test_lnc2(split, transfers):
    run_and_compare(**GEOMS[1].values[0], lnc=2, plan_edit=_box(split=split))
    assert transfers


def test_legality_estimate_and_budget():
    geom = GEOMS[0].values[0]
    shapes = geom_shapes(geom)
    p = plan_conv3d_bwd(*shapes, padding=geom["padding"])
    on = p.feasible_candidates(where=lambda a: a.dw_dyt_dma and a.dw_method is DwMethod.TAP_PACK)
    assert on and all("dyT dma" in a.label for a in on)
    by_label = {a.label: a for a in p.feasible_candidates()}
    for a in on[:2]:
        assert_budget_bounds_peak(a, shapes, padding=geom["padding"])
        # its twin with PE transposes is listed too; the estimate moves the transposes' time off the PE
        twin = by_label[a.label.replace(", dyT dma", "")]
        assert dict(a.engine_us)["tensor"] < dict(twin.engine_us)["tensor"]
        assert dict(a.engine_us)["dma"] > 0
    # fp32 (dma_transpose here is for 2-byte data) and W_out > 128 (a position tile is not whole W rows)
    p32 = plan_conv3d_bwd(*shapes, padding=geom["padding"], dtype="fp32")
    assert not p32.feasible_candidates(where=lambda a: a.dw_dyt_dma)
    wide = plan_conv3d_bwd((1, 4, 1, 2, 130), (1, 4, 1, 2, 130), (1, 1, 3, 4, 4), padding=(0, 0, 0, 0, 1, 1))
    assert bool(wide.feasible_candidates(where=lambda a: a.dw_method is DwMethod.TAP_PACK))
    assert not wide.feasible_candidates(where=lambda a: a.dw_dyt_dma
                                         and a.dw_method is not DwMethod.ROW_PACK)
