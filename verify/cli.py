"""The ``conv3d-bwd`` command line: check, plan, report, bench.

Exit codes: 0 pass, 1 fail (a result outside its tolerance, or a kernel that crashed), 2 usage
error (bad flag, malformed tuple, impossible geometry, unavailable backend): always one line,
``conv3d-bwd: error: ...``, never a traceback (an internal failure exits 1 with one line; set
CONV3D_BWD_DEBUG=1 to see its traceback).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

PROG = "conv3d-bwd"
TARGETS = ("trn1", "trn2", "trn3")
MODES = ("exact", "stat")
DEBUG_ENV = "CONV3D_BWD_DEBUG"


class UsageError(Exception):
    """A one-line usage error (exit 2)."""


# argparse takes "-1,0,0,0,0,0" for an option flag ("expected one argument"); any dash followed
# by digits, commas and dashes is a value here (no option of ours looks like that), so that a
# negative tuple reaches its parser and gets the rule it breaks.
_NEGATIVE_VALUE = re.compile(r"^-\d[\d,.\s-]*$|^-\.\d")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``conv3d-bwd: error: <message>`` and exit 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _int_tuple(flag: str, length: int, minimum: int, layout: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",")]
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {length} comma-separated integers {layout}") from None
        if len(values) != length:
            raise argparse.ArgumentTypeError(
                f"{text!r} has {len(values)} values; {flag} takes {length}: {layout}")
        if any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= {minimum}")
        return values

    parse.__name__ = flag  # argparse names the type in some messages
    return parse


def _int_at_least(minimum: int, name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


_positive_int = _int_at_least(1, "_positive_int")
_seed = _int_at_least(0, "_seed")
_non_negative_int = _int_at_least(0, "_non_negative_int")


def _grads(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [n for n in names if n not in ("dx", "dw", "db")]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} must be a comma-separated, non-empty subset of dx,dw,db without repeats")
    return names


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(p) for p in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N (e.g. 1/2)") from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= I <= N")
    return index, count


def _regex(text: str):
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None


def _add_geometry(parser: argparse.ArgumentParser) -> None:
    geo = parser.add_argument_group("geometry")
    geo.add_argument("--batch", type=_positive_int, required=True, metavar="B")
    geo.add_argument("--channels", type=_int_tuple("--channels", 2, 1, "C_IN,C_OUT"), required=True,
                     metavar="CIN,COUT")
    geo.add_argument("--input", type=_int_tuple("--input", 3, 1, "D,H,W"), required=True,
                     metavar="D,H,W")
    geo.add_argument("--kernel", type=_int_tuple("--kernel", 3, 1, "KD,KH,KW"), required=True,
                     metavar="KD,KH,KW")
    geo.add_argument("--stride", type=_int_tuple("--stride", 3, 1, "SD,SH,SW"), default=(1, 1, 1),
                     metavar="SD,SH,SW")
    geo.add_argument("--padding", type=_int_tuple("--padding", 6, 0, "DL,DR,HT,HB,WL,WR"),
                     default=(0,) * 6, metavar="DL,DR,HT,HB,WL,WR")
    geo.add_argument("--dilation", type=_int_tuple("--dilation", 3, 1, "DD,DH,DW"), default=(1, 1, 1),
                     metavar="DD,DH,DW")
    geo.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    geo.add_argument("--grads", type=_grads, default=("dx", "dw", "db"), metavar="dx,dw,db")
    geo.add_argument("--lnc", type=int, choices=(1, 2), default=1)


def _backend_help() -> str:
    return "nkisim | nki-simulate | trn (default: $CONV3D_BWD_BACKEND, else nkisim)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="conv3d backward on Trainium: verify, plan, report, bench.")
    sub = parser.add_subparsers(dest="command", metavar="{check,plan,report,bench}")
    sub.required = True

    check = sub.add_parser("check", help="run one geometry against the oracle",
                           description="Run one geometry on a backend against the float64 oracle; "
                           "print the plan, the error metrics per gradient and PASS or FAIL.")
    _add_geometry(check)
    check.add_argument("--mode", choices=MODES, default="exact")
    check.add_argument("--seed", type=_seed, default=0)
    check.add_argument("--backend", default=None, help=_backend_help())
    check.add_argument("--target", choices=TARGETS, default="trn2")
    check.add_argument("--dry", action="store_true", help="with --backend trn: swap only the device "
                       "call for nkisim")
    check.add_argument("--json", action="store_true", help="print the records as JSON")

    plan = sub.add_parser("plan", help="print the planner's choice for a geometry",
                          description="Print Plan.explain() for a geometry (--json: the plan as data).")
    _add_geometry(plan)
    plan.add_argument("--target", choices=TARGETS, default="trn2")
    plan.add_argument("--json", action="store_true")

    report = sub.add_parser("report", help="run a case set and write report.json/.md/.html",
                            description="Run a case set on a backend against the oracle and write "
                            "report.json, report.md and report.html into --out.")
    report.add_argument("--set", dest="case_set", choices=("fast", "default", "full"), default="default")
    report.add_argument("--backend", default=None, help=_backend_help())
    report.add_argument("--out", default="report", metavar="DIR")
    report.add_argument("--shard", type=_shard, default=None, metavar="I/N")
    report.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                        help="merge these shard directories into --out instead of running "
                        "(every shard of a run must be there)")
    report.add_argument("--partial", action="store_true",
                        help="with --merge: write the report even if shards are missing (listed "
                        "in the report)")
    report.add_argument("--mode", choices=("exact", "stat", "both"), default="both")
    report.add_argument("--seed", type=_seed, default=0,
                        help="exact mode uses SEED; stat mode SEED on even-indexed cases and SEED+1 "
                        "(the non-zero-mean inputs) on odd ones")
    report.add_argument("--only", type=_regex, default=None, metavar="REGEX",
                        help="run only the cases whose id matches REGEX (re.search)")
    report.add_argument("--jobs", type=_positive_int, default=min(2, os.cpu_count() or 1))
    report.add_argument("--target", choices=TARGETS, default="trn2")

    bench = sub.add_parser("bench", help="the performance benchmark (verify.bench)",
                           description="Run verify.bench.run_bench and print its table.")
    bench.add_argument("--set", dest="bench_set", default="default")
    bench.add_argument("--target", choices=TARGETS, default="trn2")
    bench.add_argument("--lnc", type=int, choices=(1, 2), default=1)
    bench.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    bench.add_argument("--only", default=None, metavar="REGEX",
                       help="bench only the shapes whose name matches REGEX (re.search)")
    bench.add_argument("--jobs", type=_positive_int, default=None,
                       help="run the candidates in this many processes (default: up to 2, the cores)")
    bench.add_argument("--top", type=_non_negative_int, default=None, metavar="K",
                       help="run only the pick and the K other candidates with the lowest estimates "
                            "(a quick look: pick/best is then of those, not of every candidate)")
    return parser


# ---------------------------------------------------------------------------------------------- check

def _case_from(args):
    from reference import GeometryError
    from verify.cases import CaseError, case_from_args

    try:
        case = case_from_args(args.batch, args.channels, args.input, args.kernel, args.stride,
                              args.padding, args.dilation, args.dtype, args.grads, args.lnc)
        case.geometry()  # the oracle's validation: names the argument, the value and the rule
    except (CaseError, GeometryError) as exc:
        raise UsageError(str(exc)) from None
    return case


WORKING_SET_FACTOR = 16
"""float64 bytes per element of dy, x and w that a check holds at its peak, in units of 8 bytes: the
oracle, its magnitudes and term counts, and the emulator's copies (measured about 12-13 on
B2 C64 8x32x32 and B1 C8 16x64x64; 16 leaves a margin)."""


def _available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable on Linux, else physical memory), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


def _check_fits_in_memory(case) -> None:
    """A usage error, before any allocation, for a geometry this machine cannot hold."""
    from math import prod

    elements = prod(case.dy_shape) + prod(case.x_shape) + prod(case.w_shape)
    need = 8 * WORKING_SET_FACTOR * elements
    available = _available_memory()
    if available is not None and need > available:
        raise UsageError(
            f"geometry: dy {case.dy_shape}, x {case.x_shape}, w {case.w_shape} need about "
            f"{_fmt_bytes(need)} ({WORKING_SET_FACTOR} x 8 bytes per element of dy, x and w for the "
            f"float64 oracle and the emulator); {_fmt_bytes(available)} is available here")


def _plan_or_usage_error(case, target: str, list_rejections: bool = False):
    """The planner's plan; its input errors (ValueError: e.g. LNC2 on trn1) are usage errors."""
    try:
        from kernels.planner import plan_conv3d_bwd
    except ImportError as exc:
        raise UsageError(f"the planner is not available: kernels.planner does not import ({exc})") from None
    try:
        return plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, stride=case.stride,
                               padding=case.padding, dilation=case.dilation, dtype=case.dtype,
                               target=target, lnc=case.lnc, compute_dx="dx" in case.grads,
                               compute_dw="dw" in case.grads, compute_db="db" in case.grads)
    except ValueError as exc:
        raise UsageError(f"the planner rejected the geometry: {_short_plan_error(str(exc), list_rejections)}"
                         ) from None


