"""The state of a kernel run: shared by its programs (RunState) and per program (CoreState)."""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import numpy as np

from .errors import NkiUsageError
from .memory import PSUM, SBUF, OnChipTracker
from .targets import TargetSpec
from .trace import Trace

STRICT_ENV = "NKISIM_STRICT"


class RunState:
    """One call of a kernel: target, trace, mode, and what its programs share (shared HBM)."""

    def __init__(self, target: TargetSpec, lnc: int, trace_only: bool) -> None:
        self.target = target
        self.lnc = lnc
        self.trace_only = trace_only
        self.trace = Trace()
        self.ids = itertools.count(1)
        self.shared_hbm: list[Any] = []   # the k-th shared_hbm allocation, common to all programs
        self.exchange = None              # set by the LNC scheduler (sendrecv channels)
        self.grid_ndim = 0                # 1 when launched as kernel[n]
        # NKISIM_STRICT=0: the rules nkisim applies more strictly than the real simulator warn
        # (NkiStrictWarning) instead of raising (docs/nkisim.md, "Stricter than documented").
        self.strict = os.environ.get(STRICT_ENV, "1").strip() != "0"
        # Trace records of operand accesses by (storage id, offset, pattern, role, write): equal
        # accesses (a tile re-read by many instructions) share one immutable record.
        self.accesses: dict[tuple, Any] = {}


class CoreState:
    """One program (one NeuronCore) of a run: its on-chip memory and engine registers."""

    def __init__(self, run: RunState, program_id: int) -> None:
        self.run = run
        self.program_id = program_id
        self.target = run.target
        self.trace_only = run.trace_only
        self.record = run.trace.record
        self.sbuf = OnChipTracker(SBUF, run.target.usable_sbuf_bytes, run.target.name)
        self.psum = OnChipTracker(PSUM, run.target.psum_partition_bytes, run.target.name,
                                  bank_bytes=run.target.psum_bank_bytes)
        self.activation_regs = np.zeros(128, np.float32)  # ScalarE per-partition reduce registers
        self.shared_allocs = 0
        self.liveness = None   # liveness.PsumLiveness when the run applies program-order PSUM liveness


_local = threading.local()


def current_core() -> CoreState:
    """The program being run on this thread; an error outside a kernel run."""
    core = getattr(_local, "core", None)
    if core is None:
        raise NkiUsageError("nkisim: NKI calls are only valid inside a kernel run "
                            "(call the kernel through nki.simulate(...) or nkisim.run(...))")
    return core


def maybe_core() -> CoreState | None:
    return getattr(_local, "core", None)


def set_core(core: CoreState | None) -> None:
    _local.core = core
