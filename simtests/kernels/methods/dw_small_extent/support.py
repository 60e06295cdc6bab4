"""Shared by the dw_small_extent tests: run the kernel under the method's plan and compare with the oracle."""
from __future__ import annotations

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.record import DbMethod, DwMethod

from ...support import assert_bitwise_equal, exact_inputs, geom_kw, geom_shapes, oracle

GRADS = ("dx", "dw", "db")


def small(batch, c_in, c_out, size, kernel=(3, 3, 3), padding=(1,) * 6, stride=(1, 1, 1), dilation=(1, 1, 1)):
    """A geometry dict (few positions: the method's class when its tiles are few)."""
    return {"batch": batch, "c_in": c_in, "c_out": c_out, "size": tuple(size), "kernel": tuple(kernel),
            "padding": tuple(padding), "stride": tuple(stride), "dilation": tuple(dilation)}


def small_plan(geom, dtype="bf16", lnc=1, grads=GRADS, db=None, target="trn2"):
    """The planner's cheapest dw:small_extent candidate for ``geom`` (with db ``db`` if given)."""
    dy, x, w = geom_shapes(geom)
    flags = {f"compute_{g}": g in grads for g in GRADS}
    plan = plan_conv3d_bwd(dy, x, w, **geom_kw(geom), dtype=dtype, target=target, lnc=lnc, **flags)
    found = plan.feasible_candidates(where=lambda p: p.dw_method is DwMethod.SMALL_EXTENT
                                     and (db is None or p.db_method is db))
    assert found, f"no feasible dw:small_extent candidate: {[c for c in plan.candidates if 'small' in c.label]}"
    return found[0]


def run_exact(geom, dtype="bf16", lnc=1, grads=GRADS, seed=0, plan=None, db: DbMethod | None = None,
              target="trn2"):
    """Run conv3d_bwd under the dw:small_extent plan on exactly representable inputs; assert bit equality
    with the float64 oracle for every requested gradient. Returns the nkisim result."""
    plan = plan or small_plan(geom, dtype, lnc, grads, db, target)
    kw = geom_kw(geom)
    dy, x, w = exact_inputs(geom["batch"], geom["c_in"], geom["c_out"], geom["size"], geom["kernel"],
                            dtype=dtype, seed=seed, **kw)
    flags = {f"compute_{g}": g in grads for g in GRADS}
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, dy, x, w, lnc=lnc, target=target, **kw, **flags)
    assert_bitwise_equal(grads, res, oracle(dy, x, w, dtype, **kw, **flags), dtype, nonzero=True)
    return res
