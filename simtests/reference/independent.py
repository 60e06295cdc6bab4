"""Implementations of conv3d forward/backward written independently of ``reference`` to test the oracle.

None of these imports the oracle or its geometry; each restates the convolution its own way:
explicit loops, per-tap slicing of an explicitly padded array, and scipy.signal on zero-inserted arrays.
Layouts as in the oracle: x ``[B, C_in, D, H, W]``, filters ``[K_d, K_h, K_w, C_in, C_out]``.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.signal


def out_size(n: int, k: int, s: int, r: int, lo: int, hi: int) -> int:
    return (n + lo + hi - r * (k - 1) - 1) // s + 1


def out_shape(x_shape, w_shape, stride, padding, dilation) -> tuple[int, int, int]:
    return tuple(
        out_size(x_shape[2 + a], w_shape[a], stride[a], dilation[a], padding[2 * a], padding[2 * a + 1])
        for a in range(3)
    )


def naive_bwd(dy, x, w, stride, padding, dilation):
    """(dx, dw, db) by visiting every (b, co, output, tap) and reading x where it is not padding."""
    batch, c_in = x.shape[:2]
    kd_, kh_, kw_, _, c_out = w.shape
    dx = np.zeros(x.shape)
    dw = np.zeros(w.shape)
    db = np.zeros(c_out)
    for b, co, od, oh, ow in itertools.product(range(batch), range(c_out), *(range(n) for n in dy.shape[2:])):
        g = float(dy[b, co, od, oh, ow])
        db[co] += g
        for kd, kh, kw in itertools.product(range(kd_), range(kh_), range(kw_)):
            i = od * stride[0] + kd * dilation[0] - padding[0]
            j = oh * stride[1] + kh * dilation[1] - padding[2]
            k = ow * stride[2] + kw * dilation[2] - padding[4]
            if 0 <= i < x.shape[2] and 0 <= j < x.shape[3] and 0 <= k < x.shape[4]:
                for ci in range(c_in):
                    dx[b, ci, i, j, k] += float(w[kd, kh, kw, ci, co]) * g
                    dw[kd, kh, kw, ci, co] += float(x[b, ci, i, j, k]) * g
    return dx, dw, db


def naive_fwd(x, w, stride, padding, dilation):
    batch, c_in = x.shape[:2]
    c_out = w.shape[4]
    y = np.zeros((batch, c_out, *out_shape(x.shape, w.shape, stride, padding, dilation)))
    for b, co, od, oh, ow in itertools.product(range(batch), range(c_out), *(range(n) for n in y.shape[2:])):
        total = 0.0
        for kd, kh, kw in itertools.product(*(range(k) for k in w.shape[:3])):
            i = od * stride[0] + kd * dilation[0] - padding[0]
            j = oh * stride[1] + kh * dilation[1] - padding[2]
            k = ow * stride[2] + kw * dilation[2] - padding[4]
            if 0 <= i < x.shape[2] and 0 <= j < x.shape[3] and 0 <= k < x.shape[4]:
                for ci in range(c_in):
                    total += float(w[kd, kh, kw, ci, co]) * float(x[b, ci, i, j, k])
        y[b, co, od, oh, ow] = total
    return y


def covered_mask(x_shape, w_shape, stride, padding, dilation) -> np.ndarray:
    """[D, H, W] booleans: True where some (output, tap) pair reads that input position."""
    outs = out_shape(x_shape, w_shape, stride, padding, dilation)
    per_axis = []
    for a in range(3):
        hit = np.zeros(x_shape[2 + a], dtype=bool)
        for o in range(outs[a]):
            for k in range(w_shape[a]):
                i = o * stride[a] + k * dilation[a] - padding[2 * a]
                if 0 <= i < x_shape[2 + a]:
                    hit[i] = True
        per_axis.append(hit)
    return per_axis[0][:, None, None] & per_axis[1][None, :, None] & per_axis[2][None, None, :]


def tap_slices_bwd(dy, x, w, stride, padding, dilation):
    """(dx, dw, db) tap by tap on an explicitly zero-padded copy of x, with einsum on strided slices."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    pads = ((0, 0), (0, 0), *((padding[2 * a], padding[2 * a + 1]) for a in range(3)))
    x_pad = np.pad(x, pads)
    dx_pad = np.zeros_like(x_pad)
    dw = np.zeros(w.shape)
    outs = dy.shape[2:]
    for kd, kh, kw in itertools.product(*(range(k) for k in w.shape[:3])):
        window = (slice(None), slice(None)) + tuple(
            slice(t * dilation[a], t * dilation[a] + (outs[a] - 1) * stride[a] + 1, stride[a])
            for a, t in enumerate((kd, kh, kw))
        )
        dw[kd, kh, kw] = np.einsum("bidhw,bodhw->io", x_pad[window], dy)
        dx_pad[window] += np.einsum("io,bodhw->bidhw", w[kd, kh, kw], dy)
    crop = (slice(None), slice(None)) + tuple(
        slice(padding[2 * a], padding[2 * a] + x.shape[2 + a]) for a in range(3)
    )
    return dx_pad[crop], dw, dy.sum(axis=(0, 2, 3, 4))


def _zero_insert(a: np.ndarray, steps) -> np.ndarray:
    """Spread a 3-D array apart: element (i, j, k) moves to (i*s0, j*s1, k*s2), zeros in between."""
    out = np.zeros(tuple((n - 1) * s + 1 for n, s in zip(a.shape, steps)))
    out[:: steps[0], :: steps[1], :: steps[2]] = a
    return out


def scipy_bwd(dy, x, w, stride, padding, dilation):
    """(dx, dw, db) with scipy.signal: stride and dilation become zero insertion into dy and the filter.

    dx is the full convolution of the spread dy with the dilated filter (then cropped to x), and dw the
    valid correlation of padded x with the spread dy (then sampled every ``dilation``).
    """
    batch, c_in = x.shape[:2]
    c_out = w.shape[4]
    pads = tuple((padding[2 * a], padding[2 * a + 1]) for a in range(3))
    kernel_span = tuple(dilation[a] * (w.shape[a] - 1) + 1 for a in range(3))
    dx = np.zeros(x.shape)
    dw = np.zeros(w.shape)
    for b in range(batch):
        x_pad = [np.pad(x[b, ci].astype(np.float64), pads) for ci in range(c_in)]
        dy_spread = [_zero_insert(dy[b, co].astype(np.float64), stride) for co in range(c_out)]
        for ci, co in itertools.product(range(c_in), range(c_out)):
            w_dilated = _zero_insert(w[:, :, :, ci, co].astype(np.float64), dilation)
            full = scipy.signal.convolve(dy_spread[co], w_dilated, mode="full", method="direct")
            # x position i sits at padded position i + pad_lo; past the full result nothing reaches it.
            region = tuple(
                slice(padding[2 * a], max(padding[2 * a], min(padding[2 * a] + x.shape[2 + a], full.shape[a])))
                for a in range(3)
            )
            target = tuple(slice(0, r.stop - r.start) for r in region)
            dx[(b, ci, *target)] += full[region]
            # Only the part of padded x that windows touch enters the valid correlation.
            used = tuple(slice(0, dy_spread[co].shape[a] + kernel_span[a] - 1) for a in range(3))
            corr = scipy.signal.correlate(x_pad[ci][used], dy_spread[co], mode="valid", method="direct")
            dw[:, :, :, ci, co] += corr[:: dilation[0], :: dilation[1], :: dilation[2]]
    return dx, dw, dy.astype(np.float64).sum(axis=(0, 2, 3, 4))
