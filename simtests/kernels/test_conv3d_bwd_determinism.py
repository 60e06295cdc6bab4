"""The kernel is bitwise deterministic: the same inputs twice give the same bytes.

Statistical-mode inputs (random reals) are used on purpose: with exact-mode integers any
accumulation order gives the same result, so only real-valued inputs can expose a nondeterministic
order (benchdnn's bitwise mode does the same).
"""
from __future__ import annotations

import numpy as np
import pytest

from conv3d_bwd.verify.backends import run_kernel
from conv3d_bwd.verify.cases import CASE_SETS
from conv3d_bwd.verify.inputs import make_inputs

from .case_support import repro_command

SEED = 1234


def _determinism_cases():
    """One fast LNC1 case and one LNC2 case (LNC2 combines partials across cores)."""
    fast = [c for c in CASE_SETS["default"] if c.fast]
    picks = []
    for lnc in (1, 2):
        with_all = [c for c in fast if c.lnc == lnc and set(c.grads) == {"dx", "dw", "db"}]
        pool = with_all or [c for c in CASE_SETS["default"] if c.lnc == lnc]
        if not pool:  # an empty parametrize would only skip; a missing LNC must fail collection
            raise LookupError(f"no LNC{lnc} case in CASE_SETS['default'] for the determinism test")
        picks.append(pool[0])
    return picks


@pytest.mark.fast
@pytest.mark.parametrize("case", _determinism_cases(), ids=lambda c: c.id)
def test_two_runs_are_bitwise_equal(case, kernel_backend):
    dy, x, w = make_inputs(case, "stat", SEED)
    first = run_kernel(case, dy, x, w, kernel_backend).outputs
    second = run_kernel(case, dy, x, w, kernel_backend).outputs
    assert set(first) == set(second) == set(case.grads)
    for name in case.grads:
        a, b = np.asarray(first[name]), np.asarray(second[name])
        assert a.dtype == b.dtype and a.shape == b.shape
        differing = int(np.count_nonzero(a.view(np.uint8) != b.view(np.uint8)))
        assert a.tobytes() == b.tobytes(), (
            f"{name}: {differing} bytes differ between two identical runs\n"
            f"reproduce: {repro_command(case, 'stat', SEED, kernel_backend)}"
        )
