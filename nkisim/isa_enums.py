"""The enums of nki.isa (the nki.isa API page). Raw integers are rejected, as in NKI >= 0.3."""
from __future__ import annotations

from enum import Enum


class engine(Enum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class dge_mode(Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):
    error = 0
    skip = 1


class reduce_cmd(Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class matmul_perf_mode(Enum):
    none = 0
    double_row = 1


class nc_version(Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


# Deprecated aliases still used widely by nki-library code.
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown
