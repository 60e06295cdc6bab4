"""Trace records: cheap, frozen, and enough to split a run by program."""
from __future__ import annotations

import dataclasses

import pytest

from conv3d_bwd.nkisim.trace import Access, Instr, Trace


def _access(storage: int = 1, write: bool = False) -> Access:
    return Access(role="dst" if write else "src", buffer="sbuf", storage=storage, dtype="bfloat16",
                  shape=(128, 64), partition_start=0, partitions=128, free_elems=64,
                  nbytes=128 * 64 * 2, span=(0, 64), contiguous_bytes=128, write=write)


def test_records_are_frozen_and_slotted():
    a = _access()
    instr = Instr("tensor_copy", "vector", (a, _access(2, True)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        instr.op = "memset"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nbytes = 0  # type: ignore[misc]
    assert not hasattr(a, "__dict__") and not hasattr(instr, "__dict__")


def test_attr_lookup_and_default():
    instr = Instr("nc_matmul", "tensor", (), attrs=(("moving_free", 512), ("fp32", False)))
    assert instr.attr("moving_free") == 512
    assert instr.attr("fp32") is False
    assert instr.attr("contraction", 7) == 7
    assert instr.program_id == 0


def test_trace_records_in_order_and_splits_programs():
    trace = Trace()
    ops = [("memset", 0), ("tensor_copy", 1), ("dma_copy", 0), ("memset", 1)]
    for op, pid in ops:
        trace.record(Instr(op, "vector", (), program_id=pid))
    assert len(trace) == 4
    assert [i.op for i in trace] == [op for op, _ in ops]
    assert trace.program_ids() == (0, 1)
    assert [i.op for i in trace.for_program(1)] == ["tensor_copy", "memset"]
