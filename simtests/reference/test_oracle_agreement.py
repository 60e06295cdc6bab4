"""The oracle against independent implementations: naive loops, scipy.signal, and per-tap slicing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conv3d_bwd.reference import conv3d_bwd_magnitudes, conv3d_bwd_ref, conv3d_fwd
from simtests.reference.cases import TINY, Geo
from simtests.reference.independent import naive_bwd, naive_fwd, scipy_bwd, tap_slices_bwd


def assert_close(got, want, tol, what):
    """|got - want| <= tol * max(1, max|want|), with the worst element in the message."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == np.float64, f"{what}: dtype {got.dtype}"
    err = np.abs(got - want)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
    assert err.max(initial=0.0) <= tol * scale, (
        f"{what}: max error {err.max():.3e} at {worst} (got {got[worst]!r}, want {want[worst]!r}), "
        f"tolerance {tol * scale:.3e}"
    )


@pytest.mark.fast
@pytest.mark.parametrize("geo", TINY, ids=str)
def test_backward_matches_naive_loops(geo: Geo):
    dy, x, w = geo.arrays(seed=1)
    dx, dw, db = conv3d_bwd_ref(dy, x, w, **geo.conv)
    ndx, ndw, ndb = naive_bwd(dy, x, w, **geo.conv)
    assert_close(dx, ndx, 1e-12, "dx")
    assert_close(dw, ndw, 1e-12, "dw")
    assert_close(db, ndb, 1e-12, "db")


@pytest.mark.parametrize("geo", TINY, ids=str)
def test_forward_matches_naive_loops(geo: Geo):
    _, x, w = geo.arrays(seed=2)
    assert_close(conv3d_fwd(x, w, **geo.conv), naive_fwd(x, w, **geo.conv), 1e-12, "y")


@pytest.mark.parametrize("geo", TINY, ids=str)
def test_backward_matches_scipy_signal(geo: Geo):
    dy, x, w = geo.arrays(seed=3)
    for name, got, want in zip(("dx", "dw", "db"), conv3d_bwd_ref(dy, x, w, **geo.conv),
                               scipy_bwd(dy, x, w, **geo.conv)):
        assert_close(got, want, 1e-12, name)


def test_backward_matches_scipy_on_a_medium_shape():
    geo = Geo(2, 5, 4, (9, 11, 10), (3, 2, 3), stride=(2, 1, 2), padding=(1, 2, 0, 1, 2, 0),
              dilation=(1, 2, 2))
    dy, x, w = geo.arrays(seed=4)
    for name, got, want in zip(("dx", "dw", "db"), conv3d_bwd_ref(dy, x, w, **geo.conv),
                               scipy_bwd(dy, x, w, **geo.conv)):
        assert_close(got, want, 1e-12, name)


def test_backward_matches_tap_slices_with_large_channels():
    # Channel counts above the tiny ones make BLAS take its blocked paths.
    geo = Geo(2, 40, 24, (6, 7, 9), (3, 3, 3), stride=(1, 2, 1), padding=(1, 1, 0, 2, 1, 1))
    dy, x, w = geo.arrays(seed=5)
    for name, got, want in zip(("dx", "dw", "db"), conv3d_bwd_ref(dy, x, w, **geo.conv),
                               tap_slices_bwd(dy, x, w, **geo.conv)):
        assert_close(got, want, 1e-12, name)


@pytest.mark.fast
@pytest.mark.parametrize("geo", TINY[1:6], ids=str)
def test_magnitudes_are_sums_of_absolute_products(geo: Geo):
    dy, x, w = geo.arrays(seed=6)
    mags = conv3d_bwd_magnitudes(dy, x, w, **geo.conv)
    want = naive_bwd(np.abs(dy), np.abs(x), np.abs(w), **geo.conv)
    grads = conv3d_bwd_ref(dy, x, w, **geo.conv)
    for name, mag, ref, grad in zip(("dx", "dw", "db"), mags, want, grads):
        assert_close(mag, ref, 1e-12, name)
        assert (mag >= np.abs(grad) - 1e-12 * (1 + mag)).all(), f"{name}: |grad| exceeds its magnitude"
        # A magnitude strictly above |grad| somewhere shows the absolute values were really taken.
        assert (mag > np.abs(grad) + 1e-9).any(), f"{name}: magnitudes equal |grad| everywhere"


