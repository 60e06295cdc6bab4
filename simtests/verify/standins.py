"""TEST-ONLY kernel stand-ins for the harness and CLI tests (never a user-selectable backend).

``oracle_fp32`` behaves like a correct kernel (the oracle's value rounded to fp32, then cast once to
the case dtype), so the harness, reports and CLI can be tested apart from the kernel. ``with_fault``
wraps a runner so that one element of one gradient comes back wrong: that is how the tests prove a
wrong result makes the verdict fail, without breaking the kernel.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from conv3d_bwd.reference.tolerance import dtype_info, oracle_gradients, round_to_dtype, step_ulps
from conv3d_bwd.verify.backends import KernelRun, Runner, register_backend, unregister_backend
from conv3d_bwd.verify.cases import Case

ORACLE_FP32 = "test-oracle-fp32"
WRONG = "test-wrong-result"


def oracle_fp32(case: Case, dy, x, w, target: str) -> KernelRun:
    """The oracle rounded to fp32 then to the case dtype, like a kernel that is right."""
    start = time.perf_counter()
    ref = oracle_gradients(*(np.asarray(a, np.float64) for a in (dy, x, w)), case.stride,
                           case.padding, case.dilation, case.grads)
    outputs = {g: round_to_dtype(round_to_dtype(v, "fp32").astype(np.float64), case.dtype)
               for g, v in ref.items()}
    return KernelRun(outputs, {"modelled_us": 1.5}, "oracle-fp32 stand-in (test only)", {},
                     time.perf_counter() - start)


def with_fault(runner: Runner, grad: str = "dx", index: int = 0, delta_ulps: int = 0,
               value: float | None = None) -> Runner:
    """Wrap a runner: element ``index`` (flat) of ``grad`` is moved by delta_ulps representable
    steps of the case dtype, or set to value."""

    def faulty(case: Case, dy, x, w, target: str) -> KernelRun:
        run = runner(case, dy, x, w, target)
        if grad not in run.outputs:
            return run
        out = run.outputs[grad].copy()
        flat = out.reshape(-1)
        if value is not None:
            flat[index] = np.array(value).astype(dtype_info(case.dtype).np_type)
        else:
            flat[index] = step_ulps(flat[index:index + 1], case.dtype, delta_ulps)[0]
        return KernelRun({**run.outputs, grad: out}, run.summary, run.backend_version + " +fault",
                         run.tool_versions, run.wall_s)

    return faulty


@contextmanager
def registered(name: str, runner: Runner) -> Iterator[str]:
    """Register a stand-in backend for the duration of a with-block."""
    register_backend(name, runner)
    try:
        yield name
    finally:
        unregister_backend(name)
