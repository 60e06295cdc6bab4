"""Gather dx in C_out chunks (``Plan.dx_co_chunk``): where even one W column of a dy band holding every C_out
tile does not fit SBUF, each band runs its C_out tiles in chunks outside the tap loops, adding each chunk's
PSUM sums into fp32 tiles of the band and rounding once at the last chunk. Forced on small geometries (exact
mode against the oracle: phase_gather with stride, padding and dilation, gather_s1, gemm, a remainder chunk,
with W bands, C_in-outer groups, gradient subsets, LNC2); the traced peaks within the budget; offered only
where no tiling of every C_out tile fits; a geometry that had no plan gets one (trace-only)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd, nki_dx
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan import DxMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.problem import _base
from conv3d_bwd.kernels.plan.search import _label
from conv3d_bwd.kernels.plan.smallest import smallest_plan
from conv3d_bwd.kernels.spec.dx_options import dx_co_chunk_legal, dx_co_chunks

from .support import GRADS, assert_budget_bounds_peak, conv_shapes, plan_geom, run_and_compare, spy


def _force_co_chunk(chunk, w_band=0, ci_outer=None):
    """Edit: the first per-gradient gather candidate (C_in-outer ``ci_outer`` when given) forced into C_out
    chunks of ``chunk`` tiles (and W bands of ``w_band`` columns when given)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT and a.dx_regions == 1
                                     and (a.dx_method in (DxMethod.GEMM, DxMethod.GATHER_S1, DxMethod.PHASE_GATHER))
                                     and (not (a.dx_transposed or a.dx_dphase_pairs or a.dx_prefetch or a.dw_interleave or a.dx_band_early))
                                     and (ci_outer is None or a.dx_ci_outer is ci_outer)
                                     and (not (a.compute_db and (not a.compute_dw)
                                     and (a.db_method.value == 'fold'))))
        assert alts, p.explain()
        q = dataclasses.replace(alts[0], dx_co_chunk=chunk, filters_first=False, dx_w_band=w_band or alts[0].dx_w_band)
        g = plan_geom(q)
        assert dx_co_chunk_legal(g, q) and len(dx_co_chunks(g, q)) >= 2, q.label
        why, budget = _check(g, q, TARGET_FIGURES[q.target])
        assert not why, (q.label, why)
        return dataclasses.replace(q, sbuf_bytes=budget.sbuf, psum_banks=budget.psum, label=_label(q))
    return pick


def _chunked_runs(monkeypatch) -> list:
    """The chunk count of every chunked band the kernel runs (so a test knows the chunked path ran)."""
    return spy(monkeypatch, nki_dx, "_run_band_chunks", lambda ctx, item, bands, group, rel0, chunks, *a: len(chunks))


