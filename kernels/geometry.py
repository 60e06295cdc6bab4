"""Pure-Python geometry of conv3d backward: validation, per-axis index maps, phases and bands.

Shared by the planner and the kernel, so that the loops the planner costs are the loops the kernel
runs. Per axis: input size n, kernel k, stride s, dilation r, padding (lo, hi); the forward map is
``i = o*s + k*r - lo`` (an input index outside [0, n) reads zero).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import Conv3dBwdInputError

DTYPES = ("bf16", "fp16", "fp32")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_NKI_DTYPE_NAMES = {
    "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32", "fp32": "fp32",
}


def dtype_name(dtype: object) -> str:
    """The project's dtype name ('bf16' | 'fp16' | 'fp32') of an NKI/numpy dtype, or '' if unknown."""
    name = getattr(dtype, "name", None) or str(dtype)
    return _NKI_DTYPE_NAMES.get(name.lower(), "")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Axis:
    """One spatial axis of the convolution."""

    n: int
    k: int
    s: int
    r: int
    lo: int
    hi: int

    @property
    def o(self) -> int:
        """Output size of the forward pass."""
        return (self.n + self.lo + self.hi - self.r * (self.k - 1) - 1) // self.s + 1

    # --- dx: phases of the input positions -------------------------------------------------
    @lru_cache(maxsize=4096)  # noqa: B019  (Axis is a small frozen value; the cache is bounded)
    def phase_taps(self, ph: int) -> tuple[int, ...]:
        """Taps that reach input positions of phase ``ph`` ((i + lo) mod s == ph)."""
        return tuple(k for k in range(self.k) if (ph - k * self.r) % self.s == 0)

    def tap_shift(self, k: int, ph: int) -> int:
        """t with o = j - t for input i = s*j + ph - lo reached by tap k (requires k in phase_taps)."""
        return (k * self.r - ph) // self.s

    def phase_j_range(self, ph: int, i0: int, i1: int) -> tuple[int, int]:
        """[j0, j1): the phase-``ph`` positions i = s*j + ph - lo that lie in [i0, i1)."""
        j0 = ceil_div(i0 + self.lo - ph, self.s)
        j1 = (i1 - 1 + self.lo - ph) // self.s + 1
        return j0, max(j0, j1)

    def i_of_j(self, j: int, ph: int) -> int:
        return self.s * j + ph - self.lo

    @lru_cache(maxsize=65536)  # noqa: B019
    def dx_dy_range(self, i0: int, i1: int) -> tuple[int, int]:
        """[q0, q1): the virtual dy rows (may fall outside [0, o)) the dx band [i0, i1) reads.

        Covers, for every phase with positions in the band, every tap's shifted window.
        """
        lo_v, hi_v = None, None
        for ph in range(self.s):
            taps = self.phase_taps(ph)
            j0, j1 = self.phase_j_range(ph, i0, i1)
            if not taps or j1 <= j0:
                continue
            shifts = [self.tap_shift(k, ph) for k in taps]
            a, b = j0 - max(shifts), j1 - min(shifts)
            lo_v = a if lo_v is None else min(lo_v, a)
            hi_v = b if hi_v is None else max(hi_v, b)
        if lo_v is None:
            return 0, 0
        return lo_v, hi_v

    def reached(self) -> bool:
        """True when every input position is reached by some (o, k): dx needs no zero fill."""
        hit = [False] * self.n
        for o in range(self.o):
            for k in range(self.k):
                i = o * self.s + k * self.r - self.lo
                if 0 <= i < self.n:
                    hit[i] = True
        return all(hit)

    @property
    def unit(self) -> bool:
        """A 1-tap axis with no padding and unit stride: the identity map."""
        return self.k == 1 and self.s == 1 and self.lo == 0 and self.hi == 0


