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
    def ints(v):   # (plain ints: the arguments may be numpy integers or arrays, and plans go to JSON)
        return tuple(int(e) for e in v)
    return {"dy_shape": ints(dy_shape), "x_shape": ints(x_shape), "w_shape": ints(w_shape),
                "stride": ints(stride), "padding": ints(padding), "dilation": ints(dilation), "dtype": g.dtype,
                "target": target, "lnc": lnc, "compute_dx": cdx, "compute_dw": cdw, "compute_db": cdb}
