"""``costs.section_ns`` with an engine whose busy time rounded to a tiny negative (busy times that cancel):
a real, finite section time, and the geometry where the planner met it plans."""
from __future__ import annotations

import math

from conv3d_bwd.kernels.costs import section_ns
from conv3d_bwd.verify.candidates import case_plan
from conv3d_bwd.verify.cases import Case


def test_a_rounded_negative_busy_time_adds_nothing():
    busy = {"tensor": 100.0, "vector": -5.684341886080802e-14, "scalar": 10.0, "gpsimd": 0.0, "dma": 50.0}
    t = section_ns(busy)
    assert isinstance(t, float) and math.isfinite(t)
    assert t == section_ns({**busy, "vector": 0.0})


def test_the_geometry_that_met_it_plans():
    case = Case("rounding", "costs", 2, 6, 257, (3, 4, 1), (1, 7, 1), stride=(2, 3, 2), padding=(0, 0, 2, 6, 1, 0),
                lnc=2)
    plan = case_plan(case, "trn2")
    assert math.isfinite(plan.estimated_us) and plan.estimated_us > 0
