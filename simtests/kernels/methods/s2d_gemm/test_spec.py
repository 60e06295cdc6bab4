"""kernels/methods/s2d_gemm/spec.py: the class rules, the loops' coverage, and the work list and pools
against what the body really issues and allocates (nkisim's trace)."""
from collections import Counter

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.methods.s2d_gemm import spec

from .support import run_exact, s2d_plan, tube


def _geom(batch, c_in, c_out, size, kernel, stride=None, padding=(0,) * 6, dilation=(1, 1, 1)):
    stride = stride or kernel
    o = tuple((n + padding[2 * a] + padding[2 * a + 1] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
              for a, n in enumerate(size))
    return validate((batch, c_out) + o, (batch, c_in) + size, kernel + (c_in, c_out), stride, padding, dilation,
                    "bf16")


@pytest.mark.parametrize("kw, words", [
    ({"stride": (2, 2, 1)}, "stride 1 on W must equal the kernel 2"),
    ({"padding": (0, 0, 1, 1, 0, 0)}, "padding (1, 1) on H must be 0"),
    ({"size": (4, 5, 4)}, "input size 5 on H must be a multiple of the kernel 2"),
    ({"kernel": (1, 1, 1), "size": (4, 4, 4)}, "1x1x1"),
    ({"kernel": (1, 1, 130), "size": (1, 1, 260)}, "K_w 130 must be <= 128"),
])
def test_the_class_rules_are_named(kw, words):
    args = {"size": (4, 4, 4), "kernel": (2, 2, 2)} | kw
    g = _geom(1, 3, 8, args["size"], args["kernel"], args.get("stride"), args.get("padding", (0,) * 6))
    assert words in spec.applies(g)


def test_dilation_is_outside_the_class():
    g = _geom(1, 3, 8, (4, 4, 4), (2, 2, 2), (2, 2, 2), dilation=(1, 1, 2))
    assert "dilation 2 on W must be 1" in spec.applies(g)


def test_compact_merges_continuing_dims_and_drops_single_ones():
    assert spec.compact([[100, 4], [50, 1], [8, 3], [1, 8]]) == [[100, 4], [1, 24]]
    assert spec.compact([[7, 1], [40, 1], [10, 4], [1, 5]]) == [[7, 1], [10, 4], [1, 5]]


def test_a_tubelet_is_in_the_class():
    assert spec.applies(_geom(1, 3, 768, (16, 224, 224), (2, 16, 16))) == ""


@pytest.mark.parametrize("batch, out, kernel", [(2, (3, 50, 2), (1, 2, 3)), (2, (1, 130, 2), (2, 1, 1)),
                                                (2, (8, 14, 14), (2, 16, 16)), (2, (2, 2, 2), (1, 24, 24)),
                                                (14, (2, 5, 3), (2, 2, 2))])
def test_the_loops_cover_every_row_and_patch_element_once(batch, out, kernel):
    g = _geom(batch, 3, 8, tuple(o * k for o, k in zip(out, kernel)), kernel)
    rows = Counter(t.row(i) for t in spec.row_tiles(g) for i in range(t.rows))
    assert all(t.rows <= spec.PMAX for t in spec.row_tiles(g))
    assert set(rows.values()) == {1} and len(rows) == batch * out[0] * out[1]
    kc = g.c_in * g.taps
    for lnc in (1, 2):
        dw_kc, dx_kc = Counter(), Counter()
        for pid in range(lnc):
            for c in spec.dw_chunks(g, lnc, pid):
                assert spec.chunk_size(g, c) <= spec.PMAX
                first = spec.chunk_offset(g, c, 0)
                dw_kc.update(range(first, first + spec.chunk_size(g, c)))
            for unit in spec.dx_units(g, lnc, pid):
                for c in unit:
                    assert spec.chunk_size(g, c) <= spec.MOVING_MAX
                    first = spec.chunk_offset(g, c, 0)
                    dx_kc.update(range(first, first + spec.chunk_size(g, c)))
        assert set(dw_kc) == set(dx_kc) == set(range(kc)) and set(dw_kc.values()) == set(dx_kc.values()) == {1}


@pytest.mark.parametrize("lnc, group, grads", [(1, None, ("dx", "dw", "db")), (1, 1, ("dx", "dw", "db")),
                                               (2, None, ("dx", "dw", "db")), (2, 1, ("dw", "db")),
                                               (1, None, ("dx",))], ids=str)
def test_the_work_list_is_what_the_body_issues(lnc, group, grads):
    """Op by op, the spec's instruction counts equal the trace's (so the estimate costs what runs), and
    the pools bound the body's peak SBUF and PSUM."""
    geom = tube(14, 2, 12, (2, 5, 3), (2, 2, 2))   # two row tiles of whole batches (12 and 2)
    plan = s2d_plan(geom, lnc=lnc, grads=grads, group=group)
    res = run_exact(geom, lnc=lnc, grads=grads, plan=plan)
    g = plan.geometry()
    flags = tuple(n in grads for n in ("dx", "dw", "db"))
    listed = Counter()
    for pid in range(lnc):
        for w in spec.work_list(g, spec.S2dOptions(plan.s2d_group), lnc, pid, *flags):
            listed[w.op] += w.count
    assert dict(listed) == dict(res.summary.instr_counts)
    parts = spec.sbuf_parts(g, spec.S2dOptions(plan.s2d_group), lnc, *flags)
    assert res.summary.peak_sbuf_bytes_per_partition <= sum(parts.values())
    assert res.summary.peak_psum_banks <= sum(spec.psum_budget(g, flags[0], flags[1]).values())
