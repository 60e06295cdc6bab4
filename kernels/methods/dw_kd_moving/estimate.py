"""dw with the kd taps on the moving axis: budget check and time estimate from the spec's pools and work list.

Pure Python. Every instruction of ``spec.work_list`` is charged with the planner's cost figures
(``kernels/costs.py``): TensorE per matmul, VectorE/ScalarE per copy, DMA copies by contiguous run and
``dma_transpose`` by whole [128 partitions x 16 elements] destination blocks (as nkisim charges them).
The section is one pipeline (``section_ns``) plus the head the PE waits for (the first chunk's dy^T
and first x^T) and the tail after the last matmul (the casts and stores of dw).
"""
from __future__ import annotations

from conv3d_bwd.nkisim.cost import TARGETS as COST_TARGETS
from conv3d_bwd.nkisim.dge import hwdge_transpose_violation

from ...costs import CostSheet, TargetFigures, section_ns
from ...geometry import ConvGeom, ceil_div
from ..common import pool_check
from . import spec

BLOCK_PARTITIONS = 128   # dma_transpose block (nkisim.cost: trn2 arch guide "DMA Transpose")
BLOCK_ELEMS = 16


def check(g: ConvGeom, lnc: int, target: str, hw: TargetFigures, fixed_sbuf: int = 0
          ) -> tuple[str, int, int, dict[str, int]]:
    """(reason or '', SBUF bytes per partition, PSUM banks, SBUF bytes by pool); ``fixed_sbuf``: what
    the kernel holds beside dw while it runs."""
    why = spec.applies(g, lnc, target)
    parts = spec.sbuf_parts(g, lnc)
    sbuf = sum(parts.values()) + fixed_sbuf
    psum = spec.psum_banks(g) + spec.PSUM_TRANSPOSE_BANKS
    return pool_check("dw:kd_moving", why, parts, sbuf, psum, hw)


def transpose_parts(hw: TargetFigures, dims: tuple, dtype_bytes: int) -> tuple[float, float, str]:
    """(occupancy ns, issue ns, queue) of one dma_transpose whose destination is ``dims`` = (partitions,
    outer, inner): its whole blocks at the transpose efficiency; nkisim routes a transpose to a hardware
    DGE queue only in the hwdge form (src [inner, outer, partitions]), else to the static queue."""
    p, outer, inner = dims
    blocks = ceil_div(p, BLOCK_PARTITIONS) * outer * ceil_div(inner, BLOCK_ELEMS)
    nbytes = blocks * BLOCK_PARTITIONS * BLOCK_ELEMS * dtype_bytes
    figures = COST_TARGETS[hw.name]
    hwdge = figures.hwdge_queues and hwdge_transpose_violation((inner, outer, p), dtype_bytes) is None
    issue, queue = (figures.hwdge_issue_ns, "hwdge") if hwdge else (figures.static_issue_ns, "static")
    return nbytes / (hw.dma_bytes_per_ns * hw.dma_transpose_efficiency), issue, queue


def transpose_ns(hw: TargetFigures, dims: tuple, dtype_bytes: int) -> float:
    """One dma_transpose alone: its occupancy, at least its queue's issue time."""
    occupancy, issue, _queue = transpose_parts(hw, dims, dtype_bytes)
    return max(occupancy, issue)


