"""kernels/methods/dw_kd_moving/estimate.py and its planner entries: refusals with their rule, the charging
of the work list, and where the planner offers the method."""
import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.methods.dw_kd_moving import estimate, spec
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.spec.record import DwMethod

from ...support import geom_shapes

HW = TARGET_FIGURES["trn2"]
SMALL = {"batch": 1, "c_in": 32, "c_out": 32, "size": (4, 8, 8), "kernel": (3, 3, 3), "padding": (1,) * 6}


def _g(dtype="bf16", **kw):
    geom = SMALL | kw
    return validate(*geom_shapes(geom), (1, 1, 1), geom["padding"], (1, 1, 1), dtype)


def test_a_problem_outside_the_class_is_refused_with_its_rule():
    why = estimate.check(_g("fp32"), 1, "trn2", HW)[0]
    assert why.startswith("dw:kd_moving: ") and "2-byte dtype" in why


def test_the_sheet_charges_every_listed_instruction():
    """TensorE busy time is the work list's matmuls at max(min(64, M), N) cycles plus the issue overhead,
    DMA transposes at whole [128 x 16] blocks, and the counts are the list's."""
    g = _g()
    work = spec.work_list(g)
    sheet = estimate.sheet(g, HW)
    cycles = sum(w.count * (max(min(64, w.dims[1]), w.dims[2]) + HW.matmul_issue_cycles)
                 for w in work if w.engine == "tensor")
    assert abs(sheet.busy["tensor"] - cycles / HW.tensor_ghz) < 1e-6
    blocks = sum(w.count * -(-w.dims[0] // 128) * w.dims[1] * -(-w.dims[2] // 16)
                 for w in work if w.op == "dma_transpose")
    assert sheet.busy["dma"] >= blocks * 128 * 16 * 2 / (HW.dma_bytes_per_ns * HW.dma_transpose_efficiency)
    listed = {}
    for w in work:
        listed[w.op] = listed.get(w.op, 0) + w.count
    assert {k: v for k, v in sheet.counts.items() if k != "tensor_copy"} == \
        {k: v for k, v in listed.items() if k != "tensor_copy"}


def test_lnc2_splits_the_matmuls_and_the_stores():
    g = validate(*geom_shapes(SMALL | {"size": (8, 64, 8)}), (1, 1, 1), SMALL["padding"], (1, 1, 1), "bf16")
    one = estimate.estimate_us(g, HW, 1)[0]
    two = estimate.estimate_us(g, HW, 2)[0]
    assert 0 < two < one
    assert spec.n_matmuls(g, 2, 0) + spec.n_matmuls(g, 2, 1) == spec.n_matmuls(g)
    assert sorted(spec.owned(g, 2, 0) + spec.owned(g, 2, 1)) == list(range(spec.accumulators(g)))


def test_a_matmul_moves_kd_times_c_out_columns():
    (mm,) = [w for w in spec.work_list(_g()) if w.op == "nc_matmul"]
    assert mm.dims == (4 * 8, 3 * 32, 3 * 32)   # K: all 4 planes of 8 rows; M: 3 kw x 32; N: 3 kd x 32


@pytest.mark.parametrize("target, dtype", [("trn1", "bf16"), ("trn2", "fp32")])
def test_the_planner_offers_it_only_in_its_class(target, dtype):
    plan = plan_conv3d_bwd(*geom_shapes(SMALL), padding=SMALL["padding"], target=target, dtype=dtype)
    assert not [c for c in plan.candidates if "kd_moving" in c.label]


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw", "db")], ids=str)
def test_the_planner_pairs_it_with_the_other_gradients(grads):
    flags = {f"compute_{n}": n in grads for n in ("dx", "dw", "db")}
    plan = plan_conv3d_bwd(*geom_shapes(SMALL), padding=SMALL["padding"], **flags)
    mine = plan.feasible_candidates(where=lambda p: p.dw_method is DwMethod.KD_MOVING)
    assert mine and all("dw:kd_moving" in p.label for p in mine)
    assert all((p.dx_method is not None) == ("dx" in grads) and (p.db_method is not None) == ("db" in grads)
               for p in mine)
    dw_alone = estimate.estimate_us(_g(), HW)[0]
    assert all(p.estimated_us >= dw_alone for p in mine)
