"""The float64 oracle: forward conv3d, the backward gradients dx/dw/db, and their |a|.|b| magnitudes.

How it computes (fast enough to judge large cases, without a 27x im2col):
each spatial axis of the padded input is split by phase modulo the stride, so that every kernel tap
becomes a unit-stride shift inside one phase plane. With planes stored ``[Q_d, Q_h, Q_w, B, C]`` and dy
placed on the same grid (zeros elsewhere), a tap is a constant row offset into a flat ``[rows, C]``
matrix: dw per tap is a GEMM on two contiguous row blocks, and dx per tap is a GEMM accumulated by
BLAS (beta=1) straight into its row block of the dx planes. Grid rows outside the valid outputs hold
dy = 0 and add exact zeros.

The rows are processed in cache-sized chunks, all taps per chunk: a dx chunk gathers every tap's
contribution while it sits in L2, and a dy chunk serves all taps of dw, instead of every tap streaming
whole arrays through memory (same FLOPs; one core's time on the oracle bench's shapes went from 266 to
184 ms at C=64 and from 169 to 158 ms at C=128). BLAS keeps its own threads: dealing the chunks to one
Python thread per core with single-threaded BLAS was tried and measured slower on a quiet machine
(196 against 121 ms at C=64, 157 against 84 ms at C=128).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from scipy.linalg.blas import dgemm

from conv3d_bwd.reference.geometry import AxisMap, ConvGeometry, GeometryError

# Every one of these widens to float64 exactly.
SUPPORTED_DTYPES = {
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(np.float16): "fp16",
    np.dtype(np.float32): "fp32",
    np.dtype(np.float64): "fp64",
}

Grads = np.ndarray | tuple[np.ndarray, ...]


class NonFiniteInputError(GeometryError):
    """An input holds inf or NaN; the oracle's zero-padded grid would spread it where it does not belong."""


def _checked_array(name: str, value: object) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise GeometryError(f"{name}: cannot be read as a numeric array ({error})") from None
    if array.dtype not in SUPPORTED_DTYPES:
        raise GeometryError(
            f"{name}.dtype={array.dtype}: unsupported dtype; expected one of "
            "bfloat16 (ml_dtypes), float16, float32, float64"
        )
    return array


def _check_finite(name: str, array: np.ndarray) -> None:
    finite = np.isfinite(array)
    if not finite.all():
        bad = np.argwhere(~finite)
        raise NonFiniteInputError(
            f"{name} holds {len(bad)} non-finite values (first at index {tuple(int(i) for i in bad[0])}): "
            "the oracle needs finite inputs"
        )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _AxisPhases:
    """One axis of the padded input, restricted to the positions the windows touch, split by phase.

    Padded coordinate ``u = i - origin`` runs over ``[0, span)``; it lives in phase ``u % stride`` at
    plane index ``u // stride``. Output ``o`` through tap ``k`` lands at plane index ``o + shift[k]``
    of phase ``phase[k]``, so taps are unit-stride shifts inside a plane.
    """

    size: int
    stride: int
    out: int
    origin: int
    span: int
    planes: int
    taps: tuple[tuple[int, int], ...]  # (phase, shift) per kernel tap

    @classmethod
    def of(cls, axis: AxisMap) -> _AxisPhases:
        s = axis.stride
        origin = axis.input_index(0, 0)
        span = axis.input_index(axis.out_size - 1, axis.kernel - 1) - origin + 1
        taps = []
        for k in range(axis.kernel):
            shift, phase = divmod(axis.input_index(0, k) - origin, s)
            taps.append((phase, shift))
        return cls(axis.size, s, axis.out_size, origin, span, _ceil_div(span, s), tuple(taps))

    def input_slices(self, phase: int) -> tuple[slice, slice] | None:
        """(plane slice, input slice) of the real input positions of one phase, or None if there are none."""
        s = self.stride
        q_lo = max(0, _ceil_div(-self.origin - phase, s))
        q_hi = min(self.planes, _ceil_div(self.size - self.origin - phase, s), _ceil_div(self.span - phase, s))
        if q_hi <= q_lo:
            return None
        i_lo = q_lo * s + phase + self.origin
        return slice(q_lo, q_hi), slice(i_lo, i_lo + (q_hi - q_lo - 1) * s + 1, s)


