"""nkisim's cost model against published trn2 hardware figures (a model check, not a timing test).

The tutorial's v2 total is also the source of one fitted figure (the software-DGE issue time), so its
check guards the structure around that fit; v3-v5 and the DMA overview's load are independent checks.
"""
from __future__ import annotations

import pytest

from conv3d_bwd.nkisim.calibration.published import (
    PUBLISHED_MATMUL_MS,
    SINGLE_ENGINE_LOAD_NS,
    model_matmul,
    model_single_engine_load,
)

TOLERANCE = 0.05


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(PUBLISHED_MATMUL_MS))
def test_tutorial_matmul_versions_within_5_percent_of_the_published_totals(version):
    check = model_matmul(version)
    assert check.summary.instructions > 40_000   # the full published shape, not a scaled-down one
    assert abs(check.ratio - 1.0) <= TOLERANCE, (
        f"{version} ({check.kernel}): modelled {check.modelled_ms:.2f} ms, published {check.published_ms} ms")


def test_single_engine_load_within_5_percent_of_the_dma_overview():
    modelled = model_single_engine_load()
    assert abs(modelled / SINGLE_ENGINE_LOAD_NS - 1.0) <= TOLERANCE, f"modelled {modelled:.0f} ns"
