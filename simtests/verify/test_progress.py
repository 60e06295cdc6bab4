"""verify.progress: the report's ETA from a fitted run-time model, the planning heartbeat."""
from __future__ import annotations

import io
import time

import pytest

from conv3d_bwd.verify.progress import Heartbeat, Progress, RunTimeModel

pytestmark = pytest.mark.fast


def test_the_model_fits_a_fixed_part_and_a_per_mac_part():
    model = RunTimeModel()
    for macs in (1e6, 4e6, 9e6):
        model.add(macs, 2.0 + 3e-7 * macs)
    fixed, per_mac = model.coefficients()
    assert fixed == pytest.approx(2.0) and per_mac == pytest.approx(3e-7)
    assert model.predict(5e6) == pytest.approx(3.5)


def test_one_size_so_far_counts_as_fixed_time():
    model = RunTimeModel()
    model.add(8e6, 1.2)
    assert model.coefficients() == (1.2, 0.0)


def test_the_eta_accounts_for_a_fixed_cost_that_macs_do_not_show():
    """One big task then nine small ones, each 1 s of (planning-like) fixed cost: a MACs-weighted
    ETA would promise the small ones almost free; the fitted model expects 1 s each."""
    sizes = [100e6] + [1e6] * 9
    progress = Progress(sizes, stream=io.StringIO())
    progress.start = time.perf_counter() - 1.0  # one task second done in one wall second
    progress.update(100e6, 1.0, "big", "PASS")
    assert progress.eta(1.0) == pytest.approx(9.0)
    progress.start = time.perf_counter() - 2.0
    progress.update(1e6, 1.0, "small", "PASS")
    assert progress.eta(2.0) == pytest.approx(8.0)


def test_the_eta_divides_by_the_parallelism_seen():
    progress = Progress([1e6] * 4, stream=io.StringIO())
    progress.update(1e6, 2.0, "a", "PASS")
    progress.update(1e6, 2.0, "b", "PASS")  # 4 task seconds in 2 wall seconds: 2 workers
    assert progress.eta(2.0) == pytest.approx(2.0)


def test_until_every_worker_has_finished_once_the_eta_assumes_all_of_them_busy():
    progress = Progress([1e6] * 5, stream=io.StringIO(), jobs=2)
    progress.update(1e6, 2.0, "a", "PASS")  # the other worker's task is still running
    assert progress.eta(2.0) == pytest.approx(4 * 2.0 / 2)


def test_progress_lines_name_the_count_the_eta_and_failures():
    stream = io.StringIO()
    progress = Progress([1e6, 1e6], stream=stream)
    progress.update(1e6, 0.5, "case-a exact", "FAIL")
    line = stream.getvalue().splitlines()[-1]
    assert "1/2" in line and "ETA" in line and "fail 1" in line and "case-a exact" in line


def test_a_quick_step_is_silent_and_a_slow_one_beats():
    stream = io.StringIO()
    with Heartbeat("planning x", stream=stream, every=5.0):
        pass
    assert stream.getvalue() == ""
    with Heartbeat("planning y", stream=stream, every=0.05):
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("planning y: 0:00 elapsed")
    assert lines[-1].startswith("planning y: done in")


def test_a_beat_carries_the_step_detail():
    stream = io.StringIO()
    with Heartbeat("planning z", stream=stream, every=0.05, detail=lambda: "3/7 candidates"):
        time.sleep(0.2)
    assert "planning z: 0:00 elapsed, 3/7 candidates" in stream.getvalue().splitlines()[0]
