"""The work items of dx and dw, and how the LNC programs share a list of items."""
from __future__ import annotations

from ..geometry import ConvGeom, ceil_div
from ..schedule import AxisBand, axis_bands
from .record import Plan, Strategy


def db_chunk(g: ConvGeom) -> int:
    """dy positions per transfer of the standalone db pass (8 KiB per partition, two buffers)."""
    return 8192 // g.dtype_bytes


def _split(items: list, lnc: int, pid: int) -> list:
    """The contiguous share of ``items`` that program ``pid`` of ``lnc`` runs (the kernel's split)."""
    per = ceil_div(len(items), lnc)
    return items[pid * per:(pid + 1) * per]


def dx_items(g: ConvGeom, p: Plan) -> list[tuple[int, AxisBand, AxisBand]]:
    bd = axis_bands(g.axes[0], p.dx_band[0])
    bh = axis_bands(g.axes[1], p.dx_band[1])
    return [(b, d, h) for b in range(g.batch) for d in bd for h in bh]


def dw_items(g: ConvGeom, p: Plan) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """(batch, (od0, od1), (oh0, oh1)) output boxes that dw (and a folded db) reduce over."""
    if p.strategy is Strategy.SHARED_DY:
        return [(b, (d.own0, d.own1), (h.own0, h.own1)) for b, d, h in dx_items(g, p)]
    od, oh = g.axes[0].o, g.axes[1].o
    return [(b, (d0, min(od, d0 + p.dw_band[0])), (h0, min(oh, h0 + p.dw_band[1])))
            for b in range(g.batch) for d0 in range(0, od, p.dw_band[0]) for h0 in range(0, oh, p.dw_band[1])]
