"""dw's head split (``Plan.dw_head_split``, label ``head split``; ``kernels/dw_head.py``): the first row pass's
dy^T and its first pairs' x^T come by W column pieces, the head pairs first. Bit-exact forced plans: C_in 128
/ 130 (two C_in tiles) / 70, C_out up to 140, odd sizes, asymmetric padding, stride, dilation, two batches,
W_out narrower than the pieces, LNC2 (taps and positions splits; db on the taps split's lighter program),
tap passes, every gradient subset with dw, bf16 and fp16; the pieces, the head order,
legality, the budget and the estimate."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.dw_head import (
    HEAD_MAX_WRITES,
    fill_writes,
    head_col_pieces,
    head_pair_order,
    head_pieces,
)
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import dw_head_split_legal
from conv3d_bwd.kernels.xt_rows import xt_window

from .support import assert_budget_bounds_peak, geom_shapes, run_and_compare


@pytest.fixture
def head_fills(monkeypatch):
    """The head fills that ran (so a test knows the path ran): (with dy^T, pair)."""
    seen = []
    original = nki_dw.DwState._head_fill

    def counted(self, fill, ci0, ci_sz, kd, kh):
        seen.append((fill[1], (kd, kh)))
        return original(self, fill, ci0, ci_sz, kd, kh)

    monkeypatch.setattr(nki_dw.DwState, "_head_fill", counted)
    return seen


def _head(edit=None, split=None):
    """The first feasible x-stationary ``xT dma`` + ``dyT dma`` candidate (LNC2 split), edited, with the head
    split on."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_dyt_dma and a.dw_x_stationary and a.dw_xt_dma
                                     and (not a.db_ones)
                                     and (split is None or a.dw_split == split))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dw_head_split=True, **(edit or {}))
        assert dw_head_split_legal(q.geometry(), q), q.label
        return q
    return pick


VAE = {"batch": 1, "c_in": 128, "c_out": 32, "size": (4, 6, 9), "kernel": (3, 3, 3), "padding": (1,) * 6}
GEOMS = [
    pytest.param(VAE, {}, id="vae-like"),
    # two C_in tiles, odd sizes, asymmetric padding, W stride 2
    pytest.param({"batch": 1, "c_in": 130, "c_out": 20, "size": (3, 5, 11), "kernel": (2, 3, 3), "stride": (1, 1, 2),
                  "padding": (1, 0, 0, 2, 1, 2)}, {}, id="c130-asym-s2"),
    # C_in 70 (one 70-channel tile), two C_out tiles, dilation, two batches, two row chunks per box
    pytest.param({"batch": 2, "c_in": 70, "c_out": 140, "size": (4, 5, 9), "kernel": (3, 3, 2), "dilation": (2, 1, 2),
                  "padding": (2, 2, 1, 1, 1, 1)}, {"dw_band": (2, 5)}, id="c70x140-dil-b2"),
    # W_out 3 (W stride 3): fewer columns than pieces
    pytest.param({"batch": 1, "c_in": 128, "c_out": 16, "size": (3, 4, 7), "kernel": (3, 3, 3), "stride": (1, 1, 3),
                  "padding": (1,) * 6}, {}, id="wo3-s3"),
]


@pytest.mark.parametrize("geom, edit", GEOMS)
def test_head_split_is_exact(geom, edit, head_fills):
    run_and_compare(**geom, plan_edit=_head(edit))
    assert head_fills and head_fills[0][0] and not any(w for w, _p in head_fills[1:])


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_gradient_subsets_fp16(grads, head_fills):
    run_and_compare(**VAE, dtype="fp16", grads=grads, plan_edit=_head())
    assert head_fills


@pytest.mark.parametrize("split", ["taps", "positions"])
@pytest.mark.parametrize("grads", [("dx", "dw", "db"), ("dw", "db")], ids=lambda g: "+".join(g))
def test_lnc2(split, grads, head_fills):
    run_and_compare(**VAE, lnc=2, grads=grads, plan_edit=_head(split=split))
    assert len([f for f in head_fills if f[0]]) == 2   # one head per program


def test_tap_passes_only_the_first_pass_splits(head_fills):
    run_and_compare(**VAE, grads=("dw", "db"), plan_edit=_head({"dw_tap_range": 9}))
    assert len([f for f in head_fills if f[0]]) == 1


def test_budget_bounds_the_measured_peak():
    for lnc in (1, 2):
        shapes = geom_shapes(VAE)
        p = plan_conv3d_bwd(*shapes, padding=VAE["padding"], lnc=lnc)
        alts = p.feasible_candidates(where=lambda a: a.dw_head_split)
        assert alts, p.explain()
        for alt in alts[:3]:
            assert_budget_bounds_peak(alt, shapes, padding=VAE["padding"], lnc=lnc)


