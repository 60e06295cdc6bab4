"""Top-8 search instructions (Vector engine): max8, nc_find_index8, nc_match_replace8.

Neuron docs, nki.isa.max8 / nc_find_index8 / nc_match_replace8: values are compared in fp32; the
data has 8 to 16,384 elements per partition; 8 values per partition come out.
"""
from __future__ import annotations

import numpy as np

from .context import current_core
from .errors import violation
from .isa_compute import _finish as finish
from .isa_compute import _operands as check_operands
from .isa_core import F32, access, mark_written_by_other, read2d, write
from .isa_enums import engine
from .trace import Instr

_VECTOR = engine.vector
_INDEX_TYPES = {"uint16": 0xFFFF, "uint32": 0xFFFFFFFF}


def _data_size(ins: str, role: str, t) -> tuple[int, int]:
    parts, free = t.layout()[1:3]
    if not 8 <= free <= 16384:
        raise violation(ins, role, f"{free} elements per partition: must be between 8 and 16,384")
    return parts, free


def _eight(ins: str, role: str, t, parts: int) -> None:
    lay = t.layout()
    if lay[1] != parts or lay[2] != 8:
        raise violation(ins, role, f"shape {t.shape} must have {parts} partitions and 8 elements per partition")


def max8(dst, src, name=None):
    """dst[p] = the 8 largest values of src[p], in descending order."""
    core = current_core()
    ins = "max8"
    check_operands(ins, dst, src=src)
    parts, _ = _data_size(ins, "src", src)
    _eight(ins, "dst", dst, parts)
    if not core.trace_only:
        x = read2d(src)
        write(dst, -np.sort(-x, axis=1, kind="stable")[:, :8])
    finish(core, ins, _VECTOR, (("src", src),), dst)


def _first_unused(row: np.ndarray, value: np.float32, used: set[int]) -> int | None:
    for i in np.flatnonzero(row == value):
        if int(i) not in used:
            return int(i)
    return None


def nc_find_index8(dst, data, vals, name=None):
    """dst[p, j] = index of the first occurrence of vals[p, j] in data[p] (all ones if absent).

    Equal values in vals take successive occurrences, in ascending order (the docs' contrast with
    nc_match_replace8).
    """
    core = current_core()
    ins = "nc_find_index8"
    check_operands(ins, dst, data=data, vals=vals)
    parts, _ = _data_size(ins, "data", data)
    _eight(ins, "vals", vals, parts)
    _eight(ins, "dst", dst, parts)
    if dst.dtype not in _INDEX_TYPES:
        raise violation(ins, "dst", f"dtype {dst.dtype} must be uint16 or uint32")
    if not core.trace_only:
        x, v = read2d(data), read2d(vals)
        out = np.full((parts, 8), _INDEX_TYPES[dst.dtype], np.uint64)
        for p in range(parts):
            used: set[int] = set()
            for j in range(8):
                i = _first_unused(x[p], v[p, j], used)
                if i is not None:
                    used.add(i)
                    out[p, j] = i
        dst.array()[...] = out.reshape(dst.shape).astype(dst.array().dtype)
    finish(core, ins, _VECTOR, (("data", data), ("vals", vals)), dst)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the first occurrence of each of vals[p] replaced by imm; dst_idx gets the positions.

    vals are matched in reverse order (j = 7..0), each taking the first occurrence not yet taken.
    """
    core = current_core()
    ins = "nc_match_replace8"
    check_operands(ins, dst, data=data, vals=vals)
    parts, free = _data_size(ins, "data", data)
    _eight(ins, "vals", vals, parts)
    if dst.layout()[1:3] != (parts, free):
        raise violation(ins, "dst", f"shape {dst.shape} must have data's {parts} partitions x {free} elements")
    if dst_idx is not None:
        check_operands(ins, dst, dst_idx=dst_idx)
        _eight(ins, "dst_idx", dst_idx, parts)
        if dst_idx.dtype not in _INDEX_TYPES and dst_idx.dtype not in ("int32", "float32"):
            raise violation(ins, "dst_idx", f"dtype {dst_idx.dtype} must be an index type")
    if not core.trace_only:
        x, v = read2d(data).copy(), read2d(vals)
        idx = np.zeros((parts, 8), np.int64)
        for p in range(parts):
            used: set[int] = set()
            for j in range(7, -1, -1):
                i = _first_unused(x[p], v[p, j], used)
                if i is not None:
                    used.add(i)
                    idx[p, j] = i
            x[p, sorted(used)] = F32(imm)
        write(dst, x)
        if dst_idx is not None:
            write(dst_idx, idx)
    writes = [dst] if dst_idx is None else [dst, dst_idx]
    for t in writes:
        mark_written_by_other(t)
    accesses = (access(data, "data", False), access(vals, "vals", False)) + tuple(
        access(t, role, True) for role, t in zip(("dst", "dst_idx"), writes, strict=False))
    core.record(Instr(ins, "vector", accesses, (), core.program_id))
