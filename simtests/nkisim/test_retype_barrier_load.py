"""NkiTensor.view(dtype) and .ap(dtype=), nisa.core_barrier, nl.load / nl.store: semantics and rules."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import inside, raises_rule

BF16 = ml_dtypes.bfloat16


# --- view(dtype) --------------------------------------------------------------------------------
def test_view_reinterprets_bits_and_scales_the_last_dim():
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) * 1.5

    def kernel(a):
        t = nl.ndarray((8, 16), nl.float32)
        nisa.dma_copy(t, a)
        halves = t.view(nl.bfloat16)                      # (8, 32): each fp32 is two bf16 bit patterns
        words = t[:, 4:8].view(nl.int32)                  # same size: the shape stays (8, 4)
        out_h = nl.ndarray(halves.shape, nl.bfloat16, buffer=nl.shared_hbm)
        out_w = nl.ndarray(words.shape, nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(out_h, halves)
        nisa.dma_copy(out_w, words)
        return out_h, out_w

    halves, words = nkisim.simulate(kernel)(x)
    assert halves.shape == (8, 32) and words.shape == (8, 4)
    np.testing.assert_array_equal(halves.view(np.uint16), x.view(np.uint16).reshape(8, 32))
    np.testing.assert_array_equal(words, x[:, 4:8].view(np.int32))


def test_view_offsets_and_strides_in_the_new_dtype():
    def body():
        t = nl.ndarray((4, 8, 6), nl.float32)
        v = t[:, 2:5, 2:4].view(nl.bfloat16)   # offset 2*6+2 fp32 = 28 bf16; strides x2; last dim 2 -> 4
        return t, v
    t, v = inside(body)
    assert v.shape == (4, 3, 4)
    assert v.strides == (96, 12, 1) and v.offset == (2 * 6 + 2) * 2
    assert v.dtype == nl.bfloat16 and t.dtype == nl.float32


def test_view_written_through_is_seen_by_the_original():
    def kernel():
        t = nl.ndarray((2, 4), nl.int32)
        nisa.memset(t, 0)
        b = t.view(nl.uint8)                              # (2, 16)
        nisa.memset(b[:, 0:1], 7)                         # the low byte of element [:, 0] (little endian)
        out = nl.ndarray((2, 4), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out
    out = nkisim.simulate(kernel)()
    np.testing.assert_array_equal(out, [[7, 0, 0, 0], [7, 0, 0, 0]])


def test_view_is_one_memory_for_the_trace_and_capacity():
    def kernel():
        t = nl.ndarray((128, 256), nl.float32, name="t")
        v = t.view(nl.bfloat16)
        nisa.memset(v, 0.0)
        nisa.tensor_copy(t, t)
    r = nkisim.run(kernel, trace_only=True)
    memset, copy = r.trace.instrs
    (dst,) = memset.accesses
    assert dst.storage == copy.accesses[0].storage       # the same allocation for the cost model
    assert dst.span == (0, 256) and dst.nbytes == 128 * 512 * 2
    assert r.peak_sbuf_bytes_per_partition == 1024       # counted once


@pytest.mark.parametrize("make,rule", [
    (lambda t: t[:, ::2].view(nl.float32), "last dim must be contiguous"),
    (lambda t: t[:, 0:3].view(nl.float32), "not a whole number of float32"),
    (lambda t: t[:, 1:5].view(nl.float32), "offset 1 .* not a whole number"),
])
def test_view_rules(make, rule):
    with raises_rule("view", "t", rule):
        inside(lambda: make(nl.ndarray((8, 16), nl.bfloat16, name="t")))


def test_view_of_psum_is_not_emulated():
    with pytest.raises(nkisim.NkiUsageError, match="re-typing a PSUM tensor"):
        inside(lambda: nl.ndarray((8, 16), nl.float32, buffer=nl.psum).view(nl.int32))


def test_ap_with_dtype_counts_in_the_new_dtype():
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)

    def kernel(a):
        lo16 = a.ap([[16, 4], [2, 8]], offset=0, dtype=nl.uint16)   # the low half-word of every fp32
        out = nl.ndarray((4, 8), nl.uint16, buffer=nl.shared_hbm)
        nisa.dma_copy(out, lo16)
        return out
    out = nkisim.simulate(kernel)(x)
    np.testing.assert_array_equal(out, x.view(np.uint16).reshape(4, 16)[:, 0::2])


def test_ap_dtype_on_chip_keeps_the_partition_rule():
    with raises_rule("ap", "t", "partition dim stride 8 must equal"):
        inside(lambda: nl.ndarray((8, 8), nl.float32, name="t").ap([[8, 4], [1, 8]], dtype=nl.bfloat16))


# --- core_barrier ---------------------------------------------------------------------------------
@nkisim.jit
def swap_halves(x):
    """Each program doubles its row into shared HBM, meets the other at a barrier, reads the other's row."""
    pid = nl.program_id(0)
    shared = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm, name="shared")
    t = nl.ndarray((1, x.shape[1]), nl.float32)
    nisa.dma_copy(t, x[pid:pid + 1, :])
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    nisa.dma_copy(shared[pid:pid + 1, :], t)
    nisa.core_barrier(shared, (0, 1))
    other = nl.ndarray((1, x.shape[1]), nl.float32)
    nisa.dma_copy(other, shared[1 - pid:2 - pid, :])
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out[pid:pid + 1, :], other)
    return out


