"""max8 / nc_find_index8 / nc_match_replace8 against numpy (Neuron docs, nki.isa pages of the same
names, including nc_match_replace8's worked duplicate-values example)."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import on_chip, raises_rule

F32 = np.float32


def test_max8_then_find_index8_recover_the_top8_and_their_positions():
    x = np.random.default_rng(3).permutation(np.arange(16 * 100, dtype=F32)).reshape(16, 100)

    def body(tx):
        top, idx = nl.ndarray((16, 8), nl.float32), nl.ndarray((16, 8), nl.uint32)
        nisa.max8(top, tx)
        nisa.nc_find_index8(idx, tx, top)
        return top, idx
    top, idx = on_chip(body, x)
    np.testing.assert_array_equal(top, -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_array_equal(np.take_along_axis(x, idx.astype(np.int64), 1), top)


def test_find_index8_duplicates_ascending_and_missing_all_ones():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], F32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 99]], F32)

    def body(td, tv):
        idx = nl.ndarray((1, 8), nl.uint16)
        nisa.nc_find_index8(idx, td, tv)
        return idx
    np.testing.assert_array_equal(on_chip(body, data, vals)[0], [2, 4, 5, 6, 7, 8, 9, 0xFFFF])


def test_match_replace8_follows_the_docs_example():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], F32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], F32)

    def body(td, tv):
        out, idx = nl.ndarray((1, 11), nl.float32), nl.ndarray((1, 8), nl.uint32)
        nisa.nc_match_replace8(out, td, tv, -1.0, dst_idx=idx)
        return out, idx
    out, idx = on_chip(body, data, vals)
    np.testing.assert_array_equal(idx[0], [2, 10, 9, 8, 7, 6, 5, 4])   # the docs' dst_idx
    np.testing.assert_array_equal(out[0], [1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1])


@pytest.mark.parametrize("body,ins,operand,rule", [
    (lambda: nisa.max8(nl.ndarray((4, 8), nl.float32), nl.ndarray((4, 7), nl.float32)), "max8", "src",
     "between 8 and 16,384"),
    (lambda: nisa.max8(nl.ndarray((4, 4), nl.float32), nl.ndarray((4, 64), nl.float32)), "max8", "dst",
     "8 elements per partition"),
    (lambda: nisa.nc_find_index8(nl.ndarray((4, 8), nl.int32), nl.ndarray((4, 64), nl.float32),
                                 nl.ndarray((4, 8), nl.float32)), "nc_find_index8", "dst", "uint16 or uint32"),
])
def test_operand_rules(body, ins, operand, rule):
    def kernel():
        body()
    with raises_rule(ins, operand, rule):
        nkisim.run(kernel)
