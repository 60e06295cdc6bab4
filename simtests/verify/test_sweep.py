"""verify.sweep and ``conv3d-bwd sweep``: reproducible draws over the ranges users pass, a failure per class
with a check line that rebuilds the very case, counts, outliers; a fast slice with zero failures."""
from __future__ import annotations

import re
import shlex

import pytest

from conv3d_bwd.kernels.errors import Conv3dBwdPlanError
from conv3d_bwd.verify import sweep
from conv3d_bwd.verify.cli import _case_from, build_parser, main
from conv3d_bwd.verify.sweep import SMALL, draw_case, reproducer, run_one, run_sweep


def test_draws_are_reproducible_and_distinct():
    assert draw_case(4, "small", 7) == draw_case(4, "small", 7)
    assert draw_case(4, "small", 7) != draw_case(5, "small", 7) != draw_case(4, "small", 8)


def test_draws_cover_the_ranges_users_pass():
    drawn = [draw_case(0, "small", i) for i in range(1500)] + [draw_case(0, "large", i) for i in range(300)]
    cases = [c for c, _t in drawn]
    beyond = set()
    for c in cases:
        for a in range(3):
            reach = c.dilation[a] * (c.kernel[a] - 1)
            for side in range(2):
                if c.padding[2 * a + side] > reach:
                    beyond.add((a, side))
    assert beyond == {(a, s) for a in range(3) for s in range(2)}   # beyond the reach on every side
    channels = {c.c_in for c in cases} | {c.c_out for c in cases}
    assert {1, 127, 128, 129, 255, 256, 257} <= channels and max(channels) >= 280
    assert min(c.input[2] for c in cases) == 1 and max(c.input[2] for c in cases) >= 300
    assert {c.grads for c in cases} == set(sweep.GRAD_SUBSETS)
    assert {c.lnc for c in cases} == {1, 2} and {t for _c, t in drawn} == {"trn1", "trn2", "trn3"}
    assert all(not (t == "trn1" and c.lnc == 2) for c, t in drawn)
    assert {c.dtype for c in cases} == {"bf16", "fp16", "fp32"}
    assert {k for c in cases for k in c.kernel} == set(range(1, 8))
    small = cases[:1500]
    assert all(c.batch * max(c.c_in * _vol(c.input), c.c_out * _vol(c.out_size)) <= SMALL.max_elems for c in small)


def _vol(v):
    return v[0] * v[1] * v[2]


def test_the_reproducer_rebuilds_the_case():
    for i in range(20):
        case, target = draw_case(1, "small", i)
        line = reproducer(case, target, "stat", 9)
        argv = shlex.split(line)
        assert argv[:2] == ["conv3d-bwd", "check"]
        args = build_parser().parse_args(argv[1:])
        rebuilt = _case_from(args)
        assert rebuilt.geometry() == case.geometry() and rebuilt.grads == case.grads and rebuilt.lnc == case.lnc
        assert (args.target, args.mode, args.seed, args.dtype) == (target, "stat", 9, case.dtype)


def test_each_failure_class_is_reported_with_its_check_line(monkeypatch):
    def no_plan(case, target):
        raise Conv3dBwdPlanError("no plan fits trn2 for this geometry: all 3 candidates rejected")

    monkeypatch.setattr(sweep, "_plan", no_plan)
    o = run_one(0, "small", 0)
    assert o.failure == "no plan" and "all 3 candidates" in o.detail
    monkeypatch.undo()

    def boom(case, target, mode, seed):
        raise IndexError("dy_band0_0: slice 0:2 is out of range for dim 3 of size 1")

    monkeypatch.setattr(sweep, "_run_small", boom)
    lines = []
    totals = run_sweep(0, 2, 0, out=lines.append)
    assert totals.n_failures == 2 and [o.failure for o in totals.failures] == ["crash", "crash"]
    fails = [ln for ln in lines if ln.startswith("FAIL [crash] small #")]
    assert len(fails) == 2 and all("conv3d-bwd check --batch" in ln and "IndexError" in ln for ln in fails)
    assert re.search(r"crash 2; failures 2;", lines[-1])


def test_wrong_numbers_are_their_own_class(monkeypatch):
    """A planted off-by-one in the oracle side: the kernel then disagrees with it, class 'wrong'."""
    from conv3d_bwd.verify import harness

    real = harness.reference_for

    def shifted(case, inputs):
        ref = real(case, inputs)
        for v in ref.values.values():
            v += 1.0
        return ref

    monkeypatch.setattr(harness, "reference_for", shifted)
    o = run_one(0, "small", 1)
    assert o.failure == "wrong" and "outside the exact tolerance" in o.detail


def test_outliers_are_kept():
    o = sweep.Outcome("small", 3, draw_case(0, "small", 3)[0], "trn2", estimated_us=10.0, modelled_us=16.0)
    assert o.outlier and not sweep.Outcome("small", 3, o.case, "trn2", estimated_us=10.0, modelled_us=14.0).outlier
    assert sweep.Outcome("small", 3, o.case, "trn2", estimated_us=10.0, modelled_us=6.0).outlier
    assert "modelled/estimate 1.60" in sweep.outlier_line(o)


def test_fast_slice_has_no_failure(capsys):
    """The CI slice of the sweep: 5 small geometries in full, 1 large one traced."""
    assert main(["sweep", "--seed", "0", "--small", "5", "--large", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"sweep: 5 small \(full\) \+ 1 large \(traced\) geometries .*pass 6; failures 0", out), out


@pytest.mark.nightly
def test_nightly_slice_has_no_failure(capsys):
    """A second seed's slice, bigger (the full nightly sweep is tox's second command)."""
    assert main(["sweep", "--seed", "1", "--small", "200", "--large", "20", "--jobs", "2"]) == 0
