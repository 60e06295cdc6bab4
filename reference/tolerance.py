"""The tolerance model: a per-element error bound for conv3d_bwd outputs, and the error metrics.

For one output element the kernel computes a K-term sum of products in fp32 (PSUM) and casts it to
the output dtype once. Against the float64 oracle run on the *same rounded inputs*, the error is

    |got - ref| <= c * sqrt(K_elem) * u_fp32 * S  +  ulp_out(|ref|)

- ``S = sum |a||b|`` over the element's terms (``reference.conv3d_bwd_magnitudes``): the natural
  normaliser of a dot product's rounding error (Higham, ASNA 2nd ed., section 3.1).
- ``K_elem`` is the element's accumulation length counted as *nonzero* products: adding an exact
  zero is exact, so zero terms add no rounding error. It is computed exactly and cheaply by one more
  oracle run on 0/1 masks of the inputs (the oracle then counts terms; integers < 2**53 are exact
  in float64).
- ``c * sqrt(K) * u`` replaces the deterministic ``gamma_K = K u / (1 - K u)``: Higham & Mary (SIAM
  J. Sci. Comput. 2019, Thm 3.1) show that with independent, zero-mean, bounded rounding errors the
  error of a K-term sum is at most about ``lambda sqrt(K) u`` with probability at least
  ``1 - 2K exp(-lambda**2 (1-u)**2 / 2)``. That probability is a union bound and is loose: at
  lambda = 4 it guarantees little for large K, so c = 4 is best read as a safety factor backed by
  measurement: fp32 errors normalised by S sit one to two orders of magnitude below ``4 sqrt(K) u``
  for zero-mean and non-zero-mean data (``simtests/reference/test_tolerance.py`` and
  ``simtests/verify/test_tolerance_sanity.py`` check it), and blocked (PSUM-like) summation is
  tighter still. The deterministic bound would be useless at dw-sized K. docs/tolerance.md gives
  the whole argument and its sources.
- ``ulp_out(|ref|)`` is one unit in the last place of the output dtype at ``|ref|`` (for 0: the
  smallest subnormal, the tiny absolute floor that lets exact zeros through). The single final cast
  costs at most half of it (``u_out |ref|``); allowing a whole ULP ("at most 1 ULP of ref, plus
  the accumulation term") is a deliberate margin of up to 2x on this term: a correctly rounded
  result scores err/bound <= 0.5, so a ratio near 1 flags a real problem. A result one ULP off a
  representable reference passes; three ULPs off fail.

Exact mode (integer inputs whose partial sums are all exact) requires bit equality with the oracle
rounded to the output dtype, except for the sign of zero (which depends only on the accumulator's
initial value, not on any index or arithmetic error).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "C_DEFAULT",
    "DTYPE_INFO",
    "MISTRUST_ZERO_SHARE",
    "U_FP32",
    "DtypeInfo",
    "ErrorMetrics",
    "accumulation_lengths",
    "assert_within_tolerance",
    "bound_terms",
    "compute_metrics",
    "error_bound",
    "ordered_bits",
    "round_to_dtype",
    "step_ulps",
    "ulp_distance",
    "ulp_of",
    "unit_roundoff",
]

C_DEFAULT = 4.0
"""The probabilistic-bound constant lambda (Higham & Mary 2019), see the module docstring."""

MISTRUST_ZERO_SHARE = 0.30
"""A reference with more exact zeros than this share makes a comparison possibly vacuous
(benchdnn's MISTRUSTED status, default zero-trust 30%)."""

REL_FLOOR_FRACTION = 1e-3
"""max_rel divides by max(|ref|, REL_FLOOR_FRACTION * max|ref|): near-zero references of zero-mean
data would otherwise turn the relative error into noise (docs/tolerance.md)."""

ULP_HISTOGRAM_EDGES = (0, 1, 2, 3, 4)
"""Bins of ErrorMetrics.ulp_histogram: exactly 0, 1, 2, 3 and >= 4 ULPs."""


@dataclass(frozen=True)
class DtypeInfo:
    """A binary floating-point format: numpy type, significand digits p (incl. hidden bit), emin."""

    name: str
    np_type: type
    digits: int
    emin: int
    emax: int
    bits: int

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.digits

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.digits + 1)

    @property
    def max_finite(self) -> float:
        return (2.0 - 2.0 ** (1 - self.digits)) * 2.0 ** self.emax


