"""dx^T (positions on the stationary side, tap pairs on K): bit-exact against the oracle via forced plans."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.dx_pairs import block_groups, pair_axes, tap_steps
from conv3d_bwd.kernels.plan import Strategy

from .support import BUDGET_SWEEPS, assert_candidates_within_budget, geom_kw, geom_shapes, run_and_compare


def _dx_t(copies, **edit):
    """Plan edit: the planner's first feasible dx^T candidate with ``copies`` shifted copies (or as many
    as the geometry has pair axes), edited."""
    def pick(plan):
        n = min(copies, len(pair_axes(plan.geometry()))) if copies else 0
        alts = plan.feasible_candidates(where=lambda q: q.dx_transposed and q.dx_pair_copies == n)
        assert alts, f"no feasible dx^T x{copies} candidate: {[q.label for q in plan.feasible_candidates()]}"
        return dataclasses.replace(alts[0], **edit)
    return pick


def test_tap_steps_pair_26_of_27_taps():
    from conv3d_bwd.kernels.geometry import validate
    g = validate((1, 64, 4, 4, 4), (1, 64, 4, 4, 4), (3, 3, 3, 64, 64), (1, 1, 1), (1,) * 6, (1, 1, 1), "bf16")
    for copies, mms in ((1, 18), (2, 15), (3, 14)):
        steps = tap_steps(g, copies)
        assert len(steps) == mms
        covered = [s.a for s in steps] + [s.b for s in steps if s.b is not None]
        assert sorted(covered) == sorted({(d, h, w) for d in range(3) for h in range(3) for w in range(3)})
    # C_out > 64: no pairs at all
    g2 = validate((1, 65, 4, 4, 4), (1, 8, 4, 4, 4), (3, 3, 3, 8, 65), (1, 1, 1), (1,) * 6, (1, 1, 1), "bf16")
    assert all(s.b is None for s in tap_steps(g2, 3)) and len(tap_steps(g2, 3)) == 27


def test_block_groups_tile_the_plane_in_flat_order():
    for rows, slots in (((3, 5, 7), 8), ((2, 32, 32), 8), ((1, 3, 300), 2), ((4, 6, 20), 1)):
        f = 0
        for grp in block_groups(rows, slots):
            assert grp.f0 == f and len(grp.blocks) <= slots
            for _start, size in grp.blocks:
                assert size[0] * size[1] * size[2] == grp.n <= 128
            f += grp.n * len(grp.blocks)
        assert f == rows[0] * rows[1] * rows[2]


GEOMS = [
    pytest.param({"batch": 1, "c_in": 8, "c_out": 8, "size": (4, 5, 6), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 id="k333"),
    pytest.param({"batch": 2, "c_in": 3, "c_out": 17, "size": (5, 4, 7), "kernel": (2, 4, 5),
                  "padding": (0, 1, 2, 1, 2, 2)}, id="k245-asym"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 1, "size": (3, 6, 5), "kernel": (5, 1, 2),
                  "padding": (2, 2, 0, 0, 1, 0)}, id="c1-k512"),
    pytest.param({"batch": 1, "c_in": 100, "c_out": 64, "size": (3, 4, 9), "kernel": (3, 2, 3),
                  "padding": (2, 1, 1, 0, 2, 2), "dilation": (2, 3, 2)}, id="dilated-c100"),
    pytest.param({"batch": 2, "c_in": 200, "c_out": 17, "size": (2, 5, 6), "kernel": (1, 3, 3),
                  "padding": (0, 0, 1, 1, 1, 1)}, id="c200-k133"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 64, "size": (3, 6, 45), "kernel": (2, 2, 4),
                  "padding": (1, 0, 0, 1, 3, 0)}, id="c64-w45"),
    # stride phases: pairs of consecutive taps of a phase, dx^T placed through a staging run
    pytest.param({"batch": 1, "c_in": 3, "c_out": 17, "size": (4, 9, 10), "kernel": (3, 5, 5), "stride": (1, 2, 2),
                  "padding": (1, 1, 2, 2, 2, 2)}, id="stem-like-s122"),
    pytest.param({"batch": 2, "c_in": 5, "c_out": 8, "size": (5, 7, 6), "kernel": (3, 3, 2), "stride": (2, 3, 1),
                  "padding": (1, 0, 2, 1, 0, 1), "dilation": (2, 1, 3)}, id="s231-dil"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 8, 8), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1,) * 6}, id="c64-s2"),
]


@pytest.mark.parametrize("copies", [1, 3])
@pytest.mark.parametrize("geom", GEOMS)
def test_dx_t_pairs_are_exact(geom, copies):
    run_and_compare(**geom, grads=("dx",), plan_edit=_dx_t(copies))


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("stride", [(1, 1, 1), (1, 2, 2)])
def test_dx_t_other_dtypes(dtype, stride):
    run_and_compare(batch=2, c_in=5, c_out=6, size=(3, 5, 4), kernel=(3, 3, 2), stride=stride,
                    padding=(1, 1, 1, 0, 0, 1), dilation=(1, 2, 1), dtype=dtype, grads=("dx",), plan_edit=_dx_t(2))


def test_dx_t_pe_transposes_on_trn1(monkeypatch):
    """trn1 has no dma_transpose: dx^T goes back through PE transposes (bf16 PSUM tiles)."""
    from conv3d_bwd.kernels.plan import estimate, estimate_dx
    from conv3d_bwd.kernels.spec import compose, dw_options, dx_options
    for module in (dx_options, dw_options, compose, estimate, estimate_dx):
        monkeypatch.setattr(module, "filters_by_dma", lambda g, p: False)
    from conv3d_bwd.kernels import nki_dx_t
    monkeypatch.setattr(nki_dx_t, "filters_by_dma", lambda g, p: False)
    from conv3d_bwd.kernels import nki_dx
    monkeypatch.setattr(nki_dx, "filters_by_dma", lambda g, p: False)
    run_and_compare(batch=1, c_in=70, c_out=9, size=(2, 6, 11), kernel=(3, 3, 3), padding=(1,) * 6,
                    grads=("dx",), plan_edit=_dx_t(3))


@pytest.mark.parametrize("geom", [
    # C_out > 64 (two C_out tiles): positions on M alone, every C_out tile accumulates
    {"batch": 1, "c_in": 5, "c_out": 130, "size": (2, 4, 5), "kernel": (2, 3, 2), "padding": (1, 0, 1, 1, 0, 1)},
    {"batch": 1, "c_in": 5, "c_out": 130, "size": (2, 4, 5), "kernel": (2, 3, 2), "stride": (2, 1, 2),
     "padding": (1, 0, 1, 1, 0, 1)},
    # stride > kernel: one tap per phase (no pairs), phases no tap reaches (zeros)
    {"batch": 1, "c_in": 4, "c_out": 6, "size": (7, 7, 7), "kernel": (2, 2, 2), "stride": (3, 3, 3)},
], ids=["c130", "c130-strided", "stride-gt-kernel"])
def test_dx_t_without_pairs(geom):
    """dx^T without tap pairs (the planner offers it at stride 1 only; the kernel runs it with strides)."""
    def force(p):
        return dataclasses.replace(p, dx_transposed=True, dx_pair_copies=0, dx_regions=1, dx_ci_outer=False,
                                   dx_ci_tile=min(128, geom["c_in"]))
    strided = geom.get("stride", (1, 1, 1)) != (1, 1, 1)
    run_and_compare(**geom, grads=("dx",), plan_edit=force if strided else _dx_t(0))


@pytest.mark.parametrize("grads", [("dx",), ("dx", "dw"), ("dx", "db"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
@pytest.mark.parametrize("variant", ["per-gradient", "shared-banded", "lnc2", "lnc2-shared"])
def test_dx_t_bands_strategies_lnc(grads, variant):
    geom = {"batch": 3, "c_in": 6, "c_out": 7, "size": (5, 4, 6), "kernel": (3, 3, 3), "padding": (1, 1, 0, 2, 1, 1),
            "stride": (1, 1, 2) if "lnc2" in variant else (1, 1, 1)}
    edit = {"dx_band": (2, 4)}
    if "shared" in variant and "dw" in grads:
        edit.update(strategy=Strategy.SHARED_DY, dx_band=(1, 3))
    run_and_compare(**geom, grads=grads, lnc=2 if "lnc2" in variant else 1, plan_edit=_dx_t(3, **edit))


@pytest.mark.parametrize("geom", [
    {"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 3, 3), "padding": (1,) * 6},
    {"batch": 2, "c_in": 200, "c_out": 20, "size": (3, 8, 12), "kernel": (3, 3, 3), "padding": (1,) * 6,
     "dilation": (1, 2, 1)},
    {"batch": 1, "c_in": 3, "c_out": 64, "size": (4, 16, 16), "kernel": (3, 7, 7), "stride": (1, 2, 2),
     "padding": (1, 1, 3, 3, 3, 3)},
], ids=["c64", "c200", "stem-like"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("sweep", BUDGET_SWEEPS)
def test_dx_t_budget_bounds_the_measured_peak(geom, dtype, sweep):
    """The feasible dx^T candidates (a pairwise cover of their choices; every one in the nightly sweep) run
    within the SBUF/PSUM the planner counted."""
    assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dx_transposed, dtype=dtype, sweep=sweep,
                                    **geom_kw(geom))
