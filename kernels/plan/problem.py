"""The problem record a plan starts from, and the gather dx method a geometry takes."""
from __future__ import annotations

from ..geometry import ConvGeom
from ..spec.record import DxMethod


def _dx_method(g: ConvGeom) -> DxMethod:
    """The gather family's name for the geometry (dx:toeplitz variants are added beside it)."""
    if g.pointwise:
        return DxMethod.GEMM
    if all(a.s == 1 for a in g.axes):
        return DxMethod.GATHER_S1
    return DxMethod.PHASE_GATHER


gather_dx_method = _dx_method


def _base(g: ConvGeom, dy_shape, x_shape, w_shape, stride, padding, dilation, target, lnc,
          cdx, cdw, cdb) -> dict:
    return {"dy_shape": tuple(dy_shape), "x_shape": tuple(x_shape), "w_shape": tuple(w_shape),
                "stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation), "dtype": g.dtype,
                "target": target, "lnc": lnc, "compute_dx": cdx, "compute_dw": cdw, "compute_db": cdb}
