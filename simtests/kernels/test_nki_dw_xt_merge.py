"""Row-mode x-stationary dw with x^T bundles cut by kd and H-padding class (`xT merged`,
``Plan.dw_xt_merge``): each run of rows of a bundle is one 4-D transpose for all its pairs, its zero rows one
write for all its slots. Bit-exact under nkisim on exact inputs (forced plans), the planner's view of it
(bundles, legality, label, transfer count) and its budget against the measured peak. Also the D-phase-pairs
filter slots filled by runs of taps (``nki_dx_dpairs.slot_runs``)."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.nki_dx_dpairs import dpair_slot_map, slot_runs
from conv3d_bwd.kernels.plan import Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import dx_between_legal
from conv3d_bwd.kernels.spec.dw_options import xt_merge_legal
from conv3d_bwd.kernels.spec.dw_xs import dw_xs_bundles, xt_merge_bundles

from .support import assert_budget_bounds_peak, conv_shapes, run_and_compare, spy


def _merged(strategy=None, stacked=None):
    """Edit: the best-estimated `xT merged` candidate (of the strategy / stacking asked for); where the
    planner lists none (it offers the variant only under the LNC2 columns split), the best x-stationary
    ``xT dma`` candidate forced to merge (the kernel runs it: LNC1, shared dy, the positions split)."""
    def pick(p):
        def ok(a):
            return ((strategy is None or a.strategy is strategy)
                    and (stacked is None or a.dw_row_stack == stacked))
        alts = p.feasible_candidates(where=lambda a: a.dw_xt_merge and ok(a))
        if not alts:
            alts = [dataclasses.replace(a, dw_xt_merge=True) for a in p.feasible_candidates()
                    if ok(a) and a.dw_x_stationary and a.dw_xt_dma and not a.db_ones]
        assert alts, p.explain()
        return min(alts, key=lambda a: a.estimated_us)
    return pick


# C_in 43..64 (two pairs per bundle) with x columns x C_in > 512 (tiny C_in merges by memset already)
MERGE_GEOMS = [
    # stride 2, pad 1: kh 0 is clipped at the top, kh 1-2 are not (bundles (0,0) | (0,1),(0,2) | ...);
    # two batches of 2x4 = 8 output rows, W 12
    pytest.param({"batch": 2, "c_in": 48, "c_out": 5, "size": (4, 8, 12), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, 1, id="s2-p1-ci48"),
    pytest.param({"batch": 2, "c_in": 48, "c_out": 5, "size": (4, 8, 12), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, 2, id="s2-p1-ci48-lnc2"),
    # no H padding: every kh one class (bundles of two consecutive kh), odd sizes, C_out over one tile
    pytest.param({"batch": 1, "c_in": 64, "c_out": 130, "size": (5, 7, 9), "kernel": (2, 3, 3),
                  "stride": (1, 2, 1), "padding": (1, 0, 0, 0, 1, 1)}, 1, id="h-unpadded-co130"),
    pytest.param({"batch": 1, "c_in": 50, "c_out": 7, "size": (3, 9, 11), "kernel": (3, 3, 3),
                  "stride": (1, 2, 2), "padding": (1, 1, 1, 0, 0, 2)}, 2, id="asym-lnc2"),
    # down_s2-like at a small size: 64-row chunks (4x16 output rows per batch) stacked on K = 128
    pytest.param({"batch": 2, "c_in": 64, "c_out": 16, "size": (8, 32, 10), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, 2, id="stacked-lnc2"),
]


@pytest.mark.parametrize("geom, lnc", MERGE_GEOMS)
def test_xt_merge_is_exact(geom, lnc):
    res = run_and_compare(**geom, lnc=lnc, plan_edit=_merged())
    assert res.outputs is not None


@pytest.mark.parametrize("geom, lnc", [MERGE_GEOMS[1], MERGE_GEOMS[4],
                                       pytest.param(MERGE_GEOMS[4].values[0], 1, id="stacked-lnc1")])
def test_xt_merge_keeps_zero_rows_and_splits_stores(geom, lnc, monkeypatch):
    """The merged ring (one tile deeper: ``xt_dma_bufs``) hands a kh-0 bundle a tile whose zero rows an
    earlier kh-0 bundle wrote and no transpose overwrote since: ``RowXtDma`` skips those writes. The
    finish stores a chunk of several pairs' kw taps one pair at a time. Both paths run and stay exact."""
    from conv3d_bwd.kernels import nki_dw, nki_dw_xt
    xts = spy(monkeypatch, nki_dw_xt.RowXtDma, "__init__", lambda self, *a, **k: self)
    pair_stores = spy(monkeypatch, nki_dw, "_store_pairs_apart", lambda *a: a[4])
    run_and_compare(**geom, lnc=lnc, plan_edit=_merged())
    assert xts and all(x.merge for x in xts)
    assert sum(x.kept_zero_runs for x in xts) > 0
    assert pair_stores


