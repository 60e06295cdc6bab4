"""Errors the kernel raises on bad input (independent of the oracle's validation by design)."""
from __future__ import annotations


class Conv3dBwdInputError(ValueError):
    """A bad argument to ``conv3d_bwd`` or the planner: names the argument, the value and the rule."""


class Conv3dBwdPlanError(ValueError):
    """No plan fits the target's capacities (names the geometry and the limiting budget)."""
