"""A random sweep over the geometries users pass: crashes, wrong numbers and missing plans, with a reproducer.

Each geometry is a pure function of (seed, kind, index), so a sweep is reproducible and its cases can
run in any order or process. Small geometries run in full on nkisim against the float64 oracle (exact
mode: bit equality, or the theory bound in stat mode); large ones are planned and traced only
(``trace_only``: every instruction, its operands' shapes and the cost model, no data), checking that the
kernel runs and that its SBUF / PSUM peaks stay within the plan's budget. Every case also compares the
planner's estimate with the modelled time and keeps the outliers (ratio > ``OUTLIER_RATIO`` either way).

Failure classes: ``crash`` (the kernel or the planner raised), ``wrong`` (a gradient outside its
tolerance), ``no plan`` (Conv3dBwdPlanError for a geometry whose per-partition working set at the
smallest tile fits SBUF), ``over budget`` (a traced peak above the plan's). A no-plan where even the
smallest tile cannot fit is counted apart (``too big``), not as a failure.
"""
from __future__ import annotations

import random
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from conv3d_bwd.verify.cases import GRAD_SUBSETS, Case

OUTLIER_RATIO = 1.5
TARGETS = ("trn1", "trn2", "trn3")
DTYPES = ("bf16", "fp16", "fp32")
TILE_EDGES = (127, 128, 129, 255, 256, 257)


@dataclass(frozen=True)
class Space:
    """The ranges one kind of sweep case draws from (per spatial axis unless said)."""

    kernel: tuple[int, int] = (1, 7)
    stride: tuple[int, int] = (1, 3)
    dilation: tuple[int, int] = (1, 3)
    beyond_reach: int = 3          # padding per side up to reach + this (reach = dil*(k-1))
    channels: tuple[int, int] = (1, 300)
    extra_dh: tuple[int, int] = (0, 4)   # D, H input rows above the smallest valid size
    extra_w: tuple[int, int] = (0, 12)
    wide_w: tuple[int, int] = (0, 0)     # a share of the draws takes W's extra from this range instead
    batch: tuple[int, int] = (1, 3)
    max_elems: int = 60_000              # B * C * D * H * W cap of each of dy, x (small cases stay quick)
    max_macs: float = 2e6                # B * C_in * C_out * output positions * taps cap (the oracle's work)


SMALL = Space(channels=(1, 300), extra_dh=(0, 4), extra_w=(0, 12), wide_w=(12, 240), max_elems=40_000,
              max_macs=1e6)
LARGE = Space(channels=(1, 300), extra_dh=(2, 40), extra_w=(8, 120), wide_w=(120, 500), max_elems=8_000_000,
              max_macs=2e10)


def _channels(rng: random.Random, space: Space) -> int:
    if rng.random() < 0.3:
        return rng.choice(TILE_EDGES)
    if rng.random() < 0.5:
        return rng.randint(space.channels[0], min(space.channels[1], 16))
    return rng.randint(*space.channels)


def _axis(rng: random.Random, space: Space, extra: tuple[int, int]) -> tuple[int, int, int, int, int, int]:
    """(n, k, s, r, lo, hi) with output >= 1; padding sometimes beyond the kernel's reach."""
    k = rng.randint(*space.kernel) if rng.random() < 0.7 else rng.choice((1, 3))
    s = rng.randint(*space.stride)
    r = rng.randint(*space.dilation) if k > 1 else 1
    reach = r * (k - 1)
    beyond = rng.random() < 0.25
    lo = rng.randint(0, reach + (space.beyond_reach if beyond else 0))
    hi = rng.randint(0, reach + (space.beyond_reach if beyond and rng.random() < 0.5 else 0))
    smallest = max(1, reach + 1 - lo - hi)
    n = smallest + rng.randint(*extra)
    return n, k, s, r, lo, hi


