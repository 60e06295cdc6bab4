"""nkisim.legacy.language (``neuronxcc.nki.language``): index tiles, masks, load/store, tile math, SPMD grids."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import conv3d_bwd.nkisim.legacy as nki
import conv3d_bwd.nkisim.legacy.isa as nisa
import conv3d_bwd.nkisim.legacy.language as nl
from conv3d_bwd.nkisim.errors import NkiUsageError, NkiValidationError


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@nki.jit
def _copy_arange(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    nl.store(out[i_p, i_f], value=nl.load(x[i_p, i_f]))
    return out


def test_arange_index_tiles_load_and_store_the_indexed_elements():
    x = _rand(16, 24)
    np.testing.assert_array_equal(nki.simulate_kernel(_copy_arange, x), x)


def test_mgrid_index_expression_transposes_inside_partitions():
    p, a, b = 5, 3, 4

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        i_p, i_a, i_b = nl.mgrid[0:p, 0:a, 0:b]
        res = nl.ndarray((p, a * b), dtype=x.dtype)
        res[i_p, i_b * a + i_a] = nl.copy(tile[i_p, i_a * b + i_b])
        nl.store(out, value=res)
        return out

    x = np.arange(p * a * b, dtype=np.int8).reshape(p, a * b)
    want = np.transpose(x.reshape(p, a, b), (0, 2, 1)).reshape(p, a * b)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), want)


def test_mgrid_result_has_p_and_x_attributes():
    grid = nl.mgrid[0:4, 0:3]
    np.testing.assert_array_equal(grid.p, np.mgrid[0:4, 0:3][0])
    np.testing.assert_array_equal(grid.x, np.mgrid[0:4, 0:3][1])


def test_mask_keeps_out_of_bounds_rows_out_of_load_and_store():
    h, w = 150, 8   # two 128-row tiles; the second reaches past the tensor and is masked

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(2):
            i_p, i_f = nl.mgrid[0:128, 0:w]
            rows = t * 128 + i_p
            tile = nl.load(x[rows, i_f], mask=(rows < h))
            nl.store(out[rows, i_f], value=nl.square(tile), mask=(rows < h))
        return out

    x = _rand(h, w)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), x * x, rtol=1e-6)


def test_out_of_bounds_index_tile_without_mask_is_an_index_error():
    @nki.jit
    def kernel(x):
        i_p = nl.arange(8)[:, None]
        i_f = nl.arange(4)[None, :]
        return nl.load(x[i_p + 1, i_f])

    with pytest.raises(IndexError, match="outside"):
        nki.simulate_kernel(kernel, _rand(8, 4))


def test_tile_arithmetic_and_reductions_match_numpy():
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        s = nl.sum((ta + tb) * 2.0 - tb / 4.0, axis=1, keepdims=True)
        nl.store(out, value=s + nl.max(ta, axis=1, keepdims=True))
        return out

    a, b = _rand(32, 64), _rand(32, 64, seed=1)
    want = ((a + b) * 2 - b / 4).sum(axis=1, keepdims=True) + a.max(axis=1, keepdims=True)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-5, atol=1e-5)


def test_partition_vector_broadcasts_along_free_axis_not_numpys_last_axis():
    @nki.jit
    def kernel(x, v):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.subtract(nl.load(x), nl.load(v)))   # v: (P,) applies per partition
        return out

    x, v = _rand(16, 16), _rand(16, seed=2)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x, v), x - v[:, None], rtol=1e-6)


def test_matmul_transpose_x_and_transpose_match_numpy():
    @nki.jit
    def kernel(q, k):
        out = nl.ndarray((q.shape[1], k.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        qk = nl.matmul(nl.load(q), nl.load(k), transpose_x=True)
        nl.store(out, value=nl.transpose(nl.transpose(qk)))
        return out

    q, k = _rand(64, 32), _rand(64, 48, seed=3)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, q, k), q.T @ k, rtol=1e-5, atol=1e-5)


def test_par_dim_block_tiles_and_loop_reduce_accumulate_like_numpy():
    @nki.jit
    def kernel(a):
        n_blocks, p, f = a.shape
        out = nl.ndarray((p, f), dtype=a.dtype, buffer=nl.shared_hbm)
        blocks = nl.ndarray((n_blocks, nl.par_dim(p), f), dtype=a.dtype, buffer=nl.sbuf)
        acc = nl.zeros((nl.par_dim(p), f), dtype=nl.float32)
        for i in nl.affine_range(n_blocks):
            blocks[i] = nl.load(a[i])
            acc[...] = nl.loop_reduce(blocks[i], op=np.add, loop_indices=[i])
        nl.store(out, value=acc)
        return out

    a = _rand(3, 8, 16)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), a.sum(axis=0), rtol=1e-5, atol=1e-6)


def test_psum_plus_equals_matmul_accumulates_from_a_fresh_tile():
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((nl.par_dim(a.shape[2]), b.shape[2]), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(a.shape[0]):
            acc += nisa.nc_matmul(nl.load(a[k]), nl.load(b[k]))
        nl.store(out, value=nisa.tensor_copy(acc))
        return out

    a, b = _rand(2, 128, 32), _rand(2, 128, 64, seed=4)
    want = a[0].T @ b[0] + a[1].T @ b[1]
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-5, atol=1e-4)


def test_two_dimensional_spmd_grid_shares_the_output_tensor():
    @nki.jit
    def kernel(a, b):
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix = nl.program_id(0) * 8 + nl.arange(8)[:, None]
        iy = nl.program_id(1) * 16 + nl.arange(16)[None, :]
        nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
        return c

    a, b = _rand(16, 48), _rand(16, 48, seed=5)
    np.testing.assert_allclose(kernel[2, 3](a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(kernel[nl.spmd_dim(nl.nc(2), 1), 3](a, b), a + b, rtol=1e-6)


def test_program_id_beyond_the_grid_is_a_usage_error():
    @nki.jit
    def kernel(a):
        nl.program_id(1)
        return a

    with pytest.raises(NkiUsageError, match="program_id: argument 'axis'"):
        kernel[2](_rand(2, 2))


def test_simulate_kernel_writes_back_into_input_arrays():
    def kernel(a):
        nl.store(a, value=nl.load(a) * 3.0)

    a = _rand(4, 4)
    want = a * 3
    assert nki.simulate_kernel(kernel, a) is None
    np.testing.assert_allclose(a, want, rtol=1e-6)


def test_bf16_inputs_round_on_every_store():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x) * 3.0)
        return out

    x = _rand(8, 8).astype(ml_dtypes.bfloat16)
    got = nki.simulate_kernel(kernel, x)
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got, (x.astype(np.float32) * 3).astype(ml_dtypes.bfloat16))


def test_float64_input_is_refused_with_its_name():
    with pytest.raises(NkiUsageError, match="argument 'x': float64"):
        nki.simulate_kernel(_copy_arange, np.zeros((2, 2)))


def test_sbuf_tile_over_128_partitions_is_a_rule_violation():
    @nki.jit
    def kernel(x):
        nl.ndarray((nl.par_dim(256), 4), dtype=nl.float32, buffer=nl.sbuf, name="big")

    with pytest.raises(NkiValidationError, match="ndarray: operand 'big': partition dimension 256 exceeds 128"):
        nki.simulate_kernel(kernel, _rand(2, 2))


def test_returning_an_sbuf_tile_is_a_rule_violation():
    @nki.jit
    def kernel(x):
        return nl.load(x)

    with pytest.raises(NkiValidationError, match="kernel return: operand 'return'"):
        nki.simulate_kernel(kernel, _rand(2, 2))


def test_mixing_index_tiles_and_slices_is_refused_not_guessed():
    @nki.jit
    def kernel(x):
        return nl.load(x[nl.arange(4)[:, None], 0:4])

    with pytest.raises(NkiUsageError, match="mixing index tiles"):
        nki.simulate_kernel(kernel, _rand(4, 4))


def test_static_cast_and_shared_constant():
    assert nl.static_cast(np.ones((2, 2)), nl.bfloat16).dtype == np.dtype(ml_dtypes.bfloat16)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ident = nl.load(nl.shared_constant(np.identity(4, dtype=np.int8), dtype=nl.float32))
        nl.store(out, value=nl.matmul(ident, nl.load(x)))
        return out

    x = _rand(4, 6)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), x, rtol=1e-6)


def test_compiler_allocators_and_typing_are_accepted():
    nt = nki.typing
    ncc = nki.compiler

    @ncc.skip_middle_end_transformations
    @nki.jit
    def kernel(x: nt.tensor):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t: nt.tensor[4, 4] = nl.ndarray((nl.par_dim(4), 4), dtype=x.dtype,
                                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t[...] = nl.load(x)
        p = nl.ndarray((4, 4), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
        p[...] = nl.copy(t)
        for _ in nl.sequential_range(1, directives=ncc.no_reorder()):
            nl.store(out, value=p)
        return out

    x = _rand(4, 4)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x)


def test_benchmark_needs_a_device():
    with pytest.raises(NkiUsageError, match="nki.benchmark"):
        nki.benchmark(warmup=1, iters=1)(_copy_arange)(_rand(2, 2))


def test_numbers_do_not_promote_a_tiles_dtype():
    from conv3d_bwd.nkisim.legacy.tile import LegacyTile

    t = LegacyTile(np.ones((2, 2), dtype=np.float16), "sbuf")
    assert (t * 3.0).dtype == "float16"
    assert (t + LegacyTile(np.ones((2, 2), dtype=np.float32), "sbuf")).dtype == "float32"


def test_assigning_a_masked_instruction_writes_only_inside_the_mask():
    # the migration guide's pattern: t[idx] = nisa.tensor_copy(src[idx], mask=m) with idx partly out of bounds
    @nki.jit
    def kernel(x):
        n, f = x.shape
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        src = nl.load(x)
        dst = nl.zeros((n, f), dtype=x.dtype)
        for j in nl.affine_range(2):
            i_p, i_f = nl.mgrid[0:n, 0:8]
            cols = i_f + 8 * j
            dst[i_p, cols] = nisa.tensor_copy(src[i_p, cols], mask=(cols < f - 3))
        nl.store(out, value=dst)
        return out

    x = _rand(4, 12)
    want = x.copy()
    want[:, 9:] = 0.0   # outside the mask: the zeros dst held
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), want)


def test_masked_reduction_keeps_the_rows_the_mask_covers():
    @nki.jit
    def kernel(x):
        out = nl.zeros((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:8, 0:x.shape[1]]
        t = nl.ndarray((8, 1), dtype=nl.float32)
        t[...] = 1.0
        t[...] = nl.sum(nl.load(x)[i_p, i_f], axis=1, keepdims=True, mask=(i_p < 5))
        nl.store(out[0:8, 0:1], value=t)
        return out

    x = _rand(8, 6)
    want = np.ones((8, 1), np.float32)
    want[:5, 0] = x[:5].sum(axis=1)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), want, rtol=1e-6)
