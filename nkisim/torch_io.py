"""Torch tensors as kernel inputs and outputs (torch is optional; nothing here imports it eagerly).

The ``nki.simulate`` page says the kernel's inputs may be numpy arrays or torch tensors and that the
outputs come back in the same type (Neuron docs source nki/api/nki/__init__.py, ``simulate``:
"returns results in the same format (NumPy arrays or torch Tensors respectively)"). A CPU
torch tensor is read as a numpy array of the same dtype (bfloat16 through its bits); results are
turned back into CPU torch tensors of the corresponding dtype.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import NkiUsageError

# torch dtype name -> numpy storage type; bf16 and fp8 go through ml_dtypes.
_TORCH_TO_NUMPY: dict[str, np.dtype] = {
    "torch.float32": np.dtype(np.float32),
    "torch.float16": np.dtype(np.float16),
    "torch.bfloat16": np.dtype(ml_dtypes.bfloat16),
    "torch.float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "torch.float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "torch.int8": np.dtype(np.int8),
    "torch.int16": np.dtype(np.int16),
    "torch.int32": np.dtype(np.int32),
    "torch.uint8": np.dtype(np.uint8),
    "torch.uint16": np.dtype(np.uint16),
    "torch.uint32": np.dtype(np.uint32),
    "torch.bool": np.dtype(np.bool_),
    "torch.float64": np.dtype(np.float64),
    "torch.int64": np.dtype(np.int64),
}
_BITS = {1: "uint8", 2: "int16"}


def is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "dtype")


def to_numpy(value: Any) -> np.ndarray | None:
    """``value`` as a numpy array if it is one or a torch tensor (a copy for torch), else None."""
    if isinstance(value, np.ndarray):
        return value
    if not is_torch_tensor(value):
        return None
    import torch

    t = value.detach()
    if t.device.type != "cpu":
        raise NkiUsageError(f"torch input on device '{t.device}': nkisim runs on CPU; pass a CPU tensor")
    name = str(t.dtype)
    if name not in _TORCH_TO_NUMPY:
        raise NkiUsageError(f"torch input of dtype {name} has no NKI dtype")
    np_dt = _TORCH_TO_NUMPY[name]
    t = t.contiguous()
    if np_dt.kind == "V" or name.startswith("torch.float8"):   # ml_dtypes: copy the bits
        bits = getattr(torch, _BITS[np_dt.itemsize])
        return t.view(bits).numpy().view(np_dt).copy()
    return t.numpy().copy()


def from_numpy_like(value: Any, like: Any) -> Any:
    """Outputs (None, an array or a tuple of arrays) as CPU torch tensors; ``like`` is a torch input."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(from_numpy_like(v, like) for v in value)
    import torch

    arr = np.ascontiguousarray(value)
    for name, dt in _TORCH_TO_NUMPY.items():
        if dt == arr.dtype:
            torch_dt = getattr(torch, name.split(".", 1)[1])
            if dt.kind == "V" or name.startswith("torch.float8"):
                bits = getattr(torch, _BITS[dt.itemsize])
                return torch.from_numpy(arr.view(getattr(np, _BITS[dt.itemsize])).copy()).view(bits).view(torch_dt)
            return torch.from_numpy(arr.copy())
    raise NkiUsageError(f"output dtype {arr.dtype} has no torch dtype")
