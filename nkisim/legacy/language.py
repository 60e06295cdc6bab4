"""``neuronxcc.nki.language`` for nkisim: the earlier generation's ``nl`` (value-returning, index tiles).

Names and signatures follow the earlier API reference,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.language.html
("relevant for Inf2, Trn1, Trn2"), its examples in the Neuron documentation source
(nki/test/test_nki_nl_*.py, test_nki_mask.py, test_nki_spmd_grid.py) and the migration guide
(nki/migration/index.rst) that lists what the later generation removed.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as _dt
from ..errors import NkiUsageError, violation
from ..language import tile_size  # noqa: F401 - the same hardware constants in both generations
from . import launch as _launch
from .ops import LEGACY_OPS, copy  # noqa: F401 - nl.copy
from .tile import IndexedAccess, LegacyTile, carry_mask, cast, storage_dtype, value_array

# dtypes: the same names as the later generation
bool_ = _dt.bool_
int8, int16, int32 = _dt.int8, _dt.int16, _dt.int32
uint8, uint16, uint32 = _dt.uint8, _dt.uint16, _dt.uint32
float16, float32, bfloat16, tfloat32 = _dt.float16, _dt.float32, _dt.bfloat16, _dt.tfloat32
float8_e4m3, float8_e5m2 = _dt.float8_e4m3, _dt.float8_e5m2

class _FloatLimits:
    """``nl.fp32.min`` / ``.max``: float32's finite limits (used in nki/test/test_nki_isa_affine_select.py)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


fp32 = _FloatLimits()

# buffers (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``, ``nl.private_hbm``)
sbuf, psum, hbm, shared_hbm, private_hbm = "sbuf", "psum", "hbm", "shared_hbm", "private_hbm"
_BUFFERS = frozenset({sbuf, psum, hbm, shared_hbm, private_hbm})

# math functions / op tokens
globals().update(LEGACY_OPS)
add = LEGACY_OPS["add"]
subtract = LEGACY_OPS["subtract"]
multiply = LEGACY_OPS["multiply"]
divide = LEGACY_OPS["divide"]
maximum = LEGACY_OPS["maximum"]
minimum = LEGACY_OPS["minimum"]
exp = LEGACY_OPS["exp"]
square = LEGACY_OPS["square"]
max = LEGACY_OPS["max"]
min = LEGACY_OPS["min"]
sum = LEGACY_OPS["sum"]
mean = LEGACY_OPS["mean"]
prod = LEGACY_OPS["prod"]


# --- index tiles ----------------------------------------------------------------------------------
def arange(*args: int) -> np.ndarray:
    """``nl.arange([start,] stop)``: a 1-D index tile; ``[:, None]`` / ``[None, :]`` place it on an axis."""
    return np.arange(*[int(a) for a in args])


class _MGrid:
    """``nl.mgrid[0:P, 0:F, ...]``: dense index tiles, one per axis (numpy.mgrid), with ``.p`` / ``.x``."""

    def __getitem__(self, key: Any) -> MGridResult:
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if not isinstance(k, slice):
                raise NkiUsageError(f"nl.mgrid[...]: {k!r} must be a slice such as 0:128")
        return MGridResult(tuple(np.mgrid[keys]) if len(keys) > 1 else (np.arange(keys[0].start or 0, keys[0].stop,
                                                                                   keys[0].step or 1),))


class MGridResult(tuple):
    """The index tiles of ``nl.mgrid``: unpack them, or use ``.p`` (axis 0) and ``.x`` (axis 1)."""

    @property
    def p(self) -> np.ndarray:
        return self[0]

    @property
    def x(self) -> np.ndarray:
        return self[1]

    @property
    def y(self) -> np.ndarray:
        return self[2]

    @property
    def z(self) -> np.ndarray:
        return self[3]


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """``nl.ds(start, size)``: ``start:start+size``."""
    return slice(int(start), int(start) + int(size))


@dataclass(frozen=True)
class par_dim:
    """``nl.par_dim(n)``: marks the partition dimension in a shape; dims before it are block dimensions."""

    size: int

    def __index__(self) -> int:
        return int(self.size)


# --- allocation -----------------------------------------------------------------------------------
def _shape(shape: Any, where: str) -> tuple[tuple[int, ...], int | None]:
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    out, pdim = [], None
    for i, d in enumerate(dims):
        if isinstance(d, par_dim):
            pdim = i
            d = d.size
        if not isinstance(d, (int, np.integer)) or int(d) < 1:
            raise NkiUsageError(f"{where}: argument 'shape': {shape!r}: every dimension must be a positive int")
        out.append(int(d))
    return tuple(out), pdim


