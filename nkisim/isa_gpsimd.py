"""GpSimd-engine instructions: gathers, the partition reduction and nonzero_with_count.

Neuron docs, nki.isa.nc_n_gather / local_gather / tensor_partition_reduce / nonzero_with_count
(local_gather's semantics follow the numpy reference of the docs' example,
nki/test/test_nki_isa_local_gather.py). GpSimd never touches PSUM.
"""
from __future__ import annotations

import numpy as np

from .context import current_core
from .errors import violation
from .isa_compute import _finish as finish
from .isa_compute import _operands as check_operands
from .isa_core import F32, buffer_in, is_scalar, out_array, read2d, write
from .isa_enums import engine
from .memory import SBUF
from .ops import as_op

_GPSIMD = engine.gpsimd
_SBUF = frozenset({SBUF})


def _sbuf(ins: str, **tiles) -> None:
    for role, t in tiles.items():
        buffer_in(ins, role, t, _SBUF, "SBUF (GpSimd cannot access PSUM)")


def nc_n_gather(dst, data, indices, name=None):
    """dst[p, j] = data[p].flat[indices[p, j]] (a gather within each partition)."""
    core = current_core()
    ins = "nc_n_gather"
    check_operands(ins, dst, data=data, indices=indices)
    _sbuf(ins, dst=dst, data=data, indices=indices)
    if dst.dtype != data.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the data dtype {data.dtype}")
    if indices.dtype != "uint32":
        raise violation(ins, "indices", f"dtype {indices.dtype} must be uint32")
    parts, n_data = data.layout()[1:3]
    i_lay, d_lay = indices.layout(), dst.layout()
    if i_lay[1] != parts or d_lay[1] != parts:
        raise violation(ins, "indices", f"partitions of data ({parts}), indices ({i_lay[1]}) and dst ({d_lay[1]}) "
                        "must be equal")
    if d_lay[2] != i_lay[2]:
        raise violation(ins, "dst", f"{d_lay[2]} elements per partition must equal the indices' {i_lay[2]}")
    if not core.trace_only:
        idx = indices.array().reshape(parts, i_lay[2]).astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n_data):
            raise violation(ins, "indices", f"values must be in [0, {n_data}), got [{idx.min()}, {idx.max()}]")
        src = np.array(data.array()).reshape(parts, n_data)
        out_array(dst)[...] = np.take_along_axis(src, idx, axis=1).reshape(dst.shape)
    finish(core, ins, _GPSIMD, (("data", data), ("indices", indices)), dst)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Per 16-partition GpSimd core: the core's indices (flattened partition-first) select runs of
    ``num_elem_per_idx`` elements (index = element offset in the partition row) from each of its
    partitions of src_buffer."""
    core = current_core()
    ins = "local_gather"
    check_operands(ins, dst, src_buffer=src_buffer, index=index)
    _sbuf(ins, dst=dst, src_buffer=src_buffer, index=index)
    if index.dtype != "uint16":
        raise violation(ins, "index", f"dtype {index.dtype} must be uint16")
    if dst.dtype != src_buffer.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the src_buffer dtype {src_buffer.dtype} (no "
                        "casting)")
    parts, row = src_buffer.layout()[1:3]
    i_parts, i_free = index.layout()[1:3]
    if i_parts != parts or parts % 16:
        raise violation(ins, "index", f"{i_parts} partitions must equal src_buffer's {parts}, a multiple of 16")
    if num_elem_per_idx not in (1, 2, 4, 8, 16, 32):
        raise violation(ins, "num_elem_per_idx", f"{num_elem_per_idx!r} must be 1, 2, 4, 8, 16 or 32")
    per_core = 16 * i_free
    n = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < n <= per_core:
        raise violation(ins, "num_valid_indices", f"{num_valid_indices!r} must be in [1, {per_core}] (the indices "
                        "of one 16-partition slice)")
    if n > 4096:
        raise violation(ins, "index", f"{n} indices per core exceed 4096")
    if dst.layout()[1:3] != (parts, n * num_elem_per_idx):
        raise violation(ins, "dst", f"shape {dst.shape} must have {parts} partitions x {n * num_elem_per_idx} "
                        "elements")
    if not core.trace_only:
        src = np.array(src_buffer.array()).reshape(parts, row)
        idx = index.array().reshape(parts, i_free).astype(np.int64)
        out = np.empty((parts, n, num_elem_per_idx), src.dtype)
        offsets = np.arange(num_elem_per_idx)
        for c in range(parts // 16):
            flat = idx[16 * c:16 * c + 16].flatten(order="F")[:n]
            cols = flat[:, None] + offsets[None, :]
            if cols.size and (cols.min() < 0 or cols.max() >= row):
                raise violation(ins, "index", f"an index reaches element {cols.max()} outside the {row} elements of "
                                "a partition (undefined on hardware)")
            out[16 * c:16 * c + 16] = src[16 * c:16 * c + 16][:, cols]
        out_array(dst)[...] = out.reshape(dst.shape)
    finish(core, ins, _GPSIMD, (("src_buffer", src_buffer), ("index", index)), dst)


_PARTITION_REDUCE = ("add", "average", "maximum", "bitwise_or", "bitwise_and")


def tensor_partition_reduce(dst, op, data, name=None):
    """dst[0] = op over the partitions of data (one output partition)."""
    core = current_core()
    ins = "tensor_partition_reduce"
    check_operands(ins, dst, data=data)
    _sbuf(ins, dst=dst, data=data)
    op = as_op(op, ins, "op", 2)
    if op.name not in _PARTITION_REDUCE:
        raise violation(ins, "op", f"{op!r} must be nl.add, nl.average, nl.maximum, nl.bitwise_or or nl.bitwise_and")
    parts, free = data.layout()[1:3]
    if dst.layout()[1:3] != (1, free):
        raise violation(ins, "dst", f"shape {dst.shape} must be one partition of {free} elements")
    if not core.trace_only:
        if op.bitwise:
            x = data.array().reshape(parts, free).astype(np.int64)
            write(dst, op.reduce(x, axis=0))
        else:
            write(dst, np.asarray(op.reduce(read2d(data), axis=0), F32))
    finish(core, ins, _GPSIMD, (("data", data),), dst, (("op", op.name),))


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """On partitions 0, 16, ..., 112: the indices (+ index_offset) of src's nonzeros, padding_val,
    then the count; other partitions of dst are untouched (NC-v3+)."""
    core = current_core()
    ins = "nonzero_with_count"
    if core.target.generation < 3:
        raise violation(ins, "dst", f"nonzero_with_count needs NC-v3+ (trn2), target is {core.target.name}")
    check_operands(ins, dst, src=src)
    _sbuf(ins, dst=dst, src=src)
    if src.dtype not in ("float32", "int32"):
        raise violation(ins, "src", f"dtype {src.dtype} must be float32 or int32")
    if dst.dtype != "int32":
        raise violation(ins, "dst", f"dtype {dst.dtype} must be int32")
    for role, v in (("index_offset", index_offset), ("padding_val", padding_val)):
        if not is_scalar(v) or int(v) != v or not -2**31 <= int(v) < 2**31:
            raise violation(ins, role, f"{v!r} must be an int32 number")
    p0, parts, free = src.layout()[:3]
    d_p0, d_parts, d_free = dst.layout()[:3]
    if d_parts != parts or d_p0 != p0:
        raise violation(ins, "dst", f"partitions {d_p0}..{d_p0 + d_parts - 1} must be src's {p0}..{p0 + parts - 1}")
    if d_free != free + 1:
        raise violation(ins, "dst", f"{d_free} elements per partition must be src's {free} + 1 (for the count)")
    if not core.trace_only:
        x = np.array(src.array()).reshape(parts, free)
        cur = np.array(dst.array()).reshape(parts, d_free)
        for r in range(parts):
            if (p0 + r) % 16:
                continue   # each GpSimd core reads and writes its partition 0 only
            nz = np.flatnonzero(x[r] != 0)
            row = np.full(d_free, int(padding_val), np.int64)
            row[:nz.size] = nz + int(index_offset)
            row[-1] = nz.size
            cur[r] = row
        out_array(dst)[...] = cur.reshape(dst.shape)
    finish(core, ins, _GPSIMD, (("src", src),), dst)
