"""Each instruction's semantics against plain numpy: values, dtype rounding, accumulate patterns."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(1234)


def _load(x, dtype=None):
    t = nl.ndarray(x.shape, dtype or x.dtype)
    nisa.dma_copy(t, x)
    return t


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    if t.buffer is nl.psum:
        s = nl.ndarray(t.shape, t.dtype)
        nisa.tensor_copy(s, t)
        t = s
    nisa.dma_copy(out, t)
    return out


def _run(kernel, *args, **kwargs):
    return nkisim.run(kernel, *args, **kwargs).outputs


def test_unwritten_memory_reads_the_sentinel():
    def kernel():
        f = nl.ndarray((4, 8), nl.float32)
        i = nl.ndarray((4, 8), nl.int32)
        nisa.memset(f[:, 0:4], 1.0)
        return _store(f), _store(i)
    f, i = _run(kernel)
    assert np.isnan(f[:, 4:]).all() and (f[:, :4] == 1).all()
    assert (i == 4).all()


def test_dma_copy_rounds_to_nearest_even_bf16():
    # 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: RNE picks 1 (even mantissa).
    x = np.array([[1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20]], np.float32)

    def kernel(a):
        return _store(_load(a, nl.bfloat16))
    out = _run(kernel, x)
    assert out.dtype == BF16
    np.testing.assert_array_equal(out.astype(np.float32),
                                  np.array([[1, 1 + 2**-6, -1, 1 + 2**-7]], np.float32))
    np.testing.assert_array_equal(out, x.astype(BF16))


def test_float_to_int_rounds_half_even_and_saturates():
    x = np.array([[0.5, 1.5, 2.5, -0.5, 300.0, -300.0, np.nan, 3.7]], np.float32)

    def kernel(a):
        t = _load(a)
        i = nl.ndarray(t.shape, nl.int8)
        nisa.tensor_copy(i, t)
        return _store(i)
    np.testing.assert_array_equal(_run(kernel, x), np.array([[0, 2, 2, 0, 127, -128, 0, 4]], np.int8))


def test_tensor_copy_bit_exact_and_cast():
    x = RNG.standard_normal((32, 48)).astype(np.float32)

    def kernel(a):
        t = _load(a)
        same = nl.ndarray((32, 48), nl.float32)
        nisa.tensor_copy(same, t, engine=nisa.scalar_engine)
        down = nl.ndarray((32, 6, 8), nl.bfloat16)   # same elements per partition, other free shape
        nisa.tensor_copy(down, t, engine=nisa.engine.gpsimd)
        return _store(same), _store(down)
    same, down = _run(kernel, x)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(down.reshape(32, 48), x.astype(BF16))


def test_memset_values():
    def kernel():
        a = nl.ndarray((8, 16), nl.bfloat16)
        nisa.memset(a, 0.1)
        b = nl.ndarray((8, 16), nl.int32)
        nisa.memset(b, -3, engine=nisa.engine.gpsimd)
        return _store(a), _store(b)
    a, b = _run(kernel)
    assert (a == BF16(0.1)).all()
    assert (b == -3).all()


@pytest.mark.parametrize("op,fn", [(nl.add, np.add), (nl.subtract, np.subtract), (nl.multiply, np.multiply),
                                   (nl.maximum, np.maximum), (nl.minimum, np.minimum),
                                   (nl.greater, lambda a, b: (a > b).astype(np.float32)),
                                   (nl.equal, lambda a, b: (a == b).astype(np.float32))])
def test_tensor_tensor(op, fn):
    a = RNG.standard_normal((64, 40)).astype(BF16)
    b = np.round(RNG.standard_normal((64, 40)), 1).astype(np.float32)

    def kernel(x, y):
        tx, ty = _load(x), _load(y)
        out = nl.ndarray((64, 40), nl.float32, buffer=nl.psum)
        nisa.tensor_tensor(out, tx, ty, op=op)
        return _store(out)
    expect = fn(a.astype(np.float32), b).astype(np.float32)
    np.testing.assert_array_equal(_run(kernel, a, b), expect)


def test_tensor_tensor_int32_exact():
    a = np.array([[2**30 + 1, -7]], np.int32)
    b = np.array([[3, 5]], np.int32)

    def kernel(x, y):
        out = nl.ndarray((1, 2), nl.int32)
        nisa.tensor_tensor(out, _load(x), _load(y), op=nl.add)
        return _store(out)
    np.testing.assert_array_equal(_run(kernel, a, b), a + b)


def test_tensor_scalar_with_tile_and_reverse():
    x = RNG.standard_normal((16, 24)).astype(np.float32)
    col = RNG.standard_normal((16, 1)).astype(np.float32)

    def kernel(a, c):
        t, ct = _load(a), _load(c)
        out = nl.ndarray((16, 24), nl.float32)
        nisa.tensor_scalar(out, t, nl.subtract, 2.0, reverse0=True, op1=nl.multiply, operand1=ct)
        return _store(out)
    np.testing.assert_array_equal(_run(kernel, x, col), ((np.float32(2.0) - x) * col).astype(np.float32))


@pytest.mark.parametrize("axis,keepdims", [(2, False), ((1, 2), False), (-1, True)])
def test_tensor_reduce(axis, keepdims):
    x = RNG.standard_normal((8, 5, 6)).astype(np.float32)
    ax = (axis,) if isinstance(axis, int) else axis
    expect = np.add.reduce(x, axis=tuple(a % 3 for a in ax), keepdims=keepdims)

    def kernel(a):
        t = _load(a)
        out = nl.ndarray(expect.shape if expect.ndim > 1 else (8, 1), nl.float32)
        nisa.tensor_reduce(out, nl.add, t, axis=axis, negate=True, keepdims=keepdims)
        return _store(out)
    np.testing.assert_allclose(_run(kernel, x).reshape(expect.shape), -expect, rtol=1e-6)


def test_tensor_reduce_max():
    x = RNG.standard_normal((8, 30)).astype(np.float32)

    def kernel(a):
        out = nl.ndarray((8, 1), nl.float32)
        nisa.tensor_reduce(out, nl.maximum, _load(a), axis=1)
        return _store(out)
    np.testing.assert_array_equal(_run(kernel, x)[:, 0], x.max(axis=1))


def test_activation_with_scale_bias_and_reduce_commands():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    bias = RNG.standard_normal((16, 1)).astype(np.float32)

    def kernel(a, b):
        t, bt = _load(a), _load(b)
        y = nl.ndarray((16, 32), nl.bfloat16)
        r1 = nl.ndarray((16, 1), nl.float32)
        nisa.activation(y, nl.exp, t, bias=bt, scale=0.5, reduce_op=nl.add, reduce_res=r1,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        y2 = nl.ndarray((16, 32), nl.float32)
        r2 = nl.ndarray((16, 1), nl.float32)
        nisa.activation(y2, nl.relu, t, reduce_op=nl.add, reduce_res=r2, reduce_cmd=nisa.reduce_cmd.reduce)
        return _store(y), _store(r1), _store(y2), _store(r2)
    y, r1, y2, r2 = _run(kernel, x, bias)
    e = np.exp(x * np.float32(0.5) + bias).astype(np.float32)
    np.testing.assert_array_equal(y, e.astype(BF16))
    np.testing.assert_allclose(r1[:, 0], e.sum(axis=1), rtol=1e-6)
    relu = np.maximum(x, 0)
    np.testing.assert_array_equal(y2, relu)
    np.testing.assert_allclose(r2[:, 0], e.sum(axis=1) + relu.sum(axis=1), rtol=1e-6)


def test_iota_and_affine_select():
    def kernel():
        io = nl.ndarray((4, 3, 5), nl.int32)
        nisa.iota(io, [[10, 3], [1, 5]], offset=-2, channel_multiplier=100)
        f = nl.ndarray((4, 6), nl.float32)
        nisa.iota(f, [[1, 6]], offset=0, channel_multiplier=-1)
        ones = nl.ndarray((4, 6), nl.float32)
        nisa.memset(ones, 1.0)
        tri = nl.ndarray((4, 6), nl.float32)
        # keep where i - p >= 0 (upper triangle), else -9
        nisa.affine_select(tri, [[1, 6]], -1, ones, -9.0, cmp_op=nl.greater_equal)
        return _store(io), _store(f), _store(tri)
    io, f, tri = _run(kernel)
    p = np.arange(4).reshape(4, 1, 1)
    np.testing.assert_array_equal(io, -2 + 100 * p + 10 * np.arange(3).reshape(1, 3, 1) + np.arange(5))
    np.testing.assert_array_equal(f, np.arange(6) - np.arange(4).reshape(4, 1))
    np.testing.assert_array_equal(tri, np.where(np.arange(6) - np.arange(4).reshape(4, 1) >= 0, 1.0, -9.0))


def test_nc_transpose_tensor_and_vector_engines():
    x = RNG.standard_normal((96, 80)).astype(BF16)
    small = RNG.standard_normal((20, 30)).astype(np.float32)

    def kernel(a, b):
        t = _load(a)
        ps = nl.ndarray((80, 96), nl.bfloat16, buffer=nl.psum)
        nisa.nc_transpose(ps, t)
        v = nl.ndarray((30, 20), nl.float32)
        nisa.nc_transpose(v, _load(b), engine=nisa.engine.vector)
        return _store(ps), _store(v)
    ps, v = _run(kernel, x, small)
    np.testing.assert_array_equal(ps, x.T)
    np.testing.assert_array_equal(v, small.T)


def test_dma_transpose_2d_and_3d():
    x = RNG.standard_normal((16, 64)).astype(BF16)
    y = RNG.standard_normal((2, 8, 32)).astype(np.float16)

    def kernel(a, b):
        t = nl.ndarray((64, 16), nl.bfloat16)
        nisa.dma_transpose(t, a)
        u = nl.ndarray((32, 8, 2), nl.float16)
        nisa.dma_transpose(u, b, axes=(2, 1, 0))
        return _store(t), _store(u)
    t, u = _run(kernel, x, y)
    np.testing.assert_array_equal(t, x.T)
    np.testing.assert_array_equal(u, np.transpose(y, (2, 1, 0)))


def test_dma_transpose_of_4_byte_dtypes_is_bit_exact():
    """Trainium2 architecture guide, "DMA Transpose": "bit-accurate transposition for both 2-byte and
    4-byte data types" (AWS's topk_reduce transposes int32 indices so), in the 4-D form it uses."""
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    y = RNG.integers(-2**31, 2**31 - 1, size=(24, 1, 1, 1), dtype=np.int64).astype(np.int32)

    def kernel(a, b):
        t = nl.ndarray((40, 16), nl.float32)
        nisa.dma_transpose(t, a)
        u = nl.ndarray((1, 1, 1, 24), nl.int32)
        nisa.dma_transpose(u, b, axes=(3, 1, 2, 0), dge_mode=nisa.dge_mode.none)
        return _store(t), _store(u)
    t, u = _run(kernel, x, y)
    np.testing.assert_array_equal(t, x.T)
    np.testing.assert_array_equal(u, np.transpose(y, (3, 1, 2, 0)))


