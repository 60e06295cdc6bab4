"""Compositions of independent options: dx inside dw (``dx_inside_dw``) with dw's dy^T
by DMA (``dw_dyt_dma``) and with db in dw's ones row (``db_ones``), bit-exact under forced plans."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.spec.compose import dx_inside_dw_on
from conv3d_bwd.kernels.spec.dw_options import db_ones_legal, dyt_dma_legal

from ..support import INSIDE_DW_GEOMS, inside_dw_edit, run_and_compare


def _with(**flags):
    """The dx-inside-dw pick of ``inside_dw_edit`` with ``flags`` forced on (each one legal for it)."""
    def pick(p):
        q = dataclasses.replace(inside_dw_edit()(p), **flags)
        g = validate(p.dy_shape, p.x_shape, p.w_shape, p.stride, p.padding, p.dilation, p.dtype)
        assert dx_inside_dw_on(g, q)
        assert not flags.get("dw_dyt_dma") or dyt_dma_legal(g, q)
        assert not flags.get("db_ones") or db_ones_legal(g, q)
        return q
    return pick


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("flags", [{"dw_dyt_dma": True}, {"db_ones": True}, {"dw_dyt_dma": True, "db_ones": True}],
                         ids=lambda f: "+".join(f))
def test_dx_inside_dw_with_dw_db_variants(flags, lnc, inside_runs):
    run_and_compare(**INSIDE_DW_GEOMS[0].values[0], lnc=lnc, plan_edit=_with(**flags))
    assert inside_runs, "dw never ran dx inside its last pass"
