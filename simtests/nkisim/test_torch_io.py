"""Torch tensors in and out: nki.simulate, nki.simulate_kernel and the conversions (nkisim.torch_io)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
import conv3d_bwd.nkisim.legacy.language as lnl
from conv3d_bwd import nkisim
from conv3d_bwd.nkisim import legacy
from conv3d_bwd.nkisim.torch_io import from_numpy_like, to_numpy

torch = pytest.importorskip("torch")   # torch is an optional dependency


def _randn(*shape: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


@nkisim.jit
def _double_into(x, y):
    t = nl.load(x)
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    nl.store(y, t)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_simulate_returns_torch_for_torch_inputs_and_updates_them(dtype):
    tdt = getattr(torch, dtype)
    x = _randn(4, 8).to(tdt)
    y = torch.zeros(4, 8, dtype=tdt)
    out = nkisim.simulate(_double_into)(x, y)
    assert isinstance(out, torch.Tensor) and out.dtype == tdt
    assert torch.equal(out, x * 2)
    assert torch.equal(y, x * 2)   # the kernel's writes into an input reach the caller's tensor


def test_simulate_with_numpy_inputs_still_returns_numpy():
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    out = nkisim.simulate(_double_into)(x, np.zeros_like(x))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x * 2)


def test_simulate_kernel_accepts_and_returns_torch():
    @legacy.jit
    def kernel(a):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, value=lnl.load(a) + 1.0)
        return out

    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = legacy.simulate_kernel(kernel, a)
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, a + 1)


def test_bfloat16_round_trip_keeps_the_bits():
    t = _randn(5, 3).to(torch.bfloat16)
    arr = to_numpy(t)
    assert arr.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(arr.astype(np.float32), t.float().numpy())
    assert torch.equal(from_numpy_like(arr, t), t)


def test_device_tensors_are_refused_by_name():
    class FakeDevice:
        type = "xla"

        def __str__(self):
            return "xla:0"

    class FakeTensor:
        __module__ = "torch.fake"
        dtype = torch.float32
        device = FakeDevice()

        def detach(self):
            return self

    with pytest.raises(nkisim.NkiUsageError, match="device 'xla:0'"):
        to_numpy(FakeTensor())

