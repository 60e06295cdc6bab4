"""Row-mode dw with two 64-row chunks stacked on K = 128 (``Plan.dw_row_stack``): bit-exact forced plans
over stride 1 / 2 / 3 axes, odd sizes, padding, C not a multiple of 64, several batches (stacks across
batches), a smaller upper chunk, an odd chunk count (the last runs alone), every gradient subset with dw,
both strategies, LNC2 (positions and taps splits), bf16 and fp16; the roles list; legality."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels import nki_dw
from conv3d_bwd.kernels.plan import DwMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import row_stack_offset, row_stack_roles
from conv3d_bwd.kernels.spec.dw_options import dw_direct

from .support import geom_shapes, run_and_compare, spy


@pytest.fixture
def passes(monkeypatch):
    """The number of row chunks of every dw matmul pass (so a test knows stacking really ran)."""
    return spy(monkeypatch, nki_dw.DwState, "_rows_pass", lambda self, parts, nrows: (len(parts), nrows))


def _stacked(strategy=None, split=None, edit=None):
    """Edit: the first feasible candidate with dw_row_stack (of ``strategy`` / LNC2 ``split``); with
    ``edit``: the first x-stationary ``xT dma`` one, edited."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: (a.dw_row_stack if edit is None else a.dw_x_stationary
                                     and a.dw_xt_dma) and (strategy is None or a.strategy is strategy)
                                     and (split is None or a.dw_split == split))
        assert alts, p.explain()
        q = alts[0] if edit is None else dataclasses.replace(alts[0], **edit)
        assert q.dw_row_stack and q.dw_x_stationary and q.dw_xt_dma and q.dw_method is DwMethod.ROW_PACK
        return q
    return pick


# out rows (D_out x H_out) per batch = 64: one chunk each, stacked across batches
S1 = {"batch": 2, "c_in": 5, "c_out": 7, "size": (8, 8, 5), "kernel": (3, 3, 3), "padding": (1,) * 6}
# stride 2 in D, 3 in H, 2 in W, asymmetric padding, odd W: out 4 x 16 x 3
S23 = {"batch": 2, "c_in": 6, "c_out": 9, "size": (8, 47, 6), "kernel": (3, 3, 2), "stride": (2, 3, 2),
       "padding": (1, 1, 1, 0, 0, 1)}
# C_in 130 (a full and a 2-channel C_in tile), C_out 140 (two C_out tiles), three batches (the last alone)
WIDE = {"batch": 3, "c_in": 130, "c_out": 140, "size": (4, 16, 3), "kernel": (2, 3, 2), "stride": (1, 1, 1),
        "padding": (0, 1, 1, 1, 0, 1)}
# down_s2-like at small W: C_in 64, C_out 128, stride 2, out 4 x 16 x 2
DOWN = {"batch": 2, "c_in": 64, "c_out": 128, "size": (8, 32, 4), "kernel": (3, 3, 3), "stride": (2, 2, 2),
        "padding": (1,) * 6}


@pytest.mark.parametrize("geom", [S1, S23, WIDE, DOWN], ids=["s1", "s232-asym", "c130x140-b3", "down"])
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY], ids=["per-grad", "shared"])
def test_row_stack_is_exact(geom, strategy, passes):
    run_and_compare(**geom, plan_edit=_stacked(strategy))
    assert (2, 128) in passes
    if geom["batch"] == 3:
        assert (1, 64) in passes   # the odd chunk out runs alone


def test_row_stack_with_a_smaller_upper_chunk_is_exact(passes):
    """dw bands of 4 + 2 D rows (64 + 32 rows): each band's two chunks stack, K = 96."""
    geom = dict(S1, size=(6, 16, 3))
    run_and_compare(**geom, plan_edit=_stacked(Strategy.PER_GRADIENT, edit={"dw_band": (4, 16), "dw_row_stack": True}))
    assert passes == [(2, 96), (2, 96)]


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw")])
def test_row_stack_gradient_subsets_are_exact(grads, passes):
    run_and_compare(**S23, grads=grads, plan_edit=_stacked())
    assert (2, 128) in passes


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_row_stack_dtypes_are_exact(dtype):
    run_and_compare(**S1, dtype=dtype, plan_edit=_stacked())


