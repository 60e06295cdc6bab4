"""Bands loaded one box ahead: box-mode dw's x band of the next box (``DwState.expect``) and the D-phase-pairs
dx's next dy band (``DyBands.load(places=...)``) load under the current box's work, their staged placements
issued later. Forced on small geometries in exact mode against the oracle, with spies that show the
ahead path ran (and, for a wrong expectation, that the fallback load ran instead)."""
from __future__ import annotations

import dataclasses

from conv3d_bwd.kernels import nki_dw, nki_dx
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DwMethod, Strategy
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.search import _label

from .support import plan_geom, run_and_compare, spy

# two C_in tiles (128 + 2), W padded (the x band is staged and placed), four boxes of one D row each
TWO_TILES = {"batch": 1, "c_in": 130, "c_out": 8, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
# stride 2, C_in <= 64: shared dy with D-phase-pairs dx, dw's boxes are dx's bands
STRIDE2 = {"batch": 2, "c_in": 8, "c_out": 16, "size": (8, 6, 6), "kernel": (3, 3, 3), "stride": (2, 2, 2),
           "padding": (1,) * 6}


def _fits(q):
    why, budget = _check(plan_geom(q), q, TARGET_FIGURES[q.target])
    assert not why, (q.label, why)
    return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))


def _box_mode_streaming(p):
    """A per-gradient box-mode dw (dy-stationary tap_pack) in boxes of one output D row."""
    alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                 and a.dw_method is DwMethod.TAP_PACK and (not a.dw_x_stationary)
                                 and (not a.dw_w_band)
                                 and (not (a.dw_interleave or a.dx_prefetch)))
    assert alts, p.explain()
    g = plan_geom(alts[0])
    return _fits(dataclasses.replace(alts[0], dw_band=(1, g.out_size[1]), dw_dyt_dma=False))


def _shared_dphase_pairs(p):
    """shared dy: D-phase-pairs dx in bands of one D row pair, box-mode dw on each band."""
    alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.SHARED_DY and a.dx_dphase_pairs
                                 and (a.dw_method in (DwMethod.TAP_PACK, DwMethod.TAP_GEMM))
                                 and (a.dy_bufs >= 2))
    assert alts, p.explain()
    return _fits(dataclasses.replace(alts[0], dx_band=(2, plan_geom(alts[0]).axes[1].n)))


def test_next_box_x_band_loads_ahead_and_is_exact(monkeypatch):
    ahead = spy(monkeypatch, nki_dw.DwState, "_load_next_x", lambda self: self.next_box)
    now = spy(monkeypatch, nki_dw.DwState, "_load_x", lambda self, b, od, oh, ci0, _sz, _ow=None, pieces=1: (od, ci0, pieces))
    run_and_compare(**TWO_TILES, grads=("dw", "db"), plan_edit=_box_mode_streaming)
    assert len(ahead) == 3   # boxes 2..4 got their first C_in tile ahead
    # the first box's first C_in tile in D-row pieces (its transposes wait for the first rows only)
    assert sorted(now) == [((0, 1), 0, nki_dw.FIRST_X_PIECES), ((0, 1), 128, 1), ((1, 2), 128, 1),
                           ((2, 3), 128, 1), ((3, 4), 128, 1)]


def test_a_first_x_band_in_pieces_moves_as_several_dmas(monkeypatch):
    pieces = spy(monkeypatch, nki_dw, "stage_padded",
                 lambda buf, ext, lo, hi, src, pool, p0=0, engine=None, pieces=1: pieces if pieces > 1 else None)
    copies = spy(monkeypatch, nki_dw.nisa, "dma_copy",
                 lambda dst, src, **k: dst.shape if getattr(dst, "name", "").startswith("dw_x_stage") else None)
    run_and_compare(**TWO_TILES, dtype="fp32", grads=("dw",), plan_edit=_box_mode_streaming)
    assert pieces == [nki_dw.FIRST_X_PIECES]
    # 8 staged x bands (4 boxes x 2 C_in tiles); the first holds 2 x rows (D padding 1): 2 pieces, min(3, 2)
    assert len(copies) == 9, copies


def test_a_wrong_expectation_falls_back_to_loading_now(monkeypatch):
    """An expected box that is not the one added next (one H row short): its band is not used, the box
    loads its own."""
    expect = nki_dw.DwState.expect
    monkeypatch.setattr(nki_dw.DwState, "expect",
                        lambda self, b, od, oh, ow=None: expect(self, b, od, (oh[0], oh[1] - 1), ow))
    now = spy(monkeypatch, nki_dw.DwState, "_load_x", lambda self, b, od, oh, ci0, *a: (od, ci0))
    run_and_compare(**TWO_TILES, dtype="fp32", grads=("dw",), plan_edit=_box_mode_streaming)
    assert len(now) == 8   # every box, both C_in tiles


def test_shared_dy_dphase_pairs_bands_load_ahead_and_are_exact(monkeypatch):
    dy_ahead = spy(monkeypatch, nki_dx.DyBands, "load",
                   lambda self, b, bd, bh, *a, places=None, **k: (b, bd.i0) if places is not None else None)
    # (a band may own no output rows: no dw box, nothing to load ahead)
    x_ahead = spy(monkeypatch, nki_dw.DwState, "_load_next_x",
                  lambda self: self.next_box if self.next_box[1][1] > self.next_box[1][0] else None)
    run_and_compare(**STRIDE2, plan_edit=_shared_dphase_pairs)
    # 2 batches x 4 bands of 2 input D rows: every band but the first loads its dy ahead; dw's boxes are the
    # bands' own output rows, and a box that follows a band owning none loads its x band itself
    assert len(dy_ahead) == 7, dy_ahead
    assert [(b, od) for b, od, _oh, _ow in x_ahead] == [(0, (2, 3)), (0, (3, 4)), (1, (2, 3)), (1, (3, 4))]
