"""Planner coverage per dtype of the default case set (plans every case in the dtype: tens of seconds
per dtype, so not in the fast subset)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from verify.cases import CASE_SETS
from verify.harness import plan_for


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_each_dtype_exercises_every_method_its_geometries_can_get(dtype):
    """The planner's pick depends on the dtype: every method that some default geometry would get in
    ``dtype`` is the pick of a default case of that dtype, so the report measures each method's fp32
    accumulation too, not only its bf16 rounding."""
    default = CASE_SETS["default"]
    # a case already in ``dtype`` is its own re-typed twin: the planner's cache serves it once
    reachable = {c: plan_for(replace(c, dtype=dtype))[1] for c in default}
    exercised = {m for c in default if c.dtype == dtype for m in reachable[c]}
    missing = set().union(*reachable.values()) - exercised
    assert not missing, f"{dtype}: methods no {dtype} case exercises: {sorted(missing)}"
