"""NKI dtype names (strings, as in the NKI 0.6 stub) and their numpy storage types."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import NkiUsageError

bool_ = "bool"
int8 = "int8"
int16 = "int16"
int32 = "int32"
uint8 = "uint8"
uint16 = "uint16"
uint32 = "uint32"
float16 = "float16"
float32 = "float32"
bfloat16 = "bfloat16"
tfloat32 = "tfloat32"
float8_e4m3 = "float8_e4m3"
float8_e4m3fn = "float8_e4m3fn"
float8_e5m2 = "float8_e5m2"
float8_e8m0fnu = "float8_e8m0fnu"
# Quad-packed types of the MX matmul (Neuron docs, nki.api.shared "Packed"; trainium3_arch): one
# element holds four fp8 (4 bytes) or four fp4 (2 bytes) values. nkisim stores them as opaque
# unsigned integers: they move bit-exactly (DMA, equal-dtype copies, memset 0) and no engine
# arithmetic reads them.
float8_e5m2_x4 = "float8_e5m2_x4"
float8_e4m3fn_x4 = "float8_e4m3fn_x4"
float4_e2m1fn_x4 = "float4_e2m1fn_x4"

# tfloat32 has no numpy type: stored as float32 (nki.api.shared, dtypes).
NUMPY_TYPES: dict[str, np.dtype] = {
    bool_: np.dtype(np.uint8),  # NKI stores bool as uint8
    int8: np.dtype(np.int8),
    int16: np.dtype(np.int16),
    int32: np.dtype(np.int32),
    uint8: np.dtype(np.uint8),
    uint16: np.dtype(np.uint16),
    uint32: np.dtype(np.uint32),
    float16: np.dtype(np.float16),
    float32: np.dtype(np.float32),
    bfloat16: np.dtype(ml_dtypes.bfloat16),
    tfloat32: np.dtype(np.float32),
    float8_e4m3: np.dtype(ml_dtypes.float8_e4m3),
    float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    float8_e8m0fnu: np.dtype(ml_dtypes.float8_e8m0fnu),
    float8_e5m2_x4: np.dtype(np.uint32),
    float8_e4m3fn_x4: np.dtype(np.uint32),
    float4_e2m1fn_x4: np.dtype(np.uint16),
}
FLOAT_TYPES = frozenset({float16, float32, bfloat16, tfloat32, float8_e4m3, float8_e4m3fn, float8_e5m2,
                         float8_e8m0fnu})
PACKED_TYPES = frozenset({float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4})
INT_TYPES = frozenset({bool_, int8, int16, int32, uint8, uint16, uint32})
FP8_TYPES = frozenset({float8_e4m3, float8_e4m3fn, float8_e5m2})
ITEMSIZE: dict[str, int] = {name: dt.itemsize for name, dt in NUMPY_TYPES.items()}

_FROM_NUMPY: dict[np.dtype, str] = {
    np.dtype(np.bool_): bool_,
    np.dtype(np.int8): int8,
    np.dtype(np.int16): int16,
    np.dtype(np.int32): int32,
    np.dtype(np.uint8): uint8,
    np.dtype(np.uint16): uint16,
    np.dtype(np.uint32): uint32,
    np.dtype(np.float16): float16,
    np.dtype(np.float32): float32,
    np.dtype(ml_dtypes.bfloat16): bfloat16,
    np.dtype(ml_dtypes.float8_e4m3): float8_e4m3,
    np.dtype(ml_dtypes.float8_e4m3fn): float8_e4m3fn,
    np.dtype(ml_dtypes.float8_e5m2): float8_e5m2,
    np.dtype(ml_dtypes.float8_e8m0fnu): float8_e8m0fnu,
}
_ALIASES = {"bool_": bool_, "bf16": bfloat16, "fp16": float16, "fp32": float32}


def dtype_name(dtype: object) -> str:
    """Normalise an NKI dtype name, numpy dtype or numpy scalar type to the NKI name."""
    if type(dtype) is str and dtype in NUMPY_TYPES:   # the common case: already an NKI name
        return dtype
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in NUMPY_TYPES:
            return name
    else:
        try:
            name = _FROM_NUMPY.get(np.dtype(dtype))  # type: ignore[arg-type]
        except TypeError:
            name = None
        if name is not None:
            return name
    raise NkiUsageError(f"dtype: {dtype!r} is not an NKI dtype (expected one of {sorted(NUMPY_TYPES)})")


def is_float(name: str) -> bool:
    return name in FLOAT_TYPES


def int_limits(name: str) -> tuple[int, int]:
    info = np.iinfo(NUMPY_TYPES[name])
    if name == bool_:
        return 0, 1
    return int(info.min), int(info.max)
