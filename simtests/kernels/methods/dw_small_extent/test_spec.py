"""kernels/methods/dw_small_extent/spec.py: the class rules, the loops' coverage, and the work list and
pools against what the body really issues and allocates (nkisim's trace)."""
from collections import Counter

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.methods.dw_small_extent import spec

from ...support import geom_shapes
from .support import run_exact, small, small_plan


def _geom(gd, dtype="bf16"):
    dy, x, w = geom_shapes(gd)
    return validate(dy, x, w, gd["stride"], gd["padding"], gd["dilation"], dtype)


def test_wide_rows_are_outside_the_class():
    assert "W_out 130 must be <= 128" in spec.applies(_geom(small(1, 4, 4, (1, 1, 130), kernel=(1, 1, 1),
                                                                 padding=(0,) * 6)))


def test_many_positions_are_outside_the_class():
    # 2 x 16 x 16 x 16 = 8192 positions: 64 tiles
    assert "64 position tiles of the whole batch exceed 16" in spec.applies(_geom(small(2, 4, 4, (16, 16, 16))))


@pytest.mark.parametrize("gd", [small(2, 512, 512, (2, 7, 7)), small(2, 320, 320, (4, 4, 4)),
                                small(2, 256, 256, (4, 14, 14))], ids=["r3d18_layer4", "nnunet_bottle", "r3d18_layer3"])
def test_the_few_position_layers_are_in_the_class(gd):
    assert spec.applies(_geom(gd)) == ""


@pytest.mark.parametrize("gd", [small(2, 8, 16, (2, 3, 4)), small(2, 16, 8, (3, 11, 12), kernel=(1, 3, 3)),
                                small(3, 130, 8, (5, 7, 6), stride=(2, 2, 2)), small(5, 3, 3, (1, 13, 130),
                                                                                    kernel=(1, 1, 3), padding=(0,) * 6)],
                         ids=["one-tile", "h-pieces", "c_in-130", "w-128"])
def test_the_loops_cover_every_position_and_filter_row_once(gd):
    g = _geom(gd)
    od, oh, ow = g.out_size
    seen = Counter()
    for t in spec.pos_tiles(g):
        assert t.size(ow) <= spec.PMAX
        seen.update((b, d, h) for b in range(t.b, t.b + t.nb) for d in range(t.d0, t.d0 + t.nd)
                    for h in range(t.h0, t.h0 + t.nh))
    assert set(seen.values()) == {1} and len(seen) == g.batch * od * oh
    for lnc in (1, 2):
        rows = Counter()
        for pid in range(lnc):
            cs = spec.chunks(g, lnc, pid)
            for c in cs:
                assert c.m <= spec.PMAX
                rows.update(range(spec.chunk_row(g, c), spec.chunk_row(g, c) + c.m))
            for st in spec.stores(cs):   # a store unit is one contiguous block of dw's rows
                first = spec.chunk_row(g, cs[st[0]])
                assert [spec.chunk_row(g, cs[i]) for i in st] == [first + k * cs[st[0]].m for k in range(len(st))]
        assert set(rows.values()) == {1} and set(rows) == set(range(g.taps * g.c_in))


@pytest.mark.parametrize("lnc, grads, dtype", [(1, ("dw", "db"), "bf16"), (1, ("dw",), "fp32"),
                                               (2, ("dw", "db"), "bf16")], ids=str)
def test_the_work_list_is_what_the_body_issues(lnc, grads, dtype):
    """Op by op, the spec's instruction counts equal the trace's (so the estimate costs what runs), and
    the pools bound the body's peak SBUF and PSUM (with the kernel's shared transpose pool)."""
    gd = small(2, 16, 8, (3, 11, 12), kernel=(1, 3, 3), padding=(0, 0, 1, 1, 1, 1))
    plan = small_plan(gd, dtype=dtype, lnc=lnc, grads=grads)
    res = run_exact(gd, dtype=dtype, lnc=lnc, grads=grads, plan=plan)
    g = plan.geometry()
    listed = Counter()
    for pid in range(lnc):
        for w in spec.work_list(g, lnc, pid, "db" in grads):
            listed[w.op] += w.count
    assert dict(listed) == dict(res.summary.instr_counts)
    parts = spec.sbuf_parts(g, lnc, "db" in grads)
    assert res.summary.peak_sbuf_bytes_per_partition <= sum(parts.values())
    assert res.summary.peak_psum_banks <= spec.psum_peak("db" in grads) + 3
