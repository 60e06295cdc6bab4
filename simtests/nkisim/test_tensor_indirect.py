"""``.ap(vector_offset=...)`` gather/scatter views against numpy (Neuron docs: nki.isa.dma_copy "Indirect
addressing", NkiTensor.ap, nki.isa.dma_transpose "DMA Indirect Transpose Constraints", nki.isa.dma_compute
"Read-Modify-Write with vector_offset", the DGE reference "How .ap() Affects DGE Mode")."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule

F32 = np.float32


def _load_indices(indices, dtype=nl.uint32):
    idx = nl.ndarray(indices.shape, dtype)
    nisa.dma_copy(dst=idx, src=indices)
    return idx


def _gather_kernel(data, indices):
    """The nki.isa.dma_copy page's indirect gather example."""
    p, f = indices.shape[0], data.shape[1]
    output = nl.ndarray((p, f), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = _load_indices(indices)
    dst = nl.ndarray((p, f), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=dst, src=data.ap(pattern=[[f, p], [1, f]], vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=output, src=dst)
    return output


def _scatter_kernel(src_data, indices, output):
    """The nki.isa.dma_copy page's indirect scatter example."""
    p, f = src_data.shape
    src = nl.ndarray((p, f), dtype=src_data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=src_data)
    idx = _load_indices(indices)
    nisa.dma_copy(dst=output.ap(pattern=[[f, p], [1, f]], vector_offset=idx, indirect_dim=0), src=src)
    return output


def test_gather_reads_the_indexed_rows():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((40, 16)).astype(F32)
    indices = rng.integers(0, 40, size=(32, 1)).astype(np.uint32)
    out = nkisim.simulate(_gather_kernel)(data, indices)
    np.testing.assert_array_equal(out, data[indices[:, 0]])


def test_scatter_writes_the_indexed_rows_and_leaves_the_rest():
    rng = np.random.default_rng(1)
    src = rng.standard_normal((8, 6)).astype(F32)
    indices = rng.permutation(20)[:8].reshape(8, 1).astype(np.uint32)
    output = np.full((20, 6), -1.0, F32)
    nkisim.simulate(_scatter_kernel)(src, indices, output)
    expect = np.full((20, 6), -1.0, F32)
    expect[indices[:, 0]] = src
    np.testing.assert_array_equal(output, expect)


def test_index_scale_is_the_stride_of_indirect_dim_not_the_patterns_dim0_stride():
    """AWS's topk_reduce passes ``[[H, T], [1, H_local]]`` over rows of ``H + 2`` elements: rows are
    ``index * (H + 2)``, the stride of dim 0 of the indexed tensor (NkiTensor.ap, ``indirect_dim``)."""
    def kernel(data, indices):
        t, h = indices.shape[0], data.shape[1] - 2
        out = nl.ndarray((t, h), data.dtype, buffer=nl.shared_hbm)
        idx = _load_indices(indices)
        sb = nl.ndarray((t, h), data.dtype)
        nisa.dma_copy(dst=sb, src=data.ap(pattern=[[h, t], [1, h]], offset=1, vector_offset=idx, indirect_dim=0))
        nisa.dma_copy(dst=out, src=sb)
        return out
    data = np.arange(10 * 8, dtype=F32).reshape(10, 8)
    indices = np.array([[7], [0], [3]], np.uint32)
    out = nkisim.simulate(kernel)(data, indices)
    np.testing.assert_array_equal(out, data[[7, 0, 3], 1:7])


def test_gather_casts_through_fp32_like_any_dma():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((16, 8)).astype(F32)
    indices = np.arange(16)[::-1].reshape(16, 1).astype(np.uint32)

    def kernel(data, indices):
        out = nl.ndarray((16, 8), nl.bfloat16, buffer=nl.shared_hbm)
        idx = _load_indices(indices)
        sb = nl.ndarray((16, 8), nl.bfloat16)
        nisa.dma_copy(dst=sb, src=data.ap([[8, 16], [1, 8]], vector_offset=idx, indirect_dim=0))
        nisa.dma_copy(dst=out, src=sb)
        return out
    import ml_dtypes
    out = nkisim.simulate(kernel)(data, indices)
    np.testing.assert_array_equal(out, data[::-1].astype(ml_dtypes.bfloat16))


def _oob_kernel(oob_mode):
    def kernel(data, indices):
        out = nl.ndarray((4, 8), data.dtype, buffer=nl.shared_hbm)
        idx = _load_indices(indices, nl.int32)
        sb = nl.ndarray((4, 8), data.dtype)
        nisa.memset(sb, 0.0)
        nisa.dma_copy(dst=sb, src=data.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0), oob_mode=oob_mode)
        nisa.dma_copy(dst=out, src=sb)
        return out
    return kernel


def test_out_of_bounds_rows_are_skipped_with_oob_skip_and_an_error_otherwise():
    data = np.arange(6 * 8, dtype=F32).reshape(6, 8)
    indices = np.array([[1], [99], [-1], [5]], np.int32)
    out = nkisim.simulate(_oob_kernel(nisa.oob_mode.skip))(data, indices)
    np.testing.assert_array_equal(out[[0, 3]], data[[1, 5]])
    np.testing.assert_array_equal(out[[1, 2]], 0.0)   # skipped rows keep what dst held
    with raises_rule("dma_copy", "src", "index 99 of row 1 puts the access outside"):
        nkisim.simulate(_oob_kernel(nisa.oob_mode.error))(data, indices)


def test_dma_compute_gather_read_modify_write():
    """dst(SB) = dst(SB) + src(HBM)[indices], as AWS's topk_reduce sums its top-k rows."""
    def kernel(data, indices):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 8), nl.float32)
        nisa.memset(acc, 1.0)
        for k in range(2):
            idx = _load_indices(indices[:, k:k + 1])
            rows = data.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0)
            nisa.dma_compute(dst=acc, srcs=[rows, acc], reduce_op=nl.add, unique_indices=True)
        nisa.dma_copy(dst=out, src=acc)
        return out
    data = np.random.default_rng(3).standard_normal((10, 8)).astype(F32)
    indices = np.array([[0, 9], [2, 3], [4, 4], [7, 1]], np.uint32)
    out = nkisim.simulate(kernel)(data, indices)
    np.testing.assert_allclose(out, 1.0 + data[indices[:, 0]] + data[indices[:, 1]], rtol=1e-6)


