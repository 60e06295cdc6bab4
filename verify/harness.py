"""Run one case: inputs, oracle on the same rounded inputs, kernel, metrics per gradient, records.

``run_case(case, backend, mode, seed, target)`` is the single entry the CLI, the report and the
pytest suites share. ``CaseResult.to_records()`` gives one JSON-ready dict per gradient with every
field of the report (``verify/report``).
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

from conv3d_bwd.reference.tolerance import (
    C_DEFAULT,
    ErrorMetrics,
    compute_metrics,
    format_failure,
)
from conv3d_bwd.verify.backends import (
    BackendUnavailable,
    backend_unavailable_reason,
    run_kernel,
    tool_versions,
)
from conv3d_bwd.verify.cases import GRADS, Case
from conv3d_bwd.verify.check import Reference, oracle_reference
from conv3d_bwd.verify.inputs import MODES, InputSet, make_input_set
from conv3d_bwd.verify.performance import efficiency_fields

RECORD_SCHEMA = 1


@dataclass(frozen=True)
class GradResult:
    """One gradient's comparison: its largest accumulation length, metrics and verdict."""

    name: str
    K_max: int
    metrics: ErrorMetrics
    passed: bool
    K_structural: int = 0  # terms the geometry allows (all inputs nonzero); K_max counts nonzero ones


@dataclass(frozen=True)
class CaseResult:
    """One case on one backend in one mode. ``error`` holds the kernel's exception text when it
    raised (then ``grads`` is empty and the case failed)."""

    case: Case
    backend: str
    mode: str
    seed: int
    plan: dict | None
    methods: tuple[str, ...]
    grads: dict[str, GradResult]
    modelled_us: float | None
    passed: bool
    error: str | None = None
    modelled_band_us: tuple[float, float] | None = None   # the cost model's band (nkisim only)
    target: str = "trn2"
    backend_version: str = ""
    tool_versions: dict[str, str] = field(default_factory=dict)
    input_distribution: str = ""
    input_density: float = 1.0
    timings: dict[str, float] = field(default_factory=dict)
    plan_error: str | None = None
    summary: dict = field(default_factory=dict)  # the cost model's figures (nkisim), else empty
    timeline: str | None = None  # the modelled-schedule file written for this run, if any

    @property
    def status(self) -> str:
        if not self.passed:
            return "FAIL"
        return "MISTRUSTED" if any(g.metrics.mistrusted for g in self.grads.values()) else "PASS"

    def failure_message(self) -> str:
        """Every failing gradient's numpy.testing-style message (or the kernel error)."""
        if self.error:
            return f"{self.case.id}: kernel run failed: {self.error}"
        return "\n\n".join(format_failure(g.metrics, f"{self.case.id} {g.name}")
                           for g in self.grads.values() if not g.passed)

    def grad_methods(self, grad: str) -> list[str]:
        """The plan's methods that concern one gradient (its own, plus the shared strategy)."""
        return [m for m in self.methods if m.startswith((f"{grad}:", "strategy:"))]

    def to_records(self) -> list[dict]:
        """One JSON-ready dict per requested gradient (an error record per gradient if it crashed)."""
        base = {
            "schema": RECORD_SCHEMA,
            "case_id": self.case.id,
            "case_name": self.case.name,
            "group": self.case.group,
            "geometry": self.case.to_dict(),
            "dtype": self.case.dtype,
            "lnc": self.case.lnc,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "tool_versions": dict(self.tool_versions),
            "target": self.target,
            "mode": self.mode,
            "seed": self.seed,
            "input_distribution": self.input_distribution,
            "input_density": self.input_density,
            "plan": self.plan,
            "plan_error": self.plan_error,
            "modelled_us": self.modelled_us,
            "performance": {**performance_fields(self.summary),
                            **efficiency_fields(self.case, self.target, self.modelled_us)},
            "timeline": self.timeline,
            "modelled_band_us": list(self.modelled_band_us) if self.modelled_band_us else None,
            "timings_s": dict(self.timings),
            "tolerance_c": C_DEFAULT,
            "error": self.error,
        }
        records = []
        for grad in self.case.grads:
            result = self.grads.get(grad)
            record = {**base, "grad": grad, "methods": self.grad_methods(grad)}
            if result is None:
                record.update(K=None, K_structural=None, passed=False, status="FAIL", metrics=None)
            else:
                record.update(K=result.K_max, K_structural=result.K_structural,
                              passed=result.passed, status=result.metrics.status,
                              metrics=result.metrics.to_dict())
            records.append(record)
        return records


PERFORMANCE_FIELDS = ("modelled_us", "modelled_us_low", "modelled_us_high", "tensor_util", "flops_util",
                      "matmul_flops", "hbm_read_bytes", "hbm_write_bytes", "instructions", "measured_us")


