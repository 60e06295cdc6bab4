"""Kernels written from the NKI API pages alone (docs/nki-rules.md lists them), never run here
before, against exact numpy results."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim as nki

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


@nki.jit
def tiled_matmul(a_t, b):
    """c = a_t.T @ b: K tiled over partitions and accumulated in PSUM, M and N tiled."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    c = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.sequential_range(K // TK):
                lhs = nl.ndarray((TK, TM), dtype=a_t.dtype, buffer=nl.sbuf)
                rhs = nl.ndarray((TK, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs, src=a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=rhs, src=b[nl.ds(k * TK, TK), nl.ds(n * TN, TN)])
                nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=(k > 0))
            res = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=c[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return c


def test_tiled_matmul_with_psum_accumulation_is_exact():
    a_t = RNG.integers(-4, 5, (384, 256)).astype(BF16)
    b = RNG.integers(-4, 5, (384, 1024)).astype(BF16)
    r = nki.run(tiled_matmul, a_t, b)
    expect = a_t.astype(np.float64).T @ b.astype(np.float64)   # small integers: exact in fp32
    np.testing.assert_array_equal(r.outputs, expect.astype(np.float32))
    assert r.summary.instr_counts["nc_matmul"] == 2 * 2 * 3


@nki.jit
def transpose_by_identity(x):
    """out = x.T through TensorE: x is the stationary operand, the identity the moving one."""
    P, F = x.shape
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    ident = nl.shared_identity_matrix(P, dtype=x.dtype)
    pt = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=pt, stationary=xs, moving=ident)
    ys = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ys, src=pt)
    nisa.dma_copy(dst=out, src=ys)
    return out


def test_transpose_via_identity_matmul_is_exact():
    x = RNG.standard_normal((128, 96)).astype(BF16)
    out = nki.simulate(transpose_by_identity)(x)
    np.testing.assert_array_equal(out, x.T)


@nki.jit
def bias_relu_rowsum(x, bias):
    """y = relu(x + bias) (bias per partition) and the row sums of y, with a fused eviction."""
    P, F = x.shape
    y = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    bs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=bs, src=bias)
    ys = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
    rs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=ys, op=nl.relu, data=xs, bias=bs, reduce_op=nl.add, reduce_res=rs,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.dma_copy(dst=y, src=ys)
    nisa.dma_copy(dst=sums, src=rs)
    return y, sums


def test_bias_relu_rowsum_is_exact():
    x = RNG.integers(-8, 8, (64, 200)).astype(BF16)
    bias = RNG.integers(-3, 3, (64, 1)).astype(np.float32)
    y, sums = nki.simulate(bias_relu_rowsum)(x, bias)
    ref = np.maximum(x.astype(np.float32) + bias, 0)
    np.testing.assert_array_equal(y, ref.astype(BF16))
    np.testing.assert_array_equal(sums[:, 0], ref.sum(axis=1))


@nki.jit
def column_sums_by_ones_matmul(x):
    """Sum over partitions with a ones vector as the moving operand (the db pattern)."""
    P, F = x.shape
    out = nl.ndarray((F, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    xs = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    ones = nl.ndarray((P, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    acc = nl.ndarray((F, 1), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=xs, moving=ones)
    res = nl.ndarray((F, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_partition_reduction_by_ones_matmul_is_exact():
    x = RNG.integers(-5, 6, (128, 100)).astype(BF16)
    np.testing.assert_array_equal(nki.simulate(column_sums_by_ones_matmul)(x)[:, 0],
                                  x.astype(np.float32).sum(axis=0))
