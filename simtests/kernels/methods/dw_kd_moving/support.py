"""Shared by the dw_kd_moving tests: the method's candidate for a geometry, and exact runs against the oracle."""
from __future__ import annotations

from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.spec.record import DwMethod

from ...support import GRADS, geom_kw, geom_shapes, run_and_compare


def kd_plan(geom, dtype="bf16", grads=GRADS, lnc=1):
    """The planner's cheapest feasible dw:kd_moving candidate for ``geom`` (the method must be offered)."""
    flags = {f"compute_{g}": g in grads for g in GRADS}
    plan = plan_conv3d_bwd(*geom_shapes(geom), dtype=dtype, lnc=lnc, **geom_kw(geom), **flags)
    found = plan.feasible_candidates(where=lambda p: p.dw_method is DwMethod.KD_MOVING)
    assert found, f"no feasible dw:kd_moving candidate: {[c for c in plan.candidates if 'kd_moving' in c.label]}"
    return min(found, key=lambda p: p.estimated_us)


def run_exact(geom, dtype="bf16", grads=GRADS, seed=0, lnc=1):
    """Run conv3d_bwd under the method's plan on exactly representable inputs; bit equality with the
    float64 oracle for every requested gradient. Returns the nkisim result."""
    plan = kd_plan(geom, dtype, grads, lnc)
    return run_and_compare(geom["batch"], geom["c_in"], geom["c_out"], tuple(geom["size"]), tuple(geom["kernel"]),
                           **geom_kw(geom), dtype=dtype, grads=grads, plan_edit=lambda _p: plan, seed=seed, lnc=lnc)