def test_xt_merge_stacked_is_exact_and_stacks():
    geom = {"batch": 2, "c_in": 64, "c_out": 16, "size": (8, 32, 10), "kernel": (3, 3, 3),
            "stride": (2, 2, 2), "padding": (1,) * 6}
    chosen = []

    def edit(p):
        q = _merged(Strategy.PER_GRADIENT, stacked=True)(p)
        chosen.append(q)
        return q
    run_and_compare(**geom, lnc=2, plan_edit=edit)
    assert chosen[0].dw_row_stack and chosen[0].dw_xt_merge


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db")],
                         ids=lambda g: "+".join(g))
def test_xt_merge_gradient_subsets(grads):
    geom = {"batch": 2, "c_in": 48, "c_out": 6, "size": (4, 8, 12), "kernel": (3, 3, 3),
            "stride": (2, 2, 2), "padding": (1,) * 6}
    run_and_compare(**geom, lnc=2, grads=grads, dtype="fp16", plan_edit=_merged())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_xt_merge_dtypes_lnc1_shared(dtype):
    geom = {"batch": 2, "c_in": 48, "c_out": 5, "size": (4, 8, 12), "kernel": (3, 3, 3),
            "stride": (2, 2, 2), "padding": (1,) * 6}
    run_and_compare(**geom, dtype=dtype, lnc=1, plan_edit=_merged())


DOWN_KW = {"stride": (2, 2, 2), "padding": (1,) * 6}
DOWN_S2 = (conv_shapes(2, 64, 128, (8, 32, 32), (3, 3, 3), **DOWN_KW), DOWN_KW)   # the bench shape: (shapes, kw)


def test_xt_merge_bundles_follow_classes():
    g = validate(*DOWN_S2[0], **DOWN_S2[1], dtype="bf16")
    # kh 0 reads the H padding at h = 0, kh 1 and 2 never: one bundle per kd for each class
    assert xt_merge_bundles(g, 0, 9, 2) == [(0, 1), (1, 2), (3, 1), (4, 2), (6, 1), (7, 2)]
    g1 = validate(*conv_shapes(1, 64, 8, (4, 8, 8), (3, 3, 3)), dtype="bf16")   # no padding: all one class
    assert xt_merge_bundles(g1, 0, 9, 2) == [(0, 2), (2, 1), (3, 2), (5, 1), (6, 2), (8, 1)]
    g2 = validate(*conv_shapes(1, 64, 8, (4, 8, 8), (3, 3, 3), padding=(1,) * 6), padding=(1,) * 6, dtype="bf16")
    assert xt_merge_bundles(g2, 0, 9, 2) == [(q, 1) for q in range(9)]   # kh 0, 1, 2: three classes


