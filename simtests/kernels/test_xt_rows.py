"""Tiny-C_in (stem) paths: x^T zero rows by memset, bundle fills merged along kh, filters by runs of taps,
the 128-row dw band of ``xT dma`` plans. Exact against the reference under forced plans."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

from conv3d_bwd.kernels import nki_dw_xt, nki_dx, nki_dx_toeplitz, nki_filters
from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DbMethod, DxMethod, Strategy, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.variants import _xt_dma_full_rows
from conv3d_bwd.kernels.xt_rows import xt_bundle_groups, xt_fill, zero_by_memset

from .support import STEM_SMALL, geom_shapes, run_and_compare, spy

STEM = {"batch": 2, "c_in": 3, "c_out": 64, "size": (16, 64, 64), "kernel": (3, 7, 7), "stride": (1, 2, 2),
        "padding": (1, 1, 3, 3, 3, 3)}


def _validated(geom, dtype="bf16"):
    dy, x, w = geom_shapes(geom)   # (unit dilation: STEM)
    return validate(dy, x, w, geom["stride"], geom["padding"], (1, 1, 1), dtype), (dy, x, w)


def test_bundle_groups_cover_every_pair_once_with_its_own_rows():
    """Each slot of a group is filled exactly as its own pair's fill (same rows, x rows one H step per slot),
    and the stem's bundles need far fewer transposes than one per pair and plane."""
    g, _ = _validated(STEM)
    pairs_all = [(kd, kh) for kd in range(3) for kh in range(7)]
    merged = single = 0
    for od0 in (0, 4, 12):
        for q0 in range(0, len(pairs_all), 6):
            pairs = tuple(pairs_all[q0:q0 + 6])
            groups = xt_bundle_groups(g, od0, 0, 4, 32, pairs)
            assert [s for grp in groups for s in range(grp.slot0, grp.slot0 + grp.slots)] == list(range(len(pairs)))
            for grp in groups:
                kd, kh = pairs[grp.slot0]
                for i in range(grp.slots):
                    assert pairs[grp.slot0 + i] == (kd, kh + i)
                    own = xt_fill(g, od0, 0, 4, 32, kd, kh + i)
                    assert own.zeros == grp.fill.zeros
                    assert [(r.p0, r.rows, r.step, r.x_row + i * g.axes[1].r) for r in grp.fill.transposes] == \
                        [(r.p0, r.rows, r.step, r.x_row) for r in own.transposes]
                merged += len(grp.fill.transposes)
                single += sum(len(xt_fill(g, od0, 0, 4, 32, kd, kh + i).transposes) for i in range(grp.slots))
    assert zero_by_memset(g, 3)
    assert merged < 0.75 * single, (merged, single)


def test_the_stem_is_offered_the_128_row_band_and_folds_db():
    _g, (dy, x, w) = _validated(STEM)
    p = plan_conv3d_bwd(dy, x, w, stride=STEM["stride"], padding=STEM["padding"], dtype="bf16", target="trn2")
    assert p.dw_xt_dma and p.dw_x_stationary, p.label
    assert p.db_method is DbMethod.FOLD
    # the 128-row band is a candidate, and the smaller band stays one (the variant is added, nothing replaced)
    cands = [p, *p.feasible_candidates()]
    assert any(a.dw_xt_dma and a.dw_band == (4, 32) for a in cands)
    assert any(a.dw_xt_dma and a.dw_band == (2, 32) for a in cands)


def test_an_h_band_xt_dma_plan_grows_to_whole_rows_and_stays_exact():
    """An ``xT dma`` plan whose dw band holds part of the H rows (a halo too big for whole rows of an x
    band) gets the variant with the largest band of <= 128 whole rows that fits, and that plan is exact."""
    g, (dy, x, w) = _validated(STEM_SMALL)
    kw = {"stride": STEM_SMALL["stride"], "padding": STEM_SMALL["padding"]}
    p = plan_conv3d_bwd(dy, x, w, **kw, dtype="bf16", target="trn2")
    base = next(a for a in p.feasible_candidates() if a.dw_xt_dma and a.strategy is Strategy.PER_GRADIENT
                and a.dw_tap_range == 0)
    small = dataclasses.replace(base, dw_band=(1, 2))
    grown = _xt_dma_full_rows(g, [small], TARGET_FIGURES["trn2"])
    ho = g.axes[1].o
    assert [q.dw_band for q in grown] == [(g.axes[0].o, ho)], (ho, [q.dw_band for q in grown])
    assert _xt_dma_full_rows(g, grown, TARGET_FIGURES["trn2"]) == []   # nothing larger to grow to
    run_and_compare(**STEM_SMALL, plan_edit=lambda _p: grown[0])


@pytest.fixture
def calls(monkeypatch):
    """Counts the merged bundle fills and the tiny-C_in filter runs (so a test knows the paths ran)."""
    def filter_run(g, *args, **kw):
        return True if kw.get("by_dma") and g.c_in <= nki_filters.FILTER_RUN_CI_MAX else None

    filters = []
    for mod in (nki_filters, nki_dx, nki_dx_toeplitz):   # and the names the dx modules imported
        spy(monkeypatch, mod, "load_filters_t", filter_run, filters)
    return {"bundle": spy(monkeypatch, nki_dw_xt.RowXtDma, "fill_bundle", lambda self, *args: True),
            "filters": filters}


