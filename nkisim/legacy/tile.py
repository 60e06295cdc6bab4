"""Tiles of the earlier NKI generation (``neuronxcc.nki``, NKI 0.1.0): numpy arrays that compute.

In that generation instructions return new tiles, tiles support arithmetic, and tensors are indexed
with slices, integers or index tiles (``nl.arange`` / ``nl.mgrid``, numpy advanced indexing) under
an optional ``mask`` (the NKI migration guide, nki/migration/index.rst, "Changes in NKI 0.2.0 from
NKI 0.1.0" and "Deprecation of masking", describes these forms). A ``LegacyTile`` is a numpy array
(possibly a view of another tile's array) tagged with its buffer; an ``IndexedAccess`` is a tile
indexed by index tiles, read or written only when used, so a ``mask`` can keep it in bounds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import NUMPY_TYPES, dtype_name
from ..errors import NkiUsageError, violation

ON_CHIP = frozenset({"sbuf", "psum"})


def storage_dtype(dtype: object) -> np.dtype:
    """The numpy storage type of an NKI dtype name, numpy dtype or torch-like dtype name."""
    return NUMPY_TYPES[dtype_name(dtype)]


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round ``values`` to ``dtype`` as a write does: RNE; float to int rounds half-even, saturates, NaN -> 0."""
    values = np.asarray(values)
    if values.dtype == dtype:
        return values
    if dtype.kind in "iub" and is_float(values.dtype):
        info = np.iinfo(dtype)
        f = values.astype(np.float64)
        return np.clip(np.nan_to_num(np.rint(f), nan=0.0), info.min, info.max).astype(dtype)
    if dtype.kind in "iu" and values.dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(values, info.min, info.max).astype(dtype)
    return values.astype(dtype)


def is_float(dt: np.dtype) -> bool:
    """float kinds, counting ml_dtypes' bfloat16 / fp8 (numpy kind 'V')."""
    return dt.kind == "f" or dt.kind == "V" and dt.itemsize <= 2


def compute_dtype(*arrays: np.ndarray) -> np.dtype:
    """The result dtype of tile arithmetic on arrays (python scalars take no part): numpy promotion."""
    dts = [a.dtype for a in arrays if isinstance(a, np.ndarray) and a.ndim]   # numbers (0-d) do not promote
    if not dts:
        return np.dtype(np.float32)
    try:
        out = np.result_type(*dts)
    except TypeError:
        out = np.dtype(np.float32)
    if out.kind == "f" and out.itemsize > 4 or out.kind in "iu" and out.itemsize > 4:
        out = np.dtype(np.float32) if out.kind == "f" else np.dtype(np.int32)
    if out == np.dtype(np.bool_):
        out = np.dtype(np.uint8)
    return out