def test_xt_merge_planner_view_down_s2():
    """down_s2 at LNC2: the merged twin of the stacked columns-split pick is listed (labelled), its bundles
    are the class cut, it is legal only with xT dma x-stationary, and its x^T transfers are fewer."""
    shapes, kw = DOWN_S2
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=2)
    g = plan.geometry()
    merged = plan.feasible_candidates(where=lambda a: a.dw_xt_merge)
    assert merged and all("xT merged" in a.label for a in merged)
    # (the transposes are the subject: the twins filled by plain copies, ``xT copy``, have none)
    m = min((a for a in merged if not a.dw_xt_copy), key=lambda a: a.estimated_us)
    assert m.dw_row_stack and m.dw_split == "columns"
    assert dw_xs_bundles(g, m, (0, 27)) == xt_merge_bundles(g, 0, 9, 2)
    assert not xt_merge_legal(g, dataclasses.replace(m, dw_xt_dma=False))
    assert not xt_merge_legal(g, dataclasses.replace(m, dw_x_stationary=False))
    twin = dataclasses.replace(m, dw_xt_merge=False)   # the kernel follows the fields (not the label)

    def transposes(p):
        with forced_plan(p):
            res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(s, "bfloat16") for s in shapes), **kw, lnc=2,
                             trace_only=True)
        return sum(1 for q in res.trace.program_ids() for i in res.trace.for_program(q)
                   if i.op == "dma_transpose" and any(a.write and a.partitions <= 16 for a in i.accesses))
    # per program 2 chunks x (kd 0: 3 planes, kd 1-2: 4) x (kh 0 alone, kh 1-2 merged) = 44 (66 unmerged)
    assert transposes(twin) == 2 * 66
    assert transposes(m) == 2 * 44
    assert_budget_bounds_peak(m, shapes, **kw, lnc=2)


def test_xt_merge_not_listed_where_nothing_merges():
    """unet3d-like (stride 1, pad 1: kh 0, 1, 2 three classes), tiny C_in (memset merge) and LNC1 (no
    columns split: full-width merged transfers slowed down_s2 LNC1) get no variant."""
    for c_in, kw, lnc in ((64, {"padding": (1,) * 6}, 2), (3, {"stride": (2, 2, 2), "padding": (1,) * 6}, 2),
                          (64, {"stride": (2, 2, 2), "padding": (1,) * 6}, 1)):
        shapes = conv_shapes(2, c_in, 64, (8, 32, 16), (3, 3, 3), **kw)
        plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=lnc)
        assert plan.feasible_candidates()
        assert not plan.feasible_candidates(where=lambda a: a.dw_xt_merge)
        assert not any(xt_merge_legal(plan.geometry(), dataclasses.replace(a, dw_xt_merge=True))
                       for a in plan.feasible_candidates())


def test_dpair_filter_slots_fill_by_runs():
    """down_s2's 18 D-phase-pairs slots: side 0 holds taps 18..26 then 0..8, side 1 taps 9..17, so three
    3-D transposes fill every tap (27 before); every (slot, side) with a tap is covered once."""
    shapes, kw = DOWN_S2
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=2)
    g = plan.geometry()
    slots = dpair_slot_map(g, plan)
    assert sorted(slots.values()) == list(range(len(slots)))
    runs = {side: slot_runs(slots, side) for side in (0, 1)}
    assert runs[0] == [(0, 18, 1, 9), (9, 0, 1, 9)] and runs[1] == [(0, 9, 1, 9)]
    for side in (0, 1):
        covered = {(s0 + i, t0 + i * step) for s0, t0, step, n in runs[side] for i in range(n)}
        assert covered == {(s, ab[side]) for ab, s in slots.items() if ab[side] is not None}


def test_slot_runs_uneven_steps():
    slots = {(5, None): 0, (7, None): 1, (9, None): 2, (10, 1): 3, (None, 4): 4}
    assert slot_runs(slots, 0) == [(0, 5, 2, 3), (3, 10, 1, 1)]
    assert slot_runs(slots, 1) == [(3, 1, 3, 2)]   # taps 1 and 4 in consecutive slots: step 3
    assert slot_runs({(3, 1): 0, (2, 2): 1}, 0) == [(0, 3, 1, 1), (1, 2, 1, 1)]   # a falling tap: a new run


# --- dx between dw's bundles (``Plan.dx_between_bundles``) ---------------------------------------------

