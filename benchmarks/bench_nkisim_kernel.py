"""Speed of the nkisim emulator on the real workload: the conv3d_bwd kernel over a case set.

Each case's plan is computed once up front and forced (kernels.plan.forced_plan), so the timed part
is the emulator, the kernel's own Python and the cost summary -- not the planner. Prints CPU time,
instructions per second and microseconds per instruction in full and trace-only mode, and the share
of the cost summary. CPU time (not wall time) because the machine is usually shared.

    python benchmarks/bench_nkisim_kernel.py [--set default] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conv3d_bwd.nkisim.binding import ensure_nki

ensure_nki(prefer="nkisim")

import conv3d_bwd.nkisim.kernel as nkisim_kernel
from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd
from conv3d_bwd.verify.cases import CASE_SETS
from conv3d_bwd.verify.inputs import make_inputs


def _workload(set_name: str, target: str) -> list[tuple]:
    work = []
    for case in CASE_SETS[set_name]:
        dy, x, w = make_inputs(case, "exact", 0)
        plan = plan_conv3d_bwd(dy.shape, x.shape, w.shape, case.stride, case.padding, case.dilation, case.dtype,
                               target, case.lnc, "dx" in case.grads, "dw" in case.grads, "db" in case.grads)
        work.append((case, (dy, x, w), plan))
    return work


def _run_all(work: list[tuple], target: str, trace_only: bool) -> tuple[float, float, int]:
    """(CPU seconds, of which in the cost summary, instructions) for one pass over the workload."""
    summary_s = 0.0
    original = nkisim_kernel._summarize

    def timed_summary(*args, **kwargs):
        nonlocal summary_s
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            summary_s += time.process_time() - start

    nkisim_kernel._summarize = timed_summary
    total = 0.0
    instrs = 0
    try:
        for case, arrays, plan in work:
            args = tuple(nkisim.TensorSpec(a.shape, a.dtype) for a in arrays) if trace_only else arrays
            with forced_plan(plan):
                start = time.process_time()
                result = nkisim.run(conv3d_bwd, *args, lnc=case.lnc, target=target, trace_only=trace_only,
                                    **case.kernel_kwargs())
                total += time.process_time() - start
            instrs += len(result.trace)
    finally:
        nkisim_kernel._summarize = original
    return total, summary_s, instrs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="default", choices=sorted(CASE_SETS), help="verify case set")
    parser.add_argument("--repeat", type=int, default=3, help="passes per mode; the fastest counts")
    parser.add_argument("--target", default="trn2")
    args = parser.parse_args(argv)
    work = _workload(args.set, args.target)
    print(f"nkisim on conv3d_bwd: case set {args.set!r} ({len(work)} cases), target {args.target}, forced plans, "
          f"CPU time, best of {args.repeat}")
    print(f"  {'mode':<11}{'instrs':>9}{'seconds':>10}{'instr/s':>11}{'us/instr':>10}{'summary':>9}")
    for trace_only in (False, True):
        _run_all(work, args.target, trace_only)   # warm-up
        best = min((_run_all(work, args.target, trace_only) for _ in range(args.repeat)), key=lambda r: r[0])
        secs, summary_s, instrs = best
        print(f"  {'trace-only' if trace_only else 'full':<11}{instrs:>9,}{secs:>10.3f}{instrs / secs:>11,.0f}"
              f"{secs / instrs * 1e6:>10.1f}{summary_s / secs:>9.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