@dataclass(frozen=True)
class ConvGeom:
    """A validated conv3d backward problem (shapes in the layouts of docs/api.md)."""

    batch: int
    c_in: int
    c_out: int
    axes: tuple[Axis, Axis, Axis]
    dtype: str

    @property
    def in_size(self) -> tuple[int, int, int]:
        return tuple(a.n for a in self.axes)

    @property
    def out_size(self) -> tuple[int, int, int]:
        return tuple(a.o for a in self.axes)

    @property
    def kernel(self) -> tuple[int, int, int]:
        return tuple(a.k for a in self.axes)

    @property
    def taps(self) -> int:
        return self.axes[0].k * self.axes[1].k * self.axes[2].k

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def pointwise(self) -> bool:
        """1x1x1 filter with unit stride and no padding: every gradient is a plain GEMM."""
        return all(a.unit for a in self.axes)

    def tap_index(self, kd: int, kh: int, kw: int) -> int:
        return (kd * self.axes[1].k + kh) * self.axes[2].k + kw

    def tap_coords(self, t: int) -> tuple[int, int, int]:
        kh_kw = self.axes[1].k * self.axes[2].k
        return t // kh_kw, (t // self.axes[2].k) % self.axes[1].k, t % self.axes[2].k


_LAYOUTS = {"dy": "[B, C_out, D_out, H_out, W_out]", "x_in": "[B, C_in, D, H, W]",
            "filters": "[K_d, K_h, K_w, C_in, C_out]"}


def check_tensors(**tensors: object) -> None:
    """Each of ``tensors`` (dy, x_in, filters) is an array (a shape and a dtype), not a list or a scalar."""
    for name, t in tensors.items():
        if not (hasattr(t, "shape") and hasattr(t, "dtype")):
            raise Conv3dBwdInputError(
                f"{name}: got a {type(t).__name__}; must be an array (numpy array or NKI tensor) "
                f"{_LAYOUTS.get(name, '')} (convert with numpy.asarray(..., dtype=...))")


