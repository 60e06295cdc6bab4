"""The oracle against PyTorch's conv3d gradients (float64), when torch is installed."""

from __future__ import annotations

import numpy as np
import pytest

from conv3d_bwd.reference import conv3d_bwd_ref
from simtests.reference.cases import TINY, Geo

torch = pytest.importorskip("torch", reason="torch is not installed: the PyTorch cross-check needs the 'torch' extra")


def torch_bwd(dy, x, w, stride, padding, dilation):
    """dx, dw, db through torch.nn.grad, asymmetric padding applied to x with F.pad (then cropped)."""
    xt = torch.from_numpy(x)
    # F.pad lists the last axis first: (w_lo, w_hi, h_lo, h_hi, d_lo, d_hi)
    x_pad = torch.nn.functional.pad(xt, (padding[4], padding[5], padding[2], padding[3], padding[0], padding[1]))
    wt = torch.from_numpy(np.ascontiguousarray(w.transpose(4, 3, 0, 1, 2)))  # [C_out, C_in, kd, kh, kw]
    dyt = torch.from_numpy(dy)
    dx_pad = torch.nn.grad.conv3d_input(x_pad.shape, wt, dyt, stride=stride, padding=0, dilation=dilation)
    dw = torch.nn.grad.conv3d_weight(x_pad, wt.shape, dyt, stride=stride, padding=0, dilation=dilation)
    d, h, ww = x.shape[2:]
    dx = dx_pad[:, :, padding[0]:padding[0] + d, padding[2]:padding[2] + h, padding[4]:padding[4] + ww]
    return dx.numpy(), dw.numpy().transpose(2, 3, 4, 1, 0), dyt.sum(dim=(0, 2, 3, 4)).numpy()


CASES = (
    *TINY,
    Geo(2, 8, 6, (7, 9, 8), (3, 3, 3), stride=(2, 1, 2), padding=(0, 2, 1, 1, 2, 0), dilation=(1, 2, 1)),
    Geo(1, 4, 5, (6, 6, 10), (1, 3, 5), stride=(1, 3, 2), padding=(0, 0, 2, 0, 1, 3), dilation=(1, 1, 2)),
    Geo(3, 3, 2, (5, 8, 7), (2, 7, 2), stride=(3, 1, 1), padding=(1, 0, 3, 3, 0, 1)),
)


@pytest.mark.parametrize("geo", CASES, ids=str)
def test_oracle_matches_torch_float64(geo: Geo):
    dy, x, w = geo.arrays(seed=21)
    ours = conv3d_bwd_ref(dy, x, w, **geo.conv)
    theirs = torch_bwd(dy, x, w, **geo.conv)
    for name, got, want in zip(("dx", "dw", "db"), ours, theirs):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()), err_msg=name)
