"""LNC2 D-phase pairs: the dx items go to the programs band-major, so each program's half alternates
batches (a band's half-plane stores are ordered after the same batch's earlier stores). Bit-exact with
several bands per batch and odd item counts, and every item runs exactly once."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dx_options import dx_program_items
from conv3d_bwd.kernels.spec.items import dx_items

from .support import conv_shapes, run_and_compare


def _paired_band(band):
    """Edit: the best-estimated D-phase-pairs candidate with the dx band forced to ``band``."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dx_dphase_pairs)
        assert alts, p.explain()
        return dataclasses.replace(min(alts, key=lambda a: a.estimated_us), dx_band=band)
    return pick


@pytest.mark.parametrize("batch, band", [(3, (2, 8)), (2, (4, 3)), (1, (2, 8))], ids=["b3-d2", "b2-h3", "b1-d2"])
def test_dphase_pairs_lnc2_band_major_items_are_exact(batch, band):
    geom = {"batch": batch, "c_in": 12, "c_out": 10, "size": (7, 8, 6), "kernel": (3, 3, 3), "stride": (2, 2, 2),
            "padding": (1,) * 6}
    run_and_compare(**geom, lnc=2, plan_edit=_paired_band(band))


def test_dphase_pairs_lnc2_items_alternate_batches():
    kw = {"stride": (2, 2, 2), "padding": (1,) * 6}
    shapes = conv_shapes(2, 64, 128, (8, 32, 32), (3, 3, 3), **kw)
    g = validate(*shapes, **kw)
    plan = plan_conv3d_bwd(*shapes, **kw, lnc=2)
    alts = plan.feasible_candidates(where=lambda a: a.dx_dphase_pairs and a.dx_band[0] == 4)
    assert alts
    a = alts[0]
    mine = [dx_program_items(g, a, pid) for pid in (0, 1)]
    assert sorted(mine[0] + mine[1], key=str) == sorted(dx_items(g, a), key=str)   # each item once
    for items in mine:   # two D bands of two batches: each program holds one band of each batch
        assert [b for b, _bd, _bh in items] == [0, 1]


ONE_STORE = [   # C_in 64: each band plane stores with one 128-partition DMA (phase 1 one D row after / before)
    pytest.param({"batch": 1, "c_in": 64, "c_out": 20, "size": (8, 6, 5), "kernel": (3, 3, 3), "stride": (2, 2, 1),
                  "padding": (0, 1, 1, 1, 1, 1)}, 1, id="phase1-after"),
    pytest.param({"batch": 2, "c_in": 64, "c_out": 20, "size": (8, 6, 5), "kernel": (3, 3, 3), "stride": (2, 1, 2),
                  "padding": (1, 1, 1, 0, 1, 1)}, -1, id="phase1-before"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 20, "size": (7, 6, 5), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1,) * 6}, 0, id="odd-D-two-stores"),
]


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("geom, delta", ONE_STORE)
def test_dphase_pairs_one_store_is_exact(geom, delta, lnc):
    from conv3d_bwd.kernels.dx_dpairs import band_halves, one_store
    from conv3d_bwd.kernels.schedule import axis_bands
    kw = {k: geom[k] for k in ("stride", "padding") if k in geom}
    shapes = conv_shapes(geom["batch"], geom["c_in"], geom["c_out"], geom["size"], geom["kernel"], **kw)
    g = validate(*shapes, **kw)
    plan = plan_conv3d_bwd(*shapes, **kw, lnc=lnc)
    a = min((a for a in plan.feasible_candidates() if a.dx_dphase_pairs), key=lambda a: a.estimated_us)
    wb = axis_bands(g.axes[2], g.axes[2].n)[0]
    halves = [band_halves(g, (bd, bh, wb)) for _b, bd, bh in dx_items(g, a)]
    if delta:
        assert all(one_store(g, h) and h[1][0] - h[0][0] == delta for h in halves)
    else:
        assert not all(one_store(g, h) for h in halves)
    run_and_compare(**geom, lnc=lnc, plan_edit=lambda p: a)
