"""LNC2 paths: the dw positions split's reduce-scatter (fused add-cast or in place), the region-packed
dx bands per program, and the planner's LNC2 / first-load terms. Bit-exact under nkisim on exact inputs."""
from __future__ import annotations

import dataclasses
import math

import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.estimate import _estimate
from conv3d_bwd.kernels.plan.estimate_waits import _dw_first_x_wait_ns
from conv3d_bwd.kernels.plan.variants import _lnc2_packed_bands
from conv3d_bwd.kernels.schedule import n_tiles
from conv3d_bwd.kernels.spec.dw_options import dw_defer_finish, dw_fused_exchange
from conv3d_bwd.kernels.spec.items import _split, dw_items, dx_items

from .support import GRADS, assert_candidates_within_budget, conv_shapes, run_and_compare

TRN2 = TARGET_FIGURES["trn2"]


def _positions(method, strategy=Strategy.PER_GRADIENT, xs=None):
    """Edit: the first candidate with ``method`` whose dw is split by positions (partials exchanged);
    ``xs``: only x-stationary (True) or only not (False) ones."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_method is method and a.dw_split == 'positions'
                                     and (a.strategy is strategy) and (xs is None or a.dw_x_stationary is xs))
        assert alts, p.explain()
        return alts[0]
    return pick


# odd tap counts (27, 3, 1), one / two C_out tiles (fused add-cast) and three (in-place adds)
SPLIT_GEOMS = [
    pytest.param({"batch": 2, "c_in": 6, "c_out": 5, "size": (3, 4, 5), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 DwMethod.ROW_PACK, id="k333-co5-rows"),
    pytest.param({"batch": 3, "c_in": 5, "c_out": 7, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1),
                  "padding": (1, 0, 0, 1, 1, 1)}, DwMethod.TAP_PACK, id="k323-s2-co7-box"),
    pytest.param({"batch": 1, "c_in": 4, "c_out": 130, "size": (4, 3, 4), "kernel": (3, 1, 1),
                  "padding": (1, 1, 0, 0, 0, 0)}, DwMethod.TAP_GEMM, id="k311-co130-fused2"),
    pytest.param({"batch": 2, "c_in": 3, "c_out": 260, "size": (2, 3, 4), "kernel": (1, 3, 1),
                  "padding": (0, 0, 1, 1, 0, 0)}, DwMethod.TAP_GEMM, id="k131-co260-inplace"),
    pytest.param({"batch": 1, "c_in": 5, "c_out": 6, "size": (4, 4, 4), "kernel": (1, 1, 1), "stride": (2, 2, 2)},
                 DwMethod.TAP_GEMM, id="one-tap"),
]


@pytest.mark.parametrize("geom, method", SPLIT_GEOMS)
def test_positions_split_reduce_scatter_is_exact(geom, method):
    run_and_compare(**geom, lnc=2, plan_edit=_positions(method))
    res = run_and_compare(**geom, lnc=2, grads=("dx", "dw"), plan_edit=_positions(method, xs=False))
    # each program sends one window of ceil(taps / 2) fp32 taps per C_out tile, not the whole accumulator
    # (x-stationary sends a window of its chunks: test_dw_xs_exchange.py)
    taps = math.prod(geom["kernel"])
    sent = sorted(a.nbytes for i in res.trace if i.op == "sendrecv" for a in i.accesses if a.role == "src")
    want = sorted(2 * [min(128, geom["c_out"] - c) * -(-taps // 2) * geom["c_in"] * 4
                       for c in range(0, geom["c_out"], 128)])
    assert sent == want


@pytest.mark.parametrize("c_out, fused", [(5, True), (130, True), (260, False)])
def test_fused_exchange_only_up_to_two_co_tiles(c_out, fused):
    shapes = conv_shapes(1, 4, c_out, (3, 4, 5), (3, 3, 3), padding=(1,) * 6)
    p = plan_conv3d_bwd(*shapes, padding=(1,) * 6, lnc=2)
    alts = p.feasible_candidates(where=lambda a: a.dw_split == 'positions'
                                 and a.dw_method is not DwMethod.DMA_GEMM)
    # x-stationary exchanges its own accumulator (_finish_xs): never the fused dw^T exchange
    assert all(not dw_fused_exchange(a.geometry(), a) for a in alts if a.dw_x_stationary)
    alts = [a for a in alts if not a.dw_x_stationary]
    assert alts
    assert all(dw_fused_exchange(a.geometry(), a) is fused for a in alts)
    assert not dw_fused_exchange(alts[0].geometry(), dataclasses.replace(alts[0], lnc=1))


SUBSETS = [(g, Strategy.PER_GRADIENT) for g in (("dw",), ("dx", "dw"), ("dw", "db"), ("dx",), ("db",), ("dx", "db"))] \
    + [(("dx", "dw"), Strategy.SHARED_DY), (GRADS, Strategy.SHARED_DY)]   # shared_dy needs dx and dw


@pytest.mark.parametrize("grads, strategy", SUBSETS, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v.value)
def test_positions_split_every_gradient_subset(grads, strategy):
    geom = {"batch": 3, "c_in": 5, "c_out": 7, "size": (3, 4, 5), "kernel": (3, 2, 3), "padding": (1, 1, 0, 1, 2, 0)}
    edit = _positions(DwMethod.TAP_PACK, strategy) if "dw" in grads else None
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=edit)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_positions_split_other_dtypes(dtype):
    geom = {"batch": 2, "c_in": 4, "c_out": 6, "size": (3, 4, 4), "kernel": (3, 3, 3), "padding": (1,) * 6}
    run_and_compare(**geom, lnc=2, dtype=dtype, plan_edit=_positions(DwMethod.ROW_PACK))


# ---------------------------------------------------------------- region-packed dx bands per program

PACK_GEOMS = [
    pytest.param({"batch": 1, "c_in": 5, "c_out": 7, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (2,) * 6,
                  "dilation": (2, 1, 1)}, id="D4-dilated"),
    pytest.param({"batch": 1, "c_in": 6, "c_out": 5, "size": (5, 4, 5), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 id="D5-odd-items"),
    pytest.param({"batch": 1, "c_in": 4, "c_out": 6, "size": (6, 5, 4), "kernel": (3, 3, 3), "stride": (2, 2, 1),
                  "padding": (1,) * 6}, id="strided"),
]


def _packed_variant(p):
    alts = p.feasible_candidates(where=lambda a: a.dx_regions > 1 and a.strategy is Strategy.PER_GRADIENT
                                 and (len(_split(dx_items(a.geometry(), a), 2, 0)) >= a.dx_regions)
                                 and (a.dx_band[0] < a.geometry().axes[0].n))
    assert alts, p.explain()
    return alts[0]


@pytest.mark.parametrize("geom", PACK_GEOMS)
@pytest.mark.parametrize("grads", [GRADS, ("dx",), ("dx", "db")], ids=lambda g: "+".join(g))
def test_lnc2_packed_bands_are_exact(geom, grads):
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=_packed_variant)


def test_lnc2_packed_bands_give_each_program_r_items():
    # dilated_d2 at LNC2: two D bands of 4 rows, one per program, left dx unpacked
    shapes = conv_shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), padding=(2,) * 6, dilation=(2, 2, 2))
    p = plan_conv3d_bwd(*shapes, padding=(2,) * 6, dilation=(2, 2, 2), lnc=2)
    g = p.geometry()
    base = next(a for a in p.feasible_candidates() if a.dx_regions == 1 and a.dx_band == (4, 32))
    variants = _lnc2_packed_bands(g, base)
    assert [(v.dx_band, v.dx_regions) for v in variants] == [((2, 32), 2)]
    assert len(_split(dx_items(g, variants[0]), 2, 0)) == 2
    assert _lnc2_packed_bands(g, dataclasses.replace(base, lnc=1)) == []
    labels = {a.label for a in p.feasible_candidates()}
    assert any("band 2x32" in lab and "2 regions" in lab for lab in labels)


# ---------------------------------------------------------------- planner: first x band, exchange

DOWN_S2 = {"stride": (2, 2, 2), "padding": (1,) * 6}


def test_first_x_band_wait_is_charged_where_it_is_long(monkeypatch):
    """down_s2: one dw box spans all of x (64 partitions: half the DMA engines, then a staged
    placement); vae3d's row-mode chunk lands while its dy^T is transposed."""
    down = plan_conv3d_bwd(*conv_shapes(2, 64, 128, (8, 32, 32), (3, 3, 3), **DOWN_S2), **DOWN_S2, lnc=2)
    per_grad = down.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                        and a.dw_method is DwMethod.TAP_PACK)
    g = down.geometry()
    waits = [_dw_first_x_wait_ns(g, a, TRN2) for a in per_grad]
    assert min(waits) > 3000.0
    # the estimate carries exactly that wait (its only use)
    a = per_grad[0]
    est, _ = _estimate(g, a, TRN2)
    from conv3d_bwd.kernels.plan import estimate_waits
    monkeypatch.setattr(estimate_waits, "_dw_first_x_wait_ns", lambda *_a: 0.0)
    est0, _ = _estimate(g, a, TRN2)
    monkeypatch.undo()
    assert est - est0 == pytest.approx(waits[0] / 1000.0)
    vae = plan_conv3d_bwd(*conv_shapes(1, 128, 128, (4, 32, 32), (3, 3, 3), padding=(1,) * 6), padding=(1,) * 6)
    rows = vae.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT
                                   and a.dw_method is DwMethod.ROW_PACK)
    assert rows and all(_dw_first_x_wait_ns(vae.geometry(), a, TRN2) == 0.0 for a in rows)


