"""dx phase gather with the two D stride phases on M (``Plan.dx_dphase_pairs``): bit-exact forced plans
over even and odd D (unequal phase extents: phases run alone), C_in 64 and < 64 (gap columns), two C_out
tiles, stride 2/3 and dilation on the other axes, a D phase no tap reaches, D and H bands, every gradient
subset with dx, both strategies, LNC2, bf16 / fp16 (filters by DMA transpose) and fp32 (PE-built W^T);
the group lists and the planner's legality."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.dx_dpairs import dpair_groups, dpair_matmuls
from conv3d_bwd.kernels.plan import DxMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import axis_bands

from .support import geom_shapes, run_and_compare


def _paired(strategy=None, edit=None):
    """Edit: the first feasible candidate with dx_dphase_pairs (of ``strategy``), edited."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dx_dphase_pairs
                                     and (strategy is None or a.strategy is strategy))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], **(edit or {}))
        assert q.dx_dphase_pairs and q.dx_method is DxMethod.PHASE_GATHER
        return q
    return pick


DOWN = {"batch": 2, "c_in": 64, "c_out": 128, "size": (8, 8, 6), "kernel": (3, 3, 3), "stride": (2, 2, 2),
        "padding": (1,) * 6}
ODD = {"batch": 1, "c_in": 40, "c_out": 140, "size": (7, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 3),
       "padding": (1, 0, 1, 1, 0, 2), "dilation": (1, 2, 1)}
K2 = {"batch": 2, "c_in": 17, "c_out": 9, "size": (6, 7, 5), "kernel": (2, 3, 3), "stride": (2, 2, 1),
      "padding": (0, 1, 1, 1, 1, 1)}
# kernel 1 along D with stride 2: D phase 1 has no tap (zeros)
HOLE = {"batch": 1, "c_in": 8, "c_out": 12, "size": (6, 4, 5), "kernel": (1, 3, 3), "stride": (2, 1, 1),
        "padding": (0, 0, 1, 1, 1, 1)}


@pytest.mark.parametrize("geom", [DOWN, ODD, K2, HOLE], ids=["down", "odd-d", "k2", "hole"])
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY], ids=["per-grad", "shared"])
def test_dphase_pairs_are_exact(geom, strategy):
    run_and_compare(**geom, plan_edit=_paired(strategy))


@pytest.mark.parametrize("band", [(3, 8), (2, 3), (1, 8)])
def test_dphase_pairs_in_bands_are_exact(band):
    run_and_compare(**DOWN, plan_edit=_paired(Strategy.PER_GRADIENT, edit={"dx_band": band}))


@pytest.mark.parametrize("grads", [("dx",), ("dx", "db"), ("dx", "dw")])
def test_dphase_pairs_gradient_subsets_are_exact(grads):
    run_and_compare(**ODD, grads=grads, plan_edit=_paired())


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_dphase_pairs_dtypes_are_exact(dtype):
    run_and_compare(**K2, dtype=dtype, plan_edit=_paired())


def test_dphase_pairs_lnc2_is_exact():
    run_and_compare(**dict(DOWN, batch=3), lnc=2, plan_edit=_paired())


def test_dphase_groups_pair_the_d_windows():
    """k3 pad 1 stride 2: the two D phases share the dy window of their centre taps: 18 matmuls of
    27 taps per block; odd D (unequal phase extents) runs each phase alone."""
    g = plan_conv3d_bwd(*geom_shapes(DOWN), stride=DOWN["stride"], padding=DOWN["padding"]).geometry()
    bands = tuple(axis_bands(g.axes[a], (8, 8, 6)[a])[0] for a in range(3))
    groups = dpair_groups(g, bands)
    assert len(groups) == 4 and all(gr.alone < 0 for gr in groups)
    assert sum(len(gr.steps) for gr in groups) == 18
    assert sorted(t for gr in groups for a, b, _w in gr.steps for t in (a, b) if t is not None) == list(range(27))
    assert dpair_matmuls(g, bands) == 18
    odd = dict(ODD, dilation=(1, 1, 1))   # geom_shapes has no dilation
    g = plan_conv3d_bwd(*geom_shapes(odd), stride=odd["stride"], padding=odd["padding"]).geometry()
    bands = tuple(axis_bands(g.axes[a], (7, 5, 6)[a])[0] for a in range(3))
    assert all(gr.alone >= 0 for gr in dpair_groups(g, bands))


def test_dphase_pairs_are_offered_only_where_they_run():
    for geom, ok in ((DOWN, True), (dict(DOWN, stride=(1, 2, 2)), False), (dict(DOWN, c_in=65), False)):
        plan = plan_conv3d_bwd(*geom_shapes(geom), stride=geom["stride"], padding=geom["padding"])
        assert bool(plan.feasible_candidates(where=lambda a: a.dx_dphase_pairs)) is ok