def test_dma_compute_scatter_read_modify_write():
    """dst(HBM)[indices] = dst(HBM)[indices] + src(SB)."""
    def kernel(table, values, indices):
        sb = nl.ndarray(values.shape, values.dtype)
        nisa.dma_copy(dst=sb, src=values)
        idx = _load_indices(indices)
        view = table.ap([[8, 3], [1, 8]], vector_offset=idx, indirect_dim=0)
        nisa.dma_compute(dst=view, srcs=[view, sb], reduce_op=nl.add)
        return table
    table = np.ones((6, 8), F32)
    values = np.arange(3 * 8, dtype=F32).reshape(3, 8)
    indices = np.array([[5], [0], [2]], np.uint32)
    nkisim.simulate(kernel)(table, values, indices)
    expect = np.ones((6, 8), F32)
    expect[[5, 0, 2]] += values
    np.testing.assert_array_equal(table, expect)
    with raises_rule("dma_compute", "unique_indices", r"repeats row\(s\) \[2\]"):
        nkisim.run(kernel, table, values, np.array([[2], [0], [2]], np.uint32))


def test_dma_compute_read_modify_write_rules():
    def three_sources(data, indices):
        acc = nl.ndarray((4, 8), nl.float32)
        nisa.memset(acc, 0.0)
        rows = data.ap([[8, 4], [1, 8]], vector_offset=_load_indices(indices), indirect_dim=0)
        nisa.dma_compute(dst=acc, srcs=[rows, acc, acc], reduce_op=nl.add)

    def non_unique(data, indices):
        acc = nl.ndarray((4, 8), nl.float32)
        nisa.memset(acc, 0.0)
        rows = data.ap([[8, 4], [1, 8]], vector_offset=_load_indices(indices), indirect_dim=0)
        nisa.dma_compute(dst=acc, srcs=[rows, acc], reduce_op=nl.add, unique_indices=False)
    data, indices = np.zeros((8, 8), F32), np.zeros((4, 1), np.uint32)
    with raises_rule("dma_compute", "srcs", "exactly 2"):
        nkisim.run(three_sources, data, indices)
    with raises_rule("dma_compute", "unique_indices", "must be True"):
        nkisim.run(non_unique, data, indices)


