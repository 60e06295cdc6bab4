"""Helpers the planner's tests share: a case's problem, its exhaustive plan (every candidate estimated)."""
from __future__ import annotations

from functools import lru_cache

from conv3d_bwd.kernels.geometry import ConvGeom, validate
from conv3d_bwd.kernels.plan.problem import _base
from conv3d_bwd.kernels.plan.search import _plan
from conv3d_bwd.kernels.spec.record import Plan
from conv3d_bwd.verify.cases import Case


def case_problem(case: Case, target: str = "trn2", lnc: int | None = None) -> tuple[ConvGeom, dict]:
    """The validated geometry and the planner's problem record of ``case`` (``lnc``: else the case's)."""
    grads = {f"compute_{n}": n in case.grads for n in ("dx", "dw", "db")}
    g = validate(case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding, case.dilation, case.dtype,
                 **grads)
    base = _base(g, case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding, case.dilation, target,
                 lnc or case.lnc, grads["compute_dx"], grads["compute_dw"], grads["compute_db"])
    return g, base


def case_kwargs(case: Case, target: str = "trn2", lnc: int | None = None) -> dict:
    """``plan_conv3d_bwd``'s arguments for ``case``."""
    return {"dy_shape": case.dy_shape, "x_shape": case.x_shape, "w_shape": case.w_shape, "stride": case.stride,
            "padding": case.padding, "dilation": case.dilation, "dtype": case.dtype, "target": target,
            "lnc": lnc or case.lnc, **{f"compute_{n}": n in case.grads for n in ("dx", "dw", "db")}}


@lru_cache(maxsize=64)
def exhaustive_plan(case: Case, target: str = "trn2", lnc: int | None = None) -> Plan | None:
    """The pick of a search that estimates every feasible candidate (None when nothing fits)."""
    g, base = case_problem(case, target, lnc)
    try:
        return _plan(g, base, prune=False)
    except ValueError:
        return None
