"""PSUM liveness in program order: tiles Python still holds after their last use give up their banks."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule


def _held_tiles_kernel(rounds: int, per_round: int, calls: list[int]):
    """Sums ``rounds x per_round`` copies of its input through PSUM tiles it keeps in a list (as AWS's
    moe_cte keeps its used-up tiles), ``per_round`` of them live at a time in program order."""
    def kernel(a):
        calls.append(1)
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), nl.float32)
        nisa.memset(acc, 0.0)
        src = nl.ndarray((128, 512), nl.float32)
        nisa.dma_copy(src, a)
        held = []
        for _ in range(rounds):
            tiles = [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(per_round)]
            held.append(tiles)
            for t in tiles:
                nisa.tensor_copy(t, src)
            for t in tiles:
                nisa.tensor_tensor(acc, acc, t, op=nl.add)
        nisa.dma_copy(out, acc)
        return out
    return kernel


@pytest.mark.parametrize("lnc", [1, 2])
def test_tiles_held_past_their_last_use_free_their_banks(lnc):
    a = np.random.default_rng(0).integers(-4, 5, (128, 512)).astype(np.float32)
    calls: list[int] = []
    r = nkisim.run(_held_tiles_kernel(3, 6, calls), a, lnc=lnc)
    np.testing.assert_array_equal(r.outputs, 18 * a)
    assert r.peak_psum_banks == 6          # one round's tiles, not the 18 Python holds
    assert len(calls) > 2 * lnc   # a failed run on Python lifetimes, then a recording and a live run


def test_a_kernel_that_fits_on_python_lifetimes_runs_once():
    calls: list[int] = []
    r = nkisim.run(_held_tiles_kernel(1, 6, calls), np.ones((128, 512), np.float32))
    assert r.peak_psum_banks == 6 and len(calls) == 1


def test_tiles_live_together_in_program_order_still_overflow():
    calls: list[int] = []
    with raises_rule("tensor_copy", "dst", "PSUM capacity: no room for 2048 B per partition.*also with every "
                     "PSUM tile freed after its last use in program order"):
        nkisim.run(_held_tiles_kernel(1, 9, calls), np.ones((128, 512), np.float32))
