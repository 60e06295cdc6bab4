"""The small-extent dw method's budget check and cost, from its spec's pools and work list.

Pure Python. Every instruction of ``spec.work_list`` is charged with the planner's cost figures
(``kernels/costs.py``: TensorE, VectorE/ScalarE, DMA by contiguous run); the planner composes the result
as the plan's dw section (dw runs first, dx after it), plus the head the PE waits for before its first
transpose (the first dy tile's load) and the tail after its last matmul (the last store).
"""
from __future__ import annotations

from ...costs import CostSheet, TargetFigures
from ...geometry import ConvGeom
from . import spec


def check(g: ConvGeom, lnc: int, compute_db: bool, hw: TargetFigures, psum_free: int) -> tuple[str, int, int, dict]:
    """(reason or '', SBUF bytes per partition, PSUM banks, SBUF bytes by pool); ``psum_free``: the
    banks the kernel's other live pools leave."""
    why = spec.applies(g)
    parts = spec.sbuf_parts(g, lnc, compute_db)
    sbuf = sum(parts.values())
    psum = spec.psum_peak(compute_db)
    if why:
        return f"dw:small_extent: {why}", sbuf, psum, parts
    if sbuf > hw.sbuf_usable:
        big = max(parts.items(), key=lambda kv: kv[1])
        return (f"dw:small_extent: SBUF {sbuf} B per partition exceeds {hw.sbuf_usable} B usable "
                f"(largest: {big[0]} {big[1]} B)"), sbuf, psum, parts
    if psum > psum_free:
        return f"dw:small_extent: PSUM {psum} banks exceed the {psum_free} free", sbuf, psum, parts
    return "", sbuf, psum, parts


def charge(c: CostSheet, w: spec.Work, dtype_bytes: int) -> None:
    """Add ``w.count`` instructions of one kind to the sheet (operands in a ``dtype_bytes`` dtype)."""
    fp32 = dtype_bytes == 4
    if w.engine == "tensor":
        _k, m, n = w.dims
        c.matmul(m, n, fp32, w.count, op=w.op)
    elif w.engine == "dma":
        nbytes, run, _partitions = w.dims
        c.dma(nbytes, run, w.count)
    elif w.engine == "evict":   # PSUM -> SBUF in the input dtype, alternated VectorE / ScalarE
        _p, n = w.dims
        c.evict(n, not fp32, w.count)
    else:   # memsets, GpSimd placement of staged x
        c.compute(w.engine, w.dims[1], 1, 1.0, w.count, op=w.op)


def program_sheet(g: ConvGeom, lnc: int, pid: int, compute_db: bool, hw: TargetFigures) -> CostSheet:
    """Busy time per engine of program ``pid``'s dw (and folded db)."""
    c = CostSheet(hw)
    for w in spec.work_list(g, lnc, pid, compute_db):
        charge(c, w, g.dtype_bytes)
    return c


def flow_steps(g: ConvGeom, lnc: int, pid: int, compute_db: bool,
               hw: TargetFigures) -> list[tuple[list[tuple[float, int]], float, float]]:
    """The body as a DMA -> PE flow shop (``costs.flow_shop_ns``): the head's loads then its PE work (dy^T,
    db), then per x^T group its PE work and the stores it completes. The head's x is a chain before the
    first x^T transposes: the zeroed box's memsets (GpSimd) before its loads, its staged placement (GpSimd)
    after them, beside the dy^T transposes. The later compute engines overlap the PE (x^T two groups
    ahead, three accumulators, six store tiles); the stall share covers them."""
    out = []
    for k, step in enumerate(spec.work_steps(g, lnc, pid, compute_db)):
        sheet, zero, place = CostSheet(hw), CostSheet(hw), CostSheet(hw)
        for w in step:
            if w.engine != "dma":
                head_gpsimd = k == 0 and w.engine == "gpsimd"
                charge(sheet if not head_gpsimd else zero if w.op == "memset" else place, w, g.dtype_bytes)
        loads, stores = CostSheet(hw), CostSheet(hw)
        for w in step:
            if w.engine == "dma":
                charge(loads if k == 0 else stores, w, g.dtype_bytes)
        if k == 0:
            out.append(([(zero.busy["gpsimd"] + loads.busy["dma"], 0)],
                        max(sheet.busy["tensor"], place.busy["gpsimd"]), 0.0))
            continue
        out.append(([], sheet.busy["tensor"], stores.busy["dma"]))
    return out


def head_ns(g: ConvGeom, hw: TargetFigures) -> float:
    """Before the first PE transpose: the first C_out tile of dy (one DMA over every sample)."""
    od, oh, ow = g.out_size
    c = CostSheet(hw)
    cw = spec.co_tiles(g)[0][1]
    c.dma(cw * g.batch * od * oh * ow * g.dtype_bytes, od * oh * ow * g.dtype_bytes)
    return hw.dma_fixed_ns + c.busy["dma"]


def tail_ns(g: ConvGeom, lnc: int, pid: int, hw: TargetFigures) -> float:
    """After the last matmul: the last store unit's DMA."""
    cs = spec.chunks(g, lnc, pid)
    if not cs:
        return 0.0
    last = spec.stores(cs)[-1]
    m = cs[last[0]].m
    c = CostSheet(hw)
    c.dma(len(last) * m * g.c_out * g.dtype_bytes, g.c_out * g.dtype_bytes)
    return hw.dma_fixed_ns + c.busy["dma"]
