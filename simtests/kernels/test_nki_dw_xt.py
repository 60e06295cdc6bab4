"""Row-mode dw x^T by dma_transpose (``Plan.dw_xt_dma``): exactness, legality, the fill lists, budget."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from conv3d_bwd.kernels import nki_dw_xt
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import PMAX, box_blocks
from conv3d_bwd.kernels.xt_rows import valid_range, xt_columns, xt_fill

from .support import (
    BUDGET_SWEEPS,
    assert_candidates_within_budget,
    geom_kw,
    geom_shapes,
    out_size,
    run_and_compare,
    spy,
)


def _row_plan(xt_dma, strategy=Strategy.PER_GRADIENT, split=None, edit=None, xs=None):
    """Edit: the cheapest row-mode candidate with (or without) DMA x^T, of ``strategy`` (and LNC2 split;
    x-stationary or not when ``xs`` is given)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_method is DwMethod.ROW_PACK
                                     and a.dw_xt_dma is xt_dma and (a.strategy is strategy)
                                     and (split is None or a.dw_split == split)
                                     and (xs is None or a.dw_x_stationary is xs))
        assert alts, p.explain()
        return dataclasses.replace(alts[0], **(edit or {}))
    return pick


@pytest.fixture
def fills(monkeypatch):
    """Counts the x^T tiles filled by DMA (so a test knows the path really ran)."""
    calls = spy(monkeypatch, nki_dw_xt.RowXtDma, "fill", lambda self, *args: args)
    # tiny C_in, x-stationary: a bundle's pairs filled together
    return spy(monkeypatch, nki_dw_xt.RowXtDma, "fill_bundle", lambda self, *args: args, calls)


GEOMS = [
    # stride 2 in H and W, asymmetric padding, odd extents; C_in 3 (stem-like)
    pytest.param({"batch": 2, "c_in": 3, "c_out": 5, "size": (3, 9, 7), "kernel": (3, 5, 5), "stride": (1, 2, 2),
                  "padding": (1, 0, 2, 1, 2, 3)}, id="s122-asym-cin3"),
    # stride 3 and dilation, padding larger than the reach on some rows
    pytest.param({"batch": 1, "c_in": 1, "c_out": 4, "size": (7, 8, 5), "kernel": (2, 3, 2), "stride": (3, 3, 1),
                  "padding": (2, 1, 3, 2, 0, 1), "dilation": (2, 2, 3)}, id="s331-dil-cin1"),
    # whole d planes at one stride (kh = 1, no H padding): merged multi-plane transposes; rows > 128
    pytest.param({"batch": 2, "c_in": 5, "c_out": 3, "size": (5, 40, 3), "kernel": (3, 1, 3),
                  "padding": (1, 1, 0, 0, 1, 1)}, id="merged-planes-chunks"),
    # C_in 130: a full C_in tile then a 2-channel one (zero rows write whole rows)
    pytest.param({"batch": 1, "c_in": 130, "c_out": 6, "size": (2, 5, 4), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 id="cin130"),
    pytest.param({"batch": 2, "c_in": 100, "c_out": 7, "size": (3, 4, 5), "kernel": (2, 3, 3), "stride": (1, 1, 2),
                  "padding": (0, 1, 1, 1, 0, 2)}, id="cin100"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 6, 6), "kernel": (3, 3, 3), "dilation": (2, 2, 2),
                  "padding": (2,) * 6}, id="cin64-dil2"),
]


@pytest.mark.parametrize("xs", [False, True], ids=["dwT", "xstat"])
@pytest.mark.parametrize("xt_dma", [True, False], ids=["dma", "pe"])
@pytest.mark.parametrize("geom", GEOMS)
def test_row_mode_xt_both_ways_is_exact(geom, xt_dma, xs, fills):
    """Either x^T source under either dw orientation (x-stationary: DMA into the bundle ring's slots)."""
    used = []
    run_and_compare(**geom, plan_edit=lambda p: used.append(_row_plan(xt_dma, xs=xs)(p)) or used[-1])
    assert bool(fills) is xt_dma
    assert used[0].dw_x_stationary is xs and used[0].dw_xt_dma is xt_dma


XS = pytest.mark.parametrize("xs", [False, True], ids=["dwT", "xstat"])


@XS
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw")], ids=lambda g: "+".join(g))
def test_dtypes_and_gradient_subsets(dtype, grads, xs, fills):
    res = run_and_compare(batch=2, c_in=4, c_out=5, size=(3, 5, 6), kernel=(3, 3, 2), stride=(1, 2, 1),
                          padding=(1, 1, 1, 0, 0, 1), dtype=dtype, grads=grads, plan_edit=_row_plan(True, xs=xs))
    assert fills
    if grads == ("dw",):   # no dx filters: every dma_transpose is an x^T fill
        assert sum(i.op == "dma_transpose" for i in res.trace) > 0


