"""Judge a kernel result against the float64 oracle in one call.

``check_against_oracle(outputs, dy, x_in, filters, ...)`` runs the oracle on the very inputs the
kernel read, computes the per-element bound ``4 sqrt(K) u_fp32 sum|a||b| + ulp_out(ref)`` (stat
mode) or requires bit equality (exact mode, for integer inputs whose partial sums are exact), and
returns an ``OracleCheck`` with each gradient's error, bound ratio and verdict. The harness
(``verify.harness.run_case``) judges its cases with the same ``oracle_reference``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from conv3d_bwd.reference.tolerance import (
    ErrorMetrics,
    ToleranceArgumentError,
    accumulation_lengths,
    compute_metrics,
    dtype_info,
    format_failure,
    oracle_gradients,
)

GRAD_ORDER = ("dx", "dw", "db")
MODES = ("exact", "stat")


class OracleCheckError(ValueError):
    """A bad argument to check_against_oracle (names the argument and the rule)."""


@dataclass(frozen=True)
class Reference:
    """What the oracle side computes for one problem: values, magnitudes S, K per element,
    reachability (elements at least one term reaches) and the structural K (all inputs nonzero)."""

    values: dict[str, np.ndarray]
    magnitudes: dict[str, np.ndarray]
    k_elem: dict[str, np.ndarray]
    reachable: dict[str, np.ndarray]
    k_structural: dict[str, int] = field(default_factory=dict)


def oracle_reference(dy: np.ndarray, x_in: np.ndarray, filters: np.ndarray,
                     stride: Sequence[int] = (1, 1, 1), padding: Sequence[int] = (0,) * 6,
                     dilation: Sequence[int] = (1, 1, 1),
                     grads: Sequence[str] = GRAD_ORDER) -> Reference:
    """The oracle's values, magnitudes S and K per element on exactly these inputs (float64)."""
    args = [np.asarray(a, dtype=np.float64) for a in (dy, x_in, filters)]
    geo = {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
           "grads": tuple(grads)}
    values = oracle_gradients(*args, **geo)
    magnitudes = oracle_gradients(*args, **geo, magnitudes=True)
    k_elem = accumulation_lengths(*args, **geo)
    structural = accumulation_lengths(*[np.ones(a.shape) for a in args], **geo)
    reachable = {g: k > 0 for g, k in structural.items()}
    return Reference(values, magnitudes, k_elem, reachable,
                     {g: int(k.max(initial=0.0)) for g, k in structural.items()})


@dataclass(frozen=True)
class GradCheck:
    """One gradient's verdict: the largest error, the largest error / bound, and the details."""

    name: str
    max_abs_err: float
    bound_ratio: float      # max over elements of |got - ref| / bound; <= 1 passes in stat mode
    k_max: int              # the largest accumulation length (nonzero terms)
    status: str             # PASS, FAIL, or MISTRUSTED (passed, but the reference is mostly zeros)
    passed: bool
    metrics: ErrorMetrics   # every metric (ULPs, NaN/Inf counts, the worst element, ...)


@dataclass(frozen=True)
class OracleCheck:
    """The verdict of check_against_oracle: one GradCheck per gradient, in dx, dw, db order."""

    mode: str
    dtype: str
    grads: dict[str, GradCheck]

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.grads.values())

    def summary(self) -> str:
        """One line per gradient: status, max error, err/bound, K."""
        return "\n".join(
            f"{g.name}: {g.status:<10} max_abs_err {g.max_abs_err:.3g}  err/bound {g.bound_ratio:.3g}  "
            f"K_max {g.k_max}" for g in self.grads.values())

    def failure_message(self) -> str:
        """Every failing gradient's full message (worst element, bound, metrics); '' when all pass."""
        return "\n\n".join(format_failure(g.metrics, g.name) for g in self.grads.values() if not g.passed)


def _outputs_by_name(outputs, flags: dict[str, bool]) -> dict[str, np.ndarray]:
    """The kernel's return value (bare array, tuple in dx, dw, db order, or a dict) by gradient."""
    wanted = [g for g in GRAD_ORDER if flags[g]]
    if not wanted:
        raise OracleCheckError("compute_dx, compute_dw, compute_db: at least one must be True")
    if isinstance(outputs, Mapping):
        if sorted(outputs) != sorted(wanted):
            raise OracleCheckError(f"outputs: keys {sorted(outputs)} must be the requested gradients "
                                   f"{wanted}")
        return {g: np.asarray(outputs[g]) for g in wanted}
    arrays = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    if len(arrays) != len(wanted):
        raise OracleCheckError(f"outputs: {len(arrays)} arrays given, the kernel returns {len(wanted)} "
                               f"for these flags ({', '.join(wanted)}; a bare array when one)")
    return {g: np.asarray(a) for g, a in zip(wanted, arrays)}


def check_against_oracle(outputs, dy: np.ndarray, x_in: np.ndarray, filters: np.ndarray,
                         stride: Sequence[int] = (1, 1, 1), padding: Sequence[int] = (0,) * 6,
                         dilation: Sequence[int] = (1, 1, 1), compute_dx: bool = True,
                         compute_dw: bool = True, compute_db: bool = True,
                         mode: str = "stat") -> OracleCheck:
    """Judge ``outputs`` (what ``conv3d_bwd`` returned for these arguments) against the oracle.

    The arguments after ``outputs`` are the kernel call's own. mode "stat": every element within
    ``4 sqrt(K) u_fp32 sum|a||b| + ulp_out(ref)``; mode "exact": bit equality with the oracle
    rounded to the output dtype (for inputs whose partial sums are all exact, e.g. small integers).
    The output dtype is dy's.
    """
    if mode not in MODES:
        raise OracleCheckError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    flags = {"dx": bool(compute_dx), "dw": bool(compute_dw), "db": bool(compute_db)}
    got = _outputs_by_name(outputs, flags)
    try:
        dtype = dtype_info(np.asarray(dy).dtype).name
    except ToleranceArgumentError:
        raise OracleCheckError(f"dy: dtype {np.asarray(dy).dtype} is not one of the kernel's dtypes "
                               "(bf16, fp16, fp32); the outputs take dy's dtype") from None
    ref = oracle_reference(dy, x_in, filters, stride, padding, dilation, tuple(got))
    grads = {}
    for name, array in got.items():
        if array.shape != ref.values[name].shape:
            raise OracleCheckError(f"outputs: {name} has shape {array.shape}, the problem's {name} is "
                                   f"{ref.values[name].shape}")
        try:
            metrics = compute_metrics(array, ref.values[name], ref.magnitudes[name], ref.k_elem[name],
                                      dtype=dtype, mode=mode, reachable=ref.reachable[name])
        except ToleranceArgumentError as exc:
            raise OracleCheckError(f"outputs: {name}: {exc}") from None
        grads[name] = GradCheck(name, metrics.max_abs, metrics.bound_ratio, metrics.k_max,
                                metrics.status, metrics.passed, metrics)
    return OracleCheck(mode, dtype, grads)


__all__ = ["GradCheck", "OracleCheck", "OracleCheckError", "Reference", "check_against_oracle",
           "oracle_reference"]
