"""The performance bench: modelled time of conv3d_bwd against the TensorE roofline.

For each bench shape: the planner's pick and every other feasible candidate run under nkisim in
trace-only mode with the plan forced; each gets a modelled time from nkisim's cost model, which
is set beside the roofline ``max(FLOPs / peak, compulsory bytes / DMA bandwidth)`` and the
planner's own estimate. ``run_bench`` prints a table, returns one dict per shape and, given
``json_path``, writes the JSON and a roofline plot (PNG next to it).

    python -m conv3d_bwd.verify.bench [--set default] [--target trn2] [--lnc 1] [--json PATH] [--top K]

``top`` (a development aid) runs only the pick and the K feasible candidates with the lowest planner
estimates; the table then says so, and pick/best is the best *of those*, not of every candidate.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from conv3d_bwd.verify.bench_shapes import BenchShape, load_shapes, realworld_shapes

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
NKI_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class BenchError(ValueError):
    """A bad bench argument (names the argument, the value and the rule)."""


_P1 = (1, 1, 1, 1, 1, 1)

# The bench shapes: bf16, trn2, LNC1, all three gradients.
BENCH_SHAPES: tuple[BenchShape, ...] = (
    BenchShape("vae3d_c128", 1, 128, 128, (4, 32, 32), (3, 3, 3), padding=_P1),
    BenchShape("unet3d_c64", 2, 64, 64, (8, 32, 32), (3, 3, 3), padding=_P1),
    BenchShape("down_s2", 2, 64, 128, (8, 32, 32), (3, 3, 3), stride=(2, 2, 2), padding=_P1),
    BenchShape("pointwise_c256", 4, 256, 512, (4, 16, 16), (1, 1, 1)),
    BenchShape("temporal_k311", 1, 256, 256, (16, 16, 16), (3, 1, 1), padding=(1, 1, 0, 0, 0, 0)),
    BenchShape("dilated_d2", 1, 64, 64, (8, 32, 32), (3, 3, 3), dilation=(2, 2, 2),
               padding=(2, 2, 2, 2, 2, 2)),
    BenchShape("stem_k377", 2, 3, 64, (16, 64, 64), (3, 7, 7), stride=(1, 2, 2),
               padding=(1, 1, 3, 3, 3, 3)),
    BenchShape("wide_c512", 1, 512, 512, (2, 16, 16), (3, 3, 3), padding=_P1),
)

# Small shapes for an end-to-end check of the bench machinery (not of its timings).
SMOKE_SHAPES: tuple[BenchShape, ...] = (
    BenchShape("smoke_k3", 1, 16, 32, (2, 6, 6), (3, 3, 3), padding=_P1),
    BenchShape("smoke_pointwise", 1, 32, 16, (2, 4, 4), (1, 1, 1)),
    BenchShape("smoke_s2", 1, 8, 16, (4, 6, 6), (3, 3, 3), stride=(2, 2, 2), padding=_P1),
)
SMOKE_TOP = 1
"""The smoke set models the pick and its best-estimated rival only (unless ``top`` says otherwise):
two traces per shape keep it to seconds, and still exercise the pick/best comparison."""
SMOKE_NOTE = ("smoke set: tiny shapes that check the bench machinery end to end (plan, force each "
              "plan, trace, model, table, JSON) in seconds. Their times, efficiency, pick/best and "
              "estimate error say nothing about the kernel's performance: fixed DMA and "
              "instruction overheads dominate shapes this small, and the planner's estimate is "
              "not tuned for them. Use the default set for performance.")

# the realworld layers live as data in verify/shape_sets/realworld.json
BENCH_SETS: dict[str, tuple[BenchShape, ...]] = {"default": BENCH_SHAPES, "smoke": SMOKE_SHAPES,
                                                 "realworld": realworld_shapes()}

# Efficiency targets per shape (default 0.5), geometric mean >= 0.6.
EFFICIENCY_TARGETS = {"vae3d_c128": 0.75, "wide_c512": 0.75, "stem_k377": 0.3}
DEFAULT_EFFICIENCY_TARGET = 0.5
DEFAULT_JOBS = min(2, os.cpu_count() or 1)   # candidate runs in parallel (the machines have 2 cores)
GEOMEAN_TARGET = 0.6


# ------------------------------------------------------------------------------ roofline


def useful_flops(shape: BenchShape) -> int:
    """2*B*C_in*C_out*prod(out)*prod(kernel) for each of dx and dw (db is negligible)."""
    g = shape.geometry
    per_grad = 2 * shape.batch * shape.c_in * shape.c_out * math.prod(g.out_size) * math.prod(shape.kernel)
    return 2 * per_grad


def compulsory_bytes(shape: BenchShape) -> int:
    """x, dy and filters read once; dx, dw and db written once (in the input dtype)."""
    g = shape.geometry
    elems = sum(math.prod(s) for s in (g.x_shape, g.dy_shape, g.w_shape, g.dx_shape, g.dw_shape,
                                        g.db_shape))
    return elems * DTYPE_BYTES[shape.dtype]


def roofline_us(shape: BenchShape, target: str, lnc: int) -> float:
    """max(FLOPs / peak, compulsory bytes / DMA bandwidth) over ``lnc`` cores, in us."""
    from conv3d_bwd.nkisim.cost import get_target

    hw = get_target(target)
    peak = hw.tensor_peak_flops(fp32=shape.dtype == "fp32") * lnc
    bandwidth = hw.dma_bytes_per_ns * 1e9 * lnc
    return max(useful_flops(shape) / peak, compulsory_bytes(shape) / bandwidth) * 1e6


# ------------------------------------------------------------------------------ running


def _plan_key(plan) -> str:
    """The plan's choices as text (its candidate table left out: every alternative carries the whole
    table, which made keying a thousand alternatives quadratic, most of a smoke bench's time)."""
    as_dict = plan.to_dict()
    as_dict.pop("candidates", None)
    return json.dumps(as_dict, sort_keys=True, default=str)


