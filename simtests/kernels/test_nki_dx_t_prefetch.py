"""dx^T's first band prefetched during dw (``Plan.dx_prefetch``) and the progressive store of the last
plane: bit-exact against the oracle via forced plans, the prefetch really issued inside dw, and the
planner's budget bounding the measured peak."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import DwMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import STREAMING_DW, dx_prefetched

from .support import assert_candidates_within_budget, geom_kw, geom_shapes, run_and_compare


def _prefetch(on=True, copies=None, **edit):
    """Plan edit: the planner's first feasible per-gradient dx^T candidate (with ``copies`` shifted copies
    when given), with the prefetch forced on or off, edited."""
    def pick(plan):
        alts = plan.feasible_candidates(where=lambda q: q.dx_transposed
                                        and q.strategy is Strategy.PER_GRADIENT
                                        and (q.dw_method in STREAMING_DW)
                                        and (copies is None or q.dx_pair_copies == copies))
        assert alts, [q.label for q in plan.feasible_candidates()]
        q = dataclasses.replace(alts[0], dx_prefetch=on, **edit)
        assert dx_prefetched(q) == on, q.label
        return q
    return pick


GEOMS = [
    pytest.param({"batch": 1, "c_in": 8, "c_out": 8, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 id="k333-odd"),
    pytest.param({"batch": 2, "c_in": 5, "c_out": 17, "size": (5, 4, 7), "kernel": (2, 3, 3),
                  "padding": (0, 1, 2, 1, 1, 1)}, id="b2-asym-c17"),
    pytest.param({"batch": 1, "c_in": 100, "c_out": 40, "size": (3, 6, 9), "kernel": (3, 3, 3),
                  "padding": (2, 2, 2, 2, 2, 2), "dilation": (2, 2, 2)}, id="dilated-c100"),
    pytest.param({"batch": 2, "c_in": 64, "c_out": 64, "size": (4, 8, 8), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 id="c64-b2"),
]


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("geom", GEOMS)
def test_prefetched_dx_t_is_exact(geom, grads):
    run_and_compare(**geom, grads=grads, plan_edit=_prefetch())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("band", [(1, 3), (2, 5)])
def test_prefetch_with_bands_and_dtypes(dtype, band):
    """Several dx bands (the prefetched one is the first of a ring), a partial H band (no progressive
    store), fp32 (PE transposes back) and bf16."""
    run_and_compare(batch=2, c_in=6, c_out=7, size=(5, 5, 6), kernel=(3, 3, 3), padding=(1, 1, 0, 2, 1, 1),
                    dtype=dtype, grads=("dx", "dw", "db"), plan_edit=_prefetch(dx_band=band))


@pytest.mark.parametrize("copies", [0, 1, 3])
def test_prefetch_with_each_copy_count(copies):
    geom = {"batch": 1, "c_in": 9, "c_out": 70 if copies == 0 else 12, "size": (3, 6, 7), "kernel": (3, 3, 3),
            "padding": (1,) * 6}
    run_and_compare(**geom, grads=("dx", "dw"), plan_edit=_prefetch(copies=copies))


def test_prefetch_with_box_mode_dw():
    """Box-mode dw (tap_pack) runs the prefetch at the start of its last box."""
    def edit(plan):
        q = _prefetch()(plan)
        return dataclasses.replace(q, dw_method=DwMethod.TAP_PACK, dw_x_stationary=False, dw_xt_dma=False,
                                   dw_tap_group=2)
    run_and_compare(batch=2, c_in=6, c_out=8, size=(4, 5, 6), kernel=(3, 3, 3), padding=(1,) * 6,
                    grads=("dx", "dw", "db"), plan_edit=edit)


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("split", ["positions", "taps"])
def test_prefetch_lnc2(grads, split):
    """LNC2: each program prefetches its own first dx item (one program may have none)."""
    run_and_compare(batch=3, c_in=6, c_out=7, size=(5, 4, 6), kernel=(3, 3, 3), padding=(1, 1, 0, 2, 1, 1),
                    lnc=2, grads=grads, plan_edit=_prefetch(dw_split=split))


def test_prefetch_off_still_exact():
    run_and_compare(batch=2, c_in=64, c_out=64, size=(4, 8, 8), kernel=(3, 3, 3), padding=(1,) * 6,
                    grads=("dx", "dw", "db"), plan_edit=_prefetch(on=False))


def _matmuls_between_band_load_and_dx(plan, shapes, kw):
    """PE matmuls issued between the first dx band's DMA and dx's first matmul (which reads that band)."""
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), trace_only=True, **kw)
    trace = list(res.trace)
    # the band is staged: a DMA from dy (HBM) into a 2-D staging tile, placed into the band tile
    # (C_in != C_out: dw's x bands are staged too, on C_in partitions)
    load = next(i for i, ins in enumerate(trace) if ins.op == "dma_copy" and any(
        a.write and a.buffer == "sbuf" and len(a.shape) == 2 and a.partitions == shapes[0][1]
        for a in ins.accesses) and any(
        not a.write and a.buffer != "sbuf" for a in ins.accesses))
    stage = next(a.storage for a in trace[load].accesses if a.write)
    place = next(ins for ins in trace[load:] if ins.op == "tensor_copy" and any(
        not a.write and a.storage == stage for a in ins.accesses))
    band = next(a.storage for a in place.accesses if a.write)
    first_dx = next(i for i, ins in enumerate(trace) if ins.op == "nc_matmul" and any(
        a.role == "stationary" and a.storage == band for a in ins.accesses))
    assert first_dx > load
    return sum(1 for ins in trace[load:first_dx] if ins.op == "nc_matmul")


def test_prefetch_is_issued_inside_dw():
    """With the flag dw's last matmuls come between the first dx band's DMA and dx; without it, none."""
    shapes = ((2, 64, 4, 8, 8), (2, 48, 4, 8, 8), (3, 3, 3, 48, 64))
    kw = {"stride": (1, 1, 1), "padding": (1,) * 6, "dilation": (1, 1, 1)}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    on = _prefetch(dx_band=(4, 8))(plan)
    off = dataclasses.replace(on, dx_prefetch=False)
    assert _matmuls_between_band_load_and_dx(on, shapes, kw) > 0
    assert _matmuls_between_band_load_and_dx(off, shapes, kw) == 0


@pytest.mark.parametrize("geom", [
    {"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 2, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3), "padding": (2,) * 6,
     "dilation": (2, 2, 2)},
], ids=["c64", "c64-dil2"])
def test_prefetch_budget_bounds_the_measured_peak(geom):
    """Every feasible prefetching candidate runs within the SBUF/PSUM the planner counted."""
    assert_candidates_within_budget(geom_shapes(geom), dx_prefetched, 6, **geom_kw(geom))
