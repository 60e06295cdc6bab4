"""Helpers the kernel suites share (simtests/kernels, hwtests, the Hypothesis sweep).

They turn a ``verify.cases.Case`` into pytest parameters with readable ids, a reproducible
``conv3d-bwd check`` command line, JUnit properties, and one assertion message that says per
gradient how far the kernel is from the oracle.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

MODES = ("exact", "stat")
# The seed per mode of the named matrix (simtests and hwtests). Inputs are a function of
# (case, mode, seed); in stat mode odd seeds draw the non-zero-mean distribution (x >= 0 like ReLU
# activations, dy with mean 0.25), whose partial sums grow like K: the harder regime for the bound.
MODE_SEEDS = {"exact": 0, "stat": 1}
GRAD_ORDER = ("dx", "dw", "db")


def case_param(case, *marks, allow_fast: bool = True) -> Any:
    """``pytest.param`` for one case: id = case.id, marker ``fast`` when the case says so."""
    all_marks = list(marks)
    if allow_fast and getattr(case, "fast", False):
        all_marks.append(pytest.mark.fast)
    return pytest.param(case, id=case.id, marks=all_marks)


def _csv(values: Iterable[object]) -> str:
    return ",".join(str(v) for v in values)


def repro_command(case, mode: str, seed: int, backend: str = "nkisim") -> str:
    """The ``conv3d-bwd check`` command line that reruns exactly this case."""
    return " ".join(
        [
            "conv3d-bwd check",
            f"--batch {case.batch}",
            f"--channels {case.c_in},{case.c_out}",
            f"--input {_csv(case.input)}",
            f"--kernel {_csv(case.kernel)}",
            f"--stride {_csv(case.stride)}",
            f"--padding {_csv(case.padding)}",
            f"--dilation {_csv(case.dilation)}",
            f"--dtype {case.dtype}",
            f"--grads {_csv(case.grads)}",
            f"--lnc {case.lnc}",
            f"--mode {mode}",
            f"--seed {seed}",
            f"--backend {backend}",
        ]
    )


def plan_methods(plan: Mapping[str, Any] | None) -> str:
    """The methods of a plan dict as one sorted comma-separated string (JUnit property)."""
    if not plan:
        return ""
    methods = plan.get("methods")
    if isinstance(methods, Mapping):
        return ",".join(f"{k}:{v}" for k, v in sorted(methods.items()))
    if isinstance(methods, (list, tuple, set, frozenset)):
        return ",".join(sorted(str(m) for m in methods))
    strategy = plan.get("strategy")
    return str(strategy) if strategy is not None else ""


def _reported_grads(result):
    """(name, GradResult) of each gradient the result reports, in GRAD_ORDER."""
    return [(name, result.grads[name]) for name in GRAD_ORDER if name in result.grads]


def case_properties(result) -> dict[str, Any]:
    """JUnit properties of one CaseResult: headline numbers per gradient, plan, backend, mode."""
    props: dict[str, Any] = {
        "case": result.case.id,
        "backend": result.backend,
        "mode": result.mode,
        "passed": bool(result.passed),
        "plan": ",".join(result.methods) if result.methods else plan_methods(result.plan),
    }
    if result.modelled_us is not None:
        props["modelled_us"] = float(result.modelled_us)
    worst_ratio = 0.0
    for name, grad in _reported_grads(result):
        props[f"{name}_K"] = int(grad.K_max)
        m = grad.metrics
        props[f"{name}_max_abs_err"] = float(m.max_abs)
        props[f"{name}_bound_ratio"] = float(m.bound_ratio)
        props[f"{name}_max_ulp"] = int(m.max_ulp)
        props[f"{name}_status"] = m.status
        if math.isfinite(m.bound_ratio):
            worst_ratio = max(worst_ratio, float(m.bound_ratio))
    props["max_bound_ratio"] = worst_ratio
    return props


def describe_result(result, seed: int) -> str:
    """Multi-line summary of a CaseResult for assertion messages, ending with the repro command."""
    lines = [f"case {result.case.id} on {result.backend}, mode {result.mode}, seed {seed}"]
    lines.append(f"  plan: {','.join(result.methods) or plan_methods(result.plan)}")
    if result.plan_error:
        lines.append(f"  planner error: {result.plan_error}")
    for name, grad in _reported_grads(result):
        m = grad.metrics
        lines.append(
            f"  {name}: {m.status}  K={grad.K_max}  max_abs_err={m.max_abs:.6g}"
            f"  bound_ratio={m.bound_ratio:.6g}  max_ulp={m.max_ulp}  mismatches={m.mismatches}"
            f"  NaN/Inf unexpected={m.unexpected_nonfinite}  zero_share={m.zero_share:.1%}"
        )
        if m.reason:
            lines.append(f"      {m.reason}; worst at {m.worst_index}: got {m.worst_got!r},"
                         f" ref {m.worst_ref!r}, bound {m.worst_bound:.6g}")
    lines.append("reproduce: " + repro_command(result.case, result.mode, seed, result.backend))
    return "\n".join(lines)


def case_failures(result) -> list[str]:
    """Why a CaseResult is not acceptable ([] when it is).

    Both modes: every requested gradient present and passed, none extra, no unexpected NaN.
    Exact mode additionally: bit-exact, i.e. max abs error 0 and max ULP 0 (checked here on the raw
    metrics, not only through the harness' pass flag).
    """
    failures = []
    if getattr(result, "error", None):
        failures.append(f"kernel run failed: {result.error}")
    requested = set(result.case.grads)
    got = set(result.grads)
    if got != requested:
        failures.append(f"gradients reported {sorted(got)} != requested {sorted(requested)}")
    for name, grad in _reported_grads(result):
        m = grad.metrics
        if not (grad.passed and m.passed):
            failures.append(f"{name}: {m.reason or 'the harness reports a failure'}")
        if m.unexpected_nonfinite:
            failures.append(f"{name}: {m.unexpected_nonfinite} NaN/Inf the oracle does not have")
        if m.mode != result.mode:
            failures.append(f"{name}: compared in mode {m.mode}, expected {result.mode}")
        if result.mode == "exact" and (m.max_abs != 0.0 or m.mismatches or m.max_ulp):
            failures.append(
                f"{name}: exact mode is not bit-exact (max_abs_err={m.max_abs}, "
                f"mismatches={m.mismatches}, max_ulp={m.max_ulp})"
            )
    if not result.passed and not failures:
        failures.append("the harness reports the case failed")
    return failures


def run_case_checked(case, backend: str, mode: str, seed: int):
    """``verify.harness.run_case``; an emulator rule violation fails the test with its message."""
    from conv3d_bwd.verify.backends import BackendUnavailable
    from conv3d_bwd.verify.harness import run_case

    try:
        from conv3d_bwd.nkisim import NkiValidationError
    except ImportError:  # real toolchain without nkisim: nothing of ours can fire
        NkiValidationError = ()  # type: ignore[assignment]
    try:
        return run_case(case, backend=backend, mode=mode, seed=seed)
    except BackendUnavailable as exc:  # a prerequisite of this one case, e.g. the device's LNC setting
        pytest.skip(str(exc))
    except NkiValidationError as exc:  # type: ignore[misc]
        pytest.fail(
            f"emulator rule fired on {case.id} ({mode}): {exc}\n"
            f"reproduce: {repro_command(case, mode, seed, backend)}",
            pytrace=False,
        )


def assert_case_ok(result, seed: int) -> None:
    failures = case_failures(result)
    assert not failures, "; ".join(failures) + "\n" + describe_result(result, seed)
