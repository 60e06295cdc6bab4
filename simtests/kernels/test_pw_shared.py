"""Shared-dy pointwise (``nki_pw_shared``: shared_dy dx:gemm + dw:dma_gemm, dy^T by PE transposes): bit-exact
forced plans over odd sizes, C not a multiple of 128, several batches, chunks and steps, C_out blocks and
transpose banks, db on the PE or ScalarE, LNC2 (the reduce-scatter; a program with no chunk), fp16; the
planner offers it only where it runs (2-byte dtypes on trn2/trn3, dx and dw both requested)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.plan import DbMethod, DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import pw_shared_on

from .support import GRADS, assert_candidates_within_budget, run_and_compare


def _pw(db_scalar=None, band=None, every=0):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: pw_shared_on(a) and a.pw_dyt_dma == every
                                     and (db_scalar is None or a.pw_db_scalar == db_scalar))
        assert alts, p.explain()
        alt = alts[0]
        return dataclasses.replace(alt, dx_band=band) if band is not None else alt
    return pick


@pytest.mark.parametrize("batch, c_in, c_out, size, band", [
    (2, 130, 140, (3, 5, 7), None),      # odd sizes, two C_in / C_out tiles (partial), one chunk per batch
    (1, 20, 600, (3, 5, 47), None),      # 705 positions: a 512 step and a 193 step (partial sub-tile); 2 C_out blocks
    (3, 7, 9, (2, 3, 40), (1, 2)),       # chunks of 2 H rows (80 positions), 3 per D row, several per batch
    (2, 9, 1030, (1, 4, 33), (1, 1)),    # C_out > 1024: dy^T in two PSUM transpose banks; one-row chunks
    (1, 256, 64, (2, 16, 32), (1, 16)),  # 512-position chunks of one step each
    (2, 300, 70, (2, 3, 30), None),      # 3 C_in tiles: the first dx step C_out-outer over C_in tile pairs
    (1, 130, 300, (2, 8, 128), None),    # 4 steps: the last one held back, evicted in 128-position pieces
])
@pytest.mark.parametrize("db_scalar, every", [(False, 0), (True, 0), (True, 4), (False, 2), (False, 4)],
                         ids=["db-pe", "db-scalar", "db-scalar-dyT-dma4", "db-pe-dyT-dma2", "db-pe-dyT-dma4"])
def test_pw_shared_is_exact(batch, c_in, c_out, size, band, db_scalar, every):
    run_and_compare(batch, c_in, c_out, size, (1, 1, 1), plan_edit=_pw(db_scalar, band, every))


@pytest.mark.parametrize("batch, c_in, c_out, size, band", [
    (3, 130, 70, (2, 4, 5), None),       # odd item count: programs of 2 and 1 batches
    (1, 5, 9, (2, 2, 2), None),          # one chunk: program 1 has none (zero partials; db exchange still)
    (2, 6, 600, (3, 3, 7), (1, 3)),      # two C_out blocks, several chunks per program
    (2, 300, 200, (2, 3, 10), None),     # 3 C_in tiles: the first dx step C_out-outer over C_in tile pairs
    (1, 5, 600, (1, 2, 2), None),        # program 1 has no chunk, two C_out blocks: zero partials per block
    (2, 130, 300, (2, 8, 100), None),    # 4 steps per program: the last dw sends its 150-column window first
])
@pytest.mark.parametrize("db_scalar, every", [(False, 0), (True, 0), (True, 2)], ids=["db-pe", "db-scalar", "dyT-dma2"])
def test_pw_shared_lnc2_is_exact(batch, c_in, c_out, size, band, db_scalar, every):
    run_and_compare(batch, c_in, c_out, size, (1, 1, 1), lnc=2, plan_edit=_pw(db_scalar, band, every))


@pytest.mark.parametrize("lnc", [1, 2])
def test_pw_shared_without_db_and_fp16(lnc):
    run_and_compare(2, 130, 140, (3, 5, 7), (1, 1, 1), lnc=lnc, grads=("dx", "dw"), plan_edit=_pw())
    run_and_compare(2, 33, 70, (2, 3, 9), (1, 1, 1), lnc=lnc, dtype="fp16", plan_edit=_pw(True))
    run_and_compare(2, 40, 300, (2, 8, 32), (1, 1, 1), lnc=lnc, dtype="fp16", plan_edit=_pw(True, every=4))


def test_pw_shared_db_standalone():
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: pw_shared_on(a) and a.db_method is DbMethod.STANDALONE)
        assert alts, p.explain()
        return alts[0]
    run_and_compare(2, 20, 30, (3, 5, 7), (1, 1, 1), plan_edit=pick)


@pytest.mark.parametrize("dtype, target, grads", [
    ("fp32", "trn2", GRADS), ("bf16", "trn1", GRADS), ("bf16", "trn2", ("dw", "db")), ("bf16", "trn2", ("dx", "db")),
])
def test_pw_shared_offered_only_where_it_runs(dtype, target, grads):
    flags = {f"compute_{g}": g in grads for g in GRADS}
    p = plan_conv3d_bwd((2, 20, 3, 4, 5), (2, 10, 3, 4, 5), (1, 1, 1, 10, 20), dtype=dtype, target=target, **flags)
    assert not p.feasible_candidates(where=pw_shared_on)
    p = plan_conv3d_bwd((2, 20, 3, 4, 5), (2, 10, 3, 4, 5), (1, 1, 1, 10, 20))
    shared = p.feasible_candidates(where=pw_shared_on)
    assert {a.pw_db_scalar for a in shared if a.db_method is DbMethod.FOLD} == {False, True}
    assert {a.pw_dyt_dma for a in shared} == {0, 2, 4}
    assert all(a.strategy is Strategy.SHARED_DY and a.dw_method is DwMethod.DMA_GEMM for a in shared)


@pytest.mark.parametrize("lnc", [1, 2])
def test_pw_shared_budget_bounds_the_measured_peak(lnc):
    shapes = ((4, 512, 4, 16, 16), (4, 256, 4, 16, 16), (1, 1, 1, 256, 512))
    assert len(assert_candidates_within_budget(shapes, pw_shared_on, lnc=lnc)) >= 2


# ---------------------------------------------------------------- D kernels (K_d x 1 x 1): taps shift whole planes

D_KERNELS = [
    pytest.param(2, 130, 140, (5, 8, 16), (3, 1, 1), (1, 1, 0, 0, 0, 0), (1, 1, 1), id="k311-odd-D-C-partial"),
    pytest.param(1, 20, 600, (3, 4, 32), (2, 1, 1), (0, 1, 0, 0, 0, 0), (1, 1, 1), id="k211-asym-pad-2-blocks"),
    pytest.param(2, 9, 70, (6, 16, 16), (3, 1, 1), (2, 2, 0, 0, 0, 0), (2, 1, 1), id="k311-dil2"),
    pytest.param(1, 7, 9, (4, 2, 64), (3, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), id="no-pad-fewer-dy"),
    pytest.param(1, 5, 6, (1, 8, 16), (3, 1, 1), (4, 4, 0, 0, 0, 0), (3, 1, 1), id="more-dy-a-tap-meets-no-x"),
    pytest.param(3, 33, 200, (8, 8, 16), (5, 1, 1), (2, 2, 0, 0, 0, 0), (1, 1, 1), id="k511-3-batches"),
]


@pytest.mark.parametrize("batch, c_in, c_out, size, kernel, padding, dilation", D_KERNELS)
@pytest.mark.parametrize("db_scalar, every", [(False, 0), (True, 0), (True, 2), (False, 4)],
                         ids=["db-pe", "db-scalar", "db-scalar-dyT-dma2", "db-pe-dyT-dma4"])
def test_shared_gemm_d_kernels_are_exact(batch, c_in, c_out, size, kernel, padding, dilation, db_scalar, every):
    run_and_compare(batch, c_in, c_out, size, kernel, padding=padding, dilation=dilation,
                    plan_edit=_pw(db_scalar, None, every))


@pytest.mark.parametrize("grads", [("dx", "dw"), GRADS], ids=lambda g: "+".join(g))
def test_shared_gemm_d_kernel_subsets_and_fp16(grads):
    def standalone(p):
        alts = p.feasible_candidates(where=lambda a: pw_shared_on(a) and a.db_method is not DbMethod.FOLD)
        assert alts, p.explain()
        return alts[0]
    pad = (1, 1, 0, 0, 0, 0)
    run_and_compare(2, 40, 50, (3, 4, 32), (3, 1, 1), padding=pad, grads=grads, dtype="fp16", plan_edit=_pw())
    if "db" in grads:
        run_and_compare(2, 40, 50, (3, 4, 32), (3, 1, 1), padding=pad, plan_edit=standalone)


def test_shared_gemm_d_kernels_offered_only_where_they_run():
    shapes = ((1, 64, 4, 8, 16), (1, 32, 4, 8, 16), (3, 1, 1, 32, 64))
    kw = {"padding": (1, 1, 0, 0, 0, 0)}
    assert bool(plan_conv3d_bwd(*shapes, **kw).feasible_candidates(where=pw_shared_on))
    assert bool(plan_conv3d_bwd(*shapes, **kw, lnc=2).feasible_candidates(where=pw_shared_on))
    for extra in ({"dtype": "fp32"}, {"target": "trn1"}, {"compute_dx": False}):
        assert not (plan_conv3d_bwd(*shapes, **kw, **extra).feasible_candidates(where=pw_shared_on))
    # H x W = 120: a plane is not whole sub-tiles
    odd = ((1, 64, 4, 8, 15), (1, 32, 4, 8, 15), (3, 1, 1, 32, 64))
    assert not (plan_conv3d_bwd(*odd, **kw).feasible_candidates(where=pw_shared_on))
    # H padding or a 3x3x3 kernel: not a D kernel
    assert not (plan_conv3d_bwd(
        (1, 64, 4, 8, 16), (1, 32, 4, 8, 16), (3, 3, 3, 32, 64), padding=(1,) * 6).feasible_candidates(where=pw_shared_on))


def test_shared_gemm_d_kernel_budget_bounds_the_measured_peak():
    shapes = ((1, 256, 16, 16, 16), (1, 256, 16, 16, 16), (3, 1, 1, 256, 256))
    kw = {"padding": (1, 1, 0, 0, 0, 0)}
    assert len(assert_candidates_within_budget(shapes, pw_shared_on, **kw)) >= 2


# LNC2: the D-plane split (a dx band of half the D planes per item: each program half of a batch's planes, with
# the dy halo planes dx's taps read and the x^T halo planes dw's taps pair; dw's per-tap partials reduce-scattered)
D_KERNELS_LNC2 = [
    pytest.param(1, 130, 140, (5, 8, 16), (3, 1, 1), (1, 1, 0, 0, 0, 0), (1, 1, 1), "half", id="k311-odd-D-B1"),
    pytest.param(1, 20, 300, (3, 4, 32), (2, 1, 1), (0, 1, 0, 0, 0, 0), (1, 1, 1), "half", id="k211-asym-pad"),
    pytest.param(2, 9, 70, (6, 16, 16), (3, 1, 1), (2, 2, 0, 0, 0, 0), (2, 1, 1), "half", id="k311-dil2-B2"),
    pytest.param(1, 7, 9, (4, 2, 64), (3, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), "half", id="no-pad-D-lt-2k"),
    pytest.param(1, 5, 6, (1, 8, 16), (3, 1, 1), (4, 4, 0, 0, 0, 0), (3, 1, 1), "half", id="D1-idle-program"),
    pytest.param(3, 33, 200, (8, 8, 16), (5, 1, 1), (2, 2, 0, 0, 0, 0), (1, 1, 1), "half", id="k511-B3"),
    pytest.param(3, 12, 20, (3, 4, 32), (3, 1, 1), (1, 1, 0, 0, 0, 0), (1, 1, 1), "full", id="whole-batches-B3"),
]


def _pw_d_lnc2(band_kind, size, db_scalar=None, every=0):
    """The shared-dy GEMM candidate with dx items of the whole batch ("full") or half its D planes ("half")."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: pw_shared_on(a) and a.pw_dyt_dma == every
                                     and (db_scalar is None or a.pw_db_scalar == db_scalar))
        assert alts, p.explain()
        d = size[0] if band_kind == "full" else -(-size[0] // 2)
        return dataclasses.replace(alts[0], dx_band=(d, size[1]))
    return pick


@pytest.mark.parametrize("batch, c_in, c_out, size, kernel, padding, dilation, band", D_KERNELS_LNC2)
@pytest.mark.parametrize("db_scalar, every", [(False, 0), (True, 2)], ids=["db-pe", "db-scalar-dyT-dma2"])
def test_shared_gemm_d_kernels_lnc2_are_exact(batch, c_in, c_out, size, kernel, padding, dilation, band,
                                              db_scalar, every):
    run_and_compare(batch, c_in, c_out, size, kernel, padding=padding, dilation=dilation, lnc=2,
                    plan_edit=_pw_d_lnc2(band, size, db_scalar, every))


@pytest.mark.parametrize("grads", [("dx", "dw"), GRADS], ids=lambda g: "+".join(g))
def test_shared_gemm_d_kernel_lnc2_subsets_and_fp16(grads):
    pad = (1, 1, 0, 0, 0, 0)
    run_and_compare(1, 40, 50, (3, 4, 32), (3, 1, 1), padding=pad, grads=grads, dtype="fp16", lnc=2,
                    plan_edit=_pw_d_lnc2("half", (3, 4)))
    run_and_compare(2, 40, 50, (5, 4, 32), (3, 1, 1), padding=pad, grads=grads, lnc=2,
                    plan_edit=_pw_d_lnc2("half", (5, 4), True if "db" in grads else None))


def test_shared_gemm_d_kernel_lnc2_budget_bounds_the_measured_peak():
    shapes = ((1, 256, 16, 16, 16), (1, 256, 16, 16, 16), (3, 1, 1, 256, 256))
    kw = {"padding": (1, 1, 0, 0, 0, 0)}
    alts = plan_conv3d_bwd(*shapes, lnc=2, **kw).feasible_candidates(where=pw_shared_on)
    assert any(a.dx_band[0] == 8 for a in alts)
    assert_candidates_within_budget(shapes, pw_shared_on, 4, lnc=2, **kw)

