"""Shared machinery of the nki.isa instructions: operand checks, trace records, reads and writes."""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from .context import CoreState, current_core
from .dtypes import INT_TYPES, int_limits
from .errors import NkiStrictWarning, NkiValidationError, violation
from .isa_enums import engine
from .memory import ON_CHIP, PSUM, PSUM_BY_OTHER, PSUM_FRESH, SBUF
from .tensor import NkiTensor, OutOfBoundsAccess
from .tensor_indirect import INDIRECT_INSTRUCTIONS
from .trace import Access

F32 = np.float32
ENGINE_NAMES = {engine.tensor: "tensor", engine.vector: "vector", engine.scalar: "scalar",
                engine.gpsimd: "gpsimd", engine.dma: "dma", engine.sync: "sync"}


# --- operand checks ---------------------------------------------------------------------------
def tensor(instr: str, role: str, t: object) -> NkiTensor:
    """``t`` must be a live NkiTensor whose memory was not handed to a newer allocation."""
    if not isinstance(t, NkiTensor):
        if isinstance(t, OutOfBoundsAccess):
            if t.dynamic_offset is None:
                raise violation(instr, role, f"the access is out of bounds ({t.message})")
            raise violation(instr, role, f"the dynamic offset {t.dynamic_offset} puts the access out of bounds "
                            f"({t.message}); only a DMA with oob_mode=oob_mode.skip skips such an access")
        raise violation(instr, role, f"expected an NkiTensor, got {type(t).__name__}")
    if 0 in t.shape:
        raise violation(instr, role, f"empty access (shape {t.shape})")
    if type(t) is not NkiTensor and t.is_indirect() and instr not in INDIRECT_INSTRUCTIONS:
        raise violation(instr, role, "a vector_offset (indirect) view is a DMA operand: dma_copy, dma_compute or "
                        "dma_transpose (nki.isa.dma_copy, 'Indirect addressing')")
    st = t.storage if t.storage.base is None else t.storage.base
    if st.overflow is not None:
        raise psum_overflow(violation(instr, role, f"tensor '{t.name}': {st.overflow}"))
    if st.buffer == PSUM:
        core = current_core()
        if core.liveness is not None and core.liveness.used(st):
            core.psum.release(st.id)   # its last use in program order: the compiler reuses its banks
    if role in WRITE_ROLES:
        if st.aliases:   # this allocation now owns the shared bytes; its aliases hold stale data
            for ref in st.aliases:
                other = ref()
                if other is not None:
                    other.clobbered_by = st.name or f"storage#{st.id}"
            st.clobbered_by = None
    elif st.clobbered_by is not None:
        raise violation(instr, role, f"tensor '{t.name}' is read after its memory was overwritten through "
                        f"'{st.clobbered_by}' (explicit address overlap)")
    return t


def psum_overflow(exc: NkiValidationError) -> NkiValidationError:
    """Mark a PSUM capacity error of Python lifetimes: ``kernel.execute`` retries it under liveness."""
    exc.psum_overflow = True
    return exc


# Operands an instruction writes (the alias tracking of explicitly placed memory).
WRITE_ROLES = frozenset({"dst", "dst_idx", "reduce_res"})


def buffer_in(instr: str, role: str, t: NkiTensor, allowed: frozenset[str], what: str) -> None:
    if t.storage.buffer not in allowed:
        raise violation(instr, role, f"must be in {what}, got {t.storage.buffer}")


def on_chip(instr: str, role: str, t: NkiTensor) -> None:
    buffer_in(instr, role, t, ON_CHIP, "SBUF or PSUM")


def start_partition(instr: str, role: str, t: NkiTensor, core: CoreState | None = None) -> None:
    """Compute engines: start 0 for > 64 partitions, 0/64 for 33-64, 0/32/64/96 for <= 32.

    ``core`` given: the rule is one nkisim extends beyond the documented engines (TensorE), so
    NKISIM_STRICT=0 downgrades it to a warning.
    """
    pstart, parts = t.layout()[:2]
    if pstart == 0:
        return
    if parts > 64 or (parts > 32 and pstart != 64) or pstart % 32:
        allowed = "0" if parts > 64 else ("0 or 64" if parts > 32 else "0, 32, 64 or 96")
        rule = (f"start partition {pstart} with {parts} partitions: a compute engine access of {parts} "
                f"partitions must start at {allowed}")
        if core is None:
            raise violation(instr, role, rule)
        stricter(core, instr, role, rule)


def stricter(core: CoreState, instr: str, role: str, rule: str) -> None:
    """A rule nkisim applies more strictly than the real simulator: an error, or with
    NKISIM_STRICT=0 a NkiStrictWarning (the instruction then proceeds)."""
    if core.run.strict:
        raise violation(instr, role, rule)
    warnings.warn(NkiStrictWarning(f"{instr}: operand '{role}': {rule} (NKISIM_STRICT=0: a warning)"),
                  stacklevel=4)


def engine_free_size(instr: str, role: str, t: NkiTensor) -> None:
    """Vector/Scalar/GpSimd access at most 64K elements per partition in SBUF, 4K in PSUM."""
    free = t.layout()[2]
    limit = 4096 if t.storage.buffer == PSUM else 65536
    if free > limit:
        raise violation(instr, role, f"{free} elements per partition exceed the engine limit of {limit} "
                        f"in {t.storage.buffer.upper()}")


def same_partitions_and_free(instr: str, role_a: str, a: NkiTensor, role_b: str, b: NkiTensor) -> None:
    la, lb = a.layout(), b.layout()
    if la[1] != lb[1] or la[2] != lb[2]:
        raise violation(instr, role_b, f"shape {b.shape} ({lb[1]} partitions x {lb[2]} elements) must have "
                        f"the same partitions and elements per partition as '{role_a}' {a.shape} "
                        f"({la[1]} x {la[2]})")