class LegacyTile:
    """A tensor of the earlier generation: a numpy array in a buffer (``sbuf``, ``psum``, ``hbm``...)."""

    __array_priority__ = 1000   # numpy scalars on the left defer to our operators

    def __init__(self, data: np.ndarray, buffer: str, name: str = "") -> None:
        self.data = data
        self.buffer = buffer
        self.name = name
        # The mask of the instruction that computed this tile: ``t[idx] = instr(..., mask=m)`` writes
        # only where m holds (migration guide, "Deprecation of masking": the mask keeps the
        # assignment's indices in bounds), so the assignment takes it over.
        self.mask: np.ndarray | None = None

    # --- attributes -------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> str:
        return dtype_name(self.data.dtype)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP

    def __repr__(self) -> str:
        return f"LegacyTile({self.name or '?'}, shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> bool:
        raise NkiUsageError(f"tile '{self.name}': a tile has no truth value inside a kernel (use a mask or nl.where)")

    # --- indexing -----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> LegacyTile | IndexedAccess:
        key = normalize_key(key, self.ndim, self.name)
        if is_advanced(key):
            return IndexedAccess(self, key)
        try:
            view = self.data[key]
        except IndexError as exc:
            raise IndexError(f"tile '{self.name}' of shape {self.shape}: index {key!r}: {exc}") from None
        if view.ndim == 0:
            view = self.data[_keep_last_dim(key)]
        return LegacyTile(view, self.buffer, self.name)

    def __setitem__(self, key: Any, value: Any) -> None:
        target = self[key]
        mask = value.mask if isinstance(value, LegacyTile) else None
        if isinstance(target, IndexedAccess):
            target.write(value, mask)
        else:
            target.assign(value, mask)

    def assign(self, value: Any, mask: Any = None) -> None:
        """Write ``value`` (a tile, an access, a number, or an ``nl.loop_reduce`` result) into this whole tile."""
        from .language import LoopReduce

        if isinstance(value, LoopReduce):
            value = value.combine(self.data)
        if value is self:
            return
        arr = value_array(value, mask=mask)
        fitted = fit(arr, self.shape, "value", self.name)
        if mask is None:
            self.data[...] = cast(fitted, self.data.dtype)
            return
        m = fit(_mask_array(mask), self.shape, "mask", self.name)
        self.data[m] = cast(fitted[m], self.data.dtype)

    # --- reshaping ----------------------------------------------------------------------------
    def reshape(self, shape: Any, *more: int) -> LegacyTile:
        dims = tuple(shape) if not more else (shape, *more)
        try:
            view = self.data.reshape(dims)
        except ValueError:
            raise NkiUsageError(f"reshape: tile '{self.name}' of shape {self.shape} cannot be viewed as {dims}") from None
        return LegacyTile(view, self.buffer, self.name)

    def broadcast_to(self, shape: Any) -> LegacyTile:
        shape = tuple(int(n) for n in shape)
        try:
            arr = np.broadcast_to(self.data, shape)
        except ValueError:
            raise violation("broadcast_to", self.name or "tile",
                            f"shape {self.shape} does not broadcast to {shape}") from None
        return LegacyTile(np.array(arr), "sbuf", self.name)

    def astype(self, dtype: object) -> LegacyTile:
        return LegacyTile(cast(self.data, storage_dtype(dtype)), "sbuf", self.name)

    # --- arithmetic (a new SBUF tile; engines compute in fp32) ---------------------------------
    def _bin(self, other: Any, fn: Any, reverse: bool = False) -> LegacyTile:
        return binary(fn, other, self) if reverse else binary(fn, self, other)

    def __add__(self, o): return self._bin(o, np.add)                  # noqa: E704
    def __radd__(self, o): return self._bin(o, np.add, True)           # noqa: E704
    def __sub__(self, o): return self._bin(o, np.subtract)             # noqa: E704
    def __rsub__(self, o): return self._bin(o, np.subtract, True)      # noqa: E704
    def __mul__(self, o): return self._bin(o, np.multiply)             # noqa: E704
    def __rmul__(self, o): return self._bin(o, np.multiply, True)      # noqa: E704
    def __truediv__(self, o): return self._bin(o, np.divide)           # noqa: E704
    def __rtruediv__(self, o): return self._bin(o, np.divide, True)    # noqa: E704
    def __pow__(self, o): return self._bin(o, np.power)                # noqa: E704
    def __rpow__(self, o): return self._bin(o, np.power, True)         # noqa: E704
    def __lt__(self, o): return self._bin(o, np.less)                  # noqa: E704
    def __le__(self, o): return self._bin(o, np.less_equal)            # noqa: E704
    def __gt__(self, o): return self._bin(o, np.greater)               # noqa: E704
    def __ge__(self, o): return self._bin(o, np.greater_equal)         # noqa: E704
    def __and__(self, o): return self._bin(o, np.bitwise_and)          # noqa: E704
    def __or__(self, o): return self._bin(o, np.bitwise_or)            # noqa: E704
    def __xor__(self, o): return self._bin(o, np.bitwise_xor)          # noqa: E704
    def __neg__(self): return unary(np.negative, self)                 # noqa: E704
    def __abs__(self): return unary(np.abs, self)                      # noqa: E704

    def __iadd__(self, o):
        # ``psum_tile += nisa.nc_matmul(...)`` accumulates; on SBUF it is a tensor_tensor add: the same sum.
        self.assign(binary(np.add, self, o))
        return self

    def __isub__(self, o):
        self.assign(binary(np.subtract, self, o))
        return self

    def __imul__(self, o):
        self.assign(binary(np.multiply, self, o))
        return self

    def __itruediv__(self, o):
        self.assign(binary(np.divide, self, o))
        return self


