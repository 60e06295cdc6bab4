"""Planner coverage per dtype of the default case set (plans every case in every dtype: ~15 s, so
not in the fast subset)."""
from __future__ import annotations

from verify.cases import CASE_SETS


def test_each_dtype_exercises_every_method_its_geometries_can_get():
    """The planner's pick depends on the dtype. For each dtype: every method that some default
    geometry would get in that dtype is the pick of a default case of that dtype, so the report
    measures each method's fp32 accumulation too, not only its bf16 rounding."""
    from dataclasses import replace

    from verify.harness import plan_for

    default = CASE_SETS["default"]
    for dtype in ("bf16", "fp16", "fp32"):
        exercised = {m for c in default if c.dtype == dtype for m in plan_for(c)[1]}
        reachable = {m for c in default for m in plan_for(replace(c, dtype=dtype))[1]}
        assert reachable <= exercised, (
            f"{dtype}: methods no {dtype} case exercises: {sorted(reachable - exercised)}")
