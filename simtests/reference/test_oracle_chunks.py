"""The oracle's chunked path: cut into many row chunks, it gives the same gradients.

The other oracle tests use shapes that fit in one chunk; here the chunk size is shrunk so that small
geometries are cut into many chunks.
"""

from __future__ import annotations

import numpy as np
import pytest

from conv3d_bwd.reference import ConvGeometry, conv3d_bwd_ref, oracle
from simtests.reference.cases import Geo
from simtests.reference.independent import tap_slices_bwd

CHUNKED = [
    Geo(2, 3, 4, (6, 7, 8), (3, 3, 3), padding=(1,) * 6),
    Geo(3, 2, 5, (7, 6, 9), (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 2, 1, 0, 1), dilation=(1, 2, 1)),
    Geo(2, 4, 3, (9, 12, 10), (2, 3, 1), stride=(1, 3, 1), padding=(0, 1, 1, 0, 0, 0), dilation=(2, 1, 1)),
]


@pytest.fixture
def tiny_chunks(monkeypatch):
    """64-row chunks (the minimum), so every CHUNKED geometry spans several of them."""
    monkeypatch.setattr(oracle, "_CHUNK_BYTES", 1)


@pytest.mark.parametrize("geo", CHUNKED, ids=str)
def test_many_chunks_match_per_tap_slicing(geo: Geo, tiny_chunks):
    dy, x, w = geo.arrays(seed=21)
    g = oracle._Grid(ConvGeometry.from_shapes(dy.shape, x.shape, w.shape, **geo.conv))
    assert len(oracle._chunks(g.n_rows, max(geo.c_in, geo.c_out))) >= 4, "geometry too small to chunk"
    for name, got, want in zip(("dx", "dw", "db"), conv3d_bwd_ref(dy, x, w, **geo.conv),
                               tap_slices_bwd(dy, x, w, **geo.conv)):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * scale, err_msg=name)