def check_flag(name: str, value: object) -> bool:
    """A gradient flag: True or False (also numpy's bool); a string like "False" is refused, not read as True."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise Conv3dBwdInputError(f"{name}={value!r}: must be a bool (True or False)")


def _sequence(name: str, value: object, length: int) -> list:
    """The entries of a sequence argument: a tuple or list, or a 1-D numpy array of integers (as in the
    Python API; under nki.jit an array argument becomes a device tensor, which has no values to plan with)."""
    if isinstance(value, (tuple, list)):
        return list(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        kind = getattr(value.dtype, "kind", None)   # numpy arrays only; NKI tensors have no .kind dtype
        if kind is None or not hasattr(value, "tolist"):
            raise Conv3dBwdInputError(
                f"{name}: got a tensor of shape {tuple(value.shape)}; must be a tuple of {length} Python integers "
                "(a kernel argument given as an array becomes a device tensor under nki.jit: pass tuple(...))")
        if kind not in "iu" or len(value.shape) != 1:
            raise Conv3dBwdInputError(
                f"{name}=array(shape={tuple(value.shape)}, dtype={value.dtype}): must be {length} integers "
                "(a 1-D integer array or a tuple)")
        return [int(v) for v in value.tolist()]
    raise Conv3dBwdInputError(f"{name}={value!r}: must be a tuple of {length} integers")


def _triple(name: str, value: object, length: int, minimum: int) -> tuple[int, ...]:
    entries = _sequence(name, value, length)
    if len(entries) != length:
        raise Conv3dBwdInputError(f"{name}={value!r}: must be a tuple of {length} integers, got {len(entries)}")
    out = []
    for v in entries:
        if isinstance(v, bool) or not isinstance(v, int):
            try:
                import numbers
                if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                    v = int(v)
                else:
                    raise TypeError
            except TypeError:
                raise Conv3dBwdInputError(f"{name}={value!r}: every entry must be an integer") from None
        if v < minimum:
            raise Conv3dBwdInputError(f"{name}={value!r}: every entry must be >= {minimum}")
        out.append(int(v))
    return tuple(out)


def _shape(name: str, shape: object, layout: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)  # type: ignore[union-attr]
    except TypeError:
        raise Conv3dBwdInputError(f"{name} shape={shape!r}: must be a 5-D shape {layout}") from None
    if len(dims) != 5:
        raise Conv3dBwdInputError(f"{name} shape={dims}: must be 5-D {layout}, got rank {len(dims)}")
    if any(d < 1 for d in dims):
        raise Conv3dBwdInputError(f"{name} shape={dims}: every dimension must be >= 1 ({layout})")
    return dims


def validate(dy_shape: object, x_shape: object, w_shape: object, stride: object = (1, 1, 1),
             padding: object = (0,) * 6, dilation: object = (1, 1, 1), dtype: object = "bf16",
             dtypes: tuple[object, object, object] | None = None, compute_dx: bool = True,
             compute_dw: bool = True, compute_db: bool = True) -> ConvGeom:
    """Check every input rule of docs/api.md and return the geometry; raises Conv3dBwdInputError."""
    dy = _shape("dy", dy_shape, "[B, C_out, D_out, H_out, W_out]")
    x = _shape("x_in", x_shape, "[B, C_in, D, H, W]")
    w = _shape("filters", w_shape, "[K_d, K_h, K_w, C_in, C_out]")
    if dtypes is not None:
        names = [dtype_name(d) for d in dtypes]
        for arg, raw, nm in zip(("dy", "x_in", "filters"), dtypes, names):
            if nm not in DTYPES:
                raise Conv3dBwdInputError(f"{arg} dtype={raw!r}: must be one of bfloat16, float16, float32")
        if len(set(names)) != 1:
            raise Conv3dBwdInputError(
                f"dtypes dy={dtypes[0]!r}, x_in={dtypes[1]!r}, filters={dtypes[2]!r}: must all be equal")
        dt = names[0]
    else:
        dt = dtype_name(dtype) or str(dtype)
        if dt not in DTYPES:
            raise Conv3dBwdInputError(f"dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
    compute_dx, compute_dw, compute_db = (check_flag(f"compute_{n}", v) for n, v in
                                          (("dx", compute_dx), ("dw", compute_dw), ("db", compute_db)))
    st = _triple("stride", stride, 3, 1)
    pad = _triple("padding", padding, 6, 0)
    dil = _triple("dilation", dilation, 3, 1)
    if not (compute_dx or compute_dw or compute_db):
        raise Conv3dBwdInputError(
            "compute_dx=False, compute_dw=False, compute_db=False: at least one gradient must be requested")
    if x[0] != dy[0]:
        raise Conv3dBwdInputError(f"dy batch={dy[0]}: must equal x_in batch={x[0]}")
    if w[3] != x[1]:
        raise Conv3dBwdInputError(f"filters C_in={w[3]}: must equal x_in C_in={x[1]} (filters [K_d,K_h,K_w,C_in,C_out])")
    if w[4] != dy[1]:
        raise Conv3dBwdInputError(f"dy C_out={dy[1]}: must equal filters C_out={w[4]}")
    axes = tuple(Axis(x[2 + a], w[a], st[a], dil[a], pad[2 * a], pad[2 * a + 1]) for a in range(3))
    names = "DHW"
    for a, ax in enumerate(axes):
        if ax.n + ax.lo + ax.hi - ax.r * (ax.k - 1) - 1 < 0:
            raise Conv3dBwdInputError(
                f"axis {names[a]}: input {ax.n} + padding ({ax.lo}, {ax.hi}) is smaller than the dilated "
                f"kernel {ax.r * (ax.k - 1) + 1}: the forward output size must be >= 1")
    exp = tuple(ax.o for ax in axes)
    if tuple(dy[2:]) != exp:
        raise Conv3dBwdInputError(
            f"dy spatial shape={tuple(dy[2:])}: must equal the forward output size {exp} "
            f"= (n + pad_lo + pad_hi - dil*(k-1) - 1) // stride + 1 per axis")
    return ConvGeom(batch=x[0], c_in=x[1], c_out=dy[1], axes=axes, dtype=dt)  # type: ignore[arg-type]