def _plan_estimate_us(plan) -> float | None:
    value = getattr(plan, "estimated_us", None)
    if value is None:
        value = plan.to_dict().get("estimated_us")
    return float(value) if value is not None else None


def _model(shape: BenchShape, plan, target: str, lnc: int, band: bool = False) -> dict:
    """Run the kernel under ``plan`` in trace-only mode; the measured figures of one plan."""
    from conv3d_bwd import nkisim
    from conv3d_bwd.kernels import conv3d_bwd
    from conv3d_bwd.kernels.plan import forced_plan
    from conv3d_bwd.nkisim.cost import get_target

    g = shape.geometry
    dtype = NKI_DTYPES[shape.dtype]
    specs = [nkisim.TensorSpec(s, dtype) for s in (g.dy_shape, g.x_shape, g.w_shape)]
    peak = get_target(target).tensor_peak_flops(fp32=shape.dtype == "fp32")
    start = time.perf_counter()
    with forced_plan(plan):
        result = nkisim.run(conv3d_bwd, *specs, stride=shape.stride, padding=shape.padding,
                            dilation=shape.dilation, lnc=lnc, target=target, trace_only=True, cost_band=band)
    s = result.summary
    roof = roofline_us(shape, target, lnc)
    low, high = s.band_us
    return {
        "methods": sorted(plan.methods()),
        "estimated_us": _plan_estimate_us(plan),
        "modelled_us": s.modelled_us,
        # the cost model's uncertainty band (every assumption at its optimistic / pessimistic end)
        "modelled_band_us": [low, high] if band else None,
        "efficiency": roof / s.modelled_us if s.modelled_us > 0 else 0.0,
        "efficiency_pessimistic": roof / high if band and high > 0 else None,
        "tensor_util": useful_flops(shape) / (s.modelled_us * 1e-6 * peak * lnc) if s.modelled_us else 0.0,
        "tensor_busy": s.tensor_util,
        "engine_busy_us": dict(s.engine_busy_us),
        "stall_us": {e: dict(w) for e, w in getattr(s, "stall_us", {}).items()},
        "op_busy_us": dict(getattr(s, "op_busy_us", {})),
        "hbm_bytes": s.hbm_read_bytes + s.hbm_write_bytes,
        "instructions": sum(s.instr_counts.values()),
        "peak_sbuf_bytes_per_partition": s.peak_sbuf_bytes_per_partition,
        "peak_psum_banks": s.peak_psum_banks,
        "emulator_seconds": time.perf_counter() - start,
    }


# the pick's measured figures, copied onto the shape record (None when planning fails)
PICK_FIELDS = ("modelled_us", "modelled_band_us", "efficiency", "efficiency_pessimistic", "tensor_util",
               "tensor_busy", "engine_busy_us", "stall_us", "op_busy_us", "hbm_bytes", "instructions")


