"""The candidates' lower bound (``kernels/plan/bound.py``): at most the estimate, on every feasible candidate
of varied geometries, and not trivially 0."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.plan.bound import bounded, lower_bound_us
from conv3d_bwd.verify.cases import CASE_SETS

from .support import exhaustive_plan

# every default case on trn2 at LNC1 and LNC2, trn1 at LNC1 and trn3 at the case's LNC; in the suite the fast
# ones of a few groups on trn2 at their own LNC plus LNC2 for the LNC2 and layer cases (every candidate is
# estimated: the rest runs in the nightly env)
SUITE_GROUPS = ("basic", "strides", "lnc2", "layers", "grads")
def _in_suite(case, target: str, lnc: int) -> bool:
    return (case.fast and target == "trn2" and case.group in SUITE_GROUPS
            and (lnc == case.lnc or case.group in ("lnc2", "layers")))


MATRIX = [pytest.param(c, t, n, id=f"{c.id}-{t}-lnc{n}", marks=() if _in_suite(c, t, n) else pytest.mark.nightly)
          for c in CASE_SETS["default"]
          for t, n in (("trn2", 1), ("trn2", 2), ("trn1", 1), ("trn3", c.lnc))]


@pytest.mark.parametrize("case, target, lnc", MATRIX)
def test_bound_is_at_most_the_estimate(case, target, lnc):
    """Every feasible candidate: dx's part <= dx's and dw's parts <= the estimate (as computed alone)."""
    pick = exhaustive_plan(case, target, lnc)
    if pick is None:
        pytest.skip("no candidate fits this geometry on this target (the planner's error is tested elsewhere)")
    g, hw, memo = pick.geometry(), TARGET_FIGURES[target], {}
    for alt in pick.feasible_candidates():
        part = lower_bound_us(g, alt, hw, memo, dw=False)
        whole = lower_bound_us(g, alt, hw, memo)
        assert 0.0 <= part <= whole <= alt.estimated_us * (1 + 1e-9), alt.label


def test_bound_is_not_trivial():
    """Bounded candidates get a positive bound, most of them within a factor 4 of their estimate."""
    case = next(c for c in CASE_SETS["default"] if c.grads == ("dx", "dw", "db") and c.lnc == 1)
    pick = exhaustive_plan(case)
    g, hw, memo = pick.geometry(), TARGET_FIGURES["trn2"], {}
    alts = pick.feasible_candidates(where=lambda a: bounded(a))
    ratios = [lower_bound_us(g, a, hw, memo) / a.estimated_us for a in alts]
    assert alts and min(ratios) > 0.0
    assert sum(r > 0.25 for r in ratios) > len(ratios) / 2
