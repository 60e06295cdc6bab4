"""nc_n_gather / local_gather / tensor_partition_reduce / nonzero_with_count against numpy (Neuron
docs, nki.isa pages of the same names; local_gather against the numpy reference of the docs'
example)."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import on_chip, raises_rule

F32 = np.float32
RNG = np.random.default_rng(11)


def test_nc_n_gather_gathers_within_each_partition():
    data = RNG.standard_normal((8, 4, 16)).astype(F32)
    idx = RNG.integers(0, 64, (8, 10)).astype(np.uint32)

    def body(td, ti):
        out = nl.ndarray((8, 10), nl.float32)
        nisa.nc_n_gather(out, td, ti)
        return out
    np.testing.assert_array_equal(on_chip(body, data, idx), np.take_along_axis(data.reshape(8, 64),
                                                                                 idx.astype(np.int64), 1))


def test_local_gather_matches_the_docs_numpy_reference():
    src = (RNG.random((32, 64, 4)) * 100).astype(F32)
    per_core = RNG.integers(0, 64, (16, 2)).astype(np.uint16)
    index = np.tile(per_core, (2, 1))
    n_elem, n_valid = 4, 24

    def body(ts, ti):
        out = nl.ndarray((32, n_valid * n_elem), nl.float32)
        nisa.local_gather(out, ts, ti, num_elem_per_idx=n_elem, num_valid_indices=n_valid)
        return out
    got = on_chip(body, src, index * n_elem)
    expect = np.empty((32, n_valid, n_elem), F32)
    for core in range(2):
        rows = slice(16 * core, 16 * core + 16)
        flat = index[rows].flatten(order="F")[:n_valid]
        expect[rows] = np.take(src[rows], flat, axis=1)
    np.testing.assert_array_equal(got, expect.reshape(32, -1))


def test_tensor_partition_reduce_reduces_over_partitions():
    x = RNG.standard_normal((64, 12)).astype(F32)

    def body(tx):
        s, m, a = (nl.ndarray((1, 12), nl.float32) for _ in range(3))
        nisa.tensor_partition_reduce(s, nl.add, tx)
        nisa.tensor_partition_reduce(m, nl.maximum, tx)
        nisa.tensor_partition_reduce(a, nl.average, tx)
        return s, m, a
    s, m, a = on_chip(body, x)
    np.testing.assert_allclose(s[0], x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m[0], x.max(0))
    np.testing.assert_allclose(a[0], x.mean(0), rtol=1e-5, atol=1e-6)


def test_nonzero_with_count_writes_partitions_0_16_32_only():
    x = (RNG.random((48, 10)) < 0.4).astype(F32)

    def body(tx):
        out = nl.ndarray((48, 11), nl.int32)
        nisa.memset(out, 7)
        nisa.nonzero_with_count(out, tx, index_offset=16, padding_val=-1)
        return out
    out = on_chip(body, x)
    for p in range(48):
        if p % 16:
            assert (out[p] == 7).all()
            continue
        nz = np.flatnonzero(x[p])
        expect = np.full(11, -1)
        expect[:nz.size] = nz + 16
        expect[-1] = nz.size
        np.testing.assert_array_equal(out[p], expect)


def test_nonzero_with_count_docs_example():
    x = np.array([[0, 1, 1, 0, 0, 1, 0, 0]], F32)

    def body(tx):
        out = nl.ndarray((1, 9), nl.int32)
        nisa.nonzero_with_count(out, tx, index_offset=16, padding_val=-1)
        return out
    np.testing.assert_array_equal(on_chip(body, x)[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])


def _t(shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype, buffer=buffer)


@pytest.mark.parametrize("body,target,ins,operand,rule", [
    (lambda: nisa.nc_n_gather(_t((8, 4)), _t((8, 16)), _t((8, 4), nl.int32)), "trn2", "nc_n_gather", "indices",
     "must be uint32"),
    (lambda: nisa.nc_n_gather(_t((8, 4)), _t((8, 16), buffer=nl.psum), _t((8, 4), nl.uint32)), "trn2",
     "nc_n_gather", "data", "GpSimd cannot access PSUM"),
    (lambda: nisa.local_gather(_t((16, 4)), _t((16, 8)), _t((16, 4), nl.uint16), num_elem_per_idx=3), "trn2",
     "local_gather", "num_elem_per_idx", "must be 1, 2, 4, 8, 16 or 32"),
    (lambda: nisa.local_gather(_t((8, 4)), _t((8, 8)), _t((8, 4), nl.uint16)), "trn2", "local_gather", "index",
     "a multiple of 16"),
    (lambda: nisa.tensor_partition_reduce(_t((1, 4)), nl.subtract, _t((8, 4))), "trn2", "tensor_partition_reduce",
     "op", "must be nl.add"),
    (lambda: nisa.nonzero_with_count(_t((16, 9), nl.int32), _t((16, 8))), "trn1", "nonzero_with_count", "dst",
     "needs NC-v3"),
    (lambda: nisa.nonzero_with_count(_t((16, 8), nl.int32), _t((16, 8))), "trn2", "nonzero_with_count", "dst",
     "src's 8 \\+ 1"),
    (lambda: nisa.nonzero_with_count(_t((16, 9), nl.float32), _t((16, 8))), "trn2", "nonzero_with_count", "dst",
     "must be int32"),
])
def test_operand_rules(body, target, ins, operand, rule):
    def kernel():
        body()
    with raises_rule(ins, operand, rule):
        nkisim.run(kernel, target=target)
