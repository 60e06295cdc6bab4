"""A forced plan: within ``forced_plan(plan)`` the kernel follows ``plan`` instead of planning."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..errors import Conv3dBwdInputError
from .record import Plan

_forced: list[Plan] = []

_forced_lock = threading.Lock()


@contextlib.contextmanager
def forced_plan(plan: Plan) -> Iterator[Plan]:
    """Within the block the kernel follows ``plan`` instead of planning (same geometry required)."""
    if not isinstance(plan, Plan):
        raise Conv3dBwdInputError(f"plan={plan!r}: must be a kernels.plan.Plan")
    with _forced_lock:
        _forced.append(plan)
    try:
        yield plan
    finally:
        with _forced_lock:
            _forced.remove(plan)


def current_forced_plan() -> Plan | None:
    """The innermost forced plan (module-wide, so both LNC programs' threads see it)."""
    with _forced_lock:
        return _forced[-1] if _forced else None
