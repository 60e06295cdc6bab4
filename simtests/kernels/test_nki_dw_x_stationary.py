"""dw with x^T as the stationary operand (``Plan.dw_x_stationary``): dw[(tap, ci), co] in PSUM, stored
straight into dw. Forced plans over box and row mode, C_in that pack several taps on M (3, 64), one
(100, 130: a full and a 2-channel C_in tile), stride / dilation / asymmetric padding, several batches,
every gradient subset with dw, LNC2 position and tap splits, tap passes, C_in ranges, three dtypes."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import dw_tap_passes
from conv3d_bwd.kernels.spec.dw_xs import (
    dw_xs_bundle,
    dw_xs_chunks,
    dw_xs_fold_runs,
    dw_xs_slots,
    xs_store_runs,
)

from .support import GRADS, run_and_compare

BOX, ROW = (DwMethod.TAP_GEMM, DwMethod.TAP_PACK), (DwMethod.ROW_PACK,)


def _force(methods, strategy=Strategy.PER_GRADIENT, split="positions", edit=None):
    """Edit: the first feasible x-stationary candidate with one of ``methods`` (and strategy, LNC2 split)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.dw_method in methods
                                     and (a.strategy is strategy) and (a.lnc == 1 or a.dw_split == split))
        assert alts, p.explain()
        q = alts[0] if edit is None else dataclasses.replace(alts[0], **edit(alts[0]))
        assert q.dw_x_stationary
        return q
    return pick


ODD = {"batch": 2, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1), "padding": (1, 0, 0, 1, 1, 1),
       "dilation": (1, 2, 1)}
K333 = {"batch": 1, "size": (3, 4, 5), "kernel": (3, 3, 3), "padding": (1, 2, 1, 0, 0, 1)}


@pytest.mark.parametrize("c_in", [3, 64, 100, 130])
@pytest.mark.parametrize("mode", ["box", "row"])
def test_x_stationary_channels_are_exact(c_in, mode):
    geom = ODD if c_in < 100 else dict(K333, size=(2, 3, 4))
    run_and_compare(**geom, c_in=c_in, c_out=7, dtype="bf16",
                    plan_edit=_force(BOX if mode == "box" else ROW))


