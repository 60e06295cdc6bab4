"""Vector-engine instructions beyond the element-wise basics: scans, fused ops, accumulating
reductions, statistics, predicated copies and partition shuffles.

Semantics, operand rules and defaults are those of the Neuron docs, nki.isa (one page per
instruction: tensor_tensor_scan, scalar_tensor_tensor, reciprocal, tensor_scalar_reduce,
activation_reduce, tensor_copy_predicated, range_select, bn_stats, bn_aggr, nc_stream_shuffle).
Arithmetic is fp32, as the docs state for every one of them.
"""
from __future__ import annotations

import numpy as np

from .context import CoreState, current_core
from .dtypes import FLOAT_TYPES, float32
from .errors import violation
from .isa_compute import _finish as finish
from .isa_compute import _operands as check_operands
from .isa_compute import activation
from .isa_core import (
    F32,
    access,
    is_scalar,
    mark_written_by_other,
    on_chip,
    out_array,
    read2d,
    same_partitions_and_free,
    tensor,
    write,
)
from .isa_enums import engine, reduce_cmd
from .memory import PSUM
from .ops import Op, as_op, equal, greater, greater_equal, less, less_equal, maximum
from .trace import Instr

_VECTOR = engine.vector
_FP32_MIN = float(np.finfo(np.float32).min)
# Identity of each accumulating reduction (tensor_scalar_reduce docs: 0, 1, -inf, +inf).
_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def _record_two(core, ins, reads, dst, reduce_res, attrs=()):
    """One Vector instruction writing dst and (when given) its reduction result reduce_res."""
    if reduce_res is None:
        finish(core, ins, _VECTOR, reads, dst, attrs)
        return
    mark_written_by_other(dst)
    mark_written_by_other(reduce_res)
    accesses = tuple([access(t, role, False) for role, t in reads] + [access(dst, "dst", True),
                                                                       access(reduce_res, "reduce_res", True)])
    core.record(Instr(ins, "vector", accesses, attrs, core.program_id))


def _vector_regs(core: CoreState) -> np.ndarray:
    """The Vector engine's 128 per-partition accumulator registers (shared by its accumulating
    instructions: tensor_scalar_reduce, range_select, ...)."""
    regs = getattr(core, "vector_regs", None)
    if regs is None:
        regs = core.vector_regs = np.zeros(128, np.float32)
    return regs


def _per_partition(ins: str, role: str, value: object, parts: int):
    """A compile-time number or a (P, 1) on-chip tile; returns the values broadcastable to (P, F)."""
    if is_scalar(value):
        return F32(value)
    tensor(ins, role, value)
    on_chip(ins, role, value)
    lay = value.layout()
    if lay[1] != parts or lay[2] != 1:
        raise violation(ins, role, f"shape {value.shape} must be ({parts}, 1): one value per partition, or a "
                        "number")
    return value


def _values(value, parts: int, trace_only: bool):
    if trace_only or is_scalar(value):
        return value if is_scalar(value) else None
    return read2d(value).reshape(parts, 1)


def _reads(*pairs):
    return tuple((role, t) for role, t in pairs if t is not None and not is_scalar(t))


def _arith(ins: str, role: str, op: object, arity: int | None = 2) -> Op:
    op = as_op(op, ins, role, arity)
    if op.bitwise:
        raise violation(ins, role, f"{op!r} is a bitvec operator; {ins} takes arithmetic operators only")
    return op


def _not_both_psum(ins: str, role_a: str, a, role_b: str, b) -> None:
    if a.storage.buffer == PSUM and getattr(b, "storage", None) is not None and b.storage.buffer == PSUM:
        raise violation(ins, role_b, f"{role_a} and {role_b} cannot both be in PSUM")


def _reduce_cmd(ins: str, value: object, allowed: tuple[reduce_cmd, ...]) -> reduce_cmd:
    if not isinstance(value, reduce_cmd) or value not in allowed:
        names = ", ".join(f"reduce_cmd.{c.name}" for c in allowed)
        raise violation(ins, "reduce_cmd", f"{value!r} must be one of {names}")
    return value


