"""dx:toeplitz (output positions on the PE's M axis, block-Toeplitz filter windows) against the oracle."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dx_toeplitz
from conv3d_bwd.kernels.dx_toeplitz import (
    offsets,
    pair_copy_on_vector,
    tap_line,
    toeplitz_domain,
    toeplitz_options,
    toeplitz_w_options,
)
from conv3d_bwd.kernels.plan import DxMethod, Strategy, plan_conv3d_bwd

from .support import assert_candidates_within_budget, geom_kw, geom_shapes, run_and_compare, spy


def toeplitz(u, pair=-1, **more):
    """A plan edit forcing dx:toeplitz with groups ``u`` = (U_d, U_h) and K pairing along ``pair``
    (phase mode, W on the free axis, unless ``more`` says otherwise)."""
    more = {"dx_toeplitz_merge": (False, False), "dx_toeplitz_w": 0} | more
    def edit(p):
        return dataclasses.replace(p, dx_method=DxMethod.TOEPLITZ, dx_toeplitz=u, dx_toeplitz_pair=pair,
                                   dx_regions=1, **more)
    return edit


GEOMS = {
    # the stem's structure at a small size: C_in 3, kernel 3x7x7, stride (1, 2, 2), 4 + 3 taps per phase
    "stem-like": {"batch": 2, "c_in": 3, "c_out": 16, "size": (5, 10, 9), "kernel": (3, 7, 7),
                  "stride": (1, 2, 2), "padding": (1, 1, 3, 3, 3, 3)},
    "c1-k1x5x2": {"batch": 1, "c_in": 1, "c_out": 5, "size": (4, 11, 6), "kernel": (1, 5, 2),
                  "padding": (0, 0, 2, 1, 1, 0)},
    "c2-s3-dil": {"batch": 2, "c_in": 2, "c_out": 7, "size": (7, 8, 5), "kernel": (3, 2, 4), "stride": (3, 1, 2),
                  "padding": (2, 1, 0, 1, 3, 2), "dilation": (1, 3, 1)},
    "c5-k6x4x3": {"batch": 1, "c_in": 5, "c_out": 9, "size": (8, 7, 7), "kernel": (6, 4, 3), "stride": (2, 3, 1),
                  "padding": (2, 3, 1, 2, 1, 1)},
    "c8-k2x3x7": {"batch": 3, "c_in": 8, "c_out": 4, "size": (3, 9, 10), "kernel": (2, 3, 7), "stride": (1, 2, 3),
                  "padding": (1, 0, 1, 1, 3, 3), "dilation": (2, 1, 1)},
}


@pytest.mark.parametrize("u, pair", [((2, 3), -1), ((3, 2), 0), ((1, 4), 1), ((4, 1), -1)],
                         ids=["2x3", "3x2-pair-d", "1x4-pair-h", "4x1"])
@pytest.mark.parametrize("name", list(GEOMS))
def test_toeplitz_dx_is_exact(name, u, pair):
    """Groups that do not divide the phase rows (tails on both axes), K pairs along d and h."""
    run_and_compare(**GEOMS[name], grads=("dx",), plan_edit=toeplitz(u, pair))


@pytest.mark.parametrize("c_in, u, pair", [(64, (1, 2), 1), (64, (2, 1), 0), (33, (1, 3), -1), (21, (3, 2), 0)],
                         ids=["c64-1x2-pair-h", "c64-2x1-pair-d", "c33-1x3", "c21-3x2-pair-d"])
def test_toeplitz_wide_c_in_is_exact(c_in, u, pair):
    """C_in > U_d: u-major partitions (one store DMA per u_d); M up to 128."""
    run_and_compare(batch=2, c_in=c_in, c_out=48, size=(4, 7, 5), kernel=(3, 3, 3), stride=(1, 1, 2),
                    padding=(1, 1, 1, 1, 1, 0), grads=("dx",), plan_edit=toeplitz(u, pair))


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_toeplitz_other_dtypes(dtype):
    run_and_compare(**GEOMS["stem-like"], dtype=dtype, grads=("dx", "db"), plan_edit=toeplitz((2, 3), 0))


@pytest.mark.parametrize("grads", [("dx",), ("dx", "dw"), ("dx", "db"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY], ids=["per-gradient", "shared"])
def test_toeplitz_with_every_gradient_subset(grads, strategy):
    if strategy is Strategy.SHARED_DY and "dw" not in grads:
        strategy = Strategy.PER_GRADIENT   # shared-dy exists only with dx and dw
    run_and_compare(**GEOMS["c2-s3-dil"], grads=grads, plan_edit=toeplitz((3, 2), 1, strategy=strategy))


@pytest.mark.parametrize("edit", [
    {"dx_band": (2, 9)},                     # several D bands (and one band per batch)
    {"dx_band": (1, 4), "dy_bufs": 1},       # D and H bands; no band prefetch with one buffer
    {"filters_first": True},                 # the grids built before dw runs
], ids=["d-bands", "dh-bands-one-buffer", "filters-first"])
def test_toeplitz_bands_and_buffers(edit):
    run_and_compare(**GEOMS["stem-like"], plan_edit=toeplitz((2, 2), 0, **edit))


@pytest.mark.parametrize("pair", [-1, 1])
def test_toeplitz_lnc2(pair):
    run_and_compare(**GEOMS["stem-like"], lnc=2, plan_edit=toeplitz((2, 3), pair, dx_band=(2, 10)))


def test_toeplitz_two_c_out_tiles_no_pairing():
    """C_out > 128: the matmuls of both C_out tiles accumulate in one bank (no K pairing: 2 C_out > 128)."""
    geom = dict(GEOMS["c1-k1x5x2"], c_out=130)
    run_and_compare(**geom, grads=("dx",), plan_edit=toeplitz((1, 3)))


def test_offsets_cover_every_position_tap_pair_once():
    """Over a sub-box's offsets (pairs expanded), every (u, t) pair of both axes is met exactly once."""
    from conv3d_bwd.kernels.geometry import Axis
    ax = Axis(n=20, k=7, s=2, r=1, lo=3, hi=3)
    for ph in (0, 1):
        line = tap_line(ax, ph)
        for u in (1, 3, 5):
            for pair in (-1, 0, 1):
                met = []
                for dd, dh, paired in offsets((line, line), (u, u), pair):
                    for step in ((0, 0), (1, 0) if pair == 0 else (0, 1)) if paired else ((0, 0),):
                        d0, h0 = dd + step[0], dh + step[1]
                        met += [(ud, td, uh, th) for ud in range(u) for td in line.shifts if ud - td == d0
                                for uh in range(u) for th in line.shifts if uh - th == h0]
                want = [(ud, td, uh, th) for ud in range(u) for td in line.shifts for uh in range(u)
                        for th in line.shifts]
                assert sorted(met) == sorted(want)