@pytest.mark.parametrize("w_lo, w_hi, window", [(0, 32, None), (0, 16, None), (16, 32, None), (0, 3, None)])
def test_pieces_cover_the_window_in_order(w_lo, w_hi, window):
    g = validate((1, 128, 4, 32, 32), (1, 128, 4, 32, 32), (3, 3, 3, 128, 128), padding=(1,) * 6)
    a0, e0 = window or xt_window(g, w_lo, w_hi)
    pieces = head_col_pieces(g, w_lo, w_hi, a0, e0)
    assert len(pieces) == min(4, w_hi - w_lo)
    assert pieces[0][0][0] == w_lo and pieces[-1][0][1] == w_hi and pieces[0][1][0] == a0 and pieces[-1][1][1] == e0
    for ((_w0, w1), (a, e)), ((v0, _v1), (b, _f)) in itertools.pairwise(pieces):
        assert w1 == v0 and e == b and a <= e
    covered = a0   # every piece's matmuls read only columns of it and the pieces before it
    for (w0, w1), (_a, e) in pieces:
        covered = e
        assert xt_window(g, w0, w1)[1] <= covered


def test_head_order_and_piece_count():
    g = validate((1, 128, 4, 32, 32), (1, 128, 4, 32, 32), (3, 3, 3, 128, 128), padding=(1,) * 6)
    chunk = (0, 0, 4, 32)
    pairs = [(kd, kh) for kd in range(3) for kh in range(3)]
    # program 0 of vae3d's taps split (pairs 0..4): (1, 1) reads no padding (1 write), (0, 1)'s zero rows are
    # one D plane (2 writes); equal counts keep their order
    assert head_pair_order(g, pairs[:5], chunk) == [(1, 1), (0, 1), (0, 0), (0, 2), (1, 0)]
    assert head_pair_order(g, pairs[5:], chunk)[:2] == [(2, 1), (2, 2)]   # 2 and 4 writes
    assert fill_writes(g, chunk, 1, 1) == 1 and fill_writes(g, chunk, 0, 1) == 2
    # the pieces never take a tile past the scheduler's memory of 16 writes (2 pad-column memsets)
    for kd, kh in pairs:
        n = head_pieces(g, chunk, kd, kh)
        assert n >= 1 and (n == 1 or 2 + n * fill_writes(g, chunk, kd, kh) <= HEAD_MAX_WRITES)


def test_planner_lists_estimates_and_labels_it():
    for lnc in (1, 2):
        shapes = ((1, 128, 4, 32, 32), (1, 128, 4, 32, 32), (3, 3, 3, 128, 128))
        p = plan_conv3d_bwd(*shapes, padding=(1,) * 6, lnc=lnc)
        on = p.feasible_candidates(where=lambda a: a.dw_head_split)
        assert on and all("head split" in a.label for a in on)
        twins = {dataclasses.replace(a, dw_head_split=False, estimated_us=0.0, label="", sbuf_bytes=0,
                                     psum_banks=0, engine_us=()): a for a in on}
        for a in p.feasible_candidates():
            key = dataclasses.replace(a, estimated_us=0.0, label="", sbuf_bytes=0, psum_banks=0, engine_us=())
            if not a.dw_head_split and key in twins:   # the split shortens the estimated head, same budget
                assert twins[key].estimated_us < a.estimated_us and twins[key].sbuf_bytes == a.sbuf_bytes


def test_legality():
    shapes = ((1, 128, 4, 32, 32), (1, 128, 4, 32, 32), (3, 3, 3, 128, 128))
    p = plan_conv3d_bwd(*shapes, padding=(1,) * 6, lnc=1)
    g = p.geometry()
    base = next(a for a in p.feasible_candidates() if a.dw_head_split)
    assert dw_head_split_legal(g, base)
    # (a C_in range of 3: its first tile's zero rows would be one memset per tile, the tiny-C_in fill)
    for edit in ({"dw_dyt_dma": False}, {"dw_x_stationary": False}, {"db_ones": True},
                 {"dw_ci_tile": 64}, {"dw_ci_range": 3}):
        assert not dw_head_split_legal(g, dataclasses.replace(base, **edit)), edit
    # C_in 64: two pairs per x^T bundle; the stem's tiny C_in: zero rows by one memset per tile
    p64 = plan_conv3d_bwd((1, 64, 4, 32, 32), (1, 64, 4, 32, 32), (3, 3, 3, 64, 64), padding=(1,) * 6)
    assert not p64.feasible_candidates(where=lambda a: a.dw_head_split)
