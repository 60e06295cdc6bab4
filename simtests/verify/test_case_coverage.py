"""Planner coverage of the default case set: every planner method is the pick of a default case, and per
dtype every method some default geometry would get in that dtype is the pick of a case of that dtype.

One test plans every default case re-typed to each dtype (minutes of planning, so not in the fast subset):
the plans of the cases in their own dtype are among them, so both checks share them."""
from __future__ import annotations

from dataclasses import replace

from conv3d_bwd.kernels.plan import all_method_names
from conv3d_bwd.verify.cases import CASE_SETS
from conv3d_bwd.verify.harness import plan_for

DTYPES = ("bf16", "fp16", "fp32")


def _picks(case, own_dtype: bool) -> set[str]:
    """The methods the planner picks for ``case``; a re-typed twin the planner rejects picks none (a
    geometry need not fit in every dtype), a default case itself must plan."""
    _plan, methods, error = plan_for(case)
    assert error is None or not own_dtype, f"{case.id}: {error}"
    return set(methods)


def _problem(case) -> tuple:
    """What the planner's pick depends on (the name and group of a case do not count)."""
    return (case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding, case.dilation, case.dtype,
            case.lnc, tuple(case.grads))


def test_default_cases_exercise_every_method_in_every_dtype():
    """The planner's pick depends on the dtype, so the report measures each method's fp32 accumulation
    too, not only its bf16 rounding; and no planner branch is dead or untested unnoticed."""
    default = CASE_SETS["default"]
    # Each distinct problem is planned once: a case already in ``dtype`` is its own re-typed twin, and
    # the dtype variants of the default set are the re-typed twins of other cases (267 -> 216 plans).
    picks: dict[tuple, set[str]] = {}
    reachable = {}
    for dtype in DTYPES:
        for c in default:
            twin = replace(c, dtype=dtype)
            key = _problem(twin)
            own = c.dtype == dtype
            if key not in picks or (own and not picks[key]):
                picks[key] = _picks(twin, own)
            reachable[c.id, dtype] = picks[key]
    exercised = {m for c in default for m in reachable[c.id, c.dtype]}

    possible = set(all_method_names())
    assert possible, "kernels.plan.all_method_names() is empty"
    unknown = exercised - possible
    assert not unknown, f"plans use names missing from all_method_names(): {sorted(unknown)}"
    missing = sorted(possible - exercised)
    assert not missing, (
        f"{len(missing)} of {len(possible)} planner strategies/methods are not the pick of any case in "
        f"verify.cases CASE_SETS['default']: {missing}. Add a case whose geometry makes the planner choose "
        "each (or remove the dead branch).")

    gaps = {}
    for dtype in DTYPES:
        in_dtype = {m for c in default if c.dtype == dtype for m in reachable[c.id, dtype]}
        could = set().union(*(reachable[c.id, dtype] for c in default))
        if could - in_dtype:
            gaps[dtype] = sorted(could - in_dtype)
    assert not gaps, f"methods no case of the dtype exercises, per dtype: {gaps}"
