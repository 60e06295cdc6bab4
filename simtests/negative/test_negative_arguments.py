"""Arguments of the wrong kind: inputs that are not arrays, sequence arguments given as arrays, flags that
are not bools. Each gets Conv3dBwdInputError naming the argument and the rule (the kernel through
nki.simulate, as a user calls it), or works where a demanding user expects it to (integer arrays for the
sequence arguments of the Python API)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conv3d_bwd.kernels.errors import Conv3dBwdInputError
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from simtests.negative.bad_inputs import valid_call


def _simulate(arrays, kwargs):
    import nki

    from conv3d_bwd.kernels import conv3d_bwd

    return nki.simulate(conv3d_bwd)(*arrays, **kwargs)


@pytest.mark.parametrize("i, name", [(0, "dy"), (1, "x_in"), (2, "filters")])
def test_a_list_input_is_named(i, name, kernel_backend):
    arrays, kwargs = valid_call()
    arrays = list(arrays)
    arrays[i] = arrays[i].astype(np.float32).tolist()
    with pytest.raises(Conv3dBwdInputError, match=rf"^{name}: got a list; must be an array"):
        _simulate(arrays, kwargs)


@pytest.mark.parametrize("flag", ["compute_dx", "compute_dw", "compute_db"])
@pytest.mark.parametrize("value", ["False", "True", 0, 1, None])
def test_a_non_bool_flag_is_named(flag, value, kernel_backend):
    arrays, kwargs = valid_call()
    with pytest.raises(Conv3dBwdInputError, match=rf"^{flag}=.*must be a bool"):
        _simulate(arrays, {**kwargs, flag: value})


def test_numpy_bool_flags_are_bools(kernel_backend):
    arrays, kwargs = valid_call()
    out = _simulate(arrays, {**kwargs, "compute_dx": np.bool_(False), "compute_db": np.bool_(False)})
    assert np.asarray(out).shape == arrays[2].shape   # dw alone


def test_a_tensor_stride_in_the_kernel_is_named(kernel_backend):
    """Under nki.jit an array argument becomes a device tensor (no values to plan with): named, with the fix."""
    arrays, kwargs = valid_call()
    with pytest.raises(Conv3dBwdInputError, match=r"^stride: got a tensor of shape \(3,\); must be a tuple of 3"):
        _simulate(arrays, {**kwargs, "stride": np.array(kwargs["stride"], np.int32)})


def test_integer_arrays_are_sequences_in_the_python_api():
    (dy, x, w), kwargs = valid_call()
    as_arrays = {k: np.array(kwargs[k]) for k in ("stride", "padding", "dilation")}
    g_arr = validate(dy.shape, x.shape, w.shape, **as_arrays)
    g_tup = validate(dy.shape, x.shape, w.shape, kwargs["stride"], kwargs["padding"], kwargs["dilation"])
    assert g_arr == g_tup
    p_arr = plan_conv3d_bwd(dy.shape, x.shape, w.shape, **as_arrays)
    p_tup = plan_conv3d_bwd(dy.shape, x.shape, w.shape, stride=kwargs["stride"], padding=kwargs["padding"],
                            dilation=kwargs["dilation"])
    assert p_arr.label == p_tup.label and p_arr.estimated_us == p_tup.estimated_us
    assert all(type(v) is int for v in p_arr.stride + p_arr.padding + p_arr.dilation)


@pytest.mark.parametrize("name, value, rule", [
    ("stride", np.array([1.0, 2.0, 1.0]), "must be 3 integers"),
    ("stride", np.ones((1, 3), int), "must be 3 integers"),
    ("dilation", np.array([1, 1]), "must be a tuple of 3 integers, got 2"),
    ("padding", np.array([0, 0, 1, 1, 0, -1]), "every entry must be >= 0"),
])
def test_bad_arrays_are_named(name, value, rule):
    (dy, x, w), _kw = valid_call()
    with pytest.raises(Conv3dBwdInputError) as info:
        validate(dy.shape, x.shape, w.shape, **{name: value})
    assert re.match(rf"^{name}\b", str(info.value)) and rule in str(info.value)
