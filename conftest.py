"""Session-wide pytest set-up shared by simtests/ and hwtests/.

- ``--backend {nkisim,nki-simulate,trn}``: what runs the kernel (default: the environment variable
  ``CONV3D_BWD_BACKEND``, else ``nkisim``); ``--run-hw`` and ``--hw-latency-json`` gate and record
  the Trainium suite (see hwtests/gating.py).
- The NKI module is bound before collection imports any kernel: under ``nkisim`` the emulator is
  installed under the name ``nki`` (nki-library binds its CPU simulator the same way, in
  pytest_configure).
- Hypothesis profiles ``ci`` (loaded by default) and ``nightly`` (``--hypothesis-profile nightly``).
"""
from __future__ import annotations

import os
import sys

# Before numpy is imported anywhere: one BLAS/OpenMP thread per pytest-xdist worker, so that two
# workers on two cores do not oversubscribe. xdist sets PYTEST_XDIST_WORKER before a worker loads
# its conftests.
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in _THREAD_VARS:
        os.environ.setdefault(_name, "1")
# The real simulator falls back to trn3 when unset; the project's planner and cost model target trn2.
os.environ.setdefault("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")

import pytest
from hypothesis import HealthCheck, settings

BACKENDS = ("nkisim", "nki-simulate", "trn")
BACKEND_ENV = "CONV3D_BWD_BACKEND"

# deadline=None because the emulator's run time varies a lot with the drawn geometry; print_blob so
# any failure prints a @reproduce_failure line.
_COMMON_PROFILE = {
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow],
}
# ci is derandomized so CI is reproducible; nightly explores new examples every night.
settings.register_profile("ci", derandomize=True, max_examples=30, **_COMMON_PROFILE)
settings.register_profile("nightly", derandomize=False, max_examples=500, **_COMMON_PROFILE)
settings.load_profile("ci")  # pytest's --hypothesis-profile, applied later in pytest_configure, wins


def _default_backend() -> str:
    return os.environ.get(BACKEND_ENV) or "nkisim"


def _backend_choice(value: str) -> str:
    if value not in BACKENDS:
        raise pytest.UsageError(f"--backend: {value!r} is not one of {', '.join(BACKENDS)}")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conv3d_bwd", "conv3d_bwd kernel suites")
    group.addoption(
        "--backend",
        action="store",
        default=None,
        type=_backend_choice,
        help=f"what runs the kernel: {', '.join(BACKENDS)} "
        f"(default: ${BACKEND_ENV}, else nkisim)",
    )
    group.addoption(
        "--run-hw",
        action="store_true",
        default=False,
        help="run the Trainium suite (hwtests/, marker 'trainium'); it needs a NeuronCore",
    )
    group.addoption(
        "--hw-latency-json",
        action="store",
        default=None,
        help="where hwtests write the measured latency per case next to the cost model's estimate "
        "(default: $TOX_WORK_DIR/hw-latency.json, else .tox/hw-latency.json)",
    )
    group.addoption(
        "--hw-dry",
        action="store_true",
        default=False,
        help="with --run-hw: run the Trainium suite with only the device call swapped for nkisim "
        "(tests the suite's own code on a CPU; latencies are then nkisim wall times)",
    )


def _real_nki_probe() -> str | None:
    """None if the real Neuron ``nki`` package imports, else why it does not.

    Must run before nkisim is bound under the name ``nki``. The PyPI placeholder raises a plain
    ImportError (not ModuleNotFoundError), hence the broad ImportError.
    """
    bound = sys.modules.get("nki")
    if bound is not None:
        if getattr(bound, "__name__", "") == "nki":
            return None
        return "the module name 'nki' is bound to the nkisim emulator, not the Neuron package"
    try:
        import nki  # noqa: F401
    except ImportError as exc:
        return f"the Neuron package 'nki' does not import ({type(exc).__name__}: {exc})"
    return None


def pytest_configure(config: pytest.Config) -> None:
    backend = config.getoption("--backend")
    if backend is None:
        backend = _default_backend()
        if backend not in BACKENDS:
            raise pytest.UsageError(f"${BACKEND_ENV}: {backend!r} is not one of {', '.join(BACKENDS)}")
    config.conv3d_backend = backend  # type: ignore[attr-defined]
    for marker in (
        "fast: quick subset, runs in seconds",
        "slow: takes more than a few seconds",
        "nightly: long sweeps, only in the nightly tox env",
        "trainium: needs a NeuronCore (hwtests, --run-hw)",
    ):
        config.addinivalue_line("markers", marker)

    if getattr(config.option, "numprocesses", None):
        # Controller side: workers inherit this environment when they are spawned.
        for name in _THREAD_VARS:
            os.environ.setdefault(name, "1")

    # Probe the real package first: after nkisim is bound under 'nki' the probe would see nkisim.
    config.conv3d_real_nki_missing = (  # type: ignore[attr-defined]
        None if backend == "nkisim" else _real_nki_probe()
    )
    config.conv3d_binding = None  # type: ignore[attr-defined]
    config.conv3d_binding_error = None  # type: ignore[attr-defined]
    try:
        from conv3d_bwd.nkisim.binding import ensure_nki
    except ImportError as exc:
        # Reported by the kernel_backend fixture as a failure, never as a skip.
        config.conv3d_binding_error = f"nkisim.binding does not import: {exc}"  # type: ignore[attr-defined]
        return
    prefer = "nkisim" if backend == "nkisim" else None
    config.conv3d_binding = ensure_nki(prefer=prefer)  # type: ignore[attr-defined]
    if config.getoption("--run-hw") and not _is_xdist_worker(config):
        # xdist workers send their reports to the controlling process, so it alone counts.
        config.pluginmanager.register(_HwGate(), "conv3d_hw_gate")