DTYPE_INFO: dict[str, DtypeInfo] = {
    "bf16": DtypeInfo("bf16", ml_dtypes.bfloat16, 8, -126, 127, 16),
    "fp16": DtypeInfo("fp16", np.float16, 11, -14, 15, 16),
    "fp32": DtypeInfo("fp32", np.float32, 24, -126, 127, 32),
}

U_FP32 = DTYPE_INFO["fp32"].unit_roundoff


class ToleranceArgumentError(ValueError):
    """A bad argument to the tolerance model (names the argument, the value and the rule)."""


def dtype_info(dtype: str | np.dtype | type) -> DtypeInfo:
    """The DtypeInfo for a project dtype name ("bf16", "fp16", "fp32") or a numpy dtype."""
    if isinstance(dtype, str) and dtype in DTYPE_INFO:
        return DTYPE_INFO[dtype]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as exc:
        raise ToleranceArgumentError(
            f"dtype: {dtype!r} is not one of bf16, fp16, fp32 or a numpy dtype") from exc
    for info in DTYPE_INFO.values():
        if np_dtype == np.dtype(info.np_type):
            return info
    raise ToleranceArgumentError(f"dtype: {np_dtype} is not one of bf16, fp16, fp32")


def unit_roundoff(dtype: str | np.dtype | type) -> float:
    """u = 2**-p of the dtype: bf16 2**-8, fp16 2**-11, fp32 2**-24."""
    return dtype_info(dtype).unit_roundoff