def _accumulate(core, ins, op: Op, cmd: reduce_cmd, part: np.ndarray | None, p0: int, parts: int,
                init: np.ndarray | None) -> np.ndarray | None:
    """Apply ``cmd`` to the Vector accumulator registers with this result's reduction ``part``."""
    if part is None:
        return None
    regs = _vector_regs(core)[p0:p0 + parts]
    if cmd is reduce_cmd.reset_reduce:
        regs[...] = _IDENTITY[op.name]
    elif cmd is reduce_cmd.load_reduce:
        regs[...] = init.reshape(parts)
    regs[...] = op.fn(regs, part.astype(F32))
    return regs.copy()


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i]), result[:, -1] = initial."""
    core = current_core()
    ins = "tensor_tensor_scan"
    check_operands(ins, dst, data0=data0, data1=data1)
    op0, op1 = _arith(ins, "op0", op0), _arith(ins, "op1", op1)
    _not_both_psum(ins, "data0", data0, "data1", data1)
    same_partitions_and_free(ins, "data0", data0, "data1", data1)
    same_partitions_and_free(ins, "data0", data0, "dst", dst)
    parts, free = data0.layout()[1:3]
    initial = _per_partition(ins, "initial", initial, parts)
    if not core.trace_only:
        a, b = read2d(data0), read2d(data1)
        prev = np.broadcast_to(_values(initial, parts, False), (parts, 1)).reshape(parts).astype(F32)
        out = np.empty((parts, free), F32)
        for i in range(free):   # a true scan: each column depends on the previous one
            x = op0.fn(prev, a[:, i]) if reverse0 else op0.fn(a[:, i], prev)
            prev = (op1.fn(b[:, i], x) if reverse1 else op1.fn(x, b[:, i])).astype(F32)
            out[:, i] = prev
        write(dst, out)
    finish(core, ins, _VECTOR, _reads(("data0", data0), ("data1", data1), ("initial", initial)), dst,
           (("op0", op0.name), ("op1", op1.name)))


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """dst = (data op0 operand0) op1 operand1; operand0 a number or (P, 1) tile, operand1 a tile."""
    core = current_core()
    ins = "scalar_tensor_tensor"
    check_operands(ins, dst, data=data, operand1=operand1)
    op0, op1 = _arith(ins, "op0", op0), _arith(ins, "op1", op1)
    _not_both_psum(ins, "data", data, "operand1", operand1)
    same_partitions_and_free(ins, "data", data, "operand1", operand1)
    same_partitions_and_free(ins, "data", data, "dst", dst)
    parts = data.layout()[1]
    operand0 = _per_partition(ins, "operand0", operand0, parts)
    if not core.trace_only:
        x, o0, o1 = read2d(data), _values(operand0, parts, False), read2d(operand1)
        x = op0.fn(o0, x) if reverse0 else op0.fn(x, o0)
        write(dst, op1.fn(o1, x) if reverse1 else op1.fn(x, o1))
    finish(core, ins, _VECTOR, _reads(("data", data), ("operand0", operand0), ("operand1", operand1)), dst,
           (("op0", op0.name), ("op1", op1.name)))


def reciprocal(dst, data, name=None):
    """dst = 1 / data on the Vector engine, in fp32."""
    core = current_core()
    ins = "reciprocal"
    check_operands(ins, dst, data=data)
    same_partitions_and_free(ins, "data", data, "dst", dst)
    if not core.trace_only:
        with np.errstate(divide="ignore"):
            write(dst, (F32(1) / read2d(data)).astype(F32))
    finish(core, ins, _VECTOR, (("data", data),), dst)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    """dst = data op0 operand0; the Vector accumulators reduce it along the free dims into reduce_res."""
    core = current_core()
    ins = "tensor_scalar_reduce"
    check_operands(ins, dst, data=data)
    op0 = _arith(ins, "op0", op0, None)
    reduce_op = as_op(reduce_op, ins, "reduce_op", 2)
    if reduce_op.name not in _IDENTITY:
        raise violation(ins, "reduce_op", f"{reduce_op!r} must be nl.add, nl.multiply, nl.maximum or nl.minimum")
    cmd = _reduce_cmd(ins, reduce_cmd, (_cmd.reset_reduce, _cmd.reduce, _cmd.load_reduce))
    if reverse0:
        raise violation(ins, "reverse0", "reversing op0's operands is not supported yet (tensor_scalar_reduce docs)")
    same_partitions_and_free(ins, "data", data, "dst", dst)
    parts = data.layout()[1]
    if op0.arity == 1:
        if operand0 not in (None, 0):
            raise violation(ins, "operand0", f"must be None or 0 with the unary op0 {op0!r}")
    else:
        operand0 = _per_partition(ins, "operand0", operand0, parts)
    if (reduce_init is None) == (cmd is _cmd.load_reduce):
        raise violation(ins, "reduce_init", "must be given exactly when reduce_cmd is load_reduce")
    if reduce_init is not None:
        reduce_init = _per_partition(ins, "reduce_init", reduce_init, parts)
    if reduce_res is not None:
        tensor(ins, "reduce_res", reduce_res)
        _per_partition(ins, "reduce_res", reduce_res, parts)
    if not core.trace_only:
        x = read2d(data)
        if op0.arity == 1:
            y = op0.fn(x)
        else:
            y = op0.fn(x, _values(operand0, parts, False))
        y = np.asarray(y, F32)
        write(dst, y)
        init = None if reduce_init is None else np.broadcast_to(_values(reduce_init, parts, False), (parts, 1))
        regs = _accumulate(core, ins, reduce_op, cmd, reduce_op.reduce(y, axis=1), data.layout()[0], parts, init)
        if reduce_res is not None:
            write(reduce_res, -regs if reduce_res_negate else regs)
    reads = _reads(("data", data), ("operand0", operand0), ("reduce_init", reduce_init))
    _record_two(core, ins, reads, dst, reduce_res, (("op0", op0.name), ("reduce_op", reduce_op.name)))


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` with ``reduce_cmd=reset_reduce`` (the docs' stated equivalent)."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd=_cmd.reset_reduce, name=name)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """dst = src where predicate (a uint tile) is nonzero (zero with reverse_pred); dst kept elsewhere."""
    core = current_core()
    ins = "tensor_copy_predicated"
    check_operands(ins, dst, predicate=predicate)
    if predicate.dtype not in ("uint8", "uint16", "uint32", "bool"):   # bool_ is stored as uint8 (docs' example)
        raise violation(ins, "predicate", f"dtype {predicate.dtype} must be uint8, uint16 or uint32")
    same_partitions_and_free(ins, "predicate", predicate, "dst", dst)
    if not is_scalar(src):
        check_operands(ins, dst, src=src)
        if src.dtype != dst.dtype:
            raise violation(ins, "src", f"dtype {src.dtype} must equal dst's {dst.dtype}")
        same_partitions_and_free(ins, "src", src, "dst", dst)
        _not_both_psum(ins, "src", src, "predicate", predicate)
    if not core.trace_only:
        parts, free = dst.layout()[1:3]
        mask = predicate.array().reshape(parts, free) != 0
        if reverse_pred:
            mask = ~mask
        cur = np.array(dst.array()).reshape(parts, free)
        new = np.full((parts, free), src, cur.dtype) if is_scalar(src) else src.array().reshape(parts, free)
        out_array(dst)[...] = np.where(mask, new, cur).reshape(dst.shape)
    finish(core, ins, _VECTOR, _reads(("src", src), ("predicate", predicate)), dst)


_COMPARE = (equal, less, less_equal, greater, greater_equal)


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=maximum, range_start=0, on_false_value=_FP32_MIN, name=None):
    """dst = on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) (i = range_start + free
    index) else on_false_value; the max of dst goes through the Vector accumulators to reduce_res."""
    core = current_core()
    ins = "range_select"
    if core.target.generation < 3:
        raise violation(ins, "dst", f"range_select needs NC-v3+ (trn2), target is {core.target.name}")
    check_operands(ins, dst, on_true_tile=on_true_tile)
    for role, op in (("comp_op0", comp_op0), ("comp_op1", comp_op1)):
        if as_op(op, ins, role, 2) not in _COMPARE:
            raise violation(ins, role, f"{op!r} must be nl.equal, nl.less, nl.less_equal, nl.greater or "
                            "nl.greater_equal")
    if as_op(reduce_op, ins, "reduce_op", 2) is not maximum:
        raise violation(ins, "reduce_op", f"{reduce_op!r}: only nl.maximum is supported")
    cmd = _reduce_cmd(ins, reduce_cmd, tuple(_cmd))
    if on_true_tile.dtype not in FLOAT_TYPES:
        raise violation(ins, "on_true_tile", f"dtype {on_true_tile.dtype} must be a floating-point dtype")
    if not is_scalar(on_false_value) or float(on_false_value) != _FP32_MIN:
        raise violation(ins, "on_false_value", f"{on_false_value!r} must be FP32_MIN (-3.4028235e+38), a "
                        "hardware constraint")
    if not isinstance(range_start, (int, np.integer)):
        raise violation(ins, "range_start", f"{range_start!r} must be a compile-time integer")
    same_partitions_and_free(ins, "on_true_tile", on_true_tile, "dst", dst)
    parts, free = on_true_tile.layout()[1:3]
    for role, b in (("bound0", bound0), ("bound1", bound1)):
        check_operands(ins, dst, **{role: b})
        _per_partition(ins, role, b, parts)
        if b.dtype != float32:
            raise violation(ins, role, f"dtype {b.dtype} must be float32")
    if reduce_res is not None:
        check_operands(ins, dst, reduce_res=reduce_res)
        _per_partition(ins, "reduce_res", reduce_res, parts)
    if cmd is _cmd.load_reduce:
        raise violation(ins, "reduce_cmd", "load_reduce has no initial-value operand in range_select")
    if not core.trace_only:
        idx = (np.arange(free, dtype=np.float64) + int(range_start)).astype(F32).reshape(1, free)
        b0, b1 = read2d(bound0).reshape(parts, 1), read2d(bound1).reshape(parts, 1)
        mask = (as_op(comp_op0, ins, "comp_op0").fn(idx, b0) != 0) & (as_op(comp_op1, ins, "comp_op1").fn(idx, b1) != 0)
        out = np.where(mask, read2d(on_true_tile), F32(_FP32_MIN)).astype(F32)
        write(dst, out)
        if cmd is not _cmd.idle:
            regs = _vector_regs(core)[dst.layout()[0]:dst.layout()[0] + parts]
            if cmd in (_cmd.reset, _cmd.reset_reduce):
                regs[...] = _IDENTITY["maximum"]
            if cmd is not _cmd.reset:
                regs[...] = np.maximum(regs, out.max(axis=1))
        if reduce_res is not None:
            write(reduce_res, _vector_regs(core)[dst.layout()[0]:dst.layout()[0] + parts].copy())
    reads = _reads(("on_true_tile", on_true_tile), ("bound0", bound0), ("bound1", bound1))
    _record_two(core, ins, reads, dst, reduce_res, (("reduce_cmd", cmd.name),))


def bn_stats(dst, data, name=None):
    """Per partition: (count, mean, variance*count) of the even and of the odd free elements."""
    core = current_core()
    ins = "bn_stats"
    check_operands(ins, dst, data=data)
    parts, free = data.layout()[1:3]
    if free > 512:
        raise violation(ins, "data", f"{free} elements per partition exceed nl.tile_size.bn_stats_fmax (512)")
    d_lay = dst.layout()
    if d_lay[1] != parts or d_lay[2] != 6:
        raise violation(ins, "dst", f"shape {dst.shape} must have {parts} partitions and 6 elements per partition")
    if not core.trace_only:
        x = read2d(data)
        out = np.zeros((parts, 6), F32)
        for k, half in enumerate((x[:, 0::2], x[:, 1::2])):
            n = half.shape[1]
            if n:
                mean = half.mean(axis=1, dtype=np.float32)
                out[:, 3 * k] = n
                out[:, 3 * k + 1] = mean
                out[:, 3 * k + 2] = ((half - mean[:, None]) ** 2).sum(axis=1, dtype=np.float32)
        write(dst, out)
    finish(core, ins, _VECTOR, (("data", data),), dst)


def bn_aggr(dst, data, name=None):
    """Combine (count, mean, variance*count) triples per partition into (mean, variance)."""
    core = current_core()
    ins = "bn_aggr"
    check_operands(ins, dst, data=data)
    parts, free = data.layout()[1:3]
    if free % 3:
        raise violation(ins, "data", f"{free} elements per partition: must be (count, mean, variance*count) "
                        "triples (a multiple of 3)")
    d_lay = dst.layout()
    if d_lay[1] != parts or d_lay[2] != 2:
        raise violation(ins, "dst", f"shape {dst.shape} must have {parts} partitions and 2 elements per partition")
    if not core.trace_only:
        t = read2d(data).reshape(parts, free // 3, 3)
        count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = count.sum(axis=1)
        safe = np.where(total > 0, total, 1)
        mu = (count * mean).sum(axis=1) / safe
        var = (m2 + count * (mean - mu[:, None]) ** 2).sum(axis=1) / safe
        write(dst, np.stack([mu, var], axis=1).astype(F32))
    finish(core, ins, _VECTOR, (("data", data),), dst)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Per 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255: unchanged)."""
    core = current_core()
    ins = "nc_stream_shuffle"
    tensor(ins, "dst", dst)
    tensor(ins, "src", src)
    on_chip(ins, "dst", dst)
    on_chip(ins, "src", src)
    if src.dtype != dst.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the src dtype {src.dtype}")
    try:
        mask = [int(m) for m in shuffle_mask]
    except (TypeError, ValueError):
        raise violation(ins, "shuffle_mask", f"{shuffle_mask!r} must be a list of 32 ints") from None
    if len(mask) != 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        raise violation(ins, "shuffle_mask", f"{mask} must be 32 entries, each 0-31 or 255 (unchanged)")
    s_lay, d_lay = src.layout(), dst.layout()
    if s_lay[2] != d_lay[2]:
        raise violation(ins, "dst", f"{d_lay[2]} elements per partition must equal the src's {s_lay[2]}")
    active = -(-max(s_lay[1], d_lay[1]) // 32) * 32
    allowed = (0,) if active > 64 else ((0, 64) if active == 64 else (0, 32, 64, 96))
    for role, lay in (("src", s_lay), ("dst", d_lay)):
        if lay[0] not in allowed:
            raise violation(ins, role, f"start partition {lay[0]} with {active} active partitions must be one of "
                            f"{allowed}")
    if not core.trace_only:
        s_parts, d_parts, free = s_lay[1], d_lay[1], s_lay[2]
        s = np.array(src.array()).reshape(s_parts, free)
        cur = np.array(dst.array()).reshape(d_parts, free)
        for p in range(d_parts):
            q, i = divmod(p, 32)
            m = mask[i]
            if m != 255 and q * 32 + m < s_parts:
                cur[p] = s[q * 32 + m]
        out_array(dst)[...] = cur.reshape(dst.shape)
    finish(core, ins, _VECTOR, (("src", src),), dst)


_cmd = reduce_cmd
