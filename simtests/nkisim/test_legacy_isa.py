"""nkisim.legacy.isa (``neuronxcc.nki.isa``): value-returning instructions against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.legacy as nki
import conv3d_bwd.nkisim.legacy.isa as nisa
import conv3d_bwd.nkisim.legacy.language as nl
from conv3d_bwd.nkisim.errors import NkiValidationError


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(body, *inputs: np.ndarray) -> np.ndarray:
    """Load every input, apply ``body`` to the tiles, store the returned tile; return it as numpy."""
    @nki.jit
    def kernel(*xs):
        res = body(*[nl.load(x) for x in xs])
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    return nki.simulate_kernel(kernel, *inputs)


def test_nc_matmul_is_stationary_transposed_times_moving_in_fp32():
    s, m = _rand(128, 64), _rand(128, 256, seed=1)
    got = _run(lambda a, b: nisa.nc_matmul(a, b), s, m)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, s.T @ m, rtol=1e-5, atol=1e-4)


def test_nc_matmul_limits_name_the_operand():
    with pytest.raises(NkiValidationError, match="nc_matmul: operand 'moving': free size 640 exceeds 512"):
        _run(lambda a, b: nisa.nc_matmul(a, b), _rand(128, 8), _rand(128, 640))


def test_nc_transpose_and_tensor_copy():
    x = _rand(96, 40)
    np.testing.assert_array_equal(_run(lambda a: nisa.tensor_copy(nisa.nc_transpose(a)), x), x.T)


def test_activation_with_scale_bias_and_reduce_res():
    x, scale, bias = _rand(16, 32), _rand(16, 1, seed=1), _rand(16, 1, seed=2)

    def body(a, s, b):
        red = nl.ndarray((16, 1), dtype=nl.float32)
        act = nisa.activation(op=nl.exp, data=a, bias=b, scale=s, reduce_op=nl.add, reduce_res=red)
        return nl.add(act, red)   # both results, to check them together

    act = np.exp(x * scale + bias)
    np.testing.assert_allclose(_run(body, x, scale, bias), act + act.sum(axis=1, keepdims=True), rtol=1e-5)


def test_tensor_tensor_and_tensor_scalar_with_reverse():
    a, b, v = _rand(8, 16), _rand(8, 16, seed=1), _rand(8, 1, seed=2)
    got = _run(lambda x, y, w: nisa.tensor_scalar(nisa.tensor_tensor(x, y, op=nl.multiply), op0=nl.subtract,
                                                  operand0=w, reverse0=True, op1=nl.multiply, operand1=2.0), a, b, v)
    np.testing.assert_allclose(got, (v - a * b) * 2.0, rtol=1e-5, atol=1e-6)


def test_tensor_reduce_negate_and_reciprocal():
    x = np.abs(_rand(8, 4, 6)) + 0.5
    got = _run(lambda a: nisa.reciprocal(nisa.tensor_reduce(op=nl.max, data=a, axis=[1, 2], negate=True)), x)
    np.testing.assert_allclose(got, 1.0 / -x.max(axis=(1, 2)), rtol=1e-6)


def test_tensor_reduce_over_the_partition_axis_is_refused():
    with pytest.raises(NkiValidationError, match="tensor_reduce: operand 'axis'"):
        _run(lambda a: nisa.tensor_reduce(op=nl.add, data=a, axis=0), _rand(4, 4))


def test_tensor_scalar_reduce_and_scalar_tensor_tensor():
    x, y = _rand(8, 16), _rand(8, 16, seed=1)

    def body(a, b):
        red = nl.ndarray((8, 1), dtype=nl.float32)
        ts = nisa.tensor_scalar_reduce(data=a, op0=nl.multiply, operand0=3.0, reduce_op=nl.max, reduce_res=red)
        stt = nisa.scalar_tensor_tensor(data=ts, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=b)
        return nl.add(stt, red)

    want = (x * 3 + 1) * y + (x * 3).max(axis=1, keepdims=True)
    np.testing.assert_allclose(_run(body, x, y), want, rtol=1e-5, atol=1e-5)


def test_tensor_tensor_scan_is_the_mamba_recurrence():
    a, b = _rand(4, 10), _rand(4, 10, seed=1)
    init = _rand(4, 1, seed=2)
    got = _run(lambda x, y, z: nisa.tensor_tensor_scan(x, y, initial=z, op0=np.multiply, op1=np.add), a, b, init)
    want = np.empty_like(a)
    prev = init[:, 0]
    for i in range(a.shape[1]):
        prev = a[:, i] * prev + b[:, i]
        want[:, i] = prev
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_iota_and_memset():
    @nki.jit
    def kernel(x):
        i_p, i_f = nl.mgrid[0:4, 0:6]
        io = nisa.iota(i_p * 10 + i_f, dtype=nl.int32)
        ms = nisa.memset((4, 6), 7, dtype=nl.int32)
        out = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_tensor(io, ms, op=nl.add))
        return out

    p, f = np.mgrid[0:4, 0:6]
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, _rand(1, 1)), p * 10 + f + 7)


def test_instruction_operand_in_hbm_is_refused():
    @nki.jit
    def kernel(x):
        nisa.tensor_copy(x)

    with pytest.raises(NkiValidationError, match="tensor_copy: operand 'src': must be an on-chip tile"):
        nki.simulate_kernel(kernel, _rand(2, 2))


def test_nc_matmul_reads_sbuf_only():
    @nki.jit
    def kernel(a):
        p = nisa.nc_matmul(nl.load(a), nl.load(a))
        nisa.nc_matmul(p, nl.load(a))

    with pytest.raises(NkiValidationError, match="nc_matmul: operand 'stationary': must be an SBUF tile"):
        nki.simulate_kernel(kernel, _rand(8, 8))


def test_tensor_tensor_scan_inputs_not_both_in_psum():
    @nki.jit
    def kernel(a):
        p = nisa.nc_matmul(nl.load(a), nl.load(a))
        nisa.tensor_tensor_scan(p, p, initial=0.0, op0=nl.multiply, op1=nl.add)

    with pytest.raises(NkiValidationError, match="tensor_tensor_scan: operand 'data1': data0 and data1 cannot both"):
        nki.simulate_kernel(kernel, _rand(8, 8))


def test_affine_select_keeps_the_lower_triangle():
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:16, 0:16]
        t = nl.load(a[ix, iy])
        nl.store(out[ix, iy], nisa.affine_select(pred=(iy < ix), on_true_tile=t[ix, iy], on_false_value=nl.fp32.min))
        return out

    a = _rand(16, 16)
    want = np.where(np.tril(np.ones((16, 16), bool), -1), a, np.finfo(np.float32).min)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), want)


def test_tensor_partition_reduce_sums_over_partitions():
    got = _run(lambda a: nisa.tensor_partition_reduce(np.add, a), _rand(32, 4, 3))
    np.testing.assert_allclose(got, _rand(32, 4, 3).sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_dma_copy_with_and_without_a_read_modify_write_op():
    @nki.jit
    def kernel(a, b):
        nisa.dma_copy(dst=b, src=a, dst_rmw_op=np.add)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=b)
        return out

    a, b = _rand(4, 8), _rand(4, 8, seed=1)
    want = a + b
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-6)
    np.testing.assert_allclose(b, want, rtol=1e-6)   # the kernel wrote into its input


def test_dma_copy_never_touches_psum():
    @nki.jit
    def kernel(a):
        p = nisa.nc_matmul(nl.load(a), nl.load(a))
        nisa.dma_copy(dst=a, src=p)

    with pytest.raises(NkiValidationError, match="dma_copy: operand 'src': DMA cannot access PSUM"):
        nki.simulate_kernel(kernel, _rand(4, 4))