def test_indirect_transpose_gathers_then_transposes():
    """The nki.isa.dma_transpose page's 2-D-indices example: ``flat = indices.T.flatten()[:F]``,
    ``dst = src[flat, :].T``."""
    def kernel(src_hbm, idx_hbm):
        p, f = 128, 256
        output = nl.ndarray((p, f), dtype=src_hbm.dtype, buffer=nl.shared_hbm)
        idx_sb = nl.load(idx_hbm)
        dst_sb = nl.ndarray((p, f), dtype=src_hbm.dtype, buffer=nl.sbuf)
        nisa.memset(dst=dst_sb, value=0)
        src_ap = src_hbm.ap(pattern=[[p, f], [1, p]], vector_offset=idx_sb, indirect_dim=0)
        nisa.dma_transpose(dst=dst_sb, src=src_ap, axes=(1, 0))
        nisa.dma_copy(dst=output, src=dst_sb)
        return output
    import ml_dtypes
    rng = np.random.default_rng(4)
    src = rng.standard_normal((300, 128)).astype(ml_dtypes.bfloat16)
    idx = rng.integers(0, 300, size=(128, 2)).astype(np.uint32)
    out = nkisim.simulate(kernel)(src, idx)
    flat = idx.T.reshape(-1)[:256]
    np.testing.assert_array_equal(out, src[flat, :].T)


def test_indirect_transpose_constraints():
    import ml_dtypes

    def kernel(src_hbm, idx_hbm):
        idx_sb = nl.load(idx_hbm)
        dst_sb = nl.ndarray((128, 128), dtype=src_hbm.dtype)
        src_ap = src_hbm.ap(pattern=[[128, 128], [1, 128]], vector_offset=idx_sb, indirect_dim=0)
        nisa.dma_transpose(dst=dst_sb, src=src_ap)
    src = np.zeros((200, 128), ml_dtypes.bfloat16)
    with raises_rule("dma_transpose", "vector_offset", "must be uint32"):
        nkisim.run(kernel, src, np.zeros((128, 1), np.int32))
    with raises_rule("dma_transpose", "vector_offset", "must be in \\[16, 128\\]"):
        nkisim.run(kernel, src, np.zeros((8, 16), np.uint32))
    with raises_rule("dma_transpose", "src", "needs a 2-byte dtype"):
        nkisim.run(kernel, np.zeros((200, 128), F32), np.zeros((128, 1), np.uint32))


def test_vector_offset_rules():
    def on_sbuf():
        t = nl.ndarray((4, 8), nl.float32, name="t")
        idx = nl.ndarray((4, 1), nl.uint32)
        t.ap([[8, 4], [1, 8]], vector_offset=idx)

    def float_indices(data):
        idx = nl.ndarray((4, 1), nl.float32)
        data.ap([[8, 4], [1, 8]], vector_offset=idx)

    def with_scalar_offset(data):
        idx = nl.ndarray((4, 1), nl.uint32)
        data.ap([[8, 4], [1, 8]], vector_offset=idx, scalar_offset=nisa.register_alloc(0))

    def on_compute_engine(data):
        idx = nl.ndarray((4, 1), nl.uint32)
        nisa.memset(idx, 0)
        sb = nl.ndarray((4, 8), nl.float32)
        nisa.tensor_copy(dst=sb, src=data.ap([[8, 4], [1, 8]], vector_offset=idx))

    def hwdge(data):
        idx = nl.ndarray((4, 1), nl.uint32)
        nisa.memset(idx, 0)
        sb = nl.ndarray((4, 8), nl.float32)
        nisa.dma_copy(dst=sb, src=data.ap([[8, 4], [1, 8]], vector_offset=idx), dge_mode=nisa.dge_mode.hwdge)

    def sliced(data):
        idx = nl.ndarray((4, 1), nl.uint32)
        data.ap([[8, 4], [1, 8]], vector_offset=idx)[0:2]
    data = np.zeros((8, 8), F32)
    with raises_rule("ap", "t", "indexes a tensor in HBM"):
        nkisim.run(on_sbuf)
    with raises_rule("ap", "vector_offset", "must be uint32 or int32"):
        nkisim.run(float_indices, data)
    with raises_rule("ap", "vector_offset", "mutually exclusive"):
        nkisim.run(with_scalar_offset, data)
    with raises_rule("tensor_copy", "src", "is a DMA operand"):
        nkisim.run(on_compute_engine, data)
    with raises_rule("dma_copy", "dge_mode", "only unknown or swdge"):
        nkisim.run(hwdge, data)
    with pytest.raises(nkisim.NkiUsageError, match="indirect"):
        nkisim.run(sliced, data)


