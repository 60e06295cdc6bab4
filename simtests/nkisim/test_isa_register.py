"""Virtual registers, dynamic loops and ``.ap(scalar_offset=)`` (Neuron docs: nki.isa.register_alloc /
register_move / register_load / register_store, VirtualRegister; nki.language.dynamic_range /
fori_loop / while_loop; NkiTensor.ap)."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule

F32 = np.float32


def _rows_kernel(x, n):
    """Double the first n[0, 0] rows of x with a dynamic loop and a dynamic row offset."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    n_sb = nl.ndarray((1, 1), nl.int32)
    nisa.dma_copy(dst=n_sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, n_sb)
    row = nl.ndarray((1, 1), nl.int32)
    nisa.memset(row, 0)
    one = nl.ndarray((1, 1), nl.int32)
    nisa.memset(one, 1)
    cols = x.shape[1]
    for _ in nl.dynamic_range(0, reg, 1):
        t = nl.ndarray((1, cols), x.dtype)
        nisa.dma_copy(dst=t, src=x.ap([[cols, 1], [1, cols]], offset=0, scalar_offset=row, indirect_dim=0))
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(dst=out.ap([[cols, 1], [1, cols]], offset=0, scalar_offset=row, indirect_dim=0), src=t)
        nisa.tensor_tensor(row, row, one, nl.add)
    return out


@pytest.mark.parametrize("n", [0, 1, 3])
def test_dynamic_range_with_a_loaded_register_and_dynamic_offsets(n):
    x = np.arange(4 * 8, dtype=F32).reshape(4, 8)
    out = nkisim.simulate(_rows_kernel)(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(out[:n], 2 * x[:n])
    assert np.isnan(out[n:]).all()   # rows the loop never reached stay unwritten


def test_fori_loop_passes_the_index_as_a_register():
    def kernel(x):
        out = nl.ndarray((1, 6), nl.float32, buffer=nl.shared_hbm)
        z = nl.zeros((1, 6), nl.float32)
        nisa.dma_copy(dst=out, src=z)
        tmp = nl.ndarray((1, 1), nl.float32)
        ub = nisa.register_alloc(5)

        def body(i):
            nisa.dma_copy(dst=tmp, src=x.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
            nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=tmp)
        nl.fori_loop(1, ub, body, step=2)
        return out
    x = np.arange(1, 7, dtype=F32).reshape(1, 6)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(x)[0], [0, 2, 0, 4, 0, 0])


def test_while_loop_and_register_store_and_move():
    def kernel(count):
        acc = nl.zeros((1, 1), nl.float32)
        c = nl.ndarray((1, 1), nl.int32)
        nisa.dma_copy(dst=c, src=count)
        one = nl.ndarray((1, 1), nl.int32)
        nisa.memset(one, 1)
        ones = nl.ndarray((1, 1), nl.float32)
        nisa.memset(ones, 1.0)
        reg = nisa.register_alloc()
        nisa.register_load(reg, c)

        def body(r):
            nisa.tensor_tensor(acc, acc, ones, nl.add)
            nisa.tensor_tensor(c, c, one, nl.subtract)
            nisa.register_load(r, c)
            return r
        nl.while_loop(reg, body)
        moved = nisa.register_alloc()
        nisa.register_move(moved, 9)
        stored = nl.ndarray((1, 1), nl.int32)
        nisa.register_store(stored, moved)
        out = nl.ndarray((1, 2), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:1], src=acc)
        nisa.dma_copy(dst=out[:, 1:2], src=stored)
        return out
    np.testing.assert_array_equal(nkisim.simulate(kernel)(np.array([[4]], np.int32))[0], [4, 9])
    np.testing.assert_array_equal(nkisim.simulate(kernel)(np.array([[0]], np.int32))[0], [0, 9])


def _oob_kernel(mode):
    def kernel(x):
        out = nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 4), nl.float32)
        nisa.memset(t, 5.0)
        far = nl.ndarray((1, 1), nl.int32)
        nisa.memset(far, 100)
        nisa.dma_copy(dst=out[0:1, :], src=t)
        nisa.dma_copy(dst=out.ap([[4, 1], [1, 4]], offset=4, scalar_offset=far, indirect_dim=0), src=t,
                      oob_mode=mode)
        return out
    return kernel


def test_out_of_bounds_dynamic_offsets_skip_or_fail_per_oob_mode():
    out = nkisim.simulate(_oob_kernel(nisa.oob_mode.skip))(np.zeros(1, F32))
    assert (out[0] == 5).all() and np.isnan(out[1]).all()   # the out-of-bounds write was dropped
    with raises_rule("dma_copy", "dst", "dynamic offset 100 puts the access out of bounds"):
        nkisim.run(_oob_kernel(nisa.oob_mode.error), np.zeros(1, F32))


def test_register_rules_and_limits():
    def python_int():
        int(nisa.register_alloc(3))
    with pytest.raises(TypeError, match="not known while the kernel is built"):
        nkisim.run(python_int)

    def too_big():
        nisa.register_load(nisa.register_alloc(), nl.ndarray((1, 2), nl.int32))
    with raises_rule("register_load", "src", "exactly one element"):
        nkisim.run(too_big)

    def not_a_register():
        nisa.register_move(3, 4)
    with raises_rule("register_move", "dst", "must be a VirtualRegister"):
        nkisim.run(not_a_register)

    def bad_step():
        for _ in nl.dynamic_range(0, 4, 0):
            pass
    with pytest.raises(nkisim.NkiUsageError, match="'step'"):
        nkisim.run(bad_step)


def test_trace_only_dynamic_bounds_need_full_mode():
    def kernel(n):
        s = nl.ndarray((1, 1), nl.int32)
        nisa.dma_copy(dst=s, src=n)
        reg = nisa.register_alloc()
        nisa.register_load(reg, s)
        for _ in nl.dynamic_range(reg):
            pass
    with pytest.raises(nkisim.NkiUsageError, match="trace-only mode"):
        nkisim.run(kernel, nkisim.TensorSpec((1, 1), "int32"), trace_only=True)
    r = nkisim.run(kernel, np.array([[2]], np.int32))
    assert [i.op for i in r.trace][-1] == "register_load" and r.trace.instrs[-1].engine == "sync"
