"""The budget sweep's candidate cover (support.pairwise_cover) must cover what it claims."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from conv3d_bwd.kernels.plan import plan_conv3d_bwd

from .support import _CHOICE_FIELDS, assert_candidates_within_budget, conv_shapes, pairwise_cover

SHAPES = conv_shapes(1, 16, 16, (3, 6, 6), (3, 3, 3), padding=(1,) * 6)


def _pairs(plan) -> set:
    return set(itertools.combinations([(f, getattr(plan, f)) for f in _CHOICE_FIELDS], 2))


@pytest.mark.fast
def test_pairwise_cover_holds_every_pair_the_candidates_hold():
    alts = plan_conv3d_bwd(*SHAPES, padding=(1,) * 6).feasible_candidates()
    cover = pairwise_cover(alts)
    assert 0 < len(cover) < len(alts), "a cover that keeps every candidate (or none) saves nothing"
    assert set().union(*map(_pairs, cover)) == set().union(*map(_pairs, alts))
    assert max(a.sbuf_bytes for a in cover) == max(a.sbuf_bytes for a in alts)
    assert max(a.psum_banks for a in cover) == max(a.psum_banks for a in alts)
    assert pairwise_cover(alts) == cover, "the cover must be deterministic"


def test_budget_sweep_argument_is_checked():
    with pytest.raises(ValueError, match="sweep"):
        assert_candidates_within_budget(SHAPES, sweep="some", padding=(1,) * 6)


def test_choice_fields_are_plan_fields():
    names = {f.name for f in dataclasses.fields(type(plan_conv3d_bwd(*SHAPES, padding=(1,) * 6)))}
    assert {"strategy", "dx_method", "dw_method", "s2d_group"} <= set(_CHOICE_FIELDS) <= names
