"""Running earlier-generation kernels: ``nki.jit``, SPMD launch grids and ``nki.simulate_kernel``.

``kernel[gx, gy](*args)`` launches ``gx * gy`` instances; instance (i, j) sees ``nl.program_id(0) == i``
and ``nl.program_id(1) == j`` (docs: nki/test/test_nki_spmd_grid.py in the Neuron documentation
source; tensor_addition tutorial). Instances run one after the other, in row-major grid order. As
in the tutorials, each instance allocates its output with ``buffer=nl.shared_hbm``: the k-th
``shared_hbm`` allocation of every instance is the same tensor, so all instances write into it.
``nl.spmd_dim(..., nl.nc(2))`` only says which NeuronCore runs an instance: the grid is the product.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import dtype_name
from ..errors import NkiUsageError, violation
from ..kernel import _parameter_names
from ..torch_io import from_numpy_like, to_numpy
from .tile import LegacyTile


@dataclass
class LaunchState:
    """What one kernel launch shares between its instances."""

    grid: tuple[int, ...]
    program: tuple[int, ...] = ()
    shared: list[LegacyTile] = field(default_factory=list)
    shared_seen: int = 0


_STATE: list[LaunchState] = []


def current() -> LaunchState:
    if not _STATE:
        raise NkiUsageError("this nki.language call is only valid inside a running kernel (call the kernel, or "
                            "nki.simulate_kernel(kernel, *args))")
    return _STATE[-1]


def in_kernel() -> bool:
    return bool(_STATE)


@dataclass(frozen=True)
class NeuronCores:
    """``nl.nc(n)``: a launch-grid annotation that spreads instances over n NeuronCores."""

    count: int

    def __mul__(self, other: int) -> SpmdDim:
        return SpmdDim((self, other))

    __rmul__ = __mul__


@dataclass(frozen=True)
class SpmdDim:
    """``nl.spmd_dim(...)``: one grid dimension made of a core annotation and a size; its size is the product."""

    parts: tuple

    @property
    def size(self) -> int:
        n = 1
        for p in self.parts:
            n *= p.count if isinstance(p, NeuronCores) else int(p)
        return n


def _grid_size(dim: Any) -> int:
    if isinstance(dim, SpmdDim):
        return dim.size
    if isinstance(dim, NeuronCores):
        return dim.count
    if isinstance(dim, (int, np.integer)) and int(dim) >= 1:
        return int(dim)
    raise NkiUsageError(f"kernel[...]: launch grid dimension {dim!r} must be a positive int, nl.nc(n) or nl.spmd_dim")


class LegacyKernel:
    """What ``neuronxcc.nki.jit`` returns: call it (one instance) or index it with a launch grid."""

    def __init__(self, fn: Callable, grid: tuple[int, ...] = (), options: dict | None = None) -> None:
        self.fn = fn.fn if isinstance(fn, LegacyKernel) else fn
        self.grid = grid
        self.options = dict(options or {})
        functools.update_wrapper(self, self.fn)

    def __getitem__(self, grid: Any) -> LegacyKernel:
        dims = grid if isinstance(grid, tuple) else (grid,)
        return LegacyKernel(self.fn, tuple(_grid_size(d) for d in dims), self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if in_kernel():   # a kernel calling another: inline it
            return self.fn(*args, **kwargs)
        return launch(self.fn, self.grid, args, kwargs)


def jit(func: Callable | None = None, **options: Any) -> Any:
    """``@nki.jit`` / ``@nki.jit(mode=..., ...)``: wrap a kernel; calls run on the emulator (there is no device)."""
    if func is None:
        return lambda f: LegacyKernel(f, (), options)
    return LegacyKernel(func, (), options)


def simulate_kernel(kernel: Callable, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel(kernel, *args, **kwargs)``: run the kernel on CPU and return its outputs.

    Docs: nki/test/test_nki_simulate_kernel.py (the ``nki.simulate_kernel`` example). numpy (or
    torch) inputs; the outputs come back as numpy arrays (torch tensors if the inputs were torch).
    """
    grid = kernel.grid if isinstance(kernel, LegacyKernel) else ()
    fn = kernel.fn if isinstance(kernel, LegacyKernel) else kernel
    if not callable(fn):
        raise NkiUsageError(f"simulate_kernel: argument 'kernel': {kernel!r} is not a function")
    return launch(fn, grid, args, kwargs)


