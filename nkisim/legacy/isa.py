"""``neuronxcc.nki.isa`` for nkisim: the earlier generation's instructions, which return a new tile.

Signatures follow the earlier API reference pages,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/generated/nki.isa.<name>.html
("relevant for Inf2, Trn1, Trn2"; e.g. ``tensor_scalar(data, op0, operand0, reverse0=False, op1=None,
operand1=None, reverse1=False, *, dtype=None, mask=None, engine=engine.unknown)``) and their examples
in the Neuron documentation source (nki/test/test_nki_isa_*.py). The later generation takes ``dst``
first instead of returning (nki/migration/index.rst, "All ISA functions require a destination
parameter"). Arithmetic is done in fp32, as in the rest of nkisim.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NkiValidationError, violation  # noqa: F401 - nisa.NkiValidationError
from ..isa_enums import dge_mode, engine, nc_version, oob_mode, reduce_cmd
from ..targets import target_from_env
from .ops import elementwise, reducer
from .tile import (
    IndexedAccess,
    LegacyTile,
    align,
    carry_mask,
    cast,
    compute_dtype,
    storage_dtype,
    value_array,
)

vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
tensor_engine = engine.tensor
unknown_engine = engine.unknown

_PMAX = 128


def _tile(values: np.ndarray, dtype: Any, default: np.dtype, buffer: str = "sbuf", name: str = "",
          mask: Any = None) -> LegacyTile:
    out_dt = storage_dtype(dtype) if dtype is not None else default
    return carry_mask(LegacyTile(cast(np.asarray(values), np.dtype(out_dt)), buffer, name), mask)


def _data(x: Any, instruction: str, operand: str, mask: Any) -> np.ndarray:
    if not isinstance(x, (LegacyTile, IndexedAccess)):
        raise violation(instruction, operand, f"must be a tile, got {type(x).__name__}")
    if x.buffer not in ("sbuf", "psum"):
        raise violation(instruction, operand, f"must be an on-chip tile (SBUF or PSUM), got one in {x.buffer}")
    a = value_array(x, mask)
    if a.ndim and a.shape[0] > _PMAX:
        raise violation(instruction, operand, f"partition dimension {a.shape[0]} exceeds 128")
    return a


def _scalar_or_vector(value: Any, data: np.ndarray, instruction: str, operand: str, mask: Any) -> np.ndarray:
    """A number, or a (P, 1) tile applied along the free dims of ``data``."""
    if isinstance(value, (int, float, np.number)):
        return np.float32(value)
    a = value_array(value, mask).astype(np.float32)
    if a.size != data.shape[0] and a.size != 1:
        raise violation(instruction, operand, f"must be a number or a ({data.shape[0]}, 1) tile, got shape {a.shape}")
    return a.reshape((a.size,) + (1,) * (data.ndim - 1)) if data.ndim else a.reshape(())


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32)


def nc_matmul(stationary: Any, moving: Any, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position: Any = (), tile_size: Any = (), mask: Any = None,
              **kwargs: Any) -> LegacyTile:
    """``stationary.T @ moving`` on the TensorE: a new fp32 PSUM tile (K <= 128, M <= 128, N <= 512).

    Page generated/nki.isa.nc_matmul.html (v2.21): inputs must be SBUF tiles, the result is a PSUM tile,
    accumulation and results are fp32.
    """
    s = _data(stationary, "nc_matmul", "stationary", mask)
    m = _data(moving, "nc_matmul", "moving", mask)
    for role, t in (("stationary", stationary), ("moving", moving)):
        if t.buffer != "sbuf":
            raise violation("nc_matmul", role, f"must be an SBUF tile, got one in {t.buffer}")
    s2 = s.reshape(s.shape[0], -1)
    m2 = m.reshape(m.shape[0], -1)
    if s2.shape[0] != m2.shape[0]:
        raise violation("nc_matmul", "moving", f"contraction (partition) sizes differ: stationary {s2.shape[0]}, "
                        f"moving {m2.shape[0]}")
    if s2.shape[1] > 128:
        raise violation("nc_matmul", "stationary", f"free size {s2.shape[1]} exceeds 128 (gemm_stationary_fmax)")
    if m2.shape[1] > 512:
        raise violation("nc_matmul", "moving", f"free size {m2.shape[1]} exceeds 512 (gemm_moving_fmax)")
    if is_transpose:
        return _tile(s2.T, None, s.dtype, "psum", getattr(stationary, "name", ""))
    out = np.matmul(_f32(s2).T, _f32(m2))
    return _tile(out, None, np.dtype(np.float32), "psum", getattr(stationary, "name", ""))


def nc_transpose(data: Any, *, mask: Any = None, dtype: Any = None, engine: engine = engine.unknown,
                 **kwargs: Any) -> LegacyTile:
    """The 2-D tile transposed: TensorE (<= 128x128, into PSUM) or VectorE (<= 32x32, into SBUF)."""
    a = _data(data, "nc_transpose", "data", mask)
    if a.ndim != 2:
        raise violation("nc_transpose", "data", f"must be a 2-D tile, got shape {a.shape}")
    use_vector = engine == vector_engine or (engine == unknown_engine and a.shape[0] <= 32 and a.shape[1] <= 32)
    limit = 32 if use_vector else 128
    if a.shape[0] > limit or a.shape[1] > limit:
        raise violation("nc_transpose", "data", f"shape {a.shape} exceeds {limit}x{limit} on "
                        f"{'VectorE' if use_vector else 'TensorE'}")
    return _tile(a.T, dtype, a.dtype, "sbuf" if use_vector else "psum", getattr(data, "name", ""))


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, *, reduce_op: Any = None,
               reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle, mask: Any = None,
               dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``op(data * scale + bias)`` on the ScalarE; with ``reduce_res``, its free-axis reduction lands there."""
    a = _data(data, "activation", "data", mask)
    fn = elementwise(op, "activation")
    x = _f32(a) * _scalar_or_vector(scale, a, "activation", "scale", mask)
    if bias is not None:
        x = x + _scalar_or_vector(bias, a, "activation", "bias", mask)
    with np.errstate(all="ignore"):
        res = np.asarray(fn(x.astype(np.float32)), dtype=np.float32)
    if reduce_res is not None:
        _write_reduction(res, reduce_op or op, reduce_res, "activation", mask)
    return _tile(res, dtype, a.dtype if dtype is None else None, mask=mask, name=getattr(data, "name", ""))