def _short_plan_error(message: str, list_rejections: bool) -> str:
    """A "no plan fits" message lists every candidate on one line (often 1000+ characters): print
    them one per line on stdout (plan) and keep the error line short."""
    head, sep, tail = message.partition("for this geometry: ")
    rejections = [r for r in tail.split("; ") if r] if sep else []
    if len(rejections) < 2:
        return message
    if list_rejections:
        print("candidate: rejection", *(f"  {r}" for r in rejections), sep="\n")
        where = "listed above"
    else:
        where = "'conv3d-bwd plan' with the same flags lists them"
    return f"{head.rstrip()}: all {len(rejections)} candidates rejected ({where}); first: {rejections[0]}"


def _kernel_input_error_types() -> tuple[type[BaseException], ...]:
    """The kernel's own input-validation errors (ValueError subclasses), when kernels imports."""
    try:
        from kernels import errors
    except ImportError:
        return ()
    return tuple(obj for obj in vars(errors).values()
                 if isinstance(obj, type) and issubclass(obj, ValueError))


# What each step run_case calls does, for the one-line failure message.
_RUN_CASE_STAGES = {"make_input_set": "input generation", "run_kernel": "kernel run",
                    "reference_for": "reference", "compute_metrics": "comparison"}


def _failed_stage(exc: BaseException) -> str:
    """The run_case step ``exc`` came out of ("check" if none is known). Read from the line
    run_case was executing, so a step replaced by a stand-in is still named."""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.name == "run_case":
            return next((stage for call, stage in _RUN_CASE_STAGES.items()
                         if f"{call}(" in (frame.line or "")), "check")
    return "check"