@pytest.mark.fast
@pytest.mark.parametrize(
    ("dtype", "name"),
    [(ml_dtypes.bfloat16, "bf16"), (np.float16, "fp16"), (np.float32, "fp32"), (np.float64, "fp64")],
)
def test_inputs_of_every_float_dtype_widen_exactly(dtype, name):
    geo = TINY[3]
    dy, x, w = (a.astype(dtype) for a in geo.arrays(seed=7))
    got = conv3d_bwd_ref(dy, x, w, **geo.conv)
    want = naive_bwd(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), **geo.conv)
    for grad_name, g, ref in zip(("dx", "dw", "db"), got, want):
        assert g.dtype == np.float64, f"{name} {grad_name}: output dtype {g.dtype}"
        assert_close(g, ref, 1e-12, f"{name} {grad_name}")
    assert conv3d_fwd(x, w, **geo.conv).dtype == np.float64


def test_small_integer_inputs_give_exact_integers():
    # The exact-mode premise: integer data sums exactly in float64 whatever the summation order.
    geo = Geo(2, 6, 5, (5, 6, 7), (3, 3, 2), stride=(1, 2, 1), padding=(1, 1, 2, 0, 1, 1), dilation=(1, 1, 2))
    rng = np.random.default_rng(8)
    dy, x, w = (rng.integers(-4, 5, size=s).astype(ml_dtypes.bfloat16)
                for s in (geo.dy_shape, geo.x_shape, geo.w_shape))
    got = conv3d_bwd_ref(dy, x, w, **geo.conv)
    want = naive_bwd(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), **geo.conv)
    for name, g, ref in zip(("dx", "dw", "db"), got, want):
        np.testing.assert_array_equal(g, ref, err_msg=name)
        assert np.any(g != 0), f"{name} is all zero: a vacuous comparison"


@pytest.mark.fast
def test_requested_subsets_come_back_in_order_and_bare_when_single():
    geo = TINY[4]
    dy, x, w = geo.arrays(seed=9)
    dx, dw, db = conv3d_bwd_ref(dy, x, w, **geo.conv)
    flags = ("compute_dx", "compute_dw", "compute_db")
    full = {"dx": dx, "dw": dw, "db": db}
    for mask in range(1, 8):
        chosen = [n for bit, n in enumerate(("dx", "dw", "db")) if mask >> bit & 1]
        kwargs = {f: bool(mask >> bit & 1) for bit, f in enumerate(flags)}
        out = conv3d_bwd_ref(dy, x, w, **geo.conv, **kwargs)
        mags = conv3d_bwd_magnitudes(dy, x, w, **geo.conv, **kwargs)
        if len(chosen) == 1:
            assert isinstance(out, np.ndarray) and isinstance(mags, np.ndarray), chosen
            out, mags = (out,), (mags,)
        assert isinstance(out, tuple) and len(out) == len(chosen) == len(mags), chosen
        for name, got, mag in zip(chosen, out, mags):
            np.testing.assert_allclose(got, full[name], rtol=0, atol=1e-12, err_msg=f"{chosen}: {name}")
            assert mag.shape == full[name].shape


def test_unused_input_is_not_read():
    # dx needs no x and dw no filters: a NaN there must not matter, which shows nothing extra is computed.
    geo = TINY[2]
    dy, x, w = geo.arrays(seed=10)
    dx = conv3d_bwd_ref(dy, np.full_like(x, np.nan), w, **geo.conv, compute_dw=False, compute_db=False)
    dw = conv3d_bwd_ref(dy, x, np.full_like(w, np.nan), **geo.conv, compute_dx=False, compute_db=False)
    ndx, ndw, _ = naive_bwd(dy, x, w, **geo.conv)
    assert_close(dx, ndx, 1e-12, "dx")
    assert_close(dw, ndw, 1e-12, "dw")
