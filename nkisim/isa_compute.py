"""Vector/Scalar/GpSimd instructions: copies, element-wise ops, reductions, activation, iota."""
from __future__ import annotations

import warnings

import numpy as np

from .context import current_core
from .dtypes import INT_TYPES, PACKED_TYPES, dtype_name, float32, int32
from .errors import NkiStrictWarning, violation
from .isa_core import (
    F32,
    access,
    buffer_in,
    engine_free_size,
    is_scalar,
    mark_written_by_other,
    no_psum_on_gpsimd,
    on_chip,
    out_array,
    pick_engine,
    read2d,
    same_partitions_and_free,
    start_partition,
    stricter,
    tensor,
    write,
)
from .isa_enums import engine, reduce_cmd
from .memory import PSUM, SBUF
from .ops import add, as_op, equal, power
from .trace import Instr

_SBUF = frozenset({SBUF})
_E = engine
_ENGINE_NAME = {_E.vector: "vector", _E.scalar: "scalar", _E.gpsimd: "gpsimd"}


def _finish(core, ins, eng, reads, dst, attrs=()):
    """Mark a PSUM dst as written by a non-matmul and record the instruction."""
    mark_written_by_other(dst)
    accesses = tuple([access(t, role, False) for role, t in reads] + [access(dst, "dst", True)])
    core.record(Instr(ins, _ENGINE_NAME[eng], accesses, attrs, core.program_id))


_MOVES_PACKED = frozenset({"tensor_copy", "memset"})   # the engine instructions that may touch x4 types


def _operands(ins, dst, **reads):
    for role, t in (("dst", dst), *reads.items()):
        tensor(ins, role, t)
        on_chip(ins, role, t)
        start_partition(ins, role, t)
        engine_free_size(ins, role, t)
        if t.dtype in PACKED_TYPES and ins not in _MOVES_PACKED:
            raise violation(ins, role, f"dtype {t.dtype} is a packed MX type: engines only copy or zero it (its "
                            "arithmetic is nc_matmul_mx's)")


