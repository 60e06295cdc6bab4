"""The space-to-depth GEMM method's budget check and time estimate, from its spec's pools and work list.

Pure Python. Every instruction of ``spec.work_list`` is charged with the planner's cost figures
(``kernels/costs.py``: TensorE, VectorE/ScalarE, DMA by contiguous run); the program is one pipelined
section (``section_ns``) plus the head the PE waits for before its first matmul (the filters' rows and
the first row tile's dy) and the tail after its last one (the last stores).
"""
from __future__ import annotations

from ...costs import CostSheet, TargetFigures, section_ns
from ...geometry import ConvGeom
from ..common import pool_check
from . import spec


def check(g: ConvGeom, opts: spec.S2dOptions, lnc: int, flags: tuple[bool, bool, bool],
          hw: TargetFigures) -> tuple[str, int, int, dict[str, int]]:
    """(reason or '', SBUF bytes per partition, PSUM banks, SBUF bytes by pool)."""
    why = spec.applies(g)
    parts = spec.sbuf_parts(g, opts, lnc, *flags)
    sbuf = sum(parts.values())
    psum = sum(spec.psum_budget(g, flags[0], flags[1]).values())
    return pool_check("s2d_gemm", why, parts, sbuf, psum, hw)


def charge(c: CostSheet, w: spec.Work, dtype_bytes: int) -> None:
    """Add ``w.count`` instructions of one kind to the sheet (operands in a ``dtype_bytes`` dtype)."""
    two_byte = dtype_bytes == 2
    if w.engine == "tensor":   # fp32 operands take four PE passes
        _k, m, n = w.dims
        c.matmul(m, n, dtype_bytes == 4, w.count, op=w.op)
    elif w.engine == "dma":
        nbytes, run = w.dims
        c.dma(nbytes, run, w.count)
    elif w.engine == "evict":   # PSUM -> SBUF, alternated VectorE / ScalarE (the body's Evictor)
        _p, n, _psum, contiguous = w.dims
        c.evict(n, two_byte, w.count, contiguous)
    elif w.engine == "evict_sbuf":   # fp32 SBUF -> output dtype, alternated likewise
        _p, n, _psum, contiguous = w.dims
        for engine in ("vector", "scalar"):
            c.compute(engine, n, 1, c.copy_speedup(engine, two_byte, False, contiguous), w.count / 2.0)
    elif w.op == "tensor_tensor":
        n = w.dims[1]
        c.compute("vector", n, 2, 1.0, w.count, op=w.op)
    elif w.op == "tensor_copy":   # fp32 PSUM -> fp32 SBUF on VectorE
        c.compute("vector", w.dims[1], 1, 1.0, w.count, op=w.op)
    else:   # tensor_reduce, memset
        c.compute(w.engine, w.dims[1], 1, 1.0, w.count, op=w.op)


def program_sheet(g: ConvGeom, opts: spec.S2dOptions, lnc: int, pid: int, flags: tuple[bool, bool, bool],
                  hw: TargetFigures) -> CostSheet:
    """Busy time per engine of program ``pid``."""
    c = CostSheet(hw)
    for w in spec.work_list(g, opts, lnc, pid, *flags):
        charge(c, w, g.dtype_bytes)
    return c


def _head_ns(g: ConvGeom, lnc: int, pid: int, flags: tuple[bool, bool, bool], hw: TargetFigures) -> float:
    """What the PE waits for before it can run on: its first transposes wait for the first bank's worth
    of filter rows (or dy's first C_out tile); dx's first matmul for every filter row and the first row
    tile's dy, less the transposes (W^T, dy^T) the PE does while those land; one DMA start latency."""
    ds = g.dtype_bytes
    first = spec.row_tiles(g)[0]
    npos = first.rows * g.axes[2].o
    loads, pe = CostSheet(hw), CostSheet(hw)
    start = CostSheet(hw)
    if flags[0]:
        chunks = spec.dw_chunks(g, lnc, pid)
        pack = spec.bank_packs([spec.chunk_size(g, c) for c in chunks], spec.transpose_bank(g))
        for i, ch in enumerate(chunks):
            m = spec.chunk_size(g, ch)
            loads.dma(m * g.c_out * ds, g.c_out * ds)
            if pack and i in pack[0]:
                start.dma(m * g.c_out * ds, g.c_out * ds)
            for _c0, cs in spec.co_tiles(g):
                pe.transpose(m, cs, ds == 4)
    for k, (_c0, cs) in enumerate(spec.co_tiles(g)):
        loads.dma(cs * npos * ds, npos * ds)
        if not flags[0] and k == 0:
            start.dma(cs * npos * ds, npos * ds)
        if flags[1]:
            pe.transpose(cs, first.rows, ds == 4, g.axes[2].o)
    wait = max(start.busy["dma"], loads.busy["dma"] - pe.busy["tensor"])
    return hw.dma_fixed_ns + wait


def _tail_ns(g: ConvGeom, flags: tuple[bool, bool, bool], hw: TargetFigures) -> float:
    """After the last matmul: its eviction and the last store (a dw row chunk, else a dx plane)."""
    ds = g.dtype_bytes
    c = CostSheet(hw)
    last = spec.row_tiles(g)[-1]
    if flags[1]:
        c.dma(spec.PMAX * g.c_out * ds, g.c_out * ds)
    elif flags[0]:
        c.dma(last.rows * g.axes[1].k * g.axes[2].n * ds, g.axes[1].k * g.axes[2].n * ds)
    return hw.dma_fixed_ns + c.busy["dma"]


def estimate_us(g: ConvGeom, opts: spec.S2dOptions, lnc: int, flags: tuple[bool, bool, bool],
                hw: TargetFigures) -> tuple[float, dict[str, float]]:
    """Modelled time (the slower program's) and program 0's busy time per engine, in us."""
    total, busy0 = 0.0, None
    for pid in range(lnc):
        c = program_sheet(g, opts, lnc, pid, flags, hw)
        if busy0 is None:
            busy0 = dict(c.busy)
        if not any(c.busy.values()):
            continue
        total = max(total, _head_ns(g, lnc, pid, flags, hw) + section_ns(c.busy) + _tail_ns(g, flags, hw))
    return total / 1000.0, {e: v / 1000.0 for e, v in (busy0 or {}).items()}
