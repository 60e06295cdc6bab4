"""Geometry of a 3D convolution: validated sizes, shapes, and the one index map every gradient uses.

Layouts (the kernel's): x and dx ``[B, C_in, D, H, W]``, dy ``[B, C_out, D_out, H_out, W_out]``,
filters and dw ``[K_d, K_h, K_w, C_in, C_out]``, db ``[C_out]``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

AXIS_NAMES = ("D", "H", "W")
OUT_SIZE_RULE = "(in + pad_lo + pad_hi - dil*(k-1) - 1) // stride + 1"


class GeometryError(ValueError):
    """A bad shape, stride, padding, dilation, dtype or request; the message names argument, value, rule."""


def _is_int(value: object) -> bool:
    # bool is an int subclass, but stride=True is a mistake, not a stride of 1.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(name: str, value: object, minimum: int, what: str) -> int:
    if not _is_int(value) or value < minimum:
        raise GeometryError(f"{name}={value!r}: {what} must be an integer >= {minimum}")
    return int(value)


def _is_sequence(value: object) -> bool:
    # A 1-D numpy array is as good as a tuple; a string is not a sequence of integers.
    if isinstance(value, np.ndarray):
        return value.ndim == 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _show(value: object) -> str:
    """A one-line repr for error messages (numpy's array repr spans lines)."""
    if isinstance(value, np.ndarray):
        return f"array({value.tolist()!r})"
    return repr(tuple(value)) if isinstance(value, (list, tuple)) else repr(value)


def _check_int_tuple(name: str, value: object, length: int, minimum: int, what: str, layout: str) -> tuple:
    if not _is_sequence(value):
        raise GeometryError(f"{name}={_show(value)}: expected a sequence of {length} integers {layout}")
    if len(value) != length:
        raise GeometryError(f"{name}={_show(value)}: expected {length} integers {layout}, got {len(value)}")
    return tuple(_check_int(f"{name}[{i}]", v, minimum, what) for i, v in enumerate(value))


def check_shape(name: str, shape: object, layout: str) -> tuple[int, ...]:
    """A 5-D shape of positive integers, else a GeometryError naming ``name``."""
    if not _is_sequence(shape):
        raise GeometryError(f"{name}.shape={_show(shape)}: expected a 5-D shape {layout}")
    if len(shape) != 5:
        raise GeometryError(f"{name}.shape={_show(shape)}: expected a 5-D array {layout}, got {len(shape)} dims")
    return tuple(_check_int(f"{name}.shape[{i}]", v, 1, "every dimension") for i, v in enumerate(shape))


@dataclass(frozen=True)
class AxisMap:
    """One spatial axis: input size, kernel size, stride, dilation and the two paddings."""

    size: int
    kernel: int
    stride: int
    dilation: int
    pad_lo: int
    pad_hi: int

    @property
    def out_size(self) -> int:
        padded = self.size + self.pad_lo + self.pad_hi
        return (padded - self.dilation * (self.kernel - 1) - 1) // self.stride + 1

    def input_index(self, o, k):
        """THE index map: the input position that output ``o`` reads through tap ``k``.

        A position outside ``[0, size)`` is padding and reads zero. Works on ints and numpy arrays.
        """
        return o * self.stride + k * self.dilation - self.pad_lo

    def out_size_formula(self) -> str:
        """The output-size rule with this axis' numbers filled in, for error messages."""
        return (
            f"({self.size}+{self.pad_lo}+{self.pad_hi}-{self.dilation}*({self.kernel}-1)-1)"
            f"//{self.stride}+1"
        )


@dataclass(frozen=True)
class ConvGeometry:
    """A validated 3D convolution geometry; construction raises GeometryError on any bad value."""

    batch: int
    c_in: int
    c_out: int
    in_size: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, ...] = (0,) * 6
    dilation: tuple[int, int, int] = (1, 1, 1)

    def __post_init__(self) -> None:
        # Normalise to tuples of Python ints so that equal geometries compare and hash equal.
        fields = {
            "batch": _check_int("batch", self.batch, 1, "batch"),
            "c_in": _check_int("c_in", self.c_in, 1, "c_in"),
            "c_out": _check_int("c_out", self.c_out, 1, "c_out"),
            "in_size": _check_int_tuple("in_size", self.in_size, 3, 1, "input size", "(D, H, W)"),
            "kernel": _check_int_tuple("kernel", self.kernel, 3, 1, "kernel size", "(K_d, K_h, K_w)"),
            "stride": _check_int_tuple("stride", self.stride, 3, 1, "stride", "(s_d, s_h, s_w)"),
            "padding": _check_int_tuple(
                "padding", self.padding, 6, 0, "padding", "(d_lo, d_hi, h_lo, h_hi, w_lo, w_hi)"
            ),
            "dilation": _check_int_tuple("dilation", self.dilation, 3, 1, "dilation", "(r_d, r_h, r_w)"),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        for a, axis in enumerate(self.axes):
            if axis.out_size < 1:
                raise GeometryError(
                    f"out_size[{a}]={axis.out_size} ({AXIS_NAMES[a]}): {OUT_SIZE_RULE} = "
                    f"{axis.out_size_formula()} must be >= 1; the dilated kernel spans "
                    f"{axis.dilation * (axis.kernel - 1) + 1} positions but the padded input has only "
                    f"{axis.size + axis.pad_lo + axis.pad_hi}"
                )

    @property
    def axes(self) -> tuple[AxisMap, AxisMap, AxisMap]:
        p = self.padding
        return tuple(
            AxisMap(self.in_size[a], self.kernel[a], self.stride[a], self.dilation[a], p[2 * a], p[2 * a + 1])
            for a in range(3)
        )

    @property
    def out_size(self) -> tuple[int, int, int]:
        return tuple(axis.out_size for axis in self.axes)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.batch, self.c_in, *self.in_size)

    @property
    def w_shape(self) -> tuple[int, ...]:
        return (*self.kernel, self.c_in, self.c_out)

    @property
    def dy_shape(self) -> tuple[int, ...]:
        return (self.batch, self.c_out, *self.out_size)

    @property
    def dx_shape(self) -> tuple[int, ...]:
        return self.x_shape

    @property
    def dw_shape(self) -> tuple[int, ...]:
        return self.w_shape

    @property
    def db_shape(self) -> tuple[int, ...]:
        return (self.c_out,)

    @classmethod
    def from_shapes(
        cls,
        dy_shape: Sequence[int] | None,
        x_shape: Sequence[int],
        w_shape: Sequence[int],
        stride: Sequence[int] = (1, 1, 1),
        padding: Sequence[int] = (0,) * 6,
        dilation: Sequence[int] = (1, 1, 1),
    ) -> ConvGeometry:
        """The geometry of arrays with these shapes; ``dy_shape=None`` skips the dy checks (forward)."""
        x = check_shape("x_in", x_shape, "[B, C_in, D, H, W]")
        w = check_shape("filters", w_shape, "[K_d, K_h, K_w, C_in, C_out]")
        if w[3] != x[1]:
            raise GeometryError(f"filters.shape[3]={w[3]}: expected C_in={x[1]} from x_in.shape[1]")
        geometry = cls(
            batch=x[0], c_in=x[1], c_out=w[4], in_size=x[2:], kernel=w[:3],
            stride=stride, padding=padding, dilation=dilation,
        )
        if dy_shape is not None:
            geometry.check_dy_shape(dy_shape)
        return geometry

    def check_dy_shape(self, dy_shape: Sequence[int]) -> None:
        """Raise GeometryError unless ``dy_shape`` is exactly ``self.dy_shape``, naming the first mismatch."""
        dy = check_shape("dy", dy_shape, "[B, C_out, D_out, H_out, W_out]")
        if dy[0] != self.batch:
            raise GeometryError(f"dy.shape[0]={dy[0]}: expected batch {self.batch} from x_in.shape[0]")
        if dy[1] != self.c_out:
            raise GeometryError(f"dy.shape[1]={dy[1]}: expected C_out={self.c_out} from filters.shape[4]")
        for a, axis in enumerate(self.axes):
            if dy[2 + a] != axis.out_size:
                raise GeometryError(
                    f"dy.shape[{2 + a}]={dy[2 + a]}: expected {AXIS_NAMES[a]}_out={axis.out_size} from "
                    f"{OUT_SIZE_RULE} = {axis.out_size_formula()}"
                )
