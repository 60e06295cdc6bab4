"""Shared by the s2d_gemm tests: run the kernel under the method's plan and compare with the oracle."""
from __future__ import annotations

import numpy as np

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd, replace

from ...support import DTYPES, exact_inputs, oracle

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
    found = [p for p in plan.feasible_candidates() if p.s2d_group]
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
    outs = res.outputs if isinstance(res.outputs, tuple) else (res.outputs,)
    refs = oracle(dy, x, w, dtype, stride=geom["stride"], **flags)
    assert len(outs) == len(refs) == len(grads)
    for name, got, want in zip(grads, outs, refs):
        assert got.dtype == DTYPES[dtype] and got.shape == want.shape, name
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        assert not np.isnan(g64).any(), f"{name}: NaN (unwritten memory)"
        bad = np.argwhere(g64 != w64)
        assert bad.size == 0, (f"{name}: {len(bad)} elements differ, first at {tuple(bad[0])}: "
                               f"{g64[tuple(bad[0])]} != {w64[tuple(bad[0])]}")
        assert np.abs(w64).sum() > 0, f"{name}: the oracle is all zeros (the inputs test nothing)"
    return res
