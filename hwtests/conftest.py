"""Fixtures of the Trainium suite; the gating itself lives in the root conftest and gating.py."""
from __future__ import annotations

import pytest

from hwtests.latency import LatencyLog, latency_path


@pytest.fixture(scope="session")
def hw_dry(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--hw-dry"))


@pytest.fixture(scope="session")
def latency_log(request: pytest.FixtureRequest) -> LatencyLog:
    return LatencyLog(latency_path(request.config))
