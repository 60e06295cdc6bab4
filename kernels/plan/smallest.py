"""The smallest tiling of a problem: the per-partition working set below which no plan can go.

Per gradient, one-row bands over D and H, one W column per band (W bands), gather dx with C_in tiles of
one channel loaded one at a time, one C_out tile at a time (C_out chunks) and its dy bands holding only the
rows live taps read (clipped), box-mode dw with one tap per matmul, one tap and one C_out tile per pass
(C_out passes), the smallest C_in range the planner offers, db in its own pass. When even this does not fit
SBUF the geometry has no plan on the target, and the no-plan message names the buffer that does not fit
and by how much; when it fits, the planner must find a plan (the random sweep counts a missing one as a
failure).
"""
from __future__ import annotations

from ..geometry import ConvGeom
from ..schedule import PMAX, n_tiles
from ..spec.record import DbMethod, DwMethod, Plan, Strategy
from .budget import _budget
from .problem import _dx_method


def smallest_plan(g: ConvGeom, base: dict) -> Plan:
    """The plan of the smallest tiling of the problem ``base`` (``problem._base``), not checked."""
    cdx, cdw, cdb = base["compute_dx"], base["compute_dw"], base["compute_db"]
    dw_ci = min(PMAX, g.c_in)
    return Plan(**base, strategy=Strategy.PER_GRADIENT, dx_method=_dx_method(g) if cdx else None,
                dw_method=(DwMethod.GEMM if g.pointwise else DwMethod.TAP_GEMM) if cdw else None,
                db_method=DbMethod.STANDALONE if cdb else None, dx_band=(1, 1), dw_band=(1, 1),
                dx_ci_tile=1, dx_ci_outer=True, dw_ci_tile=dw_ci, dw_tap_group=1, dw_co_chunk=1,
                dw_ci_range=dw_ci, dy_bufs=2, dw_tap_range=1 if g.taps > 1 else 0,
                dx_w_band=1 if cdx and g.axes[2].n > 1 else 0, dw_w_band=1 if cdw and g.axes[2].o > 1 else 0,
                dx_co_chunk=1 if cdx and n_tiles(g.c_out, PMAX) > 1 else 0,
                dw_co_pass=1 if cdw and n_tiles(g.c_out, PMAX) > 1 else 0, dx_dy_clip=cdx)


def smallest_working_set(g: ConvGeom, base: dict) -> tuple[int, tuple[str, int]]:
    """(SBUF bytes per partition, its largest buffer (name, bytes)) of the smallest tiling."""
    b = _budget(g, smallest_plan(g, base))
    return b.sbuf, max(b.parts, key=lambda kv: kv[1]) if b.parts else ("?", 0)
