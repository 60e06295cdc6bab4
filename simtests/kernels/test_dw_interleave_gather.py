"""dw-interleaved with the gather (``Plan.dw_interleave``, ``spec.compose.dw_interleave_ok``): per gradient, dw's
boxes (row or box mode) run between the gather dx's bands (plain or D-phase pairs), so dx's PE work fills dw's
DMA waits. Forced on small geometries in exact mode against the oracle (stride 1 and 2, two C_in tiles, C_in-outer
groups, LNC2, boxes over 128 rows), with spies that show the boxes really ran from dx's band loop."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.plan import DwMethod, DxMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import dw_interleave_ok

from .support import conv_shapes, plan_geom, run_and_compare, spy

STRIDE1 = {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
STRIDE2 = {"batch": 1, "c_in": 8, "c_out": 12, "size": (6, 6, 7), "kernel": (3, 3, 3), "stride": (2, 2, 2),
           "padding": (1, 0, 1, 1, 0, 1)}
TWO_TILES = {"batch": 1, "c_in": 130, "c_out": 6, "size": (4, 4, 5), "kernel": (3, 1, 1),
             "padding": (1, 1, 0, 0, 0, 0)}


def _gather_interleaved(ci_outer=None, dx_band=None):
    """The best-estimated per-gradient gather candidate (no dx^T, no D-phase pairs) with a streaming dw,
    forced dw-interleaved (in bands of ``dx_band`` when given: several bands, so boxes run between them)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                     and a.dx_method in (DxMethod.GATHER_S1, DxMethod.PHASE_GATHER)
                                     and (ci_outer is None or a.dx_ci_outer is ci_outer)
                                     and dw_interleave_ok(plan_geom(a), dataclasses.replace(a, dw_interleave=True)))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dw_interleave=True)
        return dataclasses.replace(q, dx_band=dx_band) if dx_band else q
    return pick


@pytest.fixture
def boxes(monkeypatch):
    """The dw boxes issued from the gather's band loop, per call (so a test knows the interleaving ran)."""
    entry = importlib.import_module("conv3d_bwd.kernels.conv3d_bwd")
    seen = []
    original = entry._Steps.between_bands

    def counted(self):
        run = original(self)

        def wrapped(k, n):
            before = self.done
            run(k, n)
            seen.append(self.done - before)
        return wrapped

    monkeypatch.setattr(entry._Steps, "between_bands", counted)
    return seen


@pytest.mark.parametrize("geom, dtype, band", [
    (STRIDE1, "bf16", (1, 6)), (STRIDE1, "fp32", (2, 6)), (STRIDE2, "bf16", (2, 6)), (STRIDE2, "fp16", (1, 6)),
], ids=["stride1-bf16", "stride1-fp32", "stride2-bf16", "stride2-fp16"])
def test_gather_with_dw_interleaved_is_exact(boxes, geom, dtype, band):
    run_and_compare(**geom, dtype=dtype, plan_edit=_gather_interleaved(dx_band=band))
    assert len(boxes) >= 2 and sum(boxes) >= 1, boxes   # dx's bands ran dw's boxes between them


@pytest.mark.parametrize("ci_outer", [False, True])
def test_two_c_in_tiles_and_c_in_outer_groups_are_exact(boxes, ci_outer):
    run_and_compare(**TWO_TILES, plan_edit=_gather_interleaved(ci_outer=ci_outer, dx_band=(1, 4)))
    assert sum(boxes) >= 1, boxes


def test_lnc2_is_exact(boxes):
    run_and_compare(**STRIDE1, lnc=2, plan_edit=_gather_interleaved(dx_band=(1, 6)))
    assert sum(boxes) >= 1, boxes


def test_not_offered_with_the_gathers_own_compositions():
    """dx^T runs its own loop: no interleaving there; the gather, with D-phase pairs or
    without, with an x-stationary ``xT dma`` dw is offered it."""
    p = plan_conv3d_bwd(*conv_shapes(**STRIDE2), stride=STRIDE2["stride"], padding=STRIDE2["padding"], dtype="bf16")
    alts = list(p.feasible_candidates())
    inter = [a for a in alts if a.dw_interleave]
    assert any(a.dx_dphase_pairs for a in inter) and any(a.dx_method is DxMethod.PHASE_GATHER and not a.dx_dphase_pairs
                                                        for a in inter)
    for a in inter:
        assert not (a.dx_transposed or a.dx_regions > 1) and a.dw_x_stationary, a.label
    for a in alts:
        if a.dx_transposed:
            assert not dw_interleave_ok(plan_geom(a), dataclasses.replace(a, dw_interleave=True)), a.label


def test_boxes_over_128_rows_interleave_by_their_row_chunks(monkeypatch, boxes):
    """A row-mode dw box of 4 x 40 = 160 output rows runs as its two row chunks (two boxes), each between
    dx's bands."""
    geom = {"batch": 1, "c_in": 6, "c_out": 5, "size": (4, 40, 4), "kernel": (3, 3, 3), "padding": (1,) * 6}
    added = spy(monkeypatch, nki_dw.DwState, "add_box", lambda self, b, od, oh, *a, **k: (b, od, oh))

    def edit(p):
        q = _gather_interleaved(dx_band=(1, 40))(p)
        assert q.dw_method is DwMethod.ROW_PACK, q.label
        return dataclasses.replace(q, dw_band=(4, 40))
    run_and_compare(**geom, grads=("dx", "dw"), plan_edit=edit)
    assert added == [(0, (0, 3), (0, 40)), (0, (3, 4), (0, 40))], added
    assert sum(boxes) >= 1, boxes


def test_dphase_pairs_with_dw_interleaved_is_exact(boxes):
    """D-phase pairs (both D stride phases on M) run dw's boxes between their bands too."""
    def edit(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_interleave and a.dx_dphase_pairs)
        assert alts, p.explain()
        return dataclasses.replace(alts[0], dx_band=(2, plan_geom(alts[0]).axes[1].n))
    run_and_compare(**STRIDE2, plan_edit=edit)
    assert len(boxes) >= 2 and sum(boxes) >= 1, boxes
