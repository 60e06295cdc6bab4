"""Progress on stderr for long commands: a bar with an ETA for the report, a heartbeat for planning.

The report's ETA comes from a model of a run's wall time, ``t = fixed + per_mac * MACs``, fitted to
the runs finished so far: a run's fixed part (planning, input generation, the oracle's set-up) is
often most of it, so an ETA proportional to MACs alone is off several times over.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence

FIXED_PRIOR_S = 1.0
"""Seconds per run assumed before any run has finished (planning a small case takes 0.3-1.5 s);
an assumption, replaced by the fit as soon as runs finish."""

PER_MAC_PRIOR_S = 0.5e-6
"""Seconds per MAC assumed before any run has finished (an assumption, replaced by the fit)."""

HEARTBEAT_EVERY_S = 5.0
"""Seconds between a slow step's progress lines."""


def fmt_duration(seconds: float) -> str:
    """m:ss (minutes unbounded)."""
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class RunTimeModel:
    """``seconds = fixed + per_mac * macs``, least squares over the finished runs (both >= 0)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    def add(self, macs: float, seconds: float) -> None:
        self.samples.append((float(macs), float(seconds)))

    def coefficients(self) -> tuple[float, float]:
        """(fixed seconds, seconds per MAC)."""
        if not self.samples:
            return FIXED_PRIOR_S, PER_MAC_PRIOR_S
        n = len(self.samples)
        mean_m = sum(m for m, _ in self.samples) / n
        mean_t = sum(t for _, t in self.samples) / n
        var = sum((m - mean_m) ** 2 for m, _ in self.samples)
        if var <= 0:  # one size so far: all of it counts as fixed time (smaller runs still cost it)
            return mean_t, 0.0
        slope = sum((m - mean_m) * (t - mean_t) for m, t in self.samples) / var
        slope = max(slope, 0.0)
        fixed = mean_t - slope * mean_m
        if fixed < 0:  # through the origin instead
            return 0.0, sum(t for _, t in self.samples) / max(sum(m for m, _ in self.samples), 1e-12)
        return fixed, slope

    def predict(self, macs: float) -> float:
        fixed, per_mac = self.coefficients()
        return fixed + per_mac * macs


class Progress:
    """A text progress bar with ETA on stderr (one line per update when not a terminal).

    ``macs`` lists every task's size; ``update`` takes a finished task's size and wall time. The
    ETA is the predicted time of the tasks left, divided by the parallelism observed so far (task
    seconds finished per wall second), or by ``jobs`` until ``jobs`` tasks have finished (before
    that, the work still running in the other workers is not counted yet).
    """

    def __init__(self, macs: Sequence[float], stream=None, width: int = 30, jobs: int = 1):
        self.remaining = sorted((float(m) for m in macs), reverse=True)
        self.n = len(self.remaining)
        self.done = 0
        self.failed = 0
        self.task_seconds = 0.0
        self.jobs = max(1, jobs)
        self.model = RunTimeModel()
        self.start = time.perf_counter()
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def eta(self, elapsed: float) -> float:
        """Seconds until every task is done, by the fitted run-time model."""
        left = sum(self.model.predict(m) for m in self.remaining)
        if self.done < self.jobs or elapsed <= 0 or self.task_seconds <= 0:
            parallelism = float(min(self.jobs, max(1, len(self.remaining))))
        else:
            parallelism = self.task_seconds / elapsed
        return left / max(parallelism, 1e-9)

    def update(self, macs: float, seconds: float, label: str, status: str) -> None:
        self.done += 1
        self.failed += status == "FAIL"
        self.task_seconds += seconds
        self.model.add(macs, seconds)
        if float(macs) in self.remaining:
            self.remaining.remove(float(macs))
        elapsed = time.perf_counter() - self.start
        filled = int(self.width * self.done / max(1, self.n))
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.n} "
                f"elapsed {fmt_duration(elapsed)} ETA {fmt_duration(self.eta(elapsed))} "
                f"fail {self.failed}  {status:<10} {label}")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            if self.done == self.n:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class Heartbeat:
    """``with Heartbeat("planning ..."):`` silent for a quick step; a step still running after
    ``every`` seconds prints the elapsed time on stderr every ``every`` seconds, and its end, so a
    long step shows it is alive (and a quick one keeps stderr to its errors alone). ``detail``: how far
    the step is, appended to each line (e.g. the planner's candidates estimated so far)."""

    def __init__(self, message: str, stream=None, every: float | None = None,
                 detail: Callable[[], str] | None = None):
        self.message = message
        self.detail = detail
        self.stream = stream or sys.stderr
        self.every = HEARTBEAT_EVERY_S if every is None else every
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start = 0.0

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self.beats += 1
            detail = self.detail() if self.detail is not None else ""
            self.stream.write(f"{self.message}: {fmt_duration(time.perf_counter() - self.start)} "
                              f"elapsed{', ' + detail if detail else ''}\n")
            self.stream.flush()

    def __enter__(self) -> Heartbeat:  # noqa: PYI034 - typing.Self needs Python 3.11
        self.start = time.perf_counter()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.beats and exc[0] is None:
            self.stream.write(f"{self.message}: done in {time.perf_counter() - self.start:.1f} s\n")
            self.stream.flush()
