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
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

from conv3d_bwd.verify.plan_table import DEFAULT_TOP as DEFAULT_PLAN_TOP

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


def _shown_default(value) -> str:
    """A default as the user would type it: tuples comma-separated, like the flags take them."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


class _HelpFormatter(argparse.HelpFormatter):
    """Every flag's help ends with its default (as typed on the command line), unless the help
    already says it or the flag is a switch or required."""

    def _get_help_string(self, action):  # type: ignore[override]
        text = action.help or ""
        if ("(default:" in text or action.required or action.default in (None, argparse.SUPPRESS)
                or isinstance(action.default, bool) or not action.option_strings):
            return text
        return f"{text} (default: {_shown_default(action.default).replace('%', '%%')})"


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
    geo = parser.add_argument_group("geometry (layouts: x [B,C_in,D,H,W], dy [B,C_out,...], "
                                     "filters [KD,KH,KW,C_in,C_out])")
    geo.add_argument("--batch", type=_positive_int, required=True, metavar="B",
                     help="batch size (required)")
    geo.add_argument("--channels", type=_int_tuple("--channels", 2, 1, "C_IN,C_OUT"), required=True,
                     metavar="CIN,COUT", help="input and output channels (required)")
    geo.add_argument("--input", type=_int_tuple("--input", 3, 1, "D,H,W"), required=True,
                     metavar="D,H,W", help="input spatial size (required)")
    geo.add_argument("--kernel", type=_int_tuple("--kernel", 3, 1, "KD,KH,KW"), required=True,
                     metavar="KD,KH,KW", help="filter size (required)")
    geo.add_argument("--stride", type=_int_tuple("--stride", 3, 1, "SD,SH,SW"), default=(1, 1, 1),
                     metavar="SD,SH,SW", help="stride per axis")
    geo.add_argument("--padding", type=_int_tuple("--padding", 6, 0, "DL,DR,HT,HB,WL,WR"),
                     default=(0,) * 6, metavar="DL,DR,HT,HB,WL,WR",
                     help="zero padding before and after each axis, D first (PyTorch's F.pad "
                     "lists W first)")
    geo.add_argument("--dilation", type=_int_tuple("--dilation", 3, 1, "DD,DH,DW"), default=(1, 1, 1),
                     metavar="DD,DH,DW", help="filter dilation per axis")
    geo.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16",
                     help="input and output dtype (accumulation is fp32 in PSUM)")
    geo.add_argument("--grads", type=_grads, default=("dx", "dw", "db"), metavar="dx,dw,db",
                     help="the gradients to compute, any non-empty subset")
    geo.add_argument("--lnc", type=int, choices=(1, 2), default=1,
                     help="logical NeuronCores the kernel runs on (2 needs trn2 or later)")


def _backend_help() -> str:
    return ("where the kernel runs: nkisim (this project's emulator), nki-simulate (the Neuron "
            "package's simulator) or trn (a Trainium device) (default: $CONV3D_BWD_BACKEND, else "
            "nkisim)")


_TARGET_HELP = "the Trainium generation to plan for and to model"


def _bench_set_names() -> tuple[str, ...]:
    try:
        from conv3d_bwd.verify.bench import BENCH_SETS
    except ImportError:  # cmd_bench then says why the bench is unavailable
        return ("default", "smoke")
    return tuple(BENCH_SETS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, formatter_class=_HelpFormatter,
                     description="conv3d backward on Trainium: verify, plan, report, bench.")
    from conv3d_bwd.verify.version import project_version

    parser.add_argument("--version", action="version", version=f"{PROG} {project_version()}")
    sub = parser.add_subparsers(dest="command", metavar="{check,plan,report,bench,sweep}")
    sub.required = True

    check = sub.add_parser("check", help="run one geometry against the oracle",
                           formatter_class=_HelpFormatter,
                           description="Run one geometry on a backend against the float64 oracle; "
                           "print the plan, the error metrics per gradient and PASS or FAIL.")
    _add_geometry(check)
    check.add_argument("--mode", choices=(*MODES, "both"), default="exact",
                       help="exact: integer inputs, bit equality with the rounded oracle; stat: "
                       "normal inputs, every element within its error bound; both: one after the "
                       "other")
    check.add_argument("--seed", type=_seed, default=0, help="the inputs' random seed")
    check.add_argument("--backend", default=None, help=_backend_help())
    check.add_argument("--target", choices=TARGETS, default="trn2", help=_TARGET_HELP)
    check.add_argument("--dry", action="store_true", help="with --backend trn: swap only the device "
                       "call for nkisim")
    check.add_argument("--json", action="store_true", help="print the records as JSON")
    check.add_argument("--timeline", default=None, metavar="PATH",
                       help="write the modelled schedule to PATH (Chrome trace-event JSON: open it "
                       "in ui.perfetto.dev or chrome://tracing); nkisim backend only")

    plan = sub.add_parser("plan", help="print the planner's choice for a geometry",
                          formatter_class=_HelpFormatter,
                          description="Print the planner's candidates for a geometry, sorted by "
                          "estimate, the pick marked *, and the pick's gap to the runner-up "
                          "(--json: the plan as data).")
    _add_geometry(plan)
    plan.add_argument("--target", choices=TARGETS, default="trn2", help=_TARGET_HELP)
    plan.add_argument("--top", type=_positive_int, default=DEFAULT_PLAN_TOP, metavar="N",
                      help="show the N feasible candidates with the lowest estimates")
    plan.add_argument("--all", dest="show_all", action="store_true",
                      help="show every candidate, the rejected ones with the reason")
    plan.add_argument("--json", action="store_true", help="print the plan and its candidates as JSON")

    report = sub.add_parser("report", help="run a case set and write report.json/.md/.html",
                            formatter_class=_HelpFormatter, description="Run a case set on a backend against the oracle and write "
                            "report.json, report.md and report.html into --out.")
    report.add_argument("--set", dest="case_set", choices=("fast", "default", "full"), default="default",
                        help="the case set: fast (every group once), default (every group), full "
                        "(default plus bigger and cross-dtype cases)")
    report.add_argument("--backend", default=None, help=_backend_help())
    report.add_argument("--out", default="report", metavar="DIR",
                        help="the directory for report.json, report.md, report.html and timelines/")
    report.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                        help="run only shard I of N (every N-th case from the I-th; merge the "
                        "shards with --merge) (default: the whole set)")
    report.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                        help="merge these shard directories into --out instead of running "
                        "(every shard of a run must be there)")
    report.add_argument("--partial", action="store_true",
                        help="with --merge: write the report even if shards are missing (listed "
                        "in the report)")
    report.add_argument("--mode", choices=("exact", "stat", "both"), default="both",
                        help="exact: integer inputs, bit equality; stat: normal inputs, error bound")
    report.add_argument("--seed", type=_seed, default=0,
                        help="exact mode uses SEED; stat mode SEED on even-indexed cases and SEED+1 "
                        "(the non-zero-mean inputs) on odd ones")
    report.add_argument("--only", type=_regex, default=None, metavar="REGEX",
                        help="run only the cases whose id matches REGEX (re.search)")
    report.add_argument("--jobs", type=_positive_int, default=min(2, os.cpu_count() or 1),
                        help="cases run in this many processes")
    report.add_argument("--target", choices=TARGETS, default="trn2", help=_TARGET_HELP)
    report.add_argument("--no-timelines", dest="timelines", action="store_false",
                        help="do not write each case's modelled schedule to DIR/timelines/ (nkisim "
                        "backend; the HTML report draws them)")

    bench = sub.add_parser("bench", help="the performance benchmark (verify.bench)",
                           formatter_class=_HelpFormatter,
                           description="Model the planner's pick and the other feasible candidates "
                           "of each bench shape on nkisim's cost model and print the table. The "
                           "smoke set checks the bench machinery in seconds (its figures say "
                           "nothing about performance).")
    bench.add_argument("--set", dest="bench_set", default=None, choices=_bench_set_names(),
                       help="default: the performance shapes and targets; realworld: twelve layers of "
                       "published 3D networks; smoke: tiny shapes, the pick and its best-estimated rival "
                       "only (when neither --set nor --shapes is given: default)")
    bench.add_argument("--shapes", default=None, metavar="FILE",
                       help="bench the layers of a JSON layer file instead of a set (see verify/bench_shapes.py)")
    bench.add_argument("--target", choices=TARGETS, default="trn2", help=_TARGET_HELP)
    bench.add_argument("--lnc", type=int, choices=(1, 2), default=1,
                       help="logical NeuronCores per kernel")
    bench.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    bench.add_argument("--only", default=None, metavar="REGEX",
                       help="bench only the shapes whose name matches REGEX (re.search)")
    bench.add_argument("--jobs", type=_positive_int, default=None,
                       help="run the candidates in this many processes (default: up to 2, the cores)")
    bench.add_argument("--top", type=_non_negative_int, default=None, metavar="K",
                       help="run only the pick and the K other candidates with the lowest estimates "
                            "(a quick look: pick/best is then of those, not of every candidate) "
                            "(default: every candidate; the smoke set: 1)")
    _add_sweep(sub)
    return parser


def _add_sweep(sub) -> None:
    sweep = sub.add_parser("sweep", help="random geometries against the oracle (verify.sweep)",
                           formatter_class=_HelpFormatter,
                           description="Draw random geometries: small ones run in full against the oracle, "
                           "large ones planned and traced; print each failure with its check line, the "
                           "estimate outliers and the counts (exit 1 on any failure).")
    sweep.add_argument("--seed", type=_seed, default=0, help="random seed of the geometry draws")
    sweep.add_argument("--small", type=_non_negative_int, default=20, metavar="N",
                       help="small geometries, run in full against the oracle")
    sweep.add_argument("--large", type=_non_negative_int, default=2, metavar="M",
                       help="large geometries, planned and traced only")
    sweep.add_argument("--jobs", type=_positive_int, default=1, help="geometries run in this many processes")
    sweep.add_argument("--mode", choices=MODES, default="exact", help="numerical mode of the small runs")


def cmd_sweep(args) -> int:
    from conv3d_bwd.verify.sweep import run_sweep

    totals = run_sweep(args.seed, args.small, args.large, jobs=args.jobs, mode=args.mode,
                       out=lambda line: print(line, flush=True))
    return 1 if totals.n_failures else 0


# ---------------------------------------------------------------------------------------------- check

def _case_from(args):
    from conv3d_bwd.reference import GeometryError
    from conv3d_bwd.verify.cases import CaseError, case_from_args

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
        from conv3d_bwd.kernels.plan import plan_conv3d_bwd
    except ImportError as exc:
        raise UsageError(f"the planner is not available: kernels.plan does not import ({exc})") from None
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
        from conv3d_bwd.kernels import errors
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
    print(f"{'grad':<5}{'status':<11}{'K terms':>8}{'K nonzero':>10}{'max_abs':>11}{'err/S':>10}"
          f"{'err/bound':>10}{'acc share':>10}{'zeros':>7}{'NaN':>5}{'Inf':>5}{'max ULP':>9}", file=out)
    for name, grad in result.grads.items():
        m = grad.metrics
        print(f"{name:<5}{m.status:<11}{grad.K_structural or '':>8}{grad.K_max:>10}{m.max_abs:>11.4g}"
              f"{m.max_norm_err:>10.3g}{m.bound_ratio:>10.3g}{m.accumulation_share:>10.3g}"
              f"{m.reachable_zero_share:>7.0%}{m.nan_count:>5}{m.inf_count:>5}{m.max_ulp:>9}", file=out)
    if result.grads:
        print(textwrap.fill(
            "K terms: products summed per element (the geometry's accumulation length); K nonzero: "
            "those with nonzero factors (what the bound uses); err/S: max |err| / sum|a||b|; acc "
            "share: error beyond one output ULP / accumulation allowance (<= 1 passes; bf16's "
            "err/bound sits near 0.5 from rounding alone); zeros: zero share of the reachable "
            "reference (MISTRUSTED above 30%); max ULP: output-dtype steps from the rounded oracle, "
            "large under cancellation", width=100, initial_indent="legend   ",
            subsequent_indent=" " * 9), file=out)
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


def _timeline_path(args, backend: str) -> str | None:
    """--timeline checked before the run: the nkisim backend, and a file path that can be written."""
    if args.timeline is None:
        return None
    if backend != "nkisim":
        raise UsageError(f"--timeline: the modelled schedule comes from nkisim's cost model; "
                         f"backend {backend!r} has none (use --backend nkisim)")
    path = Path(args.timeline)
    if path.is_dir():
        raise UsageError(f"--timeline: {args.timeline!r} is a directory; give a file path such as "
                         f"{str(path / 'timeline.json')!r}")
    folder = path.parent if str(path.parent) else Path(".")
    if folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--timeline: the folder {str(folder)!r} is not writable")
    return str(path)


def cmd_check(args) -> int:
    from conv3d_bwd.verify.backends import BackendError, backend_unavailable_reason, resolve_backend

    case = _case_from(args)
    try:
        backend = resolve_backend(args.backend)
    except BackendError as exc:
        raise UsageError(str(exc)) from None
    timeline = _timeline_path(args, backend)
    _check_fits_in_memory(case)
    if backend_unavailable_reason(backend, args.dry) is None:
        # Planner input errors (LNC2 on trn1, ...) are the user's, not a kernel failure. Planning
        # binds nkisim under 'nki', so only once the backend is known to be available.
        _plan_or_usage_error(case, args.target)
    modes = MODES if args.mode == "both" else (args.mode,)
    codes, records = [], []
    for i, mode in enumerate(modes):
        if i and not args.json:
            print()
        # one timeline: the schedule does not depend on the inputs' values
        code, recs = _check_one(args, case, backend, mode, timeline if i == 0 else None)
        codes.append(code)
        records += recs
    if args.json:
        print(json.dumps(records, indent=1))
    if timeline is not None and Path(timeline).exists():
        print(f"timeline {timeline} (open in ui.perfetto.dev or chrome://tracing)",
              file=sys.stderr if args.json else sys.stdout)
    return max(codes)


def _check_one(args, case, backend: str, mode: str, timeline: str | None) -> tuple[int, list[dict]]:
    """One mode of ``check``: (exit code, JSON records); prints the text result unless --json."""
    from conv3d_bwd.verify.backends import BackendUnavailable
    from conv3d_bwd.verify.harness import run_case

    input_errors = _kernel_input_error_types()
    try:
        result = run_case(case, backend=backend, mode=mode, seed=args.seed, target=args.target,
                          dry=args.dry, timeline=timeline)
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    except input_errors as exc:
        raise UsageError(f"the kernel rejected the input: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failure, reported in one line
        print(f"{PROG}: {_failed_stage(exc)} failed on {case.id}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        if args.json:  # still JSON on stdout, so tools reading it get FAIL records, not "FAIL"
            from conv3d_bwd.verify.harness import CaseResult

            failed = CaseResult(case=case, backend=backend, mode=mode, seed=args.seed, plan=None,
                                methods=(), grads={}, modelled_us=None, passed=False,
                                target=args.target, error=f"{type(exc).__name__}: {exc}")
            return 1, failed.to_records()
        print("FAIL")
        return 1, []
    if not args.json:
        _print_result(result)
    return (0 if result.passed else 1), result.to_records()


# ----------------------------------------------------------------------------------------------- plan

def cmd_plan(args) -> int:
    from conv3d_bwd.kernels.plan.search import PROGRESS
    from conv3d_bwd.verify.plan_table import format_plan
    from conv3d_bwd.verify.progress import Heartbeat

    case = _case_from(args)   # no memory check: planning allocates nothing of the geometry's size
    with Heartbeat(f"planning {case.geometry_id} for {args.target}", detail=PROGRESS.describe):
        plan = _plan_or_usage_error(case, args.target, list_rejections=True)
    print(json.dumps(plan.to_dict(), indent=1, default=str) if args.json
          else format_plan(plan, top=args.top, show_all=args.show_all))
    return 0


# --------------------------------------------------------------------------------------------- report

def _run_task(task: tuple) -> tuple[list[dict], str, float]:
    """One (case, mode, seed) in a worker: its records, its status and its wall time."""
    from conv3d_bwd.verify.harness import CaseResult, run_case

    case, mode, seed, backend, target, *rest = task  # (..., timeline path) when one is wanted
    timeline = rest[0] if rest else None
    start = time.perf_counter()
    try:
        result = run_case(case, backend=backend, mode=mode, seed=seed, target=target,
                          capture_errors=True, timeline=timeline)
    except Exception as exc:  # noqa: BLE001 - one broken case must not sink the whole report
        result = CaseResult(case=case, backend=backend, mode=mode, seed=seed, plan=None, methods=(),
                            grads={}, modelled_us=None, passed=False, target=target,
                            error=f"harness failure: {type(exc).__name__}: {exc}")
    return result.to_records(), result.status, time.perf_counter() - start


TIMELINE_DIR = "timelines"


def _report_tasks(args, backend: str) -> list[tuple]:
    from conv3d_bwd.verify.cases import CASE_SETS

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
    # One timeline per case (the schedule does not depend on the input values), from its first mode.
    timelines = getattr(args, "timelines", False) and backend == "nkisim"
    tasks = []
    for i, case in indexed:
        for j, mode in enumerate(modes):
            seed = args.seed + (i % 2 if mode == "stat" else 0)
            timeline = (str(Path(args.out) / TIMELINE_DIR / f"{case.id}.json")
                        if timelines and j == 0 else None)
            tasks.append((case, mode, seed, backend, args.target, timeline))
    return tasks


def _task_size(task: tuple) -> float:
    """A task's multiply-accumulates: what its run time grows with, beyond a fixed part."""
    return float(task[0].macs())


