"""kernels/nki_db.py: db folded on dx's bands by ScalarE activation accumulates (``Plan.pw_db_scalar``,
per gradient) is bit-exact against the float64 oracle, its bands split into activations of at most
``DB_SCALAR_CHUNK`` elements, and the VectorE reduce path is still the default."""
from dataclasses import replace

import pytest

from conv3d_bwd.kernels.spec.compose import DB_SCALAR_CHUNK
from conv3d_bwd.kernels.spec.record import DbMethod, DwMethod

from .methods.dw_kd_moving.support import kd_plan
from .support import geom_kw, run_and_compare

# (a band's owned rows of the second exceed DB_SCALAR_CHUNK elements: several activations per band)
SMALL = {"batch": 2, "c_in": 8, "c_out": 16, "size": (5, 7, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
WIDE = {"batch": 1, "c_in": 8, "c_out": 8, "size": (3, 40, 72), "kernel": (3, 3, 3), "padding": (1,) * 6}


def _run(geom, scalar, lnc=1):
    plan = kd_plan(geom, lnc=lnc)
    assert plan.dw_method is DwMethod.KD_MOVING and plan.db_method is DbMethod.FOLD
    forced = replace(plan, pw_db_scalar=scalar)
    return run_and_compare(geom["batch"], geom["c_in"], geom["c_out"], tuple(geom["size"]), tuple(geom["kernel"]),
                           **geom_kw(geom), lnc=lnc, plan_edit=lambda _p: forced)


@pytest.mark.parametrize("geom, lnc", [(SMALL, 1), (SMALL, 2), (WIDE, 1)], ids=["small", "small-lnc2", "wide"])
def test_scalar_db_on_dx_bands_is_exact(geom, lnc):
    res = _run(geom, True, lnc)
    acts = [i for i in res.trace if i.op == "activation"]
    assert acts and all(i.engine == "scalar" for i in acts)
    assert not [i for i in res.trace if i.op == "tensor_reduce"]
    # every dy element is summed once, in activations of at most DB_SCALAR_CHUNK elements
    reads = [max((a for a in i.accesses if not a.write), key=lambda a: a.free_elems) for i in acts]   # (not db's column)
    writes = [next(a for a in i.accesses if a.write and a.buffer == "sbuf" and a.partitions == geom["c_out"])
              for i in acts]
    assert max(a.free_elems for a in writes) <= DB_SCALAR_CHUNK
    if lnc == 1:
        d, h, w = geom["size"]   # (stride 1, same padding: dy has x's extent)
        assert sum(a.free_elems for a in reads) == geom["batch"] * d * h * w


def test_vector_db_on_dx_bands_is_exact():
    res = _run(SMALL, False)
    assert [i for i in res.trace if i.op == "tensor_reduce"]
    assert not [i for i in res.trace if i.op == "activation"]


def test_the_planner_offers_both_engines_with_kd_moving():
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    from .support import geom_shapes
    cands = plan_conv3d_bwd(*geom_shapes(SMALL), **geom_kw(SMALL)).feasible_candidates()
    kdm = [p for p in cands if p.dw_method is DwMethod.KD_MOVING and p.db_method is DbMethod.FOLD]
    assert {p.pw_db_scalar for p in kdm} == {False, True}
    assert any("db:fold[ScalarE]" in p.label for p in kdm)


def test_scalar_db_beside_toeplitz_quads_is_exact():
    """The nnU-Net encoder's composition on a small layer: dw:kd_moving, then dx:toeplitz with K quads (their
    band copies by DMA) and db summed by ScalarE on the same bands."""
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd
    from conv3d_bwd.kernels.spec.record import DxMethod

    from .support import geom_shapes
    geom = {"batch": 2, "c_in": 8, "c_out": 32, "size": (5, 7, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}
    cands = plan_conv3d_bwd(*geom_shapes(geom), **geom_kw(geom)).feasible_candidates()
    found = [p for p in cands if p.dw_method is DwMethod.KD_MOVING and p.dx_method is DxMethod.TOEPLITZ
             and p.dx_toeplitz_quad and p.pw_db_scalar]
    assert found, "no kd_moving + toeplitz quads + ScalarE db candidate"
    res = run_and_compare(geom["batch"], geom["c_in"], geom["c_out"], geom["size"], geom["kernel"],
                          **geom_kw(geom), plan_edit=lambda _p: found[0])
    assert [i for i in res.trace if i.op == "activation" and i.engine == "scalar"]