@pytest.mark.parametrize("edit", [
    {"dw_band": (1, 2)},                                        # several boxes, fp32 accumulation
    {"dw_tap_range": 6},                                        # tap passes (two (kd, kh) pairs each)
    {"dw_ci_range": 2, "dw_ci_tile": 2},                        # C_in ranges and tiles
], ids=["bands", "tap-passes", "ci-ranges"])
@XS
def test_tilings(edit, xs, fills):
    run_and_compare(batch=2, c_in=5, c_out=4, size=(4, 6, 5), kernel=(3, 3, 2), stride=(1, 2, 1),
                    padding=(1, 1, 2, 0, 1, 0), dilation=(2, 1, 1), plan_edit=_row_plan(True, edit=edit, xs=xs))
    assert fills


@XS
def test_shared_dy_strategy(xs, fills):
    run_and_compare(batch=2, c_in=5, c_out=4, size=(4, 6, 5), kernel=(3, 3, 3), padding=(1, 0, 1, 2, 1, 1),
                    plan_edit=_row_plan(True, strategy=Strategy.SHARED_DY, xs=xs))
    assert fills


@XS
@pytest.mark.parametrize("split", ["positions", "taps"])
def test_lnc2(split, xs, fills):
    run_and_compare(batch=2, c_in=6, c_out=5, size=(4, 5, 6), kernel=(3, 3, 3), padding=(1,) * 6, lnc=2,
                    plan_edit=_row_plan(True, split=split, xs=xs))
    assert fills


@pytest.mark.parametrize("geom, edit", [
    # C_in 64: bundles of 2 pairs (chunks span both slots); LNC2 positions split, 2 batches, asymmetric padding
    ({"batch": 2, "c_in": 64, "c_out": 48, "size": (3, 5, 6), "kernel": (3, 3, 3), "padding": (1, 0, 2, 1, 1, 0),
      "lnc": 2}, {"dw_split": "positions"}),
    # the same under the taps split: each program's own (kd, kh) pairs, bundles from an odd pair
    ({"batch": 2, "c_in": 64, "c_out": 48, "size": (3, 5, 6), "kernel": (3, 3, 3), "padding": (1, 0, 2, 1, 1, 0),
      "lnc": 2}, {"dw_split": "taps"}),
    # C_in 3, K_w 7: 6 kw rows per stationary; stride 2, tap passes of 2 pairs
    ({"batch": 1, "c_in": 3, "c_out": 16, "size": (3, 10, 12), "kernel": (2, 3, 7), "stride": (1, 2, 2),
      "padding": (1, 1, 1, 1, 3, 3)}, {"dw_tap_range": 14}),
    # C_in 130: a partial C_in tile in the slot views; dilation
    ({"batch": 1, "c_in": 130, "c_out": 8, "size": (3, 5, 4), "kernel": (2, 2, 3), "dilation": (2, 1, 1),
      "padding": (1, 1, 0, 1, 1, 1)}, {}),
], ids=["cin64-lnc2-positions", "cin64-lnc2-taps", "cin3-kw7-passes", "cin130-dil"])
def test_x_stationary_with_dma_xt(geom, edit, fills):
    """Both flags: the x^T of each bundle's pairs DMA'd into the slot views of one ring tile."""
    geom = dict(geom)
    lnc = geom.pop("lnc", 1)
    used = []

    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.dw_xt_dma
                                     and (a.strategy is Strategy.PER_GRADIENT)
                                     and (a.dw_split == edit.get('dw_split', a.dw_split)))
        assert alts, p.explain()
        used.append(dataclasses.replace(alts[0], **{k: v for k, v in edit.items() if k != "dw_split"}))
        return used[-1]

    run_and_compare(**geom, lnc=lnc, plan_edit=pick)
    assert fills and used[0].dw_x_stationary and used[0].dw_xt_dma


@pytest.mark.parametrize("dtype, target", [("fp32", "trn2"), ("fp32", "trn3"), ("bf16", "trn1"), ("fp16", "trn1")])
def test_fp32_and_trn1_never_use_dma_xt(dtype, target):
    shapes = geom_shapes({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3),
                          "padding": (1,) * 6})
    plan = plan_conv3d_bwd(*shapes, padding=(1,) * 6, dtype=dtype, target=target)
    assert bool(plan.feasible_candidates(where=lambda a: a.dw_method is DwMethod.ROW_PACK))
    assert not plan.feasible_candidates(where=lambda a: a.dw_xt_dma)
    assert not any("xT dma" in c.label for c in plan.candidates)