# C_out 300: three tiles, the last of 44 channels; W stride 2, dilation 2, both W sides padded (phase_gather)
STRIDED = {"batch": 2, "c_in": 3, "c_out": 300, "size": (3, 4, 7), "kernel": (2, 2, 3), "stride": (1, 1, 2),
           "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)}
STRIDE1 = {"batch": 1, "c_in": 4, "c_out": 260, "size": (2, 3, 5), "kernel": (1, 3, 3), "padding": (0, 0, 1, 1, 1, 1)}
POINTWISE = {"batch": 1, "c_in": 5, "c_out": 257, "size": (2, 2, 3), "kernel": (1, 1, 1)}


@pytest.mark.parametrize("geom, chunk", [(STRIDED, 1), (STRIDED, 2), (STRIDE1, 2), (POINTWISE, 1)],
                         ids=["phase-chunk1", "phase-chunk2-remainder", "stride1-chunk2-remainder", "gemm-chunk1"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_forced_co_chunks_are_exact(geom, chunk, dtype, monkeypatch):
    runs = _chunked_runs(monkeypatch)
    run_and_compare(**geom, dtype=dtype, grads=("dx",), plan_edit=_force_co_chunk(chunk))
    n_co = -(-geom["c_out"] // 128)
    assert runs and set(runs) == {-(-n_co // chunk)}


def test_co_chunks_with_w_bands_and_every_gradient_are_exact(monkeypatch):
    runs = _chunked_runs(monkeypatch)
    run_and_compare(**STRIDED, dtype="fp16", grads=GRADS, plan_edit=_force_co_chunk(2, w_band=3))
    assert runs and set(runs) == {2}


def test_co_chunks_with_ci_outer_groups_are_exact(monkeypatch):
    runs = _chunked_runs(monkeypatch)
    run_and_compare(batch=1, c_in=130, c_out=257, size=(2, 2, 3), kernel=(1, 2, 2), padding=(0, 0, 1, 0, 1, 0),
                    dtype="bf16", grads=("dx",), plan_edit=_force_co_chunk(1, ci_outer=True))
    assert runs and set(runs) == {3}


@pytest.mark.parametrize("grads", [("dx",), GRADS], ids=lambda g: "+".join(g))
def test_co_chunks_at_lnc2_are_exact(grads):
    run_and_compare(**STRIDED, lnc=2, grads=grads, plan_edit=_force_co_chunk(2))


def test_co_chunks_run_within_their_budget_trace_only():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", compute_dw=False, compute_db=False)
    for chunk, w_band in ((1, 0), (2, 0), (1, 2)):
        alt = _force_co_chunk(chunk, w_band)(plan)
        assert_budget_bounds_peak(alt, shapes, **kw, compute_dw=False, compute_db=False)


def test_co_chunk_illegal_forms_are_rejected_by_name():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    shared = next(a for a in plan.feasible_candidates() if a.strategy is Strategy.SHARED_DY)
    chunked = _force_co_chunk(1)(plan)
    for bad in (dataclasses.replace(shared, dx_co_chunk=1), dataclasses.replace(chunked, dx_co_chunk=3),
                dataclasses.replace(chunked, filters_first=True)):
        why = _check(g, bad, TARGET_FIGURES["trn2"])[0]
        assert why.startswith("dx_co_chunk needs"), (bad.label, why)


def test_co_chunks_are_offered_only_where_no_tiling_of_every_c_out_tile_fits():
    shapes = conv_shapes(**STRIDED)
    kw = {k: STRIDED[k] for k in ("stride", "padding", "dilation")}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    assert not plan.feasible_candidates(where=lambda c: c.dx_co_chunk)


# 1 -> 2048 channels, 3x3x3 dilated 8: one dy row band of one W column spans 17 x 17 x 17 dy positions for every
# one of the 16 C_out tiles (628 KB per partition in bf16): no tiling of every C_out tile fits
DILATED = {"batch": 1, "c_in": 1, "c_out": 2048, "size": (20, 20, 20), "kernel": (3, 3, 3), "padding": (8,) * 6,
           "dilation": (8, 8, 8)}


def test_geometry_without_a_plan_of_every_c_out_tile_gets_a_chunked_plan_within_budget():
    shapes = conv_shapes(**DILATED)
    kw = {"padding": DILATED["padding"], "dilation": DILATED["dilation"], "compute_dw": False, "compute_db": False}
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16")
    g = plan_geom(plan)
    assert plan.dx_co_chunk and "co chunk" in plan.label, plan.label
    # the smallest tiling that holds every C_out tile does not fit
    base = _base(g, *shapes, (1, 1, 1), DILATED["padding"], DILATED["dilation"], "trn2", 1, True, False, False)
    every = dataclasses.replace(smallest_plan(g, base), dx_co_chunk=0)
    assert _check(g, every, TARGET_FIGURES["trn2"])[0].startswith("SBUF")
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), **kw, trace_only=True)
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes <= TARGET_FIGURES["trn2"].sbuf_usable
    assert res.peak_psum_banks <= plan.psum_banks
