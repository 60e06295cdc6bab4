"""nki.collectives over one rank (Neuron docs, nki.collectives: each function's page; results over a
replica group of this rank alone, the only group nkisim can run)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import conv3d_bwd.nkisim.collectives as ncc
import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim
from conv3d_bwd.nkisim.collectives import ReplicaGroup

from .helpers import raises_rule

F32 = np.float32
ALONE = ReplicaGroup([[0]])


def _hbm_collective(call):
    """A kernel: x -> out through ``call(src, dst)`` on HBM tensors."""
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        call(x, out)
        return out
    return kernel


@pytest.mark.parametrize("call", [
    lambda s, d: ncc.all_reduce([s], [d], ALONE, nl.add),
    lambda s, d: ncc.all_gather([s], [d], ALONE, collective_dim=0),
    lambda s, d: ncc.reduce_scatter([s], [d], ALONE, collective_dim=0, op=nl.maximum),
    lambda s, d: ncc.all_to_all([s], [d], ALONE, collective_dim=0),
    lambda s, d: ncc.collective_permute([s], [d], [(0, 0)]),
    lambda s, d: ncc.collective_permute_implicit([[s]], [[d]], ALONE),
], ids=["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "permute_implicit"])
def test_single_rank_collectives_deliver_the_source(call):
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(F32)
    np.testing.assert_array_equal(nkisim.simulate(_hbm_collective(call))(x), x)


def test_coalesced_all_reduce_and_sbuf_all_gather_on_its_free_dim():
    def kernel(a, b):
        oa = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ob = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
        ncc.all_reduce(srcs=[a, b], dsts=[oa, ob], replica_group=ALONE, op=nl.add)
        s = nl.load(a)
        g = nl.ndarray(a.shape, a.dtype)
        ncc.all_gather(srcs=[s], dsts=[g], replica_group=ALONE, collective_dim=1)
        nl.store(oa, g)
        return oa, ob
    a, b = np.arange(8 * 4, dtype=F32).reshape(8, 4), np.ones((3, 5), F32)
    oa, ob = nkisim.simulate(kernel)(a, b)
    np.testing.assert_array_equal(oa, a)
    np.testing.assert_array_equal(ob, b)


def test_permute_implicit_reduce_delivers_the_reduction_of_a_ring_of_one():
    def kernel(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute_implicit_reduce([[a]], [[b]], [[out]], ALONE, nl.minimum)
        return out
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 8)).astype(F32), rng.standard_normal((4, 8)).astype(F32)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(a, b), np.minimum(a, b))


def test_permute_without_a_pair_to_this_rank_leaves_dst():
    def kernel(x, out):
        ncc.collective_permute([x], [out], [])
        return out
    out = np.full((2, 3), 7.0, F32)
    nkisim.simulate(kernel)(np.zeros((2, 3), F32), out)
    np.testing.assert_array_equal(out, 7.0)


def test_rank_ids_are_registers_holding_rank_0():
    def kernel(x):
        out = nl.ndarray((1, 4), x.dtype, buffer=nl.shared_hbm)
        row = ncc.rank_id()
        step = ncc.collective_permute_implicit_current_processing_rank_id(3, ALONE)
        assert isinstance(row, nisa.VirtualRegister) and isinstance(step, nisa.VirtualRegister)
        t = nl.ndarray((1, 4), x.dtype)
        nisa.dma_copy(dst=t, src=x.ap([[4, 1], [1, 4]], offset=0, scalar_offset=row, indirect_dim=0))
        nisa.dma_copy(dst=out, src=t)
        return out
    x = np.arange(12, dtype=F32).reshape(3, 4)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(x), x[:1])


def test_groups_naming_other_ranks_and_multi_rank_only_collectives_are_refused():
    x = np.zeros((4, 4), F32)
    with pytest.raises(nkisim.NkiUsageError, match=r"names rank\(s\) \[1\].*runs one rank"):
        nkisim.simulate(_hbm_collective(lambda s, d: ncc.all_reduce([s], [d], ReplicaGroup([[0, 1]]), nl.add)))(x)
    with pytest.raises(nkisim.NkiUsageError, match="exactly 4 ranks"):
        nkisim.simulate(_hbm_collective(lambda s, d: ncc.all_gather_v([s], [d], ALONE, s)))(x)
    with pytest.raises(nkisim.NkiUsageError, match="several devices"):
        nkisim.simulate(_hbm_collective(lambda s, d: ncc.all_to_all_v([s], [d], ALONE, s)))(x)
    with pytest.raises(nkisim.NkiUsageError, match="must not overlap"):
        ReplicaGroup([[0, 1], [1, 2]])


def test_documented_rules():
    def mixed(x):
        out = nl.ndarray(x.shape, x.dtype)
        ncc.all_reduce([x], [out], ALONE, nl.add)

    def sbuf_all_to_all(x):
        s, d = nl.load(x), nl.ndarray(x.shape, x.dtype)
        ncc.all_to_all([s], [d], ALONE, collective_dim=0)

    def multiply(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_reduce([x], [out], ALONE, nl.multiply)

    def hbm_dim_1(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_gather([x], [out], ALONE, collective_dim=1)

    def channels(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute_implicit([[x]], [[out]], ALONE, channel_ids=[1])
    x = np.zeros((4, 4), F32)
    with raises_rule("all_reduce", "dsts", "on HBM or all on SBUF"):
        nkisim.run(mixed, x)
    with raises_rule("all_to_all", "srcs", "must be in HBM"):
        nkisim.run(sbuf_all_to_all, x)
    with raises_rule("all_reduce", "op", "nl.add, nl.minimum or nl.maximum"):
        nkisim.run(multiply, x)
    with raises_rule("all_gather", "collective_dim", "only 0 supported for HBM"):
        nkisim.run(hbm_dim_1, x)
    with raises_rule("collective_permute_implicit", "channel_ids", "consecutive integers starting from 0"):
        nkisim.run(channels, x)


def test_collectives_are_traced_as_dma_instructions():
    x = np.zeros((16, 32), F32)
    r = nkisim.run(_hbm_collective(lambda s, d: ncc.all_reduce([s], [d], ALONE, nl.add)), x)
    (instr,) = [i for i in r.trace if i.op == "all_reduce"]
    assert instr.engine == "dma" and instr.attr("ranks") == 1 and instr.attr("op") == "add"
    assert [a.nbytes for a in instr.accesses] == [16 * 32 * 4] * 2


def test_binding_installs_nki_collectives():
    code = ("from conv3d_bwd.nkisim.binding import ensure_nki; ensure_nki('nkisim')\n"
            "import nki.collectives as ncc\nfrom nki.collectives import ReplicaGroup\n"
            "from conv3d_bwd.nkisim import collectives\n"
            "assert ncc is collectives and ReplicaGroup is ncc.ReplicaGroup\n")
    subprocess.run([sys.executable, "-c", code], check=True)
