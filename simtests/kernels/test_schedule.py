"""``kernels/schedule.py``: the dy staging tile's bound (``dx_stage_elems``), taken from the distinct fills per
axis: the largest staged fill of any band, as every band's own fill (``dx_band_fill``) gives it; a tile's
pieces of one engine access (``free_pieces``)."""
from __future__ import annotations

from itertools import product
from math import prod

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.schedule import axis_bands, dx_band_fill, dx_stage_elems, free_pieces

from .support import geom_kw, geom_shapes

GEOMS = {
    "stride1-padded": {"batch": 1, "c_in": 2, "c_out": 3, "size": (5, 6, 11), "kernel": (3, 3, 3), "padding": (1,) * 6},
    "strided-dilated": {"batch": 1, "c_in": 2, "c_out": 3, "size": (7, 9, 13), "kernel": (2, 3, 3),
                        "stride": (1, 2, 2), "padding": (1, 0, 0, 1, 2, 3), "dilation": (1, 1, 2)},
    "beyond-reach": {"batch": 1, "c_in": 2, "c_out": 3, "size": (4, 5, 6), "kernel": (3, 3, 3),
                     "dilation": (2, 3, 3), "padding": (4, 4, 5, 5, 6, 6)},
}


def _every_band(g, band, w_band) -> int:
    best = 0
    for bd in axis_bands(g.axes[0], band[0]):
        for bh in axis_bands(g.axes[1], band[1]):
            for bw in axis_bands(g.axes[2], w_band or g.axes[2].n):
                n, _padded, staged = dx_band_fill(g, bd, bh, bw)
                best = max(best, n) if staged else best
    return best


@pytest.mark.parametrize("name", list(GEOMS))
def test_the_staging_bound_is_the_largest_staged_band_fill(name):
    geom = GEOMS[name]
    kw = {"stride": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1), **geom_kw(geom)}
    g = validate(*geom_shapes(geom), kw["stride"], kw["padding"], kw["dilation"], "bf16")
    staged = 0
    for band in [(1, 1), (2, 3), (3, 1), (g.axes[0].n, g.axes[1].n)]:
        for w_band in (0, 1, 4):
            want = _every_band(g, band, w_band)
            assert dx_stage_elems(g, band, w_band) == want, (band, w_band)
            staged += want > 0
    assert staged   # (some tiling stages its bands)


@pytest.mark.parametrize("free, limit", [((3, 4, 5), 60), ((3, 4, 5), 59), ((3, 4, 5), 20), ((3, 4, 5), 7),
                                         ((3, 4, 5), 4), ((2, 25, 28, 52), 65536), ((1,), 1), ((6, 1, 9), 10)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else f"limit{v}")
def test_free_pieces_cover_the_tile_once_within_the_limit(free, limit):
    seen = []
    pieces = free_pieces(free, limit)
    for piece in pieces:
        assert len(piece) == len(free)
        assert prod(s.stop - s.start for s in piece) <= limit
        seen += list(product(*(range(s.start, s.stop) for s in piece)))
    assert sorted(seen) == list(product(*(range(n) for n in free)))   # every element once
    assert (len(pieces) == 1) == (prod(free) <= limit)

