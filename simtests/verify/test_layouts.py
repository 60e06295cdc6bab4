"""verify.layouts: the kernel's filter and padding layouts against PyTorch's.

The conversions are checked by index without torch, and against torch.nn.functional's conv3d
backward where torch is installed (the sim tox env installs it; elsewhere those tests skip).
"""
from __future__ import annotations

import numpy as np
import pytest

from conv3d_bwd.reference import conv3d_bwd_ref
from conv3d_bwd.verify.layouts import (
    LayoutError,
    filters_from_torch,
    filters_to_torch,
    padding_from_conv3d,
    padding_from_torch_pad,
    padding_to_torch_pad,
)

C_OUT, C_IN, KD, KH, KW = 5, 3, 3, 2, 4


@pytest.mark.fast
def test_filters_from_torch_moves_every_index_where_the_kernel_expects_it():
    weight = np.random.default_rng(0).standard_normal((C_OUT, C_IN, KD, KH, KW))
    filters = filters_from_torch(weight)
    assert filters.shape == (KD, KH, KW, C_IN, C_OUT)
    for co, ci, a, b, c in [(0, 0, 0, 0, 0), (4, 2, 2, 1, 3), (1, 2, 0, 1, 2), (3, 0, 2, 0, 1)]:
        assert filters[a, b, c, ci, co] == weight[co, ci, a, b, c]
    np.testing.assert_array_equal(filters_to_torch(filters), weight)


@pytest.mark.fast
def test_padding_orders_by_position():
    # F.pad: (w_left, w_right, h_top, h_bottom, d_front, d_back)
    assert padding_from_torch_pad((1, 2, 3, 4, 5, 6)) == (5, 6, 3, 4, 1, 2)
    assert padding_to_torch_pad((5, 6, 3, 4, 1, 2)) == (1, 2, 3, 4, 5, 6)
    assert padding_from_conv3d(2) == (2, 2, 2, 2, 2, 2)
    assert padding_from_conv3d((1, 0, 3)) == (1, 1, 0, 0, 3, 3)


@pytest.mark.fast
@pytest.mark.parametrize(("call", "message"), [
    (lambda: filters_from_torch(np.zeros((2, 3, 3, 3))), r"weight: has 4 dimensions; expected 5"),
    (lambda: filters_to_torch(np.zeros((1,) * 6)), r"filters: has 6 dimensions"),
    (lambda: padding_from_torch_pad((1, 1, 1, 1)), r"pad: .* has 4 values; expected 6"),
    (lambda: padding_to_torch_pad((0, 0, 0, 0, -1, 0)), r"padding: .* must be >= 0"),
    (lambda: padding_from_conv3d("same"), r"padding: 'same'"),
    (lambda: padding_from_conv3d((1, 2)), r"padding: \(1, 2\)"),
], ids=["weight-ndim", "filters-ndim", "pad-length", "negative", "string", "two-values"])
def test_bad_layouts_name_the_argument(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def _torch():
    return pytest.importorskip(
        "torch", reason="torch is not installed: the PyTorch layout cross-check needs the 'torch' extra")


@pytest.mark.parametrize(("pad", "stride", "dilation"), [
    ((0, 1, 2, 0, 1, 3), (1, 1, 1), (1, 1, 1)),
    ((1, 0, 0, 2, 2, 1), (2, 1, 2), (1, 2, 1)),
], ids=["asymmetric", "asymmetric-strided-dilated"])
def test_oracle_with_converted_layouts_equals_torch_autograd(pad, stride, dilation):
    """torch: F.conv3d(F.pad(x, pad), weight) backward; the oracle: the same problem in the kernel's
    layouts (filters and padding converted). dx, dw and db must agree to float64 rounding."""
    torch = _torch()
    fn = torch.nn.functional
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, C_IN, 5, 6, 7))
    weight = rng.standard_normal((C_OUT, C_IN, KD, KH, KW))
    bias = rng.standard_normal(C_OUT)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(weight, requires_grad=True)
    bt = torch.tensor(bias, requires_grad=True)
    y = fn.conv3d(fn.pad(xt, pad), wt, bt, stride=stride, dilation=dilation)
    dy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(dy))

    dx, dw, db = conv3d_bwd_ref(dy, x, filters_from_torch(weight), stride=stride,
                                padding=padding_from_torch_pad(pad), dilation=dilation)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(filters_to_torch(dw), wt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert padding_to_torch_pad(padding_from_torch_pad(pad)) == pad


def test_symmetric_conv3d_padding_equals_torch():
    torch = _torch()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, C_IN, 4, 5, 6))
    weight = rng.standard_normal((C_OUT, C_IN, KD, KH, KW))
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(weight, requires_grad=True)
    y = torch.nn.functional.conv3d(xt, wt, padding=(1, 0, 2))
    dy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(dy))
    dx, dw = conv3d_bwd_ref(dy, x, filters_from_torch(weight), padding=padding_from_conv3d((1, 0, 2)),
                            compute_db=False)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(filters_to_torch(dw), wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_torch_tensors_stay_torch_tensors():
    torch = _torch()
    weight = torch.arange(C_OUT * C_IN * KD * KH * KW, dtype=torch.float32).reshape(C_OUT, C_IN, KD, KH, KW)
    filters = filters_from_torch(weight)
    assert isinstance(filters, torch.Tensor) and tuple(filters.shape) == (KD, KH, KW, C_IN, C_OUT)
    assert filters[2, 1, 3, 2, 4] == weight[4, 2, 2, 1, 3]
    assert torch.equal(filters_to_torch(filters), weight)