class _Grid:
    """The phase-plane grid shared by x, dx, dy and y for one geometry."""

    def __init__(self, geometry: ConvGeometry):
        self.geometry = geometry
        self.axes = tuple(_AxisPhases.of(axis) for axis in geometry.axes)
        self.strides = tuple(ax.stride for ax in self.axes)
        self.plane_shape = tuple(ax.planes for ax in self.axes)
        _, qh, qw = self.plane_shape
        b = geometry.batch
        do, ho, wo = geometry.out_size
        # Rows [0, n_rows) cover every valid output position (the last one is row n_rows - 1).
        self.n_rows = (((do - 1) * qh + (ho - 1)) * qw + (wo - 1)) * b + b

    def taps(self):
        """Yield (tap index (kd, kh, kw), phase (pd, ph, pw), row offset) for every kernel tap."""
        _, qh, qw = self.plane_shape
        b = self.geometry.batch
        for kd, kh, kw in itertools.product(*(range(k) for k in self.geometry.kernel)):
            (pd, sd), (ph, sh), (pw, sw) = self.axes[0].taps[kd], self.axes[1].taps[kh], self.axes[2].taps[kw]
            yield (kd, kh, kw), (pd, ph, pw), ((sd * qh + sh) * qw + sw) * b

    def _phase_slices(self):
        for phase in itertools.product(*(range(s) for s in self.strides)):
            slices = [ax.input_slices(p) for ax, p in zip(self.axes, phase)]
            if all(sl is not None for sl in slices):
                yield phase, tuple(sl[0] for sl in slices), tuple(sl[1] for sl in slices)

    def to_planes(self, array: np.ndarray, absolute: bool) -> np.ndarray:
        """``[B, C, D, H, W]`` (any supported dtype) -> float64 planes ``[s_d, s_h, s_w, Q_d, Q_h, Q_w, B, C]``."""
        planes = np.zeros((*self.strides, *self.plane_shape, array.shape[0], array.shape[1]))
        for phase, q, i in self._phase_slices():
            # One widening, transposing copy per phase; the float64 copy of the input is never made whole.
            planes[phase][q] = array[(slice(None), slice(None), *i)].transpose(2, 3, 4, 0, 1)
        if absolute:
            np.abs(planes, out=planes)
        return planes

    def from_planes(self, planes: np.ndarray) -> np.ndarray:
        """float64 planes -> ``[B, C, D, H, W]``; input positions no window touches stay exactly 0."""
        g = self.geometry
        out = np.zeros((g.batch, planes.shape[-1], *g.in_size))
        for phase, q, i in self._phase_slices():
            out[(slice(None), slice(None), *i)] = planes[phase][q].transpose(3, 4, 0, 1, 2)
        return out

    def to_out_grid(self, array: np.ndarray, absolute: bool) -> np.ndarray:
        """``[B, C, D_out, H_out, W_out]`` -> float64 ``[Q_d, Q_h, Q_w, B, C]``, zero outside the outputs."""
        do, ho, wo = self.geometry.out_size
        grid = np.zeros((*self.plane_shape, array.shape[0], array.shape[1]))
        grid[:do, :ho, :wo] = array.transpose(2, 3, 4, 0, 1)
        if absolute:
            np.abs(grid, out=grid)
        return grid

    def from_out_grid(self, grid: np.ndarray) -> np.ndarray:
        do, ho, wo = self.geometry.out_size
        return np.ascontiguousarray(grid[:do, :ho, :wo].transpose(3, 4, 0, 1, 2))


def _rows(array: np.ndarray) -> np.ndarray:
    """A contiguous ``[..., C]`` array as a ``[rows, C]`` matrix (a view)."""
    return array.reshape(-1, array.shape[-1])


