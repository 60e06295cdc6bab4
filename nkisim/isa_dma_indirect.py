"""The DMA instructions' indirect (``.ap(vector_offset=)``) forms: gather and scatter ``dma_copy``,
read-modify-write ``dma_compute`` and the gather ``dma_transpose``.

Neuron docs: ``nki.isa.dma_copy`` ("Indirect addressing"), ``nki.isa.dma_compute`` ("Read-Modify-Write
with vector_offset"), ``nki.isa.dma_transpose`` ("DMA Indirect Transpose Constraints") and the DGE
reference (``nki/deep-dives/nki-dge.rst``). The views themselves are ``nkisim/tensor_indirect.py``'s.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .dtypes import ITEMSIZE
from .errors import NkiUsageError, violation
from .isa_core import F32, access, for_int_dtype, write
from .isa_enums import oob_mode as _oob_mode
from .tensor_indirect import IndirectView, check_indirect_dma, row_mask
from .trace import Instr


def indirect_operands(ins: str, operands: tuple, dge_mode: object, core: object) -> list[tuple[str, IndirectView]]:
    """The operands that are vector_offset views, checked (one per instruction, software DGE, NC-v3+)."""
    found = [(role, t) for role, t in operands if isinstance(t, IndirectView)]
    for role, t in found:
        check_indirect_dma(ins, role, t, dge_mode, core.target.generation)
        if ins != "dma_transpose" and t.indices.layout()[1] != t.rows:
            raise violation(ins, role, f"vector_offset has {t.indices.layout()[1]} partitions for {t.rows} rows: "
                            "one index per partition (nki.isa.dma_copy, 'Indirect addressing')")
    return found


def index_reads(indirect: list) -> tuple:
    """Trace records of the index tensors: read by the descriptor generator, so they order the DMA after
    their writers, but move no data through the DMA queue (no bytes, no contiguous run)."""
    return tuple(replace(access(t.indices, "vector_offset", False), nbytes=0, contiguous_bytes=0)
                 for _, t in indirect)


def indirect_copy(ins: str, dst, src, skip: bool) -> None:
    """Gather (src indirect) or scatter (dst indirect); rows out of bounds raise, or are skipped."""
    if isinstance(src, IndirectView) and isinstance(dst, IndirectView):
        raise NkiUsageError(f"{ins}: vector_offset on both dst and src is not emulated by nkisim")
    if isinstance(src, IndirectView):
        addresses = src.addresses()
        keep = row_mask(ins, "src", src, addresses, skip)
        values = src.gather(addresses)
        if src.dtype != dst.dtype:
            values = values.astype(F32)   # DMA casts through fp32
        write(dst, _keep_rows(values, keep, dst.array))
    else:
        addresses = dst.addresses()
        keep = row_mask(ins, "dst", dst, addresses, skip)
        values = src.array()
        if src.dtype != dst.dtype:
            values = values.astype(F32)
        dst.scatter(addresses, for_int_dtype(dst.dtype, values).astype(dst.storage.np_dtype), keep)


def _keep_rows(values: np.ndarray, keep: np.ndarray, held: Callable[[], np.ndarray]) -> np.ndarray:
    """``values`` with the skipped rows replaced by what the destination holds there (``held()``, in the
    source's row order): a skipped row writes nothing."""
    if keep.all():
        return values
    rows = np.array(values).reshape(keep.size, -1)
    current = np.asarray(held()).astype(rows.dtype).reshape(keep.size, -1)
    rows[~keep] = current[~keep]
    return rows


def indirect_transpose_rules(src: IndirectView) -> None:
    """nki.isa.dma_transpose page, "DMA Indirect Transpose Constraints" (the trn2+ and DGE ones are
    indirect_operands')."""
    ins = "dma_transpose"
    idx = src.indices
    shape = src.shape
    rules = (
        (len(shape) == 4 and shape[1] != 1 and shape[2] != 1, "src", f"4-D shape {shape}: shape[1] or [2] must be 1"),
        (shape[-1] > 128, "src", f"shape {shape}: shape[-1] must be <= 128"),
        (ITEMSIZE[src.dtype] != 2, "src", f"dtype {src.dtype}: the indirect transpose needs a 2-byte dtype"),
        (shape[0] % 16 != 0, "src", f"shape {shape}: shape[0] must be a multiple of 16"),
        (len(idx.shape) != 2, "vector_offset", f"indices shape {idx.shape} must be 2-d"),
        (idx.dtype != "uint32", "vector_offset", f"indices dtype {idx.dtype} must be uint32"),
        (not (16 <= idx.shape[0] <= 128 and idx.shape[0] % 16 == 0), "vector_offset",
         f"indices shape {idx.shape}: shape[0] must be in [16, 128] and a multiple of 16"),
        (len(idx.shape) == 2 and idx.shape[1] > 1 and idx.shape[0] != 128, "vector_offset",
         f"indices shape {idx.shape}: with more than one column, shape[0] must be 128"),
    )
    for broken, role, rule in rules:
        if broken:
            raise violation(ins, role, rule)


def indirect_transpose(dst, src: IndirectView, axes: tuple[int, ...], dge_mode, oob_mode, core) -> None:
    """The software-DGE gather transpose: ``dst = src[indices.T.flatten()[:src.shape[0]], ...]`` permuted by
    ``axes`` (already checked against the shapes)."""
    ins = "dma_transpose"
    indirect = indirect_operands(ins, (("src", src),), dge_mode, core)
    if not core.trace_only:
        addresses = src.addresses()
        keep = row_mask(ins, "src", src, addresses, oob_mode is _oob_mode.skip)
        values = src.gather(addresses)
        if not keep.all():   # skipped rows keep what dst holds there (dst read back in src's order)
            def held():
                return np.transpose(dst.array(), np.argsort(axes))
            values = _keep_rows(values, keep, held).reshape(src.shape)
        write(dst, np.transpose(values, axes))
    core.record(Instr(ins, "dma", (access(src, "src", False), access(dst, "dst", True), *index_reads(indirect)),
                      (("dge_mode", "swdge"), ("axes", axes)), core.program_id))


def rmw_rules(ins: str, srcs, scales, unique_indices, reduce_op) -> None:
    """nki.isa.dma_compute, "Read-Modify-Write with vector_offset": exactly 2 sources, all scales 1.0,
    unique indices."""
    if len(srcs) != 2:
        raise violation(ins, "srcs", f"{len(srcs)} sources: a vector_offset read-modify-write takes exactly 2")
    if scales is not None and any(float(x) != 1.0 for x in scales):
        raise violation(ins, "scales", f"{scales!r}: a vector_offset read-modify-write needs all scales 1.0")
    if unique_indices is not True:
        raise violation(ins, "unique_indices", "must be True with vector_offset (non-unique indices are not "
                        "supported)")


def indirect_compute(ins: str, dst, srcs, op, indirect: list, skip: bool) -> None:
    """Gather or scatter read-modify-write: rows are the indirect operands' (all of the same count)."""
    rows = {t.rows for _, t in indirect}
    if len(rows) != 1:
        raise violation(ins, indirect[1][0], f"the vector_offset operands index {sorted(rows)} rows: they must agree")
    keep = None
    addresses = {}
    for role, t in indirect:
        addresses[id(t)] = a = t.addresses()
        k = row_mask(ins, role, t, a, skip)
        keep = k if keep is None else keep & k
    acc = None
    for s in srcs:
        v = s.gather(addresses[id(s)]) if isinstance(s, IndirectView) else s.array()
        v = np.asarray(v).astype(F32).reshape(-1)
        acc = v if acc is None else op.fn(acc, v)
    if isinstance(dst, IndirectView):
        rows, counts = np.unique(dst.row_indices()[keep], return_counts=True)
        if (counts > 1).any():
            # the docs' unique_indices=True promise: repeated rows would race in the scatter
            raise violation(ins, "unique_indices", f"True, but the vector_offset of 'dst' repeats row(s) "
                            f"{rows[counts > 1].tolist()}")
        dst.scatter(addresses[id(dst)], for_int_dtype(dst.dtype, acc).astype(dst.storage.np_dtype), keep)
    else:
        write(dst, _keep_rows(acc, keep, dst.array))
