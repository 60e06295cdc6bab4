"""kernels/methods/dw_kd_moving/spec.py: the class rules, the loops' coverage, and the work list and pools
against what the body really issues and allocates (nkisim's trace)."""
from collections import Counter

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.methods.dw_kd_moving import spec

from ...support import assert_budget_bounds_peak, geom_shapes
from .support import kd_plan, run_exact


def _geom(batch=1, c_in=8, c_out=8, size=(4, 6, 6), kernel=(3, 3, 3), dtype="bf16", **kw):
    geom = {"batch": batch, "c_in": c_in, "c_out": c_out, "size": size, "kernel": kernel,
            "padding": kw.pop("padding", (1,) * 6), **kw}
    return validate(*geom_shapes(geom), geom.get("stride", (1, 1, 1)), geom["padding"],
                    geom.get("dilation", (1, 1, 1)), dtype)


@pytest.mark.parametrize("kw, lnc, target, words", [
    ({"dtype": "fp32"}, 1, "trn2", "a 2-byte dtype on trn2/trn3"),
    ({}, 1, "trn1", "a 2-byte dtype on trn2/trn3"),
    ({}, 3, "trn2", "lnc 3 must be 1 or 2"),
    ({"kernel": (1, 3, 3), "padding": (0, 0, 1, 1, 1, 1)}, 1, "trn2", "K_d must be >= 2"),
    ({"stride": (2, 1, 1)}, 1, "trn2", "stride 2 on D must be 1"),
    ({"c_in": 130}, 1, "trn2", "C_in 130 must be <= 128"),
    ({"c_out": 200}, 1, "trn2", "K_d x C_out = 600 must be <= 512"),
    ({"size": (4, 130, 4)}, 1, "trn2", "H_out 130 must be <= 128"),
    ({"c_in": 40, "kernel": (3, 3, 7), "padding": (1, 1, 1, 1, 3, 3)}, 1, "trn2", "accumulators"),
])
def test_the_class_rules_are_named(kw, lnc, target, words):
    assert words in spec.applies(_geom(**kw), lnc, target)


def test_a_small_channel_layer_is_in_the_class():
    assert spec.applies(_geom(2, 32, 32, (64, 64, 64)), 1, "trn2") == ""


@pytest.mark.parametrize("kw", [{}, {"size": (5, 40, 7)}, {"size": (7, 9, 9), "stride": (1, 2, 2)},
                                {"dilation": (2, 2, 1), "padding": (2, 2, 2, 2, 1, 1), "size": (6, 7, 5)},
                                {"padding": (2, 0, 1, 1, 1, 1)}], ids=str)
def test_every_x_row_and_every_kd_plane_pair_is_covered_once(kw):
    """Each (batch, x plane, kh, h_o) row that exists lands on exactly one partition of one x^T transfer,
    and each slot's dy^T rows are that plane's dy plane (or zeros exactly where that plane is padding)."""
    g = _geom(2, **kw)
    d, h = g.axes[0], g.axes[1]
    xrows = Counter()
    for c in spec.chunks(g):
        assert c.nd * h.o <= spec.PMAX
        for kh in range(h.k):
            final = {}   # partition -> what its last writer leaves there: an x row or zero (None)
            for r in spec.xt_runs(g, c, kh):
                for i in range(r.rows):
                    final[r.p0 + i] = None if r.src_row < 0 else r.src_row + i * h.s
            for p, src in final.items():
                j, ho = divmod(p, h.o)
                if src is not None:
                    assert src == (c.d0 + j) * h.n + ho * h.s + kh * h.r - h.lo
                    xrows[(c.b, c.d0 + j, kh, ho)] += 1
                else:
                    assert not 0 <= ho * h.s + kh * h.r - h.lo < h.n
        for kd in range(d.k):
            rows = Counter()
            for r in spec.dyt_runs(g, c, kd):
                for i in range(r.rows):
                    j, ho = divmod(r.p0 + i, h.o)
                    rows[r.p0 + i] += 1
                    o = c.d0 + j + d.lo - kd * d.r
                    assert (r.src_row >= 0) == (0 <= o < d.o)
                    if r.src_row >= 0:
                        assert r.src_row + i == o * h.o + ho
            assert set(rows) == set(range(c.nd * h.o)) and set(rows.values()) == {1}
    want = {(b, x, kh, ho) for b in range(g.batch) for x in range(d.n) for kh in range(h.k) for ho in range(h.o)
            if 0 <= ho * h.s + kh * h.r - h.lo < h.n}
    assert set(xrows) == want and set(xrows.values()) == {1}


@pytest.mark.parametrize("geom", [
    {"batch": 2, "c_in": 8, "c_out": 8, "size": (5, 40, 6), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 1, "c_in": 64, "c_out": 16, "size": (4, 5, 6), "kernel": (2, 3, 3), "padding": (1, 0, 1, 1, 0, 0)},
], ids=["two-chunks", "kw-groups"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_the_work_list_is_what_the_body_issues(geom, lnc):
    """Op by op, the spec's instruction counts (both programs') equal the trace's (so the estimate costs
    what runs), and the pools bound the body's peak SBUF and PSUM (dw alone: nothing else runs)."""
    res = run_exact(geom, grads=("dw",), lnc=lnc)
    g = kd_plan(geom, grads=("dw",), lnc=lnc).geometry()
    listed = Counter()
    for pid in range(lnc):
        for w in spec.work_list(g, lnc, pid):
            listed[w.op] += w.count
    assert dict(listed) == dict(res.summary.instr_counts)
    assert res.summary.peak_sbuf_bytes_per_partition <= sum(spec.sbuf_parts(g, lnc).values())
    assert res.summary.peak_psum_banks <= spec.psum_banks(g) + spec.PSUM_TRANSPOSE_BANKS



@pytest.mark.parametrize("lnc", [1, 2])
def test_the_plans_budget_bounds_the_traced_peaks(lnc):
    """Trace-only, all three gradients: the planner's SBUF and PSUM figures of the method's plan (dw's
    pools beside db's accumulators, then dx's) bound what the kernel really holds."""
    geom = {"batch": 1, "c_in": 32, "c_out": 32, "size": (6, 64, 8), "kernel": (3, 3, 3), "padding": (1,) * 6}
    assert_budget_bounds_peak(kd_plan(geom, lnc=lnc), geom_shapes(geom), padding=geom["padding"], lnc=lnc)