def _between(p):
    """Edit: the best-estimated `dx between bundles` candidate (listed with `xT merged` under the LNC2 columns
    split where 64-row chunks stack); elsewhere the best D-phase-pairs x-stationary `xT dma` candidate forced
    to the columns split, merged bundles and dx between them (the kernel runs it; legality holds)."""
    alts = p.feasible_candidates(where=lambda a: a.dx_between_bundles)
    if not alts:
        g = p.geometry()
        alts = [q for a in p.feasible_candidates()
                if a.strategy is Strategy.PER_GRADIENT and a.dx_dphase_pairs and a.dw_x_stationary
                and a.dw_xt_dma and not a.db_ones and a.filters_first
                and dx_between_legal(g, q := dataclasses.replace(a, dw_split="columns", dw_xt_merge=True,
                                                                 dx_between_bundles=True))]
    assert alts, p.explain()
    return min(alts, key=lambda a: a.estimated_us)


BETWEEN_GEOMS = [   # D stride 2 and C_in <= 64 (D-phase pairs), kh classes that merge, LNC2
    pytest.param({"batch": 2, "c_in": 64, "c_out": 16, "size": (8, 32, 10), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, id="stacked"),
    pytest.param({"batch": 2, "c_in": 48, "c_out": 5, "size": (5, 8, 13), "kernel": (3, 3, 3),
                  "stride": (2, 2, 2), "padding": (1,) * 6}, id="odd-ci48"),
    pytest.param({"batch": 1, "c_in": 50, "c_out": 130, "size": (6, 9, 11), "kernel": (3, 3, 2),
                  "stride": (2, 2, 1), "padding": (1, 0, 1, 0, 0, 1)}, id="co130-asym"),
]


@pytest.mark.parametrize("geom", BETWEEN_GEOMS)
def test_dx_between_bundles_is_exact(geom, monkeypatch):
    from conv3d_bwd.kernels import nki_dw
    # the kernel really runs dx between dw's bundles
    advanced = spy(monkeypatch, nki_dw, "_between_share", lambda total, k, n_bund: (total, k, n_bund))
    run_and_compare(**geom, lnc=2, plan_edit=_between)
    ran = [(t, k, n) for t, k, n in advanced if t > 0]   # (a program may hold no dx item)
    assert ran
    assert {k for _t, k, _n in ran} == set(range(ran[0][2] + 1))   # before each bundle and after


STACKED = BETWEEN_GEOMS[0].values[0]


@pytest.mark.parametrize("geom, grads, dtype, reused", [
    pytest.param(STACKED, ("dx", "dw", "db"), "bf16", True, id="stacked-dx+dw+db"),
    pytest.param({**STACKED, "c_out": 130}, ("dx", "dw"), "fp16", True, id="stacked-co130-fp16"),
    pytest.param(BETWEEN_GEOMS[1].values[0], ("dx", "dw", "db"), "bf16", False, id="odd-ci48"),
])
def test_dx_between_reads_dws_dy_boxes(geom, grads, dtype, reused, monkeypatch):
    """dx's bands whose dy rows are one of dw's boxes are placed from dw's SBUF box (``DxSteps.resident``,
    ``place_padded``) instead of loaded again (the stacked geometries: a band is a whole batch's dy, as in
    down_s2); the rest load as before (odd sizes: the bands and boxes differ). Exact, and the planner's
    ``dx_bands_held`` names exactly the bands the kernel placed that way."""
    from conv3d_bwd.kernels import nki_dx
    from conv3d_bwd.kernels.spec.compose import dx_bands_held
    placed = spy(monkeypatch, nki_dx, "place_padded", lambda buf, ext, lo, hi, held, engine=None: held.shape)
    keys = spy(monkeypatch, nki_dx, "dy_resident_key", lambda b, co, rows: (b, tuple(tuple(r) for r in rows)))
    chosen = []

    def edit(p):
        chosen.append(_between(p))
        return chosen[-1]
    run_and_compare(**geom, lnc=2, grads=grads, dtype=dtype, plan_edit=edit)
    assert bool(placed) is reused
    held = set().union(*(dx_bands_held(chosen[0].geometry(), chosen[0], pid) for pid in range(2)))
    hits = [k for k in keys if k in held]
    assert len(placed) == len(hits)


@pytest.mark.parametrize("grads, dtype", [(("dx", "dw"), "fp16"), (("dx", "dw", "db"), "fp16"),
                                          (("dx", "dw"), "bf16")], ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_dx_between_bundles_subsets(grads, dtype):
    geom = {"batch": 2, "c_in": 48, "c_out": 5, "size": (5, 8, 13), "kernel": (3, 3, 3),
            "stride": (2, 2, 2), "padding": (1,) * 6}
    run_and_compare(**geom, lnc=2, grads=grads, dtype=dtype, plan_edit=_between)


def test_dx_between_bundles_planner_down_s2():
    """down_s2 LNC2: listed (labelled) only with xT merged and the deferred finish; its budget bounds the peak."""
    shapes, kw = DOWN_S2
    plan = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=2)
    g = plan.geometry()
    alts = plan.feasible_candidates(where=lambda a: a.dx_between_bundles)
    assert alts and all("dx between bundles" in a.label and a.dw_xt_merge for a in alts)
    b = min(alts, key=lambda a: a.estimated_us)
    assert dx_between_legal(g, b)
    assert not dx_between_legal(g, dataclasses.replace(b, dw_xt_merge=False))
    assert not dx_between_legal(g, dataclasses.replace(b, compute_dw=False))
    assert_budget_bounds_peak(b, shapes, **kw, lnc=2)
    # LNC1 (no deferred finish): never listed
    plan1 = plan_conv3d_bwd(*shapes, **kw, dtype="bf16", lnc=1)
    assert not plan1.feasible_candidates(where=lambda a: a.dx_between_bundles)


@pytest.mark.parametrize("geom, grads", [
    pytest.param(STACKED, ("dx", "dw", "db"), id="stacked-dx+dw+db"),
    pytest.param(BETWEEN_GEOMS[1].values[0], ("dx", "dw"), id="odd-ci48"),
])
def test_dx_between_filters_load_behind_dws_dy(geom, grads, monkeypatch):
    """``filters_after_first_chunk`` with dx between dw's bundles (``conv3d_bwd.LateFilters``): dx's filters
    are issued once per program, by dw's ``prefetch`` hook, after every dy load of dw's pass and before dx's
    first step (they used to go before any dw load). Exact."""
    import sys

    from conv3d_bwd.kernels import nki_dw
    from conv3d_bwd.kernels.spec.compose import filters_after_first_chunk
    kernel = sys.modules["conv3d_bwd.kernels.conv3d_bwd"]   # (the package's ``conv3d_bwd`` is the kernel object)
    events = []
    spy(monkeypatch, nki_dw, "_load_dy_box", lambda *a: "dy", events)   # dw's dy: a box, or its dy^T by DMA
    spy(monkeypatch, nki_dw.DwState, "_dyt_by_dma", lambda *a, **k: "dy", events)
    spy(monkeypatch, nki_dw.DwState, "_head_fill", lambda *a: "dy", events)
    spy(monkeypatch, kernel.LateFilters, "load", lambda self, *e: "filters" if self.tiles is None else None, events)
    spy(monkeypatch, kernel, "dx_dpairs_steps", lambda *a: "dx", events)
    chosen = []

    def edit(p):
        chosen.append(_between(p))
        return chosen[-1]
    run_and_compare(**geom, lnc=2, grads=grads, plan_edit=edit)
    assert filters_after_first_chunk(chosen[0].geometry(), chosen[0])
    # per program (run_and_compare traces them in turn): its dy loads, the filters, dx's first step
    loads = [i for i, e in enumerate(events) if e == "filters"]
    assert loads and len(loads) == events.count("dx") == 2, events
    for i in loads:
        assert events[i - 1] == "dy" and events[i + 1] == "dx", events
