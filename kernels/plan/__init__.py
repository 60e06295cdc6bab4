"""The planner of ``conv3d_bwd``: candidates, capacity checks, analytic costs, the pick.

Pure Python, no NKI import. For a geometry, dtype, target and LNC degree it enumerates candidate
plans (strategy for sharing dy, method per gradient, bands, tap grouping, buffering: ``candidates``,
``variants``), rejects those that break an SBUF / PSUM / instruction limit with the reason
(``budget``), estimates the others with the cost figures of nkisim's model (``kernels/costs.py``) by
walking the loops the kernel runs (``estimate``, ``estimate_dx``, ``estimate_dw``, ``estimate_waits``),
and picks the cheapest (``search``). Deterministic. What a plan means (the record, its options and the
work items they imply, shared with the NKI kernel) is in ``kernels.spec``.

The public names are exported here.
"""
from ..spec.forcing import current_forced_plan, forced_plan
from ..spec.record import Candidate, DbMethod, DwMethod, DxMethod, Plan, Strategy, all_method_names, replace
from .search import clear_plan_cache, plan_conv3d_bwd

__all__ = ["Candidate", "DbMethod", "DwMethod", "DxMethod", "Plan", "Strategy", "all_method_names",
           "clear_plan_cache", "current_forced_plan", "forced_plan", "plan_conv3d_bwd", "replace"]
