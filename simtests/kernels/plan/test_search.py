"""The planner on its own: determinism, the method catalogue, explain/to_dict, capacities, forcing."""
from __future__ import annotations

import json

import pytest

from conv3d_bwd.kernels.errors import Conv3dBwdInputError
from conv3d_bwd.kernels.plan import (
    DbMethod,
    DwMethod,
    DxMethod,
    Plan,
    Strategy,
    all_method_names,
    clear_plan_cache,
    current_forced_plan,
    forced_plan,
    plan_conv3d_bwd,
)
from conv3d_bwd.verify.cases import CASE_SETS
from conv3d_bwd.verify.sweep import draw_case

from ..support import out_size
from .support import case_kwargs, exhaustive_plan

TARGET_SBUF = {"trn1": 180_224, "trn2": 212_984, "trn3": 245_752}


def shapes(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1)):
    o = tuple(out_size(size[a], kernel[a], stride[a], padding[2 * a], padding[2 * a + 1], dilation[a])
              for a in range(3))
    return (batch, c_out) + o, (batch, c_in) + tuple(size), tuple(kernel) + (c_in, c_out)


VAE = shapes(1, 128, 128, (4, 32, 32), (3, 3, 3), padding=(1,) * 6)


def test_plan_is_deterministic_and_complete():
    clear_plan_cache()   # (a cached pick may have been asked for every candidate: its table then has them all)
    a = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    clear_plan_cache()
    b = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    assert a is not b   # planned twice, not served from the cache
    assert a == b and a.to_dict() == b.to_dict()
    assert isinstance(a.strategy, Strategy) and isinstance(a.dx_method, DxMethod)
    assert isinstance(a.dw_method, DwMethod) and isinstance(a.db_method, DbMethod)
    assert a.estimated_us > 0 and a.sbuf_bytes <= TARGET_SBUF["trn2"] and a.psum_banks <= 8


def test_plans_are_cached_per_problem():
    """The same problem, however spelled, is planned once; another problem is not served its plan."""
    clear_plan_cache()
    a = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    dy, x, w = ([list(s) for s in VAE])
    assert plan_conv3d_bwd(dy, x, w, padding=[1] * 6, stride=[1, 1, 1]) is a
    other = plan_conv3d_bwd(*VAE, padding=(1,) * 6, compute_db=False)
    assert other is not a and not other.compute_db and a.compute_db
    assert plan_conv3d_bwd(*VAE, padding=(1,) * 6, lnc=2).lnc == 2


def test_plan_edits_keep_every_field_and_reject_unknown_ones():
    """The planner's fast ``replace`` behaves like dataclasses.replace on a Plan."""
    import dataclasses

    from conv3d_bwd.kernels import plan as planner

    a = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    b = planner.replace(a, dy_bufs=a.dy_bufs + 1)
    assert b == dataclasses.replace(a, dy_bufs=a.dy_bufs + 1) and b.dy_bufs == a.dy_bufs + 1 and b != a
    with pytest.raises(TypeError, match="no field"):
        planner.replace(a, dy_buffers=3)


def test_methods_are_named_in_the_catalogue():
    names = all_method_names()
    for needed in ("strategy:shared_dy", "strategy:per_gradient", "dx:gemm", "dx:gather_s1", "dx:phase_gather",
                   "dw:gemm", "dw:tap_gemm", "dw:tap_pack", "dw:row_pack", "dw:dma_gemm", "db:fold",
                   "db:standalone"):
        assert needed in names
    p = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    assert p.methods() <= names
    assert {m.split(":")[0] for m in p.methods()} == {"strategy", "dx", "dw", "db"}


@pytest.mark.parametrize("geom, kw, dx", [
    (shapes(2, 8, 16, (4, 6, 6), (1, 1, 1)), {}, "dx:gemm"),
    (shapes(1, 8, 8, (4, 6, 6), (3, 3, 3), padding=(1,) * 6), {"padding": (1,) * 6}, "dx:gather_s1"),
    (shapes(1, 8, 8, (8, 8, 8), (3, 3, 3), stride=(2, 2, 2), padding=(1,) * 6),
     {"stride": (2, 2, 2), "padding": (1,) * 6}, "dx:phase_gather"),
])
def test_dx_method_follows_geometry(geom, kw, dx):
    # the gather family's name follows the geometry; with small C_in dx:toeplitz competes beside it
    plan = plan_conv3d_bwd(*geom, **kw)
    assert dx in set().union(*(a.methods() for a in plan.feasible_candidates()))
    assert plan.methods() & {dx, "dx:toeplitz"}