def _xs_dma(edit=None, strategy=Strategy.PER_GRADIENT, split=None):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.dw_xt_dma
                                     and (a.strategy is strategy) and (split is None or a.dw_split == split))
        assert alts, p.explain()
        return dataclasses.replace(alts[0], **(edit or {}))
    return pick


GEOMS = [
    # the stem's kernel and stride at a small size: H padding clips 1-2 rows per plane on both sides
    pytest.param(STEM_SMALL, {"dw_band": (3, 7)}, id="stem-small"),
    # C_in 1, asymmetric padding, odd sizes, a band of several planes
    pytest.param({"batch": 1, "c_in": 1, "c_out": 5, "size": (6, 9, 11), "kernel": (3, 5, 3), "stride": (1, 2, 2),
                  "padding": (2, 0, 1, 3, 0, 2)}, {"dw_band": (4, 5)}, id="cin1-asym"),
    # C_in 8, dilation in H (the slot step is r_h rows), stride 1
    pytest.param({"batch": 2, "c_in": 8, "c_out": 6, "size": (4, 9, 7), "kernel": (2, 3, 3), "dilation": (1, 2, 1),
                  "padding": (1, 0, 2, 2, 1, 1)}, {}, id="cin8-dil"),
    # C_in 5, unit stride, whole planes merged (kh without H clipping) next to clipped ones
    pytest.param({"batch": 1, "c_in": 5, "c_out": 4, "size": (4, 8, 6), "kernel": (3, 3, 3),
                  "padding": (1, 1, 1, 1, 1, 1)}, {"dw_band": (4, 8)}, id="cin5-planes"),
]


@pytest.mark.parametrize("geom, edit", GEOMS)
def test_merged_fills_are_exact(geom, edit, calls):
    run_and_compare(**geom, plan_edit=_xs_dma(edit))
    assert calls["bundle"] and calls["filters"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw"), ("dx", "dw", "db"), ("dx", "db")],
                         ids=lambda g: "+".join(g))
def test_dtypes_and_gradient_subsets(dtype, grads, calls):
    geom = dict(GEOMS[0].values[0])
    if "dw" in grads:
        run_and_compare(**geom, dtype=dtype, grads=grads, plan_edit=_xs_dma({"dw_band": (3, 7)}))
        assert calls["bundle"]
    else:
        run_and_compare(**geom, dtype=dtype, grads=grads)
    assert calls["filters"] or "dx" not in grads


@pytest.mark.parametrize("split", ["positions", "taps"])
def test_lnc2(split, calls):
    run_and_compare(**dict(GEOMS[0].values[0]), lnc=2, plan_edit=_xs_dma(split=split))
    assert calls["bundle"]


def test_fp32_keeps_the_pe_paths():
    """fp32: no dma_transpose (x^T and filters by the PE); still exact."""
    run_and_compare(**dict(GEOMS[0].values[0]), dtype="fp32")


def _interleaved(edit=None, split=None, db=None):
    """The cheapest dx:toeplitz candidate with dw's boxes between dx's items (and edits)."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_interleave
                                     and (split is None or a.dw_split == split)
                                     and (db is None or a.db_method is db))
        if not alts:   # fp32 (no xT dma): the planner does not list it; the kernel runs it forced
            alts = [dataclasses.replace(a, dw_interleave=True) for a in p.feasible_candidates()
                    if a.dx_method is DxMethod.TOEPLITZ and a.strategy is Strategy.PER_GRADIENT]
        assert alts, p.explain()
        return dataclasses.replace(alts[0], **(edit or {}))
    return pick


@pytest.fixture
def steps(monkeypatch):
    """Counts the dw boxes issued from dx's item loop (so a test knows the interleaving ran)."""
    entry = importlib.import_module("conv3d_bwd.kernels.conv3d_bwd")   # (the package exports the kernel by that name)
    seen = []
    original = entry._Steps.between

    def counted(self, n_items):
        run = original(self, n_items)

        def wrapped(i):
            before = self.done
            run(i)
            seen.append(self.done - before)
        return wrapped

    monkeypatch.setattr(entry._Steps, "between", counted)
    return seen


INTERLEAVE = [
    # the stem's kernel and stride: dx items and dw boxes in different numbers
    pytest.param(STEM_SMALL, {"dw_band": (1, 7), "dx_band": (2, 14)}, id="stem-small"),
    # C_in 1, asymmetric padding, odd sizes; dw boxes fewer than dx items
    pytest.param({"batch": 1, "c_in": 1, "c_out": 5, "size": (6, 9, 11), "kernel": (3, 5, 3), "stride": (1, 2, 2),
                  "padding": (2, 0, 1, 3, 0, 2)}, {"dx_band": (1, 9)}, id="cin1-asym"),
    # C_in 8 with dilation, stride 1
    pytest.param({"batch": 2, "c_in": 8, "c_out": 6, "size": (4, 9, 7), "kernel": (2, 3, 3), "dilation": (1, 2, 1),
                  "padding": (1, 0, 2, 2, 1, 1)}, {}, id="cin8-dil"),
]


