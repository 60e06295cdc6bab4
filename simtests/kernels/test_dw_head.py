"""The start of dw (its dy box loaded per row chunk, dx's filters issued after the first chunk's loads) and
the x^T zero rows written by GpSimd memsets: bit-exact via forced plans, the orders and splits as intended."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd, nki_dw_xt
from conv3d_bwd.kernels.plan import DwMethod, DxMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import filters_after_first_chunk
from conv3d_bwd.kernels.xt_rows import ZERO_MEMSET_MIN_ROWS, XtRun, _engine_partitions_ok, zero_split

from .support import run_and_compare, spy


def test_zero_split_keeps_engine_partition_rules():
    for p0 in range(128):
        for rows in range(1, 129 - p0):
            dma, mem = zero_split(XtRun(p0, rows))
            parts = [r for r in (dma, mem) if r is not None]
            # the parts tile the run, the memset part is legal for a compute engine and long enough
            assert parts and parts[0].p0 == p0 and sum(r.rows for r in parts) == rows
            if len(parts) == 2:
                assert parts[0].p0 + parts[0].rows == parts[1].p0
            if mem is not None:
                assert _engine_partitions_ok(mem.p0, mem.rows) and mem.rows >= ZERO_MEMSET_MIN_ROWS
    assert zero_split(XtRun(0, 32)) == (None, XtRun(0, 32))          # a D-padding plane at the top
    assert zero_split(XtRun(95, 33)) == (XtRun(95, 1), XtRun(96, 32))  # an H row, then the bottom plane
    assert zero_split(XtRun(31, 2)) == (XtRun(31, 2), None)           # short: DMA
    assert zero_split(XtRun(33, 40)) == (XtRun(33, 40), None)         # 40 rows from 64: not allowed


@pytest.fixture
def memsets(monkeypatch):
    """Counts the zero runs written by GpSimd memsets (so a test knows the path ran)."""
    return spy(monkeypatch, nki_dw_xt.RowXtDma, "_memset_rows", lambda self, xt, run: run)


def _row_xt(xs=True, where=lambda a: True, **edit):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_method is DwMethod.ROW_PACK and a.dw_xt_dma
                                     and (a.dw_x_stationary is xs) and (a.strategy is Strategy.PER_GRADIENT)
                                     and (not a.dw_dyt_dma) and where(a))
        assert alts, p.explain()
        return dataclasses.replace(alts[0], **edit)
    return pick


@pytest.mark.parametrize("xs", [True, False], ids=["xstat", "dwT"])
@pytest.mark.parametrize("geom", [
    # D padding 1 and 2 (dilation 2): whole zero planes at the top and the bottom of the row chunks
    # (x columns x C_in > xt_rows.ZERO_MEMSET_MAX: tinier tiles zero all their rows in one memset instead)
    {"batch": 2, "c_in": 24, "c_out": 6, "size": (4, 32, 24), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 1, "c_in": 20, "c_out": 64, "size": (5, 16, 28), "kernel": (3, 3, 3), "padding": (2,) * 6,
     "dilation": (2, 2, 2)},
    # C_in 130: a partial C_in tile (the memset zeroes every channel slot of its rows)
    {"batch": 1, "c_in": 130, "c_out": 6, "size": (3, 32, 6), "kernel": (3, 3, 3), "padding": (1,) * 6},
], ids=["p1", "dil2-p2", "cin130"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_zero_planes_by_memset_are_exact(geom, xs, dtype, memsets):
    run_and_compare(**geom, dtype=dtype, grads=("dx", "dw", "db"), plan_edit=_row_xt(xs=xs))
    assert memsets, "no zero plane went to a memset"


def test_zero_planes_lnc2(memsets):
    run_and_compare(batch=2, c_in=24, c_out=6, size=(4, 32, 24), kernel=(3, 3, 3), padding=(1,) * 6, lnc=2,
                    grads=("dw", "db"), plan_edit=_row_xt())
    assert memsets


def _trace(plan, shapes, kw):
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), trace_only=True, **kw)
    return list(res.trace)


def test_filters_follow_the_first_chunk_and_dy_loads_are_split():
    """dx's filter transposes (from the filters in HBM) come after dw's first dy loads (one per row chunk);
    the result is exact."""
    shapes = ((1, 64, 8, 32, 8), (1, 64, 8, 32, 8), (3, 3, 3, 64, 64))
    kw = {"stride": (1, 1, 1), "padding": (1,) * 6, "dilation": (1, 1, 1)}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    # (not dx:toeplitz: its tap grids take the filters another way, nor region packing: its block-diagonal
    # filters come by copies; spec.compose.filters_after_first_chunk)
    # (nor dw-interleaved: dx's bands and their filters lead, dw's boxes run between them)
    plan = _row_xt(where=lambda a: a.dx_method is not DxMethod.TOEPLITZ and a.dx_regions == 1 and a.filters_first
                   and not a.dw_interleave, dw_band=(8, 32))(plan)
    assert plan.filters_first and filters_after_first_chunk(plan.geometry(), plan), plan.label
    trace = _trace(plan, shapes, kw)
    w_storage = trace_storage_of_input(trace, 2)
    dy_storage = trace_storage_of_input(trace, 0)
    dy_loads = [i for i, ins in enumerate(trace) if ins.op == "dma_copy"
                and any(a.storage == dy_storage and not a.write for a in ins.accesses)]
    filt = [i for i, ins in enumerate(trace) if ins.op == "dma_transpose"
            and any(a.storage == w_storage and not a.write for a in ins.accesses)]
    assert filt and dy_loads[:2] and max(dy_loads[:2]) < min(filt)
    # 8 x 32 rows = two chunks of 128 rows: both loads before the first filter
    assert sum(1 for i in dy_loads if i < min(filt)) == 2
    run_and_compare(batch=1, c_in=64, c_out=64, size=(8, 32, 8), kernel=(3, 3, 3), padding=(1,) * 6,
                    plan_edit=lambda p: dataclasses.replace(plan, label=plan.label))


def trace_storage_of_input(trace, k):
    """The storage id of kernel input ``k`` (0 dy, 1 x, 2 filters): inputs are private HBM, numbered
    dy, x, filters in the order the kernel receives them."""
    ids = sorted({a.storage for ins in trace for a in ins.accesses if a.buffer == "private_hbm"})
    return ids[k]


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("geom", [
    # one dw box with one row chunk: the filters are issued after that box
    {"batch": 1, "c_in": 5, "c_out": 7, "size": (2, 3, 4), "kernel": (3, 3, 3), "padding": (1,) * 6},
    # several boxes and chunks, C_out 130 (two C_out tiles, no halves), B = 2
    {"batch": 2, "c_in": 6, "c_out": 130, "size": (3, 50, 4), "kernel": (3, 3, 1), "padding": (1, 1, 1, 1, 0, 0)},
], ids=["one-chunk", "co130"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_filters_after_first_chunk_exact(geom, grads, lnc):
    def edit(p):
        alts = p.feasible_candidates(where=lambda a: filters_after_first_chunk(p.geometry(), a))
        assert alts, [a.label for a in p.feasible_candidates()]
        return alts[0]
    run_and_compare(**geom, grads=grads, lnc=lnc, plan_edit=edit)
