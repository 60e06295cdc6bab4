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
