"""Hypothesis over what users pass, beyond the comfortable ranges: padding up to well beyond the kernel's
reach on any side, channel counts across the tile edges (1-300, 127/128/129/255/256/257), W from 1 to
several hundred, every gradient subset, LNC 1/2, trn1/2/3.

Three draws: small geometries run in full against the oracle on the drawn target; in a share of them
other feasible candidates are forced too (the pick alone hides a crash in the alternatives; a sample by
default, every one nightly); large geometries (wide W, many channels) are planned and traced only
(``trace_only``), their peaks within the plan's budget. A geometry with no plan must get a named
Conv3dBwdPlanError that counts every rejected candidate (``conv3d-bwd sweep`` counts those whose
smallest tile fits as failures). Every failure prints its ``conv3d-bwd check`` line.
"""
from __future__ import annotations

import dataclasses
import random
import re

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from conv3d_bwd.kernels.errors import Conv3dBwdPlanError
from conv3d_bwd.verify.candidates import case_plan, run_candidates
from conv3d_bwd.verify.cases import GRAD_SUBSETS, Case
from conv3d_bwd.verify.harness import run_case
from conv3d_bwd.verify.sweep import reproducer
from simtests.kernels.case_support import assert_case_ok

TILE_EDGES = (127, 128, 129, 255, 256, 257)
BEYOND = 4          # padding per side up to the reach + this
SMALL_EXAMPLES = 20     # measured: ~15 s on one core (ci profile)
LARGE_EXAMPLES = 8      # ~10 s
CANDIDATE_SHARE = 4     # one small draw in CANDIDATE_SHARE also forces other candidates
CANDIDATE_SAMPLE = 6    # how many (spread over the list) by default; nightly: every one


def channels(small: bool):
    wide = st.one_of(st.sampled_from(TILE_EDGES), st.integers(1, 300))
    return st.one_of(st.integers(1, 9), wide) if small else wide


@st.composite
def axis(draw, extra: int, wide: int = 0):
    """(n, k, s, r, lo, hi) with output >= 1, each padding side anywhere in [0, reach + BEYOND]."""
    k = draw(st.integers(1, 7))
    s = draw(st.integers(1, 3))
    r = draw(st.integers(1, 3)) if k > 1 else 1
    reach = r * (k - 1)
    lo, hi = draw(st.integers(0, reach + BEYOND)), draw(st.integers(0, reach + BEYOND))
    smallest = max(1, reach + 1 - lo - hi)
    n = smallest + draw(st.integers(0, extra))
    if wide:
        n = max(n, draw(st.integers(1, wide)))
    return n, k, s, r, lo, hi


@st.composite
def drawn(draw, small: bool):
    """(case, target): small (full run) or large (traced) ranges."""
    d = draw(axis(3 if small else 24))
    h = draw(axis(3 if small else 24))
    w = draw(axis(8 if small else 40, wide=24 if small else 400))
    target = draw(st.sampled_from(("trn1", "trn2", "trn3")))
    case = Case(name="wide", group="hypothesis", batch=draw(st.integers(1, 2 if small else 3)),
                c_in=draw(channels(small)), c_out=draw(channels(small)), input=(d[0], h[0], w[0]),
                kernel=(d[1], h[1], w[1]), stride=(d[2], h[2], w[2]),
                padding=(d[4], d[5], h[4], h[5], w[4], w[5]), dilation=(d[3], h[3], w[3]),
                dtype=draw(st.sampled_from(("bf16", "fp16", "fp32"))), grads=draw(st.sampled_from(GRAD_SUBSETS)),
                lnc=1 if target == "trn1" else draw(st.sampled_from((1, 2))))
    case = _within(case, 3e5 if small else 3e9, 2e4 if small else 4e6)
    if any(case.padding[2 * a + s_] > case.dilation[a] * (case.kernel[a] - 1) for a in range(3) for s_ in range(2)):
        event("padding beyond the reach")
    return case, target


