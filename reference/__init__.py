"""The float64 oracle for conv3d backward (numpy and scipy only)."""

from conv3d_bwd.reference.geometry import AxisMap, ConvGeometry, GeometryError
from conv3d_bwd.reference.oracle import (
    SUPPORTED_DTYPES,
    NonFiniteInputError,
    conv3d_bwd_magnitudes,
    conv3d_bwd_ref,
    conv3d_fwd,
)

__all__ = [
    "SUPPORTED_DTYPES",
    "AxisMap",
    "ConvGeometry",
    "GeometryError",
    "NonFiniteInputError",
    "conv3d_bwd_magnitudes",
    "conv3d_bwd_ref",
    "conv3d_fwd",
]
