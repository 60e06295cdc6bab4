"""kernels/methods/s2d_gemm/estimate.py: the budget check's reasons and the charging of the work list."""
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.methods.s2d_gemm import estimate, spec

HW = TARGET_FIGURES["trn2"]
ALL = (True, True, True)


def _tube(batch, c_in, c_out, out, kernel, dtype="bf16"):
    size = tuple(o * k for o, k in zip(out, kernel))
    return validate((batch, c_out) + tuple(out), (batch, c_in) + size, tuple(kernel) + (c_in, c_out), kernel,
                    (0,) * 6, (1, 1, 1), dtype)


def test_a_geometry_outside_the_class_is_refused_with_its_rule():
    g = validate((1, 8, 2, 2, 3), (1, 3, 4, 4, 4), (2, 2, 2, 3, 8), (2, 2, 2), (0, 0, 0, 0, 1, 1), (1, 1, 1), "bf16")
    assert estimate.check(g, spec.S2dOptions(1), 1, ALL, HW)[0] == "s2d_gemm: padding (1, 1) on W must be 0"


def test_pools_over_the_sbuf_are_named():
    """x lines of 64 planes x 16 x 1024 bf16 (2 MiB per row) cannot be resident."""
    g = _tube(1, 64, 8, (1, 1, 64), (1, 16, 16))
    why, sbuf, psum, parts = estimate.check(g, spec.S2dOptions(1), 1, ALL, HW)
    assert "SBUF" in why and "x lines" in why and sbuf == sum(parts.values()) > HW.sbuf_usable and psum == 8


def test_the_planner_reports_the_refusal():
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    plan = plan_conv3d_bwd((1, 8, 1, 1, 64), (1, 64, 1, 16, 1024), (1, 16, 16, 64, 8), stride=(1, 16, 16))
    (rec,) = [c for c in plan.candidates if c.label.startswith("s2d_gemm")]
    assert not rec.feasible and "x lines" in rec.reason


def test_the_sheet_charges_every_listed_instruction():
    """TensorE busy time is the work list's matmuls and transposes at max(min(64, M), N) cycles each (x4
    in fp32) plus the issue overhead per instruction, and the instruction counts are the list's."""
    for dtype, passes in (("bf16", 1), ("fp32", 4)):
        g = _tube(2, 3, 200, (2, 3, 5), (2, 4, 4), dtype)
        work = spec.work_list(g, spec.S2dOptions(1), 1, 0, *ALL)
        sheet = estimate.program_sheet(g, spec.S2dOptions(1), 1, 0, ALL, HW)
        cycles = sum(w.count * (max(min(64, w.dims[1]), w.dims[2]) * passes + HW.matmul_issue_cycles)
                     for w in work if w.engine == "tensor")
        assert abs(sheet.busy["tensor"] - cycles / HW.tensor_ghz) < 1e-6
        listed = {}
        for w in work:
            listed[w.op] = listed.get(w.op, 0) + w.count
        # (CostSheet.evict counts each half of an odd split rounded down: tensor_copy counts are approximate)
        assert {k: v for k, v in sheet.counts.items() if k != "tensor_copy"} == \
            {k: v for k, v in listed.items() if k != "tensor_copy"}


def test_the_estimate_is_the_slower_program():
    g = _tube(1, 3, 64, (2, 4, 4), (2, 4, 4))
    one = estimate.estimate_us(g, spec.S2dOptions(1), 1, ALL, HW)[0]
    two = estimate.estimate_us(g, spec.S2dOptions(1), 2, ALL, HW)[0]
    assert 0 < two < one   # half the planes per program
