"""The kernel's end: gather dx stores the program's last plane block by block
(``spec.dx_options.dx_last_by_blocks``: the tail is one block's store), and under the LNC2 taps split db, whole on one
program, is stored by it right after dw (``spec.compose.db_taps_local``: no exchange, no store at the end).
Bit-exact: odd sizes, W wider than a block, several C_in tiles, C_in-outer groups, LNC1/LNC2, every gradient
subset, bf16/fp16/fp32; the paths are checked to run."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels import nki_dx
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import DbMethod, plan_conv3d_bwd
from conv3d_bwd.kernels.schedule import axis_bands, dx_phase_work
from conv3d_bwd.kernels.spec.compose import db_taps_local
from conv3d_bwd.kernels.spec.dw_options import dw_db_program
from conv3d_bwd.kernels.spec.dx_options import dx_last_by_blocks

from .support import geom_shapes, run_and_compare


@pytest.fixture
def by_block(monkeypatch):
    """The planes dx stored block by block (so a test knows the path ran)."""
    seen = []
    original = nki_dx.dx_last_by_blocks

    def counted(g, plan, work):
        on = original(g, plan, work)
        seen.append(on)
        return on

    monkeypatch.setattr(nki_dx, "dx_last_by_blocks", counted)
    return seen


def _gather(edit=None):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dx_method is not None
                                     and a.dx_method.value == 'gather_s1' and (not a.dx_transposed)
                                     and (a.dx_regions == 1))
        assert alts, p.explain()
        return alts[0] if not edit else __import__("dataclasses").replace(alts[0], **edit)
    return pick


BLOCKS = [
    # a 4 x 9 x 33 plane in blocks of whole rows (W 33)
    pytest.param({"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 9, 33), "kernel": (3, 3, 3), "padding": (1,) * 6},
                 None, id="odd-w33"),
    # W wider than a block (600 > 512: blocks cut W), asymmetric padding
    pytest.param({"batch": 2, "c_in": 3, "c_out": 4, "size": (1, 2, 600), "kernel": (1, 2, 3),
                  "padding": (0, 0, 1, 0, 2, 0)}, None, id="w600"),
    # two C_in tiles (the last one's plane by blocks), two batches
    pytest.param({"batch": 2, "c_in": 130, "c_out": 9, "size": (2, 12, 31), "kernel": (2, 3, 3),
                  "padding": (1, 0, 1, 1, 1, 1)}, {"dx_band": (2, 12)}, id="c130-b2"),
    # C_in-outer groups: only the last group's last plane
    pytest.param({"batch": 2, "c_in": 130, "c_out": 9, "size": (2, 12, 31), "kernel": (2, 3, 3),
                  "padding": (1, 0, 1, 1, 1, 1)}, {"dx_ci_outer": True, "dx_band": (2, 12)}, id="ci-outer"),
]


@pytest.mark.parametrize("geom, edit", BLOCKS)
@pytest.mark.parametrize("lnc", [1, 2])
def test_last_plane_by_blocks_is_exact(geom, edit, lnc, by_block):
    run_and_compare(**geom, lnc=lnc, grads=("dx",), plan_edit=_gather(edit))
    assert by_block.count(True) == lnc   # one last plane per program


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("grads", [("dx", "dw"), ("dx", "db"), ("dx", "dw", "db")], ids=lambda g: "+".join(g))
def test_last_plane_by_blocks_other_dtypes_and_subsets(dtype, grads, by_block):
    run_and_compare(**BLOCKS[0].values[0], dtype=dtype, grads=grads, plan_edit=_gather())
    assert True in by_block


def test_last_plane_by_blocks_rule():
    g = validate((1, 8, 4, 32, 32), (1, 8, 4, 32, 32), (3, 3, 3, 8, 8), padding=(1,) * 6)
    p = plan_conv3d_bwd((1, 8, 4, 32, 32), (1, 8, 4, 32, 32), (3, 3, 3, 8, 8), padding=(1,) * 6)
    band = (axis_bands(g.axes[0], 2)[0], axis_bands(g.axes[1], 32)[0], axis_bands(g.axes[2], 32)[0])
    assert dx_last_by_blocks(g, p, dx_phase_work(g, band))   # 2 x 32 x 32: 4 blocks
    small = (axis_bands(g.axes[0], 1)[0], axis_bands(g.axes[1], 8)[0], axis_bands(g.axes[2], 32)[0])
    assert not dx_last_by_blocks(g, p, dx_phase_work(g, small))   # one block: nothing to gain
    g2 = validate((1, 8, 2, 16, 16), (1, 8, 4, 32, 32), (3, 3, 3, 8, 8), stride=(2, 2, 2), padding=(1,) * 6)
    band2 = (axis_bands(g2.axes[0], 4)[0], axis_bands(g2.axes[1], 32)[0], axis_bands(g2.axes[2], 32)[0])
    assert not dx_last_by_blocks(g2, p, dx_phase_work(g2, band2))   # strided: phases interleave in the plane


TAPS = [
    pytest.param("row_pack", {"batch": 2, "c_in": 6, "c_out": 5, "size": (4, 5, 6), "kernel": (3, 3, 3),
                              "padding": (1,) * 6}, id="row_pack"),
    pytest.param("tap_pack", {"batch": 2, "c_in": 6, "c_out": 140, "size": (4, 5, 6), "kernel": (3, 2, 3),
                              "stride": (2, 1, 1), "padding": (1, 0, 0, 1, 1, 1)}, id="tap_pack-co140"),
]


@pytest.mark.parametrize("method, geom", TAPS)
@pytest.mark.parametrize("grads", [("dx", "dw", "db"), ("dw", "db")], ids=lambda g: "+".join(g))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_taps_split_db_is_stored_by_its_program(method, geom, grads, dtype):
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_split == 'taps' and a.dw_method.value == method
                                     and (a.db_method is DbMethod.FOLD) and (not a.db_ones))
        assert alts, p.explain()
        assert db_taps_local(alts[0].geometry(), alts[0])
        return alts[0]

    res = run_and_compare(**geom, lnc=2, grads=grads, dtype=dtype, plan_edit=pick)
    assert not any(i.op == "sendrecv" for i in res.trace)   # the taps split exchanges nothing now
    shapes = geom_shapes(geom)
    kw = {"stride": geom.get("stride", (1, 1, 1)), "padding": geom["padding"]}
    q = pick(plan_conv3d_bwd(*shapes, **kw, lnc=2, compute_dx="dx" in grads))
    g = q.geometry()
    db_pid = dw_db_program(g, q)
    for pid in (0, 1):
        prog = [i for i in res.trace if i.program_id == pid]
        stores = [(k, any(len(a.shape) == 1 for a in i.accesses if a.write)) for k, i in enumerate(prog)
                  if i.op == "dma_copy" and any(a.write and a.buffer.endswith("hbm") for a in i.accesses)]
        db_stores = [k for k, is_db in stores if is_db]
        # only the db program stores db; with dx (after dw), not at the end: dx's stores follow it
        assert bool(db_stores) == (pid == db_pid)
        if db_stores and "dx" in grads:
            assert db_stores[-1] < stores[-1][0]
