"""Fixtures of the CPU suite (the session-wide options and backend live in the root conftest)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _plans_unpatched(request):
    """A test that monkeypatches may patch the planner: it must neither see plans cached before the patch
    nor leave behind plans made under it."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    from conv3d_bwd.kernels.plan import clear_plan_cache

    clear_plan_cache()
    yield
    clear_plan_cache()


def _as_property(value: object) -> str | int | float:
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


@pytest.fixture
def record_case_properties(record_property):
    """Record a CaseResult's headline numbers as JUnit XML properties of the running test.

    Per gradient: ``<g>_max_abs_err``, ``<g>_bound_ratio``, ``<g>_max_ulp``, ``<g>_K``,
    ``<g>_status``; plus ``case``, ``plan`` (the chosen methods), ``backend``, ``mode``,
    ``modelled_us``, ``max_bound_ratio`` and ``passed``. ``record_property`` travels with the test
    report, so it works under pytest-xdist.
    """

    def record(result) -> None:
        from simtests.kernels.case_support import case_properties

        for name, value in case_properties(result).items():
            record_property(name, _as_property(value))

    return record