def test_explain_lists_candidates_costs_and_pick():
    p = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    text = p.explain()
    assert "pick:" in text and p.label in text
    assert sum(1 for c in p.candidates if c.feasible) == len(p.feasible_candidates()) >= 2
    for c in p.candidates:
        assert (c.label in text)
    d = p.to_dict()
    json.dumps(d)
    for key in ("strategy", "methods", "tiles", "estimated_us", "candidates"):
        assert key in d


def test_rejections_carry_reasons():
    # 512 channels, 27 taps: all-resident fp32 dw accumulators (221 KB) do not fit trn2 SBUF
    g = shapes(1, 512, 512, (2, 16, 16), (3, 3, 3), padding=(1,) * 6)
    p = plan_conv3d_bwd(*g, padding=(1,) * 6)
    rejected = [c for c in p.candidates if not c.feasible]
    assert rejected and all(c.reason and c.estimated_us is None for c in rejected)
    assert any("SBUF" in c.reason for c in rejected)
    assert p.sbuf_bytes <= TARGET_SBUF["trn2"]


_BIG = [
    # (geometry, keywords, slow to plan: 10-20 s per target; "nightly": 40 s and more, on every target)
    (shapes(1, 64, 64, (8, 200, 200), (3, 3, 3), padding=(1,) * 6), {"padding": (1,) * 6}, True),
    (shapes(2, 1024, 1024, (2, 8, 8), (3, 3, 3), padding=(1,) * 6), {"padding": (1,) * 6}, False),
    (shapes(1, 3, 64, (16, 128, 256), (3, 7, 7), stride=(1, 2, 2), padding=(1, 1, 3, 3, 3, 3)),
     {"stride": (1, 2, 2), "padding": (1, 1, 3, 3, 3, 3)}, "nightly"),
    (shapes(1, 1000, 1000, (1, 1, 1), (1, 1, 1)), {}, False),
]


def _big_params():
    """Every big geometry on every target; the slow-to-plan ones on trn1 and trn3 (trn2 is the default
    target), and the slowest on every target, only in the nightly env."""
    for i, (g, kw, slow) in enumerate(_BIG):
        for target in ("trn1", "trn2", "trn3"):
            marks = [pytest.mark.nightly] if slow == "nightly" or (slow and target != "trn2") else []
            yield pytest.param(target, g, kw, marks=marks, id=f"{target}-g{i}")


@pytest.mark.parametrize("target, g, kw", list(_big_params()))
def test_big_geometries_get_a_plan_within_capacity(target, g, kw):
    for dtype in ("bf16", "fp32"):
        p = plan_conv3d_bwd(*g, dtype=dtype, target=target, **kw)
        assert p.sbuf_bytes <= TARGET_SBUF[target] and p.psum_banks <= 8


def test_every_feasible_candidate_is_a_full_plan_cheapest_first():
    p = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    alts = p.feasible_candidates()
    assert alts[0] == p
    ests = [round(a.estimated_us, 6) for a in alts]
    assert ests == sorted(ests)
    assert all(isinstance(a, Plan) and a.label for a in alts)


def test_forced_plan_context():
    p = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    alt = p.feasible_candidates()[-1]
    assert current_forced_plan() is None
    with forced_plan(alt) as f:
        assert f is alt and current_forced_plan() is alt
    assert current_forced_plan() is None
    with pytest.raises(Conv3dBwdInputError, match="plan"), forced_plan("not a plan"):
        pass


