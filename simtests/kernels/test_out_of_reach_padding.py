"""Padding beyond the kernel's reach (a side's padding > dil*(k-1)): dy rows or columns that only padding
reads. They add nothing to dx or dw, but every band's dy window and owned rows must stay consistent
(``schedule.axis_bands``). The reproducers run the pick; the geometry set forces EVERY feasible candidate
(shared-dy and per-gradient, every dx and dw method), exact mode against the oracle."""
from __future__ import annotations

import itertools

import pytest

from conv3d_bwd.kernels.geometry import Axis
from conv3d_bwd.kernels.schedule import axis_bands, axis_covered
from conv3d_bwd.verify.candidates import case_plan, run_candidates
from conv3d_bwd.verify.cases import Case

# (case, target) of the failures a random sweep found
REPRODUCERS = [
    # a W side padded by 1 with a 1-tap kernel: every shared-dy candidate indexed W columns dx never loads
    pytest.param(Case("w-lo-beyond-reach", "padding", 1, 1, 1, (1, 1, 1), (1, 1, 1), padding=(0, 0, 0, 0, 1, 0),
                      grads=("dx", "dw")), "trn2", id="w-lo-k1"),
    pytest.param(Case("h-w-beyond-reach", "padding", 1, 1, 128, (6, 2, 7), (3, 5, 1), stride=(3, 3, 3),
                      padding=(0, 0, 3, 3, 1, 0), dilation=(2, 1, 3), dtype="fp32"), "trn3", id="k351-stride3-trn3"),
    # D stride 2 and dilation 3: one-row dx bands whose dy rows an earlier band owns (db folded on them)
    pytest.param(Case("d-band-owns-nothing", "padding", 1, 1, 1, (14, 9, 210), (3, 2, 3), stride=(2, 1, 1),
                      padding=(1, 0, 3, 3, 0, 0), dilation=(3, 3, 2), dtype="fp32", grads=("dx", "db")), "trn2",
                 id="d-stride2-dil3-dxdb"),
    # D stride 3 with one-row bands: the first band reads dy row 1 only, the second rows 0-2 (windows out of
    # order); dy row 0 was owned by no band, so shared-dy dw missed its contribution (a wrong dw)
    pytest.param(Case("d-windows-out-of-order", "padding", 1, 2, 12, (2, 8, 20), (4, 4, 6), stride=(3, 2, 1),
                      padding=(5, 1, 1, 0, 2, 5), dilation=(2, 2, 1), dtype="fp16", grads=("dx", "dw")), "trn3",
                 id="d-stride3-windows-out-of-order"),
]

# small geometries with some side padded beyond the reach; the dx+dw+db ones at LNC1 and the LNC2 one have
# ~1,000-2,000 feasible candidates (methods x flags x tilings): every one nightly, a spread in the default suite
FEW = [
    pytest.param(Case("d-lo-stride2", "padding", 1, 2, 3, (7, 4, 4), (2, 2, 2), stride=(2, 1, 1),
                      padding=(4, 0, 0, 3, 0, 0), dilation=(2, 1, 1), grads=("dx", "dw")), "trn1", id="d-lo-stride2-dil2"),
    pytest.param(Case("d-band-owns-nothing", "padding", 1, 1, 1, (14, 3, 6), (3, 2, 3), stride=(2, 1, 1),
                      padding=(1, 0, 3, 3, 0, 0), dilation=(3, 3, 2), dtype="fp32", grads=("dx", "db")), "trn2",
                 id="d-stride2-dil3-small"),
    pytest.param(Case("co-two-tiles", "padding", 1, 2, 130, (2, 3, 4), (1, 2, 1),
                      padding=(0, 1, 2, 0, 1, 0), grads=("dw", "db")), "trn2", id="co130-dwdb"),
]
MANY = [
    pytest.param(Case("d-h-hi", "padding", 2, 3, 4, (3, 4, 5), (2, 1, 3), stride=(1, 2, 1),
                      padding=(0, 3, 0, 2, 1, 1)), "trn2", id="d-h-hi"),
    pytest.param(Case("w-both", "padding", 1, 4, 5, (4, 3, 6), (3, 3, 1), stride=(1, 1, 2),
                      padding=(1, 1, 1, 1, 2, 3), dtype="fp16"), "trn2", id="w-both-s2"),
    pytest.param(Case("lnc2", "padding", 1, 3, 4, (3, 4, 5), (2, 1, 3), stride=(1, 2, 1),
                      padding=(3, 0, 2, 0, 0, 3), lnc=2), "trn2", id="lnc2"),
    pytest.param(*REPRODUCERS[2].values, id="wide-reproducer"),
    pytest.param(*REPRODUCERS[3].values, id="windows-out-of-order"),
]
SPREAD = 40   # the default suite runs every SPREAD-th candidate of MANY (the pick first)


def _failures(outcomes):
    return [o.describe() for o in outcomes if not o.passed]


