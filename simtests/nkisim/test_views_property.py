"""Property test: HBM views (basic indexing, permute, reshape_dim) agree with numpy on the same storage."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim


@st.composite
def shape_and_key(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    key = []
    for n in shape:
        if draw(st.booleans()):
            key.append(draw(st.integers(-n, n - 1)))
        else:
            start = draw(st.integers(0, n - 1))
            stop = draw(st.integers(start + 1, n))
            key.append(slice(start, stop, draw(st.integers(1, 3))))
    if all(isinstance(k, int) for k in key):
        key[-1] = slice(None)   # numpy would give a 0-d result; NKI keeps HBM results >= 1-D
    return shape, tuple(key)


@settings(max_examples=60, deadline=None)
@given(shape_and_key(), st.data())
def test_hbm_view_matches_numpy(case, data):
    shape, key = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    expect = x[key]
    perm = data.draw(st.permutations(range(expect.ndim)))
    expect = np.transpose(expect, perm)

    def kernel(a):
        v = a[key].permute(tuple(perm))
        out = nl.ndarray(v.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, v)
        return out

    out = nkisim.run(kernel, x).outputs
    assert out.shape == expect.shape
    np.testing.assert_array_equal(out, expect)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2))
def test_on_chip_reshape_dim_and_flatten_roundtrip(p, a, b, split_at):
    x = np.arange(p * a * b * 2, dtype=np.float32).reshape(p, a * b * 2)

    def kernel(src):
        t = nl.ndarray((p, a * b * 2), nl.float32)
        nisa.dma_copy(t, src)
        v = t.reshape_dim(1, (a, b, 2)).flatten_dims(1, 2 if split_at else 3)
        out = nl.ndarray(v.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, v)
        return out

    out = nkisim.run(kernel, x).outputs
    np.testing.assert_array_equal(out.reshape(x.shape), x)