def test_dma_compute_scaled_sum():
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((8, 16)).astype(np.float32)

    def kernel(x, y):
        out = nl.ndarray((8, 16), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(out, (x, y), nl.add, scales=(2.0, -1.0))
        return out
    np.testing.assert_array_equal(_run(kernel, a, b), (a * np.float32(2) + b * np.float32(-1)))


def _matmul_ref(st, mv):
    return st.astype(np.float32).T @ mv.astype(np.float32)


def test_nc_matmul_accumulate_false_true_none():
    s = RNG.integers(-3, 4, (128, 64)).astype(BF16)
    m = RNG.integers(-3, 4, (128, 512)).astype(BF16)

    def kernel(a, b):
        ta, tb = _load(a), _load(b)
        ps = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps, ta, tb, accumulate=False)
        nisa.nc_matmul(ps, ta, tb, accumulate=True)
        nisa.nc_matmul(ps, ta, tb)                   # None: every element was written, so it adds
        once = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(once, ta, tb)                 # None on fresh PSUM: overwrites
        nisa.nc_matmul(once, ta, tb, accumulate=False)
        return _store(ps), _store(once)
    ps, once = _run(kernel, s, m)
    ref = _matmul_ref(s, m)
    np.testing.assert_array_equal(ps, 3 * ref)
    np.testing.assert_array_equal(once, ref)