def launch(fn: Callable, grid: tuple[int, ...], args: tuple, kwargs: dict) -> Any:
    """Run every instance of ``fn`` over ``grid``; return the outputs in the inputs' array type."""
    torch_like = _first_torch(args, kwargs)
    names = _parameter_names(fn, len(args))
    state = LaunchState(grid or (1,))
    wrapped = [_wrap(n, a) for n, a in zip(names, args)]
    wkw = {k: _wrap(k, v) for k, v in kwargs.items()}
    result: Any = None
    _STATE.append(state)
    try:
        for program in itertools.product(*[range(n) for n in state.grid]):
            state.program = program
            state.shared_seen = 0
            result = fn(*wrapped, **wkw)
            _check_returned(result)
    finally:
        _STATE.pop()
    for original, tile in zip(args, wrapped):
        _write_back(original, tile)
    out = _outputs(result)
    return from_numpy_like(out, torch_like) if torch_like is not None else out


def _wrap(name: str, value: Any) -> Any:
    arr = to_numpy(value)
    if arr is None:
        return value
    try:
        dtype_name(arr.dtype)
    except NkiUsageError as exc:
        if arr.dtype == np.float64:   # numpy's default: the tutorials pass float64 test data
            raise NkiUsageError(f"simulate_kernel: argument '{name}': float64 is not an NKI dtype; cast the input "
                                "(e.g. nl.static_cast(x, nl.float32))") from None
        raise NkiUsageError(f"simulate_kernel: argument '{name}': {exc}") from None
    data = np.array(arr if arr.ndim else arr.reshape(1))
    return LegacyTile(data, "hbm", name)


def _write_back(original: Any, tile: Any) -> None:
    """Inputs the kernel wrote are the caller's arrays in the real simulator: copy the writes back."""
    if not isinstance(tile, LegacyTile) or not isinstance(original, np.ndarray) or not original.flags.writeable:
        return
    if original.shape == tile.shape:
        original[...] = tile.data


def _first_torch(args: tuple, kwargs: dict) -> Any:
    for v in (*args, *kwargs.values()):
        if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
            return v
    return None


def _returned(value: Any) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [(f"return[{i}]", v) for i, v in enumerate(value)]
    return [("return", value)]


def _check_returned(value: Any) -> None:
    for role, t in _returned(value):
        if not isinstance(t, LegacyTile):
            raise violation("kernel return", role, f"must be a tensor, got {type(t).__name__}")
        if t.on_chip:
            raise violation("kernel return", role, f"returned tensors must be in HBM (nl.shared_hbm), "
                            f"'{t.name}' is in {t.buffer}")


def _outputs(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, LegacyTile):
        return np.array(value.data)
    return tuple(np.array(t.data) for t in value)


def shared_allocation(shape: tuple[int, ...], dtype: np.dtype, name: str) -> LegacyTile:
    """The k-th ``shared_hbm`` allocation of this instance: the same tensor in every instance of the launch."""
    state = current()
    k = state.shared_seen
    state.shared_seen += 1
    if k < len(state.shared):
        t = state.shared[k]
        if t.shape != tuple(shape) or t.data.dtype != dtype:
            raise violation("ndarray", name or f"shared_hbm #{k}",
                            f"instance {state.program} allocates {tuple(shape)} {dtype}, instance 0 allocated "
                            f"{t.shape} {t.data.dtype} (SPMD instances share their shared_hbm tensors)")
        return t
    t = LegacyTile(_sentinel(shape, dtype), "shared_hbm", name)
    state.shared.append(t)
    return t


def _sentinel(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Fresh memory reads as NaN (floats) or 4 (integers), as everywhere in nkisim."""
    from .tile import is_float

    return np.full(shape, np.nan if is_float(dtype) else 4, dtype=dtype)