def tensor_copy(dst, src, engine=engine.unknown, name=None, dtype=None):
    """Copy on chip (bit-exact for equal dtypes, else through fp32).

    ``dtype=`` is not in the documented signature but AWS's current matmul tutorial passes it
    (``dtype=result.dtype``), also with an fp32 dst: accepted; the copy writes dst's dtype, and a
    different ``dtype`` draws a warning (the docs give it no meaning).
    """
    core = current_core()
    ins = "tensor_copy"
    _operands(ins, dst, src=src)
    if dtype is not None and dtype_name(dtype) != dst.dtype:
        warnings.warn(NkiStrictWarning(
            f"tensor_copy: operand 'dtype': {dtype!r} differs from dst's dtype {dst.dtype}; the copy writes "
            "dst's dtype (the nki.isa.tensor_copy docs have no dtype argument)"), stacklevel=2)
    eng = pick_engine(ins, engine, (_E.vector, _E.scalar, _E.gpsimd), _E.vector)
    if eng is _E.scalar and core.target.generation < 3:
        raise violation(ins, "engine", "the Scalar engine cannot tensor_copy on NC-v2 (trn1); use "
                        "activation(op=nl.copy)")
    no_psum_on_gpsimd(ins, eng, (("src", src), ("dst", dst)))
    same_partitions_and_free(ins, "src", src, "dst", dst)
    if src.dtype != dst.dtype and PACKED_TYPES & {src.dtype, dst.dtype}:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal src's {src.dtype}: packed MX types are copied "
                        "bit-exactly, never converted")
    if not core.trace_only:
        values = src.array()
        if src.dtype != dst.dtype:
            values = values.astype(F32, copy=False)
        write(dst, values)
    _finish(core, ins, eng, (("src", src),), dst)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill dst with a compile-time constant whose type matches the dtype."""
    core = current_core()
    ins = "memset"
    _operands(ins, dst)
    eng = pick_engine(ins, engine, (_E.vector, _E.gpsimd), _E.vector)
    no_psum_on_gpsimd(ins, eng, (("dst", dst),))
    if not is_scalar(value):
        raise violation(ins, "value", f"{value!r} is not a compile-time number")
    if dst.dtype in PACKED_TYPES and value != 0:
        raise violation(ins, "value", f"{value!r}: a packed x4 dtype ({dst.dtype}) can only be set to 0 (memset docs)")
    if dst.dtype in INT_TYPES and isinstance(value, (float, np.floating)):
        raise violation(ins, "value", f"{value!r} does not match dst dtype {dst.dtype} (an int dtype needs an "
                        "int value, e.g. 2 not 2.0)")
    if not core.trace_only:
        a = out_array(dst)
        a[...] = np.asarray(value, F32 if dst.dtype not in INT_TYPES else np.int64).astype(a.dtype)
    _finish(core, ins, eng, (), dst)


def _all_int(*tensors) -> bool:
    return all(t.dtype in INT_TYPES for t in tensors)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """dst = op(data1, data2) element-wise (same partitions and elements per partition)."""
    core = current_core()
    ins = "tensor_tensor"
    _operands(ins, dst, data1=data1, data2=data2)
    op = as_op(op, ins, "op", 2)
    if data1.storage.buffer == PSUM and data2.storage.buffer == PSUM:
        raise violation(ins, "data2", "data1 and data2 cannot both be in PSUM")
    any_psum = PSUM in (data1.storage.buffer, data2.storage.buffer, dst.storage.buffer)
    want_gpsimd = (op is power or _all_int(data1, data2, dst) and dst.dtype == int32) and not any_psum
    eng = pick_engine(ins, engine, (_E.vector, _E.gpsimd), _E.gpsimd if want_gpsimd else _E.vector)
    no_psum_on_gpsimd(ins, eng, (("data1", data1), ("data2", data2), ("dst", dst)))
    same_partitions_and_free(ins, "data1", data1, "data2", data2)
    same_partitions_and_free(ins, "data1", data1, "dst", dst)
    integer = _all_int(data1, data2)
    if op.bitwise and not integer:
        raise violation(ins, "op", f"bitwise {op!r} needs integer operands, got {data1.dtype}, {data2.dtype}")
    if not core.trace_only:
        p, f = data1.layout()[1:3]
        if integer and op.bitwise or integer and op.name in ("add", "subtract", "multiply", "maximum",
                                                              "minimum"):
            a = data1.array().astype(np.int64).reshape(p, f)
            b = data2.array().astype(np.int64).reshape(p, f)
        else:
            a, b = read2d(data1), read2d(data2)
        write(dst, op.fn(a, b))
    _finish(core, ins, eng, (("data1", data1), ("data2", data2)), dst, (("op", op.name),))


def _scalar_operand(ins, role, value, parts):
    """A compile-time number, or a (P, 1) fp32 tile broadcast along the free dims."""
    if value is None or is_scalar(value):
        return value
    tensor(ins, role, value)
    on_chip(ins, role, value)
    lay = value.layout()
    if value.dtype != float32:
        raise violation(ins, role, f"dtype {value.dtype} must be float32 for a per-partition operand")
    if lay[1] != parts or lay[2] != 1:
        raise violation(ins, role, f"shape {value.shape} must be ({parts}, 1): one value per partition")
    return value


def _operand_values(value, parts):
    if value is None:
        return None
    if is_scalar(value):
        return F32(value)
    return read2d(value).reshape(parts, 1)


def _apply(op, x, operand, reverse):
    return op.fn(operand, x) if reverse else op.fn(x, operand)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    """dst = (data op0 operand0) op1 operand1, operands scalars or (P, 1) fp32 tiles."""
    core = current_core()
    ins = "tensor_scalar"
    _operands(ins, dst, data=data)
    op0 = as_op(op0, ins, "op0", 2)
    if op1 is not None:
        op1 = as_op(op1, ins, "op1", 2)
    elif operand1 is not None:
        raise violation(ins, "operand1", "given without op1")
    eng = pick_engine(ins, engine, (_E.vector, _E.scalar, _E.gpsimd), _E.vector)
    parts = data.layout()[1]
    tiles = [("operand0", _scalar_operand(ins, "operand0", operand0, parts))]
    if op1 is not None:
        if operand1 is None:
            raise violation(ins, "operand1", "op1 needs operand1")
        tiles.append(("operand1", _scalar_operand(ins, "operand1", operand1, parts)))
    no_psum_on_gpsimd(ins, eng, (("data", data), ("dst", dst)) + tuple(
        (r, t) for r, t in tiles if not is_scalar(t)))
    if eng is _E.scalar and core.target.name == "trn2":
        pair = (op0.name, None if op1 is None else op1.name)
        if pair not in (("multiply", "add"), ("multiply", None), ("add", None)):
            raise violation(ins, "op0", f"the Scalar engine on trn2 supports only (multiply, add), (multiply, -) "
                            f"and (add, -), got {pair}")
    same_partitions_and_free(ins, "data", data, "dst", dst)
    if not core.trace_only:
        x = read2d(data)
        x = _apply(op0, x, _operand_values(operand0, parts), reverse0)
        if op1 is not None:
            x = _apply(op1, x, _operand_values(operand1, parts), reverse1)
        write(dst, x)
    reads = (("data", data),) + tuple((r, t) for r, t in tiles if not is_scalar(t))
    _finish(core, ins, eng, reads, dst,
            (("op0", op0.name), ("op1", None if op1 is None else op1.name)))


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce the trailing free dims of data with op (Vector engine, fp32)."""
    core = current_core()
    ins = "tensor_reduce"
    _operands(ins, dst, data=data)
    op = as_op(op, ins, "op", 2)
    if op.reduce is None:
        raise violation(ins, "op", f"{op!r} is not a reduction op")
    ndim = len(data.shape)
    axes = sorted(a + ndim if a < 0 else a for a in ((axis,) if isinstance(axis, int) else tuple(axis)))
    if not axes or 0 in axes or axes != list(range(axes[0], ndim)) or axes[-1] >= ndim:
        raise violation(ins, "axis", f"{axis!r} must be the trailing free dim(s) of a {ndim}-D tensor, ending "
                        "at the last dim (never axis 0)")
    kept = 1
    for d in range(1, axes[0]):
        kept *= data.shape[d]
    lay_d, lay_x = dst.layout(), data.layout()
    if lay_d[1] != lay_x[1] or lay_d[2] != kept:
        raise violation(ins, "dst", f"shape {dst.shape} must have {lay_x[1]} partitions and {kept} elements per "
                        "partition")
    if not core.trace_only:
        x = data.array().astype(F32)
        r = op.reduce(x, axis=tuple(axes))
        if negate:
            r = -r
        write(dst, np.asarray(r, F32))
    _finish(core, ins, _E.vector, (("data", data),), dst, (("op", op.name),))


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    """dst = op(data * scale + bias) on the Scalar engine, with the optional free-dim reduction."""
    core = current_core()
    ins = "activation"
    _operands(ins, dst, data=data)
    op = as_op(op, ins, "op", 1)
    parts = data.layout()[1]
    if bias is not None and is_scalar(bias) and core.target.generation < 3:
        raise violation(ins, "bias", f"a scalar bias needs NC-v3+ (trn2), target is {core.target.name}")
    if bias is not None and not is_scalar(bias):
        tensor(ins, "bias", bias)
        on_chip(ins, "bias", bias)
        if bias.layout()[1] != parts or bias.layout()[2] != 1:
            raise violation(ins, "bias", f"shape {bias.shape} must be ({parts}, 1)")
    if not is_scalar(scale):
        tensor(ins, "scale", scale)
        on_chip(ins, "scale", scale)
        if scale.layout()[1] != parts or scale.layout()[2] != 1:
            raise violation(ins, "scale", f"shape {scale.shape} must be ({parts}, 1)")
    same_partitions_and_free(ins, "data", data, "dst", dst)
    if not isinstance(reduce_cmd, _reduce_cmd):
        raise violation(ins, "reduce_cmd", f"{reduce_cmd!r} is not an nki.isa.reduce_cmd member")
    reducing = reduce_cmd in (_reduce_cmd.reduce, _reduce_cmd.reset_reduce, _reduce_cmd.load_reduce)
    if reducing:
        if reduce_op is None:
            raise violation(ins, "reduce_op", f"reduce_cmd.{reduce_cmd.name} needs a reduce_op")
        reduce_op = as_op(reduce_op, ins, "reduce_op", 2)
        if reduce_op.reduce is None or (core.target.generation < 3 and reduce_op is not add):
            raise violation(ins, "reduce_op", f"{reduce_op!r} is not a supported reduction here")
    if reduce_res is not None:
        tensor(ins, "reduce_res", reduce_res)
        on_chip(ins, "reduce_res", reduce_res)
        if reduce_res.layout()[1] != parts or reduce_res.layout()[2] != 1:
            raise violation(ins, "reduce_res", f"shape {reduce_res.shape} must be ({parts}, 1)")
        if reduce_cmd is _reduce_cmd.idle:   # (then it receives the registers unchanged)
            stricter(core, ins, "reduce_res", "given with reduce_cmd=idle, so nothing is reduced into it")
    elif reduce_cmd is _reduce_cmd.load_reduce:
        raise violation(ins, "reduce_res", "reduce_cmd.load_reduce loads the registers from reduce_res")
    p0 = data.layout()[0]
    if not core.trace_only:
        x = read2d(data)
        s = F32(scale) if is_scalar(scale) else read2d(scale)
        y = x * s
        if bias is not None:
            y = y + (F32(bias) if is_scalar(bias) else read2d(bias))
        y = op.fn(y.astype(F32)).astype(F32)
        write(dst, y)
        regs = core.activation_regs[p0:p0 + parts]
        if reduce_cmd in (_reduce_cmd.reset, _reduce_cmd.reset_reduce):
            regs[...] = 0
        if reduce_cmd is _reduce_cmd.load_reduce:
            regs[...] = read2d(reduce_res).reshape(parts)
        if reducing:
            part = reduce_op.reduce(y, axis=1).astype(F32)
            regs[...] = part if reduce_cmd is _reduce_cmd.reset_reduce else reduce_op.fn(regs, part)
        if reduce_res is not None:
            write(reduce_res, regs.copy())
    reads = [("data", data)] + [(r, t) for r, t in (("bias", bias), ("scale", scale))
                                if t is not None and not is_scalar(t)]
    if reduce_res is not None:
        mark_written_by_other(reduce_res)
        reads.append(("reduce_res", reduce_res))
    _finish(core, ins, _E.scalar, tuple(reads), dst, (("op", op.name), ("reduce_cmd", reduce_cmd.name)))


