"""One case on a NeuronCore: compare with the oracle, check determinism, record latency.

``dry=True`` passes through to ``verify.backends.run_kernel(..., backend="trn", dry=True)``, which
swaps only the device call for nkisim; everything else here (timing, determinism, the oracle
comparison, the latency record) runs the same, so the default CPU suite tests this code.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwtests.latency import LatencyLog

HW_BACKEND = "trn"


@dataclass(frozen=True)
class HwCaseOutcome:
    """What one case did on the device."""

    metrics: dict[str, Any]          # gradient name -> reference.tolerance.ErrorMetrics
    deterministic: bool              # every run gave the same bytes as the first
    differing: dict[str, int]        # gradient name -> bytes that differed in some run
    record: dict[str, Any]           # the latency record written to the JSON file


def plan_for_case(case):
    """The plan the kernel makes for ``case`` (the planner is deterministic and pure Python)."""
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    return plan_conv3d_bwd(
        case.dy_shape, case.x_shape, case.w_shape,
        stride=case.stride, padding=case.padding, dilation=case.dilation,
        dtype=case.dtype, lnc=case.lnc,
        compute_dx="dx" in case.grads, compute_dw="dw" in case.grads, compute_db="db" in case.grads,
    )


def _planner_estimate(case) -> tuple[float | None, str]:
    """The planner's estimated time (us) and its methods for this case."""
    plan = plan_for_case(case)
    estimate = plan.to_dict().get("estimated_us")
    return (float(estimate) if estimate is not None else None), ",".join(sorted(plan.methods()))


def compare_with_oracle(case, mode: str, inputs, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """ErrorMetrics per requested gradient, judged exactly as ``verify.harness.run_case`` judges."""
    from conv3d_bwd.reference.tolerance import compute_metrics
    from conv3d_bwd.verify.harness import reference_for

    ref = reference_for(case, inputs)
    return {
        name: compute_metrics(outputs[name], ref.values[name], ref.magnitudes[name], ref.k_elem[name],
                              dtype=case.dtype, mode=mode, reachable=ref.reachable[name])
        for name in case.grads
    }


def run_hw_case(case, mode: str, seed: int, log: LatencyLog, *, dry: bool = False,
                timed_runs: int = 3) -> HwCaseOutcome:
    """Run ``case`` 1 + ``timed_runs`` times on the device (or dry), record latency, return outcome.

    The first run includes compilation and is not timed; every later run must give the first run's
    bytes. Latency is the host wall time of the device call (``KernelRun.wall_s``, transfers
    included), recorded, never asserted.
    """
    from conv3d_bwd.verify.backends import run_kernel
    from conv3d_bwd.verify.inputs import make_input_set

    if timed_runs < 1:
        raise ValueError(f"timed_runs={timed_runs}: must be >= 1 (determinism needs two runs)")
    inputs = make_input_set(case, mode, seed)
    dy, x, w = inputs.as_tuple()
    first = run_kernel(case, dy, x, w, HW_BACKEND, dry=dry)
    wall_us = []
    differing = {name: 0 for name in case.grads}
    for _ in range(timed_runs):
        again = run_kernel(case, dy, x, w, HW_BACKEND, dry=dry)
        wall_us.append(again.wall_s * 1e6)  # the device call only, not input preparation
        for name in case.grads:
            a, b = np.asarray(first.outputs[name]), np.asarray(again.outputs[name])
            if a.shape != b.shape or a.dtype != b.dtype:
                differing[name] += a.nbytes
            else:
                differing[name] += int(np.count_nonzero(a.view(np.uint8) != b.view(np.uint8)))
    metrics = compare_with_oracle(case, mode, inputs, first.outputs)
    estimate_us, methods = _planner_estimate(case)
    summary = first.summary or {}
    record = {
        "case": case.id,
        "backend": HW_BACKEND,
        "dry": dry,
        "mode": mode,
        "seed": seed,
        "wall_us_median": statistics.median(wall_us),
        "wall_us_min": min(wall_us),
        "timed_runs": timed_runs,
        "planner_estimate_us": estimate_us,
        # nkisim's modelled time exists in dry runs; on a device the planner's estimate is the model.
        "modelled_us": float(summary["modelled_us"]) if "modelled_us" in summary else None,
        "backend_version": first.backend_version,
        "plan": methods,
        "deterministic": not any(differing.values()),
        "passed": all(m.passed for m in metrics.values()),
    }
    log.add(record)
    return HwCaseOutcome(metrics=metrics, deterministic=record["deterministic"], differing=differing,
                         record=record)