def performance_fields(summary: dict | None) -> dict:
    """The cost-model figures a report shows per case: those of PERFORMANCE_FIELDS the summary has,
    and the modelled time's uncertainty band (``Summary.band_us``) as ``modelled_band_us``."""
    summary = summary or {}
    chosen = {k: summary[k] for k in PERFORMANCE_FIELDS if k in summary}
    if summary.get("band_us"):
        chosen["modelled_band_us"] = [float(v) for v in summary["band_us"]]
    return chosen


def reference_for(case: Case, inputs: InputSet) -> Reference:
    """The oracle's values, magnitudes S and K per element on exactly the kernel's inputs."""
    return oracle_reference(*inputs.as_tuple(), stride=case.stride, padding=case.padding,
                            dilation=case.dilation, grads=case.grads)


def plan_for(case: Case, target: str = "trn2") -> tuple[dict | None, tuple[str, ...], str | None]:
    """(plan dict without the candidate list, chosen methods, error text) from kernels.plan."""
    try:
        from conv3d_bwd.kernels.plan import plan_conv3d_bwd
    except ImportError as exc:
        return None, (), f"kernels.plan does not import: {exc}"
    try:
        plan = plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, stride=case.stride,
                               padding=case.padding, dilation=case.dilation, dtype=case.dtype,
                               target=target, lnc=case.lnc, compute_dx="dx" in case.grads,
                               compute_dw="dw" in case.grads, compute_db="db" in case.grads)
    except Exception as exc:  # noqa: BLE001 - a planner failure is reported with the case
        return None, (), f"{type(exc).__name__}: {exc}"
    as_dict = dict(plan.to_dict())
    as_dict.pop("candidates", None)  # `conv3d-bwd plan` shows them; records stay small
    return as_dict, tuple(sorted(plan.methods())), None


def run_case(case: Case, backend: str | None = None, mode: str = "exact", seed: int = 0,
             target: str = "trn2", dry: bool = False, capture_errors: bool = False,
             timeline: str | None = None) -> CaseResult:
    """Run the case on the backend against the oracle and judge every requested gradient.

    mode: "exact" (integer inputs, bit equality) or "stat" (normal inputs, per-element bound).
    capture_errors: record a kernel exception in ``CaseResult.error`` (the report does) instead of
    raising it (tests want the traceback).
    timeline: a path for the modelled schedule (Chrome trace-event JSON; nkisim backend only).
    """
    from conv3d_bwd.verify.backends import resolve_backend

    if mode not in MODES:
        from conv3d_bwd.verify.inputs import InputModeError

        raise InputModeError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    backend = resolve_backend(backend)
    # Before planning: importing kernels binds nkisim under 'nki' when the real package is absent,
    # and the reason it is absent is clearer before that.
    missing = backend_unavailable_reason(backend, dry)
    if missing:
        raise BackendUnavailable(missing)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    inputs = make_input_set(case, mode, seed)
    timings["inputs"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    plan, methods, plan_error = plan_for(case, target)
    timings["plan"] = time.perf_counter() - t0

    common = {"case": case, "backend": backend, "mode": mode, "seed": seed, "plan": plan,
              "methods": methods, "target": target, "input_distribution": inputs.distribution,
              "input_density": inputs.density, "plan_error": plan_error}
    t0 = time.perf_counter()
    try:
        run = run_kernel(case, *inputs.as_tuple(), backend=backend, target=target, dry=dry,
                         timeline=timeline)
    except Exception as exc:
        if not capture_errors:
            raise
        timings["kernel"] = time.perf_counter() - t0
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
        return CaseResult(**common, grads={}, modelled_us=None, passed=False,
                          error=f"{type(exc).__name__}: {exc}{where}",
                          tool_versions=tool_versions(backend), timings=timings)
    timings["kernel"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ref = reference_for(case, inputs)
    timings["oracle"] = time.perf_counter() - t0

    grads = {}
    for name in case.grads:
        metrics = compute_metrics(run.outputs[name], ref.values[name], ref.magnitudes[name],
                                  ref.k_elem[name], dtype=case.dtype, mode=mode,
                                  reachable=ref.reachable[name])
        grads[name] = GradResult(name, metrics.k_max, metrics, metrics.passed,
                                 ref.k_structural.get(name, 0))
    modelled = (run.summary or {}).get("modelled_us")
    band = (run.summary or {}).get("band_us")
    return CaseResult(**common, grads=grads,
                      modelled_us=None if modelled is None else float(modelled),
                      modelled_band_us=None if not band else (float(band[0]), float(band[1])),
                      passed=all(g.passed for g in grads.values()),
                      backend_version=run.backend_version, tool_versions=run.tool_versions,
                      timings=timings, summary=dict(run.summary or {}), timeline=run.timeline)


__all__ = ["GRADS", "CaseResult", "GradResult", "Reference", "plan_for", "reference_for", "run_case"]