@pytest.mark.parametrize("kwargs, match", [
    ({"stride": (0, 1, 1)}, "stride"),
    ({"stride": (1, 1)}, "stride"),
    ({"dilation": (1, 0, 1)}, "dilation"),
    ({"padding": (0, 0, -1, 0, 0, 0)}, "padding"),
    ({"dtype": "fp64"}, "dtype"),
    ({"lnc": 3}, "lnc"),
    ({"target": "trn9"}, "target"),
    ({"compute_dx": False, "compute_dw": False, "compute_db": False}, "at least one"),
])
def test_bad_arguments_name_argument_value_rule(kwargs, match):
    with pytest.raises(Conv3dBwdInputError, match=match):
        plan_conv3d_bwd(*shapes(1, 4, 4, (4, 4, 4), (3, 3, 3)), **kwargs)


@pytest.mark.parametrize("dy, x, w, match", [
    ((1, 4, 3, 3, 3), (1, 4, 4, 4, 4), (3, 3, 3, 4, 4), "dy spatial"),
    ((2, 4, 2, 2, 2), (1, 4, 4, 4, 4), (3, 3, 3, 4, 4), "batch"),
    ((1, 5, 2, 2, 2), (1, 4, 4, 4, 4), (3, 3, 3, 4, 4), "C_out"),
    ((1, 4, 2, 2, 2), (1, 3, 4, 4, 4), (3, 3, 3, 4, 4), "C_in"),
    ((1, 4, 2, 2), (1, 4, 4, 4, 4), (3, 3, 3, 4, 4), "5-D"),
    ((1, 4, 1, 1, 1), (1, 4, 2, 2, 2), (3, 3, 3, 4, 4), "forward output size"),
])
def test_shape_rules(dy, x, w, match):
    with pytest.raises(Conv3dBwdInputError, match=match):
        plan_conv3d_bwd(dy, x, w)


def test_lnc2_plan_splits_work():
    p1 = plan_conv3d_bwd(*VAE, padding=(1,) * 6, lnc=1)
    p2 = plan_conv3d_bwd(*VAE, padding=(1,) * 6, lnc=2)
    assert p2.lnc == 2 and p2.estimated_us < p1.estimated_us


def test_planning_progress_counts_the_candidates(monkeypatch):
    """The progress a display reads (``PROGRESS``) counts the enumerated candidates (duplicates too) up to
    their number while they are checked and estimated, then clears."""
    from conv3d_bwd.kernels.plan import search

    seen = []
    check = search._check
    monkeypatch.setattr(search, "_check", lambda g, p, hw: (seen.append((search.PROGRESS.stage, search.PROGRESS.done,
                                                                        search.PROGRESS.total)), check(g, p, hw))[1])
    clear_plan_cache()
    plan = plan_conv3d_bwd(*VAE, padding=(1,) * 6)
    clear_plan_cache()
    stages, done, totals = zip(*seen)
    assert set(stages) == {"checking"} and len(set(totals)) == 1   # (one check per distinct label)
    assert len(seen) == sum(c.label != "dx:toeplitz (any tiling)" for c in plan.candidates) <= totals[0]
    assert list(done) == sorted(set(done)) and done[-1] <= totals[0]
    assert search.PROGRESS.describe() == "" and search.PROGRESS.total == 0


# the pruned search against the exhaustive one: every default case at LNC1 and LNC2 (in the suite the fast ones
# of a few groups at their own LNC, LNC2 too for the LNC2 and layer cases; the rest in the nightly env: an exhaustive search
# estimates every candidate), random sweep geometries
PRUNE_CASES = [pytest.param(c, n, id=f"{c.id}-lnc{n}",
                            marks=() if c.fast and c.group in ("basic", "strides", "lnc2", "layers", "grads")
                            and (n == c.lnc or c.group in ("lnc2", "layers")) else pytest.mark.nightly)
               for c in CASE_SETS["default"] for n in (1, 2)]
SWEEP_CASES = [draw_case(3, "small", i) for i in range(4)] + [draw_case(3, "large", 0)]


def _assert_same_pick(pruned, full) -> None:
    assert (pruned.label, pruned.estimated_us) == (full.label, full.estimated_us)
    assert pruned == full


