"""The tolerance model: rounding, ULPs, the per-element bound, metrics, NaN/Inf and MISTRUSTED."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conv3d_bwd.reference import conv3d_bwd_magnitudes
from conv3d_bwd.reference.tolerance import (
    C_DEFAULT,
    U_FP32,
    ToleranceArgumentError,
    accumulation_lengths,
    assert_within_tolerance,
    compute_metrics,
    error_bound,
    ordered_bits,
    round_to_dtype,
    step_ulps,
    ulp_of,
    unit_roundoff,
)

pytestmark = pytest.mark.fast


def _bf16_case(seed: int = 0, n: int = 4096):
    """A bf16-representable reference with realistic magnitudes S >= |ref| and K."""
    rng = np.random.default_rng(seed)
    ref = round_to_dtype(rng.standard_normal(n) * 10, "bf16").astype(np.float64)
    magnitudes = np.abs(ref) * 3 + 1.0
    k = np.full(n, 500.0)
    return ref, magnitudes, k


def test_unit_roundoffs():
    assert unit_roundoff("bf16") == 2.0**-8
    assert unit_roundoff("fp16") == 2.0**-11
    assert unit_roundoff("fp32") == 2.0**-24
    assert unit_roundoff(np.float16) == 2.0**-11


def test_round_to_dtype_matches_ml_dtypes_on_fp32_values():
    x = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    assert np.array_equal(round_to_dtype(x.astype(np.float64), "bf16"), x.astype(ml_dtypes.bfloat16))
    assert np.array_equal(round_to_dtype(x.astype(np.float64) * 300, "fp16"),
                          (x.astype(np.float64) * 300).astype(np.float16))


def test_round_to_dtype_rounds_once():
    # 1 + 2**-8 + 2**-30: via fp32 it becomes the tie 1 + 2**-8, which rounds to even (1.0);
    # a single correct rounding sees it above the midpoint and gives 1 + 2**-7.
    value = np.array([1 + 2.0**-8 + 2.0**-30])
    assert float(round_to_dtype(value, "bf16")[0]) == 1 + 2.0**-7


def test_round_to_dtype_overflows_to_inf_and_keeps_subnormals():
    out = round_to_dtype(np.array([70000.0, -70000.0, 2.0**-20]), "fp16").astype(np.float64)
    assert out[0] == np.inf and out[1] == -np.inf
    assert out[2] == 2.0**-20  # fp16 subnormal, exactly representable


def test_ulp_of():
    assert ulp_of(np.array([1.0]), "bf16")[0] == 2.0**-7
    assert ulp_of(np.array([-3.0]), "bf16")[0] == 2.0**-6
    assert ulp_of(np.array([0.0]), "bf16")[0] == 2.0**-133  # smallest bf16 subnormal
    assert ulp_of(np.array([1.0]), "fp32")[0] == 2.0**-23


def test_step_ulps_crosses_binades_and_zero():
    one = np.array([1.0], dtype=ml_dtypes.bfloat16)
    assert float(step_ulps(one, "bf16", -1)[0]) == 1 - 2.0**-8  # spacing halves below 1
    assert float(step_ulps(one, "bf16", 1)[0]) == 1 + 2.0**-7
    tiny = step_ulps(np.array([0.0], dtype=np.float16), "fp16", -1)
    assert float(tiny[0]) == -(2.0**-24)


def test_ordered_bits_is_monotonic_and_ignores_zero_sign():
    values = np.array([-2.0, -1.0, -0.0, 0.0, 2.0**-133, 1.0, 2.0], dtype=ml_dtypes.bfloat16)
    ordered = ordered_bits(values, "bf16")
    assert ordered[2] == ordered[3] == 0
    assert np.all(np.diff(ordered[3:]) > 0) and np.all(np.diff(ordered[:3]) > 0)
    assert ordered[4] == 1  # the smallest subnormal is one step above zero


def test_error_bound_formula_by_hand():
    bound = error_bound(np.array([1.5]), np.array([8.0]), np.array([100.0]), "bf16")
    assert bound[0] == pytest.approx(C_DEFAULT * 10 * U_FP32 * 8.0 + 2.0**-7, rel=1e-12)


def test_one_ulp_bf16_passes_three_ulps_fail():
    ref, s, k = _bf16_case()
    for n in (1, -1):
        m = compute_metrics(step_ulps(ref, "bf16", n), ref, s, k, "bf16")
        assert m.passed, m.reason
        assert m.max_ulp == 1
    for n in (3, -3, 2):
        m = compute_metrics(step_ulps(ref, "bf16", n), ref, s, k, "bf16")
        assert not m.passed
        assert m.max_ulp == abs(n) and m.bound_ratio > 1


def test_correctly_rounded_result_uses_at_most_half_the_output_term():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(10_000) * 5
    s = np.abs(ref) + 1
    m = compute_metrics(round_to_dtype(ref, "bf16"), ref, s, np.full_like(ref, 64.0), "bf16")
    assert m.passed and m.max_ulp == 0
    assert 0.3 < m.bound_ratio <= 0.5 + 1e-6


def test_fp32_accumulation_of_products_stays_within_bound_in_any_order():
    """The statistical model against a real fp32 accumulation: sequential sums of bf16 products,
    forward and reversed, zero-mean and non-zero-mean (ReLU-like) data, K = 4096."""
    rng = np.random.default_rng(3)
    k_len, rows = 4096, 64
    for nonzero_mean in (False, True):
        a = round_to_dtype(rng.standard_normal((rows, k_len)), "bf16").astype(np.float64)
        b = round_to_dtype(rng.standard_normal((rows, k_len)) + (1.0 if nonzero_mean else 0.0),
                           "bf16").astype(np.float64)
        if nonzero_mean:
            a = np.abs(a)
        products = (a * b).astype(np.float32)  # exact: bf16 x bf16 fits in fp32
        ref = (a * b).sum(axis=1)
        s = (np.abs(a) * np.abs(b)).sum(axis=1)
        k = np.full(rows, float(k_len))
        for order in (slice(None), slice(None, None, -1)):
            got = np.cumsum(products[:, order], axis=1, dtype=np.float32)[:, -1]
            m = compute_metrics(got, ref, s, k, "fp32")
            assert m.passed, m.reason
            assert m.bound_ratio < 0.5


def test_bf16_partial_sum_rounding_is_caught():
    """A kernel that rounds partial sums to bf16 (a real bug class) exceeds the fp32 bound."""
    rng = np.random.default_rng(4)
    k_len, rows = 1024, 32
    a = np.abs(round_to_dtype(rng.standard_normal((rows, k_len)), "bf16").astype(np.float64))
    b = round_to_dtype(rng.standard_normal((rows, k_len)) + 1.0, "bf16").astype(np.float64)
    ref, s = (a * b).sum(axis=1), (np.abs(a) * np.abs(b)).sum(axis=1)
    acc = np.zeros(rows)
    for j in range(k_len):
        acc = round_to_dtype(acc + a[:, j] * b[:, j], "bf16").astype(np.float64)
    m = compute_metrics(round_to_dtype(acc, "bf16"), ref, s, np.full(rows, float(k_len)), "bf16")
    assert not m.passed and m.bound_ratio > 1


def test_nan_where_oracle_has_none_fails():
    ref, s, k = _bf16_case()
    got = round_to_dtype(ref, "bf16")
    got[17] = np.nan
    m = compute_metrics(got, ref, s, k, "bf16")
    assert not m.passed
    assert m.nan_count == 1 and m.ref_nan_count == 0 and m.unexpected_nonfinite == 1
    assert m.worst_index == (17,)
    assert not compute_metrics(got, ref, s, k, "bf16", mode="exact").passed
    assert m.ulp_histogram[-1] >= 1 and sum(m.ulp_histogram) == ref.size  # the NaN: ">= 4" bin


def test_inf_fails_unless_the_rounded_oracle_overflows_too():
    ref = np.array([1.0, 70000.0])
    s, k = np.abs(ref), np.ones(2)
    got = np.array([np.inf, np.inf], dtype=np.float16)
    m = compute_metrics(got, ref, s, k, "fp16")
    assert not m.passed and m.inf_count == 2 and m.unexpected_nonfinite == 1
    ok = compute_metrics(np.array([1.0, np.inf], dtype=np.float16), ref, s, k, "fp16")
    assert ok.passed, ok.reason


def test_all_zero_reference_is_mistrusted():
    zeros = np.zeros(100)
    m = compute_metrics(np.zeros(100, dtype=ml_dtypes.bfloat16), zeros, zeros, zeros, "bf16")
    assert m.passed and m.mistrusted and m.status == "MISTRUSTED" and m.zero_share == 1.0


def test_structural_zeros_do_not_make_a_reference_mistrusted():
    ref = np.concatenate([np.zeros(80), np.arange(1.0, 21.0)])
    reachable = np.arange(100) >= 80
    got = round_to_dtype(ref, "bf16")
    m = compute_metrics(got, ref, np.abs(ref), np.ones(100), "bf16", reachable=reachable)
    assert m.zero_share == 0.8 and m.reachable_zero_share == 0.0 and not m.mistrusted


def test_exact_mode_catches_a_one_unit_error():
    ref = np.arange(-50.0, 50.0)
    got = ref.astype(ml_dtypes.bfloat16)
    s, k = np.abs(ref) + 1, np.full(100, 20.0)
    assert compute_metrics(got, ref, s, k, "bf16", mode="exact").passed
    wrong = got.copy()
    wrong[60] = ml_dtypes.bfloat16(float(ref[60]) + 1)  # 10 -> 11: one unit
    m = compute_metrics(wrong, ref, s, k, "bf16", mode="exact")
    assert not m.passed and m.mismatches == 1 and m.worst_index == (60,)


def test_exact_mode_ignores_the_sign_of_zero():
    ref = np.zeros(4)
    got = np.array([-0.0, 0.0, -0.0, 0.0], dtype=np.float32)
    assert compute_metrics(got, ref, ref, ref, "fp32", mode="exact").passed


def test_assert_within_tolerance_message_shows_the_worst_element():
    ref, s, k = _bf16_case()
    got = round_to_dtype(ref, "bf16")
    assert_within_tolerance(got, ref, s, k, "bf16")
    got[(3, )] = step_ulps(ref[3:4], "bf16", 5)[0]
    with pytest.raises(AssertionError) as info:
        assert_within_tolerance(got, ref, s, k, "bf16", name="dx")
    text = str(info.value)
    assert "Not within tolerance: dx" in text
    assert "index (3,)" in text and f"ref {float(ref[3])!r}" in text and "bound" in text


def test_bad_arguments_name_the_rule():
    with pytest.raises(ToleranceArgumentError, match="mode"):
        compute_metrics(np.zeros(2, np.float32), np.zeros(2), np.zeros(2), np.zeros(2), mode="close")
    with pytest.raises(ToleranceArgumentError, match="shape"):
        compute_metrics(np.zeros(2, np.float32), np.zeros(3), np.zeros(2), np.zeros(2))
    with pytest.raises(ToleranceArgumentError, match="dtype"):
        compute_metrics(np.zeros(2, np.float64), np.zeros(2), np.zeros(2), np.zeros(2))


def _brute_counts(dy, x, w, stride, padding, dilation):
    """Count nonzero products per element by enumerating the forward index map."""
    b_n, c_out = dy.shape[:2]
    c_in = x.shape[1]
    dx = np.zeros(x.shape)
    dw = np.zeros(w.shape)
    out = dy.shape[2:]
    for b, co, od, oh, ow in itertools.product(range(b_n), range(c_out), *map(range, out)):
        for kd, kh, kw in itertools.product(*map(range, w.shape[:3])):
            idx = [o * s + k * r - padding[2 * a]
                   for a, (o, k, s, r) in enumerate(zip((od, oh, ow), (kd, kh, kw), stride, dilation))]
            if not all(0 <= i < n for i, n in zip(idx, x.shape[2:])):
                continue
            for ci in range(c_in):
                if dy[b, co, od, oh, ow] and w[kd, kh, kw, ci, co]:
                    dx[(b, ci, *idx)] += 1
                if dy[b, co, od, oh, ow] and x[(b, ci, *idx)]:
                    dw[kd, kh, kw, ci, co] += 1
    db = (dy != 0).sum(axis=(0, 2, 3, 4)).astype(float)
    return {"dx": dx, "dw": dw, "db": db}


def test_accumulation_lengths_count_nonzero_terms():
    rng = np.random.default_rng(5)
    stride, padding, dilation = (2, 1, 1), (1, 0, 0, 2, 1, 1), (1, 2, 1)
    x = rng.integers(-1, 2, (2, 2, 4, 5, 4)).astype(float)
    w = rng.integers(-1, 2, (3, 2, 2, 2, 3)).astype(float)
    out = [(n + p0 + p1 - r * (k - 1) - 1) // s + 1 for n, p0, p1, k, s, r in
           zip((4, 5, 4), padding[::2], padding[1::2], (3, 2, 2), stride, dilation)]
    dy = rng.integers(-1, 2, (2, 3, *out)).astype(float)
    counts = accumulation_lengths(dy, x, w, stride, padding, dilation)
    expected = _brute_counts(dy, x, w, stride, padding, dilation)
    for name in ("dx", "dw", "db"):
        assert np.array_equal(counts[name], expected[name]), name
    # and S is consistent with the counts: every counted term contributes at least |1*1|
    s = conv3d_bwd_magnitudes(dy, x, w, stride=stride, padding=padding, dilation=dilation)
    assert all(np.all(s_g >= counts[g]) for g, s_g in zip(("dx", "dw", "db"), s))


@given(st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from(["bf16", "fp16"]))
def test_round_to_dtype_agrees_with_a_single_cast_from_fp32(value, dtype):
    # From fp32 one cast is one rounding, so ml_dtypes/numpy are a valid reference there.
    np_type = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}[dtype]
    with np.errstate(over="ignore"):
        expected = np.array([value], dtype=np.float32).astype(np_type)
    got = round_to_dtype(np.array([value], dtype=np.float64), dtype)
    assert got.tobytes() == expected.tobytes() or (float(got[0]) == 0.0 == float(expected[0]))


@given(st.floats(width=16, allow_nan=False, allow_infinity=False), st.integers(-5, 5))
def test_step_ulps_and_ulp_distance_agree(value, steps):
    start = np.array([value], dtype=np.float16)
    moved = step_ulps(start, "fp16", steps)
    if not np.isfinite(moved.astype(np.float64)).all():
        return  # stepped past the largest finite value
    assert int(ordered_bits(moved, "fp16")[0] - ordered_bits(start, "fp16")[0]) == steps


def test_accumulation_share_is_the_error_beyond_one_output_ulp_over_the_accumulation_term():
    ref = np.array([1.0, 2.0, -3.0, 0.5])
    s = np.array([4.0, 8.0, 6.0, 1.0])
    k = np.array([16.0, 16.0, 4.0, 1.0])
    accumulation = C_DEFAULT * np.sqrt(k) * U_FP32 * s
    ulp = ulp_of(ref, "fp32")
    # element 1: 0.25 of its accumulation term beyond one ULP; element 2: 0.75; the others within
    got = (ref + np.array([0.5 * ulp[0], ulp[1] + 0.25 * accumulation[1],
                           -(ulp[2] + 0.75 * accumulation[2]), 0.0])).astype(np.float32)
    m = compute_metrics(got, ref, s, k, "fp32")
    err = np.abs(got.astype(np.float64) - ref)
    expected = np.max(np.maximum(err - ulp, 0.0) / accumulation)
    assert m.accumulation_share == pytest.approx(expected, rel=1e-12)
    assert m.accumulation_share == pytest.approx(0.75, rel=1e-3)
    assert m.passed and m.to_dict()["accumulation_share"] == m.accumulation_share


def test_accumulation_share_shows_a_bf16_margin_that_err_bound_hides():
    """A correctly rounded bf16 result scores err/bound near 0.5 from rounding alone; its
    accumulation share is 0, and a result one accumulation allowance beyond one ULP scores ~1."""
    ref, s, k = _bf16_case()
    exact = ref + 0.49 * ulp_of(ref, "bf16")  # the reference is bf16: this rounds back onto it
    rounded = compute_metrics(round_to_dtype(exact, "bf16"), exact, s, k, "bf16")
    assert rounded.bound_ratio > 0.4 and rounded.accumulation_share == 0.0
    # mid-binade values, so that ref - 1 ULP - a little stays in the binade (the same ULP)
    got = np.array([1.5, 3.0, -6.5, 12.5])
    s, k = np.full(4, 100.0), np.full(4, 500.0)
    accumulation = C_DEFAULT * np.sqrt(k) * U_FP32 * s
    shifted_ref = got - np.sign(got) * (ulp_of(got, "bf16") + 0.9 * accumulation)
    m = compute_metrics(round_to_dtype(got, "bf16"), shifted_ref, s, k, "bf16")
    assert m.accumulation_share == pytest.approx(0.9, rel=1e-6) and m.passed
    assert m.bound_ratio == pytest.approx(max((ulp_of(got, "bf16") + 0.9 * accumulation)
                                              / (ulp_of(got, "bf16") + accumulation)), rel=1e-6)


def test_accumulation_share_is_infinite_where_no_accumulation_is_allowed():
    ref = np.array([0.0, 1.0])
    got = np.array([0.0, 1.5], dtype=np.float32)
    m = compute_metrics(got, ref, np.array([0.0, 0.0]), np.array([0.0, 0.0]), "fp32")
    assert m.accumulation_share == float("inf") and not m.passed
    assert m.to_dict()["accumulation_share"] == "inf"