def activation_reduce(op: Any, data: Any, *, reduce_op: Any, reduce_res: Any, bias: Any = None, scale: Any = 1.0,
                      mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    return activation(op, data, bias, scale, reduce_op=reduce_op, reduce_res=reduce_res, mask=mask, dtype=dtype)


def _write_reduction(res: np.ndarray, op: Any, target: Any, instruction: str, mask: Any) -> None:
    red = reducer(op, instruction)
    axes = tuple(range(1, res.ndim))
    values = red(res, axis=axes, keepdims=False) if axes else res
    if isinstance(target, IndexedAccess):
        target.write(LegacyTile(values.astype(np.float32), "sbuf"), mask)
    elif isinstance(target, LegacyTile):
        target.assign(LegacyTile(values.astype(np.float32), "sbuf"))
    else:
        raise violation(instruction, "reduce_res", f"must be a tile, got {type(target).__name__}")


def tensor_tensor(data1: Any, data2: Any, op: Any, *, dtype: Any = None, mask: Any = None,
                  engine: engine = engine.unknown, **kwargs: Any) -> LegacyTile:
    a = _data(data1, "tensor_tensor", "data1", mask)
    b = _data(data2, "tensor_tensor", "data2", mask)
    if data1.buffer == "psum" and data2.buffer == "psum":
        raise violation("tensor_tensor", "data2", "data1 and data2 cannot both be in PSUM")
    fn = elementwise(op, "tensor_tensor")
    x, y = align(a, b)
    if x.dtype.kind not in "iu" or y.dtype.kind not in "iu":
        x, y = _f32(x), _f32(y)
    try:
        with np.errstate(all="ignore"):
            res = fn(x, y)
    except ValueError:
        raise violation("tensor_tensor", "data2", f"shape {b.shape} does not match data1 {a.shape}") from None
    return _tile(res, dtype, compute_dtype(a, b), mask=mask, name=getattr(data1, "name", ""))


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, *, dtype: Any = None, mask: Any = None, engine: engine = engine.unknown,
                  **kwargs: Any) -> LegacyTile:
    """``(data <op0> operand0) <op1> operand1``; operands are numbers or (P, 1) tiles."""
    a = _data(data, "tensor_scalar", "data", mask)
    res = _apply(elementwise(op0, "tensor_scalar", "op0"), _f32(a),
                 _scalar_or_vector(operand0, a, "tensor_scalar", "operand0", mask), reverse0)
    if op1 is not None:
        res = _apply(elementwise(op1, "tensor_scalar", "op1"), res,
                     _scalar_or_vector(operand1, a, "tensor_scalar", "operand1", mask), reverse1)
    return _tile(res, dtype, a.dtype, mask=mask, name=getattr(data, "name", ""))


