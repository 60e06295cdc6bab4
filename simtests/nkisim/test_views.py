"""NkiTensor views against hand-computed storage offsets and strides (the NkiTensor and access
pattern pages, docs/nki-rules.md)."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import inside, raises_rule


def _sbuf(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype, buffer=nl.sbuf)


def test_fresh_tensor_is_row_major():
    t = inside(lambda: _sbuf((128, 64)))
    assert t.shape == (128, 64)
    assert t.strides == (64, 1)
    assert t.offset == 0
    assert t.ndim == 2
    assert t.dtype == nl.float32
    assert t.buffer is nl.sbuf
    assert t.get_pattern() == [[64, 128], [1, 64]]


def test_on_chip_integer_index_keeps_at_least_two_dims():
    def body():
        t = _sbuf((64, 64, 64))
        return t[0, 0, 10], t[:, 0, 10], t[:, 3], t[5]
    a, b, c, d = inside(body)
    assert a.shape == (1, 1) and a.offset == 0 * 4096 + 0 * 64 + 10
    assert b.shape == (64, 1) and b.offset == 10 and b.strides[0] == 4096
    assert c.shape == (64, 64) and c.offset == 3 * 64 and c.strides == (4096, 1)
    assert d.shape == (1, 64, 64) and d.offset == 5 * 4096


def test_hbm_integer_index_drops_dims():
    def body():
        t = nl.ndarray((4, 6, 8), nl.bfloat16, buffer=nl.shared_hbm)
        return t[1], t[1, 2, 3], t[..., 5], t[-1, 1:5:2]
    a, b, c, d = inside(body)
    assert a.shape == (6, 8) and a.offset == 48
    assert b.shape == (1,) and b.offset == 48 + 16 + 3
    assert c.shape == (4, 6) and c.offset == 5 and c.strides == (48, 8)
    assert d.shape == (2, 8) and d.offset == 3 * 48 + 8 and d.strides == (16, 1)


def test_slices_steps_and_ds():
    def body():
        t = _sbuf((128, 32, 16))
        return t[nl.ds(32, 32), 4:20:4, :], t[:, :, 1::3]
    a, b = inside(body)
    assert a.shape == (32, 4, 16)
    assert a.offset == 32 * 512 + 4 * 16
    assert a.strides == (512, 64, 1)
    assert b.shape == (128, 32, 5) and b.strides == (512, 16, 3) and b.offset == 1


def test_partition_dim_is_never_strided():
    with raises_rule("index", "x", "partition dim is never strided"):
        inside(lambda: nl.ndarray((128, 4), nl.float32, name="x")[::2, :])


def test_out_of_range_slice_is_an_error():
    with pytest.raises(IndexError):
        inside(lambda: _sbuf((128, 8))[:, 4:12])


def test_view_methods_offsets_and_strides():
    def body():
        t = _sbuf((128, 6, 10))
        return {
            "slice": t.slice(2, 2, 8, step=3),
            "select": t.select(1, 4),
            "permute": t.permute((0, 2, 1)),
            "expand": t.expand_dim(1),
            "broadcast": t[:, 0:1, :].broadcast(1, 5),
            "squeeze": t[:, 0:1, :].squeeze_dim(1),
            "reshape_dim": t.reshape_dim(2, (2, -1)),
            "flatten": t.flatten_dims(1, 2),
            "reshape": t.reshape((128, 3, 20)),
        }
    v = inside(body)
    assert v["slice"].shape == (128, 6, 2) and v["slice"].offset == 2 and v["slice"].strides == (60, 10, 3)
    assert v["select"].shape == (128, 10) and v["select"].offset == 40 and v["select"].strides == (60, 1)
    assert v["permute"].shape == (128, 10, 6) and v["permute"].strides == (60, 1, 10)
    assert v["expand"].shape == (128, 1, 6, 10)
    assert v["broadcast"].shape == (128, 5, 10) and v["broadcast"].strides == (60, 0, 1)
    assert v["squeeze"].shape == (128, 10)
    assert v["reshape_dim"].shape == (128, 6, 2, 5) and v["reshape_dim"].strides == (60, 10, 5, 1)
    assert v["flatten"].shape == (128, 60) and v["flatten"].strides == (60, 1)
    assert v["reshape"].shape == (128, 3, 20) and v["reshape"].strides == (60, 20, 1)


def test_view_rules_on_chip():
    with raises_rule("permute", "t", "partition dim first"):
        inside(lambda: nl.ndarray((8, 4), nl.float32, name="t").permute((1, 0)))
    with raises_rule("reshape", "t", "keeps the partition dim"):
        inside(lambda: nl.ndarray((8, 4), nl.float32, name="t").reshape((4, 8)))
    with raises_rule("broadcast", "t", "partition dim"):
        inside(lambda: nl.ndarray((1, 4), nl.float32, name="t").broadcast(0, 8))
    with pytest.raises(nkisim.NkiUsageError, match="without a copy"):
        inside(lambda: nl.ndarray((8, 4, 6), nl.float32).permute((0, 2, 1)).reshape((8, 24)))
    with pytest.raises(nkisim.NkiUsageError, match="not contiguous"):
        inside(lambda: nl.ndarray((8, 4, 6), nl.float32)[:, :, 0:3].flatten_dims(1, 2))


def test_ap_pattern_and_offset():
    def body():
        t = _sbuf((16, 32))
        return t.ap([[32, 16], [2, 8], [1, 2]], offset=5), t[4:8, :].ap([[32, 4], [1, 32]]), \
            nl.ndarray((4, 1), nl.float32).ap([[1, 4], [0, 7]])
    a, b, c = inside(body)
    assert a.shape == (16, 8, 2) and a.offset == 5 and a.strides == (32, 2, 1)
    assert b.offset == 4 * 32   # offset=None inherits the view's offset
    assert c.shape == (4, 7) and c.strides == (1, 0)


def test_ap_rules():
    with raises_rule("ap", "t", "partition access has holes"):
        inside(lambda: nl.ndarray((16, 32), nl.float32, name="t").ap([[64, 8], [1, 32]]))
    # an out-of-bounds view may be built (AWS's kernels build some they never use); using it fails
    beyond = inside(lambda: nl.ndarray((16, 32), nl.float32, name="t").ap([[32, 16], [1, 32]], offset=1))
    assert beyond.shape == (16, 32)
    with raises_rule("memset", "dst", "out of bounds .*reaches elements \\[1, 512\\] outside 't'"):
        inside(lambda: nisa.memset(nl.ndarray((16, 32), nl.float32, name="t").ap([[32, 16], [1, 32]], offset=1), 0.0))
    with raises_rule("tensor_copy", "src", "outside one partition"):
        inside(lambda: nisa.tensor_copy(nl.ndarray((8, 40), nl.float32),
                                        nl.ndarray((16, 32), nl.float32, name="t").ap([[32, 8], [1, 40]])))


def test_views_share_storage_and_ap_reads_hand_computed_elements():
    src = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)

    def kernel(x):
        t = nl.ndarray((16, 32), nl.float32)
        nisa.dma_copy(t, x)
        u = nl.ndarray((16, 8, 2), nl.float32)
        nisa.tensor_copy(u, t.ap([[32, 16], [4, 8], [1, 2]], offset=1))
        nisa.memset(t[:, 0:1], 7.0)   # write through a view, read through the tensor
        out = nl.ndarray((16, 16), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, u)
        out2 = nl.ndarray((16, 32), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out2, t)
        return out, out2

    out, out2 = nkisim.run(kernel, src).outputs
    flat = src.reshape(-1)
    expect = np.array([[flat[p * 32 + 1 + 4 * i + j] for i in range(8) for j in range(2)] for p in range(16)])
    np.testing.assert_array_equal(out, expect)
    assert (out2[:, 0] == 7).all() and np.array_equal(out2[:, 1:], src[:, 1:])


def test_hbm_views_in_dma():
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)

    def kernel(a):
        t = nl.ndarray((6, 4), nl.float32)
        nisa.dma_copy(t, a[:, :, 3].permute((1, 0)))
        out = nl.ndarray((6, 4), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out

    np.testing.assert_array_equal(nkisim.run(kernel, x).outputs, x[:, :, 3].T)


def test_empty_slice_is_a_view_no_instruction_accepts():
    v = inside(lambda: _sbuf((128, 8))[:, 4:4])
    assert v.shape == (128, 0)
    with raises_rule("memset", "dst", "empty access"):
        inside(lambda: nisa.memset(nl.ndarray((8, 8), nl.float32)[:, 3:3], 0.0))