def test_planner_offers_toeplitz_for_small_c_in_only():
    shapes = geom_shapes(GEOMS["stem-like"])
    kw = {"stride": GEOMS["stem-like"]["stride"], "padding": GEOMS["stem-like"]["padding"]}
    plan = plan_conv3d_bwd(*shapes, **kw)
    labels = [a.label for a in plan.feasible_candidates() if a.dx_method is DxMethod.TOEPLITZ]
    assert labels and all(", U " in lab for lab in labels)
    assert toeplitz_options(plan.geometry(), (5, 10))
    wide = geom_shapes(dict(GEOMS["stem-like"], c_in=65))
    p2 = plan_conv3d_bwd(*wide, **kw)
    assert all(a.dx_method is not DxMethod.TOEPLITZ for a in p2.feasible_candidates())
    assert "dx:toeplitz" in p2.explain() and "C_in 65 > 64" in p2.explain()
    assert toeplitz_domain(p2.geometry())


def test_toeplitz_budget_bounds_the_measured_peak():
    """Every feasible dx:toeplitz candidate of the stem-like layer (and LNC2) within its planned SBUF/PSUM."""
    g = GEOMS["stem-like"]
    for lnc in (1, 2):
        assert_candidates_within_budget(geom_shapes(g), lambda a: a.dx_method is DxMethod.TOEPLITZ, 6, lnc=lnc,
                                        **geom_kw(g))


