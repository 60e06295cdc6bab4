"""verify.check: one call judges a kernel result against the oracle, with the bound."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conv3d_bwd.reference.tolerance import round_to_dtype, step_ulps
from conv3d_bwd.verify.check import OracleCheckError, check_against_oracle, oracle_reference

BF16 = ml_dtypes.bfloat16
PADDING = (1, 0, 1, 1, 0, 1)   # asymmetric, so a swapped side would show
STRIDE = (2, 1, 1)


def _inputs(dtype=BF16, integers: bool = False, seed: int = 0):
    """dy, x, filters of a small strided, asymmetrically padded problem (B2, C_in 3, C_out 4)."""
    rng = np.random.default_rng(seed)
    draw = (lambda shape: rng.integers(-2, 3, shape)) if integers else rng.standard_normal
    x = draw((2, 3, 5, 4, 4)).astype(dtype)
    filters = draw((3, 2, 2, 3, 4)).astype(dtype)
    dy = draw((2, 4, 2, 5, 4)).astype(dtype)   # D_out = (5+1-3)//2+1 = 2, H_out = 5, W_out = 4
    return dy, x, filters


def _rounded_oracle(dy, x, filters, dtype="bf16"):
    """A stand-in 'kernel': the oracle rounded once to the output dtype (what a perfect kernel gives)."""
    ref = oracle_reference(dy, x, filters, STRIDE, PADDING)
    return tuple(round_to_dtype(ref.values[g], dtype) for g in ("dx", "dw", "db"))


@pytest.mark.fast
def test_a_correctly_rounded_result_passes_in_both_modes():
    dy, x, filters = _inputs()
    check = check_against_oracle(_rounded_oracle(dy, x, filters), dy, x, filters, STRIDE, PADDING)
    assert check.passed and check.mode == "stat" and check.dtype == "bf16"
    assert list(check.grads) == ["dx", "dw", "db"]
    for grad in check.grads.values():
        assert grad.passed and grad.status in ("PASS", "MISTRUSTED")
        assert 0 <= grad.bound_ratio <= 0.5   # correct rounding uses at most half the ULP allowance
        assert grad.k_max > 0 and grad.max_abs_err == grad.metrics.max_abs
    ints = _inputs(integers=True)
    exact = check_against_oracle(_rounded_oracle(*ints), *ints, STRIDE, PADDING, mode="exact")
    assert exact.passed and all(g.metrics.mismatches == 0 for g in exact.grads.values())


@pytest.mark.fast
@pytest.mark.parametrize("grad", ["dx", "dw", "db"])
def test_one_element_three_ulps_off_fails_that_gradient_only(grad):
    dy, x, filters = _inputs()
    outputs = dict(zip(("dx", "dw", "db"), _rounded_oracle(dy, x, filters)))
    bad = outputs[grad].copy()
    bad.flat[1] = step_ulps(bad.flat[1:2], "bf16", 3)[0]
    outputs[grad] = bad
    check = check_against_oracle(outputs, dy, x, filters, STRIDE, PADDING)
    assert not check.passed
    assert [g.name for g in check.grads.values() if not g.passed] == [grad]
    assert check.grads[grad].status == "FAIL" and check.grads[grad].bound_ratio > 1
    assert f"Not within tolerance: {grad} (bf16, mode stat)" in check.failure_message()


@pytest.mark.fast
def test_exact_mode_fails_on_one_ulp():
    dy, x, filters = _inputs(integers=True)
    dx, dw, db = _rounded_oracle(dy, x, filters)
    dw = dw.copy()
    dw.flat[0] = step_ulps(dw.flat[0:1], "bf16", 1)[0]
    check = check_against_oracle((dx, dw, db), dy, x, filters, STRIDE, PADDING, mode="exact")
    assert not check.grads["dw"].passed and check.grads["dw"].metrics.mismatches == 1
    assert check.grads["dx"].passed and check.grads["db"].passed


@pytest.mark.fast
def test_a_nan_fails():
    dy, x, filters = _inputs()
    dx, dw, db = _rounded_oracle(dy, x, filters)
    dx = dx.copy()
    dx.flat[5] = np.nan
    check = check_against_oracle((dx, dw, db), dy, x, filters, STRIDE, PADDING)
    assert not check.grads["dx"].passed and check.grads["dx"].metrics.nan_count == 1


@pytest.mark.fast
def test_outputs_follow_the_kernels_return_convention():
    dy, x, filters = _inputs(dtype=np.float32)
    dx, dw, db = _rounded_oracle(dy, x, filters, "fp32")
    flags = {"compute_dx": False, "compute_dw": True, "compute_db": False}
    bare = check_against_oracle(dw, dy, x, filters, STRIDE, PADDING, **flags)   # one gradient: bare
    assert list(bare.grads) == ["dw"] and bare.passed and bare.dtype == "fp32"
    pair = check_against_oracle((dx, db), dy, x, filters, STRIDE, PADDING, compute_dw=False)
    assert list(pair.grads) == ["dx", "db"] and pair.passed
    # A tuple in the wrong order is judged as given: dx's array in db's place fails by shape.
    with pytest.raises(OracleCheckError, match=r"outputs: dx has shape \(4,\)"):
        check_against_oracle((db, dx), dy, x, filters, STRIDE, PADDING, compute_dw=False)


@pytest.mark.fast
@pytest.mark.parametrize(("call", "message"), [
    (lambda o, a: check_against_oracle(o[:2], *a, STRIDE, PADDING), r"outputs: 2 arrays given, .* 3"),
    (lambda o, a: check_against_oracle({"dx": o[0]}, *a, STRIDE, PADDING), r"outputs: keys \['dx'\]"),
    (lambda o, a: check_against_oracle(o, *a, STRIDE, PADDING, mode="approx"), r"mode: 'approx'"),
    (lambda o, a: check_against_oracle(o, *a, STRIDE, PADDING, compute_dx=False, compute_dw=False,
                                       compute_db=False), r"at least one must be True"),
    (lambda o, a: check_against_oracle(o, *(v.astype(np.float64) for v in a), STRIDE, PADDING),
     r"dy: dtype float64 is not one of"),
], ids=["count", "keys", "mode", "no-grads", "dtype"])
def test_bad_arguments_name_the_argument(call, message):
    args = _inputs()
    with pytest.raises(OracleCheckError, match=message):
        call(_rounded_oracle(*args), args)


def test_the_real_kernel_passes():
    """The one-call check on the kernel itself (nkisim), as docs/api.md shows it."""
    from conv3d_bwd import nkisim
    from conv3d_bwd.kernels import conv3d_bwd

    dy, x, filters = _inputs(seed=3)
    result = nkisim.run(conv3d_bwd, dy, x, filters, stride=STRIDE, padding=PADDING, target="trn2")
    check = check_against_oracle(result.outputs, dy, x, filters, STRIDE, PADDING)
    assert check.passed, check.failure_message()