def _cost(case):
    o = case.out_size
    taps = case.kernel[0] * case.kernel[1] * case.kernel[2]
    work = case.batch * case.c_in * case.c_out * o[0] * o[1] * o[2] * taps
    vol = case.input[0] * case.input[1] * case.input[2]
    return work, case.batch * max(case.c_in * vol, case.c_out * o[0] * o[1] * o[2])


def _within(case, work_max, elems_max):
    """The draw brought under the caps (the oracle's and the emulator's time) without filtering: the sizes to
    their smallest, then one batch, then the channels halved (so most draws keep their drawn edges)."""
    def fits(c):
        work, elems = _cost(c)
        return work <= work_max and elems <= elems_max
    if fits(case):
        return case
    smallest = tuple(max(1, case.dilation[a] * (case.kernel[a] - 1) + 1 - case.padding[2 * a] - case.padding[2 * a + 1])
                     for a in range(3))
    for edit in ({"input": (smallest[0], smallest[1], case.input[2])}, {"input": smallest}, {"batch": 1}):
        case = dataclasses.replace(case, **edit)
        if fits(case):
            return case
    while not fits(case):
        case = dataclasses.replace(case, c_in=max(1, case.c_in // 2), c_out=max(1, case.c_out // 2))
        if case.c_in == case.c_out == 1:
            break
    return case


def _planned(case, target):
    """The plan, or None after checking the no-plan error is named and counts every rejection."""
    try:
        return case_plan(case, target)
    except Conv3dBwdPlanError as exc:
        assert re.search(r"^no plan fits trn\d for this geometry: all \d+ candidates rejected", str(exc)), exc
        event("no plan")
        return None


def _small(case, target, pick_seed, every):
    note(f"reproduce: {reproducer(case, target)}")
    plan = _planned(case, target)
    if plan is None:
        return
    assert_case_ok(run_case(case, backend="nkisim", mode="exact", seed=0, target=target), 0)
    if pick_seed % CANDIDATE_SHARE:
        return
    alts = list(plan.feasible_candidates()[1:])
    if not every:
        alts = random.Random(pick_seed).sample(alts, min(CANDIDATE_SAMPLE, len(alts)))
    bad = [o.describe() for o in run_candidates(case, target=target, plans=alts) if not o.passed]
    assert not bad, f"{reproducer(case, target)}\n" + "\n".join(bad)


@settings(max_examples=SMALL_EXAMPLES)
@given(drawn=drawn(small=True), pick_seed=st.integers(0, 2**16 - 1))
def test_small_draws_are_exact(drawn, pick_seed):
    _small(*drawn, pick_seed, every=False)


@pytest.mark.nightly
@settings(settings.get_profile("nightly"))
@given(drawn=drawn(small=True), pick_seed=st.integers(0, 2**16 - 1))
def test_small_draws_are_exact_every_candidate_nightly(drawn, pick_seed):
    _small(*drawn, pick_seed, every=True)


def _large(case, target):
    from conv3d_bwd import nkisim
    from conv3d_bwd.verify.backends import _kernel

    note(f"reproduce: {reproducer(case, target)}")
    plan = _planned(case, target)
    if plan is None:
        return
    dt = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[case.dtype]
    specs = [nkisim.TensorSpec(s, dt) for s in (case.dy_shape, case.x_shape, case.w_shape)]
    res = nkisim.run(_kernel(prefer_emulator=True), *specs, lnc=case.lnc, target=target, trace_only=True,
                     **case.kernel_kwargs())
    assert res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes and res.peak_psum_banks <= plan.psum_banks


@settings(max_examples=LARGE_EXAMPLES)
@given(drawn=drawn(small=False))
def test_large_draws_trace_within_the_plan(drawn):
    _large(*drawn)


@pytest.mark.nightly
@settings(settings.get_profile("nightly"))
@given(drawn=drawn(small=False))
def test_large_draws_trace_within_the_plan_nightly(drawn):
    _large(*drawn)
