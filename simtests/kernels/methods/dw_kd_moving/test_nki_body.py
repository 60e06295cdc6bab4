"""kernels/methods/dw_kd_moving/nki_body.py: exact-mode runs against the float64 oracle under the method's
plan (bit equality), over the geometry features its index maps handle: D/H/W padding (symmetric,
causal), H/W stride, dilation, several chunks with a short last one, kw groups, per-plane x^T runs,
gradient subsets, both 2-byte dtypes."""
import pytest

from conv3d_bwd.kernels.spec.record import DwMethod

from .support import kd_plan, run_exact

CASES = {
    "unet-like": {"batch": 2, "c_in": 32, "c_out": 32, "size": (4, 8, 8), "kernel": (3, 3, 3), "padding": (1,) * 6},
    "chunks": {"batch": 2, "c_in": 8, "c_out": 8, "size": (5, 40, 6), "kernel": (3, 3, 3), "padding": (1,) * 6},
    "stride-hw": {"batch": 1, "c_in": 8, "c_out": 16, "size": (5, 9, 9), "kernel": (3, 3, 3), "stride": (1, 2, 2),
                  "padding": (1,) * 6},
    "dilation": {"batch": 1, "c_in": 8, "c_out": 16, "size": (6, 7, 8), "kernel": (3, 3, 3),
                 "dilation": (2, 2, 2), "padding": (2, 2, 2, 2, 2, 2)},
    "causal-d": {"batch": 1, "c_in": 16, "c_out": 8, "size": (5, 6, 6), "kernel": (3, 3, 3),
                 "padding": (2, 0, 1, 1, 1, 1)},
    "kw-groups": {"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 5, 6), "kernel": (2, 3, 3),
                  "padding": (1, 0, 1, 1, 0, 0)},
    "temporal": {"batch": 2, "c_in": 16, "c_out": 32, "size": (6, 5, 5), "kernel": (3, 1, 1),
                 "padding": (1, 1, 0, 0, 0, 0)},
}


@pytest.mark.parametrize("name", list(CASES))
def test_all_three_gradients_are_exact(name):
    res = run_exact(CASES[name])
    assert res.summary.instr_counts.get("nc_matmul", 0) > 0


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw")], ids=str)
def test_gradient_subsets_are_exact(grads):
    run_exact(CASES["causal-d"], grads=grads)


@pytest.mark.parametrize("name, grads", [("chunks", ("dx", "dw", "db")), ("kw-groups", ("dw",)),
                                         ("dilation", ("dw", "db"))])
def test_lnc2_is_exact(name, grads):
    run_exact(CASES[name], grads=grads, lnc=2)


# mixed features: asymmetric padding beyond half the reach, dilation on D with K_d 4, H stride with
# dilation, K_w 5 with W stride (geometries a seeded random draw over the class found, kept as cases)
MIXED = [
    ({"batch": 2, "c_in": 40, "c_out": 16, "size": (4, 10, 4), "kernel": (4, 3, 1), "dilation": (2, 2, 2),
      "padding": (1, 2, 1, 1, 1, 0)}, 2),
    ({"batch": 1, "c_in": 40, "c_out": 4, "size": (6, 14, 5), "kernel": (2, 1, 3), "stride": (1, 2, 1),
      "dilation": (1, 2, 2), "padding": (1, 2, 1, 2, 1, 0)}, 1),
    ({"batch": 1, "c_in": 8, "c_out": 32, "size": (7, 4, 4), "kernel": (3, 2, 5), "stride": (1, 1, 2),
      "dilation": (2, 1, 1), "padding": (0, 0, 1, 0, 0, 1)}, 1),
]


@pytest.mark.parametrize("geom, lnc", MIXED, ids=["dil-d-k4-lnc2", "stride-h-dil", "kw5-stride-w"])
def test_mixed_features_are_exact(geom, lnc):
    run_exact(geom, lnc=lnc)


def test_fp16_is_exact():
    run_exact(CASES["stride-hw"], dtype="fp16")


def test_the_plan_runs_dw_by_this_method():
    """The cases above really ran dw:kd_moving (not another dw method the planner preferred)."""
    plan = kd_plan(CASES["unet-like"])
    assert plan.dw_method is DwMethod.KD_MOVING and "dw:kd_moving" in plan.label
