"""The kernel under nkisim against the float64 oracle, exact mode (bit-exact), over the method paths."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import Conv3dBwdInputError, conv3d_bwd
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.plan.problem import gather_dx_method

from .support import (
    BUDGET_SWEEPS,
    DTYPES,
    GRADS,
    assert_candidates_within_budget,
    exact_inputs,
    geom_kw,
    geom_shapes,
    run_and_compare,
    spy,
)

GEOMETRIES = [
    pytest.param({"batch": 1, "c_in": 8, "c_out": 8, "size": (4, 4, 4), "kernel": (3, 3, 3), "padding": (1,) * 6}, id="k333-p1"),
    pytest.param({"batch": 2, "c_in": 5, "c_out": 7, "size": (5, 6, 7), "kernel": (3, 2, 3), "stride": (2, 1, 3),
                      "padding": (1, 0, 0, 1, 2, 1), "dilation": (1, 2, 1)}, id="mixed-stride-asym"),
    pytest.param({"batch": 1, "c_in": 3, "c_out": 4, "size": (6, 5, 9), "kernel": (2, 3, 3), "stride": (2, 2, 2),
                      "padding": (0, 1, 1, 0, 2, 2), "dilation": (2, 1, 1)}, id="s222-dil"),
    pytest.param({"batch": 1, "c_in": 4, "c_out": 3, "size": (3, 3, 3), "kernel": (1, 1, 1)}, id="pointwise"),
    pytest.param({"batch": 2, "c_in": 4, "c_out": 3, "size": (4, 5, 6), "kernel": (1, 1, 1), "stride": (2, 2, 1)},
                 id="pointwise-strided"),
    pytest.param({"batch": 1, "c_in": 130, "c_out": 140, "size": (2, 3, 4), "kernel": (2, 2, 2),
                      "padding": (1, 0, 0, 1, 1, 1)}, id="channels-not-x128"),
    pytest.param({"batch": 1, "c_in": 6, "c_out": 5, "size": (7, 4, 5), "kernel": (3, 1, 1), "stride": (4, 1, 1),
                      "padding": (2, 2, 0, 0, 0, 0)}, id="k311-s4"),
    pytest.param({"batch": 2, "c_in": 4, "c_out": 4, "size": (2, 3, 1), "kernel": (3, 3, 3), "stride": (1, 3, 1),
                      "padding": (3, 3, 2, 2, 3, 3), "dilation": (3, 2, 3)}, id="unreached-rows"),
    pytest.param({"batch": 1, "c_in": 2, "c_out": 3, "size": (1, 9, 9), "kernel": (1, 7, 7), "stride": (1, 2, 2),
                      "padding": (0, 0, 3, 3, 3, 3)}, id="k177-s2"),
    pytest.param({"batch": 1, "c_in": 3, "c_out": 2, "size": (5, 5, 5), "kernel": (3, 3, 3), "stride": (3, 3, 3)},
                 id="stride-eq-kernel"),
    pytest.param({"batch": 1, "c_in": 2, "c_out": 2, "size": (4, 4, 4), "kernel": (2, 2, 2), "stride": (4, 4, 4)},
                 id="stride-gt-kernel"),
]


@pytest.mark.parametrize("geom", GEOMETRIES)
def test_exact_bf16(geom):
    run_and_compare(**geom)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_exact_other_dtypes(dtype):
    run_and_compare(batch=1, c_in=4, c_out=6, size=(4, 5, 4), kernel=(3, 3, 2), stride=(1, 2, 1),
                    padding=(1, 1, 1, 0, 0, 1), dtype=dtype)


@pytest.mark.parametrize("grads", [("dx",), ("dw",), ("db",), ("dx", "dw"), ("dx", "db"), ("dw", "db"),
                                   ("dx", "dw", "db")], ids=lambda g: "+".join(g))
def test_every_gradient_subset(grads):
    run_and_compare(batch=2, c_in=4, c_out=5, size=(3, 4, 5), kernel=(3, 3, 3), stride=(1, 2, 1),
                    padding=(1, 1, 1, 1, 0, 2), grads=grads)


@pytest.mark.parametrize("geom", [GEOMETRIES[0], GEOMETRIES[1], GEOMETRIES[3]])
def test_lnc2_matches(geom):
    run_and_compare(lnc=2, **geom)


def test_lnc2_with_fewer_work_items_than_programs():
    run_and_compare(batch=1, c_in=3, c_out=3, size=(1, 3, 3), kernel=(1, 3, 3), padding=(0, 0, 1, 1, 1, 1), lnc=2)


def test_every_feasible_candidate_is_exact():
    geom = {"batch": 2, "c_in": 5, "c_out": 6, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1),
                "padding": (1, 0, 1, 1, 0, 2), "dilation": (1, 2, 1)}
    dy, x, w = exact_inputs(**geom)
    plan = plan_conv3d_bwd(dy.shape, x.shape, w.shape, stride=geom["stride"], padding=geom["padding"],
                           dilation=geom["dilation"])
    alts = plan.feasible_candidates()
    assert len(alts) >= 4
    # every method and strategy at least once, then evenly spaced others (keeps the test short)
    chosen, seen = [], set()
    for alt in alts:
        if not alt.methods() <= seen:
            chosen.append(alt)
            seen |= alt.methods()
    chosen += [a for a in alts[::max(1, len(alts) // 6)] if a not in chosen]
    methods = set()
    for alt in chosen:
        methods |= alt.methods()
        run_and_compare(**geom, plan_edit=lambda _p, alt=alt: alt)
    assert {"strategy:shared_dy", "strategy:per_gradient", "db:fold", "db:standalone"} <= methods


@pytest.mark.parametrize("edit", [
    {"dx_band": (1, 2), "dw_band": (1, 1)},
    {"dx_band": (2, 1), "dw_band": (2, 1), "dx_ci_outer": True, "dx_ci_tile": 2, "dw_ci_range": 2, "dw_ci_tile": 2},
    {"dx_band": (1, 1), "dw_band": (1, 2), "dw_co_chunk": 1, "dy_bufs": 1},
], ids=["bands", "ci-outer-ranges", "tiny-bands"])
@pytest.mark.parametrize("strategy_shared", [False, True], ids=["per-gradient", "shared"])
def test_banded_and_tiled_plans_are_exact(edit, strategy_shared):
    from conv3d_bwd.kernels.plan import Strategy

    def apply(p):
        e = dict(edit)
        if strategy_shared:
            e = {k: v for k, v in e.items() if k not in ("dx_ci_outer", "dx_ci_tile", "dw_ci_range")}
            e["strategy"] = Strategy.SHARED_DY
        return dataclasses.replace(p, dx_method=gather_dx_method(p.geometry()), **e)

    run_and_compare(batch=2, c_in=5, c_out=4, size=(5, 6, 5), kernel=(3, 3, 2), stride=(1, 2, 1),
                    padding=(1, 1, 2, 0, 1, 0), dilation=(2, 1, 1), plan_edit=apply)
    run_and_compare(batch=1, c_in=4, c_out=4, size=(5, 6, 5), kernel=(3, 3, 3), padding=(1,) * 6,
                    lnc=2, plan_edit=apply)


def test_results_are_bitwise_deterministic():
    dy, x, w = exact_inputs(1, 6, 5, (4, 4, 4), (3, 3, 3), padding=(1,) * 6, seed=3)
    rng = np.random.default_rng(7)
    dy = rng.standard_normal(dy.shape).astype(dy.dtype)   # non-exact data: order matters
    a = nkisim.run(conv3d_bwd, dy, x, w, padding=(1,) * 6).outputs
    b = nkisim.run(conv3d_bwd, dy, x, w, padding=(1,) * 6).outputs
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint16), v.view(np.uint16))


@pytest.mark.parametrize("shape_kw", [
    {"batch": 1, "c_in": 8, "c_out": 8, "size": (2, 200, 200), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 1, "c_in": 8, "c_out": 8, "size": (200, 48, 48), "kernel": (3, 3, 3), "stride": (2, 2, 2), "padding": (1,) * 6},
], ids=["wide-plane", "deep"])
def test_large_spatial_sizes_fit_capacity(shape_kw):
    s, p = shape_kw.get("stride", (1, 1, 1)), shape_kw["padding"]
    dy, x, w = (nkisim.TensorSpec(sh, "bfloat16") for sh in geom_shapes(shape_kw))
    res = nkisim.run(conv3d_bwd, dy, x, w, stride=s, padding=p, trace_only=True)
    # bytes per partition of x and dy resident at once (channels on partitions): beyond SBUF, so it must band
    working_set = 2 * (np.prod(x.shape[2:]) + np.prod(dy.shape[2:]))
    assert working_set > 212_984
    assert 0 < res.peak_sbuf_bytes_per_partition <= 212_984
    assert res.peak_psum_banks <= 8


def _arrays(dtypes=("bf16", "bf16", "bf16")):
    dy, x, w = exact_inputs(1, 2, 2, (3, 3, 3), (3, 3, 3))
    return dy.astype(DTYPES[dtypes[0]]), x.astype(DTYPES[dtypes[1]]), w.astype(DTYPES[dtypes[2]])


@pytest.mark.parametrize("args, kwargs, match", [
    (_arrays(("bf16", "fp32", "bf16")), {}, "dtypes"),
    (_arrays(), {"stride": (1, 0, 1)}, "stride"),
    (_arrays(), {"padding": (1, 1, 1)}, "padding"),
    (_arrays(), {"dilation": (1, 1, 1.5)}, "dilation"),
    (_arrays(), {"compute_dx": False, "compute_dw": False, "compute_db": False}, "at least one"),
    (_arrays(), {"padding": (1,) * 6}, "dy spatial"),
])
def test_kernel_validates_before_work(args, kwargs, match):
    with pytest.raises(Conv3dBwdInputError, match=match):
        nkisim.run(conv3d_bwd, *args, **kwargs)
    assert issubclass(Conv3dBwdInputError, ValueError)


def test_int_dtype_is_rejected():
    dy, x, w = _arrays()
    with pytest.raises(Conv3dBwdInputError, match="dtype"):
        nkisim.run(conv3d_bwd, dy.astype(np.int32), x.astype(np.int32), w.astype(np.int32))


@pytest.mark.parametrize("geom", [
    {"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 2, "c_in": 32, "c_out": 96, "size": (4, 12, 12), "kernel": (3, 3, 3), "stride": (2, 2, 2), "padding": (1,) * 6},
    # 64 output rows per batch (two row chunks of 64 per program)
    {"batch": 2, "c_in": 72, "c_out": 72, "size": (8, 8, 4), "kernel": (3, 3, 3), "padding": (1,) * 6},
], ids=["c64", "s2", "rows64"])
@pytest.mark.parametrize("sweep", BUDGET_SWEEPS)
def test_planner_budget_bounds_the_measured_peak(geom, sweep):
    """The feasible candidates (a pairwise cover of their choices; every one in the nightly sweep) run without
    a rule violation, within the SBUF/PSUM the planner counted."""
    assert_candidates_within_budget(geom_shapes(geom), sweep=sweep, **geom_kw(geom))


@pytest.mark.parametrize("regions, geom", [
    (2, {"batch": 2, "c_in": 5, "c_out": 7, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}),
    (4, {"batch": 3, "c_in": 30, "c_out": 20, "size": (5, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 2),
         "padding": (1, 0, 0, 1, 2, 1), "dilation": (1, 2, 1)}),
    # one item in a pack of 4: the idle regions must be zeroed (0 * NaN would poison the busy one)
    (4, {"batch": 1, "c_in": 3, "c_out": 32, "size": (3, 3, 4), "kernel": (3, 3, 3), "stride": (4, 3, 3),
         "padding": (1, 3, 0, 1, 1, 1), "dilation": (3, 1, 2)}),
], ids=["R2", "R4-strided", "R4-partial-pack"])
@pytest.mark.parametrize("variant", ["per-gradient", "shared-banded", "lnc2"])
def test_region_packed_dx_is_exact(regions, geom, variant):
    from conv3d_bwd.kernels.plan import Strategy

    def apply(p):
        edit = {"dx_regions": regions, "dx_method": gather_dx_method(p.geometry())}
        if variant != "per-gradient":
            edit.update(strategy=Strategy.SHARED_DY, dx_band=(1, geom["size"][1]))
        return dataclasses.replace(p, **edit)

    run_and_compare(**geom, lnc=2 if variant == "lnc2" else 1, plan_edit=apply)


@pytest.mark.parametrize("regions, geom", [
    (2, {"batch": 2, "c_in": 5, "c_out": 64, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}),
    (4, {"batch": 4, "c_in": 6, "c_out": 32, "size": (3, 4, 5), "kernel": (3, 2, 3), "padding": (1, 0, 1, 1, 0, 2)}),
], ids=["R2-full", "R4-full"])
def test_full_region_packs_share_one_fill_and_stay_exact(regions, geom, monkeypatch):
    """Regions filling all 128 partitions with one layout share the border memsets and placement."""
    from conv3d_bwd.kernels import nki_dx
    calls = spy(monkeypatch, nki_dx, "load_padded_regions", lambda *args, **kwargs: len(args[4]))
    run_and_compare(**geom, plan_edit=lambda p: dataclasses.replace(p, dx_regions=regions,
                                                                    dx_method=gather_dx_method(p.geometry())))
    assert calls and all(n == regions for n in calls), calls


@pytest.mark.parametrize("batch, c_in, c_out, size, lnc, split", [
    (2, 5, 7, (3, 4, 5), 1, "positions"), (2, 130, 600, (3, 4, 5), 1, "positions"),
    (3, 260, 70, (2, 4, 5), 2, "positions"), (3, 260, 70, (2, 4, 5), 2, "channels"),
    (1, 5, 7, (3, 4, 5), 2, "positions"), (1, 5, 7, (3, 4, 5), 2, "channels")])
@pytest.mark.parametrize("grads", [GRADS, ("dw", "db"), ("dw",)], ids=lambda g: "+".join(g))
def test_pointwise_dma_gemm_dw_is_exact(batch, c_in, c_out, size, lnc, split, grads):
    from conv3d_bwd.kernels.plan import DwMethod

    def pick(p):
        # (per gradient: the shared-dy variant has its own tests, test_pw_shared.py)
        alts = p.feasible_candidates(where=lambda a: a.dw_method is DwMethod.DMA_GEMM and a.dw_split == split
                                     and (a.strategy.value == 'per_gradient'))
        assert alts, p.explain()
        return alts[0]

    run_and_compare(batch, c_in, c_out, size, (1, 1, 1), lnc=lnc, grads=grads, plan_edit=pick)


@pytest.mark.parametrize("method, geom", [
    ("row_pack", {"batch": 1, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6}),
    ("tap_pack", {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1),
                  "padding": (1, 0, 0, 1, 1, 1)}),
    ("tap_gemm", {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 2, 3), "stride": (2, 1, 1),
                  "padding": (1, 0, 0, 1, 1, 1)}),
])
def test_lnc2_tap_split_is_exact(method, geom):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_split == 'taps' and a.dw_method.value == method)
        assert alts, p.explain()
        return alts[0]

    run_and_compare(**geom, lnc=2, plan_edit=pick)