@pytest.mark.parametrize("case, lnc", PRUNE_CASES)
def test_pruned_pick_is_the_exhaustive_pick(case, lnc):
    from conv3d_bwd.kernels.plan import search

    misses = search.BOUND_MISSES[0]
    full = exhaustive_plan(case, "trn2", lnc)
    if full is None:
        pytest.skip("no candidate fits (the planner's error is tested elsewhere)")
    clear_plan_cache()
    _assert_same_pick(plan_conv3d_bwd(**case_kwargs(case, "trn2", lnc)), full)
    assert search.BOUND_MISSES[0] == misses   # no estimate under its bound


@pytest.mark.parametrize("drawn", SWEEP_CASES, ids=[c.id for c, _t in SWEEP_CASES])
def test_pruned_pick_is_the_exhaustive_pick_on_sweep_geometries(drawn):
    case, target = drawn
    full = exhaustive_plan(case, target)
    if full is None:
        pytest.skip("no candidate fits (the planner's error is tested elsewhere)")
    clear_plan_cache()
    _assert_same_pick(plan_conv3d_bwd(**case_kwargs(case, target)), full)


def test_a_pruned_pick_lists_every_alternative():
    """``feasible_candidates`` of a pruned pick: every feasible candidate estimated, as the exhaustive search
    lists them, whether the search's leftovers are at hand or planned again; the candidate table names the
    candidates not estimated with their bound."""
    from conv3d_bwd.kernels.plan import search

    case = next(c for c in CASE_SETS["default"] if c.grads == ("dx", "dw", "db") and c.lnc == 1)
    full = exhaustive_plan(case)
    every = [(a.label, a.estimated_us) for a in full.feasible_candidates()]
    clear_plan_cache()
    pick = plan_conv3d_bwd(**case_kwargs(case))
    assert pick.alternatives_lazy and not pick.alternatives   # (the search pruned: else nothing to test)
    unestimated = [c for c in pick.candidates if c.feasible and c.estimated_us is None]
    assert unestimated and all(c.reason.startswith("not estimated: its bound") for c in unestimated)
    assert len([c for c in pick.candidates if c.feasible]) == len(every)
    assert "not estimated: its bound" in pick.explain()
    assert [(a.label, a.estimated_us) for a in pick.feasible_candidates()] == every
    table = {c.label: c.estimated_us for c in pick.candidates if c.feasible}   # now with every estimate
    assert table == dict(every)
    clear_plan_cache()
    again = plan_conv3d_bwd(**case_kwargs(case))
    search._UNESTIMATED.clear()   # (as in another process)
    assert [(a.label, a.estimated_us) for a in again.feasible_candidates()] == every


def test_a_predicate_estimates_only_the_alternatives_it_selects(monkeypatch):
    """``feasible_candidates(where=...)`` of a pruned pick: the alternatives the predicate holds for, with the
    exhaustive search's estimates and order, estimated alone (the others stay unestimated until asked for);
    the full list afterwards is the exhaustive one still."""
    from conv3d_bwd.kernels.plan import search

    case = next(c for c in CASE_SETS["default"] if c.grads == ("dx", "dw", "db") and c.lnc == 1)
    every = [(a.label, a.estimated_us, a.dw_method) for a in exhaustive_plan(case).feasible_candidates()]
    clear_plan_cache()
    pick = plan_conv3d_bwd(**case_kwargs(case))
    assert pick.alternatives_lazy
    pending = len(search._UNESTIMATED[tuple(getattr(pick, k) for k in search.PROBLEM_FIELDS)].pending)
    kind = next(m for _label, _est, m in every[1:] if m is not pick.dw_method)   # a dw method not picked
    estimated = []
    real = search._estimated
    monkeypatch.setattr(search, "_estimated", lambda *a, **k: estimated.append(1) or real(*a, **k))
    some = pick.feasible_candidates(where=lambda a: a.dw_method is kind)
    assert [(a.label, a.estimated_us) for a in some] == [(lab, est) for lab, est, m in every if m is kind]
    assert 0 < len(estimated) < pending
    assert pick.feasible_candidates(where=lambda a: a.dw_method is kind) == some   # kept, not estimated again
    searched = {c.label for c in pick.candidates if c.estimated_us is not None}
    assert len(estimated) == sum(1 for a in some if a.label not in searched)
    assert [(a.label, a.estimated_us) for a in pick.feasible_candidates()] == [(lab, est) for lab, est, _m in every]
