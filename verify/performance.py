"""Per-case performance figures for the report: roofline time and efficiency of a modelled run.

The roofline of a case is ``max(useful FLOPs / TensorE peak, compulsory bytes / DMA bandwidth)``
over the case's cores, as in ``verify.bench``, counted for the gradients the case asks for:
dx and dw each ``2 B C_in C_out prod(out) prod(kernel)`` FLOPs (db is a sum, negligible); dy is
read always, x only for dw, the filters only for dx; each requested gradient is written once.
Efficiency is roofline / modelled time (1.0 = at the roofline).
"""
from __future__ import annotations

import math

from conv3d_bwd.verify.bench import DTYPE_BYTES
from conv3d_bwd.verify.cases import Case


def useful_flops(case: Case) -> int:
    """The matmul FLOPs dx and dw need (whichever the case asks for)."""
    per_grad = 2 * case.batch * case.c_in * case.c_out * case.positions * case.taps
    return per_grad * sum(g in case.grads for g in ("dx", "dw"))


def compulsory_bytes(case: Case) -> int:
    """Bytes every schedule must move between HBM and the chip for the requested gradients."""
    reads = [case.dy_shape]
    if "dw" in case.grads:
        reads.append(case.x_shape)
    if "dx" in case.grads:
        reads.append(case.w_shape)
    writes = [case.grad_shapes[g] for g in case.grads]
    return sum(math.prod(s) for s in (*reads, *writes)) * DTYPE_BYTES[case.dtype]


def roofline_us(case: Case, target: str) -> float:
    """The case's roofline time on ``target`` with ``case.lnc`` cores, in us."""
    from conv3d_bwd.nkisim.cost import get_target

    hw = get_target(target)
    peak = hw.tensor_peak_flops(fp32=case.dtype == "fp32") * case.lnc
    bandwidth = hw.dma_bytes_per_ns * 1e9 * case.lnc
    return max(useful_flops(case) / peak, compulsory_bytes(case) / bandwidth) * 1e6


def efficiency_fields(case: Case, target: str, modelled_us: float | None) -> dict:
    """{"roofline_us", "efficiency"} for a modelled time (efficiency None without one)."""
    try:
        roof = roofline_us(case, target)
    except (ImportError, KeyError, ValueError):  # an unknown target or no cost model: no figure
        return {}
    efficiency = roof / modelled_us if modelled_us else None
    return {"roofline_us": roof, "efficiency": efficiency}