def draw_case(seed: int, kind: str, index: int) -> tuple[Case, str]:
    """The ``index``-th geometry of a ``kind`` ("small" | "large") sweep with ``seed``, and its target."""
    space = SMALL if kind == "small" else LARGE
    rng = random.Random(f"{seed}:{kind}:{index}")
    for _attempt in range(100):
        d = _axis(rng, space, space.extra_dh)
        h = _axis(rng, space, space.extra_dh)
        w = _axis(rng, space, space.wide_w if rng.random() < 0.15 else space.extra_w)
        batch = rng.randint(*space.batch)
        c_in, c_out = _channels(rng, space), _channels(rng, space)
        size = (d[0], h[0], w[0])
        out = tuple((a[0] + a[4] + a[5] - a[3] * (a[1] - 1) - 1) // a[2] + 1 for a in (d, h, w))
        vol_in, vol_out = size[0] * size[1] * size[2], out[0] * out[1] * out[2]
        taps = d[1] * h[1] * w[1]
        if batch * max(c_in * vol_in, c_out * vol_out) > space.max_elems or \
                batch * c_in * c_out * vol_out * taps > space.max_macs:
            continue
        target = rng.choice(TARGETS)
        lnc = 1 if target == "trn1" else rng.choice((1, 2))
        case = Case(name=f"sweep-{kind}-{seed}-{index}", group="sweep", batch=batch, c_in=c_in, c_out=c_out,
                    input=size, kernel=(d[1], h[1], w[1]), stride=(d[2], h[2], w[2]),
                    padding=(d[4], d[5], h[4], h[5], w[4], w[5]), dilation=(d[3], h[3], w[3]),
                    dtype=rng.choice(DTYPES), grads=rng.choice(GRAD_SUBSETS), lnc=lnc)
        return case, target
    raise RuntimeError(f"sweep: no geometry of {kind} #{index} under {space.max_elems} elements in 100 draws")


def reproducer(case: Case, target: str, mode: str = "exact", seed: int = 0) -> str:
    """The ``conv3d-bwd check`` line that reruns the case (in full, whatever its kind)."""
    def csv(v):
        return ",".join(str(e) for e in v)
    return (f"conv3d-bwd check --batch {case.batch} --channels {case.c_in},{case.c_out} --input {csv(case.input)} "
            f"--kernel {csv(case.kernel)} --stride {csv(case.stride)} --padding {csv(case.padding)} "
            f"--dilation {csv(case.dilation)} --dtype {case.dtype} --grads {csv(case.grads)} --lnc {case.lnc} "
            f"--target {target} --mode {mode} --seed {seed}")


def smallest_tile_fits(case: Case, target: str) -> bool:
    """Whether the per-partition working set at the smallest tiling fits SBUF (``kernels/plan/smallest.py``:
    one-row bands, one W column per band, one C_in channel, C_out tile or tap at a time, dx's dy rows only where
    taps read dy, every pool the kernel would allocate for it). A no-plan beyond this is a limit of the hardware, not a missing method."""
    from conv3d_bwd.kernels.costs import TARGET_FIGURES
    from conv3d_bwd.kernels.geometry import validate
    from conv3d_bwd.kernels.plan.problem import _base
    from conv3d_bwd.kernels.plan.smallest import smallest_working_set

    flags = ["dx" in case.grads, "dw" in case.grads, "db" in case.grads]
    g = validate(case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding, case.dilation, case.dtype,
                 compute_dx=flags[0], compute_dw=flags[1], compute_db=flags[2])
    base = _base(g, case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding, case.dilation, target,
                 case.lnc, *flags)
    return smallest_working_set(g, base)[0] <= TARGET_FIGURES[target].sbuf_usable


@dataclass(frozen=True)
class Outcome:
    """One sweep case: its class ('' = pass), detail, and the planner's estimate against the model."""

    kind: str
    index: int
    case: Case
    target: str
    failure: str = ""          # crash | wrong | no plan | over budget | '' (passed) | too big (not a failure)
    detail: str = ""
    estimated_us: float | None = None
    modelled_us: float | None = None
    label: str = ""
    seconds: float = 0.0

    @property
    def ratio(self) -> float | None:
        if not self.estimated_us or not self.modelled_us:
            return None
        return self.modelled_us / self.estimated_us

    @property
    def outlier(self) -> bool:
        r = self.ratio
        return r is not None and (r > OUTLIER_RATIO or r < 1 / OUTLIER_RATIO)


def _plan(case: Case, target: str):
    from conv3d_bwd.verify.candidates import case_plan

    return case_plan(case, target)


def _run_small(case: Case, target: str, mode: str, seed: int) -> dict:
    from conv3d_bwd.verify.harness import run_case

    result = run_case(case, backend="nkisim", mode=mode, seed=seed, target=target, capture_errors=True)
    if result.error:
        return {"failure": "crash", "detail": result.error, "modelled_us": None}
    if not result.passed:
        bad = [n for n, gr in result.grads.items() if not gr.passed]
        return {"failure": "wrong", "detail": f"{', '.join(bad)} outside the {mode} tolerance",
                "modelled_us": result.modelled_us}
    return {"failure": "", "detail": "", "modelled_us": result.modelled_us}


def _run_large(case: Case, target: str, plan) -> dict:
    from conv3d_bwd import nkisim
    from conv3d_bwd.verify.backends import _kernel

    kernel = _kernel(prefer_emulator=True)
    dt = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[case.dtype]
    specs = [nkisim.TensorSpec(s, dt) for s in (case.dy_shape, case.x_shape, case.w_shape)]
    try:
        res = nkisim.run(kernel, *specs, lnc=case.lnc, target=target, trace_only=True, **case.kernel_kwargs())
    except Exception as exc:  # noqa: BLE001 - a crash is the case's outcome
        return {"failure": "crash", "detail": _error_text(exc), "modelled_us": None}
    modelled = getattr(res.summary, "modelled_us", None)
    if res.peak_sbuf_bytes_per_partition > plan.sbuf_bytes or res.peak_psum_banks > plan.psum_banks:
        return {"failure": "over budget", "modelled_us": modelled,
                "detail": f"peak SBUF {res.peak_sbuf_bytes_per_partition} B / PSUM {res.peak_psum_banks} banks "
                          f"above the plan's {plan.sbuf_bytes} B / {plan.psum_banks}"}
    return {"failure": "", "detail": "", "modelled_us": modelled}


def _error_text(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" (at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def run_one(seed: int, kind: str, index: int, mode: str = "exact") -> Outcome:
    """Draw and run one sweep case (small: in full against the oracle; large: traced only)."""
    from conv3d_bwd.kernels.errors import Conv3dBwdPlanError

    start = time.perf_counter()
    case, target = draw_case(seed, kind, index)
    base = {"kind": kind, "index": index, "case": case, "target": target}
    try:
        plan = _plan(case, target)
    except Conv3dBwdPlanError as exc:
        fits = smallest_tile_fits(case, target)
        return Outcome(**base, failure="no plan" if fits else "too big", detail=str(exc),
                       seconds=time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001
        return Outcome(**base, failure="crash", detail=f"planner: {_error_text(exc)}",
                       seconds=time.perf_counter() - start)
    try:
        got = _run_small(case, target, mode, seed) if kind == "small" else _run_large(case, target, plan)
    except Exception as exc:  # noqa: BLE001 - the harness itself failed: reported, never hidden
        got = {"failure": "crash", "detail": _error_text(exc), "modelled_us": None}
    return Outcome(**base, failure=got["failure"], detail=got["detail"], estimated_us=plan.estimated_us,
                   modelled_us=got["modelled_us"], label=plan.label, seconds=time.perf_counter() - start)


def _run_task(task: tuple[int, str, int, str]) -> Outcome:
    return run_one(*task)


@dataclass
class SweepTotals:
    """Counts of a sweep (per kind and class), its failures and its estimate outliers."""

    counts: Counter = field(default_factory=Counter)
    failures: list[Outcome] = field(default_factory=list)
    outliers: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, o: Outcome) -> None:
        self.counts[(o.kind, o.failure or "pass")] += 1
        if o.failure and o.failure != "too big":
            self.failures.append(o)
        if o.outlier:
            self.outliers.append(o)

    @property
    def n_failures(self) -> int:
        return len(self.failures)


def failure_line(o: Outcome, mode: str, seed: int) -> str:
    return (f"FAIL [{o.failure}] {o.kind} #{o.index}: {reproducer(o.case, o.target, mode, seed)}\n"
            f"    {o.detail.splitlines()[0][:400] if o.detail else ''}")


def outlier_line(o: Outcome) -> str:
    return (f"OUTLIER {o.kind} #{o.index} modelled/estimate {o.ratio:.2f} ({o.modelled_us:.1f} / "
            f"{o.estimated_us:.1f} us) {o.label}: {reproducer(o.case, o.target)}")


def run_sweep(seed: int, small: int, large: int, jobs: int = 1, mode: str = "exact", out=print) -> SweepTotals:
    """Run ``small`` full and ``large`` traced geometries; print each failure (with its ``conv3d-bwd
    check`` reproducer) as it comes, then the outliers and the counts."""
    tasks = [(seed, "small", i, mode) for i in range(small)] + [(seed, "large", i, mode) for i in range(large)]
    totals = SweepTotals()
    start = time.perf_counter()
    done = 0

    def take(o: Outcome) -> None:
        nonlocal done
        done += 1
        totals.add(o)
        if o.failure and o.failure != "too big":
            out(failure_line(o, mode, seed))
        if done % 100 == 0:
            out(f"... {done}/{len(tasks)} cases, {totals.n_failures} failures, "
                f"{time.perf_counter() - start:.0f} s")

    if jobs <= 1:
        for t in tasks:
            take(_run_task(t))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for o in pool.map(_run_task, tasks, chunksize=4):
                take(o)
    totals.seconds = time.perf_counter() - start
    for o in sorted(totals.outliers, key=lambda o: -max(o.ratio, 1 / o.ratio)):
        out(outlier_line(o))
    out(summary_line(totals, small, large))
    return totals


def summary_line(totals: SweepTotals, small: int, large: int) -> str:
    by_class = Counter()
    for (_kind, cls), n in totals.counts.items():
        by_class[cls] += n
    classes = ", ".join(f"{cls} {n}" for cls, n in sorted(by_class.items()))
    return (f"sweep: {small} small (full) + {large} large (traced) geometries in {totals.seconds:.0f} s: "
            f"{classes}; failures {totals.n_failures}; estimate outliers (>{OUTLIER_RATIO}x either way) "
            f"{len(totals.outliers)}")


__all__ = ["LARGE", "OUTLIER_RATIO", "SMALL", "Outcome", "Space", "SweepTotals", "draw_case", "reproducer",
           "run_one", "run_sweep", "smallest_tile_fits"]