def _print_result(result, out=None) -> None:
    out = out or sys.stdout
    case = result.case
    print(f"case     {case.id}", file=out)
    print(f"backend  {result.backend} ({result.backend_version or 'n/a'}), mode {result.mode}, "
          f"seed {result.seed}, inputs: {result.input_distribution}", file=out)
    if result.plan is not None:
        estimated = result.plan.get("estimated_us")
        print(f"plan     {', '.join(result.methods) or '(no methods listed)'}"
              + (f"; estimated {estimated:.2f} us" if isinstance(estimated, (int, float)) else ""),
              file=out)
    else:
        print(f"plan     unavailable: {result.plan_error}", file=out)
    if result.modelled_us is not None:
        band = result.modelled_band_us
        print(f"modelled {result.modelled_us:.1f} us" + (f" [{band[0]:.1f} .. {band[1]:.1f}]" if band else "")
              + " (nkisim cost model)", file=out)
    print(f"{'grad':<5}{'status':<11}{'K_max':>8}{'max_abs':>12}{'max_rel':>11}{'err/S':>11}"
          f"{'max_ulp':>8}{'err/bound':>11}{'zeros':>7}{'NaN':>5}{'Inf':>5}", file=out)
    for name, grad in result.grads.items():
        m = grad.metrics
        print(f"{name:<5}{m.status:<11}{grad.K_max:>8}{m.max_abs:>12.4g}{m.max_rel:>11.3g}"
              f"{m.max_norm_err:>11.3g}{m.max_ulp:>8}{m.bound_ratio:>11.3g}{m.zero_share:>7.0%}"
              f"{m.nan_count:>5}{m.inf_count:>5}", file=out)
    if not result.passed:
        print(result.failure_message(), file=out)
    for name, grad in result.grads.items():
        if grad.passed and grad.metrics.mistrusted:
            hint = (" (stat mode feeds dense inputs: try --mode stat)" if result.mode == "exact"
                    else "")
            print(f"note     {name} is MISTRUSTED: {grad.metrics.reachable_zero_share:.0%} of the "
                  "reference elements the geometry reaches are zero, so this comparison may be "
                  f"vacuous{hint}", file=out)
    print("PASS" if result.passed else "FAIL", file=out)


