"""SBUF and PSUM capacity accounting over tensor lifetimes, explicit addresses and reported peaks."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule


def test_sbuf_overflow_names_the_allocation():
    def kernel():
        _live = [nl.ndarray((128, 25_000), nl.float32, name=f"t{i}") for i in range(3)]  # 100 KB each
    with raises_rule("ndarray", "t2", "SBUF capacity: live 300000 B per partition exceeds 212984 B usable"):
        nkisim.run(kernel, target="trn2")


def test_sbuf_capacity_depends_on_target():
    def kernel():
        _live = nl.ndarray((128, 50_000), nl.float32, name="a")   # 200,000 B per partition
    assert nkisim.run(kernel, target="trn2").peak_sbuf_bytes_per_partition == 200_000
    with raises_rule("ndarray", "a", "200000 B per partition exceeds 180224"):
        nkisim.run(kernel, target="trn1")


def test_dead_tensors_release_their_space():
    def kernel():
        for _ in range(10):
            t = nl.ndarray((128, 40_000), nl.float32)   # 160 KB; the previous one dies on rebinding
            nisa.memset(t, 0.0)
            del t
    r = nkisim.run(kernel, target="trn2")
    assert r.peak_sbuf_bytes_per_partition == 160_000


def test_psum_overflow_past_eight_banks():
    def kernel():
        live = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum, name=f"ps{i}") for i in range(9)]
        for t in live:
            nisa.memset(t, 0.0)
        out = nl.ndarray((128, 512), nl.float32)
        for t in live:   # all nine still to be read: nine banks live in program order too
            nisa.tensor_copy(out, t)
    with raises_rule("memset", "dst", "tensor 'ps8': PSUM capacity: no room for 2048 B per partition: 8 of 8 "
                     "banks live"):
        nkisim.run(kernel)


def test_psum_tile_allocated_while_full_takes_the_bank_freed_by_rebinding():
    """``t = nl.ndarray(...)`` in a loop: the previous tile is still bound to ``t`` while the new one is
    allocated (AWS's moe_cte fills all eight banks so); it dies at the assignment, and the new tile takes
    its bank before it is used."""
    def kernel():
        for _ in range(3):
            tiles = []
            for _ in range(8):
                tmp = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
                tiles.append(tmp)
            for t in tiles:
                nisa.memset(t, 1.0)
    r = nkisim.run(kernel)
    assert r.peak_psum_banks == 8


def test_psum_peak_banks_and_packing_of_small_tiles():
    def kernel():
        _small = [nl.ndarray((128, 128), nl.float32, buffer=nl.psum) for _ in range(4)]  # 512 B each: 1 bank
        _big = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)                      # 2 banks
    r = nkisim.run(kernel)
    assert r.peak_psum_banks == 3
    assert r.summary.peak_psum_banks == 3


def test_explicit_psum_rotation_reuses_banks():
    s = np.ones((128, 128), np.float32)

    def kernel(a):
        st = nl.ndarray((128, 128), nl.float32)
        nisa.dma_copy(st, a)
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        for i in range(20):
            acc = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, (i % 2) * 2048))
            nisa.nc_matmul(acc, st, st)
            res = nl.ndarray((128, 128), nl.float32)
            nisa.tensor_copy(res, acc)
        nisa.dma_copy(out, res)
        return out
    r = nkisim.run(kernel, s)
    assert r.peak_psum_banks == 2
    np.testing.assert_array_equal(r.outputs, np.full((128, 128), 128, np.float32))


def test_explicit_psum_address_beyond_the_banks():
    def kernel():
        nl.ndarray((128, 512), nl.float32, buffer=nl.psum, name="p", address=(0, 8 * 2048))
    with raises_rule("ndarray", "p", "exceeds the 16384 B per partition of PSUM"):
        nkisim.run(kernel)


def test_explicit_sbuf_partition_offset_and_start_rule():
    def kernel():
        t = nl.ndarray((32, 16), nl.float32, address=(32, 0), name="q")
        nisa.memset(t, 1.0)                 # starts at physical partition 32: allowed for 32 partitions
        u = nl.ndarray((64, 16), nl.float32, address=(32, 4096), name="u")
        nisa.memset(u, 1.0)                 # 64 partitions must start at 0 or 64
    with raises_rule("memset", "dst", "start partition 32 with 64 partitions"):
        nkisim.run(kernel)


def test_explicit_address_partition_bounds():
    def kernel():
        nl.ndarray((64, 16), nl.float32, address=(96, 0), name="x")
    with raises_rule("ndarray", "x", "partition 96 \\+ 64 partitions exceeds 128"):
        nkisim.run(kernel)


def test_lnc2_peaks_are_per_core():
    def kernel():
        t = nl.ndarray((128, 1000), nl.float32)
        nisa.memset(t, 0.0)
    r = nkisim.run(nkisim.jit(kernel)[2])
    assert r.peak_sbuf_bytes_per_partition == 4000


@pytest.mark.parametrize("target,usable", [("trn1", 180_224), ("trn2", 212_984), ("trn3", 245_752)])
def test_tile_size_usable_sbuf_matches_the_capacity_rule(target, usable):
    seen = {}

    def kernel():
        seen["size"] = nl.tile_size.total_available_sbuf_size
        nl.ndarray((128, usable // 2), nl.bfloat16)        # exactly full: allowed
    nkisim.run(kernel, target=target)
    assert seen["size"] == usable