@pytest.mark.parametrize("split", ["positions", "taps"])
def test_row_stack_lnc2_is_exact(split, passes):
    """LNC2: the positions split gives each program two of the four batches (they stack), the taps
    split every batch to both programs."""
    run_and_compare(**dict(S1, batch=4), lnc=2, plan_edit=_stacked(Strategy.PER_GRADIENT, split=split))
    assert (2, 128) in passes


def test_row_stack_is_never_offered_where_it_cannot_run():
    """fp32 (no xT dma) and chunks that never pair (32 rows) get no stacked candidate."""
    for geom, dtype in ((S1, "fp32"), (dict(S1, size=(4, 8, 5)), "bf16")):
        shapes = geom_shapes(geom)
        plan = plan_conv3d_bwd(*shapes, stride=(1, 1, 1), padding=geom["padding"], dtype=dtype)
        assert not plan.feasible_candidates(where=lambda a: a.dw_row_stack)
    shapes = geom_shapes(S1)
    plan = plan_conv3d_bwd(*shapes, stride=(1, 1, 1), padding=S1["padding"])
    assert bool(plan.feasible_candidates(where=lambda a: a.dw_row_stack))


def test_row_stack_roles():
    assert row_stack_offset(64, 64) == 64 and row_stack_offset(64, 65) == 0 and row_stack_offset(32, 32) == 0
    assert row_stack_roles([64, 64, 64]) == ["lower", "upper", "alone"]
    assert row_stack_roles([64, 128, 64, 32]) == ["alone", "alone", "lower", "upper"]
    assert row_stack_roles([32, 64]) == ["alone", "alone"]


def test_row_stack_halves_the_dw_matmuls_in_the_estimate():
    """down_s2 (the bench shape): the best stacked candidate's estimate (x^T by transposes) is below its
    unstacked twin's (not dw-interleaved: that flow's estimate is bound by dx's bands, not by dw's boxes)."""
    shapes = geom_shapes({"batch": 2, "c_in": 64, "c_out": 128, "size": (8, 32, 32), "kernel": (3, 3, 3),
                          "stride": (2, 2, 2), "padding": (1,) * 6})
    pick = plan_conv3d_bwd(*shapes, stride=(2, 2, 2), padding=(1,) * 6)
    plan = min((a for a in (pick, *pick.feasible_candidates()) if a.dw_row_stack and not a.dw_xt_copy
                and not a.dw_interleave),
               key=lambda a: a.estimated_us)
    twin = pick.feasible_candidates(where=lambda a: a.label == plan.label.replace(', rows stacked', ''))
    assert len(twin) == 1 and twin[0].estimated_us > plan.estimated_us
    # the estimate's PE time: the stacked pass does the two chunks' matmuls in one (K = 128)
    assert dict(twin[0].engine_us)["tensor"] > dict(plan.engine_us)["tensor"] + 5


def test_one_stacked_pass_evicts_straight_to_the_output_dtype():
    """Two 64-row chunks in one stacked pass fold every accumulator once (dw_direct: no fp32 copy and
    cast); a third chunk (three batches) or a second pass keeps the fp32 accumulator."""
    for geom, direct in ((S1, True), (DOWN, True), (WIDE, False), (dict(S1, size=(6, 16, 3)), False)):
        plan = plan_conv3d_bwd(*geom_shapes(geom), stride=geom.get("stride", (1, 1, 1)), padding=geom["padding"])
        edit = {"dw_band": (4, 16), "dw_row_stack": True} if geom["size"] == (6, 16, 3) else {}
        alts = [dataclasses.replace(a, **edit) for a in plan.feasible_candidates()
                if (a.dw_row_stack or edit and a.dw_x_stationary and a.dw_xt_dma) and a.strategy is Strategy.PER_GRADIENT]
        assert alts and all(dw_direct(a.geometry(), a) is direct for a in alts), geom