def test_core_barrier_orders_the_programs():
    x = np.arange(2 * 16, dtype=np.float32).reshape(2, 16)
    r = nkisim.run(swap_halves[2], x)
    # without the barrier program 0 would run to its end first and read row 1 before it exists (NaN)
    np.testing.assert_array_equal(r.outputs, 2 * x[::-1])
    barriers = [i for i in r.trace if i.op == "core_barrier"]
    assert [i.program_id for i in barriers] == [0, 1]
    assert all(i.engine == "sync" and i.accesses[0].nbytes == 0 for i in barriers)
    assert r.summary.instr_counts["core_barrier"] == 2
    assert r.summary.hbm_read_bytes == 2 * 16 * 4 * 2   # the barrier moves no bytes


def test_core_barrier_deadlock_and_rules():
    def lonely(x):
        shared = nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm)
        if nl.program_id(0) == 0:
            nisa.core_barrier(shared, (0, 1))
    with raises_rule("core_barrier", "data", "deadlock: program 0 waits for program 1 at core_barrier"):
        nkisim.run(nkisim.jit(lonely)[2], np.zeros(1, np.float32))

    def lnc1():
        nisa.core_barrier(nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm), (0, 1))
    with pytest.warns(nkisim.NkiStrictWarning, match="LNC=1 launch has no peer core"):
        assert len(nkisim.run(lnc1).trace) == 0   # AWS's router_topk issues it at LNC=1: a no-op
    with raises_rule("core_barrier", "data", "needs NC-v3"):
        nkisim.run(lnc1, target="trn1")

    def list_cores():
        nisa.core_barrier(nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm), [0, 1])
    with pytest.warns(nkisim.NkiStrictWarning, match="documents the tuple"):
        nkisim.run(nkisim.jit(list_cores)[2])   # AWS's router_topk passes a list

    def bad_cores():
        nisa.core_barrier(nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm), (0, 2))
    with raises_rule("core_barrier", "cores", "only the tuple \\(0, 1\\)"):
        nkisim.run(nkisim.jit(bad_cores)[2])

    def in_sbuf():
        nisa.core_barrier(nl.ndarray((2, 4), nl.float32), (0, 1))
    with raises_rule("core_barrier", "data", "must be in shared_hbm"):
        nkisim.run(nkisim.jit(in_sbuf)[2])


# --- nl.load / nl.store -----------------------------------------------------------------------------
def test_load_and_store_are_dma_copies():
    x = (np.arange(16 * 8, dtype=np.float32).reshape(16, 8) / 7).astype(np.float32)

    def kernel(a):
        t = nl.load(a[0:8, :], dtype=nl.bfloat16)
        assert t.buffer is nl.sbuf and t.shape == (8, 8) and t.dtype == nl.bfloat16
        out = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out
    r = nkisim.run(kernel, x)
    np.testing.assert_array_equal(r.outputs, x[0:8].astype(BF16).astype(np.float32))
    assert [i.op for i in r.trace] == ["dma_copy", "dma_copy"]


def test_load_and_store_rules():
    def load_sbuf():
        nl.load(nl.ndarray((8, 8), nl.float32))

    def store_psum():
        nl.store(nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm), nl.ndarray((8, 8), nl.float32,
                                                                               buffer=nl.psum))
    with raises_rule("load", "src", "must be an HBM tensor"):
        nkisim.run(load_sbuf)
    with raises_rule("store", "value", "must be an SBUF tile"):
        nkisim.run(store_psum)