def merged(u, merge, pair=-1, **more):
    """``toeplitz`` with the stride phases of the ``merge`` axes sharing M (U a multiple of the stride)."""
    return toeplitz(u, pair, dx_toeplitz_merge=merge, **more)


@pytest.mark.parametrize("name, u, merge, pair", [
    ("stem-like", (2, 4), (False, True), 0),     # the stem's choice: h phases on M, K pairs d; h tail
    ("stem-like", (3, 2), (False, True), 1),     # pairs along the merged axis (grid copy shifted by s rows)
    ("stem-like", (1, 6), (False, True), -1),
    ("c2-s3-dil", (3, 2), (True, False), 0),     # d merged (stride 3: U 3), pairs along it; h dilated
    ("c2-s3-dil", (3, 1), (True, False), -1),
    ("c5-k6x4x3", (2, 3), (True, True), 1),      # both merged (strides 2 and 3), tails on both
    ("c8-k2x3x7", (1, 4), (False, True), 0),     # d dilated, h stride 2 merged
    ("c1-k1x5x2", (2, 3), (False, False), 1),    # stride 1 everywhere: the phase mode (nothing to merge)
], ids=["stem-2x4h-pd", "stem-3x2h-ph", "stem-1x6h", "s3-3x2d-pd", "s3-3x1d", "c5-2x3dh-ph", "c8-1x4h-pd",
        "c1-plain"])
def test_toeplitz_merged_phases_are_exact(name, u, merge, pair):
    run_and_compare(**GEOMS[name], grads=("dx",), plan_edit=merged(u, merge, pair))


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_toeplitz_merged_other_dtypes(dtype):
    run_and_compare(**GEOMS["stem-like"], dtype=dtype, grads=("dx", "db"), plan_edit=merged((2, 4), (False, True), 0))