@pytest.mark.parametrize("dtype, target", [("bf16", "trn2"), ("fp16", "trn3")])
def test_both_variants_are_candidates_where_legal(dtype, target):
    shapes = geom_shapes({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3),
                          "padding": (1,) * 6})
    plan = plan_conv3d_bwd(*shapes, padding=(1,) * 6, dtype=dtype, target=target)
    rows = plan.feasible_candidates(where=lambda a: a.dw_method is DwMethod.ROW_PACK)
    assert {a.dw_xt_dma for a in rows} == {True, False}
    # with either dw orientation
    assert {(a.dw_x_stationary, a.dw_xt_dma) for a in rows} == {(False, False), (False, True), (True, False),
                                                                 (True, True)}
    assert all(("xT dma" in a.label) is a.dw_xt_dma for a in rows)
    assert all(not a.dw_xt_dma for a in plan.feasible_candidates() if a.dw_method is not DwMethod.ROW_PACK)


def test_planner_check_rejects_an_illegal_dma_xt():
    from conv3d_bwd.kernels.costs import TARGET_FIGURES
    from conv3d_bwd.kernels.plan.budget import _check

    shapes = geom_shapes({"batch": 1, "c_in": 4, "c_out": 4, "size": (2, 4, 4), "kernel": (3, 3, 3),
                          "padding": (1,) * 6})
    for dtype, target in (("fp32", "trn2"), ("bf16", "trn1")):
        plan = plan_conv3d_bwd(*shapes, padding=(1,) * 6, dtype=dtype, target=target)
        row = next(a for a in plan.feasible_candidates() if a.dw_method is DwMethod.ROW_PACK)
        reason, _b = _check(row.geometry(), dataclasses.replace(row, dw_xt_dma=True), TARGET_FIGURES[target])
        assert "dw_xt_dma needs" in reason and dtype in reason and target in reason


def test_fp32_forced_dma_xt_runs_exactly():
    """The planner offers the DMA x^T for 2-byte dtypes only; forced on fp32 it still computes dw exactly,
    since the DMA transposes 4-byte dtypes bit-accurately too (Trainium2 architecture guide, "DMA
    Transpose"), which the emulator follows."""
    run_and_compare(batch=1, c_in=3, c_out=3, size=(2, 4, 4), kernel=(3, 3, 3), padding=(1,) * 6,
                    dtype="fp32", grads=("dw",),
                    plan_edit=lambda p: dataclasses.replace(_row_plan(False)(p), dw_xt_dma=True))


# --------------------------------------------------------------------------- the fill lists


def _tile_from_fill(g, x, b, od0, oh0, cd, ch, kd, kh):
    """Build the x^T tile [rows, columns, ci] from xt_fill's runs the way the kernel's DMAs do."""
    xw, c_lo, c_hi = xt_columns(g)
    tile = np.full((cd * ch, xw, x.shape[1]), np.nan)
    tile[:, :c_lo] = 0
    tile[:, c_hi:] = 0
    f = xt_fill(g, od0, oh0, cd, ch, kd, kh)
    rows = x[b].reshape(x.shape[1], -1, x.shape[4])          # [ci, D*H, W]
    for run in f.zeros:
        assert np.isnan(tile[run.p0:run.p0 + run.rows, c_lo:c_hi]).all(), "zero run overlaps another write"
        tile[run.p0:run.p0 + run.rows] = 0
    w0 = c_lo - g.axes[2].lo
    for run in f.transposes:
        assert np.isnan(tile[run.p0:run.p0 + run.rows, c_lo:c_hi]).all(), "transpose overlaps another write"
        src = rows[:, run.x_row:run.x_row + (run.rows - 1) * run.step + 1:run.step, w0:w0 + c_hi - c_lo]
        tile[run.p0:run.p0 + run.rows, c_lo:c_hi] = np.transpose(src, (1, 2, 0))
    for run in f.after:   # rows a bridging transpose read from a neighbouring plane: zeroed after it
        assert not np.isnan(tile[run.p0:run.p0 + run.rows, c_lo:c_hi]).any(), "after run outside the transposes"
        tile[run.p0:run.p0 + run.rows] = 0
    return tile


