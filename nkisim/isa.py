"""nki.isa for nkisim: every instruction takes ``dst`` first and returns nothing."""
from __future__ import annotations

from . import isa_constants as constants
from .errors import NkiValidationError
from .isa_compute import (
    activation,
    affine_select,
    iota,
    memset,
    tensor_copy,
    tensor_reduce,
    tensor_scalar,
    tensor_tensor,
)
from .isa_dma import core_barrier, dma_compute, dma_copy, dma_transpose, sendrecv
from .isa_enums import (
    dge_mode,
    dma_engine,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .isa_tensor import nc_matmul, nc_transpose
from .targets import target_from_env as _target_from_env


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the target (the run's, else NEURON_PLATFORM_TARGET_OVERRIDE's)."""
    from .context import maybe_core

    core = maybe_core()
    target = core.target if core is not None else _target_from_env()
    return nc_version[target.nc_version]


__all__ = [
    "NkiValidationError",
    "activation",
    "affine_select",
    "constants",
    "core_barrier",
    "dge_mode",
    "dma_compute",
    "dma_copy",
    "dma_engine",
    "dma_transpose",
    "engine",
    "get_nc_version",
    "gpsimd_engine",
    "iota",
    "matmul_perf_mode",
    "memset",
    "nc_matmul",
    "nc_transpose",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
    "scalar_engine",
    "sendrecv",
    "tensor_copy",
    "tensor_engine",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_tensor",
    "unknown_engine",
    "vector_engine",
]