def run_report_tasks(tasks: list[tuple], jobs: int, stream=None) -> list[dict]:
    """Run the tasks (biggest first, over a process pool when jobs > 1) with a progress bar."""
    from conv3d_bwd.verify.progress import Progress

    tasks = sorted(tasks, key=_task_size, reverse=True)
    progress = Progress([_task_size(t) for t in tasks], stream, jobs=min(jobs, len(tasks)))
    records: list[dict] = []
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            recs, status, seconds = _run_task(task)
            records += recs
            progress.update(_task_size(task), seconds, f"{task[0].id} {task[1]}", status)
        return records
    # fork where the platform has it: workers start at once and inherit backends registered in
    # this process (tests register stand-ins); elsewhere the platform default.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_run_task, task): task for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            recs, status, seconds = future.result()
            records += recs
            progress.update(_task_size(task), seconds, f"{task[0].id} {task[1]}", status)
    return records


def _order(records: list[dict]) -> list[dict]:
    from conv3d_bwd.verify.cases import CASE_SETS

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
    from conv3d_bwd.verify.backends import (
        BackendError,
        backend_unavailable_reason,
        resolve_backend,
        tool_versions,
    )
    from conv3d_bwd.verify.report import write_reports
    from conv3d_bwd.verify.report.json_io import ReportFileError, merge_reports

    if args.merge:
        try:
            records, meta = merge_reports(args.merge, allow_partial=args.partial)
        except ReportFileError as exc:
            raise UsageError(str(exc)) from None
        _prepare_out_dir(args.out)
        for record in records:  # each shard's timeline, named from the merged report's folder
            if record.get("timeline"):
                record["timeline"] = Path(os.path.relpath(record["timeline"], args.out)).as_posix()
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
        for record in records:  # timelines named relative to the report, so the folder can move
            if record.get("timeline"):
                record["timeline"] = Path(os.path.relpath(record["timeline"], args.out)).as_posix()
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
    from conv3d_bwd.verify.report.plots import matplotlib_missing

    missing_plots = matplotlib_missing()
    if missing_plots:
        print(f"{PROG}: note: report.html has no plots: matplotlib does not import ({missing_plots}); "
              "install the report extra (pip install .[report])", file=sys.stderr)
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
        from conv3d_bwd.verify.bench import run_bench
    except ImportError as exc:
        raise UsageError(f"the benchmark is not available: verify.bench does not import ({exc})") from None
    if args.shapes is not None and args.bench_set is not None:
        raise UsageError(f"bench: --set {args.bench_set} and --shapes {args.shapes}: give one of them, not both")
    try:
        run_bench(set_name=args.bench_set or "default", target=args.target, lnc=args.lnc, json_path=args.json,
                  only=args.only, top=args.top, shapes_path=args.shapes,
                  **({} if args.jobs is None else {"jobs": args.jobs}))
    except (KeyError, ValueError) as exc:
        raise UsageError(f"bench: {exc}") from None
    return 0


COMMANDS = {"check": cmd_check, "plan": cmd_plan, "report": cmd_report, "bench": cmd_bench, "sweep": cmd_sweep}


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
