"""Helpers the kernel tests share: exact-mode inputs, the oracle comparison, forced-plan runs, budget checks
and common geometries. Test modules import from here, never from one another."""
from __future__ import annotations

import dataclasses
import itertools

import ml_dtypes
import numpy as np
import pytest

from conv3d_bwd import (
    kernels,  # noqa: F401  (binds nki to nkisim where the real package is absent)
    nkisim,
)
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.compose import dx_inside_dw_legal, dx_inside_dw_on
from conv3d_bwd.kernels.spec.record import Plan

DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}

# the stem's kernel and stride (stem_k377: C_in 3, 3x7x7, stride (1, 2, 2)) at a small size; H padding clips
# 1-2 rows per plane on both sides
STEM_SMALL = {"batch": 2, "c_in": 3, "c_out": 8, "size": (5, 14, 13), "kernel": (3, 7, 7), "stride": (1, 2, 2),
              "padding": (1, 1, 3, 3, 3, 3)}


def out_size(n: int, k: int, s: int, lo: int, hi: int, r: int) -> int:
    return (n + lo + hi - r * (k - 1) - 1) // s + 1


def geom_shapes(geom: dict) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The (dy, x, w) shapes of a geometry dict (batch, c_in, c_out, size, kernel, padding, stride?,
    dilation?)."""
    k, s, p = geom["kernel"], geom.get("stride", (1, 1, 1)), geom["padding"]
    d = geom.get("dilation", (1, 1, 1))
    o = tuple(out_size(geom["size"][a], k[a], s[a], p[2 * a], p[2 * a + 1], d[a]) for a in range(3))
    return ((geom["batch"], geom["c_out"]) + o, (geom["batch"], geom["c_in"]) + tuple(geom["size"]),
            tuple(k) + (geom["c_in"], geom["c_out"]))


def spy(monkeypatch, owner, name: str, record, seen: list | None = None) -> list:
    """Wraps ``owner.name`` (a function or method) so that each call first appends
    ``record(*args, **kwargs)`` to ``seen`` (unless it is None), then runs the original. Returns ``seen``:
    a test that counts the calls knows the path it checks really ran."""
    seen = [] if seen is None else seen
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if (entry := record(*args, **kwargs)) is not None:
            seen.append(entry)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return seen


def geom_kw(geom: dict) -> dict:
    """The stride / padding / dilation keywords a geometry dict sets."""
    return {k: geom[k] for k in ("stride", "padding", "dilation") if k in geom}


def exact_inputs(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                 dtype="bf16", seed=0, density=0.5):
    """Small-integer inputs (sparse), exactly representable; every partial sum stays exact in fp32."""
    rng = np.random.default_rng(seed)
    o = tuple(out_size(size[a], kernel[a], stride[a], padding[2 * a], padding[2 * a + 1], dilation[a])
              for a in range(3))

    def draw(shape):
        a = rng.integers(-3, 4, size=shape).astype(np.float32)
        return (a * (rng.random(shape) < density)).astype(DTYPES[dtype])

    dy = draw((batch, c_out) + o)
    x = draw((batch, c_in) + tuple(size))
    w = draw(tuple(kernel) + (c_in, c_out))
    return dy, x, w


def oracle(dy, x, w, dtype, **kw):
    """reference.conv3d_bwd_ref on the same (rounded) inputs, cast to the output dtype, as a tuple."""
    from conv3d_bwd.reference import conv3d_bwd_ref

    ref = conv3d_bwd_ref(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), **kw)
    ref = ref if isinstance(ref, tuple) else (ref,)
    return tuple(np.asarray(r).astype(DTYPES[dtype]) for r in ref)


def conv_shapes(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1)):
    """The (dy, x, w) shapes of a geometry given as arguments."""
    o = tuple(out_size(size[a], kernel[a], stride[a], padding[2 * a], padding[2 * a + 1], dilation[a])
              for a in range(3))
    return (batch, c_out) + o, (batch, c_in) + tuple(size), tuple(kernel) + (c_in, c_out)


GRADS = ("dx", "dw", "db")


def assert_budget_bounds_peak(alt, shapes, dtype="bfloat16", **kw):
    """Run the forced plan ``alt`` trace-only: its planned SBUF and PSUM bound the measured peaks."""
    with forced_plan(alt):
        res = nkisim.run(conv3d_bwd, *(nkisim.TensorSpec(sh, dtype) for sh in shapes), **kw, trace_only=True)
    assert 0 < res.peak_sbuf_bytes_per_partition <= alt.sbuf_bytes, alt.label
    assert res.peak_psum_banks <= alt.psum_banks, alt.label


# The planner's choice fields (Plan's fields from ``strategy`` to ``s2d_group``): what a budget sweep varies.
_CHOICE_FIELDS = tuple(f.name for f in dataclasses.fields(Plan))
_CHOICE_FIELDS = _CHOICE_FIELDS[_CHOICE_FIELDS.index("strategy"):_CHOICE_FIELDS.index("s2d_group") + 1]
# How a budget test picks candidates: "all" traces every one (nightly), "pairs" a pairwise cover (default).
BUDGET_SWEEPS = ("pairs", pytest.param("all", marks=pytest.mark.nightly))


def _choice_pairs(plan) -> set:
    values = [(name, getattr(plan, name)) for name in _CHOICE_FIELDS]
    return set(itertools.combinations(values, 2))


def pairwise_cover(alts) -> list:
    """A subset of the candidates ``alts`` in which every pair of choice values that two fields take
    together in some candidate appears together at least once (greedy, deterministic: ties go to the
    earlier, cheaper candidate), plus the candidates that count the most SBUF and the most PSUM (where a
    budget is closest to the capacity)."""
    alts = list(alts)
    pairs = [_choice_pairs(a) for a in alts]
    needed = set().union(*pairs) if pairs else set()
    chosen: list[int] = []
    while needed:
        best = max(range(len(alts)), key=lambda i: len(pairs[i] & needed))
        chosen.append(best)
        needed -= pairs[best]
    for key in (lambda i: alts[i].sbuf_bytes, lambda i: alts[i].psum_banks):
        if alts and (top := max(range(len(alts)), key=key)) not in chosen:
            chosen.append(top)
    return [alts[i] for i in sorted(chosen)]


def assert_candidates_within_budget(shapes, where=lambda a: True, most=None, dtype="bf16", lnc=1, sweep="all",
                                    **kw):
    """Trace-only: the first ``most`` feasible candidates that satisfy ``where`` (at least one must) run
    within the SBUF / PSUM the planner counted for them. ``sweep="pairs"`` traces only their
    ``pairwise_cover`` (hundreds of candidates otherwise). Returns the traced candidates."""
    if sweep not in ("all", "pairs"):
        raise ValueError(f"sweep: {sweep!r} is not 'all' or 'pairs'")
    plan = plan_conv3d_bwd(*shapes, dtype=dtype, lnc=lnc, **kw)
    alts = plan.feasible_candidates(where=lambda a: where(a))[:most]
    assert alts, plan.explain()
    if sweep == "pairs":
        alts = pairwise_cover(alts)
    for alt in alts:
        assert_budget_bounds_peak(alt, shapes, dtype=np.dtype(DTYPES[dtype]).name, lnc=lnc, **kw)
    return alts


def run_and_compare(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                    dtype="bf16", lnc=1, grads=GRADS, plan_edit=None, seed=0):
    dy, x, w = exact_inputs(batch, c_in, c_out, size, kernel, stride, padding, dilation, dtype, seed)
    flags = {f"compute_{g}": g in grads for g in GRADS}
    kw = {"stride": stride, "padding": padding, "dilation": dilation}
    if plan_edit is not None:
        plan = plan_conv3d_bwd(dy.shape, x.shape, w.shape, dtype=dtype, lnc=lnc, **kw, **flags)
        with forced_plan(plan_edit(plan)):
            res = nkisim.run(conv3d_bwd, dy, x, w, lnc=lnc, **kw, **flags)
    else:
        res = nkisim.run(conv3d_bwd, dy, x, w, lnc=lnc, **kw, **flags)
    assert_bitwise_equal(grads, res, oracle(dy, x, w, dtype, **kw, **flags), dtype)
    return res


def assert_bitwise_equal(grads, res, refs, dtype: str, nonzero: bool = False) -> None:
    """The run's outputs, one per gradient in ``grads``, are the oracle's ``refs`` bit for bit, in ``dtype``,
    with no NaN (unwritten memory); ``nonzero``: the oracle is not all zeros (the inputs test something)."""
    outs = res.outputs if isinstance(res.outputs, tuple) else (res.outputs,)
    assert len(outs) == len(refs) == len(grads)
    for name, got, want in zip(grads, outs, refs):
        assert got.dtype == DTYPES[dtype] and got.shape == want.shape, name
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        assert not np.isnan(g64).any(), f"{name}: NaN (unwritten memory)"
        bad = np.argwhere(g64 != w64)
        assert bad.size == 0, f"{name}: {len(bad)} elements differ, first at {tuple(bad[0])}: " \
                              f"{g64[tuple(bad[0])]} != {w64[tuple(bad[0])]}"
        if nonzero:
            assert np.abs(w64).sum() > 0, f"{name}: the oracle is all zeros (the inputs test nothing)"


# ---------------------------------------------------------------- dx inside dw


def plan_geom(p):
    """The validated geometry of plan ``p``, with its gradient flags."""
    return validate(p.dy_shape, p.x_shape, p.w_shape, p.stride, p.padding, p.dilation, p.dtype,
                    compute_dx=p.compute_dx, compute_dw=p.compute_dw, compute_db=p.compute_db)


def forced_inside(p, split=None, **edit):
    """The best-estimated prefetched dx^T candidate with x-stationary ``xT dma`` dw (of dw ``split`` at LNC2)
    that is legal forced to run dx inside dw with ``edit``; so forced."""
    g = plan_geom(p)
    alts = [q for a in p.feasible_candidates()
            if a.dx_prefetch and a.dw_x_stationary and a.dw_xt_dma and not a.dw_interleave
            and (split is None or a.dw_split == split)
            and dx_inside_dw_legal(g, q := dataclasses.replace(a, dx_inside_dw=True, **edit))]
    assert alts, p.explain()
    return min(alts, key=lambda a: a.estimated_us)


def inside_dw_edit(split=None):
    """Edit: the best-estimated dx-inside-dw candidate (of dw ``split`` at LNC2); where the planner lists
    none, ``forced_inside`` with its dx band one item per program."""
    def pick(p):
        g = plan_geom(p)
        alts = p.feasible_candidates(where=lambda a: a.dx_inside_dw and (not a.dx_inside_boxes)
                                     and (split is None or a.dw_split == split))
        q = min(alts, key=lambda a: a.estimated_us) if alts else \
            forced_inside(p, split, dx_band=(-(-g.axes[0].n // p.lnc), g.axes[1].n))
        assert dx_inside_dw_on(g, q) and "dx inside dw" in q.label
        return q
    return pick


INSIDE_DW_GEOMS = [   # C_out <= 64 (dx^T pairs), row-mode dw
    pytest.param({"batch": 1, "c_in": 8, "c_out": 6, "size": (4, 6, 7), "kernel": (3, 3, 3), "dilation": (2, 2, 2),
                  "padding": (2,) * 6}, id="dil2-odd"),
    pytest.param({"batch": 1, "c_in": 12, "c_out": 10, "size": (5, 8, 9), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1, 0, 1, 1, 0, 1)}, id="stride2-asym"),
    pytest.param({"batch": 1, "c_in": 64, "c_out": 64, "size": (4, 8, 8), "kernel": (3, 3, 3),
                  "padding": (1,) * 6}, id="c64"),
]
