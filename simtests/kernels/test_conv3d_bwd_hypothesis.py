"""Hypothesis over geometries, through the kernel (under the selected backend) against the oracle.

Hypothesis draws only the geometry, the mode and an integer seed; the inputs are a function of
(case, mode, seed), so a shrunk failure replays from the ``conv3d-bwd check`` line it prints (in the
assertion message and through ``note``), or from the ``@reproduce_failure`` blob.

The default suite runs the ``ci`` profile (derandomized, 30 examples, small sizes, a few seconds per
example at most); the ``nightly`` variant draws from a wider space with the ``nightly`` profile.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from conv3d_bwd.verify.cases import Case

from .case_support import MODES, assert_case_ok, repro_command, run_case_checked

GRAD_SUBSETS = tuple(
    subset for r in (1, 2, 3) for subset in combinations(("dx", "dw", "db"), r)
)  # all seven non-empty subsets, in (dx, dw, db) order


@dataclass(frozen=True)
class Space:
    """The ranges one sweep draws from."""

    kernels: tuple[int, ...]
    max_stride: int
    max_dilation: int
    channels: tuple[int, ...]
    max_batch: int
    max_extra_size: int  # input size per axis above the smallest that gives an output of 1
    dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32")
    lncs: tuple[int, ...] = (1, 2)


CI_SPACE = Space(
    kernels=(1, 2, 3, 5, 7), max_stride=3, max_dilation=3,
    channels=(1, 2, 3, 5, 8, 16, 33, 65, 129), max_batch=3, max_extra_size=5,
)
CI_EXAMPLES = 100  # measured: about 10 s on one core; the ci profile's 30 is the floor
NIGHTLY_SPACE = Space(
    kernels=(1, 2, 3, 4, 5, 7), max_stride=4, max_dilation=3,
    channels=(1, 2, 3, 7, 16, 63, 64, 65, 127, 128, 129), max_batch=3, max_extra_size=8,
)


@st.composite
def axes(draw, space: Space):
    """One spatial axis: (input size, kernel, stride, dilation, pad_lo, pad_hi), output >= 1."""
    k = draw(st.sampled_from(space.kernels))
    s = draw(st.integers(1, space.max_stride))
    r = draw(st.integers(1, space.max_dilation)) if k > 1 else 1
    reach = r * (k - 1)
    lo = draw(st.integers(0, reach))
    hi = draw(st.integers(0, reach))
    smallest = max(1, reach + 1 - lo - hi)
    n = draw(st.integers(smallest, smallest + space.max_extra_size))
    return n, k, s, r, lo, hi


@st.composite
def cases(draw, space: Space):
    d, h, w = (draw(axes(space)) for _ in range(3))
    return Case(
        name="hypothesis",
        group="hypothesis",
        batch=draw(st.integers(1, space.max_batch)),
        c_in=draw(st.sampled_from(space.channels)),
        c_out=draw(st.sampled_from(space.channels)),
        input=(d[0], h[0], w[0]),
        kernel=(d[1], h[1], w[1]),
        stride=(d[2], h[2], w[2]),
        padding=(d[4], d[5], h[4], h[5], w[4], w[5]),
        dilation=(d[3], h[3], w[3]),
        dtype=draw(st.sampled_from(space.dtypes)),
        grads=draw(st.sampled_from(GRAD_SUBSETS)),
        lnc=draw(st.sampled_from(space.lncs)),
    )


def _check(case, mode: str, seed: int, backend: str) -> None:
    note(f"reproduce: {repro_command(case, mode, seed, backend)}")
    result = run_case_checked(case, backend, mode, seed)
    assert_case_ok(result, seed)


@settings(max_examples=CI_EXAMPLES)  # derived from the loaded profile (ci: derandomized, no deadline)
@given(case=cases(CI_SPACE), mode=st.sampled_from(MODES), seed=st.integers(0, 2**16 - 1))
def test_kernel_matches_oracle_on_drawn_geometries(case, mode, seed, kernel_backend):
    _check(case, mode, seed, kernel_backend)


@pytest.mark.nightly
@settings(settings.get_profile("nightly"))
@given(case=cases(NIGHTLY_SPACE), mode=st.sampled_from(MODES), seed=st.integers(0, 2**16 - 1))
def test_kernel_matches_oracle_on_drawn_geometries_nightly(case, mode, seed, kernel_backend):
    _check(case, mode, seed, kernel_backend)
