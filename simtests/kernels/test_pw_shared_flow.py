"""The shared-dy GEMM kernel's body as a DMA -> PE pipeline (costs.flow_shop_ns, pw_shared.flow_steps),
hand-computed; and its place in the planner's estimate."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels import pw_shared as pw
from conv3d_bwd.kernels.costs import (
    ENGINES,
    SECTION_LOSS,
    TARGET_FIGURES,
    CostSheet,
    flow_shop_ns,
    section_ns,
)
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.plan.estimate import _estimate_sheet, _sections
from conv3d_bwd.kernels.spec.compose import pw_shared_on
from conv3d_bwd.kernels.spec.dx_options import dx_program_items

TRN2 = TARGET_FIGURES["trn2"]


def test_a_step_waits_for_the_loads_it_reads():
    # unit 0 reads a 3 ns load, unit 1 a 1 ns one issued with it: 0 starts at 3, 1 at max(5, 4)
    steps = [([(3.0, 0), (1.0, 1)], 2.0, 0.0), ([], 5.0, 0.0)]
    assert flow_shop_ns(steps) == pytest.approx(10.0)
    # a DMA-bound start costs the PE only the DMA's lead: 3 + all the PE
    assert flow_shop_ns(steps) == pytest.approx(3.0 + 2.0 + 5.0)


def test_the_load_read_first_lands_first():
    # issued together, the load unit 0 reads goes first although issued second
    steps = [([(5.0, 1), (1.0, 0)], 1.0, 0.0), ([], 1.0, 0.0)]
    assert flow_shop_ns(steps) == pytest.approx(max(1.0 + 1.0, 6.0) + 1.0)


def test_stores_take_bandwidth_from_later_loads():
    steps = [([(1.0, 0)], 1.0, 4.0), ([(1.0, 1)], 1.0, 0.0)]
    # unit 1's load queues behind unit 0's store: lands at 1 + 4 + 1 = 6
    assert flow_shop_ns(steps) == pytest.approx(7.0)
    without = [([(1.0, 0)], 1.0, 0.0), ([(1.0, 1)], 1.0, 0.0)]
    assert flow_shop_ns(without) == pytest.approx(3.0)


def test_late_loads_and_their_latency_make_the_pe_wait():
    # the last unit's load is issued late (with it): the PE idles for its bytes and its start latency,
    # counted from the first load's latency (the fill's)
    steps = [([(1.0, 0)], 5.0, 0.0), ([(4.0, 1)], 1.0, 0.0)]
    assert flow_shop_ns(steps, latency=0.0) == pytest.approx(7.0)
    assert flow_shop_ns(steps, latency=10.0) == pytest.approx(max(11.0 + 5.0, 15.0) + 1.0 - 10.0)


def test_the_first_step_runs_in_parts_as_its_loads_land():
    steps = [([(4.0, 0)], 4.0, 0.0)]
    assert flow_shop_ns(steps, first_parts=1) == pytest.approx(8.0)
    # two parts: the first after half the loads, max(2 + 4, 4 + 2)
    assert flow_shop_ns(steps, first_parts=2) == pytest.approx(6.0)
    assert flow_shop_ns([]) == 0.0


def test_a_flow_body_is_the_longer_of_its_flow_and_its_compute_share():
    busy = {e: 0.0 for e in ENGINES}
    busy.update(tensor=100.0, dma=99.0, scalar=25.0)
    compute = 100.0 + SECTION_LOSS * 25.0 * 0.25 ** 0.5
    assert section_ns(busy, flow_ns=103.0) == pytest.approx(103.0)
    assert section_ns(busy, flow_ns=100.5) == pytest.approx(compute)
    assert section_ns(busy) > compute + 10.0   # the stall share of a DMA nearly as busy as the PE
    sheet = CostSheet(TRN2)
    sheet.section("dx+dw")
    sheet.flow_shop([([(4.0, 0)], 4.0, 0.0)], head_ns=1.0, first_parts=2)
    # the first load's latency is the fill's; the head the fill charges is not counted again
    assert sheet.flow["dx+dw"] == pytest.approx(flow_shop_ns([([(4.0, 0)], 4.0, 0.0)], 2, TRN2.dma_fixed_ns) - 1.0)


def _shape(name):
    from conv3d_bwd.verify.bench import BENCH_SHAPES
    s = next(s for s in BENCH_SHAPES if s.name == name)
    g = s.geometry
    plan = plan_conv3d_bwd(g.dy_shape, g.x_shape, g.w_shape, stride=s.stride, padding=s.padding,
                           dilation=s.dilation, dtype=s.dtype, target="trn2", lnc=1)
    return validate(g.dy_shape, g.x_shape, g.w_shape, s.stride, s.padding, s.dilation, s.dtype), plan


@pytest.mark.parametrize("name", ["pointwise_c256", "temporal_k311"])
def test_the_flow_units_hold_the_sections_pe_work(name, monkeypatch):
    """flow_steps charges every PE instruction of the shared-dy body once (the same formulas as the
    section's sheet), in the kernel's issue order: a last unit with the last two steps' dw."""
    g, plan = _shape(name)
    assert pw_shared_on(plan)
    got = []
    orig = pw.flow_steps

    def spy(*a, **k):
        got.append(orig(*a, **k))
        return got[-1]

    monkeypatch.setattr(pw, "flow_steps", spy)
    c, _fill = _estimate_sheet(g, plan, TRN2)
    units = got[0]
    chunks = [pw.chunk_of(g, it) for it in dx_program_items(g, plan, 0)]
    assert len(units) == len(pw.steps_of(pw.lay_of(g), chunks)) + 1
    body = _sections(c, g, plan)["dx+dw"]
    assert sum(pe for _l, pe, _s in units) == pytest.approx(body["tensor"], rel=1e-9)
    assert sum(ns for ld, _p, st in units for ns, _u in ld) + sum(st for _l, _p, st in units) <= body["dma"]
    # every load is read by a unit at or after the one it is issued before
    assert all(u >= k for k, (ld, _p, _s) in enumerate(units) for _ns, u in ld)
    assert c.flow["dx+dw"] > body["tensor"] * 0.9


def test_the_shared_dy_estimate_uses_the_flow_not_the_dma_stall_share():
    """pointwise_c256: a DMA nearly as busy as the PE, loaded ahead of it: the body is its flow, which is
    below what the stall share would charge."""
    g, plan = _shape("pointwise_c256")
    c, fill = _estimate_sheet(g, plan, TRN2)
    body = _sections(c, g, plan)["dx+dw"]
    est = plan.estimated_us * 1000.0
    without = section_ns(body)
    assert est < fill + without
    assert est >= fill + c.flow["dx+dw"] - 1e-6


def test_a_dw_interleaved_body_streams_its_dma_in_dws_steps():
    """stem_k377's dw-interleaved pick: the merged body's DMA is an even pipeline of dw's x^T tiles (the
    PE waits for the first step's loads beyond dw's head; DMA-bound, as the x^T transposes' whole blocks make
    it, the last step's PE work follows all the loads), not a stall share (the estimate's _interleaved_flow)."""
    from conv3d_bwd.verify.bench import BENCH_SHAPES
    s = next(s for s in BENCH_SHAPES if s.name == "stem_k377")
    gs = s.geometry
    plan = plan_conv3d_bwd(gs.dy_shape, gs.x_shape, gs.w_shape, stride=s.stride, padding=s.padding,
                           dilation=s.dilation, dtype=s.dtype, target="trn2", lnc=1)
    g = validate(gs.dy_shape, gs.x_shape, gs.w_shape, s.stride, s.padding, s.dilation, s.dtype)
    assert plan.dw_interleave, plan.label
    c, _fill = _estimate_sheet(g, plan, TRN2)
    body = _sections(c, g, plan)["dx"]
    n = c.steps["dw"]
    assert n > 1
    first = body["dma"] / n + body["tensor"]   # the first step's loads, then all the PE work
    last = body["dma"] + body["tensor"] / n    # all the loads, then the last step's PE work
    assert c.flow["dx"] == pytest.approx(max(first, last) - c.steps_head["dw"], rel=1e-6)
    compute = section_ns({e: v for e, v in body.items() if e != "dma"})
    assert section_ns(body, flow_ns=c.flow["dx"]) == pytest.approx(max(c.flow["dx"], compute))
    assert section_ns(body, flow_ns=c.flow["dx"]) < section_ns(body) - 2000.0
