"""Converters between the kernel's layouts and PyTorch's.

dy and x are NCDHW in both (``[B, C, D, H, W]``): nothing to convert. The filters and the padding
differ:

- filters: the kernel's ``[K_d, K_h, K_w, C_in, C_out]`` against ``torch.nn.Conv3d.weight``'s
  ``[C_out, C_in, K_d, K_h, K_w]`` (groups = 1);
- padding: the kernel's 6 values are D first, ``(d_front, d_back, h_top, h_bottom, w_left,
  w_right)``; ``torch.nn.functional.pad`` lists the LAST axis first, ``(w_left, w_right, h_top,
  h_bottom, d_front, d_back)``; ``torch.nn.functional.conv3d``'s ``padding=(p_d, p_h, p_w)`` is
  symmetric.

The filter converters keep the array type: a numpy array gives a numpy array, a torch tensor a
torch tensor (through ``.permute``, so no copy and no torch import here).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_KERNEL_FROM_TORCH = (2, 3, 4, 1, 0)   # [C_out, C_in, kd, kh, kw] -> [kd, kh, kw, C_in, C_out]
_TORCH_FROM_KERNEL = (4, 3, 0, 1, 2)   # the inverse permutation


class LayoutError(ValueError):
    """A value that does not have the layout a converter expects (names the argument and rule)."""


def _permute(array, order: tuple[int, ...], name: str, layout: str):
    ndim = getattr(array, "ndim", None)
    if ndim is None:
        array = np.asarray(array)
        ndim = array.ndim
    if ndim != 5:
        raise LayoutError(f"{name}: has {ndim} dimensions; expected 5, {layout}")
    permute = getattr(array, "permute", None)   # a torch tensor
    return permute(*order) if callable(permute) else np.transpose(array, order)


def filters_from_torch(weight):
    """``[C_out, C_in, K_d, K_h, K_w]`` (torch's Conv3d weight) -> the kernel's ``[K_d, K_h, K_w, C_in, C_out]``.

    A view in both libraries; pass it through ``np.ascontiguousarray`` before handing it to a device.
    """
    return _permute(weight, _KERNEL_FROM_TORCH, "weight", "[C_out, C_in, K_d, K_h, K_w]")


def filters_to_torch(filters):
    """The kernel's ``[K_d, K_h, K_w, C_in, C_out]`` (filters, dw) -> torch's ``[C_out, C_in, K_d, K_h, K_w]``."""
    return _permute(filters, _TORCH_FROM_KERNEL, "filters", "[K_d, K_h, K_w, C_in, C_out]")


def _six_ints(values: Sequence[int], name: str, order: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in values)
    if len(values) != 6:
        raise LayoutError(f"{name}: {values!r} has {len(values)} values; expected 6, {order}")
    if any(v < 0 for v in values):
        raise LayoutError(f"{name}: {values!r}: every value must be >= 0 (the kernel pads with zeros "
                          "and does not crop)")
    return values


def padding_from_torch_pad(pad: Sequence[int]) -> tuple[int, ...]:
    """``F.pad``'s ``(w_left, w_right, h_top, h_bottom, d_front, d_back)`` -> the kernel's D-first 6 values."""
    w_lo, w_hi, h_lo, h_hi, d_lo, d_hi = _six_ints(
        pad, "pad", "F.pad order (w_left, w_right, h_top, h_bottom, d_front, d_back)")
    return (d_lo, d_hi, h_lo, h_hi, w_lo, w_hi)


def padding_to_torch_pad(padding: Sequence[int]) -> tuple[int, ...]:
    """The kernel's ``(d_front, d_back, h_top, h_bottom, w_left, w_right)`` -> ``F.pad``'s W-first order."""
    d_lo, d_hi, h_lo, h_hi, w_lo, w_hi = _six_ints(
        padding, "padding", "the kernel's order (d_front, d_back, h_top, h_bottom, w_left, w_right)")
    return (w_lo, w_hi, h_lo, h_hi, d_lo, d_hi)


def padding_from_conv3d(padding: int | Sequence[int]) -> tuple[int, ...]:
    """``F.conv3d``'s symmetric ``padding`` (an int, or ``(p_d, p_h, p_w)``) -> the kernel's 6 values.

    torch's string paddings ("same", "valid") are not accepted: spell the numbers out.
    """
    if isinstance(padding, str):
        raise LayoutError(f"padding: {padding!r}: give the numbers (an int or (p_d, p_h, p_w)), not a "
                          "string")
    per_axis = (int(padding),) * 3 if np.ndim(padding) == 0 else tuple(int(p) for p in padding)
    if len(per_axis) != 3 or any(p < 0 for p in per_axis):
        raise LayoutError(f"padding: {padding!r}: expected an int >= 0 or three of them (p_d, p_h, p_w)")
    p_d, p_h, p_w = per_axis
    return (p_d, p_d, p_h, p_h, p_w, p_w)


__all__ = ["LayoutError", "filters_from_torch", "filters_to_torch", "padding_from_conv3d",
           "padding_from_torch_pad", "padding_to_torch_pad"]