def bench_shape(shape: BenchShape, target: str = "trn2", lnc: int = 1,
                log: Callable[[str], None] | None = None, jobs: int = 1, top: int | None = None) -> dict:
    """Plan, run the pick and every feasible candidate (in ``jobs`` processes; with ``top``, only the
    ``top`` with the lowest estimates besides the pick), and gather the figures of one shape."""
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    lnc = shape.lnc or lnc   # a layer file may fix a layer's LNC degree
    g = shape.geometry
    roof = roofline_us(shape, target, lnc)
    record: dict = {
        "name": shape.name,
        "geometry": {**asdict(shape), "dy_shape": g.dy_shape, "x_shape": g.x_shape,
                     "w_shape": g.w_shape, "out_size": g.out_size},
        "target": target, "lnc": lnc,
        "roofline_us": roof,
        "flops": useful_flops(shape),
        "compulsory_bytes": compulsory_bytes(shape),
    }
    try:
        start = time.perf_counter()
        plan = plan_conv3d_bwd(g.dy_shape, g.x_shape, g.w_shape, stride=shape.stride,
                               padding=shape.padding, dilation=shape.dilation, dtype=shape.dtype,
                               target=target, lnc=lnc)
        record["plan_seconds"] = time.perf_counter() - start   # (0 when the plan was cached)
    except ValueError as exc:  # the planner's errors are ValueErrors; report, do not abort the set
        if log:
            log(f"  {shape.name}: planning FAILED {type(exc).__name__}: {exc}")
        record.update(plan=None, planner_estimate_us=None, candidates=[], best_candidate_us=None,
                      error=f"planning failed: {type(exc).__name__}: {exc}")
        record.update(dict.fromkeys(PICK_FIELDS))
        record["feasible_candidates"] = 0
        return record
    record["planner_estimate_us"] = _plan_estimate_us(plan)
    plans = {_plan_key(plan): plan}   # the pick first, then every other feasible candidate once
    for cand in plan.feasible_candidates():
        plans.setdefault(_plan_key(cand), cand)
    record["plan"] = plan.to_dict()   # (after feasible_candidates: its table holds every estimate)
    record["feasible_candidates"] = len(plans)
    chosen = list(plans.values())
    if top is not None:   # the pick, then the others by estimate (label order breaks ties)
        rest = sorted(chosen[1:], key=lambda p: (_plan_estimate_us(p) or math.inf, _plan_key(p)))
        chosen = [chosen[0], *rest[:top]]
    candidates = _run_candidates(shape, chosen, target, lnc, jobs)
    for i, entry in enumerate(candidates):
        entry["is_pick"] = i == 0
        if log:
            status = (f"{entry['modelled_us']:.1f} us" if entry.get("modelled_us")
                      else f"FAILED {entry.get('error')}")
            log(f"  {shape.name}: {entry['label']}: {status}")
    pick = candidates[0]
    record["candidates"] = candidates
    for field in PICK_FIELDS:
        record[field] = pick.get(field)
    record["error"] = pick.get("error")
    timed = [c["modelled_us"] for c in candidates if c.get("modelled_us")]
    record["best_candidate_us"] = min(timed) if timed else None
    if pick.get("modelled_us") and timed:
        record["pick_over_best"] = pick["modelled_us"] / min(timed)
    if pick.get("modelled_us") and record["planner_estimate_us"]:
        record["estimate_error"] = record["planner_estimate_us"] / pick["modelled_us"] - 1.0
    return record


def _run_candidates(shape: BenchShape, plans: list, target: str, lnc: int, jobs: int) -> list[dict]:
    """Each plan's figures, in order; ``jobs`` > 1 runs them in worker processes (each run is an
    independent, deterministic trace, so the figures do not depend on ``jobs``)."""
    args = [(shape, p, target, lnc, i == 0) for i, p in enumerate(plans)]   # the band for the pick only
    if jobs <= 1 or len(plans) <= 1:
        return [_run_candidate(*a) for a in args]
    with ProcessPoolExecutor(max_workers=min(jobs, len(plans))) as pool:
        return list(pool.map(_run_candidate, *zip(*args)))


