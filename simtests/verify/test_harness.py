"""The harness and the backends: verdicts, records, error capture, backend selection."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conv3d_bwd.verify.backends import (
    BACKEND_ENV,
    BackendError,
    BackendUnavailable,
    KernelOutputError,
    outputs_by_grad,
    real_nki_missing,
    resolve_backend,
    run_kernel,
)
from conv3d_bwd.verify.cases import CASE_SETS
from conv3d_bwd.verify.harness import run_case
from conv3d_bwd.verify.inputs import make_inputs
from simtests.verify.standins import ORACLE_FP32, oracle_fp32, registered, with_fault

pytestmark = pytest.mark.fast

BASIC = next(c for c in CASE_SETS["default"] if c.name == "basic")
DW_ONLY = next(c for c in CASE_SETS["default"] if c.group == "grads" and c.grads == ("dw",))

RECORD_FIELDS = {
    "case_id", "group", "geometry", "dtype", "lnc", "backend", "backend_version", "tool_versions",
    "plan", "methods", "K", "mode", "seed", "input_distribution", "metrics", "passed", "status",
    "modelled_us", "grad", "error", "K_structural",
}
METRIC_FIELDS = {
    "max_abs", "max_rel", "max_norm_err", "max_ulp", "bound_ratio", "zero_share", "mistrusted",
    "nan_count", "inf_count", "ref_nan_count", "passed", "worst_index", "k_max",
}


@pytest.fixture
def standin():
    with registered(ORACLE_FP32, oracle_fp32) as name:
        yield name


@pytest.mark.parametrize("mode", ["exact", "stat"])
def test_correct_results_pass_and_records_are_complete(standin, mode):
    result = run_case(BASIC, backend=standin, mode=mode, seed=1)
    assert result.passed and result.status == "PASS"
    assert set(result.grads) == {"dx", "dw", "db"}
    assert result.grads["dx"].K_max == (216 if mode == "stat" else result.grads["dx"].metrics.k_max)
    records = result.to_records()
    assert [r["grad"] for r in records] == ["dx", "dw", "db"]
    for record in records:
        assert RECORD_FIELDS <= set(record)
        assert METRIC_FIELDS <= set(record["metrics"])
        assert record["status"] == "PASS" and record["mode"] == mode
    json.dumps(records)  # JSON-ready


def test_exact_mode_fails_on_a_one_ulp_error(standin):
    with registered("test-one-ulp", with_fault(oracle_fp32, "dw", index=7, delta_ulps=1)) as name:
        exact = run_case(BASIC, backend=name, mode="exact")
    assert not exact.passed and exact.grads["dw"].metrics.mismatches == 1
    assert exact.grads["dw"].metrics.max_ulp == 1
    assert exact.grads["dx"].passed and exact.grads["db"].passed
    assert "dw" in exact.failure_message() and "index" in exact.failure_message()


def test_three_ulps_or_a_nan_fail_in_stat_mode():
    with registered("test-3ulp", with_fault(oracle_fp32, "dx", index=3, delta_ulps=3)) as name:
        assert not run_case(BASIC, backend=name, mode="stat").passed
    with registered("test-nan", with_fault(oracle_fp32, "db", index=0, value=float("nan"))) as name:
        result = run_case(BASIC, backend=name, mode="stat")
    assert not result.passed and result.grads["db"].metrics.nan_count == 1


def test_a_crashing_backend_is_recorded_when_capturing():
    def crash(case, dy, x, w, target):
        raise RuntimeError("boom in the kernel")

    with registered("test-crash", crash) as name:
        with pytest.raises(RuntimeError, match="boom"):
            run_case(BASIC, backend=name)
        result = run_case(BASIC, backend=name, capture_errors=True)
    assert not result.passed and "boom in the kernel" in result.error
    records = result.to_records()
    assert len(records) == 3 and all(r["status"] == "FAIL" and r["metrics"] is None for r in records)


def test_gradient_subsets_only_judge_what_was_asked(standin):
    result = run_case(DW_ONLY, backend=standin)
    assert set(result.grads) == {"dw"} and result.passed
    assert [r["grad"] for r in result.to_records()] == ["dw"]


def test_backend_resolution(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert resolve_backend(None) == "nkisim"
    monkeypatch.setenv(BACKEND_ENV, "trn")
    assert resolve_backend(None) == "trn"
    assert resolve_backend("nki-simulate") == "nki-simulate"
    with pytest.raises(BackendError, match="'cuda' is not one of"):
        resolve_backend("cuda")
    monkeypatch.setenv(BACKEND_ENV, "tpu")
    with pytest.raises(BackendError, match=r"\$CONV3D_BWD_BACKEND: 'tpu'"):
        resolve_backend(None)


def test_output_mapping_checks_count_shape_and_dtype():
    _dy, x, _w = make_inputs(BASIC, "exact", 0)
    good = (np.zeros(BASIC.x_shape, x.dtype), np.zeros(BASIC.w_shape, x.dtype),
            np.zeros((BASIC.c_out,), x.dtype))
    assert list(outputs_by_grad(BASIC, good)) == ["dx", "dw", "db"]
    with pytest.raises(KernelOutputError, match="returned 2 outputs"):
        outputs_by_grad(BASIC, good[:2])
    with pytest.raises(KernelOutputError, match="dw: kernel returned shape"):
        outputs_by_grad(BASIC, (good[0], good[0], good[2]))
    with pytest.raises(KernelOutputError, match="dtype"):
        outputs_by_grad(BASIC, (good[0].astype(np.float32), good[1], good[2]))


def test_nki_simulate_is_unavailable_with_a_reason_when_nki_does_not_import():
    missing = real_nki_missing()
    if missing is None:
        pytest.skip("the real Neuron nki imports here; the unavailable branch cannot be observed")
    dy, x, w = make_inputs(BASIC, "exact", 0)
    with pytest.raises(BackendUnavailable, match="nki"):
        run_kernel(BASIC, dy, x, w, backend="nki-simulate")


def test_trn_without_a_device_is_unavailable():
    dy, x, w = make_inputs(BASIC, "exact", 0)
    if real_nki_missing() is None:
        pytest.skip("the real Neuron nki imports here")
    with pytest.raises(BackendUnavailable, match="backend 'trn' cannot run here"):
        run_kernel(BASIC, dy, x, w, backend="trn")


@pytest.mark.parametrize("mode", ["exact", "stat"])
def test_real_kernel_under_nkisim_and_trn_dry(mode):
    """The real path end to end: the kernel under nkisim, and trn with only the device call swapped."""
    sim = run_case(BASIC, backend="nkisim", mode=mode, seed=1)
    assert sim.passed, sim.failure_message()
    assert sim.modelled_us and sim.modelled_us > 0
    low, high = sim.modelled_band_us
    assert low <= sim.modelled_us <= high
    assert sim.plan is not None and sim.methods
    dry = run_case(BASIC, backend="trn", mode=mode, seed=1, dry=True)
    assert dry.passed, dry.failure_message()
    for name in BASIC.grads:
        assert dry.grads[name].metrics.max_abs == sim.grads[name].metrics.max_abs
