"""LNC2 dw split by W output columns (`columns split`): every row chunk on both programs (so 64-row
chunks still stack on K = 128), half the W columns each, x^T filled over the columns those read, the
fp32 partials exchanged (deferred past dx). Bit-exact under nkisim on exact inputs (forced plans), the
planner's view of it, and its budget against the measured peak."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import (
    dw_columns,
    dw_columns_legal,
    dw_columns_on,
    dw_defer_finish,
    dw_program_items,
)
from conv3d_bwd.kernels.spec.items import dw_items
from conv3d_bwd.kernels.xt_rows import xt_columns, xt_window

from .support import assert_candidates_within_budget, conv_shapes, geom_kw, geom_shapes, run_and_compare


def _columns(stack=None):
    """Edit: the best-estimated columns-split candidate (the planner lists stacked ones only); where none
    stacks (no 64-row chunks), a positions-split x-stationary ``xT dma`` candidate forced to split columns
    (the kernel runs it; the planner does not offer it)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_split == 'columns'
                                     and (stack is None or a.dw_row_stack == stack))
        if not alts and not stack:
            # (not db_ones: its ones row is not legal under the columns split, planner.db_ones_legal)
            alts = [dataclasses.replace(a, dw_split="columns") for a in p.feasible_candidates()
                    if a.dw_split == "positions" and a.strategy is Strategy.PER_GRADIENT
                    and a.dw_x_stationary and a.dw_xt_dma and not a.db_ones]
        assert alts, p.explain()
        return min(alts, key=lambda a: a.estimated_us)
    return pick


COLUMN_GEOMS = [   # odd W_out (uneven halves), stride 2 with padding, dilation 2, C_out over one tile
    pytest.param({"batch": 2, "c_in": 8, "c_out": 6, "size": (8, 32, 5), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1,) * 6}, True, id="s2-b2-stacked-oddW"),
    pytest.param({"batch": 1, "c_in": 5, "c_out": 7, "size": (4, 6, 7), "kernel": (3, 3, 3), "dilation": (2, 2, 2),
                  "padding": (2,) * 6}, None, id="dil2-oddW"),
    pytest.param({"batch": 2, "c_in": 6, "c_out": 130, "size": (3, 4, 6), "kernel": (3, 2, 3),
                  "padding": (1, 1, 0, 1, 1, 0)}, None, id="co130-asym"),
    pytest.param({"batch": 1, "c_in": 4, "c_out": 3, "size": (2, 3, 2), "kernel": (1, 1, 3),
                  "padding": (0, 0, 0, 0, 1, 1)}, None, id="k113-W2"),
]


@pytest.mark.parametrize("geom, stack", COLUMN_GEOMS)
def test_columns_split_is_exact(geom, stack):
    run_and_compare(**geom, lnc=2, plan_edit=_columns(stack))


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_columns_split_gradient_subsets(grads):
    geom = {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 6, 7), "kernel": (3, 3, 3), "stride": (2, 1, 2),
            "padding": (1,) * 6}
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=_columns())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_columns_split_dtypes(dtype):
    geom = {"batch": 1, "c_in": 3, "c_out": 4, "size": (3, 5, 8), "kernel": (3, 3, 3), "padding": (1,) * 6}
    run_and_compare(**geom, dtype=dtype, lnc=2, plan_edit=_columns())


def test_columns_split_down_s2_like_stacks_and_defers():
    """C_in 64, stride 2, two batches of 4x16 output rows: each program stacks the two batches' 64-row
    chunks (K = 128) over its 8 of 16 columns, and its finish is deferred past dx."""
    kw = {"stride": (2, 2, 2), "padding": (1,) * 6}
    shapes = conv_shapes(2, 64, 128, (8, 32, 32), (3, 3, 3), **kw)
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=2)
    g = validate(*shapes, **kw, dtype="bf16")
    alts = plan.feasible_candidates(where=lambda a: a.dw_split == 'columns' and a.dw_row_stack)
    assert alts
    a = alts[0]
    assert dw_columns_legal(g, a) and dw_columns_on(g, a) and dw_defer_finish(g, a)
    assert dw_columns(g, a, 0) == (0, 8) and dw_columns(g, a, 1) == (8, 16)
    assert dw_program_items(g, a, 0) == dw_program_items(g, a, 1) == dw_items(g, a)
    assert "columns split" in a.label
    # the x^T windows: tile columns 1..16 (x 0..15) and 16..32 of the 33 (pad 1 before x)
    assert xt_columns(g) == (33, 1, 33)
    assert xt_window(g, 0, 8) == (1, 17) and xt_window(g, 8, 16) == (16, 33)
    # never at LNC1, never with shared dy, never without x^T by DMA
    assert not dw_columns_legal(g, dataclasses.replace(a, lnc=1))
    assert not dw_columns_legal(g, dataclasses.replace(a, strategy=Strategy.SHARED_DY))
    assert not dw_columns_legal(g, dataclasses.replace(a, dw_xt_dma=False))


@pytest.mark.parametrize("geom, stack", COLUMN_GEOMS[:1])
def test_columns_split_budget_bounds_the_measured_peak(geom, stack):
    assert_candidates_within_budget(geom_shapes(geom), lambda a: a.dw_split == "columns", 3, lnc=2, **geom_kw(geom))


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw")], ids=lambda g: "+".join(g))
def test_columns_split_stacked_gradient_subsets(grads):
    geom = COLUMN_GEOMS[0].values[0]
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=_columns(True))