@pytest.mark.parametrize("grads", [("dx",), ("dx", "dw"), ("dx", "db"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_toeplitz_merged_with_every_gradient_subset(grads):
    run_and_compare(**GEOMS["c5-k6x4x3"], grads=grads, plan_edit=merged((2, 3), (True, True), 0))


@pytest.mark.parametrize("lnc, edit", [(1, {"dx_band": (2, 9)}), (1, {"dx_band": (1, 4), "dy_bufs": 1}),
                                       (2, {"dx_band": (2, 10)}), (2, {})],
                         ids=["d-bands", "dh-bands-one-buffer", "lnc2-bands", "lnc2"])
def test_toeplitz_merged_bands_and_lnc2(lnc, edit):
    """Bands starting at either H phase (phi 0 and 1), several batches, both programs."""
    run_and_compare(**GEOMS["stem-like"], lnc=lnc, plan_edit=merged((2, 4), (False, True), 0, **edit))


@pytest.mark.parametrize("c_in, u, merge, pair", [(64, (1, 2), (False, True), 0), (21, (2, 2), (False, True), 1),
                                                  (3, (1, 6), (False, True), 1)],
                         ids=["c64-1x2h", "c21-2x2h-ph", "c3-1x6h-ph"])
def test_toeplitz_merged_wide_c_in(c_in, u, merge, pair):
    """u-major partitions with merged W-stride-2 H phases (stride (1, 2, 2)), tails and pairs."""
    run_and_compare(batch=2, c_in=c_in, c_out=48, size=(4, 7, 5), kernel=(3, 3, 3), stride=(1, 2, 2),
                    padding=(1, 1, 1, 1, 1, 0), grads=("dx",), plan_edit=merged(u, merge, pair))


def w_mode(u, merge, uw, pair=-1, **more):
    """``merged`` with U_w w positions on M (one PSUM quadrant each)."""
    return toeplitz(u, pair, dx_toeplitz_merge=merge, dx_toeplitz_w=uw, **more)


@pytest.mark.parametrize("name, u, merge, uw, pair", [
    ("stem-like", (1, 10), (False, True), 4, 1),    # the stem's choice: W 4 (W 9: a w tail of 1), K pairs h
    ("stem-like", (1, 4), (False, True), 2, 2),     # K pairs along w (grid copy shifted by s_w z_w rows)
    ("stem-like", (1, 6), (False, True), 4, 0),     # K pairs along d; h tail
    ("stem-like", (1, 3), (False, False), 2, -1),   # h in phase mode
    ("c2-s3-dil", (1, 4), (False, False), 2, 1),    # d stride 3 (U_d 1), h dilated, w stride 2
    ("c1-k1x5x2", (1, 8), (False, False), 3, 2),    # stride 1 everywhere: W 3 of 6, pairs along w
    ("c8-k2x3x7", (1, 4), (False, False), 3, 1),    # C_in 8 (R 32), w stride 3
], ids=["stem-1x10-w4-ph", "stem-1x4-w2-pw", "stem-1x6-w4-pd", "stem-phase-h", "s3-w2", "c1-w3-pw", "c8-w3"])
def test_toeplitz_w_on_m_is_exact(name, u, merge, uw, pair):
    run_and_compare(**GEOMS[name], grads=("dx",), plan_edit=w_mode(u, merge, uw, pair))


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_toeplitz_w_on_m_other_dtypes(dtype):
    run_and_compare(**GEOMS["stem-like"], dtype=dtype, grads=("dx", "db"), plan_edit=w_mode((1, 4), (False, True), 4, 1))


@pytest.mark.parametrize("grads", [("dx",), ("dx", "dw"), ("dx", "db"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY], ids=["per-gradient", "shared"])
def test_toeplitz_w_on_m_with_every_gradient_subset(grads, strategy):
    if strategy is Strategy.SHARED_DY and "dw" not in grads:
        strategy = Strategy.PER_GRADIENT   # shared-dy exists only with dx and dw
    run_and_compare(**GEOMS["c5-k6x4x3"], grads=grads, plan_edit=w_mode((1, 6), (False, True), 2, 0, strategy=strategy))


@pytest.mark.parametrize("lnc, edit", [(1, {"dx_band": (2, 9)}), (1, {"dx_band": (1, 4), "dy_bufs": 1}),
                                       (2, {"dx_band": (2, 10)}), (2, {})],
                         ids=["d-bands", "dh-bands-one-buffer", "lnc2-bands", "lnc2"])
def test_toeplitz_w_on_m_bands_and_lnc2(lnc, edit):
    run_and_compare(**GEOMS["stem-like"], lnc=lnc, plan_edit=w_mode((1, 6), (False, True), 4, 1, **edit))


def test_toeplitz_w_on_m_two_c_out_tiles():
    """C_out > 128: both C_out tiles' matmuls accumulate in one bank (no K pairing)."""
    geom = dict(GEOMS["stem-like"], c_out=130)
    run_and_compare(**geom, grads=("dx",), plan_edit=w_mode((1, 4), (False, True), 2))


@pytest.mark.parametrize("c_out, edit", [
    (64, w_mode((1, 10), (False, True), 4, 1)),    # the stem's plan: VectorE copies, the first block's pairs split
    (64, w_mode((1, 4), (False, True), 2, 2)),     # pairs along w
    (32, w_mode((1, 6), (False, True), 4, 0)),     # C_out 32: the copies cross quadrants; pairs along d
    (64, merged((2, 4), (False, True), 0)),        # merged phases without W on M
    (32, toeplitz((2, 3), 1)),                     # phase mode
], ids=["c64-w4-ph", "c64-w2-pw", "c32-w4-pd", "c64-merged-pd", "c32-phase-ph"])
def test_toeplitz_vector_pair_copies(c_out, edit, monkeypatch):
    """C_out 32 / 64: the K-pair shifted copies (band and grids) are compute-engine copies across partition
    halves / quadrants (VectorE; the W-mode bf16 grid's on ScalarE, ``fast_grid``), and a program's first
    W-mode block runs some pairs unpaired (two items, LNC2 too)."""
    on_vector = spy(monkeypatch, nki_dx_toeplitz, "_pair_copy",
                    lambda g, dst, src, n, *engine: pair_copy_on_vector(g, n))
    geom = dict(GEOMS["stem-like"], c_out=c_out)
    run_and_compare(**geom, grads=("dx",), plan_edit=edit)
    run_and_compare(**geom, grads=("dx", "dw"), lnc=2, plan_edit=edit)
    assert on_vector and all(on_vector), on_vector   # every shifted copy ran on VectorE


def test_first_block_expansion_splits_pairs_on_the_stem():
    """The stem's pick splits some of its first block's pairs (its shifted copy is a VectorE copy)."""
    from conv3d_bwd.kernels.costs import TARGET_FIGURES
    from conv3d_bwd.kernels.dx_toeplitz import expand_offsets, first_block_expansion
    from conv3d_bwd.kernels.schedule import axis_bands
    shapes = ((2, 64, 16, 32, 32), (2, 3, 16, 64, 64), (3, 7, 7, 3, 64))   # dy, x, filters
    plan = plan_conv3d_bwd(*shapes, stride=(1, 2, 2), padding=(1, 1, 3, 3, 3, 3))
    assert plan.dx_toeplitz_w == 4 and plan.dx_toeplitz_pair == 1
    g = plan.geometry()
    bd, bh = axis_bands(g.axes[0], plan.dx_band[0])[0], axis_bands(g.axes[1], plan.dx_band[1])[0]
    ext = (max(b.extent for b in axis_bands(g.axes[0], plan.dx_band[0])), bh.extent,
           axis_bands(g.axes[2], g.axes[2].n)[0].extent)
    e, n, copy_ns = first_block_expansion(g, "trn2", plan.dx_toeplitz, plan.dx_toeplitz_merge, 4, 1, ext, bd, bh)
    mm_ns = n / TARGET_FIGURES["trn2"].tensor_ghz   # one matmul of the block (N = 384 > 64)
    # the fewest split pairs (each adds one matmul of 2 * mm_ns) that cover the copy: one fewer would not
    assert 0 < e and n == 384 and 2 * (e - 1) * mm_ns < copy_ns <= 2 * e * mm_ns
    offs = ((0, 0, 0, True), (0, 2, 0, True), (1, 5, 0, False))
    assert expand_offsets(offs, 1, 1) == [(1, 5, 0, False), (0, 0, 0, False), (0, 1, 0, False), (0, 2, 0, True)]


def test_toeplitz_w_on_m_unreached_phase():
    """H stride 3 with a 2-tap kernel: one H phase no tap reaches (its plane rows zeroed), in phase mode and
    merged, with W on M; and merged phases with every gradient."""
    geom = {"batch": 2, "c_in": 2, "c_out": 5, "size": (3, 8, 7), "kernel": (2, 2, 3), "stride": (1, 3, 2),
            "padding": (0, 1, 1, 0, 1, 1)}
    run_and_compare(**geom, grads=("dx",), plan_edit=w_mode((1, 4), (False, False), 2, -1))
    run_and_compare(**geom, grads=("dx",), plan_edit=w_mode((1, 3), (False, True), 2, 1))
    run_and_compare(**geom, grads=("dx", "dw", "db"), plan_edit=merged((2, 3), (False, True), 0))


# every D phase has one tap at most, with gaps (stride 4 > kernel 3): only the merged d phases save matmuls
ONE_TAP = {"batch": 2, "c_in": 4, "c_out": 8, "size": (13, 5, 6), "kernel": (3, 1, 1), "stride": (4, 1, 1),
           "padding": (1, 2, 0, 0, 0, 0)}


@pytest.mark.parametrize("u, pair", [((4, 1), 0), ((8, 1), -1), ((4, 2), 1)], ids=["4x1-pd", "8x1", "4x2-ph"])
def test_toeplitz_merged_one_tap_phases_are_exact(u, pair):
    run_and_compare(**ONE_TAP, plan_edit=merged(u, (True, False), pair))


def test_planner_offers_merged_toeplitz_for_one_tap_phases():
    """One-tap phases of a strided D axis are in the domain (its phases share M), with and without W on M
    (offered even where it saves no matmul: the estimate decides); stride 1 with one-tap spans stays out."""
    plan = plan_conv3d_bwd(*geom_shapes(ONE_TAP), **geom_kw(ONE_TAP))
    g = plan.geometry()
    assert not toeplitz_domain(g)
    assert toeplitz_w_options(g, (13, 5))
    tz = plan.feasible_candidates(where=lambda a: a.dx_method is DxMethod.TOEPLITZ)
    assert tz and all(a.dx_toeplitz_merge[0] for a in tz if not a.dx_toeplitz_w)
    w_mode_plans = [a for a in tz if a.dx_toeplitz_w]   # (U_d = 1: the d phases one at a time)
    assert w_mode_plans
    cheapest = min(w_mode_plans, key=lambda a: a.estimated_us)
    run_and_compare(**ONE_TAP, plan_edit=lambda _plan: cheapest)
    flat = dict(ONE_TAP, kernel=(1, 1, 3), stride=(1, 1, 2), padding=(0, 0, 0, 0, 1, 1))
    why = toeplitz_domain(plan_conv3d_bwd(*geom_shapes(flat), **geom_kw(flat)).geometry())
    assert "one-tap span" in why


def test_store_tail_runs_ci_major_stores_side_by_side():
    """A ci-major sub-box's stores (one channel each, disjoint in dx) overlap in the estimate's store tail:
    C_in stores one after the other would expose C_in - 1 DMA latencies beyond the first."""
    from conv3d_bwd.kernels.costs import TARGET_FIGURES
    from conv3d_bwd.kernels.dx_toeplitz import ci_major, store_dmas, store_tail_ns, toeplitz_work
    from conv3d_bwd.kernels.schedule import axis_bands
    g = plan_conv3d_bwd(*geom_shapes(ONE_TAP), **geom_kw(ONE_TAP)).geometry()
    hw, u, merge, band = TARGET_FIGURES["trn2"], (4, 1), (True, False), (12, 5)
    bd, bh, bw = (axis_bands(g.axes[a], n)[0] for a, n in enumerate(band + (g.axes[2].n,)))
    subs = toeplitz_work(g, (bd, bh, bw), u, merge)[-1].subs
    assert subs and all(ci_major(g, sub) and store_dmas(g, sub) == g.c_in for sub in subs)
    tail = store_tail_ns(g, hw, u, band, bd, bh, merge)
    assert 0 <= tail < (g.c_in - 1) * hw.dma_fixed_ns, tail


def quads(u, **more):
    """``toeplitz`` with K pairs along d and K quads (the h offset pairs share the matmuls too)."""
    return toeplitz(u, 0, dx_toeplitz_quad=True, **more)


# C_out <= 32: four band copies fit K; 3x3x3 stride 1 (the nnU-Net encoder's structure), tails on both axes
QUAD_GEOM = {"batch": 2, "c_in": 8, "c_out": 32, "size": (5, 7, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}


@pytest.mark.parametrize("c_out, u", [(32, (2, 2)), (32, (3, 2)), (16, (2, 3)), (8, (2, 2)), (20, (1, 2))],
                         ids=["c32-2x2", "c32-3x2", "c16-2x3", "c8-2x2-dma", "c20-1x2-dma"])
def test_toeplitz_quads_are_exact(c_out, u):
    """Quads, d pairs and single offsets in one sub-box (tails); copies on VectorE (2 C_out 32 / 64) or by
    DMA (2 C_out 16 / 40)."""
    run_and_compare(**dict(QUAD_GEOM, c_out=c_out), grads=("dx",), plan_edit=quads(u))


@pytest.mark.parametrize("lnc, grads", [(1, ("dx", "dw", "db")), (2, ("dx", "db"))], ids=["all", "lnc2"])
def test_toeplitz_quads_other_modes(lnc, grads):
    run_and_compare(**QUAD_GEOM, lnc=lnc, grads=grads, plan_edit=quads((2, 2), dx_band=(2, 7)))


def test_quad_offsets_cover_every_position_tap_pair_once():
    """Quads expanded to their four offsets (d pairs to two) meet every (u, t) pair of both axes once."""
    from conv3d_bwd.kernels.dx_toeplitz import quad_offsets
    from conv3d_bwd.kernels.geometry import Axis
    line = tap_line(Axis(n=9, k=3, s=1, r=1, lo=1, hi=1), 0)
    for ud_, uh_ in ((1, 1), (2, 2), (3, 2), (2, 5)):
        met = []
        for dd, dh, cp in quad_offsets((line, line), (ud_, uh_)):
            steps = {1: ((0, 0),), 2: ((0, 0), (1, 0)), 4: ((0, 0), (1, 0), (0, 1), (1, 1))}[cp]
            for sd, sh in steps:
                met += [(a, ta, b, tb) for a in range(ud_) for ta in line.shifts if a - ta == dd + sd
                        for b in range(uh_) for tb in line.shifts if b - tb == dh + sh]
        want = [(a, ta, b, tb) for a in range(ud_) for ta in line.shifts for b in range(uh_) for tb in line.shifts]
        assert sorted(met) == sorted(want), (ud_, uh_)


def test_planner_offers_quads_for_c_out_32():
    plan = plan_conv3d_bwd(*geom_shapes(QUAD_GEOM), **geom_kw(QUAD_GEOM))
    assert bool(plan.feasible_candidates(where=lambda a: a.dx_toeplitz_quad and 'K quads dh' in a.label))
    wide = dict(QUAD_GEOM, c_out=33)
    p2 = plan_conv3d_bwd(*geom_shapes(wide), **geom_kw(wide))
    assert not p2.feasible_candidates(where=lambda a: a.dx_toeplitz_quad)


@pytest.mark.parametrize("c_out, engines", [(32, {64: "dma", 96: "dma"}), (16, {32: "dma", 48: "dma"})],
                         ids=["c32", "c16"])
def test_toeplitz_quad_copies_run_side_by_side(c_out, engines):
    """Each quad copy of the dy band reads the first C_out partitions (none waits for another copy) and is
    an SBUF->SBUF DMA (VectorE places the band and makes the pair copy)."""
    from conv3d_bwd import nkisim
    from conv3d_bwd.kernels import conv3d_bwd
    from conv3d_bwd.kernels.plan import forced_plan

    from .support import assert_bitwise_equal, exact_inputs, oracle
    geom = dict(QUAD_GEOM, batch=1, c_out=c_out)
    kw = {"padding": geom["padding"], "compute_dw": False, "compute_db": False}
    dy, x, w = exact_inputs(geom["batch"], geom["c_in"], c_out, geom["size"], geom["kernel"], padding=geom["padding"])
    plan = plan_conv3d_bwd(dy.shape, x.shape, w.shape, **kw)
    with forced_plan(quads((2, 2))(plan)):
        res = nkisim.run(conv3d_bwd, dy, x, w, **kw)
    assert_bitwise_equal(("dx",), res, oracle(dy, x, w, "bf16", **kw), "bf16")
    for start, engine in engines.items():
        copies = [i for i in res.trace if i.op in ("tensor_copy", "dma_copy")
                  and any(a.write and a.buffer == "sbuf" and a.partition_start == start and a.partitions == c_out
                          for a in i.accesses)
                  and all(a.partition_start == 0 for a in i.accesses if not a.write)]
        # (the tap grids' copies, made once, are VectorE's or a DMA)
        assert engine in {i.engine for i in copies}, (start, {i.engine for i in copies})
