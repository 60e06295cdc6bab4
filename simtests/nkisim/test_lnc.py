"""LNC2: two programs over shared HBM, split work, sendrecv, determinism and deadlock detection."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule


@nkisim.jit
def split_scale(x):
    """Each program scales its half of the rows by (program id + 1)."""
    rows, cols = x.shape
    pid, n = nl.program_id(axis=0), nl.num_programs(axes=0)
    out = nl.ndarray((rows, cols), x.dtype, buffer=nl.shared_hbm)
    half = rows // n
    t = nl.ndarray((half, cols), nl.float32)
    nisa.dma_copy(t, x[pid * half:(pid + 1) * half, :])
    nisa.tensor_scalar(t, t, nl.multiply, float(pid + 1))
    nisa.dma_copy(out[pid * half:(pid + 1) * half, :], t)
    return out


def test_lnc2_splits_work_over_shared_hbm():
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    r = nkisim.run(split_scale[2], x)
    np.testing.assert_array_equal(r.outputs[:32], x[:32])
    np.testing.assert_array_equal(r.outputs[32:], 2 * x[32:])
    assert r.trace.program_ids() == (0, 1)
    assert r.lnc == 2


def test_lnc1_runs_the_whole_tensor():
    x = np.ones((8, 4), np.float32)
    np.testing.assert_array_equal(nkisim.simulate(split_scale)(x), x)


def test_simulate_with_lnc_grid():
    x = np.ones((8, 4), np.float32)
    out = nkisim.simulate(split_scale[2])(x)
    np.testing.assert_array_equal(out, np.concatenate([x[:4], 2 * x[4:]]))


def _exchange(x):
    rows, cols = x.shape
    pid = nl.program_id(0)
    half = rows // 2
    mine = nl.ndarray((half, cols), nl.float32)
    nisa.dma_copy(mine, x[pid * half:(pid + 1) * half, :])
    theirs = nl.ndarray((half, cols), nl.float32)
    nisa.sendrecv(mine, theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    both = nl.ndarray((half, cols), nl.float32)
    nisa.tensor_tensor(both, mine, theirs, op=nl.add)
    out = nl.ndarray((rows, cols), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out[pid * half:(pid + 1) * half, :], both)
    return out


def test_sendrecv_exchanges_tiles_deterministically():
    x = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    s = x[:16] + x[16:]
    outs = [nkisim.run(nkisim.jit(_exchange)[2], x) for _ in range(3)]
    for r in outs:
        np.testing.assert_array_equal(r.outputs, np.concatenate([s, s]))
    ops = [[(i.op, i.program_id) for i in r.trace] for r in outs]
    assert ops[0] == ops[1] == ops[2]


def test_sendrecv_deadlock_is_reported():
    def kernel():
        if nl.program_id(0) == 0:
            t = nl.ndarray((4, 4), nl.float32)
            nisa.memset(t, 0.0)
            nisa.sendrecv(t, t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    with raises_rule("sendrecv", "src", "deadlock: program 0 waits"):
        nkisim.run(nkisim.jit(kernel)[2])


def test_error_in_one_program_propagates():
    def kernel():
        if nl.program_id(0) == 1:
            nisa.memset(nl.ndarray((4, 4), nl.int32), 1.5)
    with raises_rule("memset", "value", "does not match"):
        nkisim.run(nkisim.jit(kernel)[2])


def test_lnc_degree_must_be_1_or_2():
    with pytest.raises(nkisim.NkiUsageError, match="1 or 2"):
        split_scale[8]
    with pytest.raises(nkisim.NkiUsageError, match="trn2 or later"):
        nkisim.run(split_scale, np.ones((8, 4), np.float32), lnc=2, target="trn1")


def test_lnc2_in_trace_only_mode():
    r = nkisim.run(nkisim.jit(_exchange)[2], nkisim.TensorSpec((32, 8), "float32"), trace_only=True)
    assert r.outputs.shape == (32, 8)
    assert [i.op for i in r.trace.for_program(1)].count("sendrecv") == 1
