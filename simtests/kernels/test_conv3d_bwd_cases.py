"""The named case matrix of verify.cases, each case in both numerical modes, against the oracle.

exact: small-integer inputs whose sums are exact, so the kernel must match the oracle bit for bit.
stat: normal inputs (rounded to the kernel dtype), every element within its tolerance bound.
An emulator rule violation fails the test with the emulator's message.
"""
from __future__ import annotations

import pytest

from conv3d_bwd.verify.cases import CASE_SETS

from .case_support import (
    MODE_SEEDS,
    MODES,
    assert_case_ok,
    case_param,
    run_case_checked,
)

DEFAULT_CASES = CASE_SETS["default"]
_default_ids = {case.id for case in DEFAULT_CASES}
EXTRA_FULL_CASES = tuple(case for case in CASE_SETS["full"] if case.id not in _default_ids)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [case_param(case) for case in DEFAULT_CASES])
def test_case_matches_oracle(case, mode, kernel_backend, record_case_properties):
    result = run_case_checked(case, kernel_backend, mode, MODE_SEEDS[mode])
    record_case_properties(result)
    assert_case_ok(result, MODE_SEEDS[mode])


@pytest.mark.nightly
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [case_param(case, allow_fast=False) for case in EXTRA_FULL_CASES])
def test_full_set_case_matches_oracle(case, mode, kernel_backend, record_case_properties):
    result = run_case_checked(case, kernel_backend, mode, MODE_SEEDS[mode])
    record_case_properties(result)
    assert_case_ok(result, MODE_SEEDS[mode])