def _blas_operand(matrix: np.ndarray) -> tuple[np.ndarray, int]:
    """A Fortran-ordered matrix for BLAS and its transpose flag, copying only a non-contiguous one."""
    if matrix.flags.f_contiguous:
        return matrix, 0
    if matrix.flags.c_contiguous:
        return matrix.T, 1
    return np.asfortranarray(matrix), 0


def _gemm(target: np.ndarray, a: np.ndarray, b: np.ndarray, accumulate: bool) -> None:
    """``target = a @ b`` (or ``+=``) for a C-ordered ``target``, written in place by BLAS.

    Every product goes through scipy's dgemm: mixing it with numpy's matmul would wake two BLAS thread
    pools that spin against each other on 2 cores (measured: twice the time).
    """
    # Column-major view of the same memory: target.T = b.T @ a.T, target.T being Fortran-ordered.
    left, trans_left = _blas_operand(b.T)
    right, trans_right = _blas_operand(a.T)
    result = dgemm(1.0, left, right, beta=1.0 if accumulate else 0.0, c=target.T,
                   trans_a=trans_left, trans_b=trans_right, overwrite_c=True)
    if not np.shares_memory(result, target):  # f2py had to copy; keep the answer right anyway
        target[...] = result.T


# Rows per chunk: about 512 KiB of one [rows, C] operand, so a chunk and its partner stay in a 1 MiB L2.
_CHUNK_BYTES = 512 * 1024