@pytest.mark.parametrize("mode", ["box", "row"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_x_stationary_dtypes_are_exact(mode, dtype):
    run_and_compare(**K333, c_in=40, c_out=9, dtype=dtype, plan_edit=_force(BOX if mode == "box" else ROW))


# shared_dy exists only with dx and dw
SUBSETS = [(grads, Strategy.PER_GRADIENT) for grads in (("dw",), ("dw", "db"), ("dx", "dw"), GRADS)] + \
    [(grads, Strategy.SHARED_DY) for grads in (("dx", "dw"), GRADS)]


@pytest.mark.parametrize("grads, strategy", SUBSETS, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v.value)
@pytest.mark.parametrize("mode", ["box", "row"])
def test_x_stationary_gradient_subsets_are_exact(grads, strategy, mode):
    run_and_compare(**ODD, c_in=6, c_out=5, grads=grads, plan_edit=_force(BOX if mode == "box" else ROW, strategy))


@pytest.mark.parametrize("mode", ["box", "row"])
@pytest.mark.parametrize("split", ["positions", "taps"])
def test_x_stationary_lnc2_is_exact(mode, split):
    run_and_compare(**ODD, c_in=64, c_out=5, lnc=2, plan_edit=_force(BOX if mode == "box" else ROW, split=split))


def _passes(taps, ci_range=None):
    def edit(q):
        e = {"dw_tap_range": taps}
        if ci_range is not None:
            e.update(dw_ci_range=ci_range, dw_ci_tile=min(ci_range, q.dw_ci_tile))
        return e
    return edit


@pytest.mark.parametrize("mode, taps", [("box", 4), ("row", 3), ("row", 6)])
@pytest.mark.parametrize("split", ["lnc1", "positions", "taps"])
def test_x_stationary_tap_passes_are_exact(mode, taps, split):
    lnc = 1 if split == "lnc1" else 2
    methods = BOX if mode == "box" else ROW

    def edit(q):
        e = _passes(taps)(q)
        if mode == "box":   # tap groups of 4 (M = 4 x 20 = 80 per stationary), passes of one group
            e["dw_tap_group"] = 4
        assert len(dw_tap_passes(q.geometry(), dataclasses.replace(q, **e), 0)) >= 2
        return e
    run_and_compare(**K333, c_in=20, c_out=6, lnc=lnc, plan_edit=_force(methods, split=split if lnc == 2 else
                                                                         "positions", edit=edit))


@pytest.mark.parametrize("mode", ["box", "row"])
def test_x_stationary_ci_ranges_are_exact(mode):
    run_and_compare(**K333, c_in=6, c_out=5, dtype="fp16", grads=("dw", "db"),
                    plan_edit=_force(BOX if mode == "box" else ROW, edit=_passes(9 if mode == "row" else 0, 2)))


def test_x_stationary_packs_kw_taps_on_the_stationary():
    """C_in 64, K_w 3: row mode packs two kw taps per stationary (M = 128) and the third kw tap of two
    (kd, kh) pairs together (their x^T share a tile): 3 chunks per 2 pairs, 14 for 27 taps."""
    p = plan_conv3d_bwd((1, 64, 4, 4, 4), (1, 64, 4, 4, 4), (3, 3, 3, 64, 64), padding=(1,) * 6)
    q = next(a for a in p.feasible_candidates() if a.dw_x_stationary and a.dw_method is DwMethod.ROW_PACK)
    g = q.geometry()
    assert dw_xs_slots(g, q) == 2 and dw_xs_bundle(g, q) == 2
    assert dw_xs_chunks(g, q, (0, 6)) == [(0, 1, 2), (3, 1, 2), (2, 2, 1)]
    assert len(dw_xs_chunks(g, q, (0, 27))) == 14
    # per bank (C_out 64: 8 accumulators) chunks of one size fold together, other sizes apart
    assert dw_xs_fold_runs([(0, 1, 2), (3, 1, 2), (2, 2, 1)], 8) == [(0, 0, 3, 2)]
    assert dw_xs_fold_runs([(0, 1, 2), (2, 1, 1), (3, 1, 2)], 8) == [(0, 0, 1, 2), (0, 1, 1, 1), (0, 2, 1, 2)]
    assert dw_xs_fold_runs([(0, 1, 2), (3, 1, 2), (2, 2, 1)], 1) == [(0, 0, 1, 2), (1, 1, 1, 2), (2, 2, 1, 2)]
    assert xs_store_runs([(0, 1, 1), (1, 1, 1), (2, 1, 1), (5, 1, 1), (6, 1, 2), (8, 2, 1)]) == [
        (0, 0, 1, 3, True), (3, 5, 1, 1, True), (4, 6, 1, 2, False), (5, 8, 2, 1, False)]


def test_x_stationary_stacks_whole_kw_rows_for_tiny_c_in():
    """C_in 3, kernel 3x7x7: six (kd, kh) kw rows per stationary, M = 6 x 7 x 3 = 126."""
    p = plan_conv3d_bwd((1, 64, 4, 4, 4), (1, 3, 6, 10, 10), (3, 7, 7, 3, 64))
    q = next(a for a in p.feasible_candidates() if a.dw_x_stationary and a.dw_method is DwMethod.ROW_PACK)
    g = q.geometry()
    assert dw_xs_bundle(g, q) == 6
    assert dw_xs_chunks(g, q, (0, g.taps)) == [(0, 6, 7), (42, 6, 7), (84, 6, 7), (126, 3, 7)]


def test_x_stationary_is_not_offered_beyond_one_bank_of_c_out():
    p = plan_conv3d_bwd((1, 600, 3, 3, 3), (1, 8, 5, 5, 5), (3, 3, 3, 8, 600))
    assert not p.feasible_candidates(where=lambda a: a.dw_x_stationary)
    assert any("x-stationary" in c.label for c in plan_conv3d_bwd(
        (1, 8, 3, 3, 3), (1, 8, 5, 5, 5), (3, 3, 3, 8, 8)).candidates)
