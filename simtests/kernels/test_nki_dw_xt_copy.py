"""Row-mode x-stationary dw with channel-major x^T tiles filled by plain ``dma_copy`` (``xT copy``,
``Plan.dw_xt_copy``): every fill path of ``RowXtDma`` (per pair, bundles merged along kh, head pieces)
under forced plans, bit-exact against the oracle on exact inputs; the x^T fills issue no ``dma_transpose``; the planner offers the form and charges it."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd, nki_dw_xt
from conv3d_bwd.kernels.costs import TARGET_FIGURES, CostSheet
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.dw_options import xt_copy_legal
from conv3d_bwd.kernels.xt_rows import xt_run_ns

from .support import STEM_SMALL, conv_shapes, geom_kw, run_and_compare, spy


def _copy(strategy=None, **want):
    """Edit: the best-estimated x-stationary ``xT dma`` candidate (of the strategy and with the switches
    asked for, forced on where the planner lists none), forced to ``xT copy``: the form itself runs,
    whatever the planner would pick."""
    def pick(p):
        base = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.dw_xt_dma
                                     and (strategy is None or a.strategy is strategy)
                                     and (a.dw_head_split == want.get('dw_head_split', False)))
        alts = [a for a in base if all(getattr(a, k) == v for k, v in want.items())]
        if not alts:   # a switch the planner does not list here: forced
            alts = [dataclasses.replace(a, **want) for a in base if not a.db_ones]
        assert alts, p.explain()
        return dataclasses.replace(min(alts, key=lambda a: a.estimated_us), dw_xt_copy=True)
    return pick


@pytest.fixture
def fills(monkeypatch):
    """The RowXtDma objects built (each knows whether it copies and how many copies it issued)."""
    return spy(monkeypatch, nki_dw_xt.RowXtDma, "__init__", lambda self, *a, **k: self)


GEOMS = [
    # the stem's kernel and stride at a small size: tiny C_in, H padding clipping 1-2 rows per plane
    pytest.param(STEM_SMALL, {}, 1, id="stem-small"),
    # C_in 8, dilation in H (the slot step is r_h rows), stride 1
    pytest.param({"batch": 2, "c_in": 8, "c_out": 6, "size": (4, 9, 7), "kernel": (2, 3, 3), "dilation": (1, 2, 1),
                  "padding": (1, 0, 2, 2, 1, 1)}, {}, 1, id="cin8-dil"),
    # C_in 48 (one pair per fill), stride 2, odd W
    pytest.param({"batch": 2, "c_in": 48, "c_out": 5, "size": (4, 8, 11), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, {}, 1, id="stride2-ci48"),
    # C_in over one tile (two C_in tiles), C_out over one tile
    pytest.param({"batch": 1, "c_in": 130, "c_out": 130, "size": (3, 5, 6), "kernel": (2, 3, 3),
                  "padding": (1, 0, 1, 1, 1, 1)}, {}, 1, id="ci130-co130"),
]


@pytest.mark.parametrize("geom, want, lnc", GEOMS)
def test_xt_copy_is_exact(geom, want, lnc, fills):
    run_and_compare(**geom, lnc=lnc, plan_edit=_copy(**want))
    assert fills and all(f.copy for f in fills)
    assert sum(f.copies for f in fills) > 0


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
@pytest.mark.parametrize("lnc", [1, 2])
def test_gradient_subsets(grads, lnc, fills):
    run_and_compare(**STEM_SMALL, grads=grads, lnc=lnc, plan_edit=_copy())
    assert fills and sum(f.copies for f in fills) > 0


@pytest.mark.parametrize("split", ["positions", "taps"])
def test_lnc2_splits(split, fills):
    geom = GEOMS[1].values[0]
    run_and_compare(**geom, lnc=2, plan_edit=_copy(dw_split=split))
    assert sum(f.copies for f in fills) > 0


def test_head_split_is_not_offered_and_ignored_if_forced(fills):
    """The head pieces (a few columns each) would make the copies' runs short: the planner does not
    offer ``xT copy`` with ``head split``, and the kernel, forced, fills by transposes (still exact)."""
    geom = {"batch": 1, "c_in": 128, "c_out": 32, "size": (4, 6, 9), "kernel": (3, 3, 3), "padding": (1,) * 6}
    dy, x, w = conv_shapes(**geom)
    p = plan_conv3d_bwd(dy, x, w, dtype="bf16", **geom_kw(geom))
    assert bool(p.feasible_candidates(where=lambda a: a.dw_head_split))
    assert not p.feasible_candidates(where=lambda a: a.dw_head_split and a.dw_xt_copy)
    run_and_compare(**geom, plan_edit=_copy(dw_head_split=True))
    assert fills and not any(f.copy for f in fills)


def test_x_transposes_are_gone_and_copies_use_both_hardware_queues():
    """Under the copy form the trace holds no dma_transpose from x (dy^T and filters may still be
    transposed), and the fills alternate between the SP- and ACT-triggered hardware-DGE queues."""
    dy, x, w = conv_shapes(**STEM_SMALL)
    kw = geom_kw(STEM_SMALL)
    plan = plan_conv3d_bwd(dy, x, w, dtype="bf16", **kw)
    specs = [nkisim.TensorSpec(s, "bfloat16") for s in (dy, x, w)]
    with forced_plan(_copy()(plan)):
        res = nkisim.run(conv3d_bwd, *specs, **kw, trace_only=True, cost_band=False)
    x_id = None
    for ins in res.trace.instrs:
        if ins.op == "dma_copy" and ins.attr("dge_mode", None) is not None and "hwdge" in str(ins.attr("dge_mode")):
            x_id = next(a.storage for a in ins.accesses if not a.write)
            break
    assert x_id is not None
    from_x = [ins for ins in res.trace.instrs if any(a.storage == x_id and not a.write for a in ins.accesses)]
    assert from_x and not [i for i in from_x if i.op == "dma_transpose"]
    engines = {str(i.attr("engine", "")) for i in from_x if i.op == "dma_copy"}
    assert len(engines) == 2, engines


def test_planner_offers_the_form_and_charges_blocks():
    """The form is a variant of every x-stationary ``xT dma`` candidate; its estimate charges bytes at
    the copies' descriptor efficiency where the transpose pays whole [128, 16] blocks: for the stem's
    tiny C_in (3 of 16 block elements) and a 31-row run the copy is several times cheaper, for a full
    128-row run of 64 channels the transpose is cheaper."""
    dy, x, w = conv_shapes(**STEM_SMALL)
    p = plan_conv3d_bwd(dy, x, w, dtype="bf16", **geom_kw(STEM_SMALL))
    alts = p.feasible_candidates()
    assert any(a.dw_xt_copy for a in alts)
    assert all(xt_copy_legal(validate(dy, x, w, p.stride, p.padding, p.dilation, "bf16"), a)
               for a in alts if a.dw_xt_copy)
    assert any(", xT copy" in a.label for a in alts)
    c = CostSheet(TARGET_FIGURES["trn2"])
    t_stem, c_stem = (xt_run_ns(c, 31, 2, 64, 3, 2, copy)[0] for copy in (False, True))
    assert c_stem * 4 < t_stem, (c_stem, t_stem)
    t_full, c_full = (xt_run_ns(c, 128, 1, 64, 64, 2, copy)[0] for copy in (False, True))
    assert t_full < c_full, (t_full, c_full)


def test_only_x_stationary_xt_dma_plans_are_legal():
    dy, x, w = conv_shapes(**STEM_SMALL)
    g = validate(dy, x, w, (1, 2, 2), STEM_SMALL["padding"], (1, 1, 1), "bf16")
    p = plan_conv3d_bwd(dy, x, w, dtype="bf16", **geom_kw(STEM_SMALL))
    for a in p.feasible_candidates():
        assert xt_copy_legal(g, a) == bool(a.dw_x_stationary and a.dw_xt_dma and a.dw_method is not None
                                           and a.dw_method.value == "row_pack")
    assert bool(p.feasible_candidates(where=lambda a: a.strategy is Strategy.PER_GRADIENT))
