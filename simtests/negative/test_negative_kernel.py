"""The kernel (and its planner) reject every bad input with Conv3dBwdInputError naming the argument.

The kernel runs through ``nki.simulate`` as a user would call it; the error must come out as the
kernel's own ValueError subclass, before any work, never as an IndexError or an emulator error.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from conv3d_bwd.kernels.errors import Conv3dBwdInputError
from simtests.negative.bad_inputs import BAD_INPUTS, valid_call

KERNEL_CASES = [pytest.param(bad, id=bad.id) for bad in BAD_INPUTS if bad.kernel]
_DTYPE_NAMES = {np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32"}


def _simulator_usage_errors() -> tuple[type[Exception], ...]:
    """The emulator's own bad-argument error (a ValueError subclass), when nkisim is what runs."""
    import nki

    if getattr(nki, "__name__", "") == "nki":  # the real package: only the kernel's error counts
        return ()
    from conv3d_bwd.nkisim.errors import NkiUsageError

    return (NkiUsageError,)


def _simulate(arrays, kwargs):
    import nki

    from conv3d_bwd.kernels import conv3d_bwd

    return nki.simulate(conv3d_bwd)(*arrays, **kwargs)


@pytest.mark.fast
def test_valid_call_is_accepted(kernel_backend):
    """The base of every mutation runs, so each error below comes from the one change."""
    arrays, kwargs = valid_call()
    dx, dw, db = _simulate(arrays, kwargs)
    assert dx.shape == arrays[1].shape and dw.shape == arrays[2].shape and db.shape == (arrays[0].shape[1],)


@pytest.mark.fast
@pytest.mark.parametrize("bad", KERNEL_CASES)
def test_kernel_rejects_bad_input(bad, kernel_backend):
    arrays, kwargs = bad.mutate(*valid_call())
    expected = (Conv3dBwdInputError, *_simulator_usage_errors()) if bad.simulator_boundary else Conv3dBwdInputError
    with pytest.raises(expected) as info:
        _simulate(arrays, kwargs)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert re.search(bad.names, message), f"message does not name the argument ({bad.names}): {message}"


@pytest.mark.fast
@pytest.mark.parametrize("bad", [b for b in KERNEL_CASES if b.id != "dtype-mismatch"])
def test_planner_rejects_bad_input(bad):
    """The planner takes shapes and one dtype name; it must reject the same geometries."""
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    arrays, kwargs = bad.mutate(*valid_call())
    dtypes = {_DTYPE_NAMES.get(np.asarray(a).dtype, str(np.asarray(a).dtype)) for a in arrays}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else next(d for d in dtypes if d not in _DTYPE_NAMES.values())
    shapes = [tuple(np.shape(a)) for a in arrays]
    with pytest.raises(Conv3dBwdInputError) as info:
        plan_conv3d_bwd(*shapes, dtype=dtype, **kwargs)
    message = str(info.value)
    assert re.search(bad.names, message), f"message does not name the argument ({bad.names}): {message}"
