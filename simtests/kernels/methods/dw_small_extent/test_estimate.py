"""kernels/methods/dw_small_extent/estimate.py and the method's registration with the planner."""
import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.methods.dw_small_extent import estimate, spec
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.spec.record import DwMethod

from ...support import geom_kw, geom_shapes
from .support import run_exact, small, small_plan

# R3D-18 layer4 and the nnU-Net bottleneck: few positions (two tiles, one tile) and wide channels
R3D18_LAYER4 = small(2, 512, 512, (2, 7, 7))
NNUNET_BOTTLE = small(2, 320, 320, (4, 4, 4))


@pytest.mark.parametrize("gd", [R3D18_LAYER4, NNUNET_BOTTLE], ids=["r3d18_layer4", "nnunet_bottle"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_the_planner_offers_it_for_few_positions_with_wide_channels(gd, lnc):
    dy, x, w = geom_shapes(gd)
    plan = plan_conv3d_bwd(dy, x, w, **geom_kw(gd), dtype="bf16", lnc=lnc)
    small_ones = plan.feasible_candidates(where=lambda p: p.dw_method is DwMethod.SMALL_EXTENT)
    assert small_ones and all("dw:small_extent" in p.label for p in small_ones)
    # the streaming methods accumulate each sample's boxes separately: here they cost more
    others = plan.feasible_candidates(where=lambda p: p.dw_method is not DwMethod.SMALL_EXTENT)
    assert min(p.estimated_us for p in small_ones) < min(p.estimated_us for p in others)


def test_outside_the_class_it_is_not_offered():
    gd = small(2, 16, 16, (16, 16, 16))   # 64 position tiles
    dy, x, w = geom_shapes(gd)
    plan = plan_conv3d_bwd(dy, x, w, **geom_kw(gd), dtype="bf16")
    assert not any("small_extent" in c.label for c in plan.candidates)


def test_the_check_names_the_rule():
    g = small_plan(small(2, 8, 16, (2, 3, 4))).geometry()
    hw = TARGET_FIGURES["trn2"]
    assert estimate.check(g, 1, True, hw, 5)[0] == ""
    why = estimate.check(g, 1, True, hw, 4)[0]
    assert why == "dw:small_extent: PSUM 5 banks exceed the 4 free"


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_sheet_charges_the_traced_engine_time(dtype):
    """The work list charged with the planner's figures gives the PE time nkisim schedules for the body
    (identical formulas), and VectorE + ScalarE within 10 % (the trace alternates its evictions one by
    one, the sheet splits each kind half and half)."""
    gd = small(2, 64, 96, (2, 3, 4))
    plan = small_plan(gd, dtype=dtype, grads=("dw", "db"))
    res = run_exact(gd, dtype=dtype, grads=("dw", "db"), plan=plan)
    sheet = estimate.program_sheet(plan.geometry(), 1, 0, True, TARGET_FIGURES["trn2"])
    traced = res.summary.engine_busy_us
    assert sheet.busy["tensor"] / 1000 == pytest.approx(traced["tensor"], rel=1e-6)
    both = (sheet.busy["vector"] + sheet.busy["scalar"]) / 1000
    assert both == pytest.approx(traced["vector"] + traced["scalar"], rel=0.1)


def test_x_is_staged_only_for_short_rows_of_whole_inputs():
    g = small_plan(small(2, 8, 16, (2, 3, 4))).geometry()            # W 4 in a 6-wide box: 8-byte rows
    assert spec.x_staged(g) and spec.x_load_run_bytes(g) == 2 * 3 * 4 * 2
    g = small_plan(small(3, 3, 5, (3, 4, 5), kernel=(2, 2, 2), padding=(0,) * 6)).geometry()
    assert not spec.x_staged(g)                                          # unpadded: one run per sample


def test_chunks_are_whole_128_row_blocks_where_slots_may_start_mid_tile():
    g = small_plan(NNUNET_BOTTLE, grads=("dw",)).geometry()
    cs = spec.chunks(g, 1, 0)
    assert [c.m for c in cs[:-1]] == [128] * (len(cs) - 1) and len(cs) == -(-27 * 320 // 128)
    g = small_plan(small(1, 40, 8, (2, 2, 2)), grads=("dw",)).geometry()   # slots would start at 40 % 128
    assert all(c.m == 120 for c in spec.chunks(g, 1, 0)[:-1])             # three whole taps per chunk