def _affine(pattern, offset, channel_multiplier, parts, free, ins):
    try:
        pat = [(int(step), int(num)) for step, num in pattern]
    except (TypeError, ValueError):
        raise violation(ins, "pattern", f"{pattern!r} must be [[step, num], ...]") from None
    if not 1 <= len(pat) <= 4:
        raise violation(ins, "pattern", f"{len(pat)} dims; 1 to 4 are supported")
    count = 1
    for _, num in pat:
        count *= num
    if count != free:
        raise violation(ins, "pattern", f"covers {count} elements per partition, dst has {free}")
    values = np.zeros([num for _, num in pat], np.int64)
    for d, (step, num) in enumerate(pat):
        shape = [1] * len(pat)
        shape[d] = num
        values = values + (np.arange(num, dtype=np.int64) * step).reshape(shape)
    chan = np.arange(parts, dtype=np.int64).reshape(parts, 1) * int(channel_multiplier)
    return (int(offset) + chan + values.reshape(1, free)).astype(np.int32)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst = offset + p*channel_multiplier + sum(idx_k * step_k), computed in int32 (GpSimd)."""
    core = current_core()
    ins = "iota"
    _operands(ins, dst)
    buffer_in(ins, "dst", dst, _SBUF, "SBUF")
    parts, free = dst.layout()[1:3]
    values = _affine(pattern, offset, channel_multiplier, parts, free, ins)
    if not core.trace_only:
        write(dst, values if dst.dtype in INT_TYPES else values.astype(F32))
    _finish(core, ins, _E.gpsimd, (), dst)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=equal, offset=0,
                  name=None):
    """dst = on_true_tile where cmp_op(affine value, 0) else on_false_value (GpSimd)."""
    core = current_core()
    ins = "affine_select"
    _operands(ins, dst, on_true_tile=on_true_tile)
    buffer_in(ins, "dst", dst, _SBUF, "SBUF")
    buffer_in(ins, "on_true_tile", on_true_tile, _SBUF, "SBUF")
    cmp_op = as_op(cmp_op, ins, "cmp_op", 2)
    if not is_scalar(on_false_value):
        raise violation(ins, "on_false_value", f"{on_false_value!r} must be an fp32 scalar")
    same_partitions_and_free(ins, "on_true_tile", on_true_tile, "dst", dst)
    parts, free = dst.layout()[1:3]
    values = _affine(pattern, offset, channel_multiplier, parts, free, ins)
    if not core.trace_only:
        cond = cmp_op.fn(values.astype(F32), F32(0)) != 0
        write(dst, np.where(cond, read2d(on_true_tile), F32(on_false_value)))
    _finish(core, ins, _E.gpsimd, (("on_true_tile", on_true_tile),), dst, (("cmp_op", cmp_op.name),))


_reduce_cmd = reduce_cmd
