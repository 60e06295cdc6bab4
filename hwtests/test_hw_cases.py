"""The case matrix on a NeuronCore: oracle comparison, determinism, latency next to the model.

Skipped, with the missing prerequisite as the reason, unless --run-hw is given with --backend trn,
the Neuron packages import and a device exists (root conftest + hwtests/gating.py); under --run-hw
a session in which none of them ran fails. ``--hw-dry`` runs the same code with only the device call
swapped for nkisim.
"""
from __future__ import annotations

import pytest

from conv3d_bwd.verify.backends import BackendUnavailable
from conv3d_bwd.verify.cases import CASE_SETS
from hwtests.hw_case import run_hw_case
from simtests.kernels.case_support import MODE_SEEDS, MODES, case_param, repro_command

pytestmark = pytest.mark.trainium



@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [case_param(case) for case in CASE_SETS["default"]])
def test_case_on_device(case, mode, hw_dry, latency_log, record_property):
    seed = MODE_SEEDS[mode]
    try:
        outcome = run_hw_case(case, mode, seed, latency_log, dry=hw_dry)
    except BackendUnavailable as exc:  # e.g. an LNC2 case on a device configured for LNC1
        pytest.skip(str(exc))
    for key in ("wall_us_median", "planner_estimate_us", "modelled_us", "plan"):
        if outcome.record[key] is not None:
            record_property(key, outcome.record[key])
    repro = repro_command(case, mode, seed, "trn")
    failing = {name: m.reason for name, m in outcome.metrics.items() if not m.passed}
    assert not failing, f"{case.id} ({mode}) differs from the oracle: {failing}\nreproduce: {repro}"
    if mode == "exact":
        inexact = {name: m.mismatches for name, m in outcome.metrics.items() if m.mismatches}
        assert not inexact, f"{case.id}: exact mode not bit-exact, mismatches {inexact}\nreproduce: {repro}"
    assert outcome.deterministic, (
        f"{case.id} ({mode}): runs differ in {outcome.differing} bytes\nreproduce: {repro}"
    )