def test_exchange_charge_follows_the_half_window():
    """The estimate's dw DMA shrinks by the half of the accumulator a program no longer sends."""
    shapes = conv_shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), padding=(1,) * 6)
    p = plan_conv3d_bwd(*shapes, padding=(1,) * 6, lnc=2)
    a = next(q for q in p.feasible_candidates() if q.dw_split == "positions" and q.dw_method is DwMethod.ROW_PACK
             and not q.dw_x_stationary)   # the dw^T orientation (x-stationary has its own exchange)
    g = a.geometry()
    _est, eng = _estimate(g, a, TRN2)
    assert dw_fused_exchange(g, a)
    sent = n_tiles(g.c_out, 128) * min(128, g.c_out) * 14 * g.c_in * 4       # 14 of 27 taps
    assert sent / (TRN2.dma_bytes_per_ns * 1000) < eng["dma"]


def test_lnc2_budget_bounds_the_measured_peak():
    """Trace-only: fused (C_out 130) and in-place (C_out 260) exchanges stay within the planned SBUF."""
    for c_out in (130, 260):
        shapes = conv_shapes(2, 64, c_out, (4, 8, 8), (3, 3, 3), padding=(1,) * 6)
        assert_candidates_within_budget(shapes, lambda a: a.dw_split == "positions", 2, lnc=2, padding=(1,) * 6)


