"""Shared helpers for the oracle's tests: geometries and seeded random data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simtests.reference.independent import out_shape


@dataclass(frozen=True)
class Geo:
    """A test geometry, kept free of the oracle's own ConvGeometry so the tests stay independent."""

    batch: int
    c_in: int
    c_out: int
    size: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, ...] = (0,) * 6
    dilation: tuple[int, int, int] = (1, 1, 1)

    @property
    def x_shape(self):
        return (self.batch, self.c_in, *self.size)

    @property
    def w_shape(self):
        return (*self.kernel, self.c_in, self.c_out)

    @property
    def dy_shape(self):
        return (self.batch, self.c_out, *out_shape(self.x_shape, self.w_shape, self.stride, self.padding,
                                                   self.dilation))

    @property
    def conv(self) -> dict:
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation}

    def arrays(self, seed: int):
        """Seeded standard-normal (dy, x, w) in float64."""
        rng = np.random.default_rng(seed)
        return (rng.standard_normal(self.dy_shape), rng.standard_normal(self.x_shape),
                rng.standard_normal(self.w_shape))

    def __str__(self) -> str:
        return (f"b{self.batch}ci{self.c_in}co{self.c_out}-{'x'.join(map(str, self.size))}"
                f"-k{''.join(map(str, self.kernel))}-s{''.join(map(str, self.stride))}"
                f"-p{''.join(map(str, self.padding))}-d{''.join(map(str, self.dilation))}")


# Tiny geometries that exercise every feature: stride, dilation, asymmetric padding, uncovered rows,
# 1-wide axes and kernels larger than the unpadded input.
TINY = (
    Geo(1, 1, 1, (3, 3, 3), (1, 1, 1)),
    Geo(2, 2, 3, (4, 3, 5), (2, 3, 2)),
    Geo(1, 3, 2, (5, 4, 4), (3, 3, 3), padding=(1, 1, 1, 1, 1, 1)),
    Geo(2, 2, 2, (6, 5, 7), (2, 2, 3), stride=(2, 1, 3), padding=(1, 0, 0, 2, 2, 1)),
    Geo(1, 2, 3, (7, 6, 5), (2, 3, 2), stride=(1, 2, 2), padding=(0, 3, 1, 0, 0, 0), dilation=(3, 1, 2)),
    Geo(2, 1, 2, (8, 5, 6), (3, 2, 2), stride=(2, 3, 2), padding=(0, 0, 2, 1, 1, 0), dilation=(2, 2, 1)),
    Geo(1, 2, 2, (1, 4, 2), (1, 3, 3), padding=(0, 0, 1, 1, 1, 2)),
    Geo(1, 1, 2, (2, 2, 2), (3, 3, 3), stride=(2, 2, 2), padding=(1, 2, 2, 1, 1, 1), dilation=(1, 1, 1)),
)