def test_trace_records_software_dge_and_the_index_read():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((40, 16)).astype(F32)
    indices = rng.integers(0, 40, size=(32, 1)).astype(np.uint32)
    full = nkisim.run(_gather_kernel, data, indices)
    spec = nkisim.run(_gather_kernel, nkisim.TensorSpec(data.shape, "float32"),
                      nkisim.TensorSpec(indices.shape, "uint32"), trace_only=True)
    gather = [i for i in full.trace if i.op == "dma_copy"][1]
    assert gather.attr("dge_mode") == "swdge"
    src, _dst, index = gather.accesses
    assert (src.role, src.span, src.contiguous_bytes, src.nbytes) == ("src", (0, 40 * 16), 16 * 4, 32 * 16 * 4)
    assert (index.role, index.buffer, index.nbytes) == ("vector_offset", "sbuf", 0)
    assert [i.accesses for i in full.trace] == [i.accesses for i in spec.trace]   # same trace without data
    assert full.summary.modelled_us > 0   # the cost model reads the records


def test_trace_only_runs_every_indirect_form_with_the_full_runs_trace():
    """No data in trace-only mode: the indices are not read, and the records are the full run's."""
    def kernel(data, idx_hbm, table):
        idx = nl.load(idx_hbm)
        sb = nl.ndarray((128, 128), data.dtype)
        nisa.dma_transpose(dst=sb, src=data.ap([[128, 128], [1, 128]], vector_offset=idx, indirect_dim=0))
        rows = table.ap([[128, 128], [1, 128]], vector_offset=idx, indirect_dim=0)
        nisa.dma_compute(dst=rows, srcs=[rows, sb], reduce_op=nl.add)
        return table
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    data, table = np.ones((256, 128), bf), np.zeros((256, 128), bf)
    idx = np.random.default_rng(6).permutation(256)[:128].reshape(128, 1).astype(np.uint32)
    full = nkisim.run(kernel, data, idx, table)
    spec = nkisim.run(kernel, nkisim.TensorSpec(data.shape, "bfloat16"), nkisim.TensorSpec(idx.shape, "uint32"),
                      nkisim.TensorSpec(table.shape, "bfloat16"), trace_only=True)
    assert [(i.op, i.accesses, i.attrs) for i in full.trace] == [(i.op, i.accesses, i.attrs) for i in spec.trace]
    assert (table[idx[:, 0]] == 1).all() and np.count_nonzero(table) == 128 * 128


def test_vector_select_is_the_per_partition_view_of_the_rows():
    """NkiTensor.vector_select page: ``hbm_t.vector_select(0, offsets)`` on a (64, 128, 8) tensor with
    (128, 1) offsets has shape (128, 128, 8), each partition reading its own row."""
    def kernel(hbm_t, offsets):
        out = nl.ndarray((128, 16, 8), hbm_t.dtype, buffer=nl.shared_hbm)
        idx = _load_indices(offsets, nl.int32)
        view = hbm_t.vector_select(0, idx)
        assert view.shape == (128, 16, 8) and view.is_indirect() and not hbm_t.is_indirect()
        sb = nl.ndarray((128, 16, 8), hbm_t.dtype)
        nisa.dma_copy(dst=sb, src=view)
        nisa.dma_copy(dst=out, src=sb)
        return out
    rng = np.random.default_rng(7)
    data = rng.standard_normal((64, 16, 8)).astype(F32)
    offsets = rng.integers(0, 64, size=(128, 1)).astype(np.int32)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(data, offsets), data[offsets[:, 0]])

    def on_dim_1(hbm_t, offsets):
        hbm_t.vector_select(1, nl.ndarray((128, 1), nl.int32))
    with raises_rule("vector_select", "hbm_t", "only dim 0"):
        nkisim.run(on_dim_1, nkisim.TensorSpec((64, 16, 8), "float32"), offsets, trace_only=True)