def test_nc_matmul_accumulate_none_is_per_element_on_overlapping_regions():
    # The convolution pattern: two matmuls writing overlapping column ranges of one PSUM tile.
    s = RNG.integers(-2, 3, (32, 16)).astype(BF16)
    m = RNG.integers(-2, 3, (32, 48)).astype(BF16)

    def kernel(a, b):
        ta, tb = _load(a), _load(b)
        ps = nl.ndarray((16, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps[:, 0:48], ta, tb)
        nisa.nc_matmul(ps[:, 16:64], ta, tb)
        return _store(ps)
    out = _run(kernel, s, m)
    ref = _matmul_ref(s, m)
    expect = np.full((16, 64), np.nan, np.float32)
    expect[:, 0:48] = ref
    expect[:, 16:48] += ref[:, 0:32]
    expect[:, 48:64] = ref[:, 32:48]
    np.testing.assert_array_equal(out, expect)


def test_nc_matmul_fp32_accumulation_and_views():
    s = RNG.standard_normal((128, 2, 32)).astype(np.float32)
    m = RNG.standard_normal((128, 4, 100)).astype(np.float32)

    def kernel(a, b):
        ta, tb = _load(a), _load(b)
        ps = nl.ndarray((64, 400), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps.reshape((64, 4, 100)), ta, tb)     # 3-D operands are flattened
        return _store(ps)
    out = _run(kernel, s, m)
    expect = s.reshape(128, 64).T @ m.reshape(128, 400)     # float32 numpy matmul
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-4)