def _buffer(buffer: Any, where: str) -> str:
    if buffer is None:
        return sbuf
    name = getattr(buffer, "buffer", buffer)   # nki.compiler allocators carry their buffer
    if name not in _BUFFERS:
        raise NkiUsageError(f"{where}: argument 'buffer': {buffer!r} must be nl.sbuf, nl.psum, nl.hbm, "
                            "nl.shared_hbm, nl.private_hbm or an nki.compiler allocator")
    return name


def ndarray(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    """``nl.ndarray(shape, dtype, *, buffer=None, name='')``: a new tensor (uninitialised: NaN / 4)."""
    dims, pdim = _shape(shape, "ndarray")
    buf = _buffer(buffer, "ndarray")
    np_dt = storage_dtype(dtype)
    if buf in (sbuf, psum):
        p = dims[pdim if pdim is not None else 0]
        if p > 128:
            raise violation("ndarray", name or "tile", f"partition dimension {p} exceeds 128 (nl.tile_size.pmax)")
    if buf == shared_hbm and _launch.in_kernel():
        return _launch.shared_allocation(dims, np_dt, name)
    if buf == psum:
        # ``psum_tile += nisa.nc_matmul(...)`` on a fresh PSUM tile starts an accumulation group: the
        # first matmul overwrites. Legacy tiles carry no per-element matmul state, so fresh PSUM reads
        # as zero, which gives that first ``+=`` the overwrite's result.
        return LegacyTile(np.zeros(dims, np_dt), buf, name)
    return LegacyTile(_launch._sentinel(dims, np_dt), buf, name)


def zeros(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    return full(shape, 0, dtype, buffer=buffer, name=name)


def ones(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    return full(shape, 1, dtype, buffer=buffer, name=name)


def full(shape: Any, fill_value: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    t.data[...] = cast(np.asarray(fill_value, dtype=np.float32), t.data.dtype)
    return t


def empty_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or getattr(a, "buffer", None), name=name)


def zeros_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or getattr(a, "buffer", None), name=name)


def ones_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> LegacyTile:
    return ones(a.shape, dtype or a.dtype, buffer=buffer or getattr(a, "buffer", None), name=name)


def shared_constant(constant: Any, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``nl.shared_constant(constant, dtype=None)``: an HBM tensor holding a host (numpy) constant."""
    arr = np.asarray(constant)
    np_dt = storage_dtype(dtype) if dtype is not None else arr.dtype
    return LegacyTile(cast(arr, np.dtype(np_dt)), "shared_hbm", "shared_constant")


def shared_identity_matrix(n: int, dtype: Any = uint8, **kwargs: Any) -> LegacyTile:
    return shared_constant(np.identity(int(n), dtype=np.float32), dtype)


# --- data movement --------------------------------------------------------------------------------
def load(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``nl.load(src, *, mask=None, dtype=None)``: a new SBUF tile with ``src``'s values (src in HBM)."""
    if not isinstance(src, (LegacyTile, IndexedAccess)):
        raise violation("load", "src", f"must be a tensor, got {type(src).__name__}")
    if src.buffer not in (hbm, shared_hbm, private_hbm):
        raise violation("load", "src", f"must be in HBM, got a tile in {src.buffer}")
    arr = value_array(src, mask)
    out_dt = storage_dtype(dtype) if dtype is not None else arr.dtype
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    return carry_mask(LegacyTile(cast(np.array(arr), np.dtype(out_dt)), sbuf, src.name), mask)


def store(dst: Any, value: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """``nl.store(dst, value, *, mask=None)``: write the tile ``value`` into ``dst`` (in HBM)."""
    if not isinstance(dst, (LegacyTile, IndexedAccess)):
        raise violation("store", "dst", f"must be a tensor, got {type(dst).__name__}")
    if dst.buffer not in (hbm, shared_hbm, private_hbm):
        raise violation("store", "dst", f"must be in HBM, got a tile in {dst.buffer}")
    if isinstance(dst, IndexedAccess):
        dst.write(value, mask)
    else:
        dst.assign(value, mask)


def load_transpose2d(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``nl.load_transpose2d(src, *, mask=None, dtype=None)``: load a 2-D tensor transposed."""
    t = load(src, mask=mask, dtype=dtype)
    if t.ndim != 2:
        raise violation("load_transpose2d", "src", f"must be 2-D, got shape {t.shape}")
    return LegacyTile(np.ascontiguousarray(t.data.T), sbuf, t.name)


# --- math that is not element-wise ------------------------------------------------------------------
def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """``nl.matmul(x, y, *, transpose_x=False, mask=None)``: ``x @ y`` (``x.T @ y`` with transpose_x), fp32 in PSUM."""
    a = value_array(x, mask).astype(np.float32)
    b = value_array(y, mask).astype(np.float32)
    if transpose_x:
        a = a.T
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise violation("matmul", "y", f"shapes {a.shape} @ {b.shape} do not contract")
    return LegacyTile(np.matmul(a, b).astype(np.float32), psum, getattr(x, "name", ""))


def transpose(x: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """``nl.transpose(x, *, dtype=None, mask=None)``: the 2-D tile transposed (partition <-> free)."""
    a = value_array(x, mask)
    if a.ndim != 2:
        raise violation("transpose", "x", f"must be a 2-D tile, got shape {a.shape}")
    out_dt = storage_dtype(dtype) if dtype is not None else a.dtype
    return LegacyTile(cast(np.ascontiguousarray(a.T), np.dtype(out_dt)), sbuf, getattr(x, "name", ""))


def where(condition: Any, x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    from .tile import align, compute_dtype

    c = value_array(condition, mask).astype(bool)
    a, b = value_array(x, mask), value_array(y, mask)
    out_dt = storage_dtype(dtype) if dtype is not None else compute_dtype(a, b)
    c2, a2 = align(c, a)
    c3, b2 = align(c2, b)
    return LegacyTile(cast(np.where(c3, a2, b2), out_dt), sbuf, "where")


@dataclass(frozen=True)
class LoopReduce:
    """``nl.loop_reduce(x, op, loop_indices, *, dtype=None, mask=None)``: ``dst[...] = loop_reduce(...)``
    combines ``x`` into what ``dst`` holds with ``op`` (the loop's running reduction)."""

    value: np.ndarray
    op: Any
    dtype: Any

    def combine(self, current: np.ndarray) -> np.ndarray:
        from .ops import elementwise

        fn = elementwise(self.op, "loop_reduce")
        return np.asarray(fn(current.astype(np.float32), self.value.astype(np.float32)))


def loop_reduce(x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None,
                **kwargs: Any) -> LoopReduce:
    return LoopReduce(value_array(x, mask), op, dtype)


def static_cast(ndarray: Any, dtype: Any) -> np.ndarray:
    """``nl.static_cast(ndarray, dtype)``: a host numpy array re-cast to an NKI dtype (outside kernels)."""
    return cast(np.asarray(ndarray, dtype=np.float32) if np.asarray(ndarray).dtype == np.float64
                else np.asarray(ndarray), storage_dtype(dtype))


def broadcast_to(src: Any, shape: Any) -> LegacyTile:
    t = src if isinstance(src, LegacyTile) else LegacyTile(value_array(src), sbuf, getattr(src, "name", ""))
    return t.broadcast_to(shape)


# --- SPMD and loops ---------------------------------------------------------------------------------
def program_id(axis: int = 0) -> int:
    state = _launch.current()
    if not 0 <= int(axis) < len(state.grid):
        raise NkiUsageError(f"program_id: argument 'axis': {axis!r}; the launch grid has {len(state.grid)} "
                            f"dimension(s) {state.grid}")
    return state.program[int(axis)]


def num_programs(axes: Any = None) -> Any:
    state = _launch.current()
    if axes is None:
        n = 1
        for g in state.grid:
            n *= g
        return n
    if isinstance(axes, (tuple, list)):
        return tuple(state.grid[int(a)] for a in axes)
    return state.grid[int(axes)]


def program_ndim() -> int:
    return len(_launch.current().grid)


def nc(n: int) -> _launch.NeuronCores:
    return _launch.NeuronCores(int(n))


def spmd_dim(*args: Any, **kwargs: Any) -> _launch.SpmdDim:
    return _launch.SpmdDim(tuple(args))


def _range(*args: Any, **kwargs: Any) -> Iterator[int]:
    """Loop iterators: the emulator runs every iteration in order (directives and hints have no effect)."""
    return iter(range(*[int(a) for a in args]))


affine_range = _range
sequential_range = _range
static_range = _range


def device_print(prefix: str, x: Any, *args: Any, **kwargs: Any) -> None:
    print(prefix, np.array(value_array(x)))


__all__ = [n for n in dir() if not n.startswith("_")]
