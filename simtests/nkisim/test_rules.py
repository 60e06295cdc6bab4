"""One deliberately broken kernel per rule: each raises NkiValidationError naming instruction, operand, rule."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule

F32, BF16 = nl.float32, nl.bfloat16


def sb(shape, dtype=BF16, name="t", **kw):
    return nl.ndarray(shape, dtype, buffer=nl.sbuf, name=name, **kw)


def ps(shape, dtype=F32, name="p", **kw):
    return nl.ndarray(shape, dtype, buffer=nl.psum, name=name, **kw)


def hbm(shape, dtype=BF16, name="h"):
    return nl.ndarray(shape, dtype, buffer=nl.shared_hbm, name=name)


def _matmul(dst_shape=(128, 512), st_shape=(128, 128), mv_shape=(128, 512), dst_dtype=F32, in_dtype=BF16,
            **kw):
    def kernel():
        nisa.nc_matmul(ps(dst_shape, dst_dtype), sb(st_shape, in_dtype, "s"), sb(mv_shape, in_dtype, "m"), **kw)
    return kernel


def _psum_stationary():
    nisa.nc_matmul(ps((128, 64)), ps((128, 128), BF16, "s"), sb((128, 64), name="m"))


def _moving_in_hbm():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), name="s"), hbm((128, 64), name="m"))


def _dst_in_sbuf():
    nisa.nc_matmul(sb((128, 64), F32), sb((128, 128), name="s"), sb((128, 64), name="m"))


def _bank_crossing():
    tile = ps((128, 1024))   # two banks; the view [256:768] crosses the boundary at 512
    nisa.nc_matmul(tile[:, 256:768], sb((128, 128), name="s"), sb((128, 512), name="m"))


def _accumulate_onto_memset():
    tile = ps((128, 64))
    nisa.memset(tile, 0.0)
    nisa.nc_matmul(tile, sb((128, 128), name="s"), sb((128, 64), name="m"), accumulate=True)


def _accumulate_none_onto_tensor_copy():
    tile = ps((128, 64))
    src = sb((128, 64), F32)
    nisa.memset(src, 0.0)
    nisa.tensor_copy(tile, src)
    nisa.nc_matmul(tile, sb((128, 128), name="s"), sb((128, 64), name="m"))


def _accumulate_true_fresh():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), name="s"), sb((128, 64), name="m"), accumulate=True)


def _dma_reads_psum():
    nisa.dma_copy(hbm((128, 64), F32), ps((128, 64)))


def _dma_writes_psum():
    nisa.dma_copy(ps((128, 64)), hbm((128, 64), F32))


def _gpsimd_psum():
    nisa.tensor_copy(sb((128, 64), F32), ps((128, 64), name="src"), engine=nisa.engine.gpsimd)


def _two_psum_inputs():
    nisa.tensor_tensor(sb((128, 64), F32), ps((128, 64), name="a"), ps((128, 64), name="b"), op=nl.add)


def _pe_transpose_too_big():
    nisa.nc_transpose(ps((128, 128), BF16), sb((128, 256)), engine=nisa.engine.tensor)


def _pe_transpose_dtype():
    nisa.nc_transpose(ps((64, 128), F32), sb((128, 64)), engine=nisa.engine.tensor)


def _pe_transpose_to_sbuf():
    nisa.nc_transpose(sb((64, 128)), sb((128, 64), name="d"), engine=nisa.engine.tensor)


def _vector_transpose_too_big():
    nisa.nc_transpose(sb((64, 64), name="o"), sb((64, 64)), engine=nisa.engine.vector)


def _start_partition_64():
    t = sb((128, 32), F32)
    nisa.memset(t[32:96, :], 1.0)


def _start_partition_quadrant():
    t = sb((128, 32), F32)
    nisa.memset(t[16:32, :], 1.0)


def _partition_limit():
    sb((256, 4))


def _memset_float_into_int():
    nisa.memset(sb((8, 8), nl.int32), 2.0)


def _tensor_scalar_operand_dtype():
    col = sb((8, 1), BF16, "col")
    nisa.tensor_scalar(sb((8, 8), F32, "o"), sb((8, 8), F32, "d"), nl.add, col)


def _tensor_scalar_operand_shape():
    col = sb((8, 2), F32, "col")
    nisa.tensor_scalar(sb((8, 8), F32, "o"), sb((8, 8), F32, "d"), nl.add, col)


def _dma_transpose_1byte():
    nisa.dma_transpose(sb((64, 16), nl.float8_e4m3, "o"), hbm((16, 64), nl.float8_e4m3, "src"))


def _dma_transpose_4byte_hwdge():
    nisa.dma_transpose(sb((64, 16), F32, "o"), hbm((16, 64), F32, "src"), dge_mode=nisa.dge_mode.hwdge)


def _dma_transpose_dtypes():
    nisa.dma_transpose(sb((64, 16), nl.float16, "o"), hbm((16, 64), BF16, "src"))


def _dma_transpose_shape():
    nisa.dma_transpose(sb((16, 64), BF16, "o"), hbm((16, 64), BF16, "src"))


def _hwdge_cast():
    nisa.dma_copy(sb((8, 8), F32, "o"), hbm((8, 8), BF16, "src"), dge_mode=nisa.dge_mode.hwdge)


def _returns_sbuf():
    return sb((8, 8))


def _returns_private_hbm():
    return nl.ndarray((8, 8), F32, buffer=nl.hbm, name="out")


def _reduce_axis_zero():
    nisa.tensor_reduce(sb((1, 8), F32, "o"), nl.add, sb((8, 8), F32, "d"), axis=0)


def _reduce_axis_not_trailing():
    nisa.tensor_reduce(sb((8, 4), F32, "o"), nl.add, sb((8, 6, 4), F32, "d"), axis=1)


def _tensor_copy_shape():
    nisa.tensor_copy(sb((8, 10), F32, "o"), sb((8, 8), F32, "s"))


def _tensor_tensor_partitions():
    nisa.tensor_tensor(sb((8, 8), F32, "o"), sb((8, 8), F32, "a"), sb((4, 16), F32, "b"), op=nl.add)


def _dma_copy_elements():
    nisa.dma_copy(sb((8, 8), F32, "o"), hbm((8, 9), F32, "src"))


def _scalar_copy_trn1():
    nisa.tensor_copy(sb((8, 8), F32, "o"), sb((8, 8), F32, "s"), engine=nisa.engine.scalar)


def _raw_engine_int():
    nisa.tensor_copy(sb((8, 8), F32, "o"), sb((8, 8), F32, "s"), engine=5)


def _string_buffer():
    nl.ndarray((8, 8), F32, buffer="sbuf", name="x")


def _psum_address_not_bank_aligned():
    ps((128, 128), address=(0, 1024))


def _sbuf_address_out_of_bounds():
    sb((128, 1024), F32, address=(0, 212_984 - 1024))


def _use_after_address_reuse():
    a = ps((128, 512), name="a", address=(0, 2048))
    b = ps((128, 512), name="b", address=(0, 2048))
    nisa.memset(a, 0.0)   # aliases may be used in turn (AWS's attention_cte rotates PSUM tiles so)
    nisa.memset(b, 0.0)
    nisa.tensor_copy(sb((128, 512), F32), a)   # but a's bytes now hold b's data


def _sendrecv_without_lnc():
    nisa.sendrecv(sb((8, 8), name="s"), sb((8, 8), name="d"), send_to_rank=1, recv_from_rank=1, pipe_id=0)


def _iota_into_psum():
    nisa.iota(ps((8, 8), nl.int32), [[1, 8]])


def _affine_select_tile_value():
    on_true = sb((8, 8), F32, "on_true")
    nisa.affine_select(sb((8, 8), F32, "o"), [[1, 8]], 1, on_true, on_true, cmp_op=nl.greater_equal)


def _scalar_engine_pair_trn2():
    nisa.tensor_scalar(sb((8, 8), F32, "o"), sb((8, 8), F32, "d"), nl.subtract, 1.0, engine=nisa.engine.scalar)


def _scalar_bias_trn1():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), bias=1.0)


def _activation_binary_op():
    nisa.activation(sb((8, 8), F32, "o"), nl.add, sb((8, 8), F32, "d"))


def _engine_free_size():
    t = sb((8, 70_000), BF16)
    nisa.memset(t, 0.0)


def _gpsimd_memset_psum():
    nisa.memset(ps((8, 8)), 0.0, engine=nisa.engine.gpsimd)


def _matmul_wrong_engine_transpose():
    nisa.nc_transpose(sb((8, 8), name="o"), sb((8, 8)), engine=nisa.engine.gpsimd)


# --- rules of the docs/nkisim.md table not covered above (one broken kernel each) ---------------
def _slice_partition_step():
    sb((128, 8), name="t").slice(0, 0, 128, step=2)


def _ap_partition_holes():
    sb((16, 32), F32, "t").ap([[64, 8], [1, 32]])


def _ap_outside_row():
    nisa.memset(sb((16, 32), F32, "t").ap([[32, 2], [1, 40]]), 0.0)   # (building the view alone is allowed)


def _psum_free_limit():
    nisa.memset(ps((8, 8192), BF16)[:, 0:4097], 0.0)


def _fp32_with_bf16():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), F32, "s"), sb((128, 64), BF16, "m"))


def _e4m3_with_e4m3fn():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), nl.float8_e4m3, "s"), sb((128, 64), nl.float8_e4m3fn, "m"))


def _e4m3fn_before_trn3():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), nl.float8_e4m3fn, "s"), sb((128, 64), nl.float8_e4m3fn, "m"))


def _transpose_mode_dst_dtype():
    nisa.nc_matmul(ps((128, 128), nl.float16), sb((128, 128), BF16, "s"), sb((128, 128), BF16, "m"),
                   is_transpose=True)


def _accumulate_not_bool():
    nisa.nc_matmul(ps((128, 64)), sb((128, 128), name="s"), sb((128, 64), name="m"), accumulate="yes")


def _transpose_dst_shape():
    nisa.nc_transpose(ps((64, 64), BF16, "o"), sb((64, 32), BF16, "d"))


def _hwdge_on_trn1():
    nisa.dma_copy(sb((8, 8), name="d"), hbm((8, 8), name="s"), dge_mode=nisa.dge_mode.hwdge)


def _dma_engine_without_hwdge():
    nisa.dma_copy(sb((8, 8), name="d"), hbm((8, 8), name="s"), engine=nisa.engine.sync)


def _dma_priority():
    nisa.dma_copy(sb((8, 8), name="d"), hbm((8, 8), name="s"), priority=4)


def _dma_transpose_into_hbm():
    nisa.dma_transpose(hbm((8, 4), name="d"), hbm((4, 8), name="s"))


def _dma_transpose_from_psum():
    nisa.dma_transpose(sb((8, 4), name="d"), ps((4, 8), BF16, "s"))


def _dma_transpose_axes():
    nisa.dma_transpose(sb((8, 4, 2), name="d"), hbm((2, 4, 8), name="s"), axes=(2, 0, 1))


def _dma_transpose_swdge():
    nisa.dma_transpose(sb((8, 4), name="d"), hbm((4, 8), name="s"), dge_mode=nisa.dge_mode.swdge)


def _dma_transpose_hwdge_shape():
    nisa.dma_transpose(sb((8, 4, 3), name="d"), hbm((3, 4, 8), name="s"), dge_mode=nisa.dge_mode.hwdge)


def _dma_compute_psum():
    nisa.dma_compute(ps((8, 8), F32, "d"), (sb((8, 8), F32, "a"),), nl.add)


def _dma_compute_count():
    nisa.dma_compute(sb((8, 8), F32, "d"), (sb((8, 8), F32, "a"), sb((8, 4), F32, "b")), nl.add)


def _dma_compute_not_reduction():
    nisa.dma_compute(sb((8, 8), F32, "d"), (sb((8, 8), F32, "a"),), nl.subtract)


def _dma_compute_scales():
    nisa.dma_compute(sb((8, 8), F32, "d"), (sb((8, 8), F32, "a"),), nl.add, scales=(1.0, 2.0))


def _memset_on_scalar():
    nisa.memset(sb((8, 8), F32), 0.0, engine=nisa.engine.scalar)


def _memset_not_a_number():
    nisa.memset(sb((8, 8), F32), "zero")


def _bitwise_on_floats():
    nisa.tensor_tensor(sb((8, 8), F32, "o"), sb((8, 8), F32, "a"), sb((8, 8), F32, "b"), nl.bitwise_and)


def _reduce_dst_shape():
    nisa.tensor_reduce(sb((8, 2), F32, "o"), nl.add, sb((8, 4, 6), F32, "d"), axis=2)


def _activation_bias_shape():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), bias=sb((8, 2), F32, "b"))


def _activation_reduce_max_trn1():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), reduce_op=nl.maximum,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)


def _activation_reduce_res_shape():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), reduce_op=nl.add,
                    reduce_res=sb((8, 2), F32, "r"), reduce_cmd=nisa.reduce_cmd.reset_reduce)


def _activation_reduce_res_idle():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), reduce_res=sb((8, 1), F32, "r"))


def _activation_load_without_res():
    nisa.activation(sb((8, 8), F32, "o"), nl.exp, sb((8, 8), F32, "d"), reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.load_reduce)


def _iota_pattern_dims():
    nisa.iota(sb((8, 32), nl.int32, "o"), [[1, 2]] * 5)


def _iota_pattern_cover():
    nisa.iota(sb((8, 32), nl.int32, "o"), [[1, 16]])


def _affine_select_true_in_psum():
    nisa.affine_select(sb((8, 8), F32, "o"), [[1, 8]], 1, ps((8, 8), F32, "on_true"), 0.0)


def _sendrecv_trn1():
    nisa.sendrecv(sb((8, 8), name="s"), sb((8, 8), name="d"), send_to_rank=1, recv_from_rank=1, pipe_id=0)


def _address_on_hbm():
    nl.ndarray((8, 8), F32, buffer=nl.shared_hbm, name="h", address=(0, 0))


def _address_partitions():
    nl.ndarray((64, 8), F32, buffer=nl.sbuf, name="t", address=(96, 0))


def _view_strided_last_dim():
    sb((8, 16), BF16, "t")[:, ::2].view(nl.float32)


def _load_from_sbuf():
    nl.load(sb((8, 8), name="t"))


CASES = [
    # (kernel, target, instruction, operand, rule)
    (_matmul(st_shape=(128, 256), dst_shape=(128, 64), mv_shape=(128, 64)), "trn2", "nc_matmul", "stationary",
     "free size 256 exceeds 128"),
    (_matmul(mv_shape=(128, 640), dst_shape=(128, 640)), "trn2", "nc_matmul", "moving", "free size 640 exceeds 512"),
    (_matmul(mv_shape=(128, 640), dst_shape=(128, 640)), "trn1", "nc_matmul", "moving", "exceeds 512 \\(trn1\\)"),
    (_matmul(mv_shape=(128, 4608), dst_shape=(128, 64)), "trn3", "nc_matmul", "moving",
     "free size 4608 exceeds 4096"),
    (_matmul(mv_shape=(64, 512)), "trn2", "nc_matmul", "moving", "contraction partitions 64 must equal"),
    (_matmul(dst_shape=(64, 512)), "trn2", "nc_matmul", "dst", "partition size 64 must equal the stationary"),
    (_matmul(dst_shape=(128, 256)), "trn2", "nc_matmul", "dst", "free size 256 must equal the moving"),
    (_matmul(dst_dtype=BF16), "trn2", "nc_matmul", "dst", "must be float32"),
    (_matmul(dst_dtype=nl.float16), "trn3", "nc_matmul", "dst", "must be float32 or bfloat16"),
    (_matmul(in_dtype=nl.int8), "trn2", "nc_matmul", "stationary", "not a TensorE input type"),
    (_matmul(is_transpose=True, st_shape=(128, 128), mv_shape=(128, 128), dst_shape=(128, 128)), "trn1",
     "nc_matmul", "is_transpose", "needs NC-v3"),
    (_psum_stationary, "trn2", "nc_matmul", "stationary", "must be in SBUF"),
    (_moving_in_hbm, "trn2", "nc_matmul", "moving", "must be in SBUF"),
    (_dst_in_sbuf, "trn2", "nc_matmul", "dst", "must be in PSUM"),
    (_bank_crossing, "trn2", "nc_matmul", "dst", "cross a 2048 B bank boundary"),
    (_accumulate_onto_memset, "trn2", "nc_matmul", "dst", "written by a non-matmul"),
    (_accumulate_true_fresh, "trn2", "nc_matmul", "dst", "never written"),
    (_dma_reads_psum, "trn2", "dma_copy", "src", "cannot read PSUM"),
    (_dma_writes_psum, "trn2", "dma_copy", "dst", "cannot write PSUM"),
    (_gpsimd_psum, "trn2", "tensor_copy", "src", "GpSimd cannot access PSUM"),
    (_two_psum_inputs, "trn2", "tensor_tensor", "data2", "cannot both be in PSUM"),
    (_pe_transpose_too_big, "trn2", "nc_transpose", "data", "exceeds 128x128"),
    (_pe_transpose_dtype, "trn2", "nc_transpose", "dst", "must equal the data dtype"),
    (_pe_transpose_to_sbuf, "trn2", "nc_transpose", "dst", "must be in PSUM"),
    (_vector_transpose_too_big, "trn2", "nc_transpose", "data", "exceeds 32x32"),
    (_start_partition_64, "trn2", "memset", "dst", "start partition 32 with 64 partitions"),
    (_start_partition_quadrant, "trn2", "memset", "dst", "start partition 16 with 16 partitions"),
    (_partition_limit, "trn2", "ndarray", "t", "partition dim 256 exceeds maximum 128"),
    (_memset_float_into_int, "trn2", "memset", "value", "does not match dst dtype int32"),
    (_tensor_scalar_operand_dtype, "trn2", "tensor_scalar", "operand0", "must be float32"),
    (_tensor_scalar_operand_shape, "trn2", "tensor_scalar", "operand0", "must be \\(8, 1\\)"),
    (_dma_transpose_1byte, "trn2", "dma_transpose", "src", "2-byte and 4-byte dtypes only"),
    (_dma_transpose_4byte_hwdge, "trn2", "dma_transpose", "src", "hwdge needs a 2-byte dtype"),
    (_dma_transpose_dtypes, "trn2", "dma_transpose", "dst", "must equal the src dtype"),
    (_dma_transpose_shape, "trn2", "dma_transpose", "dst", "must equal the permuted src shape"),
    (_dma_transpose_shape, "trn1", "dma_transpose", "dst", "needs NC-v3"),
    (_hwdge_cast, "trn2", "dma_copy", "dst", "must equal src dtype bfloat16 with dge_mode=hwdge"),
    (_returns_sbuf, "trn2", "kernel return", "return", "must be in shared_hbm"),
    (_returns_private_hbm, "trn2", "kernel return", "return", "must be in shared_hbm"),
    (_reduce_axis_zero, "trn2", "tensor_reduce", "axis", "trailing free dim"),
    (_reduce_axis_not_trailing, "trn2", "tensor_reduce", "axis", "trailing free dim"),
    (_tensor_copy_shape, "trn2", "tensor_copy", "dst", "same partitions and elements per partition"),
    (_tensor_tensor_partitions, "trn2", "tensor_tensor", "data2", "same partitions and elements per partition"),
    (_dma_copy_elements, "trn2", "dma_copy", "dst", "64 elements .* must equal the src's 72"),
    (_scalar_copy_trn1, "trn1", "tensor_copy", "engine", "cannot tensor_copy on NC-v2"),
    (_raw_engine_int, "trn2", "tensor_copy", "engine", "raw values are rejected"),
    (_string_buffer, "trn2", "ndarray", "x", "buffer must be an nl buffer"),
    (_psum_address_not_bank_aligned, "trn2", "ndarray", "p", "must start at a bank boundary"),
    (_sbuf_address_out_of_bounds, "trn2", "ndarray", "t", "exceeds the 212984 B per partition of SBUF"),
    (_use_after_address_reuse, "trn2", "tensor_copy", "src", "read after its memory was overwritten through 'b'"),
    (_sendrecv_without_lnc, "trn2", "sendrecv", "src", "needs LNC=2"),
    (_iota_into_psum, "trn2", "iota", "dst", "must be in SBUF"),
    (_matmul(tile_position=(0, 0), tile_size=(64, 128)), "trn2", "nc_matmul", "stationary",
     "contraction \\(partition\\) size 128 exceeds 64"),
    (_matmul(tile_position=(32, 0), tile_size=(64, 128)), "trn2", "nc_matmul", "tile_position",
     "must be a multiple of tile_size"),
    (_affine_select_tile_value, "trn2", "affine_select", "on_false_value", "must be an fp32 scalar"),
    (_scalar_engine_pair_trn2, "trn2", "tensor_scalar", "op0", "Scalar engine on trn2 supports only"),
    (_scalar_bias_trn1, "trn1", "activation", "bias", "scalar bias needs NC-v3"),
    (_activation_binary_op, "trn2", "activation", "op", "not a unary"),
    (_engine_free_size, "trn2", "memset", "dst", "70000 elements per partition exceed the engine limit of 65536"),
    (_gpsimd_memset_psum, "trn2", "memset", "dst", "GpSimd cannot access PSUM"),
    (_matmul_wrong_engine_transpose, "trn2", "nc_transpose", "engine", "cannot run nc_transpose"),
    (_slice_partition_step, "trn2", "slice", "t", "partition dim is never strided"),
    (_ap_partition_holes, "trn2", "ap", "t", "partition access has holes"),
    (_ap_outside_row, "trn2", "memset", "dst", "outside one partition"),
    (_psum_free_limit, "trn2", "memset", "dst", "4097 elements per partition exceed the engine limit of 4096"),
    (_fp32_with_bf16, "trn2", "nc_matmul", "moving", "if one input is fp32/tf32 both must be"),
    (_e4m3_with_e4m3fn, "trn3", "nc_matmul", "moving", "cannot be mixed"),
    (_e4m3fn_before_trn3, "trn2", "nc_matmul", "stationary", "float8_e4m3fn needs NC-v4"),
    (_transpose_mode_dst_dtype, "trn2", "nc_matmul", "dst", "transpose mode writes float32 or the input dtype"),
    (_accumulate_not_bool, "trn2", "nc_matmul", "accumulate", "must be True, False or None"),
    (_transpose_dst_shape, "trn2", "nc_transpose", "dst", "must be \\[32, 64\\]"),
    (_hwdge_on_trn1, "trn1", "dma_copy", "dge_mode", "hwdge needs NC-v3"),
    (_dma_engine_without_hwdge, "trn2", "dma_copy", "engine", "only valid as engine.scalar or engine.sync with"),
    (_dma_priority, "trn2", "dma_copy", "priority", "must be 0-3"),
    (_dma_transpose_into_hbm, "trn2", "dma_transpose", "dst", "must be in SBUF"),
    (_dma_transpose_from_psum, "trn2", "dma_transpose", "src", "must be in HBM or SBUF"),
    (_dma_transpose_axes, "trn2", "dma_transpose", "axes", "not the supported permutation"),
    (_dma_transpose_swdge, "trn2", "dma_transpose", "dge_mode", "needs dge_mode unknown, none or hwdge"),
    (_dma_transpose_hwdge_shape, "trn2", "dma_transpose", "src", "hwdge needs shape\\[0\\] in"),
    (_dma_compute_psum, "trn2", "dma_compute", "dst", "DMA cannot write PSUM"),
    (_dma_compute_count, "trn2", "dma_compute", "srcs[1]", "32 elements must equal the dst's 64"),
    (_dma_compute_not_reduction, "trn2", "dma_compute", "reduce_op", "not a reduction op"),
    (_dma_compute_scales, "trn2", "dma_compute", "scales", "must be 1 numbers"),
    (_memset_on_scalar, "trn2", "memset", "engine", "cannot run memset"),
    (_memset_not_a_number, "trn2", "memset", "value", "not a compile-time number"),
    (_bitwise_on_floats, "trn2", "tensor_tensor", "op", "needs integer operands"),
    (_reduce_dst_shape, "trn2", "tensor_reduce", "dst", "must have 8 partitions and 4 elements"),
    (_activation_bias_shape, "trn2", "activation", "bias", "must be \\(8, 1\\)"),
    (_activation_reduce_max_trn1, "trn1", "activation", "reduce_op", "not a supported reduction"),
    (_activation_reduce_res_shape, "trn2", "activation", "reduce_res", "must be \\(8, 1\\)"),
    (_activation_reduce_res_idle, "trn2", "activation", "reduce_res", "reduce_cmd=idle"),
    (_activation_load_without_res, "trn2", "activation", "reduce_res", "loads the registers from reduce_res"),
    (_iota_pattern_dims, "trn2", "iota", "pattern", "5 dims; 1 to 4"),
    (_iota_pattern_cover, "trn2", "iota", "pattern", "covers 16 elements per partition, dst has 32"),
    (_affine_select_true_in_psum, "trn2", "affine_select", "on_true_tile", "must be in SBUF"),
    (_sendrecv_trn1, "trn1", "sendrecv", "src", "needs NC-v3"),
    (_address_on_hbm, "trn2", "ndarray", "h", "address= places on-chip tensors only"),
    (_address_partitions, "trn2", "ndarray", "t", "address partition 96 \\+ 64 partitions exceeds 128"),
    (_view_strided_last_dim, "trn2", "view", "t", "last dim must be contiguous"),
    (_load_from_sbuf, "trn2", "load", "src", "must be an HBM tensor"),
]


@pytest.mark.parametrize("kernel,target,instruction,operand,rule", CASES,
                         ids=[f"{c[2]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_rule_is_enforced(kernel, target, instruction, operand, rule):
    with raises_rule(instruction, operand, rule):
        nkisim.run(kernel, target=target)


def test_accumulate_none_onto_non_matmul_psum_warns_and_overwrites():
    # The compiler infers the flag from matmul writes only; AWS's depthwise_conv1d zeroes PSUM with
    # memset before its first matmul. The first matmul overwrites whatever the memset wrote.
    def kernel(s, m):
        s_sb, m_sb = nl.load(s), nl.load(m)
        tile = ps((4, 8))
        nisa.memset(tile, 5.0)
        nisa.nc_matmul(tile, s_sb, m_sb)
        nisa.nc_matmul(tile, s_sb, m_sb)   # the second accumulates
        out_sb = nl.ndarray((4, 8), F32)
        nisa.tensor_copy(out_sb, tile)
        out = nl.ndarray((4, 8), F32, buffer=nl.shared_hbm)
        nl.store(out, out_sb)
        return out
    rng = np.random.default_rng(0)
    s, m = rng.standard_normal((16, 4), np.float32), rng.standard_normal((16, 8), np.float32)
    with pytest.warns(nkisim.NkiStrictWarning, match="accumulate=None onto PSUM written by a non-matmul"):
        out = nkisim.run(kernel, s, m, target="trn2").outputs
    np.testing.assert_allclose(out, 2 * (s.T @ m), rtol=1e-5, atol=1e-5)
    with raises_rule("nc_matmul", "dst", "written by a non-matmul"):   # accumulate=True stays an error
        nkisim.run(_accumulate_onto_memset, target="trn2")


def test_validation_error_is_an_assertion_error():
    assert issubclass(nkisim.NkiValidationError, AssertionError)
    assert nisa.NkiValidationError is nkisim.NkiValidationError


def test_rules_also_hold_in_trace_only_mode():
    with raises_rule("nc_matmul", "dst", "written by a non-matmul"):
        nkisim.run(_accumulate_onto_memset, trace_only=True)
    with raises_rule("nc_matmul", "moving", "free size 640 exceeds 512"):
        nkisim.run(_matmul(mv_shape=(128, 640), dst_shape=(128, 640)), trace_only=True)


def test_misspelled_keyword_is_an_error():
    def kernel():
        nisa.nc_matmul(ps((128, 64)), sb((128, 128)), sb((128, 64)), acumulate=True)
    with pytest.raises(TypeError, match="acumulate"):
        nkisim.run(kernel)


def _lnc_kernel(body):
    def kernel():
        body(nl.program_id(0))
    return nkisim.jit(kernel)[2]


def test_lnc2_rules():
    def mismatched_shared(pid):
        nl.ndarray((8, 8 + pid), F32, buffer=nl.shared_hbm, name="out")

    def sendrecv_dtype(pid):
        nisa.sendrecv(sb((8, 8), F32, "s"), sb((8, 8), BF16, "d"), send_to_rank=1 - pid, recv_from_rank=1 - pid,
                      pipe_id=0)

    def sendrecv_rank(pid):
        nisa.sendrecv(sb((8, 8), F32, "s"), sb((8, 8), F32, "d"), send_to_rank=2, recv_from_rank=1 - pid,
                      pipe_id=0)

    with raises_rule("ndarray", "out", "LNC programs must run the same control flow"):
        nkisim.run(_lnc_kernel(mismatched_shared))
    with raises_rule("sendrecv", "dst", "must equal the src dtype"):
        nkisim.run(_lnc_kernel(sendrecv_dtype))
    with raises_rule("sendrecv", "send_to_rank", "must be 0 or 1"):
        nkisim.run(_lnc_kernel(sendrecv_rank))

    def sendrecv_hbm(pid):
        nisa.sendrecv(hbm((8, 8), F32, "s"), sb((8, 8), F32, "d"), send_to_rank=1 - pid, recv_from_rank=1 - pid,
                      pipe_id=0)

    def sendrecv_shape(pid):
        nisa.sendrecv(sb((8, 8), F32, "s"), sb((8, 4), F32, "d"), send_to_rank=1 - pid, recv_from_rank=1 - pid,
                      pipe_id=0)

    def different_returns():
        pid = nl.program_id(0)
        a = nl.ndarray((2, 2), F32, buffer=nl.shared_hbm)
        b = nl.ndarray((2, 2), F32, buffer=nl.shared_hbm)
        return a if pid == 0 else b

    with raises_rule("sendrecv", "src", "must be in SBUF"):
        nkisim.run(_lnc_kernel(sendrecv_hbm))
    with raises_rule("sendrecv", "dst", "must match src"):
        nkisim.run(_lnc_kernel(sendrecv_shape))
    with raises_rule("kernel return", "return", "program 1 returns other tensors than program 0"):
        nkisim.run(nkisim.jit(different_returns)[2])


# --- NKISIM_STRICT=0: the rules stricter than the real simulator warn instead --------------------------
def _accumulate_true_onto_fresh_full():
    out = nl.ndarray((128, 64), F32, buffer=nl.shared_hbm)
    tile = ps((128, 64))
    s, m = sb((128, 128), name="s"), sb((128, 64), name="m")
    nisa.memset(s, 1.0)
    nisa.memset(m, 1.0)
    nisa.nc_matmul(tile, s, m, accumulate=True)
    evicted = sb((128, 64), F32, "e")
    nisa.tensor_copy(evicted, tile)
    nisa.dma_copy(out, evicted)
    return out


def _tensor_engine_start_partition():
    nisa.nc_matmul(ps((128, 16))[16:32, :], sb((128, 128), name="s")[:, 0:16], sb((128, 16), name="m"))


def _pe_transpose_start_partition():
    nisa.nc_transpose(ps((16, 16), BF16, "o"), sb((128, 16), BF16, "d")[16:32, :])


def _accumulate_onto_memset_trn3():
    tile = ps((128, 64))
    nisa.memset(tile, 0.0)
    nisa.nc_matmul(tile, sb((128, 128), name="s"), sb((128, 64), name="m"), accumulate=True)


STRICTER = [
    (_accumulate_true_onto_fresh_full, "trn2", "nc_matmul", "dst", "accumulate=True onto PSUM never written"),
    (_tensor_engine_start_partition, "trn2", "nc_matmul", "dst", "start partition 16 with 16 partitions"),
    (_pe_transpose_start_partition, "trn2", "nc_transpose", "data", "start partition 16 with 16 partitions"),
    (_accumulate_onto_memset_trn3, "trn3", "nc_matmul", "dst", "written by a non-matmul"),
    (_activation_reduce_res_idle, "trn2", "activation", "reduce_res", "reduce_cmd=idle"),
]


@pytest.mark.parametrize("kernel,target,instruction,operand,rule", STRICTER,
                         ids=[f"{c[2]}-{c[3]}-{i}" for i, c in enumerate(STRICTER)])
def test_stricter_rules_warn_with_nkisim_strict_0(monkeypatch, kernel, target, instruction, operand, rule):
    with raises_rule(instruction, operand, rule):   # the default: an error
        nkisim.run(kernel, target=target)
    monkeypatch.setenv("NKISIM_STRICT", "0")
    with pytest.warns(nkisim.NkiStrictWarning, match=f"{instruction}: operand '{operand}': .*{rule}"):
        nkisim.run(kernel, target=target)


def test_lenient_accumulate_true_adds_onto_the_sentinel(monkeypatch):
    monkeypatch.setenv("NKISIM_STRICT", "0")
    with pytest.warns(nkisim.NkiStrictWarning):
        out = nkisim.run(_accumulate_true_onto_fresh_full).outputs
    assert np.isnan(out).all()   # fresh PSUM holds NaN; adding onto it keeps NaN (no silent overwrite)


def test_documented_rules_stay_errors_with_nkisim_strict_0(monkeypatch):
    monkeypatch.setenv("NKISIM_STRICT", "0")
    with raises_rule("nc_matmul", "dst", "written by a non-matmul"):   # documented for trn1/trn2
        nkisim.run(_accumulate_onto_memset, target="trn2")
    with raises_rule("memset", "dst", "start partition 32 with 64 partitions"):   # documented for VectorE
        nkisim.run(_start_partition_64)


def test_explicit_aliases_rotate_and_stale_reads_fail():
    def rotate(x):
        out = nl.ndarray((4, 8), F32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 8), F32)
        nisa.memset(acc, 0.0)
        for i in range(3):   # three PSUM tiles over one bank, used in turn
            p = ps((4, 8), name=f"p{i}", address=(0, 0))
            nisa.tensor_scalar(p, nl.load(x), nl.multiply, float(i + 1))
            nisa.tensor_tensor(acc, acc, p, nl.add)
        nl.store(out, acc)
        return out
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(nkisim.simulate(rotate)(x), 6 * x)

    def read_before_write():
        a = ps((4, 8), name="a", address=(0, 0))
        nisa.memset(a, 1.0)
        b = ps((4, 8), name="b", address=(0, 0))
        nisa.tensor_copy(sb((4, 8), F32), b)   # b's bytes hold a's data, which nkisim does not alias
    with raises_rule("tensor_copy", "src", "read after its memory was overwritten through 'a'"):
        nkisim.run(read_before_write)