class _HwGate:
    """Counts what the hardware tests did (under --run-hw, in the controlling process)."""

    def __init__(self) -> None:
        from hwtests.gating import HwRunTally

        self.tally = HwRunTally()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "trainium" not in report.keywords:
            return
        reason = None
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        self.tally.add(report.when, report.outcome, reason)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def hw_prerequisites(config: pytest.Config):
    """What the Trainium suite needs, observed once per session (see hwtests/gating.py)."""
    cached = getattr(config, "_conv3d_hw_prerequisites", None)
    if cached is None:
        from hwtests.gating import HwPrerequisites, device_missing_reason

        run_hw = bool(config.getoption("--run-hw"))
        dry = bool(config.getoption("--hw-dry"))
        # Probing the device is only worth it when the suite was asked for and is not dry.
        probe = run_hw and not dry
        cached = HwPrerequisites(
            run_hw=run_hw,
            backend=config.conv3d_backend,
            dry=dry,
            nki_missing=config.conv3d_real_nki_missing if probe else None,
            device_missing=device_missing_reason() if probe else None,
        )
        config._conv3d_hw_prerequisites = cached
    return cached


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    hw_items = [item for item in items if item.get_closest_marker("trainium")]
    if not hw_items:
        return
    from hwtests.gating import hw_skip_reason

    reason = hw_skip_reason(hw_prerequisites(config))
    if reason:
        for item in hw_items:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if config.getoption("--run-hw") and not _is_xdist_worker(config):
        import shutil

        from hwtests.latency import latency_path, parts_dir

        shutil.rmtree(parts_dir(latency_path(config)), ignore_errors=True)  # stale parts


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if config.getoption("--run-hw") and not _is_xdist_worker(config):
        from hwtests.latency import latency_path, merge_latency_parts

        path = latency_path(config)
        records = merge_latency_parts(path)
        if records is not None:
            config._conv3d_latency_note = f"hw latency: {len(records)} records written to {path}"
        _fail_empty_hw_run(session)


def _fail_empty_hw_run(session: pytest.Session) -> None:
    """Under --run-hw, a session in which no hardware test ran fails, naming what is missing."""
    from hwtests.gating import empty_run_failure, hw_skip_reason

    gate = session.config.pluginmanager.get_plugin("conv3d_hw_gate")
    if gate is None:
        return
    failure = empty_run_failure(hw_skip_reason(hw_prerequisites(session.config)), gate.tally)
    if failure is None:
        return
    session.config._conv3d_gate_failure = failure
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    note = getattr(config, "_conv3d_latency_note", None)
    if note:
        terminalreporter.write_line(note)
    failure = getattr(config, "_conv3d_gate_failure", None)
    if failure:
        terminalreporter.write_line(f"FAILED {failure}", red=True, bold=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"conv3d_bwd backend: {config.conv3d_backend}; nki bound to: {config.conv3d_binding}"]
    if config.conv3d_real_nki_missing:
        lines.append(f"real nki: {config.conv3d_real_nki_missing}")
    if config.conv3d_binding_error:
        lines.append(config.conv3d_binding_error)
    return lines


def backend_unavailable_reason(config: pytest.Config) -> str | None:
    """Why kernel tests cannot run on the selected backend here, or None when they can."""
    backend = config.conv3d_backend
    if backend == "nkisim":
        return None
    if config.conv3d_real_nki_missing:
        return f"backend {backend!r} needs the real Neuron nki: {config.conv3d_real_nki_missing}"
    if backend == "trn":
        from hwtests.gating import device_missing_reason

        return device_missing_reason()
    return None


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The backend chosen with --backend / $CONV3D_BWD_BACKEND (no availability check)."""
    return request.config.conv3d_backend


@pytest.fixture(scope="session")
def kernel_backend(request: pytest.FixtureRequest) -> str:
    """The backend for a test that runs the kernel; skips with the reason when it is unavailable.

    Session-scoped so that Hypothesis tests can use it (no function-scoped fixture health check).
    """
    config = request.config
    if config.conv3d_binding_error and config.conv3d_backend == "nkisim":
        pytest.fail(config.conv3d_binding_error, pytrace=False)
    reason = backend_unavailable_reason(config)
    if reason:
        pytest.skip(reason)
    return config.conv3d_backend