def _tile_direct(g, x, b, od0, oh0, cd, ch, kd, kh):
    """The x^T tile by definition: row (i, j) column c is x at the tap-shifted position, else 0."""
    ad, ah, aw = g.axes
    xw, _lo, _hi = xt_columns(g)
    out = np.zeros((cd * ch, xw, x.shape[1]))
    for i, j, c in itertools.product(range(cd), range(ch), range(xw)):
        d = (od0 + i) * ad.s + kd * ad.r - ad.lo
        h = (oh0 + j) * ah.s + kh * ah.r - ah.lo
        w = c - aw.lo
        if 0 <= d < ad.n and 0 <= h < ah.n and 0 <= w < aw.n:
            out[i * ch + j, c] = x[b, :, d, h, w]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_fill_lists_build_the_tile(seed):
    """Random geometries and chunks: the runs cover every row exactly once and give the right tile;
    every transpose reads one uniform stride of x (the kernel's one sliced dim)."""
    rng = np.random.default_rng(seed)
    o = [0]
    while min(o) < 1:   # redraw until the geometry has an output
        k = tuple(int(v) for v in rng.integers(1, 5, 3))
        s = tuple(int(v) for v in rng.integers(1, 4, 3))
        r = tuple(int(v) for v in rng.integers(1, 3, 3))
        n = tuple(int(v) for v in rng.integers(1, 9, 3))
        pad = tuple(int(rng.integers(0, r[a // 2] * (k[a // 2] - 1) + 2)) for a in range(6))
        o = [out_size(n[a], k[a], s[a], pad[2 * a], pad[2 * a + 1], r[a]) for a in range(3)]
    c_in = 2
    g = validate((1, 1, *o), (1, c_in, *n), (*k, c_in, 1), s, pad, r, "bf16")
    x = rng.integers(1, 9, (1, c_in, *n)).astype(np.float64)
    for (sd, sh, _z), (cd, ch, _one) in box_blocks((0, 0, 0), (o[0], o[1], 1), PMAX):
        for kd, kh in itertools.product(range(k[0]), range(k[1])):
            got = _tile_from_fill(g, x, 0, sd, sh, cd, ch, kd, kh)
            assert not np.isnan(got).any(), (g, sd, sh, kd, kh)
            np.testing.assert_array_equal(got, _tile_direct(g, x, 0, sd, sh, cd, ch, kd, kh))


def test_whole_planes_merge_into_one_transpose():
    """s_d*H == ch*s_h and no H clipping: the planes' rows are one stride, one transpose; with H
    clipping one transpose bridging the planes, the clipped rows before it zero and those between the
    planes zeroed after it (without bridging: one transpose per plane)."""
    g = validate((1, 1, 5, 40, 3), (1, 2, 5, 40, 3), (3, 1, 3, 2, 1), (1, 1, 1), (1, 1, 0, 0, 1, 1), (1, 1, 1), "bf16")
    f = xt_fill(g, 0, 0, 3, 40, 0, 0)        # kd = 0: plane 0 reads d = -1
    assert [(t.p0, t.rows, t.x_row, t.step) for t in f.transposes] == [(40, 80, 0, 1)]
    assert [(z.p0, z.rows) for z in f.zeros] == [(0, 40)]
    g = validate((1, 1, 3, 4, 3), (1, 2, 3, 4, 3), (3, 3, 3, 2, 1), (1, 1, 1), (1,) * 6, (1, 1, 1), "bf16")
    f = xt_fill(g, 0, 0, 3, 4, 1, 0)         # kh = 0: the first row of every plane reads h = -1
    assert [(t.p0, t.rows, t.x_row, t.step) for t in f.transposes] == [(1, 11, 0, 1)]
    assert [(z.p0, z.rows) for z in f.zeros] == [(0, 1)]
    assert [(z.p0, z.rows) for z in f.after] == [(4, 1), (8, 1)]
    f = xt_fill(g, 0, 0, 3, 4, 1, 0, bridge=False)
    assert [(t.p0, t.rows) for t in f.transposes] == [(1, 3), (5, 3), (9, 3)]
    assert [(z.p0, z.rows) for z in f.zeros] == [(0, 1), (4, 1), (8, 1)] and not f.after


def test_valid_range():
    assert valid_range(-3, 2, 5, 4) == (2, 4)   # -3, -1, 1, 3, 5 -> 1, 3
    assert valid_range(0, 1, 3, 3) == (0, 3)
    assert valid_range(5, 1, 3, 4) == (0, 0)
    assert valid_range(-10, 3, 3, 4) == (0, 0)


# --------------------------------------------------------------------------- budget


@pytest.mark.parametrize("geom", [
    {"batch": 2, "c_in": 100, "c_out": 48, "size": (3, 10, 9), "kernel": (3, 3, 3), "stride": (1, 2, 1),
     "padding": (1, 0, 1, 2, 1, 1)},
    {"batch": 1, "c_in": 3, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 7, 7), "stride": (1, 2, 2),
     "padding": (1, 1, 3, 3, 3, 3)},
], ids=["cin100-s2", "stem-like"])
@pytest.mark.parametrize("sweep", BUDGET_SWEEPS)
def test_planner_budget_bounds_the_measured_peak_with_dma_xt(geom, sweep):
    """The feasible xT-dma candidates (a pairwise cover of their choices; every one in the nightly sweep) run
    within the SBUF/PSUM the planner counted."""
    assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dw_xt_dma, sweep=sweep, **geom_kw(geom))