# ---------------------------------------------------------------- dw:dma_gemm positions split

@pytest.mark.parametrize("batch, c_in, c_out, size", [
    (2, 130, 7, (2, 4, 5)),      # odd C_out: the two windows overlap by one column; two C_in tiles
    (1, 5, 9, (2, 2, 2)),        # one position tile: program 1 has no partial (zeros)
    (3, 6, 600, (2, 3, 4)),      # two C_out blocks of a PSUM bank
])
@pytest.mark.parametrize("grads", [GRADS, ("dw",), ("dw", "db")], ids=lambda g: "+".join(g))
def test_dma_gemm_column_halves_are_exact(batch, c_in, c_out, size, grads):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_method is DwMethod.DMA_GEMM
                                     and a.dw_split == 'positions'
                                     and (a.strategy.value == 'per_gradient'))   # (shared dy: test_pw_shared.py)
        assert alts, p.explain()
        return alts[0]

    res = run_and_compare(batch, c_in, c_out, size, (1, 1, 1), lnc=2, grads=grads, plan_edit=pick)
    if "db" not in grads:   # only dw's exchanges: per C_in tile, ceil(C_out / 2) fp32 columns each way
        sent = sorted(a.nbytes for i in res.trace if i.op == "sendrecv" for a in i.accesses if a.role == "src")
        want = sorted(2 * [min(128, c_in - c) * -(-c_out // 2) * 4 for c in range(0, c_in, 128)])
        assert sent == want


# ---------------------------------------------------------------- dw finish deferred past dx

def _deferred(p, one_box=False):
    alts = p.feasible_candidates(where=lambda a: dw_defer_finish(a.geometry(), a)
                                 and (not one_box or len(dw_items(a.geometry(), a)) == 1))
    assert alts, p.explain()
    return alts[0]


@pytest.mark.parametrize("geom, one_box", [
    pytest.param({"batch": 2, "c_in": 6, "c_out": 5, "size": (3, 4, 5), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 False, id="two-items"),
    # one dw box: program 1 has no partial (zeros sent), still exchanges and stores its half
    pytest.param({"batch": 1, "c_in": 4, "c_out": 7, "size": (2, 3, 4), "kernel": (3, 1, 3),
                  "padding": (1, 1, 0, 0, 1, 1)}, True, id="idle-program"),
    pytest.param({"batch": 1, "c_in": 3, "c_out": 260, "size": (2, 3, 4), "kernel": (1, 3, 1),
                  "padding": (0, 0, 1, 1, 0, 0)}, False, id="in-place-adds"),
])
def test_deferred_dw_finish_is_exact_and_runs_after_dx(geom, one_box):
    res = run_and_compare(**geom, lnc=2, plan_edit=lambda p: _deferred(p, one_box))
    for pid in (0, 1):
        prog = [i for i in res.trace if i.program_id == pid]
        first_exchange = next(k for k, i in enumerate(prog) if i.op == "sendrecv")
        dx_matmuls = [k for k, i in enumerate(prog) if i.op == "nc_matmul"
                      and any(a.role == "dst" and a.shape[-1] > 1 for a in i.accesses)]
        hbm_stores = [k for k, i in enumerate(prog) if i.op == "dma_copy"
                      and any(a.write and a.buffer.endswith("hbm") for a in i.accesses)]
        # the exchange is issued before dx's last matmul; the last dw store after it
        assert first_exchange < dx_matmuls[-1] < hbm_stores[-1]


def test_deferral_only_for_one_pass_positions_split_with_dx():
    shapes = conv_shapes(1, 64, 64, (8, 32, 32), (3, 3, 3), padding=(1,) * 6)
    p = plan_conv3d_bwd(*shapes, padding=(1,) * 6, lnc=2)
    g = p.geometry()
    for a in p.feasible_candidates():
        want = (a.strategy is Strategy.PER_GRADIENT and a.dw_split == "positions" and a.dw_tap_range == 0
                and a.dw_ci_range >= g.c_in and not a.dw_x_stationary)   # x-stationary: its own finish
        assert dw_defer_finish(g, a) is want, a.label
        assert not dw_defer_finish(g, dataclasses.replace(a, lnc=1))
        assert not dw_defer_finish(g, dataclasses.replace(a, compute_dx=False))
