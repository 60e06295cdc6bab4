"""db inside dw's x-stationary matmuls (``Plan.db_ones``, label ``db:fold[ones row]``): one stationary chunk
also takes its bundle tile's ones slot, so its PSUM rows after its own hold sum_pos dy^T = db. Bit-exact
forced plans over tiny and 64-channel C_in, odd sizes, padding, stride, dilation, several batches, both
strategies, tap passes, LNC2 (positions and taps splits), every gradient subset with db and
dw, bf16 / fp16 / fp32 (PE-built x^T); the chunk choice and the planner's legality and budget."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DbMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import db_ones_legal
from conv3d_bwd.kernels.spec.dw_xs import db_ones_chunk, dw_xs_bundles, dw_xs_chunks

from .support import STEM_SMALL, assert_candidates_within_budget, geom_kw, geom_shapes, run_and_compare, spy


@pytest.fixture
def ones_matmuls(monkeypatch):
    """The folds of an accumulation group holding the ones chunk (so a test knows the path ran)."""
    def ones_chunk(self, banks, ci, ci_sz, chunks, ones_t=None):
        return ones_t if ones_t is not None and any(ch[0] == ones_t for ch in chunks) else None

    return spy(monkeypatch, nki_dw.DwState, "_xs_fold", ones_chunk)


def _ones(strategy=None, split=None, edit=None, xt_dma=None):
    """The first feasible candidate with db_ones (of ``strategy`` / LNC2 ``split``); else, for dtypes the
    planner does not list it for (fp32: no ``xT dma``), the first row-mode x-stationary one, forced."""
    def pick(p):
        def ok(a):
            return ((strategy is None or a.strategy is strategy) and (split is None or a.dw_split == split)
                    and (xt_dma is None or a.dw_xt_dma == xt_dma))
        alts = p.feasible_candidates(where=lambda a: a.db_ones and ok(a))
        if not alts:
            alts = [dataclasses.replace(a, db_ones=True) for a in p.feasible_candidates()
                    if a.dw_x_stationary and a.db_method is DbMethod.FOLD and ok(a)
                    and db_ones_legal(a.geometry(), dataclasses.replace(a, db_ones=True))]
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], **(edit or {}))
        assert q.db_ones and db_ones_legal(q.geometry(), q), q.label
        return q
    return pick


GEOMS = [
    # the stem's kernel and stride at a small size (the last bundle of 3 pairs takes the ones slot)
    pytest.param(STEM_SMALL, {"dw_band": (3, 7)}, id="stem-small"),
    # C_in 1, asymmetric padding, odd sizes, one box (direct eviction into the output dtype)
    pytest.param({"batch": 1, "c_in": 1, "c_out": 5, "size": (6, 9, 11), "kernel": (3, 5, 3), "stride": (1, 2, 2),
                  "padding": (2, 0, 1, 3, 0, 2)}, {}, id="cin1-asym"),
    # C_in 8 with dilation in H, two batches
    pytest.param({"batch": 2, "c_in": 8, "c_out": 6, "size": (4, 9, 7), "kernel": (2, 3, 3), "dilation": (1, 2, 1),
                  "padding": (1, 0, 2, 2, 1, 1)}, {}, id="cin8-dil"),
    # C_in 64 (dilated_d2-like): 9 pairs in bundles of 2, the last pair's leftover kw tap (M 64 -> 128)
    pytest.param({"batch": 1, "c_in": 64, "c_out": 24, "size": (4, 6, 5), "kernel": (3, 3, 3), "dilation": (2, 2, 1),
                  "padding": (2, 2, 2, 2, 1, 1)}, {"dw_band": (2, 6)}, id="cin64-dil"),
    # C_in 4, stride 2 in every axis, C_out 130 (two C_out tiles on the moving axis)
    pytest.param({"batch": 2, "c_in": 4, "c_out": 130, "size": (5, 7, 6), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1,) * 6}, {}, id="cin4-s2-co130"),
]


@pytest.mark.parametrize("geom, edit", GEOMS)
def test_db_ones_is_exact(geom, edit, ones_matmuls):
    run_and_compare(**geom, plan_edit=_ones(edit=edit))
    assert ones_matmuls


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("grads", [("dw", "db"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
def test_dtypes_and_gradient_subsets(dtype, grads, ones_matmuls):
    run_and_compare(**STEM_SMALL, dtype=dtype, grads=grads, plan_edit=_ones())
    assert ones_matmuls


@pytest.mark.parametrize("split, geom", [("positions", STEM_SMALL), ("taps", STEM_SMALL),
                                         ("positions", dict(GEOMS[3].values[0]))],
                         ids=["stem-small-positions", "stem-small-taps", "cin64-dil-positions"])
def test_lnc2(split, geom, ones_matmuls):
    """(cin64-dil's taps split gives the db program 4 pairs, two full bundles: no room, not offered.)"""
    run_and_compare(**geom, lnc=2, plan_edit=_ones(split=split))
    assert ones_matmuls


def test_shared_dy_and_pe_built_xt(ones_matmuls):
    run_and_compare(**dict(GEOMS[2].values[0]), plan_edit=_ones(strategy=Strategy.SHARED_DY, xt_dma=False))
    assert ones_matmuls


def test_tap_passes_fold_db_in_the_first(ones_matmuls):
    run_and_compare(**STEM_SMALL, plan_edit=_ones(edit={"dw_tap_range": 63, "dw_band": (2, 7)}))
    assert ones_matmuls


def test_the_chunk_ends_a_bundle_and_fits_m():
    dy, x, w = geom_shapes(STEM_SMALL)
    g = validate(dy, x, w, STEM_SMALL["stride"], STEM_SMALL["padding"], (1, 1, 1), "bf16")
    p = plan_conv3d_bwd(dy, x, w, stride=STEM_SMALL["stride"], padding=STEM_SMALL["padding"])
    q = next(a for a in p.feasible_candidates() if a.db_ones)
    t, nb, tn = db_ones_chunk(g, q, (0, g.taps))
    assert (t, nb, tn) in dw_xs_chunks(g, q, (0, g.taps))
    bundle = next((b0, n) for b0, n in dw_xs_bundles(g, q, (0, g.taps)) if b0 <= t // 7 < b0 + n)
    assert t // 7 + nb == bundle[0] + bundle[1] and (nb + 1) * tn * 3 <= 128
    assert (t, nb, tn) == (18 * 7, 3, 7)   # 21 pairs in bundles of 6: the last bundle's 3 pairs, M 63 -> 84


def test_no_room_no_variant():
    """C_in 128 fills M with one tap: no chunk has room, the planner offers no db_ones candidate."""
    geom = {"batch": 1, "c_in": 128, "c_out": 32, "size": (4, 6, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
    dy, x, w = geom_shapes(geom)
    p = plan_conv3d_bwd(dy, x, w, padding=geom["padding"])
    assert not p.feasible_candidates(where=lambda a: a.db_ones)
    assert bool(p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.db_method is DbMethod.FOLD))


@pytest.mark.parametrize("lnc", [1, 2])
def test_budget_bounds_the_measured_peak(lnc):
    assert_candidates_within_budget(geom_shapes(STEM_SMALL), lambda a: a.db_ones, 4, lnc=lnc, **geom_kw(STEM_SMALL))
