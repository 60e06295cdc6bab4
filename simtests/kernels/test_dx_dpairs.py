"""dx phase gather with the two D stride phases on M (``Plan.dx_dphase_pairs``): bit-exact forced plans
over even and odd D (unequal phase extents: phases run alone), C_in 64 and < 64 (gap columns), two C_out
tiles, stride 2/3 and dilation on the other axes, a D phase no tap reaches, D and H bands, every gradient
subset with dx, both strategies, LNC2, bf16 / fp16 (filters by DMA transpose) and fp32 (PE-built W^T);
the group lists, the filter slots filled by runs of taps (``dx_dpairs.slot_runs``) and the planner's
legality."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.dx_dpairs import (
    dpair_groups,
    dpair_matmuls,
    dpair_slot_count,
    dpair_slot_map,
    dpair_slots,
    slot_runs,
)
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DxMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import axis_bands

from .support import conv_shapes, geom_shapes, run_and_compare


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


def test_dpair_filter_slots_fill_by_runs():
    """down_s2's 18 D-phase-pairs slots: side 0 holds taps 18..26 then 0..8, side 1 taps 9..17, so three
    3-D transposes fill every tap (27 before); every (slot, side) with a tap is covered once."""
    kw = {"stride": (2, 2, 2), "padding": (1,) * 6}
    plan = plan_conv3d_bwd(*conv_shapes(2, 64, 128, (8, 32, 32), (3, 3, 3), **kw), **kw, dtype="bf16", lnc=2)
    g = plan.geometry()
    slots = dpair_slot_map(g, plan)
    assert sorted(slots.values()) == list(range(len(slots)))
    runs = {side: slot_runs(slots, side) for side in (0, 1)}
    assert runs[0] == [(0, 18, 1, 9), (9, 0, 1, 9)] and runs[1] == [(0, 9, 1, 9)]
    for side in (0, 1):
        covered = {(s0 + i, t0 + i * step) for s0, t0, step, n in runs[side] for i in range(n)}
        assert covered == {(s, ab[side]) for ab, s in slots.items() if ab[side] is not None}


def test_slot_runs_uneven_steps():
    slots = {(5, None): 0, (7, None): 1, (9, None): 2, (10, 1): 3, (None, 4): 4}
    assert slot_runs(slots, 0) == [(0, 5, 2, 3), (3, 10, 1, 1)]
    assert slot_runs(slots, 1) == [(3, 1, 3, 2)]   # taps 1 and 4 in consecutive slots: step 3
    assert slot_runs({(3, 1): 0, (2, 2): 1}, 0) == [(0, 3, 1, 1), (1, 2, 1, 1)]   # a falling tap: a new run


@pytest.mark.parametrize("kernel, stride, dilation, size, padding", [
    ((3, 3, 3), (2, 2, 2), (1, 1, 1), (8, 11, 9), (1, 1, 1, 1, 1, 1)),
    ((2, 4, 3), (2, 4, 3), (1, 1, 1), (6, 12, 9), (0, 0, 0, 0, 0, 0)),   # stride = kernel (a tubelet)
    ((3, 2, 3), (2, 3, 1), (2, 1, 2), (9, 10, 7), (2, 0, 1, 2, 0, 1)),
])
def test_slot_count_is_the_slots_of_every_band(kernel, stride, dilation, size, padding):
    """``dpair_slot_count`` (one D band per set of reached H phases) counts what ``dpair_slots`` numbers over
    every band, for D and H bands of every size."""
    out = [(size[a] + padding[2 * a] + padding[2 * a + 1] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
           for a in range(3)]
    g = validate((1, 4, *out), (1, 3, *size), (*kernel, 3, 4), stride, padding, dilation, "bf16")
    w_band = axis_bands(g.axes[2], g.axes[2].n)[0]
    for rows_d in range(1, size[0] + 1):
        for rows_h in range(1, size[1] + 1):
            bands = [(bd, bh, w_band) for bd in axis_bands(g.axes[0], rows_d) for bh in axis_bands(g.axes[1], rows_h)]
            assert dpair_slot_count(g, bands) == len(dpair_slots(g, bands)), (rows_d, rows_h)
