"""NkiTensor: a view (offset, [[stride, count], ...]) over one Storage, as in NKI 0.6.

Views cost nothing: every method returns a new view of the same storage. In full mode a view
maps to a numpy array over the storage bytes, so instructions read and write through it.
"""
from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np

from .buffers import MemoryRegion
from .context import current_core
from .dtypes import ITEMSIZE, NUMPY_TYPES, dtype_name
from .errors import NkiUsageError, violation
from .memory import ON_CHIP, PSUM, Storage, retyped_storage

Pattern = tuple[tuple[int, int], ...]


class NkiTensor:
    """A strided view of a storage; dim 0 of an on-chip tensor is the partition dim."""

    __slots__ = ("_arr", "_lay", "name", "offset", "pattern", "shape", "storage")

    def __init__(self, storage: Storage, offset: int, pattern: Pattern, name: str | None = None,
                 shape: tuple[int, ...] | None = None) -> None:
        self.storage = storage
        self.offset = offset
        self.pattern = pattern
        self.shape = tuple([c for _, c in pattern]) if shape is None else shape
        self._arr: np.ndarray | None = None
        self._lay: tuple | None = None
        self.name = storage.name if name is None else name

    # --- attributes ----------------------------------------------------------------------------
    @property
    def dtype(self) -> str:
        return self.storage.dtype

    @property
    def buffer(self) -> MemoryRegion:
        return MemoryRegion(self.storage.buffer)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.pattern)

    @property
    def ndim(self) -> int:
        return len(self.pattern)

    @property
    def size(self) -> int:
        n = 1
        for c in self.shape:
            n *= c
        return n

    @property
    def on_chip(self) -> bool:
        return self.storage.buffer in ON_CHIP

    def get_pattern(self) -> list[list[int]]:
        return [[s, c] for s, c in self.pattern]

    def is_indirect(self) -> bool:
        """Whether this view uses per-partition indirect addressing (``.ap(vector_offset=...)``)."""
        return False

    def is_contiguous(self) -> bool:
        """Row-major contiguous (the partition stride is ignored for on-chip tensors)."""
        dims = self.pattern[1:] if self.on_chip else self.pattern
        expect = 1
        for s, c in reversed(dims):
            if c != 1 and s != expect:
                return False
            expect *= c
        return True

    def __repr__(self) -> str:
        return (f"NkiTensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"buffer={self.storage.buffer}, offset={self.offset}, pattern={self.get_pattern()})")

    def __len__(self) -> int:
        return self.shape[0]

    # --- numpy access (full mode) ---------------------------------------------------------------
    def array(self) -> np.ndarray:
        """The numpy view of this tensor over its storage (writes go through)."""
        a = self._arr
        if a is None:
            st = self.storage
            if st.lazy:
                st.materialise(fill=True)
            isz = st.itemsize
            a = np.ndarray(self.shape, st.np_dtype, st.raw, self.offset * isz,
                           tuple([s * isz for s, _ in self.pattern]))
            self._arr = a
        return a

    def layout(self) -> tuple[int, int, int, int, int, int]:
        """(partition_start, partitions, free_elems, span_lo, span_hi, contiguous_elems).

        On-chip: physical partition range and the element span within one partition's row.
        HBM: one "partition", all elements, span over the flat storage.
        """
        lay = self._lay
        if lay is None:
            st = self.storage
            pattern = self.pattern
            if st.buffer in ON_CHIP and pattern:
                row = st.row
                part = self.offset // row
                off = self.offset - part * row
                partitions = pattern[0][1]
                free = pattern[1:]
                pstart = st.p0 + part
            else:
                off, partitions, free, pstart = self.offset, 1, pattern, 0
            lo = hi = off
            n = 1
            run = 1
            contiguous = True
            for s, c in reversed(free):   # innermost first: the contiguous run, the span, the count
                n *= c
                if c == 1:
                    continue
                if s > 0:
                    hi += s * (c - 1)
                else:
                    lo += s * (c - 1)
                if contiguous:
                    if s == run:
                        run *= c
                    else:
                        contiguous = False
            lay = self._lay = (pstart, partitions, n, lo, hi + 1, run)
        return lay

    # --- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: object) -> NkiTensor:
        # Hot path (every kernel instruction indexes its operands): one pass over the dims with the
        # common cases (int, slice without a step) inlined; the rules are those of _index_general.
        if type(key) is not tuple:
            key = (key,)
        pattern = self.pattern
        ndim = len(pattern)
        nkey = len(key)
        if nkey > ndim:
            return self._index_general(key)
        offset = self.offset
        on_chip = self.storage.buffer in ON_CHIP
        new: list[tuple[int, int]] = []
        shape: list[int] = []
        last_dropped = -1
        dropped_stride = 0
        for d in range(nkey):
            k = key[d]
            s, c = pattern[d]
            if type(k) is slice:
                start, stop, step = k.start, k.stop, k.step
                if step is not None and step != 1:
                    return self._index_general(key)
                if start is None:
                    start = 0
                elif type(start) is not int:
                    return self._index_general(key)
                elif start < 0:
                    start += c
                if stop is None:
                    stop = c
                elif type(stop) is not int:
                    return self._index_general(key)
                elif stop < 0:
                    stop += c
                if not (0 <= start <= c and 0 <= stop <= c):
                    raise IndexError(f"{self.name}: slice {k.start}:{k.stop} is out of range for dim {d} "
                                     f"of size {c}")
                offset += start * s
                n = stop - start if stop > start else 0
                new.append((s, n))
                shape.append(n)
            elif type(k) is int:
                if k < 0:
                    k += c
                if not 0 <= k < c:
                    raise IndexError(f"{self.name}: index {key[d]} out of range for dim {d} of size {c}")
                offset += k * s
                if on_chip and d == 0:
                    new.append((s, 1))   # on-chip: an int on the partition dim keeps it at size 1
                    shape.append(1)
                else:
                    last_dropped = len(new)
                    dropped_stride = s
            else:
                return self._index_general(key)
        if nkey < ndim:
            rest = pattern[nkey:]
            new.extend(rest)
            shape.extend(c for _, c in rest)
        if last_dropped >= 0 and len(new) < (2 if on_chip else 1):
            new.insert(last_dropped, (dropped_stride, 1))
            shape.insert(last_dropped, 1)
        return NkiTensor(self.storage, offset, tuple(new), self.name, tuple(shape))

    def _index_general(self, key: tuple) -> NkiTensor:
        """Indexing with every key kind: ``...``, steps, nl.ds, numpy integers, and the errors."""
        ndim = len(self.pattern)
        if any(k is Ellipsis for k in key):
            if sum(k is Ellipsis for k in key) > 1:
                raise IndexError(f"{self.name}: an index can only have a single ellipsis")
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
        if len(key) > ndim:
            raise IndexError(f"{self.name}: too many indices ({len(key)}) for a {ndim}-D tensor")
        on_chip = self.on_chip
        offset = self.offset
        new: list[tuple[int, int]] = []
        last_dropped: tuple[int, tuple[int, int]] | None = None
        for d, (s, c) in enumerate(self.pattern):
            k = key[d] if d < len(key) else slice(None)
            if isinstance(k, slice):
                start, stop, step = _slice_bounds(k, c, d, self.name)
                if on_chip and d == 0 and step != 1:
                    raise violation("index", self.name, f"partition dim is never strided (step {step})")
                offset += start * s
                new.append((s * step, len(range(start, stop, step))))
            elif isinstance(k, NkiTensor):
                raise NkiUsageError(f"index: operand '{self.name}': dynamic (tensor) indices are not "
                                    "emulated by nkisim")
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise IndexError(f"{self.name}: index {k!r} on dim {d} is not an int, slice or nl.ds") from None
                if i < 0:
                    i += c
                if not 0 <= i < c:
                    raise IndexError(f"{self.name}: index {k} out of range for dim {d} of size {c}")
                offset += i * s
                if on_chip and d == 0:
                    new.append((s, 1))   # on-chip: an int on the partition dim keeps it at size 1
                else:
                    last_dropped = (len(new), (s, 1))
        min_dims = 2 if on_chip else 1
        if len(new) < min_dims and last_dropped is not None:
            pos, dim = last_dropped
            new.insert(pos, dim)
        return NkiTensor(self.storage, offset, tuple(new), self.name)

    # --- view methods (NKI 0.5+) ----------------------------------------------------------------
    def _dim(self, method: str, dim: int, allow_partition: bool = False) -> int:
        ndim = len(self.pattern)
        d = operator.index(dim)
        if d < 0:
            d += ndim
        if not 0 <= d < ndim:
            raise IndexError(f"{method}: dim {dim} out of range for a {ndim}-D tensor '{self.name}'")
        if d == 0 and self.on_chip and not allow_partition:
            raise violation(method, self.name, "dim 0 of an on-chip tensor is the partition dim and "
                            "cannot be changed by this view")
        return d

    def _with(self, offset: int, pattern: Sequence[tuple[int, int]]) -> NkiTensor:
        return NkiTensor(self.storage, offset, tuple(pattern), self.name)

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        d = self._dim("slice", dim, allow_partition=True)
        s, c = self.pattern[d]
        if not (0 <= start < end <= c) or step < 1:
            raise IndexError(f"slice: '{self.name}' dim {d}: need 0 <= start < end <= {c} and step >= 1, "
                             f"got start={start}, end={end}, step={step}")
        if d == 0 and self.on_chip and step != 1:
            raise violation("slice", self.name, f"partition dim is never strided (step {step})")
        p = list(self.pattern)
        p[d] = (s * step, len(range(start, end, step)))
        return self._with(self.offset + start * s, p)

    def select(self, dim: int, index: int) -> NkiTensor:
        d = self._dim("select", dim)
        if isinstance(index, NkiTensor):
            raise NkiUsageError(f"select: operand '{self.name}': dynamic select is not emulated by nkisim")
        s, c = self.pattern[d]
        i = operator.index(index)
        if i < 0:
            i += c
        if not 0 <= i < c:
            raise IndexError(f"select: index {index} out of range for dim {d} of size {c} ('{self.name}')")
        p = list(self.pattern)
        del p[d]
        return self._with(self.offset + i * s, p)

    def permute(self, dims: Sequence[int]) -> NkiTensor:
        dims = tuple(operator.index(x) for x in dims)
        if sorted(dims) != list(range(len(self.pattern))):
            raise NkiUsageError(f"permute: dims {dims} is not a permutation of {len(self.pattern)} dims")
        if self.on_chip and dims[0] != 0:
            raise violation("permute", self.name, "on-chip tensors keep the partition dim first "
                            f"(dims[0] must be 0, got {dims[0]})")
        return self._with(self.offset, [self.pattern[d] for d in dims])

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        d = self._dim("broadcast", dim)
        if self.pattern[d][1] != 1:
            raise NkiUsageError(f"broadcast: dim {d} of '{self.name}' has size {self.pattern[d][1]}, "
                                "only a size-1 dim can be broadcast")
        p = list(self.pattern)
        p[d] = (0, operator.index(size))
        return self._with(self.offset, p)

    def expand_dim(self, dim: int) -> NkiTensor:
        ndim = len(self.pattern)
        d = operator.index(dim)
        if d < 0:
            d += ndim + 1
        if not 0 <= d <= ndim:
            raise IndexError(f"expand_dim: dim {dim} out of range for a {ndim}-D tensor '{self.name}'")
        if d == 0 and self.on_chip:
            raise violation("expand_dim", self.name, "cannot insert a dim before the partition dim")
        p = list(self.pattern)
        p.insert(d, (0, 1))
        return self._with(self.offset, p)

    def squeeze_dim(self, dim: int) -> NkiTensor:
        d = self._dim("squeeze_dim", dim)
        if self.pattern[d][1] != 1:
            raise NkiUsageError(f"squeeze_dim: dim {d} of '{self.name}' has size {self.pattern[d][1]}, not 1")
        p = list(self.pattern)
        del p[d]
        return self._with(self.offset, p)

    def reshape_dim(self, dim: int, shape: Sequence[int]) -> NkiTensor:
        shape = [operator.index(x) for x in shape]
        trivial = len(shape) == 1
        d = self._dim("reshape_dim", dim, allow_partition=trivial)
        s, c = self.pattern[d]
        if shape.count(-1) > 1:
            raise NkiUsageError(f"reshape_dim: shape {shape} has more than one -1")
        known = 1
        for x in shape:
            if x != -1:
                known *= x
        if -1 in shape:
            if known == 0 or c % known:
                raise NkiUsageError(f"reshape_dim: cannot split size {c} into {shape}")
            shape[shape.index(-1)] = c // known
        elif known != c:
            raise NkiUsageError(f"reshape_dim: shape {shape} does not multiply to dim {d} size {c}")
        sub = []
        stride = s
        for x in reversed(shape):
            sub.append((stride, x))
            stride *= x
        p = list(self.pattern)
        p[d:d + 1] = reversed(sub)
        return self._with(self.offset, p)

    def flatten_dims(self, start: int, end: int) -> NkiTensor:
        a = self._dim("flatten_dims", start)
        b = self._dim("flatten_dims", end)
        if b < a:
            raise NkiUsageError(f"flatten_dims: end {end} is before start {start}")
        group = self.pattern[a:b + 1]
        for (s0, _), (s1, c1) in itertools.pairwise(group):
            if s0 != s1 * c1:
                raise NkiUsageError(f"flatten_dims: dims {a}..{b} of '{self.name}' are not contiguous "
                                    f"(pattern {self.get_pattern()})")
        count = 1
        for _, c in group:
            count *= c
        p = list(self.pattern)
        p[a:b + 1] = [(group[-1][0], count)]
        return self._with(self.offset, p)

    def reshape(self, shape: Sequence[int]) -> NkiTensor:
        shape = [operator.index(x) for x in (shape if isinstance(shape, (tuple, list)) else (shape,))]
        if -1 in shape:
            known = 1
            for x in shape:
                if x != -1:
                    known *= x
            shape[shape.index(-1)] = self.size // known if known else 0
        total = 1
        for x in shape:
            total *= x
        if total != self.size:
            raise NkiUsageError(f"reshape: '{self.name}' has {self.size} elements, shape {tuple(shape)} "
                                f"has {total}")
        if self.on_chip:
            if shape[0] != self.shape[0]:
                raise violation("reshape", self.name, f"on-chip reshape keeps the partition dim "
                                f"({self.shape[0]}), got {shape[0]}")
            free = _reshape_pattern(self.pattern[1:], shape[1:])
            pattern = None if free is None else [self.pattern[0], *free]
        else:
            pattern = _reshape_pattern(self.pattern, shape)
        if pattern is None:
            raise NkiUsageError(f"reshape: the layout of '{self.name}' (pattern {self.get_pattern()}) "
                                f"cannot be viewed as shape {tuple(shape)} without a copy")
        return self._with(self.offset, pattern)

    def ap(self, pattern: Sequence[Sequence[int]], offset: int | None = None, scalar_offset: object = None,
           vector_offset: object = None, indirect_dim: int = 0, dtype: object = None) -> NkiTensor:
        """A raw access pattern over the storage flattened row-major (ignores this view).

        ``dtype=`` reads the storage as another dtype: pattern and offset count its elements.
        """
        if vector_offset is not None:
            # A per-partition runtime offset: a gather/scatter view for the DMA (nkisim/tensor_indirect.py).
            from .tensor_indirect import indirect_view

            pat = tuple((operator.index(s), operator.index(c)) for s, c in pattern)
            base = self.offset if offset is None else operator.index(offset)
            return indirect_view(self, pat, base, vector_offset, operator.index(indirect_dim), scalar_offset, dtype)
        if scalar_offset is not None:
            # A runtime offset (a register or a one-element tensor) scaled by the stride of
            # dim ``indirect_dim`` of this view (Neuron docs, NkiTensor.ap), read now: the
            # emulator runs eagerly.
            from .isa_register import dynamic_offset

            if dtype is not None and dtype_name(dtype) != self.storage.dtype:
                raise NkiUsageError("ap: scalar_offset together with a dtype reinterpretation is not emulated by "
                                    "nkisim")
            d = operator.index(indirect_dim)
            if not 0 <= d < len(self.pattern):
                raise IndexError(f"ap: indirect_dim {indirect_dim} out of range for a {len(self.pattern)}-D tensor "
                                 f"'{self.name}'")
            base = self.offset if offset is None else operator.index(offset)
            value = dynamic_offset(scalar_offset)
            view = self.ap(pattern, base + value * self.pattern[d][0])
            if isinstance(view, OutOfBoundsAccess):   # known only at run time: the DMA's oob_mode decides
                view.dynamic_offset = value
            return view
        if dtype is not None:
            dt = dtype_name(dtype)
            if dt != self.storage.dtype:
                old_size, new_size = self.storage.itemsize, ITEMSIZE[dt]
                if offset is None and (self.offset * old_size) % new_size:
                    raise violation("ap", self.name, f"the view's offset {self.offset} ({self.offset * old_size} B)"
                                    f" is not a whole number of {dt} elements; pass offset=")
                inherited = self.offset * old_size // new_size
                retyped = NkiTensor(self._retyped_storage("ap", dt), inherited, ((1, 1),), self.name)
                return retyped.ap(pattern, offset)
        pat = tuple((operator.index(s), operator.index(c)) for s, c in pattern)
        if not pat or any(c < 1 for _, c in pat):
            raise NkiUsageError(f"ap: pattern {pattern!r} needs at least one [stride, count] with count >= 1")
        off = self.offset if offset is None else operator.index(offset)
        st = self.storage
        lo = hi = off
        for s, c in pat:
            if s > 0:
                hi += s * (c - 1)
            else:
                lo += s * (c - 1)
        shape = tuple(c for _, c in pat)
        if lo < 0 or hi >= st.size:
            # Not an error yet: AWS's kernels build views they use only under a condition; an
            # instruction that uses this one fails, naming itself and the operand.
            return OutOfBoundsAccess(self.name, f"ap: pattern {[list(x) for x in pat]} at offset {off} reaches "
                                     f"elements [{lo}, {hi}] outside '{self.name}' ({st.size} elements)", shape,
                                     st.dtype)
        if st.buffer in ON_CHIP:
            ps, pc = pat[0]
            if pc > 1 and ps != st.row:
                raise violation("ap", self.name, f"partition dim stride {ps} must equal the tensor's free "
                                f"size {st.row} (partition access has holes)")
            f_lo = f_hi = off % st.row
            for s, c in pat[1:]:
                if s > 0:
                    f_hi += s * (c - 1)
                else:
                    f_lo += s * (c - 1)
            if f_lo < 0 or f_hi >= st.row:
                return OutOfBoundsAccess(self.name, f"ap: free-dim pattern reaches elements [{f_lo}, {f_hi}] "
                                         f"outside one partition's {st.row} elements", shape, st.dtype)
        return NkiTensor(st, off, pat, self.name)


    def vector_select(self, dim: int, vector_offset: object) -> NkiTensor:
        """Per-partition indirect addressing (NkiTensor.vector_select: ``dim`` 0, an HBM tensor; row ``p`` of
        the result is row ``vector_offset[p]`` of this view): the ``.ap(vector_offset=)`` view of its rows."""
        from .tensor_indirect import indirect_view

        if operator.index(dim) != 0:
            raise violation("vector_select", self.name, f"dim {dim}: only dim 0 is supported")
        if not isinstance(vector_offset, NkiTensor):
            raise violation("vector_select", "vector_offset", f"must be an SBUF tensor of indices, got "
                            f"{type(vector_offset).__name__}")
        pattern = ((self.pattern[0][0], vector_offset.shape[0]), *self.pattern[1:])
        return indirect_view(self, pattern, self.offset, vector_offset, 0, None, None)

    def view(self, dtype: object) -> NkiTensor:
        """The same bytes read as ``dtype`` (no copy); the last dim scales by the size ratio."""
        dt = dtype_name(dtype)
        st = self.storage
        if dt == st.dtype:
            return self._with(self.offset, self.pattern)
        old_size, new_size = st.itemsize, ITEMSIZE[dt]
        pattern = self.pattern
        if old_size != new_size:
            s_last, c_last = pattern[-1]
            if s_last != 1 and c_last > 1:
                raise violation("view", self.name, f"the last dim must be contiguous (stride 1, got {s_last}) "
                                f"to view {st.dtype} as {dt}")
            if (c_last * old_size) % new_size:
                raise violation("view", self.name, f"the last dim ({c_last} x {old_size} B) is not a whole number "
                                f"of {dt} elements ({new_size} B)")
            for d, (stride, count) in enumerate(pattern[:-1]):
                if count > 1 and (stride * old_size) % new_size:
                    raise violation("view", self.name, f"dim {d} stride {stride} ({stride * old_size} B) is not a "
                                    f"whole number of {dt} elements")
            if (self.offset * old_size) % new_size:
                raise violation("view", self.name, f"offset {self.offset} ({self.offset * old_size} B) is not a "
                                f"whole number of {dt} elements")
            pattern = tuple((stride * old_size // new_size, count) for stride, count in pattern[:-1]) + (
                (1, c_last * old_size // new_size),)
        retyped = self._retyped_storage("view", dt)
        return NkiTensor(retyped, self.offset * old_size // new_size, pattern, self.name)

    def _retyped_storage(self, method: str, dt: str) -> Storage:
        st = self.storage
        if st.buffer == PSUM:
            raise NkiUsageError(f"{method}: operand '{self.name}': re-typing a PSUM tensor is not emulated by "
                                "nkisim (its per-element accumulate state is kept in the allocation's dtype)")
        base = st if st.base is None else st.base
        if st.buffer in ON_CHIP and (base.row_bytes % ITEMSIZE[dt]):
            raise violation(method, self.name, f"{base.row_bytes} B per partition is not a whole number of {dt} "
                            "elements")
        if st.buffer not in ON_CHIP and (base.size * base.itemsize) % ITEMSIZE[dt]:
            raise violation(method, self.name, f"{base.size * base.itemsize} B is not a whole number of {dt} "
                            "elements")
        return retyped_storage(st, next(current_core().run.ids), dt, NUMPY_TYPES[dt])


class OutOfBoundsAccess:
    """An ``.ap`` view that reaches outside its tensor: usable by no instruction.

    Building one is not an error (AWS's kernels build views they then use only under a condition);
    an instruction that uses it raises, naming itself, the operand and the bounds. When the bounds
    come from a dynamic offset (``dynamic_offset`` set), a DMA with ``oob_mode=oob_mode.skip`` skips
    the transfer instead (Neuron docs, nki.isa.oob_mode: "Silently skip the runtime out-of-bounds
    access").
    """

    __slots__ = ("dtype", "dynamic_offset", "message", "name", "shape")

    def __init__(self, name: str, message: str, shape: tuple[int, ...], dtype: str) -> None:
        self.name, self.message, self.shape, self.dtype = name, message, shape, dtype
        self.dynamic_offset: int | None = None

    def __repr__(self) -> str:
        return f"OutOfBoundsAccess({self.message})"


def _slice_bounds(k: slice, c: int, d: int, name: str) -> tuple[int, int, int]:
    step = 1 if k.step is None else operator.index(k.step)
    if step < 1:
        raise IndexError(f"{name}: slice step {step} on dim {d} must be >= 1")
    start = 0 if k.start is None else operator.index(k.start)
    stop = c if k.stop is None else operator.index(k.stop)
    if start < 0:
        start += c
    if stop < 0:
        stop += c
    if not (0 <= start <= c and 0 <= stop <= c):
        raise IndexError(f"{name}: slice {k.start}:{k.stop} is out of range for dim {d} of size {c}")
    return start, max(start, stop), step


def _reshape_pattern(pattern: Sequence[tuple[int, int]], shape: Sequence[int]) -> list | None:
    """New (stride, count) pairs viewing ``pattern`` as ``shape`` without a copy, or None."""
    old = [(s, c) for s, c in pattern if c != 1]
    new_strides = [0] * len(shape)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(shape) and oi < len(old):
        np_, op = shape[ni], old[oi][1]
        while np_ != op:
            if np_ < op:
                np_ *= shape[nj]
                nj += 1
            else:
                op *= old[oj][1]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][0] != old[ok + 1][1] * old[ok + 1][0]:
                return None
        new_strides[nj - 1] = old[oj - 1][0]
        for nk in range(nj - 1, ni, -1):
            new_strides[nk - 1] = new_strides[nk] * shape[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    for k in range(ni, len(shape)):
        new_strides[k] = 1
    return list(zip(new_strides, shape))
