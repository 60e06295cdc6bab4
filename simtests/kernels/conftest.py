"""Fixtures of the kernel tests (their shared helpers are in ``support``)."""
from __future__ import annotations

import importlib

import pytest

# No ``import kernels`` here: this conftest loads before the root conftest's pytest_configure binds
# ``nki`` for the selected backend (the case tests must see a placeholder Neuron package as it is).


@pytest.fixture
def inside_runs(monkeypatch):
    """The times dw ran dx inside its last row pass (so a test knows the path ran, not the fallback)."""
    seen = []
    module = importlib.import_module("conv3d_bwd.kernels.conv3d_bwd")   # (kernels.conv3d_bwd is the kernel)
    original = module.run_dw_streaming

    def counted(ctx, pid, lnc, db_state, prefetch=None, after_first=None, before_last_finish=None, inside=None):
        if inside is not None:
            inner = inside

            def inside(*args, **kwargs):   # (dx_inside_boxes: also called with before=True)
                seen.append(pid)
                return inner(*args, **kwargs)
        return original(ctx, pid, lnc, db_state, prefetch, after_first, before_last_finish, inside)

    monkeypatch.setattr(module, "run_dw_streaming", counted)
    return seen
