"""Hypothesis over geometries: the oracle against per-tap slicing, the adjoint identity and db = sum(dy).

Hypothesis draws shapes only; the data come from a drawn seed, so a failure replays exactly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conv3d_bwd.reference import conv3d_bwd_magnitudes, conv3d_bwd_ref, conv3d_fwd
from simtests.reference.cases import Geo
from simtests.reference.independent import out_size, tap_slices_bwd


@st.composite
def axis(draw):
    """(size, kernel, stride, dilation, pad_lo, pad_hi) for one axis, with 1 to 3 outputs."""
    k = draw(st.integers(1, 7))
    s = draw(st.integers(1, 3))
    r = draw(st.integers(1, 3))
    lo, hi = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    outs = draw(st.integers(1, 3))
    extra = draw(st.integers(0, s - 1))  # positions past the last window: uncovered rows
    # The input size that gives `outs` outputs; padding alone may already cover the kernel (size 1).
    n = max(1, (outs - 1) * s + r * (k - 1) + 1 - lo - hi + extra)
    assert out_size(n, k, s, r, lo, hi) >= 1
    return n, k, s, r, lo, hi


@st.composite
def geometries(draw) -> Geo:
    d, h, w = draw(axis()), draw(axis()), draw(axis())
    return Geo(
        batch=draw(st.integers(1, 3)), c_in=draw(st.integers(1, 5)), c_out=draw(st.integers(1, 5)),
        size=(d[0], h[0], w[0]), kernel=(d[1], h[1], w[1]), stride=(d[2], h[2], w[2]),
        padding=(d[4], d[5], h[4], h[5], w[4], w[5]), dilation=(d[3], h[3], w[3]),
    )


@settings(max_examples=200, derandomize=True, deadline=None)
@given(geo=geometries(), seed=st.integers(0, 2**32 - 1))
def test_oracle_over_random_geometries(geo: Geo, seed: int):
    dy, x, w = geo.arrays(seed)
    dx, dw, db = conv3d_bwd_ref(dy, x, w, **geo.conv)
    mdx, mdw, mdb = conv3d_bwd_magnitudes(dy, x, w, **geo.conv)
    want = tap_slices_bwd(dy, x, w, **geo.conv)
    for name, got, ref, mag in zip(("dx", "dw", "db"), (dx, dw, db), want, (mdx, mdw, mdb)):
        assert got.shape == ref.shape, name
        # Error per element against its own sum |a||b|: the measure the tolerance model uses.
        assert (np.abs(got - ref) <= 1e-12 * mag).all(), (
            f"{name}: max |diff| {np.abs(got - ref).max():.3e}"
        )
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3, 4)), rtol=1e-13, atol=1e-13)

    y = conv3d_fwd(x, w, **geo.conv)
    forward = float(np.vdot(y, dy))
    scale = float(np.vdot(np.abs(y), np.abs(dy))) + 1e-300
    assert abs(forward - float(np.vdot(x, dx))) <= 1e-10 * scale
    assert abs(forward - float(np.vdot(w, dw))) <= 1e-10 * scale
