"""Allocating tensors: nl.ndarray and the wrapping of kernel arguments."""
from __future__ import annotations

import functools
import operator

import numpy as np

from .buffers import MemoryRegion
from .context import CoreState, RunState
from .dtypes import NUMPY_TYPES, dtype_name
from .errors import NkiUsageError, violation
from .memory import ON_CHIP, PSUM, SBUF, Storage
from .tensor import NkiTensor

_BUFFER_KIND = {m: m.value for m in MemoryRegion}   # Enum.value is a slow property


@functools.lru_cache(maxsize=1024)
def row_major(shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    pattern = []
    stride = 1
    for n in reversed(shape):
        pattern.append((stride, n))
        stride *= n
    return tuple(reversed(pattern))



def check_shape(instruction: str, name: str, shape: object) -> tuple[int, ...]:
    if type(shape) is tuple and shape:   # the common case: a tuple of positive ints, returned as is
        for n in shape:
            if type(n) is not int or n < 1:
                break
        else:
            return shape
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(operator.index(n) for n in shape)  # type: ignore[union-attr]
    except TypeError:
        raise NkiUsageError(f"{instruction}: argument 'shape': {shape!r} is not a tuple of ints") from None
    if not dims or any(n < 1 for n in dims):
        raise NkiUsageError(f"{instruction}: argument 'shape': {dims} must have dims >= 1")
    return dims


def allocate(core: CoreState, shape: object, dtype: object, buffer: object, name: str = "",
             address: object = None, instruction: str = "ndarray") -> NkiTensor:
    """A fresh tensor of ``shape`` in ``buffer`` on the current program, sentinel-filled."""
    if not isinstance(buffer, MemoryRegion):
        raise violation(instruction, name or "buffer", f"buffer must be an nl buffer (nl.sbuf, nl.psum, "
                        f"nl.hbm, nl.private_hbm, nl.shared_hbm), got {buffer!r}")
    dims = check_shape(instruction, name, shape)
    dt = dtype_name(dtype)
    kind = _BUFFER_KIND[buffer]
    if kind in ON_CHIP and dims[0] > 128:
        raise violation(instruction, name or "shape", f"partition dim {dims[0]} exceeds maximum 128 "
                        "(nl.tile_size.pmax)")
    if address is not None and kind not in ON_CHIP:
        raise violation(instruction, name or "address", f"address= places on-chip tensors only, not {kind}")
    run = core.run
    if kind == "shared_hbm" and run.lnc > 1:
        shared = _shared_allocation(core, dims, dt, name, instruction)
        if shared is not None:
            return NkiTensor(shared, 0, row_major(dims), name)
    np_dtype = NUMPY_TYPES[dt]
    st = Storage(next(run.ids), kind, dt, np_dtype, dims, name, None)
    st.lazy = not run.trace_only   # sentinel-filled on first access (see Storage.materialise)
    if kind == SBUF:
        core.sbuf.allocate(st, address)  # type: ignore[arg-type]
    elif kind == PSUM:
        live = core.liveness
        if live is None:
            core.psum.allocate(st, address)  # type: ignore[arg-type]
        elif live.allocated(st):
            core.psum.allocate(st, address, virtual=live.recording)  # type: ignore[arg-type]
    elif kind == "shared_hbm" and run.lnc > 1:
        run.shared_hbm.append(st)
    return NkiTensor(st, 0, row_major(dims), name, dims)


def _shared_allocation(core: CoreState, dims, dt, name, instruction) -> Storage | None:
    """Under LNC2 the k-th shared_hbm allocation of every program is one tensor."""
    k = core.shared_allocs
    core.shared_allocs += 1
    shared = core.run.shared_hbm
    if k < len(shared):
        st = shared[k]
        if st.shape != dims or st.dtype != dt:
            raise violation(instruction, name or "shared_hbm", f"program {core.program_id} allocates shared_hbm "
                            f"tensor #{k} as {dims} {dt}, another program as {st.shape} {st.dtype} (LNC "
                            "programs must run the same control flow)")
        return st
    return None


def wrap_argument(run: RunState, name: str, value: np.ndarray | None, shape: tuple[int, ...], dtype: str,
                  buffer: str) -> tuple[NkiTensor, np.ndarray | None]:
    """An HBM tensor over a kernel argument; returns (tensor, flat array to write back or None)."""
    np_dtype = NUMPY_TYPES[dtype]
    write_back = None
    data = None
    if value is not None and not run.trace_only:
        if value.flags.c_contiguous and value.flags.writeable and value.dtype == np_dtype:
            data = value.reshape(-1)   # a view: the kernel updates the caller's array in place
        else:
            data = np.ascontiguousarray(value, dtype=np_dtype).reshape(-1).copy()
            write_back = data
    st = Storage(next(run.ids), buffer, dtype, np_dtype, shape, name, data)
    return NkiTensor(st, 0, row_major(shape), name), write_back
