"""The NKI 0.6 names, signatures and defaults that kernels rely on (the nki, nki.language and
nki.isa API pages)."""
from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim


def test_jit_bare_and_with_arguments_and_lnc_indexing():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, x)
        return out
    bare = nkisim.jit(k)
    with_args = nkisim.jit(mode="auto")(k)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for kern in (bare, with_args, bare[1], bare[2]):
        np.testing.assert_array_equal(nkisim.simulate(kern)(x), x)
    np.testing.assert_array_equal(nkisim.simulate(k)(x), x)   # plain functions are wrapped
    np.testing.assert_array_equal(bare(x), x)                  # a direct call runs on the emulator
    with pytest.raises(nkisim.NkiUsageError, match="platform_target"):
        nkisim.jit(k, platform_target="trn2")


def test_tuple_returns_and_kwargs():
    @nkisim.jit
    def k(x, scale=2.0):
        a = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, x.dtype)
        nisa.dma_copy(t, x)
        nisa.dma_copy(a, t)
        nisa.tensor_scalar(t, t, nl.multiply, scale)
        nisa.dma_copy(b, t)
        return a, b
    x = np.ones((2, 2), np.float32)
    a, b = nkisim.simulate(k)(x, scale=3.0)
    assert (a == 1).all() and (b == 3).all()


SIGNATURES = {
    nisa.nc_matmul: "(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, "
                    "is_transpose=False, accumulate=None, tile_position=(), tile_size=(), "
                    "perf_mode=<matmul_perf_mode.none: 'none'>, name=None)",
    nisa.nc_transpose: "(dst, data, engine=<engine.unknown: 0>, name=None)",
    nisa.dma_copy: "(dst, src, priority=None, oob_mode=<oob_mode.error: 0>, dge_mode=<dge_mode.unknown: 0>, "
                   "engine=<engine.unknown: 0>, name=None)",
    nisa.dma_transpose: "(dst, src, axes=None, priority=None, dge_mode=<dge_mode.unknown: 0>, "
                        "oob_mode=<oob_mode.error: 0>, name=None)",
    nisa.tensor_copy: "(dst, src, engine=<engine.unknown: 0>, name=None, dtype=None)",
    nisa.memset: "(dst, value, engine=<engine.unknown: 0>, name=None)",
    nisa.tensor_tensor: "(dst, data1, data2, op, engine=<engine.unknown: 0>, name=None)",
    nisa.tensor_scalar: "(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, "
                        "engine=<engine.unknown: 0>, name=None)",
    nisa.tensor_reduce: "(dst, op, data, axis, negate=False, keepdims=False, name=None)",
    nisa.activation: "(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, "
                     "reduce_cmd=<reduce_cmd.idle: 0>, name=None)",
    nisa.iota: "(dst, pattern, offset=0, channel_multiplier=0, name=None)",
    nisa.affine_select: "(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=nl.equal, "
                        "offset=0, name=None)",
    nisa.sendrecv: "(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=<dma_engine.dma: 1>, name=None)",
    nisa.core_barrier: "(data, cores, engine=<engine.unknown: 0>, name=None)",
    # the instruction families of the current docs (nki.isa pages of the same names)
    nisa.tensor_tensor_scan: "(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None)",
    nisa.scalar_tensor_tensor: "(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, "
                               "name=None)",
    nisa.reciprocal: "(dst, data, name=None)",
    nisa.tensor_scalar_reduce: "(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False, "
                               "reduce_cmd=<reduce_cmd.reset_reduce: 3>, reduce_init=None, "
                               "reduce_res_negate=False, name=None)",
    nisa.activation_reduce: "(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None)",
    nisa.tensor_copy_predicated: "(dst, src, predicate, reverse_pred=False, name=None)",
    nisa.range_select: "(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, "
                       "reduce_cmd=<reduce_cmd.reset_reduce: 3>, reduce_res=None, reduce_op=nl.maximum, "
                       "range_start=0, on_false_value=-3.4028234663852886e+38, name=None)",
    nisa.bn_stats: "(dst, data, name=None)",
    nisa.bn_aggr: "(dst, data, name=None)",
    nisa.nc_stream_shuffle: "(dst, src, shuffle_mask, name=None)",
    nisa.max8: "(dst, src, name=None)",
    nisa.nc_find_index8: "(dst, data, vals, name=None)",
    nisa.nc_match_replace8: "(dst, data, vals, imm, dst_idx=None, name=None)",
    nisa.nc_n_gather: "(dst, data, indices, name=None)",
    nisa.local_gather: "(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None)",
    nisa.tensor_partition_reduce: "(dst, op, data, name=None)",
    nisa.nonzero_with_count: "(dst, src, index_offset=0, padding_val=-1, name=None)",
    nisa.register_alloc: "(x=None)",
    nisa.register_move: "(dst, src)",
    nisa.register_load: "(dst, src)",
    nisa.register_store: "(dst, src)",
    nl.dynamic_range: "(start, stop=None, step=1)",
    nl.fori_loop: "(lower, upper, body_fun, step=1)",
    nl.while_loop: "(init, body_fun)",
    nl.shared_constant: "(constant)",
    nl.load: "(src, dtype=None)",
    nl.store: "(dst, value)",
    nl.ndarray: "(shape, dtype, buffer=<MemoryRegion.sbuf: 'sbuf'>, name='', address=None)",
    nl.zeros: "(shape, dtype, buffer=<MemoryRegion.sbuf: 'sbuf'>, name='')",
}