def charge(c: CostSheet, w: spec.Work, dtype_bytes: int, queues: dict[str, float]) -> None:
    """Add ``w.count`` instructions of one kind to the sheet: DMA busy time is the transfers' occupancy,
    and ``queues`` collects each DMA queue's issue time (a queue issues in order, the transfers of
    different queues overlap)."""
    two_byte = dtype_bytes == 2
    if w.engine == "tensor":
        _k, m, n = w.dims
        c.matmul(m, n, dtype_bytes == 4, w.count, op=w.op)
    elif w.op == "dma_transpose":
        occupancy, issue, queue = transpose_parts(c.hw, w.dims, dtype_bytes)
        c.busy["dma"] += w.count * occupancy
        queues[queue] = queues.get(queue, 0.0) + w.count * issue
        c.count(w.op, w.count)
    elif w.engine == "dma":   # dma_copy, sendrecv
        nbytes, run = w.dims
        c.busy["dma"] += w.count * nbytes / (c.hw.dma_bytes_per_ns * c.hw.descriptor_efficiency(run))
        queues[w.op] = queues.get(w.op, 0.0) + w.count * c.hw.dma_issue_ns
        c.count(w.op, w.count)
    elif w.engine == "evict":   # PSUM -> SBUF cast, alternated VectorE / ScalarE (the kernel's Evictor)
        c.evict(w.dims[1], two_byte, w.count)
    elif w.op == "tensor_tensor":
        c.compute(w.engine, w.dims[1], 2, 1.0, w.count, op=w.op)
    else:   # memset, fp32 PSUM -> SBUF copies
        c.compute(w.engine, w.dims[1], 1, 1.0, w.count, op=w.op)


def sheet(g: ConvGeom, hw: TargetFigures, lnc: int = 1, pid: int = 0) -> CostSheet:
    c = CostSheet(hw)
    queues: dict[str, float] = {}
    for w in spec.work_list(g, lnc, pid):
        charge(c, w, g.dtype_bytes, queues)
    c.busy["dma"] = max(c.busy["dma"], *queues.values()) if queues else c.busy["dma"]
    return c


def _head_ns(g: ConvGeom, hw: TargetFigures, lnc: int = 1, pid: int = 0) -> float:
    """Before the first matmul: the first chunk's dy^T (every slot) and its kh = 0 x^T, one start latency."""
    mine = spec.program_chunks(g, lnc, pid)
    if not mine:
        return hw.dma_fixed_ns
    c = mine[0]
    ds = g.dtype_bytes
    ns = 0.0
    for kd in range(g.axes[0].k):
        for r in spec.dyt_runs(g, c, kd):
            ns += transpose_ns(hw, (r.rows, g.axes[2].o, g.c_out), ds) if r.src_row >= 0 else hw.dma_issue_ns
    c0, c1 = spec.x_col_range(g)
    for r in spec.xt_runs(g, c, 0):
        ns += transpose_ns(hw, (r.rows, c1 - c0, g.c_in), ds) if r.src_row >= 0 else hw.dma_issue_ns
    return hw.dma_fixed_ns + ns


def _tail_ns(g: ConvGeom, hw: TargetFigures) -> float:
    """After the last matmul: its bank's cast and K_d stores."""
    n = spec.kw_groups(g)[-1][1] * g.c_in
    c = CostSheet(hw)
    c.evict(g.axes[0].k * g.c_out, g.dtype_bytes == 2, 2)
    nbytes = n * g.c_out * g.dtype_bytes
    return hw.dma_fixed_ns + c.busy["vector"] + max(g.axes[0].k * nbytes / hw.dma_bytes_per_ns, hw.dma_issue_ns)


def overlap_us(g: ConvGeom, hw: TargetFigures, lnc: int = 1) -> float:
    """How long the next section's first loads (issued after dw's last instructions) can run under dw's
    end: dw's last chunk's matmuls (its transfers are done by then) and its tail."""
    mine = spec.program_chunks(g, lnc, 0)
    per_chunk = sheet(g, hw, lnc, 0).busy["tensor"] / max(1, len(mine))
    return (per_chunk + _tail_ns(g, hw)) / 1000.0


def estimate_us(g: ConvGeom, hw: TargetFigures, lnc: int = 1) -> tuple[float, dict[str, float]]:
    """Modelled time of dw alone (the slower program's) and program 0's busy time per engine, in us.
    LNC2: the exchange is a rendezvous, so a program's tail starts after the slower one's matmuls."""
    sheets = [sheet(g, hw, lnc, pid) for pid in range(lnc)]
    body = max(_head_ns(g, hw, lnc, pid) + section_ns(c.busy) for pid, c in enumerate(sheets))
    total = body + _tail_ns(g, hw)
    return total / 1000.0, {e: v / 1000.0 for e, v in sheets[0].busy.items()}
