"""dx:toeplitz W mode, the program's start: the first dy band's staged load split into d-plane
runs, its shifted K-pair copy placed from the staging tile, and the grids built off GpSimd (``fast_grid``)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dx_toeplitz
from conv3d_bwd.kernels.dx_toeplitz import fast_grid, first_band_split, first_band_upper, split_runs
from conv3d_bwd.kernels.plan import DxMethod, plan_conv3d_bwd

from .support import assert_budget_bounds_peak, run_and_compare


def w_mode(u, uw, pair, **more):
    """A plan edit forcing dx:toeplitz with h phases on M, U_w w positions on M and K pairs along ``pair``."""
    def edit(p):
        return dataclasses.replace(p, dx_method=DxMethod.TOEPLITZ, dx_toeplitz=u, dx_toeplitz_pair=pair,
                                   dx_toeplitz_merge=(False, True), dx_toeplitz_w=uw, dx_regions=1, **more)
    return edit


# odd sizes, asymmetric padding; C_out 64 / 32: the shifted copy crosses halves / quadrants
STEM_ODD = {"batch": 2, "c_in": 3, "size": (5, 11, 9), "kernel": (3, 7, 7), "stride": (1, 2, 2),
            "padding": (1, 2, 3, 2, 3, 1)}


@pytest.fixture
def split_loads(monkeypatch):
    """The first-band split loads that ran: [(runs, upper placed)]."""
    seen = []
    original = nki_dx_toeplitz._load_split

    def recorded(bands, item, parts, pair_axis):
        got = original(bands, item, parts, pair_axis)
        seen.append((parts, None if got is None else got[1]))
        return got

    monkeypatch.setattr(nki_dx_toeplitz, "_load_split", recorded)
    return seen


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("c_out", [64, 32])
def test_first_band_upper_placement_is_exact(c_out, lnc, dtype, split_loads):
    """K pairs along h: the shifted copy of the first band is placed from the staging tile (every program)."""
    run_and_compare(**STEM_ODD, c_out=c_out, dtype=dtype, lnc=lnc, grads=("dx", "dw", "db"),
                    plan_edit=w_mode((1, 4), 4, 1))
    assert split_loads and all(upper for _parts, upper in split_loads), split_loads


@pytest.mark.parametrize("grads", [("dx",), ("dx", "dw"), ("dx", "db")], ids=lambda g: "+".join(g))
def test_first_band_split_with_gradient_subsets(grads, split_loads):
    run_and_compare(**STEM_ODD, c_out=64, grads=grads, plan_edit=w_mode((1, 10), 4, 1))
    assert split_loads and all(upper for _parts, upper in split_loads), split_loads


@pytest.mark.parametrize("pair, uw", [(0, 4), (2, 2)], ids=["pairs-d", "pairs-w"])
def test_first_band_upper_along_d_and_w(pair, uw, split_loads):
    """The shifted copy one plane back (d) or one column back (w)."""
    run_and_compare(**STEM_ODD, c_out=64, grads=("dx",), plan_edit=w_mode((1, 4), uw, pair))
    assert split_loads and all(upper for _parts, upper in split_loads), split_loads


def test_first_band_without_a_leading_zero_row_keeps_the_copy(split_loads):
    """No top padding along the pairing axis: the band is split but its shifted copy stays a whole-band copy
    (the placement's border would differ from the flat copy's wrap)."""
    geom = dict(STEM_ODD, padding=(1, 1, 6, 5, 3, 3), size=(4, 12, 9))   # dy row 0 feeds x row 0
    run_and_compare(**geom, c_out=64, grads=("dx", "dw"), plan_edit=w_mode((1, 4), 4, 1))
    assert split_loads and not any(upper for _parts, upper in split_loads), split_loads


def test_first_band_split_without_pairs_and_in_fp32(split_loads):
    """C_out 16 (no upper copy needed without pairs) and fp32 (the grids keep their memsets)."""
    run_and_compare(**STEM_ODD, c_out=16, grads=("dx", "dw"), plan_edit=w_mode((1, 10), 4, -1))
    run_and_compare(**STEM_ODD, c_out=16, dtype="fp32", grads=("dx",), plan_edit=w_mode((1, 10), 4, 1))
    assert len(split_loads) >= 2 and all(upper is False for _parts, upper in split_loads), split_loads


def test_split_runs_and_rules():
    assert split_runs(1, 6, 4) == ((1, 2), (2, 3), (3, 4), (4, 6))   # later runs not shorter
    assert split_runs(0, 3, 4) == ((0, 1), (1, 2), (2, 3))
    assert split_runs(2, 3, 4) == ((2, 3),)
    plan = plan_conv3d_bwd((2, 64, 16, 32, 32), (2, 3, 16, 64, 64), (3, 7, 7, 3, 64), stride=(1, 2, 2),
                           padding=(1, 1, 3, 3, 3, 3))
    g = plan.geometry()
    assert plan.dx_toeplitz_w and fast_grid(g, plan) and first_band_split(g, plan) == 4
    assert not fast_grid(g, dataclasses.replace(plan, dx_toeplitz_w=0))
    assert first_band_upper(g, 1, (6, 35, 35), (6, 35, 35), [1, 1, 1])
    assert not first_band_upper(g, 1, (6, 35, 35), (6, 35, 35), [1, 0, 1])   # no leading zero row
    assert not first_band_upper(g, 1, (5, 35, 35), (6, 35, 35), [1, 1, 1])   # not the pool's extent
    assert not first_band_upper(g, -1, (6, 35, 35), (6, 35, 35), [1, 1, 1])


@pytest.mark.parametrize("lnc", [1, 2])
def test_stem_pick_budget_bounds_the_peak(lnc):
    shapes = ((2, 64, 16, 32, 32), (2, 3, 16, 64, 64), (3, 7, 7, 3, 64))
    kw = {"stride": (1, 2, 2), "padding": (1, 1, 3, 3, 3, 3)}
    plan = plan_conv3d_bwd(*shapes, lnc=lnc, **kw)
    assert plan.dx_toeplitz_w and plan.dx_toeplitz_pair == 1
    assert_budget_bounds_peak(plan, shapes, lnc=lnc, **kw)