def test_nc_matmul_is_transpose_is_bit_exact():
    x = RNG.standard_normal((128, 96)).astype(BF16)
    x[3, 5] = np.nan

    def kernel(a):
        t = _load(a)
        ident = nl.shared_identity_matrix(128, dtype=nl.bfloat16)
        ps = nl.ndarray((96, 128), nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(ps, t, ident, is_transpose=True)
        return _store(ps)
    out = _run(kernel, x)
    np.testing.assert_array_equal(out.view(np.uint16), x.T.view(np.uint16))


def test_bf16_psum_dst_on_trn3_rounds():
    s = RNG.standard_normal((64, 32)).astype(BF16)
    m = RNG.standard_normal((64, 1024)).astype(BF16)

    def kernel(a, b):
        ps = nl.ndarray((32, 1024), nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(ps, _load(a), _load(b))
        return _store(ps)
    out = nkisim.run(kernel, s, m, target="trn3").outputs
    np.testing.assert_array_equal(out, _matmul_ref(s, m).astype(BF16))


def test_nl_zeros_and_identity():
    def kernel():
        z = nl.zeros((8, 8), nl.float32)
        i = nl.shared_identity_matrix(8, dtype=nl.float32)
        return _store(z), _store(i)
    z, i = _run(kernel)
    assert (z == 0).all()
    np.testing.assert_array_equal(i, np.eye(8, dtype=np.float32))


def test_input_arrays_are_updated_in_place():
    a = np.zeros((4, 4), np.float32)

    def kernel(x):
        t = nl.ndarray((4, 4), nl.float32)
        nisa.memset(t, 5.0)
        nisa.dma_copy(x, t)
    assert _run(kernel, a) is None
    assert (a == 5).all()


def test_unwritten_output_reads_as_nan():
    def kernel():
        return nl.ndarray((2, 3), nl.float32, buffer=nl.shared_hbm)
    assert np.isnan(_run(kernel)).all()