def _apply(fn: Any, x: np.ndarray, operand: np.ndarray, reverse: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(fn(operand, x) if reverse else fn(x, operand), dtype=np.float32)


def tensor_scalar_reduce(*, data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any,
                         reverse0: bool = False, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """``tensor_scalar`` with one op, and its free-axis reduction written into ``reduce_res``."""
    a = _data(data, "tensor_scalar_reduce", "data", mask)
    res = _apply(elementwise(op0, "tensor_scalar_reduce", "op0"), _f32(a),
                 _scalar_or_vector(operand0, a, "tensor_scalar_reduce", "operand0", mask), reverse0)
    _write_reduction(res, reduce_op, reduce_res, "tensor_scalar_reduce", mask)
    return _tile(res, dtype, a.dtype, mask=mask, name=getattr(data, "name", ""))


def scalar_tensor_tensor(*, data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool = False,
                         reverse1: bool = False, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """``(data <op0> operand0) <op1> operand1`` with operand0 a number or (P, 1) tile, operand1 a tile like data."""
    a = _data(data, "scalar_tensor_tensor", "data", mask)
    b = _data(operand1, "scalar_tensor_tensor", "operand1", mask)
    tmp = _apply(elementwise(op0, "scalar_tensor_tensor", "op0"), _f32(a),
                 _scalar_or_vector(operand0, a, "scalar_tensor_tensor", "operand0", mask), reverse0)
    x, y = align(tmp, _f32(b))
    res = _apply(elementwise(op1, "scalar_tensor_tensor", "op1"), x, y, reverse1)
    return _tile(res, dtype, a.dtype, mask=mask, name=getattr(data, "name", ""))


def tensor_reduce(op: Any, data: Any, axis: Any, *, mask: Any = None, dtype: Any = None, negate: bool = False,
                  keepdims: bool = False, **kwargs: Any) -> LegacyTile:
    """``op`` over the free ``axis`` (int or list) of ``data``; ``negate`` negates the result."""
    a = _data(data, "tensor_reduce", "data", mask)
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    axes = tuple(int(x) % a.ndim for x in axes)
    if 0 in axes:
        raise violation("tensor_reduce", "axis", f"{axis!r} includes the partition axis 0")
    work = a if a.dtype.kind in "iu" else _f32(a)
    res = reducer(op, "tensor_reduce")(work, axis=axes, keepdims=keepdims)
    if negate:
        res = -res
    out = _tile(res, dtype, a.dtype, name=getattr(data, "name", ""))
    return carry_mask(out, mask, a.shape, axes, keepdims)


def tensor_copy(src: Any, *, mask: Any = None, dtype: Any = None, engine: engine = engine.unknown,
                **kwargs: Any) -> LegacyTile:
    a = _data(src, "tensor_copy", "src", mask)
    return _tile(np.array(a), dtype, a.dtype, mask=mask, name=getattr(src, "name", ""))


def reciprocal(data: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    a = _data(data, "reciprocal", "data", mask)
    with np.errstate(all="ignore"):
        res = np.reciprocal(_f32(a))
    return _tile(res, dtype, a.dtype, mask=mask, name=getattr(data, "name", ""))


def tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """Along the free axis: ``r[i] = (data0[i] <op0> r[i-1]) <op1> data1[i]``, with ``r[-1] = initial``."""
    a = _f32(_data(data0, "tensor_tensor_scan", "data0", mask))
    b = _f32(_data(data1, "tensor_tensor_scan", "data1", mask))
    if a.shape != b.shape or a.ndim != 2:
        raise violation("tensor_tensor_scan", "data1", f"data0 {a.shape} and data1 {b.shape} must be equal 2-D tiles")
    if data0.buffer == "psum" and data1.buffer == "psum":
        raise violation("tensor_tensor_scan", "data1", "data0 and data1 cannot both be in PSUM")
    f0 = elementwise(op0, "tensor_tensor_scan", "op0")
    f1 = elementwise(op1, "tensor_tensor_scan", "op1")
    prev = np.broadcast_to(_scalar_or_vector(initial, a, "tensor_tensor_scan", "initial", mask),
                           (a.shape[0], 1))[:, 0].astype(np.float32)
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        t = _apply(f0, a[:, i], prev, reverse0)
        prev = _apply(f1, t, b[:, i], reverse1)
        out[:, i] = prev
    return _tile(out, dtype, value_array(data0).dtype, mask=mask, name=getattr(data0, "name", ""))


def iota(expr: Any, dtype: Any, *, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """The values of an index expression (index tiles combined affinely) as a tile."""
    arr = np.asarray(expr)
    if arr.dtype.kind not in "iu":
        raise violation("iota", "expr", "must be an index expression built from nl.arange / nl.mgrid")
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    return _tile(arr, dtype, np.dtype(np.int32))


def memset(shape: Any, value: Any, dtype: Any, *, mask: Any = None, engine: engine = engine.unknown,
           **kwargs: Any) -> LegacyTile:
    from .language import full

    return full(shape, value, dtype)


def affine_select(pred: Any, on_true_tile: Any, on_false_value: Any, *, dtype: Any = None, mask: Any = None,
                  **kwargs: Any) -> LegacyTile:
    """``on_true_tile`` where the index expression ``pred`` holds, else the number ``on_false_value``.

    Example: nki/test/test_nki_isa_affine_select.py (``pred=(iy < ix)`` keeps the lower triangle).
    """
    p = np.asarray(pred)
    if p.dtype != np.bool_:
        raise violation("affine_select", "pred", "must be a comparison of index expressions (nl.arange/nl.mgrid)")
    if not isinstance(on_false_value, (int, float, np.number)):
        raise violation("affine_select", "on_false_value", f"must be a number, got {type(on_false_value).__name__}")
    a = _data(on_true_tile, "affine_select", "on_true_tile", mask)
    p2, a2 = align(p, a)
    res = np.where(p2, a2.astype(np.float32), np.float32(on_false_value))
    return _tile(res, dtype, a.dtype, mask=mask, name=getattr(on_true_tile, "name", ""))


def tensor_partition_reduce(op: Any, data: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``op`` over the partition axis: a (1, free...) tile (example: nki/test/test_nki_isa_partition_reduce.py)."""
    a = _data(data, "tensor_partition_reduce", "data", mask)
    work = a if a.dtype.kind in "iu" else _f32(a)
    res = reducer(op, "tensor_partition_reduce")(work, axis=(0,), keepdims=True)
    return _tile(res, dtype, a.dtype, name=getattr(data, "name", ""))


def dma_copy(*, dst: Any, src: Any, mask: Any = None, dst_rmw_op: Any = None, oob_mode: oob_mode = oob_mode.error,
             dge_mode: dge_mode = dge_mode.unknown, **kwargs: Any) -> None:
    """Copy ``src`` into ``dst`` (``dst = dst_rmw_op(dst, src)`` with a read-modify-write op); returns nothing.

    Examples: nki/test/test_nki_isa_dma_copy.py. Indirect (data-dependent) indices are not emulated;
    ``oob_mode`` and ``dge_mode`` are accepted and have no effect on static accesses.
    """
    from .ops import elementwise

    for role, t in (("dst", dst), ("src", src)):
        if not isinstance(t, (LegacyTile, IndexedAccess)):
            raise violation("dma_copy", role, f"must be a tensor, got {type(t).__name__}")
        if t.buffer == "psum":
            raise violation("dma_copy", role, "DMA cannot access PSUM")
    value: Any = src
    if dst_rmw_op is not None:
        fn = elementwise(dst_rmw_op, "dma_copy", "dst_rmw_op")
        old = value_array(dst, mask).astype(np.float32)
        value = LegacyTile(np.asarray(fn(old, value_array(src, mask).astype(np.float32))), "sbuf")
    if isinstance(dst, IndexedAccess):
        dst.write(value, mask)
    else:
        dst.assign(value, mask)


def get_nc_version() -> nc_version:
    return nc_version[target_from_env().nc_version]


__all__ = [n for n in dir() if not n.startswith("_")]