@dataclass(eq=False)
class IndexedAccess:
    """``tile[index tiles...]``: read (``read``) or written (``write``) when used, optionally under a mask."""

    tile: LegacyTile
    key: tuple

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(*[np.shape(k) for k in self.key]))

    @property
    def dtype(self) -> str:
        return self.tile.dtype

    @property
    def buffer(self) -> str:
        return self.tile.buffer

    @property
    def name(self) -> str:
        return self.tile.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def read(self, mask: Any = None) -> np.ndarray:
        """The indexed values; outside ``mask`` the result is unspecified (NaN / 0 here) and never read."""
        idx = np.broadcast_arrays(*[np.asarray(k) for k in self.key])
        if mask is None:
            _check_bounds(idx, self.tile, None)
            return self.tile.data[tuple(idx)]
        m = fit(_mask_array(mask), idx[0].shape, "mask", self.tile.name)
        _check_bounds(idx, self.tile, m)
        fill = np.nan if is_float(self.tile.data.dtype) else 0
        out = np.full(idx[0].shape, fill, dtype=self.tile.data.dtype)
        out[m] = self.tile.data[tuple(i[m] for i in idx)]
        return out

    def write(self, value: Any, mask: Any = None) -> None:
        from .language import LoopReduce

        idx = np.broadcast_arrays(*[np.asarray(k) for k in self.key])
        shape = idx[0].shape
        if isinstance(value, LoopReduce):
            value = value.combine(self.read(mask))
        arr = fit(value_array(value, mask=mask), shape, "value", self.tile.name)
        arr = cast(arr, self.tile.data.dtype)
        if mask is None:
            _check_bounds(idx, self.tile, None)
            self.tile.data[tuple(idx)] = arr
            return
        m = fit(_mask_array(mask), shape, "mask", self.tile.name)
        _check_bounds(idx, self.tile, m)
        self.tile.data[tuple(i[m] for i in idx)] = arr[m]

    def __getitem__(self, key: Any) -> Any:
        raise NkiUsageError(f"tile '{self.name}': indexing an index-tile access again (nested indexing) is not "
                            "emulated; index the tile once")

    def _as_tile(self) -> LegacyTile:
        return LegacyTile(self.read(), "sbuf", self.tile.name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._as_tile(), attr)

    def __add__(self, o): return self._as_tile() + o                   # noqa: E704
    def __radd__(self, o): return o + self._as_tile()                  # noqa: E704
    def __sub__(self, o): return self._as_tile() - o                   # noqa: E704
    def __rsub__(self, o): return o - self._as_tile()                  # noqa: E704
    def __mul__(self, o): return self._as_tile() * o                   # noqa: E704
    def __rmul__(self, o): return o * self._as_tile()                  # noqa: E704
    def __truediv__(self, o): return self._as_tile() / o               # noqa: E704
    def __rtruediv__(self, o): return o / self._as_tile()              # noqa: E704
    def __neg__(self): return -self._as_tile()                         # noqa: E704


def _check_bounds(idx: list[np.ndarray], tile: LegacyTile, mask: np.ndarray | None) -> None:
    for axis, (i, n) in enumerate(zip(idx, tile.shape)):
        sel = i if mask is None else i[mask]
        if sel.size and (sel.min() < 0 or sel.max() >= n):
            raise IndexError(f"tile '{tile.name}' of shape {tile.shape}: index tile on axis {axis} spans "
                             f"[{int(sel.min())}, {int(sel.max())}], outside [0, {n}) (use mask= to keep it in bounds)")


def _mask_array(mask: Any) -> np.ndarray:
    if isinstance(mask, LegacyTile):
        return mask.data.astype(bool)
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise NkiUsageError(f"mask: {mask!r} must be a comparison of index tiles (a boolean expression)")
    return m


def carry_mask(tile: LegacyTile, mask: Any, source_shape: tuple[int, ...] | None = None,
               axes: tuple[int, ...] = (), keepdims: bool = False) -> LegacyTile:
    """Record on ``tile`` the mask it was computed under (reduced over ``axes`` for a reduction)."""
    if mask is None:
        return tile
    m = _mask_array(mask)
    if axes and source_shape is not None:
        m = np.broadcast_to(m, source_shape).all(axis=axes, keepdims=keepdims)
    try:
        np.broadcast_shapes(m.shape, tile.shape)
    except ValueError:
        return tile   # a mask of another shape (a transpose's): not carried
    tile.mask = m
    return tile


def is_advanced(key: tuple) -> bool:
    return any(isinstance(k, np.ndarray) and k.ndim > 0 for k in key)


def normalize_key(key: Any, ndim: int, name: str) -> tuple:
    """A full-length tuple of ints, slices or integer index arrays (``...`` expanded)."""
    items = key if isinstance(key, tuple) else (key,)
    items = tuple(_item(k, name) for k in items)
    n_ell = sum(1 for k in items if k is Ellipsis)
    if n_ell > 1:
        raise IndexError(f"tile '{name}': at most one '...' in an index")
    if n_ell:
        pos = items.index(Ellipsis)
        fill = ndim - (len(items) - 1)
        items = items[:pos] + (slice(None),) * fill + items[pos + 1:]
    if len(items) > ndim:
        raise IndexError(f"tile '{name}': {len(items)} indices for a {ndim}-D tile")
    items = items + (slice(None),) * (ndim - len(items))
    if is_advanced(items) and any(isinstance(k, slice) for k in items):
        _reject_mixed(name)
    return items