@pytest.mark.parametrize("case, target", REPRODUCERS)
def test_reproducer_pick_is_exact(case, target):
    outcomes = run_candidates(case, target=target, plans=[_pick(case, target)])
    assert len(outcomes) == 1 and not _failures(outcomes), "\n".join(_failures(outcomes))


def test_out_of_order_windows_shared_candidates():
    """Every eighth shared-dy candidate (each crashed or missed the row; every one nightly in MANY)."""
    case, target = REPRODUCERS[3].values[:2]
    plans = _pick(case, target).feasible_candidates(where=lambda p: p.strategy.value == 'shared_dy')[::8]
    assert len(plans) > 3
    outcomes = run_candidates(case, target=target, plans=plans)
    assert not _failures(outcomes), "\n".join(_failures(outcomes))


@pytest.mark.parametrize("case, target", FEW)
def test_every_candidate_is_exact(case, target):
    outcomes = run_candidates(case, target=target)
    assert len(outcomes) > 1 and not _failures(outcomes), "\n".join(_failures(outcomes))


@pytest.mark.parametrize("case, target", MANY[:3])
def test_candidates_spread_are_exact(case, target):
    plans = _pick(case, target).feasible_candidates()
    chosen = plans[::SPREAD]
    assert len(plans) > SPREAD and 1 < len(chosen) < len(plans)
    assert {p.strategy for p in chosen} == {p.strategy for p in plans}
    outcomes = run_candidates(case, target=target, plans=chosen)
    assert not _failures(outcomes), "\n".join(_failures(outcomes))


@pytest.mark.nightly
@pytest.mark.parametrize("case, target", MANY)
def test_every_candidate_nightly(case, target):
    outcomes = run_candidates(case, target=target)
    assert len(outcomes) > 1 and not _failures(outcomes), "\n".join(_failures(outcomes))


def _pick(case, target):
    return case_plan(case, target)


@pytest.mark.parametrize("ax, band", [
    (Axis(14, 3, 2, 3, 1, 0), 1),      # stride 2, dilation 3: bands whose dy rows an earlier band owns
    (Axis(5, 1, 1, 1, 3, 4), 2),       # 1-tap kernel, padding beyond the reach on both sides
    (Axis(7, 2, 2, 2, 4, 0), 3),
    (Axis(1, 1, 1, 1, 1, 0), 1),
])
def test_owned_rows_lie_in_the_band_window(ax, band):
    bands = axis_bands(ax, band)
    owned = []
    for b in bands:
        assert b.q0 <= b.own0 <= b.own1 <= b.q1, b
        owned.extend(range(b.own0, b.own1))
    assert len(owned) == len(set(owned)) and all(0 <= o < ax.o for o in owned)
    reached = {o for o in range(ax.o) for k in range(ax.k) if 0 <= o * ax.s + k * ax.r - ax.lo < ax.n}
    assert reached <= set(owned)   # every row dx or dw needs is owned once
    assert axis_covered(ax, band) == (set(owned) == set(range(ax.o)))


def test_band_windows_and_owned_rows_on_every_small_axis():
    """Exhaustive over small axes and band sizes: each band's window holds every dy row its inputs read,
    owned rows lie in the window, each row is owned at most once and every row some input reads is owned."""
    checked = 0
    for n, k, s, r, lo, hi in itertools.product(range(1, 6), range(1, 4), range(1, 4), range(1, 3), range(5),
                                                range(5)):
        if n + lo + hi - r * (k - 1) - 1 < 0:
            continue
        ax = Axis(n, k, s, r, lo, hi)
        reached = {o for o in range(ax.o) for t in range(k) if 0 <= o * s + t * r - lo < n}
        for band in range(1, n + 1):
            owned = []
            for b in axis_bands(ax, band):
                assert b.q0 <= b.own0 <= b.own1 <= b.q1, (ax, band, b)
                owned.extend(range(b.own0, b.own1))
                reads = {(i + lo - t * r) // s for i in range(b.i0, b.i1) for t in range(k)
                         if (i + lo - t * r) % s == 0}
                assert all(b.q0 <= o < b.q1 for o in reads if 0 <= o < ax.o), (ax, band, b)
            assert len(owned) == len(set(owned)) and reached <= set(owned) <= set(range(ax.o)), (ax, band)
            assert axis_covered(ax, band) == (set(owned) == set(range(ax.o)))
            checked += 1
    assert checked > 2000


def test_a_whole_axis_band_owns_every_row():
    """One band over the axis (W always) holds the rows only padding reads: dw and db see all of them."""
    ax = Axis(1, 1, 1, 1, 1, 2)
    (b,) = axis_bands(ax, ax.n)
    assert (b.own0, b.own1) == (0, ax.o) == (0, 4) and b.q0 <= 0 and b.q1 >= ax.o
    assert axis_covered(ax, ax.n)
