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
from .isa_gpsimd import local_gather, nc_n_gather, nonzero_with_count, tensor_partition_reduce
from .isa_register import VirtualRegister, register_alloc, register_load, register_move, register_store
from .isa_search import max8, nc_find_index8, nc_match_replace8
from .isa_tensor import nc_matmul, nc_transpose
from .isa_vector import (
    activation_reduce,
    bn_aggr,
    bn_stats,
    nc_stream_shuffle,
    range_select,
    reciprocal,
    scalar_tensor_tensor,
    tensor_copy_predicated,
    tensor_scalar_reduce,
    tensor_tensor_scan,
)
from .targets import target_from_env as _target_from_env


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the target (the run's, else NEURON_PLATFORM_TARGET_OVERRIDE's)."""
    from .context import maybe_core

    core = maybe_core()
    target = core.target if core is not None else _target_from_env()
    return nc_version[target.nc_version]


__all__ = [
    "NkiValidationError",
    "VirtualRegister",
    "activation",
    "activation_reduce",
    "affine_select",
    "bn_aggr",
    "bn_stats",
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
    "local_gather",
    "matmul_perf_mode",
    "max8",
    "memset",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_matmul",
    "nc_n_gather",
    "nc_stream_shuffle",
    "nc_transpose",
    "nc_version",
    "nonzero_with_count",
    "oob_mode",
    "range_select",
    "reciprocal",
    "reduce_cmd",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "scalar_engine",
    "scalar_tensor_tensor",
    "sendrecv",
    "tensor_copy",
    "tensor_copy_predicated",
    "tensor_engine",
    "tensor_partition_reduce",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_scalar_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "unknown_engine",
    "vector_engine",
]
