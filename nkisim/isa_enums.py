"""The enums of nki.isa (Neuron docs, nki.isa "NKI ISA Config Enums").

Raw integers are rejected, except for ``dge_mode``: AWS's nki-library passes ``dge_mode=3``
(``none``), so an int that is a member's value is taken as that member (``enum_member``).
"""
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
    none = "none"
    double_row = "double_row"


class nc_version(Enum):
    """NeuronCore generations, ordered (AWS's nki-library compares them: ``version <= gen3``)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: object) -> bool:
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value <= other.value

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value > other.value

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value >= other.value


class dma_engine(Enum):
    """The DMA transfer engine of ``sendrecv`` (Neuron docs, nki.isa.dma_engine)."""

    dma = 1
    gpsimd_dma = 2


# Deprecated aliases still used widely by nki-library code.
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown
