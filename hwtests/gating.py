"""Whether the Trainium suite can run here, and if not, what is missing.

Pure functions with injectable probes, so that the default CPU suite (simtests/test_hw_gating.py)
tests every branch on a machine without a NeuronCore.
"""
from __future__ import annotations

import glob
import shutil
from collections.abc import Callable
from dataclasses import dataclass

DEVICE_GLOB = "/dev/neuron[0-9]*"
HW_BACKEND = "trn"


def device_missing_reason(
    device_glob: str = DEVICE_GLOB, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """None when a Neuron device node exists, else a reason naming what was looked for."""
    if glob.glob(device_glob):
        return None
    tool = which("neuron-ls")
    tool_note = f"neuron-ls is at {tool}" if tool else "neuron-ls is not installed"
    return f"no Neuron device: nothing matches {device_glob} ({tool_note})"


@dataclass(frozen=True)
class HwPrerequisites:
    """What the Trainium suite needs, as observed on this machine and command line."""

    run_hw: bool               # --run-hw given
    backend: str               # --backend (hwtests run the kernel on 'trn')
    dry: bool                  # --hw-dry: swap only the device call for nkisim
    nki_missing: str | None    # why the real Neuron nki does not import (None: it does)
    device_missing: str | None  # why no NeuronCore was found (None: one was)


def hw_skip_reason(pre: HwPrerequisites) -> str | None:
    """The first missing prerequisite, as a skip reason; None when the suite can run.

    Order: the opt-in option, then the backend, then (unless dry) the Neuron packages, then the device.
    """
    if not pre.run_hw:
        return "Trainium suite not requested: give --run-hw (tox -e hw)"
    if pre.backend != HW_BACKEND:
        return f"Trainium suite runs on --backend {HW_BACKEND}, got --backend {pre.backend}"
    if pre.dry:
        return None
    if pre.nki_missing:
        return f"Neuron packages absent: {pre.nki_missing}"
    if pre.device_missing:
        return pre.device_missing
    return None


@dataclass
class HwRunTally:
    """What the hardware tests of one session did: how many ran, how many skipped, and the first
    skip reason (filled from pytest's test reports, including those xdist workers send back)."""

    executed: int = 0
    skipped: int = 0
    first_skip_reason: str | None = None

    def add(self, when: str, outcome: str, skip_reason: str | None = None) -> None:
        """Count one report: a test ran when its call phase passed or failed."""
        if outcome == "skipped":
            self.skipped += 1
            if self.first_skip_reason is None and skip_reason:
                self.first_skip_reason = skip_reason
        elif when == "call":
            self.executed += 1


def empty_run_failure(gate_reason: str | None, tally: HwRunTally) -> str | None:
    """Under --run-hw: why a session in which no hardware test ran is a failure (None: some ran).

    A gate that passes with every test skipped would let a mis-provisioned Trainium runner pass,
    so the message names the first missing prerequisite: the gate's own, else the first reason a
    test gave for skipping itself, else that no hardware test was selected at all.
    """
    if tally.executed:
        return None
    if gate_reason:
        why = gate_reason
    elif tally.first_skip_reason:
        why = tally.first_skip_reason
    else:
        why = "no test with the trainium marker was selected"
    return f"hardware gate: no hardware test ran ({tally.skipped} skipped): {why}"
