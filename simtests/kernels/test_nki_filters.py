"""Gather dx's filters held as one SBUF tensor per C_in tile (``load_filters_t(split_ci=True)``)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.nki_filters import CiTiledFilters
from conv3d_bwd.kernels.plan import DxMethod, Strategy, forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.plan.problem import gather_dx_method
from conv3d_bwd.kernels.schedule import filter_stage_cols

from .support import exact_inputs, oracle, run_and_compare

# C_in 5 in tiles of 2 (2, 2, 1): one dx group of three C_in tiles (not ci-outer), so every C_out
# tile's filters come as three tensors; C_out 130 gives two C_out tiles
GEOM = {"batch": 1, "c_in": 5, "c_out": 130, "size": (3, 4, 5), "kernel": (3, 2, 3), "padding": (1, 1, 0, 1, 1, 0)}


def _one_group(strategy):
    def edit(p):
        return dataclasses.replace(p, dx_method=gather_dx_method(p.geometry()), dx_ci_tile=2, dx_ci_outer=False,
                                   dx_regions=1, dx_transposed=False, dx_dphase_pairs=False, strategy=strategy)
    return edit


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])          # filters by dma_transpose / by PE transposes
@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("strategy", [Strategy.PER_GRADIENT, Strategy.SHARED_DY], ids=["per-gradient", "shared"])
def test_gather_with_ci_tiled_filters_is_exact(dtype, lnc, strategy):
    run_and_compare(**GEOM, dtype=dtype, lnc=lnc, plan_edit=_one_group(strategy))


def test_gather_ci_tiled_filters_strided_dx_only():
    run_and_compare(batch=2, c_in=3, c_out=4, size=(4, 5, 4), kernel=(3, 3, 2), stride=(2, 1, 2),
                    padding=(1, 1, 1, 1, 0, 1), grads=("dx",), plan_edit=lambda p: dataclasses.replace(
                        p, dx_method=gather_dx_method(p.geometry()), dx_ci_tile=1, dx_ci_outer=False, dx_regions=1,
                        dx_transposed=False, dx_dphase_pairs=False))


def test_each_ci_tile_is_its_own_tensor():
    """The filter DMAs of a C_out tile write one tensor per C_in tile (<= taps writes each), so nkisim's
    16-entry hull of a tensor's writes never spans a later C_in tile's loads."""
    dy, x, w = exact_inputs(**GEOM)
    plan = plan_conv3d_bwd(dy.shape, x.shape, w.shape, padding=GEOM["padding"], compute_dw=False, compute_db=False)
    plan = _one_group(Strategy.PER_GRADIENT)(plan)
    assert plan.dx_method is not DxMethod.TOEPLITZ
    with forced_plan(plan):
        res = nkisim.run(conv3d_bwd, dy, x, w, padding=GEOM["padding"], compute_dw=False, compute_db=False,
                         trace_only=True)
    writes: dict[int, int] = {}
    for ins in res.trace:
        if ins.op == "dma_transpose":
            for a in ins.accesses:
                if a.write:
                    writes[a.storage] = writes.get(a.storage, 0) + 1
    taps = 3 * 2 * 3
    assert len(writes) == 3 * 2   # C_in tiles x C_out tiles
    assert set(writes.values()) == {taps}


class _Recorder:
    def __getitem__(self, key):
        return key


def test_ci_tiled_filters_index_their_tile():
    f = CiTiledFilters([_Recorder(), _Recorder()], [(0, 128), (128, 64)])
    assert f[slice(None, 5), 3, slice(128, 192)] == (slice(None, 5), 3, slice(0, 64))
    assert f[slice(None, 5), slice(0, 2), slice(0, 128)] == (slice(None, 5), slice(0, 2), slice(0, 128))
    with pytest.raises(ValueError, match="spans C_in tiles"):
        f[slice(None, 5), 0, slice(100, 140)]


@pytest.mark.parametrize("dtype, target", [("fp32", "trn2"), ("bf16", "trn1")])   # both by PE transposes
def test_very_wide_c_out_stages_filters_in_column_chunks(dtype, target):
    """C_out wider than one staging tile (8 KiB per partition): the filters stage in chunks of whole C_out
    tiles (a 2,100 / 4,500-column stage would be one tile of the full width); exact against the oracle."""
    c_out = {"fp32": 2100, "bf16": 4500}[dtype]
    assert filter_stage_cols(c_out, 4 if dtype == "fp32" else 2) < c_out
    dy, x, w = exact_inputs(1, 2, c_out, (1, 2, 3), (1, 2, 1), dtype=dtype)
    res = nkisim.run(conv3d_bwd, dy, x, w, target=target, compute_dw=False, compute_db=False)
    want = oracle(dy, x, w, dtype, compute_dw=False, compute_db=False)[0]
    got = res.outputs[0] if isinstance(res.outputs, tuple) else res.outputs
    assert got.shape == want.shape and np.array_equal(got.astype(np.float64), want.astype(np.float64))


def test_wide_c_out_dx_plan_counts_one_staging_chunk():
    """C_in 1, C_out 100,000, 1x1x1: the staging ring holds one column chunk, so dx has a plan."""
    plan = plan_conv3d_bwd((1, 100_000, 1, 1, 1), (1, 1, 1, 1, 1), (1, 1, 1, 1, 100_000), dtype="fp32",
                           compute_dw=False, compute_db=False)
    assert plan.sbuf_bytes < 64 * 1024, plan.label