def ulp_of(values: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """The spacing of the dtype's representable numbers at |values| (float64; subnormal-aware)."""
    info = dtype_info(dtype)
    mag = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, exp = np.frexp(mag)  # mag = m * 2**exp, m in [0.5, 1): IEEE exponent is exp - 1
    # Zero (frexp exponent 0) and subnormals share the spacing of the smallest normal binade.
    ieee_exp = np.where(mag > 0, np.maximum(exp.astype(np.int64) - 1, info.emin), info.emin)
    return np.ldexp(1.0, (ieee_exp - info.digits + 1).astype(np.int32))


def round_to_dtype(values: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Round float64 values to the dtype with one round-to-nearest-even (no double rounding).

    Returns an array of the dtype's numpy type. Casting float64 straight to bfloat16 may go through
    float32 (two roundings); scaling by the exact ULP and using rint avoids that.
    """
    info = dtype_info(dtype)
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    step = ulp_of(np.where(finite, x, 0.0), info.name)
    rounded = np.where(finite, np.rint(x / step) * step, x)  # exact: step is a power of two
    with np.errstate(over="ignore"):
        overflow = finite & (np.abs(rounded) > info.max_finite)
        rounded = np.where(overflow, np.copysign(np.inf, x), rounded)
        return rounded.astype(info.np_type)


def ordered_bits(values: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Map the dtype's bit patterns to int64 so that integer order equals numeric order.

    Sign-magnitude to two's complement: +x keeps its magnitude bits, -x becomes -(magnitude), so
    +0 and -0 both map to 0 and adjacent floats differ by exactly 1.
    """
    info = dtype_info(dtype)
    arr = np.asarray(values).astype(info.np_type)
    uint = {16: np.uint16, 32: np.uint32}[info.bits]
    bits = arr.view(uint).astype(np.int64)
    sign = np.int64(1) << (info.bits - 1)
    magnitude = bits & (sign - 1)
    return np.where(bits & sign, -magnitude, magnitude)


def step_ulps(values: np.ndarray, dtype: str | np.dtype | type, steps: int) -> np.ndarray:
    """values moved by ``steps`` representable numbers of the dtype (negative: downwards).

    The inverse of ``ordered_bits``: exact across binade boundaries and through zero.
    """
    info = dtype_info(dtype)
    ordered = ordered_bits(values, info.name) + int(steps)
    sign = np.int64(1) << (info.bits - 1)
    raw = np.where(ordered < 0, (-ordered) | sign, ordered)
    uint = {16: np.uint16, 32: np.uint32}[info.bits]
    return raw.astype(uint).view(info.np_type)


def ulp_distance(got: np.ndarray, ref: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """|ordered(got) - ordered(round(ref))|: how many representable steps of the dtype apart."""
    info = dtype_info(dtype)
    ref_rounded = round_to_dtype(ref, info.name)
    return np.abs(ordered_bits(got, info.name) - ordered_bits(ref_rounded, info.name))


def error_bound(ref: np.ndarray, magnitudes: np.ndarray, k_elem: np.ndarray,
                dtype: str | np.dtype | type, c: float = C_DEFAULT) -> np.ndarray:
    """The per-element bound ``c sqrt(K) u_fp32 S + ulp_out(|ref|)`` (float64)."""
    accumulation, output_rounding = bound_terms(ref, magnitudes, k_elem, dtype, c)
    return accumulation + output_rounding


def bound_terms(ref: np.ndarray, magnitudes: np.ndarray, k_elem: np.ndarray,
                dtype: str | np.dtype | type, c: float = C_DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """The bound's two terms per element: (accumulation ``c sqrt(K) u_fp32 S``, output rounding
    ``ulp_out(|ref|)``), float64."""
    if not c > 0:
        raise ToleranceArgumentError(f"c: {c!r} must be > 0")
    info = dtype_info(dtype)
    ref64 = np.asarray(ref, dtype=np.float64)
    s = np.asarray(magnitudes, dtype=np.float64)
    k = np.asarray(k_elem, dtype=np.float64)
    _check_same_shape(("ref", ref64), ("magnitudes", s), ("k_elem", k))
    accumulation = c * np.sqrt(k) * U_FP32 * s
    output_rounding = ulp_of(np.where(np.isfinite(ref64), ref64, 0.0), info.name)
    return accumulation, output_rounding


@dataclass(frozen=True)
class ErrorMetrics:
    """How far one gradient is from the oracle, and whether that is within the model.

    Errors are over elements where both values are finite; non-finite values are counted apart.
    ``worst_*`` describe the element with the largest err/bound (or the first unexpected NaN/Inf).
    """

    dtype: str
    mode: str
    n_elements: int
    k_max: int
    max_abs: float
    max_rel: float
    max_range_rel: float  # max|err| / max|ref|: nki-library's "max" comparator, for comparison upstream
    max_norm_err: float
    max_ulp: int
    bound_ratio: float
    zero_share: float
    reachable_zero_share: float
    mistrusted: bool
    nan_count: int
    inf_count: int
    ref_nan_count: int
    unexpected_nonfinite: int
    mismatches: int
    worst_index: tuple[int, ...]
    worst_got: float
    worst_ref: float
    worst_bound: float
    ulp_histogram: tuple[int, ...]
    passed: bool
    reason: str
    # max over elements of max(0, err - ulp_out(|ref|)) / (c sqrt(K) u_fp32 S): the error beyond
    # output rounding as a share of the accumulation allowance. bound_ratio of a correctly rounded
    # bf16/fp16 result is up to 0.5 whatever the accumulation did; this share shows what is left
    # of the accumulation term (<= 1 exactly when the element is within its bound).
    accumulation_share: float = 0.0

    @property
    def status(self) -> str:
        """PASS, FAIL, or MISTRUSTED (passed, but the reference is mostly zeros)."""
        if not self.passed:
            return "FAIL"
        return "MISTRUSTED" if self.mistrusted else "PASS"

    def to_dict(self) -> dict:
        """JSON-ready: infinities become the strings "inf"/"-inf", NaN becomes "nan"."""
        out = asdict(self)
        out["worst_index"] = list(self.worst_index)
        out["ulp_histogram"] = list(self.ulp_histogram)
        out["status"] = self.status
        return {key: _json_float(value) for key, value in out.items()}


def _json_float(value):
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _check_same_shape(*named: tuple[str, np.ndarray]) -> None:
    first_name, first = named[0]
    for name, arr in named[1:]:
        if arr.shape != first.shape:
            raise ToleranceArgumentError(
                f"{name}: shape {arr.shape} differs from {first_name}'s shape {first.shape}; "
                "all arrays of one comparison must have the same shape")


def compute_metrics(got: np.ndarray, ref: np.ndarray, magnitudes: np.ndarray, k_elem: np.ndarray,
                    dtype: str | np.dtype | type | None = None, mode: str = "stat",
                    c: float = C_DEFAULT, reachable: np.ndarray | None = None) -> ErrorMetrics:
    """Compare a kernel output with the float64 oracle under the tolerance model.

    got: the kernel's output (in its dtype); ref: the oracle (float64) on the same rounded inputs;
    magnitudes: S = sum |a||b| per element; k_elem: nonzero terms per element (see
    ``accumulation_lengths``); dtype: the output dtype (default: got's); mode: "stat" (every element
    within its bound) or "exact" (bit equality with the rounded oracle, sign of zero aside);
    reachable: optional bool mask of the elements at least one term reaches (structural zeros, e.g.
    dx positions a stride skips, are then left out of the MISTRUSTED share, as benchdnn adjusts its
    zero-trust per stride and kernel; ``zero_share`` itself stays the raw share). A NaN or Inf where the rounded oracle has none always fails.
    """
    if mode not in ("stat", "exact"):
        raise ToleranceArgumentError(f"mode: {mode!r} is not one of 'stat', 'exact'")
    info = dtype_info(got.dtype if dtype is None else dtype)
    got64 = np.asarray(got).astype(np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    s = np.asarray(magnitudes, dtype=np.float64)
    k = np.asarray(k_elem, dtype=np.float64)
    _check_same_shape(("got", got64), ("ref", ref64), ("magnitudes", s), ("k_elem", k))
    n = got64.size
    ref_rounded = round_to_dtype(ref64, info.name).astype(np.float64)

    got_nan, ref_nan = np.isnan(got64), np.isnan(ref64)
    got_inf, ref_inf = np.isinf(got64), np.isinf(ref_rounded)
    # A non-finite result is only acceptable where the rounded oracle has the very same value.
    same_nonfinite = (got_nan & ref_nan) | (got_inf & ref_inf & (got64 == ref_rounded))
    unexpected = (got_nan | got_inf | ref_nan | ref_inf) & ~same_nonfinite
    both_finite = np.isfinite(got64) & np.isfinite(ref64)

    accumulation, output_rounding = bound_terms(ref64, s, k, info.name, c)
    bound = accumulation + output_rounding
    err = np.where(both_finite, np.abs(got64 - ref64), 0.0)
    beyond_rounding = np.maximum(err - output_rounding, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err > 0, err / bound, 0.0)
        share = np.where(beyond_rounding > 0, beyond_rounding / accumulation, 0.0)
        norm_err = np.where(err > 0, err / np.where(s > 0, s, 0.0), 0.0)
    finite_ref = np.abs(np.where(np.isfinite(ref64), ref64, 0.0))
    ref_scale = float(finite_ref.max()) if n else 0.0
    rel_floor = max(REL_FLOOR_FRACTION * ref_scale, 2.0 ** info.emin)
    rel = err / np.maximum(finite_ref, rel_floor)

    ulps = np.where(both_finite, ulp_distance(got, np.where(np.isfinite(ref64), ref64, 0.0),
                                               info.name), 0)
    # An unexpected NaN/Inf is as far off as it gets: the last bin, not "0 ULPs" (max_ulp stays
    # over finite pairs; the NaN/Inf counts carry those).
    binned = np.where(unexpected, ULP_HISTOGRAM_EDGES[-1], np.minimum(ulps, ULP_HISTOGRAM_EDGES[-1]))
    hist = np.bincount(binned.ravel(), minlength=len(ULP_HISTOGRAM_EDGES))
    mismatch = both_finite & (got64 != ref_rounded)
    zero_share = float(np.count_nonzero(ref64 == 0.0)) / n if n else 1.0
    if reachable is None:
        trusted_zero_share = zero_share
    else:
        live = np.asarray(reachable, dtype=bool)
        _check_same_shape(("ref", ref64), ("reachable", live))
        n_live = int(np.count_nonzero(live))
        trusted_zero_share = (float(np.count_nonzero(live & (ref64 == 0.0))) / n_live
                              if n_live else 1.0)

    if unexpected.any():
        worst_flat = int(np.flatnonzero(unexpected)[0])
    elif mode == "exact" and mismatch.any():
        worst_flat = int(np.argmax(np.where(mismatch, err, -1.0)))
    else:
        worst_flat = int(np.argmax(ratio)) if n else 0
    worst_index = tuple(int(i) for i in np.unravel_index(worst_flat, got64.shape)) if n else ()

    bound_ratio = float(ratio.max()) if n else 0.0
    n_unexpected = int(np.count_nonzero(unexpected))
    n_mismatch = int(np.count_nonzero(mismatch))
    reasons = []
    if n_unexpected:
        reasons.append(f"{n_unexpected} NaN/Inf where the oracle has a finite value (or vice versa)")
    if mode == "exact" and n_mismatch:
        reasons.append(f"{n_mismatch} of {n} elements differ from the oracle rounded to {info.name}")
    if mode == "stat" and bound_ratio > 1.0:
        over = int(np.count_nonzero(ratio > 1.0))
        reasons.append(f"{over} of {n} elements exceed the bound (worst err/bound {bound_ratio:.3g})")

    return ErrorMetrics(
        dtype=info.name,
        mode=mode,
        n_elements=int(n),
        k_max=int(k.max()) if n else 0,
        max_abs=float(err.max()) if n else 0.0,
        max_rel=float(rel.max()) if n else 0.0,
        max_range_rel=(float(err.max()) / ref_scale if ref_scale > 0 else float(err.max())) if n else 0.0,
        max_norm_err=float(norm_err.max()) if n else 0.0,
        max_ulp=int(ulps.max()) if n else 0,
        bound_ratio=bound_ratio,
        zero_share=zero_share,
        reachable_zero_share=trusted_zero_share,
        mistrusted=trusted_zero_share > MISTRUST_ZERO_SHARE,
        nan_count=int(np.count_nonzero(got_nan)),
        inf_count=int(np.count_nonzero(got_inf)),
        ref_nan_count=int(np.count_nonzero(ref_nan)),
        unexpected_nonfinite=n_unexpected,
        mismatches=n_mismatch,
        worst_index=worst_index,
        worst_got=float(got64.flat[worst_flat]) if n else 0.0,
        worst_ref=float(ref64.flat[worst_flat]) if n else 0.0,
        worst_bound=float(bound.flat[worst_flat]) if n else 0.0,
        ulp_histogram=tuple(int(v) for v in hist),
        passed=not reasons,
        reason="; ".join(reasons),
        accumulation_share=float(share.max()) if n else 0.0,
    )


def assert_within_tolerance(got: np.ndarray, ref: np.ndarray, magnitudes: np.ndarray,
                            k_elem: np.ndarray, dtype: str | None = None, mode: str = "stat",
                            c: float = C_DEFAULT, name: str = "output",
                            reachable: np.ndarray | None = None) -> ErrorMetrics:
    """Raise AssertionError (numpy.testing style, showing the worst element) unless within the model.

    Returns the metrics when the comparison passes.
    """
    metrics = compute_metrics(got, ref, magnitudes, k_elem, dtype=dtype, mode=mode, c=c,
                              reachable=reachable)
    if not metrics.passed:
        raise AssertionError(format_failure(metrics, name))
    return metrics


def format_failure(metrics: ErrorMetrics, name: str = "output") -> str:
    """A numpy.testing-like failure message for metrics that did not pass."""
    rule = ("bit equality with the oracle rounded to " + metrics.dtype if metrics.mode == "exact"
            else f"|got - ref| <= {C_DEFAULT:g} sqrt(K) u_fp32 sum|a||b| + ulp_{metrics.dtype}(ref)")
    return "\n".join([
        f"Not within tolerance: {name} ({metrics.dtype}, mode {metrics.mode}): {metrics.reason}",
        f"Rule: {rule}",
        (f"Worst element at index {metrics.worst_index}: got {metrics.worst_got!r}, "
        f"ref {metrics.worst_ref!r}, bound {metrics.worst_bound:.6g}"),
        f"Max abs error: {metrics.max_abs:.6g}",
        f"Max rel error: {metrics.max_rel:.6g}",
        (f"Max err/sum|a||b|: {metrics.max_norm_err:.6g}; max ULP: {metrics.max_ulp}; "
        f"err/bound: {metrics.bound_ratio:.6g}; K max: {metrics.k_max}"),
        (f"NaN in got: {metrics.nan_count}, Inf in got: {metrics.inf_count}, "
        f"NaN in ref: {metrics.ref_nan_count}; zero share of ref: {metrics.zero_share:.1%}"),
    ])


def accumulation_lengths(dy: np.ndarray, x_in: np.ndarray, filters: np.ndarray,
                         stride: Sequence[int] = (1, 1, 1),
                         padding: Sequence[int] = (0,) * 6,
                         dilation: Sequence[int] = (1, 1, 1),
                         grads: Sequence[str] = ("dx", "dw", "db")) -> dict[str, np.ndarray]:
    """Per-element count of nonzero products, for each requested gradient (float64 arrays).

    One oracle run on 0/1 masks of the inputs counts the terms exactly: dx counts (tap, c_out) pairs
    with w != 0 and dy != 0; dw counts (batch, position) pairs with x != 0 and dy != 0 (padding reads
    zero, so padded positions are not counted); db counts dy != 0.
    """
    masks = [(np.asarray(a) != 0).astype(np.float64) for a in (dy, x_in, filters)]
    return oracle_gradients(*masks, stride=stride, padding=padding, dilation=dilation, grads=grads)


def oracle_gradients(dy: np.ndarray, x_in: np.ndarray, filters: np.ndarray,
                     stride: Sequence[int] = (1, 1, 1), padding: Sequence[int] = (0,) * 6,
                     dilation: Sequence[int] = (1, 1, 1), grads: Sequence[str] = ("dx", "dw", "db"),
                     magnitudes: bool = False) -> dict[str, np.ndarray]:
    """The oracle (or the magnitudes S) as a dict {grad: float64 array}, whatever subset is asked."""
    from conv3d_bwd.reference import conv3d_bwd_magnitudes, conv3d_bwd_ref  # late: the oracle imports heavier

    grads = tuple(grads)
    unknown = [g for g in grads if g not in ("dx", "dw", "db")]
    if unknown or not grads:
        raise ToleranceArgumentError(
            f"grads: {grads!r} must be a non-empty subset of ('dx', 'dw', 'db')")
    fn = conv3d_bwd_magnitudes if magnitudes else conv3d_bwd_ref
    order = [g for g in ("dx", "dw", "db") if g in grads]
    out = fn(np.asarray(dy, dtype=np.float64), np.asarray(x_in, dtype=np.float64),
             np.asarray(filters, dtype=np.float64), stride=tuple(stride), padding=tuple(padding),
             dilation=tuple(dilation), compute_dx="dx" in grads, compute_dw="dw" in grads,
             compute_db="db" in grads)
    if len(order) == 1:
        out = (out,)
    return dict(zip(order, (np.asarray(a, dtype=np.float64) for a in out)))


def summarize(metrics: Mapping[str, ErrorMetrics]) -> str:
    """One line per gradient: status, bound ratio, max ULP, K max."""
    return "\n".join(
        f"{name}: {m.status:<10} err/bound {m.bound_ratio:9.3g}  max_ulp {m.max_ulp:4d}  "
        f"K_max {m.k_max}  zeros {m.zero_share:.0%}" for name, m in metrics.items())
