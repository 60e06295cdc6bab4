"""Bad input raises GeometryError (a ValueError) whose message names the argument, the value and the rule."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from conv3d_bwd.reference import (
    ConvGeometry,
    GeometryError,
    NonFiniteInputError,
    conv3d_bwd_magnitudes,
    conv3d_bwd_ref,
    conv3d_fwd,
)

# A valid starting point: B=2, C_in=3, C_out=4, 6x8x16 input, 3x3x3 kernel, stride (1, 2, 2), pad 1.
STRIDE = (1, 2, 2)
PADDING = (1, 1, 1, 1, 1, 1)
X_SHAPE = (2, 3, 6, 8, 16)
W_SHAPE = (3, 3, 3, 3, 4)
DY_SHAPE = (2, 4, 6, 4, 8)


def arrays(dy_shape=DY_SHAPE, x_shape=X_SHAPE, w_shape=W_SHAPE, dtype=np.float32):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(s).astype(dtype) for s in (dy_shape, x_shape, w_shape))


def raises(*fragments: str, error=GeometryError):
    """pytest.raises for ``error`` whose message contains every fragment, in order."""
    return pytest.raises(error, match=".*".join(re.escape(f) for f in fragments))


@pytest.mark.fast
def test_the_valid_starting_point_is_valid():
    dx, dw, db = conv3d_bwd_ref(*arrays(), stride=STRIDE, padding=PADDING)
    assert dx.shape == X_SHAPE and dw.shape == W_SHAPE and db.shape == (4,)
    assert issubclass(GeometryError, ValueError) and issubclass(NonFiniteInputError, GeometryError)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("which", "shape", "fragments"),
    [
        ("dy", (2, 4, 6, 4), ("dy.shape=(2, 4, 6, 4)", "5-D", "got 4 dims")),
        ("x", (2, 3, 6, 8, 16, 1), ("x_in.shape=(2, 3, 6, 8, 16, 1)", "5-D", "got 6 dims")),
        ("w", (3, 3, 3, 3), ("filters.shape=(3, 3, 3, 3)", "5-D", "got 4 dims")),
        ("x", (), ("x_in.shape=()", "got 0 dims")),
    ],
)
def test_wrong_rank(which, shape, fragments):
    shapes = {"dy": DY_SHAPE, "x": X_SHAPE, "w": W_SHAPE, which: shape}
    with raises(*fragments):
        conv3d_bwd_ref(*arrays(shapes["dy"], shapes["x"], shapes["w"]), stride=STRIDE, padding=PADDING)


@pytest.mark.parametrize(
    ("shapes", "fragments"),
    [
        ({"w": (3, 3, 3, 5, 4)}, ("filters.shape[3]=5", "C_in=3", "x_in.shape[1]")),
        ({"dy": (2, 5, 6, 4, 8)}, ("dy.shape[1]=5", "C_out=4", "filters.shape[4]")),
        ({"dy": (3, 4, 6, 4, 8)}, ("dy.shape[0]=3", "batch 2", "x_in.shape[0]")),
        ({"x": (0, 3, 6, 8, 16), "dy": (0, 4, 6, 4, 8)}, ("x_in.shape[0]=0", "integer >= 1")),
        ({"w": (3, 0, 3, 3, 4)}, ("filters.shape[1]=0", "integer >= 1")),
    ],
)
def test_channel_batch_and_empty_dims(shapes, fragments):
    s = {"dy": DY_SHAPE, "x": X_SHAPE, "w": W_SHAPE, **shapes}
    with raises(*fragments):
        conv3d_bwd_ref(*arrays(s["dy"], s["x"], s["w"]), stride=STRIDE, padding=PADDING)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"stride": (1, 0, 2)}, ("stride[1]=0", "stride must be an integer >= 1")),
        ({"stride": (1, -2, 2)}, ("stride[1]=-2", "stride must be an integer >= 1")),
        ({"stride": (1, 2.0, 2)}, ("stride[1]=2.0", "stride must be an integer >= 1")),
        ({"stride": (1, 1.5, 2)}, ("stride[1]=1.5", "stride must be an integer >= 1")),
        ({"stride": (True, 2, 2)}, ("stride[0]=True", "stride must be an integer >= 1")),
        ({"stride": (1, 2)}, ("stride=(1, 2)", "expected 3 integers", "got 2")),
        ({"stride": 2}, ("stride=2", "expected a sequence of 3 integers")),
        ({"stride": "122"}, ("stride='122'", "expected a sequence of 3 integers")),
        ({"dilation": (1, 1, 0)}, ("dilation[2]=0", "dilation must be an integer >= 1")),
        ({"dilation": (1, 1, 1, 1)}, ("dilation=(1, 1, 1, 1)", "expected 3 integers", "got 4")),
        ({"padding": (1, 1, -1, 1, 1, 1)}, ("padding[2]=-1", "padding must be an integer >= 0")),
        ({"padding": (1, 1, 1, 1, 1, 0.5)}, ("padding[5]=0.5", "padding must be an integer >= 0")),
        ({"padding": (1, 1, 1)}, ("padding=(1, 1, 1)", "expected 6 integers", "got 3")),
        ({"padding": None}, ("padding=None", "expected a sequence of 6 integers")),
        ({"padding": np.ones((2, 3), dtype=int)}, ("padding=array", "expected a sequence of 6 integers")),
    ],
)
def test_bad_stride_padding_dilation(kwargs, fragments):
    conv = {"stride": STRIDE, "padding": PADDING, **kwargs}
    with raises(*fragments):
        conv3d_bwd_ref(*arrays(), **conv)
    with raises(*fragments):
        conv3d_fwd(*arrays()[1:], **conv)


def test_numpy_integers_are_accepted_and_normalised():
    geo = ConvGeometry(np.int64(2), 3, 4, (6, np.int32(8), 16), (3, 3, 3), stride=[1, np.int64(2), 2],
                       padding=np.array(PADDING))
    assert geo.stride == STRIDE and type(geo.stride[1]) is int and geo.batch == 2
    assert geo == ConvGeometry(2, 3, 4, (6, 8, 16), (3, 3, 3), STRIDE, PADDING)
    assert geo.dy_shape == DY_SHAPE and geo.x_shape == X_SHAPE and geo.w_shape == W_SHAPE
    assert geo.dx_shape == X_SHAPE and geo.dw_shape == W_SHAPE and geo.db_shape == (4,)
    assert geo.out_size == (6, 4, 8)


@pytest.mark.fast
def test_dy_spatial_mismatch_names_the_expected_size_and_the_formula():
    with raises("dy.shape[3]=7", "expected H_out=4", "(in + pad_lo + pad_hi - dil*(k-1) - 1) // stride + 1",
                "(8+1+1-1*(3-1)-1)//2+1"):
        conv3d_bwd_ref(*arrays(dy_shape=(2, 4, 6, 7, 8)), stride=STRIDE, padding=PADDING)
    with raises("dy.shape[4]=9", "expected W_out=8", "(16+1+1-1*(3-1)-1)//2+1"):
        conv3d_bwd_ref(*arrays(dy_shape=(2, 4, 6, 4, 9)), stride=STRIDE, padding=PADDING)


@pytest.mark.fast
def test_output_smaller_than_one_position():
    # a 3-tap kernel with dilation 4 spans 9 positions; the padded H input has only 8
    with raises("out_size[1]=0 (H)", "(8+0+0-4*(3-1)-1)//1+1", "must be >= 1", "spans 9", "only 8"):
        conv3d_fwd(*arrays()[1:], dilation=(1, 4, 1))
    with raises("out_size[0]", "must be >= 1"):
        ConvGeometry(1, 1, 1, (2, 5, 5), (5, 1, 1))


@pytest.mark.fast
@pytest.mark.parametrize(
    ("dtype", "shown"),
    [(np.int32, "int32"), (np.int64, "int64"), (np.int8, "int8"), (np.bool_, "bool"),
     (np.complex128, "complex128"), (object, "object"), (ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
     (np.longdouble, "float128")],
)
def test_unsupported_dtypes(dtype, shown):
    dy, x, w = arrays()
    bad = np.zeros(X_SHAPE, dtype=dtype)
    with raises(f"x_in.dtype={shown}", "unsupported dtype", "bfloat16", "float64"):
        conv3d_bwd_ref(dy, bad, w, stride=STRIDE, padding=PADDING)
    with raises(f"filters.dtype={shown}", "unsupported dtype"):
        conv3d_bwd_magnitudes(dy, x, np.zeros(W_SHAPE, dtype=dtype), stride=STRIDE, padding=PADDING)
    with raises(f"dy.dtype={shown}", "unsupported dtype"):
        conv3d_bwd_ref(np.zeros(DY_SHAPE, dtype=dtype), x, w, stride=STRIDE, padding=PADDING)


def test_ragged_input_is_not_an_array():
    with raises("x_in", "cannot be read as a numeric array"):
        conv3d_fwd([[1.0, 2.0], [3.0]], np.zeros(W_SHAPE))


@pytest.mark.fast
def test_no_gradient_requested():
    for fn in (conv3d_bwd_ref, conv3d_bwd_magnitudes):
        with raises("compute_dx=False, compute_dw=False, compute_db=False", "at least one gradient"):
            fn(*arrays(), stride=STRIDE, padding=PADDING, compute_dx=False, compute_dw=False, compute_db=False)


def test_non_finite_inputs_are_refused_with_their_position():
    dy, x, w = arrays(dtype=np.float64)
    x[1, 2, 3, 4, 5] = np.inf
    with raises("x_in holds 1 non-finite values", "(1, 2, 3, 4, 5)", error=NonFiniteInputError):
        conv3d_bwd_ref(dy, x, w, stride=STRIDE, padding=PADDING)
    w[0, 0, 0, 0, 0] = np.nan
    with raises("filters holds 1 non-finite", error=NonFiniteInputError):
        conv3d_bwd_ref(dy, np.zeros_like(x), w, stride=STRIDE, padding=PADDING)


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"batch": 0}, ("batch=0", "batch must be an integer >= 1")),
        ({"c_in": 2.5}, ("c_in=2.5", "c_in must be an integer >= 1")),
        ({"in_size": (6, 8)}, ("in_size=(6, 8)", "expected 3 integers", "got 2")),
        ({"kernel": (3, 0, 3)}, ("kernel[1]=0", "kernel size must be an integer >= 1")),
    ],
)
def test_geometry_constructor_validates_too(kwargs, fragments):
    base = {"batch": 2, "c_in": 3, "c_out": 4, "in_size": (6, 8, 16), "kernel": (3, 3, 3)}
    with raises(*fragments):
        ConvGeometry(**{**base, **kwargs})


def test_from_shapes_matches_the_arrays_and_skips_dy_when_none():
    geo = ConvGeometry.from_shapes(DY_SHAPE, X_SHAPE, W_SHAPE, STRIDE, PADDING, (1, 1, 1))
    assert geo.dy_shape == DY_SHAPE
    assert ConvGeometry.from_shapes(None, X_SHAPE, W_SHAPE, STRIDE, PADDING) == geo
    with raises("dy.shape[2]=5", "expected D_out=6"):
        ConvGeometry.from_shapes((2, 4, 5, 4, 8), X_SHAPE, W_SHAPE, STRIDE, PADDING)
