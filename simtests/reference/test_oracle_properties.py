"""Properties the gradients must have: adjointness, finite differences, db = sum(dy), exact zeros."""

from __future__ import annotations

import numpy as np
import pytest

from conv3d_bwd.reference import conv3d_bwd_ref, conv3d_fwd
from simtests.reference.cases import TINY, Geo
from simtests.reference.independent import covered_mask


def relative_gap(a: float, b: float, scale: float) -> float:
    return abs(a - b) / scale


@pytest.mark.fast
@pytest.mark.parametrize("geo", TINY, ids=str)
def test_adjoint_identity(geo: Geo):
    """<conv(x, w), dy> = <x, dx> = <w, dw>: the backward is the transpose of the forward."""
    dy, x, w = geo.arrays(seed=11)
    dx, dw, _ = conv3d_bwd_ref(dy, x, w, **geo.conv)
    y = conv3d_fwd(x, w, **geo.conv)
    forward = float(np.vdot(y, dy))
    # Scale by the sum of |terms|, so a cancelling (near-zero) inner product is still judged fairly.
    scale = float(np.vdot(np.abs(y), np.abs(dy))) + 1e-300
    assert relative_gap(forward, float(np.vdot(x, dx)), scale) <= 1e-10
    assert relative_gap(forward, float(np.vdot(w, dw)), scale) <= 1e-10


def test_adjoint_identity_on_a_larger_shape():
    geo = Geo(2, 16, 12, (9, 10, 11), (3, 3, 3), stride=(2, 2, 1), padding=(1, 0, 1, 2, 0, 1),
              dilation=(1, 2, 1))
    dy, x, w = geo.arrays(seed=12)
    dx, dw, _ = conv3d_bwd_ref(dy, x, w, **geo.conv)
    y = conv3d_fwd(x, w, **geo.conv)
    forward = float(np.vdot(y, dy))
    scale = float(np.vdot(np.abs(y), np.abs(dy)))
    assert relative_gap(forward, float(np.vdot(x, dx)), scale) <= 1e-10
    assert relative_gap(forward, float(np.vdot(w, dw)), scale) <= 1e-10


@pytest.mark.parametrize(
    "geo",
    [
        Geo(1, 2, 2, (4, 3, 4), (2, 2, 3), stride=(1, 2, 1), padding=(1, 0, 0, 1, 1, 1)),
        Geo(2, 1, 2, (5, 4, 3), (3, 2, 2), stride=(2, 1, 2), padding=(0, 2, 1, 0, 0, 1), dilation=(1, 2, 1)),
    ],
    ids=str,
)
def test_central_finite_differences_of_the_forward(geo: Geo):
    """dL/dx and dL/dw of L = <conv3d_fwd(x, w), dy>, by central differences, element by element."""
    dy, x, w = geo.arrays(seed=13)
    dx, dw, _ = conv3d_bwd_ref(dy, x, w, **geo.conv)
    h = 1e-3

    def loss(xv, wv):
        return float(np.vdot(conv3d_fwd(xv, wv, **geo.conv), dy))

    for name, arg, grad in (("x", x, dx), ("w", w, dw)):
        numeric = np.empty_like(arg)
        for idx in np.ndindex(arg.shape):
            plus, minus = arg.copy(), arg.copy()
            plus[idx] += h
            minus[idx] -= h
            if name == "x":
                numeric[idx] = (loss(plus, w) - loss(minus, w)) / (2 * h)
            else:
                numeric[idx] = (loss(x, plus) - loss(x, minus)) / (2 * h)
        # L is linear in each argument, so only rounding (~1e-16 |L| / h) separates the two.
        np.testing.assert_allclose(grad, numeric, rtol=0, atol=1e-9, err_msg=f"d{name}")
        assert np.abs(grad).max() > 0.1, f"d{name} is tiny: a vacuous comparison"


@pytest.mark.fast
@pytest.mark.parametrize("geo", TINY, ids=str)
def test_db_is_the_sum_of_dy(geo: Geo):
    dy, x, w = geo.arrays(seed=14)
    db = conv3d_bwd_ref(dy, x, w, **geo.conv, compute_dx=False, compute_dw=False)
    want = np.array([sum(float(v) for v in dy[:, co].ravel()) for co in range(dy.shape[1])])
    np.testing.assert_allclose(db, want, rtol=0, atol=1e-12)
    # Also when dx is computed (db then comes from the oracle's dy grid, not from dy directly).
    _, db_with_dx = conv3d_bwd_ref(dy, x, w, **geo.conv, compute_dw=False)
    np.testing.assert_allclose(db_with_dx, want, rtol=0, atol=1e-12)


UNCOVERED = [
    # stride gaps: a 1-tap kernel with stride 2 or 3 skips positions
    Geo(1, 2, 2, (7, 6, 5), (1, 1, 1), stride=(2, 3, 2)),
    # stride 3 with a 2-tap kernel leaves every third position
    Geo(2, 1, 2, (9, 6, 8), (2, 2, 2), stride=(3, 3, 3)),
    # the last rows lie outside every window: (n + lo + hi - dil*(k-1) - 1) % stride != 0
    Geo(1, 2, 1, (8, 8, 9), (3, 3, 2), stride=(2, 2, 2)),
    # asymmetric padding: low padding shifts the windows so the last rows fall off the end
    Geo(1, 1, 2, (6, 7, 6), (2, 3, 2), stride=(2, 2, 3), padding=(1, 0, 2, 0, 0, 2)),
    # stride and dilation both 2 with odd low padding reach only odd positions
    Geo(1, 2, 2, (6, 6, 6), (2, 2, 2), stride=(2, 2, 2), padding=(1, 1, 1, 1, 1, 1), dilation=(2, 2, 2)),
    # more padding than the windows need, on the high side
    Geo(2, 1, 1, (7, 4, 6), (2, 2, 2), stride=(3, 2, 2), padding=(0, 3, 0, 3, 1, 2)),
]


@pytest.mark.fast
@pytest.mark.parametrize("geo", UNCOVERED, ids=str)
def test_uncovered_input_positions_get_exact_zeros(geo: Geo):
    dy, x, w = geo.arrays(seed=15)
    dx = conv3d_bwd_ref(dy, x, w, **geo.conv, compute_dw=False, compute_db=False)
    covered = covered_mask(geo.x_shape, geo.w_shape, geo.stride, geo.padding, geo.dilation)
    assert (~covered).any(), "this geometry was meant to leave input positions uncovered"
    assert covered.any()
    uncovered_values = dx[:, :, ~covered]
    assert (uncovered_values == 0.0).all(), f"nonzero dx at uncovered positions: {uncovered_values[uncovered_values != 0][:5]}"
    # With random data every covered position gets a nonzero gradient (probability one).
    assert (dx[:, :, covered] != 0.0).all(), "a covered position got exactly zero"