def _run_candidate(shape, plan, target, lnc, band: bool = False) -> dict:
    try:
        entry = _model(shape, plan, target, lnc, band)
    except Exception as exc:  # noqa: BLE001 -- a failing candidate is reported, not fatal
        entry = {"methods": sorted(plan.methods()), "estimated_us": _plan_estimate_us(plan),
                 "modelled_us": None, "error": f"{type(exc).__name__}: {exc}"}
    plan_dict = plan.to_dict()
    plan_dict.pop("candidates", None)  # the shape record carries the list once
    entry["plan"] = plan_dict
    entry["label"] = plan_dict.get("label") or ",".join(entry["methods"])
    entry["planner_engine_us"] = plan_dict.get("engine_us")
    return entry


# ------------------------------------------------------------------------------ report


def _fmt(value, spec: str, missing: str = "-") -> str:
    """``value`` formatted by ``spec``; ``missing`` right-aligned to the spec's width when None."""
    if value is None:
        digits = "".join(itertools.takewhile(str.isdigit, spec.lstrip("+")))
        return missing.rjust(int(digits) if digits else 0)
    return format(value, spec)


def format_table(records: Sequence[dict], checks: bool = True, candidates: bool = True) -> str:
    """The bench table: one row per shape (the planner's pick), its candidates, the target checks."""
    head = (f"{'shape':<16}{'pick':<44}{'est us':>9}{'model us':>10}{'est err':>8}{'roof us':>9}"
            f"{'eff':>6}{'TE util':>8}{'HBM MB':>8}{'min MB':>8}{'cands':>10}{'best us':>9}{'pick/best':>10}")
    lines = [head, "-" * len(head)]
    for r in records:
        methods = (",".join(m.split(":", 1)[-1] for m in r["candidates"][0]["methods"])
                   if r["candidates"] else "(none)")
        lines.append(
            f"{r['name']:<16}{methods[:43]:<44}{_fmt(r['planner_estimate_us'], '9.1f')}"
            f"{_fmt(r['modelled_us'], '10.1f')}{_fmt(r.get('estimate_error'), '+8.0%')}"
            f"{r['roofline_us']:9.1f}{_fmt(r['efficiency'], '6.2f')}{_fmt(r['tensor_util'], '8.1%')}"
            f"{_fmt(r['hbm_bytes'] and r['hbm_bytes'] / 1e6, '8.2f')}{r['compulsory_bytes'] / 1e6:8.2f}"
            f"{_cands(r):>10}{_fmt(r.get('best_candidate_us'), '9.1f')}"
            f"{_fmt(r.get('pick_over_best'), '10.2f')}")
        if r.get("error"):
            lines.append(f"{'':<16}FAILED: {r['error'][:300]}")
        if r.get("modelled_band_us"):
            lines.append(f"{'':<16}pick: {band_text(r['modelled_us'], r['modelled_band_us'])}, efficiency "
                         f"{r['efficiency']:.2f} (pessimistic {r['efficiency_pessimistic']:.2f})")
        waits = (r.get("stall_us") or {}).get("tensor") or {}
        if waits:
            lines.append(f"{'':<16}pick: TensorE idle waiting for " + ", ".join(
                f"{producer} {us:.1f} us" for producer, us in sorted(waits.items(), key=lambda kv: -kv[1])))
        if candidates:
            lines.extend(_candidate_lines(r))
    if checks:
        lines.append("")
        lines.extend(target_checks(records))
    return "\n".join(lines)


def band_text(modelled_us: float, band_us: Sequence[float]) -> str:
    """``modelled 125.5 us [110.2 .. 161.0]``: the central value and the cost model's band."""
    return f"modelled {modelled_us:.1f} us [{band_us[0]:.1f} .. {band_us[1]:.1f}]"


def _cands(record: dict) -> str:
    """The candidates run, as 'run/feasible' when the bench ran only some of them (``top``)."""
    run, feasible = len(record["candidates"]), record.get("feasible_candidates", len(record["candidates"]))
    return str(run) if run == feasible else f"{run}/{feasible}"


