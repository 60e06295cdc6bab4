"""The Trainium suite's own logic, tested on the CPU: skip reasons, dry runs, latency records.

The device call is the only thing CI cannot reach; ``--hw-dry`` / ``dry=True`` swaps just that call
for nkisim, so everything around it (gating, determinism, oracle comparison, latency JSON) runs here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwtests.gating import (
    HwPrerequisites,
    HwRunTally,
    device_missing_reason,
    empty_run_failure,
    hw_skip_reason,
)
from hwtests.latency import LatencyLog, merge_latency_parts, parts_dir

ROOT = Path(__file__).resolve().parents[1]
SEED = 0


def _pre(**changes) -> HwPrerequisites:
    ready = {"run_hw": True, "backend": "trn", "dry": False, "nki_missing": None, "device_missing": None}
    return HwPrerequisites(**{**ready, **changes})


@pytest.mark.fast
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"run_hw": False}, "give --run-hw"),
        ({"backend": "nkisim"}, "runs on --backend trn, got --backend nkisim"),
        ({"nki_missing": "the Neuron package 'nki' does not import (ImportError: WRONG PACKAGE)"},
         "Neuron packages absent: the Neuron package 'nki' does not import (ImportError: WRONG PACKAGE)"),
        ({"device_missing": "no Neuron device: nothing matches /dev/neuron[0-9]*"},
         "no Neuron device: nothing matches /dev/neuron[0-9]*"),
        # The first missing prerequisite wins: the option, then the packages, then the device.
        ({"run_hw": False, "nki_missing": "x", "device_missing": "y"}, "give --run-hw"),
        ({"nki_missing": "absent", "device_missing": "no device"}, "Neuron packages absent: absent"),
    ],
    ids=["no-run-hw", "wrong-backend", "no-neuron-packages", "no-device", "option-first", "packages-before-device"],
)
def test_skip_reason_names_the_missing_prerequisite(changes, expected):
    reason = hw_skip_reason(_pre(**changes))
    assert reason is not None and expected in reason


@pytest.mark.fast
def test_nothing_missing_means_no_skip():
    assert hw_skip_reason(_pre()) is None


@pytest.mark.fast
def test_dry_mode_needs_neither_packages_nor_device():
    assert hw_skip_reason(_pre(dry=True, nki_missing="absent", device_missing="none")) is None
    assert hw_skip_reason(_pre(dry=True, run_hw=False)) is not None  # still opt-in


@pytest.mark.fast
def test_tally_counts_calls_that_ran_and_keeps_the_first_skip_reason():
    tally = HwRunTally()
    tally.add("setup", "skipped", "first reason")
    tally.add("teardown", "passed")
    tally.add("setup", "passed")
    tally.add("call", "skipped", "second reason")
    assert (tally.executed, tally.skipped, tally.first_skip_reason) == (0, 2, "first reason")
    tally.add("call", "failed")
    tally.add("call", "passed")
    assert tally.executed == 2


@pytest.mark.fast
def test_empty_run_fails_with_the_gate_reason_first():
    skipped = HwRunTally(executed=0, skipped=3, first_skip_reason="LNC2 needs NEURON_LOGICAL_NC_CONFIG=2")
    assert empty_run_failure("Neuron packages absent: x", skipped) == (
        "hardware gate: no hardware test ran (3 skipped): Neuron packages absent: x")
    # The gate let the tests run, but each skipped itself: its own reason is the message.
    assert empty_run_failure(None, skipped).endswith(": LNC2 needs NEURON_LOGICAL_NC_CONFIG=2")
    assert empty_run_failure(None, HwRunTally()).endswith("no test with the trainium marker was selected")


@pytest.mark.fast
def test_a_run_in_which_one_hardware_test_ran_is_not_empty():
    assert empty_run_failure(None, HwRunTally(executed=1, skipped=169)) is None
    assert empty_run_failure("ignored once something ran", HwRunTally(executed=1)) is None


@pytest.mark.fast
def test_device_probe(tmp_path):
    pattern = str(tmp_path / "neuron[0-9]*")
    reason = device_missing_reason(pattern, which=lambda name: None)
    assert reason == f"no Neuron device: nothing matches {pattern} (neuron-ls is not installed)"
    reason = device_missing_reason(pattern, which=lambda name: f"/opt/aws/neuron/bin/{name}")
    assert reason is not None and "neuron-ls is at /opt/aws/neuron/bin/neuron-ls" in reason
    (tmp_path / "neuron0").touch()
    assert device_missing_reason(pattern, which=lambda name: None) is None


@pytest.mark.fast
def test_latency_parts_of_two_workers_merge_into_one_sorted_file(tmp_path):
    path = tmp_path / "out" / "hw-latency.json"
    LatencyLog(path, worker="gw1").add({"case": "b-case", "backend": "trn", "wall_us_median": 2.0})
    LatencyLog(path, worker="gw0").add({"case": "a-case", "backend": "trn", "wall_us_median": 1.0})
    LatencyLog(path, worker="gw0").add({"case": "c-case", "backend": "trn", "wall_us_median": 3.0})
    assert sorted(p.name for p in parts_dir(path).iterdir()) == ["gw0.jsonl", "gw1.jsonl"]
    records = merge_latency_parts(path)
    on_disk = json.loads(path.read_text())["records"]
    assert [r["case"] for r in on_disk] == ["a-case", "b-case", "c-case"] == [r["case"] for r in records]
    assert [r["wall_us_median"] for r in on_disk] == [1.0, 2.0, 3.0]
    assert not parts_dir(path).exists()
    assert merge_latency_parts(path) is None  # nothing new recorded: the file is left alone
    assert json.loads(path.read_text())["records"] == on_disk


@pytest.mark.fast
def test_default_latency_path(monkeypatch, tmp_path):
    from hwtests.latency import default_latency_path

    monkeypatch.setenv("TOX_WORK_DIR", str(tmp_path / "tox"))
    assert default_latency_path(tmp_path) == tmp_path / "tox" / "hw-latency.json"
    monkeypatch.delenv("TOX_WORK_DIR")
    assert default_latency_path(tmp_path) == tmp_path / ".tox" / "hw-latency.json"


def _fast_case():
    from conv3d_bwd.verify.cases import CASE_SETS

    fast = [c for c in CASE_SETS["default"] if c.fast and c.lnc == 1]
    return min(fast, key=lambda c: c.batch * c.c_in * c.c_out * c.input[0] * c.input[1] * c.input[2])


def test_dry_run_records_latency_next_to_the_model(tmp_path, kernel_backend):
    """run_hw_case with dry=True: same code path as on the device, nkisim in place of the device call."""
    from conv3d_bwd.verify.backends import run_kernel
    from conv3d_bwd.verify.inputs import make_inputs
    from hwtests.hw_case import plan_for_case, run_hw_case

    case = _fast_case()
    path = tmp_path / "lat.json"
    outcome = run_hw_case(case, "exact", SEED, LatencyLog(path, worker="gw0"), dry=True, timed_runs=2)
    assert outcome.deterministic and not any(outcome.differing.values())
    assert set(outcome.metrics) == set(case.grads)
    assert all(m.passed and m.mismatches == 0 for m in outcome.metrics.values())

    records = merge_latency_parts(path)
    assert records == json.loads(path.read_text())["records"] == [outcome.record]
    record = records[0]
    assert record["case"] == case.id and record["dry"] is True and record["backend"] == "trn"
    assert record["timed_runs"] == 2 and 0 < record["wall_us_min"] <= record["wall_us_median"]
    # The model's figures are the ones nkisim and the planner give for the same case.
    dy, x, w = make_inputs(case, "exact", SEED)
    summary = run_kernel(case, dy, x, w, "nkisim").summary
    assert record["modelled_us"] == summary["modelled_us"] > 0
    plan = plan_for_case(case)
    assert record["planner_estimate_us"] == pytest.approx(plan.to_dict()["estimated_us"])
    assert record["plan"] == ",".join(sorted(plan.methods()))


def _pytest(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("CONV3D_BWD_BACKEND", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "hwtests", "-p", "no:cacheprovider", "-q", "-rs",
         "--hw-latency-json", str(tmp_path / "lat.json"), *args],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


def test_hwtests_skip_without_run_hw(tmp_path):
    proc = _pytest(tmp_path=tmp_path)  # collection must work on a CPU machine, then all skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Trainium suite not requested: give --run-hw" in out
    assert " passed" not in out and " failed" not in out
    assert not (tmp_path / "lat.json").exists()


def test_hw_gate_fails_when_nothing_ran_and_says_why(tmp_path):
    """--run-hw on a machine without the packages or a device: every test skips, and the session
    fails (exit 1) with the first missing prerequisite, so a mis-provisioned runner cannot pass."""
    device = device_missing_reason()
    if device is None:
        pytest.skip("a Neuron device is present here: the hw suite itself runs (tox -e hw)")
    proc = _pytest("--run-hw", "--backend", "trn", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED hardware gate: no hardware test ran (" in out, out
    assert ("Neuron packages absent: " in out) or (device in out), out
    assert " passed" not in out


def test_hw_gate_names_the_wrong_backend(tmp_path):
    proc = _pytest("--run-hw", "--backend", "nkisim", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "hardware gate: no hardware test ran" in out
    assert "Trainium suite runs on --backend trn, got --backend nkisim" in out, out


def test_hw_gate_fails_when_no_hardware_test_is_selected(tmp_path):
    proc = _pytest("--run-hw", "--backend", "trn", "--hw-dry", "-k", "no_such_test_name", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # pytest alone would exit 5 (nothing selected)
    assert "no test with the trainium marker was selected" in out, out


def test_hwtests_dry_run_end_to_end(tmp_path, kernel_backend):
    """The real hwtests module, --hw-dry, one fast case: passes and writes the latency JSON."""
    case = _fast_case()
    proc = _pytest("--run-hw", "--backend", "trn", "--hw-dry", "-k", f"{case.id} and exact",
                   tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 passed" in out, out
    records = json.loads((tmp_path / "lat.json").read_text())["records"]
    assert [r["case"] for r in records] == [case.id]
    assert records[0]["dry"] is True and records[0]["deterministic"] is True
    assert f"hw latency: 1 records written to {tmp_path / 'lat.json'}" in out