@pytest.mark.parametrize("fn", list(SIGNATURES), ids=lambda f: f.__name__)
def test_signatures_match_nki_0_6(fn):
    got = str(inspect.signature(fn))
    for annotation in (" -> 'NkiTensor'", " -> 'VirtualRegister'", " -> 'None'", " -> 'range'"):
        got = got.replace(annotation, "")
    assert got == SIGNATURES[fn]


def test_enums_and_legacy_aliases():
    assert nisa.tensor_engine is nisa.engine.tensor
    assert nisa.vector_engine is nisa.engine.vector
    assert nisa.scalar_engine is nisa.engine.scalar
    assert nisa.gpsimd_engine is nisa.engine.gpsimd
    assert nisa.unknown_engine is nisa.engine.unknown
    assert {e.name for e in nisa.dge_mode} == {"unknown", "swdge", "hwdge", "none"}
    assert {e.name for e in nisa.reduce_cmd} == {"idle", "reset", "reduce", "reset_reduce", "load_reduce"}
    assert {e.name for e in nisa.oob_mode} == {"error", "skip"}
    assert {e.name for e in nisa.matmul_perf_mode} == {"none", "double_row"}
    assert nl.hbm is nl.private_hbm


def test_dtypes_map_to_numpy_and_ml_dtypes():
    from conv3d_bwd.nkisim.dtypes import NUMPY_TYPES
    assert nl.bfloat16 == "bfloat16"
    assert NUMPY_TYPES[nl.bfloat16] == np.dtype(ml_dtypes.bfloat16)
    assert NUMPY_TYPES[nl.float8_e4m3] == np.dtype(ml_dtypes.float8_e4m3)
    assert NUMPY_TYPES[nl.float8_e5m2] == np.dtype(ml_dtypes.float8_e5m2)
    assert NUMPY_TYPES[nl.bool_] == np.dtype(np.uint8)
    for name in ("int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32"):
        assert NUMPY_TYPES[getattr(nl, name)] == np.dtype(name)


@pytest.mark.parametrize("env,name,version", [("", "trn3", "gen4"), ("trn2", "trn2", "gen3"),
                                              ("gen2", "trn1", "gen2"), ("inf2", "trn1", "gen2"),
                                              ("gen4", "trn3", "gen4")])
