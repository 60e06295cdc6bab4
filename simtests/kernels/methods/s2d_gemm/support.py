"""Shared by the s2d_gemm tests: run the kernel under the method's plan and compare with the oracle."""
from __future__ import annotations

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd, replace

from ...support import assert_bitwise_equal, exact_inputs, oracle

GRADS = ("dx", "dw", "db")


def tube(batch, c_in, c_out, out, kernel):
    """A geometry of the method's class: stride = kernel, no padding, input = out * kernel."""
    return {"batch": batch, "c_in": c_in, "c_out": c_out, "size": tuple(o * k for o, k in zip(out, kernel)),
            "kernel": tuple(kernel), "stride": tuple(kernel)}


def s2d_plan(geom, dtype="bf16", lnc=1, grads=GRADS, group=None):
    """The planner's s2d_gemm candidate for ``geom`` (with ``group`` row tiles per group if given)."""
    dy, x, w = _shapes(geom)
    flags = {f"compute_{g}": g in grads for g in GRADS}
    plan = plan_conv3d_bwd(dy, x, w, stride=geom["stride"], dtype=dtype, lnc=lnc, **flags)
    found = plan.feasible_candidates(where=lambda p: p.s2d_group)
    assert found, f"no feasible s2d_gemm candidate: {[c for c in plan.candidates if 's2d' in c.label]}"
    return replace(found[0], s2d_group=group) if group else found[0]


def _shapes(geom):
    o = tuple(n // k for n, k in zip(geom["size"], geom["kernel"]))
    return ((geom["batch"], geom["c_out"]) + o, (geom["batch"], geom["c_in"]) + tuple(geom["size"]),
            tuple(geom["kernel"]) + (geom["c_in"], geom["c_out"]))


def run_exact(geom, dtype="bf16", lnc=1, grads=GRADS, group=None, seed=0, plan=None):
    """Run conv3d_bwd under the s2d_gemm plan on exactly representable inputs; assert bit equality with
    the float64 oracle for every requested gradient. Returns the nkisim result."""
    plan = plan or s2d_plan(geom, dtype, lnc, grads, group)
    dy, x, w = exact_inputs(geom["batch"], geom["c_in"], geom["c_out"], geom["size"], geom["kernel"],
                            geom["stride"], dtype=dtype, seed=seed)
    flags = {f"compute_{g}": g in grads for g in GRADS}
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, dy, x, w, stride=geom["stride"], lnc=lnc, **flags)
    assert_bitwise_equal(grads, res, oracle(dy, x, w, dtype, stride=geom["stride"], **flags), dtype, nonzero=True)
    return res