def _item(k: Any, name: str) -> Any:
    if isinstance(k, (slice, type(Ellipsis))):
        return k
    if isinstance(k, (bool, np.bool_)):
        raise IndexError(f"tile '{name}': a boolean is not an index")
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, LegacyTile):
        raise NkiUsageError(f"tile '{name}': indexing by a data tile (dynamic indexing) is not emulated")
    arr = np.asarray(k)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"tile '{name}': index {k!r} is neither an int, a slice nor an index tile")
    return arr if arr.ndim else int(arr)


def _reject_mixed(name: str) -> None:
    raise NkiUsageError(f"tile '{name}': mixing index tiles (nl.arange/nl.mgrid) with slices in one index is "
                        "not emulated; use index tiles for every axis")


def _keep_last_dim(key: tuple) -> tuple:
    """All-int keys select one element: keep it as a 1-element tile."""
    last = key[-1]
    return key[:-1] + (slice(last, last + 1),)


def value_array(value: Any, mask: Any = None) -> np.ndarray:
    """The numbers of an operand: a tile's array, an access's values, a number or an index tile."""
    if isinstance(value, LegacyTile):
        return value.data
    if isinstance(value, IndexedAccess):
        return value.read(mask)
    if isinstance(value, (int, float, np.number, bool, np.bool_)):
        return np.asarray(value, dtype=np.float32)
    if isinstance(value, np.ndarray):
        return value
    raise NkiUsageError(f"operand {value!r} ({type(value).__name__}) is not a tile, an index tile or a number")


def fit(arr: np.ndarray, shape: tuple[int, ...], operand: str, name: str) -> np.ndarray:
    """``arr`` shaped as ``shape``: aligned on the partition axis (missing axes are trailing), then broadcast.

    A (P,) tile meets a (P, F) tile as (P, 1): NKI tiles align on the partition (first) axis, not
    the last axis as numpy would. Equal element counts of different shapes are reshaped.
    """
    if arr.shape == shape:
        return arr
    if arr.ndim < len(shape):
        padded = arr.reshape(arr.shape + (1,) * (len(shape) - arr.ndim))
        try:
            return np.broadcast_to(padded, shape)
        except ValueError:
            pass
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        pass
    if arr.size == int(np.prod(shape)):
        return arr.reshape(shape)
    squeezed = arr.reshape([n for n in arr.shape if n != 1] or [1])
    target = [n for n in shape if n != 1] or [1]
    if list(squeezed.shape) == target:
        return squeezed.reshape(shape)
    raise violation("assign", operand, f"shape {arr.shape} does not fit tile '{name}' of shape {shape}")


def align(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two operands with their ranks matched on the partition axis (trailing axes padded with 1)."""
    if a.ndim and b.ndim and a.ndim != b.ndim:
        if a.ndim < b.ndim:
            a = a.reshape(a.shape + (1,) * (b.ndim - a.ndim))
        else:
            b = b.reshape(b.shape + (1,) * (a.ndim - b.ndim))
    return a, b


def _f32(a: np.ndarray) -> np.ndarray:
    """Engines compute in fp32: floats (and bools) are widened, integers stay integers."""
    if a.dtype.kind in "iu" or a.dtype == np.float32:
        return a
    return a.astype(np.float32)


def binary(fn: Any, x: Any, y: Any, dtype: object = None, mask: Any = None) -> LegacyTile:
    """Element-wise ``fn(x, y)`` as a new SBUF tile (fp32 arithmetic, result cast to ``dtype``)."""
    a, b = value_array(x, mask), value_array(y, mask)
    out_dt = storage_dtype(dtype) if dtype is not None else compute_dtype(a, b)
    a2, b2 = align(_f32(a), _f32(b))
    if a2.dtype.kind in "iu" and b2.dtype.kind == "f" or a2.dtype.kind == "f" and b2.dtype.kind in "iu":
        a2, b2 = a2.astype(np.float32), b2.astype(np.float32)
    try:
        with np.errstate(all="ignore"):
            res = fn(a2, b2)
    except ValueError:
        raise violation(getattr(fn, "__name__", "op"), "operands",
                        f"shapes {a.shape} and {b.shape} do not broadcast") from None
    return carry_mask(LegacyTile(cast(np.asarray(res), out_dt), "sbuf", _name(x) or _name(y)), mask)


def unary(fn: Any, x: Any, dtype: object = None, mask: Any = None) -> LegacyTile:
    a = value_array(x, mask)
    out_dt = storage_dtype(dtype) if dtype is not None else compute_dtype(a)
    with np.errstate(all="ignore"):
        res = fn(a.astype(np.float32))
    return carry_mask(LegacyTile(cast(np.asarray(res), out_dt), "sbuf", _name(x)), mask)


def _name(x: Any) -> str:
    return getattr(x, "name", "") if isinstance(x, (LegacyTile, IndexedAccess)) else ""