def cmd_check(args) -> int:
    from verify.backends import (
        BackendError,
        BackendUnavailable,
        backend_unavailable_reason,
        resolve_backend,
    )
    from verify.harness import run_case

    case = _case_from(args)
    try:
        backend = resolve_backend(args.backend)
    except BackendError as exc:
        raise UsageError(str(exc)) from None
    _check_fits_in_memory(case)
    if backend_unavailable_reason(backend, args.dry) is None:
        # Planner input errors (LNC2 on trn1, ...) are the user's, not a kernel failure. Planning
        # binds nkisim under 'nki', so only once the backend is known to be available.
        _plan_or_usage_error(case, args.target)
    input_errors = _kernel_input_error_types()
    try:
        result = run_case(case, backend=backend, mode=args.mode, seed=args.seed, target=args.target,
                          dry=args.dry)
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    except input_errors as exc:
        raise UsageError(f"the kernel rejected the input: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failure, reported in one line
        print(f"{PROG}: {_failed_stage(exc)} failed on {case.id}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        if args.json:  # still JSON on stdout, so tools reading it get FAIL records, not "FAIL"
            from verify.harness import CaseResult

            failed = CaseResult(case=case, backend=backend, mode=args.mode, seed=args.seed, plan=None,
                                methods=(), grads={}, modelled_us=None, passed=False,
                                target=args.target, error=f"{type(exc).__name__}: {exc}")
            print(json.dumps(failed.to_records(), indent=1))
        else:
            print("FAIL")
        return 1
    if args.json:
        print(json.dumps(result.to_records(), indent=1))
    else:
        _print_result(result)
    return 0 if result.passed else 1


# ----------------------------------------------------------------------------------------------- plan

def cmd_plan(args) -> int:
    case = _case_from(args)
    plan = _plan_or_usage_error(case, args.target, list_rejections=True)
    print(json.dumps(plan.to_dict(), indent=1, default=str) if args.json else plan.explain())
    return 0


# --------------------------------------------------------------------------------------------- report

def _run_task(task: tuple) -> tuple[list[dict], str, float]:
    """One (case, mode, seed) in a worker: its records, its status and its wall time."""
    from verify.harness import CaseResult, run_case

    case, mode, seed, backend, target = task
    start = time.perf_counter()
    try:
        result = run_case(case, backend=backend, mode=mode, seed=seed, target=target,
                          capture_errors=True)
    except Exception as exc:  # noqa: BLE001 - one broken case must not sink the whole report
        result = CaseResult(case=case, backend=backend, mode=mode, seed=seed, plan=None, methods=(),
                            grads={}, modelled_us=None, passed=False, target=target,
                            error=f"harness failure: {type(exc).__name__}: {exc}")
    return result.to_records(), result.status, time.perf_counter() - start


def _fmt_s(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """A plain-text progress bar with ETA on stderr (one line per update when not a terminal)."""

    def __init__(self, weights: Sequence[float], stream=None, width: int = 30):
        self.total_weight = float(sum(weights)) or 1.0
        self.n = len(weights)
        self.done = 0
        self.done_weight = 0.0
        self.failed = 0
        self.start = time.perf_counter()
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def update(self, weight: float, label: str, status: str) -> None:
        self.done += 1
        self.done_weight += weight
        self.failed += status == "FAIL"
        elapsed = time.perf_counter() - self.start
        share = self.done_weight / self.total_weight
        eta = elapsed * (1 - share) / share if share > 0 else 0.0
        filled = int(self.width * self.done / max(1, self.n))
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.n} "
                f"elapsed {_fmt_s(elapsed)} ETA {_fmt_s(eta)} fail {self.failed}  {status:<10} {label}")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            if self.done == self.n:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _report_tasks(args, backend: str) -> list[tuple]:
    from verify.cases import CASE_SETS

    # The position in the whole set (not in the shard) picks the stat seed, so that a sharded run
    # and a whole run give the very same records.
    indexed = list(enumerate(CASE_SETS[args.case_set]))
    if args.only is not None:
        indexed = [(i, case) for i, case in indexed if args.only.search(case.id)]
        if not indexed:
            raise UsageError(f"--only: {args.only.pattern!r} matches no case of set {args.case_set!r}")
    if args.shard:
        index, count = args.shard
        indexed = indexed[index - 1::count]
    modes = MODES if args.mode == "both" else (args.mode,)
    tasks = []
    for i, case in indexed:
        for mode in modes:
            seed = args.seed + (i % 2 if mode == "stat" else 0)
            tasks.append((case, mode, seed, backend, args.target))
    return tasks


def _task_weight(task: tuple) -> float:
    case = task[0]
    return 1.0 + case.macs() / 2e6


def run_report_tasks(tasks: list[tuple], jobs: int, stream=None) -> list[dict]:
    """Run the tasks (biggest first, over a process pool when jobs > 1) with a progress bar."""
    tasks = sorted(tasks, key=_task_weight, reverse=True)
    progress = Progress([_task_weight(t) for t in tasks], stream)
    records: list[dict] = []
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            recs, status, _ = _run_task(task)
            records += recs
            progress.update(_task_weight(task), f"{task[0].id} {task[1]}", status)
        return records
    # fork where the platform has it: workers start at once and inherit backends registered in
    # this process (tests register stand-ins); elsewhere the platform default.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_run_task, task): task for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            recs, status, _ = future.result()
            records += recs
            progress.update(_task_weight(task), f"{task[0].id} {task[1]}", status)
    return records


def _order(records: list[dict]) -> list[dict]:
    from verify.cases import CASE_SETS

    position = {case.id: i for i, case in enumerate(CASE_SETS["full"])}
    grads = {"dx": 0, "dw": 1, "db": 2}
    return sorted(records, key=lambda r: (position.get(r.get("case_id"), 10**6), str(r.get("case_id")),
                                          r.get("mode") != "exact", grads.get(r.get("grad"), 3)))


def source_revision() -> str | None:
    """The project's git revision (``git describe --always --dirty``), so a report says which
    kernel it judged; None outside a git checkout."""
    import subprocess

    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parents[1],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def _prepare_out_dir(out: str) -> None:
    """Create --out up front: a path that cannot hold the report is a usage error before the run,
    not an internal failure after minutes of work."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out: {out!r} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out: {out!r} cannot be made a report directory: "
                         f"{exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--out: {out!r} is not writable")


def cmd_report(args) -> int:
    from verify.backends import BackendError, backend_unavailable_reason, resolve_backend, tool_versions
    from verify.report import write_reports
    from verify.report.json_io import ReportFileError, merge_reports

    if args.merge:
        try:
            records, meta = merge_reports(args.merge, allow_partial=args.partial)
        except ReportFileError as exc:
            raise UsageError(str(exc)) from None
        _prepare_out_dir(args.out)
    else:
        try:
            backend = resolve_backend(args.backend)
        except BackendError as exc:
            raise UsageError(str(exc)) from None
        missing = backend_unavailable_reason(backend)
        if missing:
            raise UsageError(missing)
        tasks = _report_tasks(args, backend)
        _prepare_out_dir(args.out)
        start = time.perf_counter()
        records = run_report_tasks(tasks, args.jobs)
        wall = time.perf_counter() - start
        meta = {
            "set": args.case_set, "backend": backend,
            "modes": list(MODES if args.mode == "both" else (args.mode,)), "seed": args.seed,
            "shard": f"{args.shard[0]}/{args.shard[1]}" if args.shard else None,
            "target": args.target, "jobs": args.jobs,
            "only": args.only.pattern if args.only is not None else None,
            "n_cases": len({t[0].id for t in tasks}), "n_runs": len(tasks), "wall_s": wall,
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tool_versions": tool_versions(backend), "cpu_count": os.cpu_count(),
            "source": source_revision(),
        }
    records = _order(records)
    paths = write_reports(records, meta, args.out)
    failed = sum(r.get("status") == "FAIL" for r in records)
    mistrusted = sum(r.get("status") == "MISTRUSTED" for r in records)
    print(f"{len(records)} gradient results, {failed} fail, {mistrusted} mistrusted; "
          f"wall {float(meta.get('wall_s') or 0):.1f} s; wrote {', '.join(str(p) for p in paths)}")
    if meta.get("missing_shards"):
        print(f"{PROG}: warning: incomplete merge, shards missing: {'; '.join(meta['missing_shards'])}",
              file=sys.stderr)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------- bench

def cmd_bench(args) -> int:
    try:
        from verify.bench import run_bench
    except ImportError as exc:
        raise UsageError(f"the benchmark is not available: verify.bench does not import ({exc})") from None
    try:
        run_bench(set_name=args.bench_set, target=args.target, lnc=args.lnc, json_path=args.json,
                  only=args.only, top=args.top, **({} if args.jobs is None else {"jobs": args.jobs}))
    except (KeyError, ValueError) as exc:
        raise UsageError(f"bench: {exc}") from None
    return 0


COMMANDS = {"check": cmd_check, "plan": cmd_plan, "report": cmd_report, "bench": cmd_bench}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``conv3d-bwd`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and friends
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # An internal error (not the user's input): one line, and the traceback on request.
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"{PROG}: error: internal failure: {type(exc).__name__}: {exc} "
              f"(set {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
