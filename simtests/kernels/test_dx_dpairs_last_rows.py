"""D-phase pairs: a program's last band whose plane stores with one DMA runs its D rows one by one and
stores each as soon as its blocks are evicted (``dx_dpairs.dpair_last_by_rows``): the dx tail moves one
row. Bit-exact under nkisim (forced plans, LNC1 and LNC2, bands of 1 to 4 D rows per phase, shared dy)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.dx_dpairs import band_halves, dpair_last_by_rows
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import axis_bands
from conv3d_bwd.kernels.spec.dx_options import dx_program_items

from .support import conv_shapes, run_and_compare

GEOM = {"batch": 2, "c_in": 64, "c_out": 20, "size": (8, 6, 5), "kernel": (3, 3, 3), "stride": (2, 2, 2),
        "padding": (1,) * 6}


def _last_rows(g, a, pid):
    items = dx_program_items(g, a, pid)
    if not items:
        return 0
    _b, bd, bh = items[-1]
    h = band_halves(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]))
    return h[0][1] if dpair_last_by_rows(g, h) else 0


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("band_d, rows", [(2, 0), (4, 2), (8, 4)])
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY])
def test_dphase_pairs_last_band_by_rows_is_exact(lnc, band_d, rows, strategy):
    kw = {k: GEOM[k] for k in ("stride", "padding")}
    shapes = conv_shapes(GEOM["batch"], GEOM["c_in"], GEOM["c_out"], GEOM["size"], GEOM["kernel"], **kw)
    g = validate(*shapes, **kw)
    plan = plan_conv3d_bwd(*shapes, **kw, lnc=lnc)
    alts = plan.feasible_candidates(where=lambda a: a.dx_dphase_pairs and a.strategy is strategy)
    assert alts, plan.explain()
    a = dataclasses.replace(min(alts, key=lambda a: a.estimated_us), dx_band=(band_d, alts[0].dx_band[1]))
    # one D row per phase: one store as before; 2 or 4: the last band's rows one by one
    assert {_last_rows(g, a, pid) for pid in range(lnc)} == {rows}
    run_and_compare(**GEOM, lnc=lnc, plan_edit=lambda p: a)


def test_dphase_pairs_last_rows_gradient_subsets():
    for grads, dtype in ((("dx",), "bf16"), (("dx", "db"), "fp16"), (("dx", "dw", "db"), "fp16")):
        def edit(p):
            alts = p.feasible_candidates(where=lambda a: a.dx_dphase_pairs)
            assert alts, p.explain()
            return dataclasses.replace(min(alts, key=lambda a: a.estimated_us), dx_band=(4, alts[0].dx_band[1]))
        run_and_compare(**GEOM, lnc=2, grads=grads, dtype=dtype, plan_edit=edit)