def _candidate_lines(record: dict) -> list[str]:
    """Every candidate of one shape, fastest first: times, efficiency and busy time per engine."""
    if not record["candidates"]:
        return []
    engines = ("tensor", "vector", "scalar", "gpsimd", "dma")
    lines = [f"{'':<4}{'':<2}{'candidate':<86}{'est us':>9}{'model us':>10}{'eff':>6}{'TE util':>8}"
             "   busy us: " + " ".join(f"{e[:3]:>7}" for e in engines)]
    order = sorted(record["candidates"], key=lambda c: (c.get("modelled_us") is None, c.get("modelled_us") or 0))
    for c in order:
        mark = "*" if c.get("is_pick") else " "
        label = str(c.get("label", ""))[:85]
        if c.get("modelled_us") is None:
            lines.append(f"{'':<4}{mark:<2}{label:<86}{_fmt(c.get('estimated_us'), '9.1f')}"
                         f"  FAILED: {str(c.get('error'))[:100]}")
            continue
        busy = c.get("engine_busy_us") or {}
        lines.append(f"{'':<4}{mark:<2}{label:<86}{_fmt(c.get('estimated_us'), '9.1f')}"
                     f"{c['modelled_us']:10.1f}{_fmt(c.get('efficiency'), '6.2f')}"
                     f"{_fmt(c.get('tensor_util'), '8.1%')}           "
                     + " ".join(f"{busy.get(e, 0.0):7.1f}" for e in engines))
    return lines


def target_checks(records: Sequence[dict]) -> list[str]:
    """The bench targets: per-shape efficiency, geometric mean, pick within 10 %, estimate within 15 %."""
    out = []
    effs = []
    for r in records:
        eff = r.get("efficiency")
        goal = EFFICIENCY_TARGETS.get(r["name"], DEFAULT_EFFICIENCY_TARGET)
        checks = [f"eff {_fmt(eff, '.2f')} >= {goal}: {'ok' if eff and eff >= goal else 'MISSED'}"]
        if eff:
            effs.append(eff)
        ratio = r.get("pick_over_best")
        pruned = len(r["candidates"]) < r.get("feasible_candidates", len(r["candidates"]))
        checks.append(f"pick/best {_fmt(ratio, '.2f')} <= 1.10: {'ok' if ratio and ratio <= 1.10 else 'MISSED'}"
                      + (f" (of {_cands(r)} candidates: not the full check)" if pruned else ""))
        err = r.get("estimate_error")
        checks.append(f"|estimate error| {_fmt(err, '.0%')} <= 15%: "
                      f"{'ok' if err is not None and abs(err) <= 0.15 else 'MISSED'}")
        out.append(f"{r['name']:<16}" + "; ".join(checks))
    if effs:
        geo = math.exp(sum(map(math.log, effs)) / len(effs))
        complete = len(effs) == len(records)
        out.append(f"geometric mean efficiency {geo:.3f} >= {GEOMEAN_TARGET}: "
                   f"{'ok' if geo >= GEOMEAN_TARGET and complete else 'MISSED'}"
                   + ("" if complete else " (some shapes failed)"))
    low = [r["efficiency_pessimistic"] for r in records if r.get("efficiency_pessimistic")]
    if low and len(low) == len(effs):
        out.append(f"geometric mean efficiency at the cost model's pessimistic end "
                   f"{math.exp(sum(map(math.log, low)) / len(low)):.3f}")
    return out