@pytest.mark.parametrize("geom, edit", INTERLEAVE)
@pytest.mark.parametrize("db", [DbMethod.FOLD, DbMethod.STANDALONE], ids=["fold", "standalone"])
def test_interleaved_dw_is_exact(geom, edit, db, steps):
    run_and_compare(**geom, plan_edit=_interleaved(edit, db=db))
    assert sum(steps) > 0


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_interleaved_dw_other_dtypes(dtype, steps):
    run_and_compare(**dict(INTERLEAVE[0].values[0]), dtype=dtype, plan_edit=_interleaved(INTERLEAVE[0].values[1]))
    assert sum(steps) > 0


@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("split", ["positions", "taps"])
def test_interleaved_dw_lnc2(grads, split, steps):
    # (the stem-small edit's dx bands: the cheapest candidate's band may hold a program's one dx item,
    # and with one item every box runs after it -- nothing to interleave)
    run_and_compare(**dict(INTERLEAVE[0].values[0]), lnc=2, grads=grads,
                    plan_edit=_interleaved(INTERLEAVE[0].values[1], split=split))
    assert sum(steps) > 0


def test_interleaved_dw_with_tap_passes(steps):
    """dw tap passes: the generator's boxes span every pass; dx's items pace them all."""
    geom = dict(INTERLEAVE[0].values[0])
    run_and_compare(**geom, plan_edit=_interleaved({"dw_tap_range": 14, "dw_band": (2, 7)}))
    assert sum(steps) > 0


def _covers_once(fill, nrows):
    """Every tile row is written by exactly one of the fill's transposes, zero runs and after runs."""
    seen = [0] * nrows
    for r in fill.zeros + fill.after:
        for p in range(r.p0, r.p0 + r.rows):
            seen[p] += 1
    for r in fill.transposes:
        for p in range(r.p0, r.p0 + r.rows):
            seen[p] += 0 if any(z.p0 <= p < z.p0 + z.rows for z in fill.after) else 1
    return seen == [1] * nrows


@pytest.mark.parametrize("kh", [0, 1, 2])
def test_bridging_transpose_spans_the_planes_and_zeroes_the_rows_between_after(kh):
    """Stride 1, pad 1 in H, a chunk of 4 whole planes of 8 rows: kh 0 and 2 clip one row per plane, and
    one transfer bridges the planes (its x rows one uniform stride apart), the clipped rows inside it
    zeroed after it; kh 1 clips nothing (one whole-plane transfer, nothing after)."""
    g, _ = _validated({"batch": 1, "c_in": 20, "c_out": 8, "size": (4, 8, 6), "kernel": (3, 3, 3),
                       "stride": (1, 1, 1), "padding": (1,) * 6})
    fill = xt_fill(g, 0, 0, 4, 8, 1, kh)
    assert len(fill.transposes) == 1 and _covers_once(fill, 32)
    (t,) = fill.transposes
    for p in range(t.p0, t.p0 + t.rows):   # every row it writes and keeps is its own x row
        if not any(z.p0 <= p < z.p0 + z.rows for z in fill.after):
            i, j = divmod(p, 8)
            assert t.x_row + (p - t.p0) * t.step == i * 8 + j + kh - 1
    assert bool(fill.after) == (kh != 1)
    assert all(t.p0 < z.p0 and z.p0 + z.rows <= t.p0 + t.rows for z in fill.after)


BRIDGED = {"batch": 2, "c_in": 20, "c_out": 6, "size": (4, 8, 10), "kernel": (3, 3, 3), "padding": (1,) * 6}


@pytest.mark.parametrize("copy", [False, True], ids=["transpose", "copy"])
@pytest.mark.parametrize("lnc, c_in", [(1, 20), (2, 20), (1, 72)])
def test_bridged_fills_are_exact(copy, lnc, c_in, monkeypatch):
    """Whole-plane chunks (dw band 4x8) with H padding: the transposes bridge the planes, in merged bundle
    fills (C_in 20: zero rows by memset) and per-pair fills (C_in 72: zero rows by DMA); the channel-major
    copies do not (one per plane). Exact both ways."""
    def edit(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.dw_xt_dma
                                     and (not a.dw_head_split) and (a.strategy is Strategy.PER_GRADIENT))
        assert alts, p.explain()
        return dataclasses.replace(min(alts, key=lambda a: a.estimated_us), dw_band=(4, 8), dw_xt_copy=copy)
    bridged = spy(monkeypatch, nki_dw_xt, "xt_fill", lambda *a: True if xt_fill(*a).after else None)
    spy(monkeypatch, nki_dw_xt, "xt_bundle_groups",
        lambda *a: True if any(grp.fill.after for grp in xt_bundle_groups(*a)) else None, bridged)
    run_and_compare(**{**BRIDGED, "c_in": c_in}, lnc=lnc, plan_edit=edit)
    assert bool(bridged) != copy   # the path ran (transposes); copies are charged by bytes: not bridged
