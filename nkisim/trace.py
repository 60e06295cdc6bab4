"""Instruction trace records produced by the emulator and read by the cost model.

Records are plain frozen dataclasses with ``__slots__`` and no validation: the emulator
builds one per instruction on its hot path, so construction must stay cheap.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

ON_CHIP_BUFFERS = frozenset({"sbuf", "psum"})
HBM_BUFFERS = frozenset({"hbm", "private_hbm", "shared_hbm"})
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


@dataclass(frozen=True, slots=True)
class Access:
    """One operand access of one instruction.

    On-chip (sbuf/psum): ``partition_start``/``partitions`` give the partition range and
    ``span`` the [lo, hi) element offsets within one partition's row. HBM: partitions is 1,
    ``free_elems`` the total elements and ``span`` offsets in the flat storage.
    """

    role: str            # operand name as in the isa signature: 'dst', 'src', 'moving', ...
    buffer: str          # 'sbuf' | 'psum' | 'hbm' | 'private_hbm' | 'shared_hbm'
    storage: int         # id of the underlying allocation (unique within a run)
    dtype: str           # nki dtype name, e.g. 'bfloat16', 'float32'
    shape: tuple[int, ...]
    partition_start: int  # on-chip: first partition touched; HBM: 0
    partitions: int      # on-chip: number of partitions touched; HBM: 1
    free_elems: int      # on-chip: elements per partition; HBM: total elements
    nbytes: int          # total bytes touched
    span: tuple[int, int]  # [lo, hi) element offsets covering the access
    contiguous_bytes: int  # bytes in the innermost contiguous run (DMA efficiency)
    write: bool


@dataclass(frozen=True, slots=True)
class Instr:
    """One executed instruction: its op, engine and operand accesses.

    ``attrs`` holds op-specific facts as (name, value) pairs; for ``nc_matmul``:
    ('stationary_free', M), ('moving_free', N), ('contraction', K), ('fp32', bool),
    ('is_transpose', bool).
    """

    op: str              # 'nc_matmul', 'dma_copy', 'tensor_copy', ...
    engine: str          # 'tensor' | 'vector' | 'scalar' | 'gpsimd' | 'dma'
    accesses: tuple[Access, ...]
    attrs: tuple[tuple[str, object], ...] = ()
    program_id: int = 0

    def attr(self, name: str, default: object = None) -> object:
        """The value of attribute ``name``, or ``default``."""
        for key, value in self.attrs:
            if key == name:
                return value
        return default


@dataclass(slots=True)
class Trace:
    """The instructions of one run, in program order (tagged with ``program_id`` under LNC2)."""

    instrs: list[Instr] = field(default_factory=list)

    def record(self, instr: Instr) -> None:
        self.instrs.append(instr)

    def __len__(self) -> int:
        return len(self.instrs)

    def __iter__(self) -> Iterator[Instr]:
        return iter(self.instrs)

    def program_ids(self) -> tuple[int, ...]:
        """The distinct program ids present, sorted."""
        return tuple(sorted({i.program_id for i in self.instrs}))

    def for_program(self, program_id: int) -> list[Instr]:
        """The instructions of one program, in order."""
        return [i for i in self.instrs if i.program_id == program_id]