def _chunks(n_rows: int, channels: int) -> list[tuple[int, int]]:
    """(start, stop) of consecutive row chunks covering ``[0, n_rows)``."""
    step = max(64, _CHUNK_BYTES // (8 * channels))
    return [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def _dx_planes(grid: _Grid, dy_rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dx on the phase planes: dx row r gathers dy row r - offset through every tap, chunk by chunk."""
    g = grid.geometry
    n = grid.n_rows
    dx_planes = np.zeros((*grid.strides, *grid.plane_shape, g.batch, g.c_in))
    taps = list(grid.taps())
    plane_rows = g.batch * int(np.prod(grid.plane_shape))

    for start, stop in _chunks(plane_rows, max(g.c_in, g.c_out)):
        for tap, phase, offset in taps:
            # Tap k writes rows [offset, offset + n); only its overlap with this chunk is computed.
            lo, hi = max(start, offset), min(stop, offset + n)
            if lo < hi:
                _gemm(_rows(dx_planes[phase])[lo:hi], dy_rows[lo - offset:hi - offset], w[tap].T,
                      accumulate=True)
    return dx_planes


def _dw(grid: _Grid, dy_rows: np.ndarray, x_planes: np.ndarray) -> np.ndarray:
    """dw[k] = sum over rows r of x[r + offset_k] (x) dy[r], each dy chunk reused by every tap."""
    g = grid.geometry
    taps = list(grid.taps())

    dw = np.zeros(g.dw_shape)
    for start, stop in _chunks(grid.n_rows, max(g.c_in, g.c_out)):
        dy_chunk = dy_rows[start:stop]
        for tap, phase, offset in taps:
            _gemm(dw[tap], _rows(x_planes[phase])[offset + start:offset + stop].T, dy_chunk, accumulate=True)
    return dw


def _weights(filters: np.ndarray, absolute: bool) -> np.ndarray:
    w = np.asarray(filters, dtype=np.float64)
    return np.abs(w) if absolute else w


def _prepare(
    dy, x_in, filters, stride, padding, dilation, compute_dx, compute_dw, compute_db
) -> tuple[ConvGeometry, np.ndarray, np.ndarray, np.ndarray]:
    if not (compute_dx or compute_dw or compute_db):
        raise GeometryError(
            "compute_dx=False, compute_dw=False, compute_db=False: at least one gradient must be requested"
        )
    dy = _checked_array("dy", dy)
    x_in = _checked_array("x_in", x_in)
    filters = _checked_array("filters", filters)
    geometry = ConvGeometry.from_shapes(dy.shape, x_in.shape, filters.shape, stride, padding, dilation)
    _check_finite("dy", dy)
    if compute_dw:
        _check_finite("x_in", x_in)
    if compute_dx:
        _check_finite("filters", filters)
    return geometry, dy, x_in, filters


def _backward(dy, x_in, filters, stride, padding, dilation, compute_dx, compute_dw, compute_db, absolute):
    geometry, dy, x_in, filters = _prepare(
        dy, x_in, filters, stride, padding, dilation, compute_dx, compute_dw, compute_db
    )
    grid = _Grid(geometry)
    n = grid.n_rows
    results = []
    dy_rows = None
    if compute_dx or compute_dw:
        dy_rows = _rows(grid.to_out_grid(dy, absolute))[:n]
    if compute_dx:
        dx_planes = _dx_planes(grid, dy_rows, _weights(filters, absolute))
        results.append(grid.from_planes(dx_planes))
        del dx_planes
    if compute_dw:
        x_planes = grid.to_planes(x_in, absolute)
        results.append(_dw(grid, dy_rows, x_planes))
        del x_planes
    if compute_db:
        if dy_rows is not None:
            results.append(dy_rows.sum(axis=0))
        else:
            dy64 = np.abs(dy, dtype=np.float64) if absolute else np.asarray(dy, dtype=np.float64)
            results.append(dy64.sum(axis=(0, 2, 3, 4)))
    return results[0] if len(results) == 1 else tuple(results)


def conv3d_fwd(
    x_in: np.ndarray,
    filters: np.ndarray,
    stride: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0,) * 6,
    dilation: Sequence[int] = (1, 1, 1),
) -> np.ndarray:
    """Forward conv3d in float64: ``y[b, co, o] = sum_{k, ci} W[k, ci, co] x[b, ci, i(o, k)]``."""
    x_in = _checked_array("x_in", x_in)
    filters = _checked_array("filters", filters)
    geometry = ConvGeometry.from_shapes(None, x_in.shape, filters.shape, stride, padding, dilation)
    _check_finite("x_in", x_in)
    _check_finite("filters", filters)
    grid = _Grid(geometry)
    n = grid.n_rows
    x_planes = grid.to_planes(x_in, absolute=False)
    w = _weights(filters, absolute=False)
    y_grid = np.zeros((*grid.plane_shape, geometry.batch, geometry.c_out))
    y_rows = _rows(y_grid)[:n]
    for tap, phase, offset in grid.taps():
        _gemm(y_rows, _rows(x_planes[phase])[offset:offset + n], w[tap], accumulate=True)
    return grid.from_out_grid(y_grid)


def conv3d_bwd_ref(
    dy: np.ndarray,
    x_in: np.ndarray,
    filters: np.ndarray,
    stride: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0,) * 6,
    dilation: Sequence[int] = (1, 1, 1),
    compute_dx: bool = True,
    compute_dw: bool = True,
    compute_db: bool = True,
) -> Grads:
    """The requested gradients in the order (dx, dw, db), float64; the bare array when one is requested.

    Inputs of dtype bf16, fp16, fp32 or fp64 are widened exactly. Bad input raises GeometryError.
    """
    return _backward(dy, x_in, filters, stride, padding, dilation, compute_dx, compute_dw, compute_db, False)


def conv3d_bwd_magnitudes(
    dy: np.ndarray,
    x_in: np.ndarray,
    filters: np.ndarray,
    stride: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0,) * 6,
    dilation: Sequence[int] = (1, 1, 1),
    compute_dx: bool = True,
    compute_dw: bool = True,
    compute_db: bool = True,
) -> Grads:
    """Like conv3d_bwd_ref on |dy|, |x|, |w|: each output element's sum of |a||b|, for error bounds."""
    return _backward(dy, x_in, filters, stride, padding, dilation, compute_dx, compute_dw, compute_db, True)