def enum_member(instr: str, role: str, value: object, kind: type, ints: bool = False):
    """``value`` as a member of the enum ``kind``; with ``ints``, an int that is a member's value
    is that member (the real compiler takes ``dge_mode=3``), any other int is an error."""
    if isinstance(value, kind):
        return value
    if ints and isinstance(value, int) and not isinstance(value, bool):
        try:
            return kind(value)
        except ValueError:
            values = ", ".join(f"{m.value} ({m.name})" for m in kind)
            raise violation(instr, role, f"{value} is not a value of nki.isa.{kind.__name__} (one of "
                            f"{values})") from None
    raise violation(instr, role, f"{value!r} is not an nki.isa.{kind.__name__} member (raw values are rejected)")


def pick_engine(instr: str, value: object, allowed: tuple[engine, ...], default: engine) -> engine:
    if not isinstance(value, engine):
        raise violation(instr, "engine", f"{value!r} is not an nki.isa.engine member (raw values are "
                        "rejected)")
    if value is engine.unknown:
        return default
    if value not in allowed:
        names = ", ".join(f"engine.{e.name}" for e in allowed)
        raise violation(instr, "engine", f"engine.{value.name} cannot run {instr} (allowed: {names})")
    return value


def no_psum_on_gpsimd(instr: str, eng: engine, operands: tuple[tuple[str, NkiTensor], ...]) -> None:
    if eng is engine.gpsimd:
        for role, t in operands:
            if t.storage.buffer == PSUM:
                raise violation(instr, role, "GpSimd cannot access PSUM")


def is_scalar(value: object) -> bool:
    """A compile-time number (Python or numpy scalar)."""
    return isinstance(value, (numbers.Number, np.generic))


# --- trace records ----------------------------------------------------------------------------
def access(t: NkiTensor, role: str, write: bool) -> Access:
    """The trace record of one operand; equal accesses share one (immutable) record per run."""
    st = t.storage
    key = (st.id, t.offset, t.pattern, role, write, type(t) is not NkiTensor)
    memo = current_core().run.accesses
    rec = memo.get(key)
    if rec is None:
        pstart, parts, free, lo, hi, run = t.layout()
        isz = st.itemsize
        base = st.base
        if base is not None:   # a re-typed view: the span in the allocation's own elements
            bsz = base.itemsize
            lo, hi = lo * isz // bsz, -(-hi * isz // bsz)
        rec = memo[key] = Access(role, st.buffer, st.trace_id, st.dtype, t.shape, pstart, parts, free,
                                 parts * free * isz, (lo, hi), run * isz, write)
    return rec


# --- reads and writes (full mode) -------------------------------------------------------------
def read2d(t: NkiTensor) -> np.ndarray:
    """The operand as (partitions, elements per partition) in fp32 (engines compute in fp32)."""
    parts, free = t.layout()[1:3]
    return t.array().astype(F32, copy=False).reshape(parts, free)


def out_array(t: NkiTensor) -> np.ndarray:
    """``t.array()`` for a write: a fresh storage written whole skips the sentinel fill."""
    st = t.storage
    if st.lazy:
        st.materialise(fill=not _covers_storage(t))
    return t.array()


def write(t: NkiTensor, values: np.ndarray) -> None:
    """Write ``values`` (any shape with t's element count) to ``t``, rounding to its dtype."""
    a = out_array(t)
    a[...] = for_int_dtype(t.storage.dtype, values).reshape(a.shape)


def for_int_dtype(dtype: str, values: np.ndarray) -> np.ndarray:
    """``values`` ready to be stored as ``dtype``: fp32 -> int rounds to nearest even with saturation
    (NaN -> 0), as the hardware does; other conversions are numpy's / ml_dtypes' (RNE)."""
    if dtype in INT_TYPES and values.dtype.kind == "f":
        lo, hi = int_limits(dtype)
        return np.clip(np.nan_to_num(np.rint(values), nan=0.0), lo, hi)
    return values


def psum_state(t: NkiTensor) -> np.ndarray:
    """The per-element PSUM write-state view of ``t`` (uint8, same pattern)."""
    st = t.storage
    return np.ndarray(t.shape, np.uint8, st.psum_state, t.offset, tuple([s for s, _ in t.pattern]))


def _covers_storage(t: NkiTensor) -> bool:
    """Whether the view touches every element of its storage (so one state describes it)."""
    st = t.storage
    pstart, parts, free, lo, hi, _ = t.layout()
    return parts == st.partitions and free == st.row and lo == 0 and hi == st.row and pstart == st.p0


def psum_state_of(t: NkiTensor) -> np.ndarray | None:
    """The per-element state view of ``t``, or None when the whole storage is in one known state."""
    st = t.storage
    uniform = st.psum_uniform
    if uniform is not None:
        if _covers_storage(t):
            return None
        if st.psum_state is None:
            st.psum_state = np.full(st.size, uniform, np.uint8)
        else:
            st.psum_state[:] = uniform
        st.psum_uniform = None
    return psum_state(t)


def set_psum_state(t: NkiTensor, state: np.ndarray | None, value: int) -> None:
    if state is None or _covers_storage(t):
        t.storage.psum_uniform = value
    else:
        state[...] = value


def mark_written_by_other(t: NkiTensor) -> None:
    """A non-matmul instruction wrote PSUM: matmul accumulation onto it is not allowed."""
    if t.storage.buffer == PSUM:
        set_psum_state(t, psum_state_of(t), PSUM_BY_OTHER)


__all__ = ["F32", "PSUM", "PSUM_FRESH", "SBUF", "CoreState", "access", "read2d", "tensor", "write"]
