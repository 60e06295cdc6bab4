"""Virtual registers (nki.isa.register_alloc/move/load/store) and the values they carry into
dynamic loops (nl.dynamic_range, nl.fori_loop, nl.while_loop) and dynamic ``.ap`` offsets.

Neuron docs, nki.isa.register_alloc / register_move / register_load / register_store and
nki.isa.VirtualRegister; nki.language.dynamic_range / fori_loop / while_loop. The emulator runs
eagerly, so a register simply holds a Python int. In trace-only mode no memory is materialised:
a register loaded from memory has no known value, and using it as a loop bound is an error.
"""
from __future__ import annotations

import numpy as np

from .context import current_core
from .errors import NkiUsageError, violation
from .isa_core import access, mark_written_by_other, tensor, write
from .tensor import NkiTensor
from .trace import Instr

_INT32 = (-2**31, 2**31 - 1)


class VirtualRegister:
    """A 32-bit engine register; ``value`` is None while unknown (trace-only loads)."""

    __slots__ = ("value",)

    def __init__(self, state: int | None = None, frozen: bool = False) -> None:
        self.value = state

    def __bool__(self) -> bool:
        # ``while reg:`` is the parser frontend's documented form (VirtualRegister docs).
        return known_value(self, "while reg") != 0

    def __int__(self) -> int:
        raise TypeError("a VirtualRegister's value is not known while the kernel is built: use it as a "
                        "bound of nl.dynamic_range / nl.fori_loop or as an .ap(scalar_offset=) offset")

    __index__ = __int__

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value})"


def known_value(reg: VirtualRegister, use: str) -> int:
    if reg.value is None:
        raise NkiUsageError(f"{use}: the register's value comes from memory, which trace-only mode does not "
                            "hold; run in full mode")
    return reg.value


def _int32(ins: str, role: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not _INT32[0] <= int(value) <= _INT32[1]:
        raise violation(ins, role, f"{value!r} must be a compile-time int32 integer")
    return int(value)


def _register(ins: str, role: str, reg: object) -> VirtualRegister:
    if not isinstance(reg, VirtualRegister):
        raise violation(ins, role, f"{reg!r} must be a VirtualRegister (from nisa.register_alloc)")
    return reg


def _scalar_tensor(ins: str, role: str, t: object) -> NkiTensor:
    tensor(ins, role, t)
    if t.size != 1:
        raise violation(ins, role, f"shape {t.shape} must hold exactly one element (shape [1] or [1, 1])")
    if t.storage.buffer == "psum":
        raise violation(ins, role, "must be in HBM or SBUF, got psum")
    if t.storage.itemsize > 4:
        raise violation(ins, role, f"dtype {t.dtype}: a register holds 32 bits")
    return t


def register_alloc(x=None) -> VirtualRegister:
    """A new register, uninitialised (None) or holding the int ``x``."""
    current_core()
    return VirtualRegister(None if x is None else _int32("register_alloc", "x", x))


def register_move(dst, src) -> None:
    """dst = src (a compile-time int or another register)."""
    current_core()
    dst = _register("register_move", "dst", dst)
    dst.value = src.value if isinstance(src, VirtualRegister) else _int32("register_move", "src", src)


def read_scalar(t: NkiTensor) -> int | None:
    """The one element of ``t`` as an int (None in trace-only mode)."""
    if current_core().trace_only:
        return None
    return int(np.asarray(t.array()).reshape(-1)[0].astype(np.float64))


def register_load(dst, src) -> None:
    """dst = the single value of src (HBM or SBUF)."""
    core = current_core()
    ins = "register_load"
    dst = _register(ins, "dst", dst)
    src = _scalar_tensor(ins, "src", src)
    dst.value = read_scalar(src)
    # A sequencer load: traced on the 'sync' pseudo-engine (no engine time; it orders after src's writer).
    core.record(Instr(ins, "sync", (access(src, "src", False),), (), core.program_id))


def register_store(dst, src) -> None:
    """dst (one element in HBM or SBUF) = the register's value."""
    core = current_core()
    ins = "register_store"
    dst = _scalar_tensor(ins, "dst", dst)
    src = _register(ins, "src", src)
    if not core.trace_only:
        write(dst, np.array([known_value(src, ins)], np.int64))
    mark_written_by_other(dst)
    core.record(Instr(ins, "sync", (access(dst, "dst", True),), (), core.program_id))


def bound(value: object, fn: str, role: str) -> int:
    """A loop bound: an int or a register's value."""
    if isinstance(value, VirtualRegister):
        return known_value(value, fn)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise NkiUsageError(f"{fn}: argument '{role}': {value!r} must be an int or a VirtualRegister")
    return int(value)


def step_of(step: object, fn: str) -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise NkiUsageError(f"{fn}: argument 'step': {step!r} must be a compile-time positive integer")
    return int(step)


def dynamic_offset(value: object) -> int:
    """The value of a ``scalar_offset``: a register or a one-element tensor (0 in trace-only mode,
    where the access shape, not its position, is what the trace needs)."""
    if isinstance(value, VirtualRegister):
        return 0 if value.value is None and current_core().trace_only else known_value(value, "ap")
    t = _scalar_tensor("ap", "scalar_offset", value)
    v = read_scalar(t)
    return 0 if v is None else v