def plot_roofline(records: Sequence[dict], path: Path, target: str, lnc: int) -> None:
    """Achieved TFLOP/s against arithmetic intensity, with the roofline of ``target``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from conv3d_bwd.nkisim.cost import get_target

    hw = get_target(target)
    peak = hw.tensor_peak_flops() * lnc / 1e12
    bw = hw.dma_bytes_per_ns * lnc  # GB/s
    fig, ax = plt.subplots(figsize=(8, 5.5))
    intensities = [r["flops"] / r["compulsory_bytes"] for r in records] or [1.0]
    lo, hi = min(intensities) / 4, max(intensities) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw / 1e3) for x in xs], "k-", label=f"roofline {target} x{lnc}")
    for i, (r, ai) in enumerate(zip(records, intensities, strict=True)):
        for c in r["candidates"]:
            if c.get("modelled_us"):
                tf = r["flops"] / (c["modelled_us"] * 1e-6) / 1e12
                ax.plot(ai, tf, "o" if c.get("is_pick") else ".", color="C0" if c.get("is_pick") else "0.6",
                        markersize=7 if c.get("is_pick") else 4)
        if r.get("modelled_us"):
            ax.annotate(r["name"], (ai, r["flops"] / (r["modelled_us"] * 1e-6) / 1e12),
                        textcoords="offset points", xytext=(4, 4 - 11 * (i % 3)), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (useful FLOPs / compulsory HBM byte)")
    ax.set_ylabel("achieved TFLOP/s (useful FLOPs / modelled time)")
    ax.set_title("conv3d_bwd on nkisim's cost model (blue: planner's pick, grey: other candidates)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def select_shapes(set_name: str, only: str | None = None) -> tuple[BenchShape, ...]:
    """The shapes of ``set_name`` whose name matches the regular expression ``only`` (re.search)."""
    if set_name not in BENCH_SETS:
        raise BenchError(f"set_name={set_name!r}: must be one of {sorted(BENCH_SETS)}")
    return _matching(BENCH_SETS[set_name], only, f"set {set_name!r}")


def _matching(shapes: tuple[BenchShape, ...], only: str | None, origin: str) -> tuple[BenchShape, ...]:
    """The shapes whose name matches the regular expression ``only`` (all when None)."""
    if only is None:
        return shapes
    try:
        pattern = re.compile(only)
    except re.error as exc:
        raise BenchError(f"only={only!r}: must be a regular expression ({exc})") from None
    chosen = tuple(s for s in shapes if pattern.search(s.name))
    if not chosen:
        raise BenchError(f"only={only!r}: matches no shape of {origin} "
                         f"({', '.join(s.name for s in shapes)})")
    return chosen


def run_bench(set_name: str = "default", target: str = "trn2", lnc: int = 1,
              json_path: str | Path | None = None, verbose: bool = False,
              only: str | None = None, jobs: int = DEFAULT_JOBS, top: int | None = None,
              shapes_path: str | Path | None = None) -> list[dict]:
    """Bench the shapes of ``set_name``, or of the layer file ``shapes_path`` (verify.bench_shapes), those
    matching ``only``; with ``top``, only the pick and the ``top`` best-estimated other candidates; print
    the table; write JSON and the plot if asked."""
    if shapes_path is not None:
        set_name = f"file {shapes_path}"
        shapes = _matching(load_shapes(shapes_path), only, set_name)
    else:
        shapes = select_shapes(set_name, only)
    if lnc not in (1, 2):
        raise BenchError(f"lnc={lnc!r}: must be 1 or 2")
    if not (isinstance(jobs, int) and jobs >= 1):
        raise BenchError(f"jobs={jobs!r}: must be an integer >= 1")
    if top is not None and not (isinstance(top, int) and top >= 0):
        raise BenchError(f"top={top!r}: must be an integer >= 0")
    log = print if verbose else None
    if set_name == "smoke" and top is None:
        top = SMOKE_TOP
    records = [bench_shape(shape, target, lnc, log, jobs, top) for shape in shapes]
    print(f"conv3d_bwd bench: set {set_name}{'' if only is None else f' (only {only!r})'}, target {target}, "
          f"lnc {lnc}{' (or as the layer file sets it)' if any(sh.lnc for sh in shapes) else ''} "
          "(nkisim cost model; * marks the planner's pick)"
          + ("" if top is None else f"; top {top}: the pick and the {top} best-estimated other candidates only"))
    # the targets are stated for the whole default set
    print(format_table(records, checks=set_name == "default" and only is None))
    if set_name == "smoke":
        print(SMOKE_NOTE)
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records, indent=2, default=str))
        png = path.with_suffix(".png")
        plot_roofline(records, png, target, lnc)
        print(f"wrote {path} and {png}")
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="conv3d_bwd performance bench on nkisim's cost model")
    parser.add_argument("--set", dest="set_name", default="default", choices=sorted(BENCH_SETS))
    parser.add_argument("--shapes", dest="shapes_path", default=None, metavar="FILE",
                        help="bench the layers of a JSON layer file (verify.bench_shapes) instead of a set")
    parser.add_argument("--target", default="trn2", choices=("trn1", "trn2", "trn3"))
    parser.add_argument("--lnc", type=int, default=1, choices=(1, 2))
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--verbose", action="store_true", help="print each candidate as it runs")
    parser.add_argument("--only", default=None, metavar="REGEX", help="only the shapes whose name matches")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="candidates run in this many processes")
    parser.add_argument("--top", type=int, default=None, metavar="K",
                        help="run only the pick and the K best-estimated other candidates")
    args = parser.parse_args(argv)
    run_bench(args.set_name, args.target, args.lnc, args.json_path, args.verbose, args.only, args.jobs, args.top,
              args.shapes_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
