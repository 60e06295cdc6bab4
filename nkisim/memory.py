"""Storage (one numpy buffer per allocation) and the per-core on-chip capacity trackers.

The real simulator allocates every tensor independently; here SBUF and PSUM allocations are
tracked over their Python lifetime (a storage dies when no view of it remains, which CPython's
reference counting makes deterministic) so that capacity overflows are caught and peaks reported.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .errors import violation

SBUF, PSUM = "sbuf", "psum"
ON_CHIP = frozenset({SBUF, PSUM})

# PSUM per-element write state (the per-element first-write rule of nc_matmul's accumulate).
PSUM_FRESH, PSUM_BY_MATMUL, PSUM_BY_OTHER = 0, 1, 2


class Storage:
    """One allocation: its buffer, dtype, shape and (unless trace-only) its flat numpy data."""

    __slots__ = (
        "__weakref__",
        "aliases",
        "base",
        "buffer",
        "byte_offset",
        "clobbered_by",
        "data",
        "dtype",
        "id",
        "itemsize",
        "lazy",
        "name",
        "np_dtype",
        "ordinal",
        "overflow",
        "p0",
        "partitions",
        "psum_state",
        "psum_uniform",
        "raw",
        "row",
        "shape",
        "size",
        "trace_id",
    )

    def __init__(self, sid: int, buffer: str, dtype: str, np_dtype: np.dtype, shape: tuple[int, ...],
                 name: str, data: np.ndarray | None) -> None:
        self.id = sid
        self.buffer = buffer
        self.dtype = dtype
        self.np_dtype = np_dtype
        self.itemsize = np_dtype.itemsize
        self.shape = shape
        size = 1
        for n in shape:
            size *= n
        self.size = size
        on_chip = buffer in ON_CHIP
        self.partitions = shape[0] if on_chip else 1
        self.row = size // shape[0] if on_chip else size  # free elements per partition
        self.data = data
        self.raw = None if data is None else data.view(np.uint8)
        self.lazy = False         # full mode, memory not materialised yet (see materialise)
        # Per-element PSUM write states, created when a partial write first makes them differ; while
        # psum_uniform is not None every element is in that state and psum_state is stale (a fast path).
        self.psum_state: np.ndarray | None = None
        self.psum_uniform: int | None = PSUM_FRESH if buffer == PSUM else None
        self.name = name
        self.p0 = 0               # first physical partition
        self.byte_offset = 0      # on-chip free-dim byte address (PSUM always, SBUF if explicit)
        self.clobbered_by: str | None = None   # the alias that last overwrote this memory, if any
        self.aliases: list[weakref.ref] = []    # explicitly placed allocations sharing its bytes
        self.base: Storage | None = None   # the allocation this one re-types (NkiTensor.view), if any
        self.trace_id = sid       # the allocation's id in trace records (shared by its re-typed views)
        self.overflow: str | None = None   # PSUM: why it has no place yet (see OnChipTracker.allocate)
        self.ordinal = -1         # PSUM: its allocation order in its program (liveness.PsumLiveness)

    def materialise(self, fill: bool) -> None:
        """Create the data of a lazy storage: sentinel-filled, or uninitialised when the first
        access is a write of every element (nothing can observe the sentinel then)."""
        data = np.empty(self.size, self.np_dtype)
        if fill:
            # The sentinel through an unsigned-integer view: the same bits as np.full(NaN / 4), much
            # faster for the ml_dtypes types (bf16/fp8 np.full converts element by element).
            bits = _SENTINEL_BITS.get(self.np_dtype)
            if bits is None:
                bits = _SENTINEL_BITS[self.np_dtype] = _sentinel_bits(self.dtype, self.np_dtype)
            data.view(bits.dtype).fill(bits)
        self.data = data
        self.raw = data.view(np.uint8)
        self.lazy = False

    @property
    def row_bytes(self) -> int:
        return self.row * self.itemsize


def retyped_storage(storage: Storage, sid: int, dtype: str, np_dtype: np.dtype) -> Storage:
    """The memory of ``storage`` read as ``dtype`` (``NkiTensor.view`` / ``.ap(dtype=)``).

    Not an allocation: capacity counts the original once, and the original lives as long as this
    does (it is held as ``base``). Trace records name the original (``trace_id``), with spans in
    its elements, so the cost model sees both typings as one memory.
    """
    base = storage if storage.base is None else storage.base
    isz = np_dtype.itemsize
    if base.buffer in ON_CHIP:
        shape = (base.partitions, base.row_bytes // isz)
    else:
        shape = (base.size * base.itemsize // isz,)
    st = Storage(sid, base.buffer, dtype, np_dtype, shape, base.name, None)
    st.base = base
    st.trace_id = base.trace_id
    st.p0, st.byte_offset = base.p0, base.byte_offset
    st.psum_uniform = None
    if base.lazy:   # full mode: the bytes must exist to be shared (fill = what a lazy read sees)
        base.materialise(fill=True)
    if base.raw is not None:
        st.raw = base.raw
        st.data = base.raw.view(np_dtype)
    return st


_SENTINEL_BITS: dict[np.dtype, np.generic] = {}


def _sentinel_bits(dtype: str, np_dtype: np.dtype) -> np.generic:
    """The bit pattern of the fresh-memory sentinel (NaN for floats, 4 for integers) as an unsigned int."""
    from .dtypes import is_float

    value = np.array(np.nan if is_float(dtype) else 4, dtype=np_dtype)
    return value.view(np.dtype(f"u{np_dtype.itemsize}"))[()]


@dataclass
class _Region:
    p0: int
    p1: int
    lo: int
    hi: int
    explicit: bool
    storage: weakref.ref


def _overlaps(a: _Region, p0: int, p1: int, lo: int, hi: int) -> bool:
    return a.p0 < p1 and p0 < a.p1 and a.lo < hi and lo < a.hi


class OnChipTracker:
    """Live allocations of one on-chip buffer of one core: placement, capacity and the peak."""

    def __init__(self, kind: str, capacity: int, target: str, bank_bytes: int = 0) -> None:
        self.kind = kind
        self.capacity = capacity      # bytes per partition
        self.target = target
        self.bank_bytes = bank_bytes  # PSUM only
        self.regions: dict[int, _Region] = {}
        self.auto_bytes = 0           # SBUF allocations without an address (no placement needed)
        self.auto_sizes: dict[int, int] = {}
        self.peak = 0
        self.pending: dict[int, weakref.ref] = {}   # PSUM tiles waiting for room (Storage.overflow)
        # One weak reference per live storage whose callback releases it (cheaper than
        # weakref.finalize, and called at the same moment: when the last view of the storage dies).
        self._watch: dict[int, weakref.ref] = {}
        self.virtual_banks = 0   # PSUM, recording run of liveness.py: tiles placed past the real banks

    def _watch_storage(self, st: Storage) -> None:
        release = self.release
        sid = st.id
        self._watch[sid] = weakref.ref(st, lambda _ref: release(sid))

    # --- usage -------------------------------------------------------------------------------
    def _placed_bytes(self) -> int:
        spans = sorted((r.lo, r.hi) for r in self.regions.values())
        total, end = 0, -1
        for lo, hi in spans:
            if lo >= end:
                total += hi - lo
                end = hi
            elif hi > end:
                total += hi - end
                end = hi
        return total

    def usage(self) -> int:
        """SBUF: live bytes per partition. PSUM: live banks."""
        if self.kind == PSUM:
            mask = 0
            bank = self.bank_bytes
            for r in self.regions.values():
                first, last = r.lo // bank, (r.hi - 1) // bank
                mask |= ((1 << (last - first + 1)) - 1) << first
            return mask.bit_count()
        if not self.regions:
            return self.auto_bytes
        return self.auto_bytes + self._placed_bytes()

    # --- allocation ----------------------------------------------------------------------------
    def allocate(self, st: Storage, address: tuple[int, int] | None, virtual: bool = False) -> None:
        """Place ``st`` (SBUF: count it). ``virtual``: a PSUM tile with no room takes a virtual bank past the
        real ones instead of waiting (the recording run of ``liveness.py``)."""
        nbytes = st.row_bytes
        what = "PSUM" if self.kind == PSUM else "SBUF"
        if nbytes > self.capacity:
            raise violation("ndarray", st.name, f"{what} capacity: {nbytes} B per partition exceeds "
                            f"{self.capacity} B per partition ({self.target})")
        if address is not None:
            self._place_explicit(st, address, nbytes)
        elif self.kind == PSUM:
            lo = self._find_place(nbytes)
            if lo is None and virtual:
                lo = self.capacity + self.virtual_banks * self.bank_bytes   # past the real banks, bank-aligned
                self.virtual_banks += -(-nbytes // self.bank_bytes)
                st.byte_offset = lo
                self._watch_storage(st)
                return
            if lo is None:
                # Not an error yet: in ``t = nl.ndarray(...)`` inside a loop the previous tile is still
                # referenced by ``t`` until the assignment completes, though the compiler's liveness
                # analysis sees it dead. The tile waits for room; using it before room is freed is the
                # error (isa_core.tensor).
                st.overflow = (f"PSUM capacity: no room for {nbytes} B per partition: {self.usage()} of "
                               f"{self.capacity // self.bank_bytes} banks live when it was allocated, and none "
                               f"freed before its first use ({self.target})")
                self.pending[st.id] = weakref.ref(st)
                self._watch_storage(st)
                return
            st.byte_offset = lo
            self.regions[st.id] = _Region(0, 128, lo, lo + nbytes, False, weakref.ref(st))
        else:
            self.auto_bytes += nbytes
            self.auto_sizes[st.id] = nbytes
            used = self.usage()
            if used > self.capacity:
                self.auto_bytes -= nbytes
                del self.auto_sizes[st.id]
                raise violation("ndarray", st.name, f"SBUF capacity: live {used} B per partition exceeds "
                                f"{self.capacity} B usable ({self.target})")
            self.peak = max(self.peak, used)
            self._watch_storage(st)
            return
        used = self.usage()
        self.peak = max(self.peak, used)
        self._watch_storage(st)

    def _place_explicit(self, st: Storage, address: tuple[int, int], nbytes: int) -> None:
        try:
            p0, lo = (int(v) for v in address)
        except (TypeError, ValueError):
            raise violation("ndarray", st.name, f"address {address!r} must be (partition, byte_offset)") from None
        p1, hi = p0 + st.partitions, lo + nbytes
        if p0 < 0 or p1 > 128:
            raise violation("ndarray", st.name, f"address partition {p0} + {st.partitions} partitions "
                            "exceeds 128")
        if lo < 0 or hi > self.capacity:
            raise violation("ndarray", st.name, f"address byte range [{lo}, {hi}) exceeds the {self.capacity}"
                            f" B per partition of {'PSUM' if self.kind == PSUM else 'SBUF'} ({self.target})")
        if self.kind == PSUM and lo % self.bank_bytes:
            raise violation("ndarray", st.name, f"PSUM address byte offset {lo} must start at a bank "
                            f"boundary (multiple of {self.bank_bytes})")
        # Explicit allocations over the same bytes alias each other (AWS's attention_cte places its
        # rotating PSUM tiles this way and uses each in turn): the last one written owns the memory,
        # and reading another afterwards is the error (isa_core.tensor).
        displaced = []
        for sid, r in list(self.regions.items()):
            if _overlaps(r, p0, p1, lo, hi):
                old = r.storage()
                del self.regions[sid]
                if old is None:
                    continue
                if r.explicit:
                    old.aliases.append(weakref.ref(st))
                    st.aliases.append(weakref.ref(old))
                    st.clobbered_by = old.name or f"storage#{old.id}"   # its bytes hold old's data
                else:
                    displaced.append((sid, r, old))
        st.p0, st.byte_offset = p0, lo
        self.regions[st.id] = _Region(p0, p1, lo, hi, True, weakref.ref(st))
        for sid, r, old in displaced:   # emulator-placed PSUM tiles move out of the way
            new_lo = self._find_place(r.hi - r.lo)
            if new_lo is None:
                raise violation("ndarray", st.name, f"PSUM capacity: no room left for '{old.name}' once "
                                f"this tensor is placed at {address} ({self.target})")
            old.byte_offset = new_lo
            self.regions[sid] = _Region(0, 128, new_lo, new_lo + r.hi - r.lo, False, r.storage)

    def _find_place(self, nbytes: int) -> int | None:
        bank = self.bank_bytes
        step = bank if nbytes >= bank else 4
        lo = 0
        while lo + nbytes <= self.capacity:
            if nbytes < bank and lo // bank != (lo + nbytes - 1) // bank:
                lo = (lo // bank + 1) * bank   # small tiles never straddle a bank
                continue
            clash = next((r for r in self.regions.values() if r.lo < lo + nbytes and lo < r.hi), None)
            if clash is None:
                return lo
            lo = max(lo + step, -(-clash.hi // step) * step)
        return None

    def release(self, sid: int) -> None:
        self._watch.pop(sid, None)
        self.pending.pop(sid, None)
        freed = self.regions.pop(sid, None)
        nbytes = self.auto_sizes.pop(sid, None)
        if nbytes is not None:
            self.auto_bytes -= nbytes
        if freed is not None and self.pending:
            self._place_pending()

    def _place_pending(self) -> None:
        """PSUM tiles allocated while the buffer was full take the room freed since, oldest first."""
        for sid, ref in list(self.pending.items()):
            st = ref()
            if st is None:
                continue
            lo = self._find_place(st.row_bytes)
            if lo is None:
                return
            del self.pending[sid]
            st.overflow = None
            st.byte_offset = lo
            self.regions[sid] = _Region(0, 128, lo, lo + st.row_bytes, False, ref)
            self.peak = max(self.peak, self.usage())