def test_target_from_environment(monkeypatch, env, name, version):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", env)
    seen = {}

    def k():
        seen["usable"] = nl.tile_size.total_available_sbuf_size
        seen["version"] = nisa.get_nc_version()
    nkisim.simulate(k)()
    expected = {"trn1": 180_224, "trn2": 212_984, "trn3": 245_752}[name]
    assert seen == {"usable": expected, "version": nisa.nc_version[version]}


def test_tile_size_constants(monkeypatch):
    monkeypatch.delenv("NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", raising=False)
    ts = nl.tile_size
    assert (ts.pmax, ts.psum_fmax, ts.psum_bank_fmax, ts.psum_bank_fmax_bytes, ts.psum_num_banks) == \
        (128, 512, 512, 2048, 8)
    assert (ts.gemm_stationary_fmax, ts.gemm_moving_fmax, ts.bn_stats_fmax) == (128, 512, 512)
    monkeypatch.setenv("NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", "true")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    assert nl.tile_size.psum_num_banks == 7


def test_program_helpers_and_ranges():
    seen = {}

    def k():
        seen["ids"] = (nl.program_id(), nl.num_programs(), nl.program_ndim())
        seen["ranges"] = (list(nl.affine_range(3)), list(nl.sequential_range(1, 5, 2)), list(nl.static_range(2)))
    nkisim.run(k)
    assert seen == {"ids": (0, 1, 0), "ranges": ([0, 1, 2], [1, 3], [0, 1])}


def test_outside_a_kernel_is_a_clear_error():
    with pytest.raises(nkisim.NkiUsageError, match="inside a kernel run"):
        nl.ndarray((2, 2), nl.float32)


def test_trace_only_mode_skips_arithmetic_and_returns_placeholders():
    def k(x, w):
        out = nl.ndarray((64, 512), nl.bfloat16, buffer=nl.shared_hbm)
        a = nl.ndarray(w.shape, w.dtype)
        b = nl.ndarray(x.shape, x.dtype)
        nisa.dma_copy(a, w)
        nisa.dma_copy(b, x)
        p = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, a, b)
        s = nl.ndarray((64, 512), nl.bfloat16)
        nisa.tensor_copy(s, p)
        nisa.dma_copy(out, s)
        return out
    r = nkisim.run(k, nkisim.TensorSpec((128, 512), "bf16"), nkisim.TensorSpec((128, 64), "bfloat16"),
                   trace_only=True)
    assert r.outputs.shape == (64, 512) and r.outputs.dtype == ml_dtypes.bfloat16
    assert not np.isnan(r.outputs.astype(np.float32)).any()
    assert [i.op for i in r.trace] == ["dma_copy", "dma_copy", "nc_matmul", "tensor_copy", "dma_copy"]
    mm = r.trace.instrs[2]
    assert dict(mm.attrs)["moving_free"] == 512 and dict(mm.attrs)["stationary_free"] == 64
    assert r.summary.instr_counts["nc_matmul"] == 1
    with pytest.raises(nkisim.NkiUsageError, match="trace_only=True"):
        nkisim.run(k, nkisim.TensorSpec((128, 512), "bf16"), nkisim.TensorSpec((128, 64), "bf16"))


def test_trace_records_accesses():
    def k(x):
        t = nl.ndarray((32, 64), nl.bfloat16)
        nisa.dma_copy(t, x[:, 0:64])
        out = nl.ndarray((32, 64), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out
    r = nkisim.run(k, np.zeros((32, 128), ml_dtypes.bfloat16))
    load = r.trace.instrs[0]
    src, dst = load.accesses
    assert (src.role, src.buffer, src.nbytes, src.contiguous_bytes, src.span) == \
        ("src", "private_hbm", 32 * 64 * 2, 128, (0, 31 * 128 + 64))
    assert (dst.role, dst.buffer, dst.partitions, dst.free_elems, dst.write) == ("dst", "sbuf", 32, 64, True)


def test_non_nki_input_dtype_names_the_argument():
    def k(x):
        return None
    with pytest.raises(nkisim.NkiUsageError, match="argument 'x'.*float64"):
        nkisim.run(k, np.zeros((2, 2)))
