"""Per-partition indirect views: ``NkiTensor.ap(..., vector_offset=idx, indirect_dim=d)`` (gather/scatter DMA).

Neuron docs: ``nki.isa.dma_copy`` ("Indirect addressing (gather/scatter)": ``vector_offset`` is an SBUF tensor
of one row index per partition, the tensor ``.ap()`` is called on must be in HBM, ``vector_offset`` and
``scalar_offset`` are mutually exclusive), ``NkiTensor.ap`` ("``indirect_dim``: dimension in ``self.shape``
whose stride scales the indirect scalar/vector offset"), ``nki.isa.dma_transpose`` ("Indirect transpose":
``flat_indices = indices.T.flatten()[:src.shape[0]]``), ``nki.isa.dma_compute`` (read-modify-write with
``vector_offset``) and the DGE reference (``nki/deep-dives/nki-dge.rst``, "How .ap() Affects DGE Mode": only
``unknown`` or ``swdge``, and the compiler picks ``swdge``).

Addressing: element ``(i0, i1, ...)`` of the pattern is at ``offset + index[i0] * S + sum(i_d * stride_d, d >= 1)``,
``S`` the stride of dim ``indirect_dim`` of the tensor ``.ap()`` is called on. The pattern's own dim-0 stride is
not used: AWS's kernels pass a placeholder there (attention_block_tkg's ``[[1, tile_B], ...]`` with rows of
``d_head`` elements; topk_reduce's ``[[H, T], ...]`` over rows of ``H + 2``), and their comments say the DMA
"scales token_indices[b] by d_head (stride of indirect_dim=0)". Indices are read when the instruction runs.
"""
from __future__ import annotations

import numpy as np

from .errors import NkiUsageError, violation
from .memory import SBUF
from .tensor import NkiTensor, Pattern

# The instructions the documentation gives indirect (vector_offset) operands.
INDIRECT_INSTRUCTIONS = frozenset({"dma_copy", "dma_compute", "dma_transpose"})
_INDEX_TYPES = frozenset({"int32", "uint32"})


class IndirectView(NkiTensor):
    """An HBM view whose dim-0 positions come from an SBUF index tensor at run time.

    ``pattern[0]`` holds ``(S, rows)``: the index scale and the number of rows. No other view may be
    taken of it (NkiTensor.is_indirect: "Indirect views cannot be re-indirected, and the dimension that
    participates in the indirection cannot be further sliced or selected").
    """

    __slots__ = ("indices",)

    def __init__(self, base: NkiTensor, offset: int, pattern: Pattern, indices: NkiTensor) -> None:
        super().__init__(base.storage, offset, pattern, base.name)
        self.indices = indices

    def is_indirect(self) -> bool:
        return True

    # --- no further views -------------------------------------------------------------------------
    def _refuse(self, method: str) -> NkiUsageError:
        return NkiUsageError(f"{method}: operand '{self.name}' is an indirect (vector_offset) view: further views "
                             "of it are not emulated by nkisim")

    def __getitem__(self, key: object) -> NkiTensor:
        raise self._refuse("index")

    def _with(self, offset: int, pattern: object) -> NkiTensor:
        raise self._refuse("view")

    def ap(self, *args: object, **kwargs: object) -> NkiTensor:
        raise violation("ap", self.name, "an indirect view cannot be re-indirected or re-patterned "
                        "(NkiTensor.is_indirect)")

    def view(self, dtype: object) -> NkiTensor:
        raise self._refuse("view")

    def vector_select(self, dim: int, vector_offset: object) -> NkiTensor:
        raise violation("vector_select", self.name, "an indirect view cannot be re-indirected (NkiTensor.is_indirect)")

    def array(self) -> np.ndarray:
        raise NkiUsageError(f"operand '{self.name}': an indirect view is read by gather(), not as a strided array")

    # --- the trace ---------------------------------------------------------------------------------
    def layout(self) -> tuple[int, int, int, int, int, int]:
        """HBM: every element, spanning the whole storage (the rows are known only at run time); the
        contiguous run is one row's, never across rows."""
        run = 1
        for s, c in reversed(self.pattern[1:]):
            if c == 1:
                continue
            if s != run:
                break
            run *= c
        return 0, 1, self.size, 0, self.storage.size, run

    # --- run time ----------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return self.pattern[0][1]

    def row_indices(self) -> np.ndarray:
        """The index of each row (column-major over the index tensor, as the indirect transpose reads it)."""
        values = np.asarray(self.indices.array()).reshape(self.indices.shape[0], -1)
        return values.T.reshape(-1)[: self.rows].astype(np.int64)

    def addresses(self) -> np.ndarray:
        """Element addresses, shape (rows, elements per row), in the storage's elements."""
        inner = np.zeros(1, np.int64)
        for s, c in self.pattern[1:]:
            inner = (inner[:, None] + s * np.arange(c, dtype=np.int64)[None, :]).reshape(-1)
        base = self.offset + self.row_indices() * self.pattern[0][0]
        return base[:, None] + inner[None, :]

    def in_bounds(self, addresses: np.ndarray) -> np.ndarray:
        """Per row: whether every element lies inside the tensor."""
        return ((addresses >= 0) & (addresses < self.storage.size)).all(axis=1)

    def gather(self, addresses: np.ndarray) -> np.ndarray:
        """The elements at ``addresses`` (out-of-bounds ones read as element 0: the caller drops those rows)."""
        flat = self._flat()
        safe = np.where((addresses >= 0) & (addresses < flat.size), addresses, 0)
        return flat[safe].reshape(self.shape)

    def scatter(self, addresses: np.ndarray, values: np.ndarray, keep: np.ndarray) -> None:
        """Write ``values`` (already of the storage's dtype, any shape of the view's size) to the kept rows."""
        flat = self._flat()
        rows = values.reshape(addresses.shape)
        flat[addresses[keep].reshape(-1)] = rows[keep].reshape(-1)

    def _flat(self) -> np.ndarray:
        st = self.storage
        if st.lazy:
            st.materialise(fill=True)
        return st.data


def indirect_view(base: NkiTensor, pattern: Pattern, offset: int, vector_offset: object, indirect_dim: int,
                  scalar_offset: object, dtype: object) -> IndirectView:
    """``base.ap(pattern, offset, vector_offset=..., indirect_dim=...)``, checked against the documentation."""
    if scalar_offset is not None:
        raise violation("ap", "vector_offset", "vector_offset and scalar_offset are mutually exclusive "
                        "(nki.isa.dma_copy, 'Indirect addressing')")
    if dtype is not None:
        from .dtypes import dtype_name

        if dtype_name(dtype) != base.storage.dtype:
            raise NkiUsageError("ap: vector_offset together with a dtype reinterpretation is not emulated by nkisim")
    if base.on_chip:
        raise violation("ap", base.name, f"a vector_offset view indexes a tensor in HBM, '{base.name}' is in "
                        f"{base.storage.buffer} (nki.isa.dma_copy, 'Indirect addressing')")
    if not isinstance(vector_offset, NkiTensor):
        raise violation("ap", "vector_offset", f"must be an SBUF tensor of indices, got "
                        f"{type(vector_offset).__name__}")
    if vector_offset.storage.buffer != SBUF:
        raise violation("ap", "vector_offset", f"the index tensor must be in SBUF, got {vector_offset.storage.buffer}")
    if vector_offset.dtype not in _INDEX_TYPES:
        raise violation("ap", "vector_offset", f"the index dtype {vector_offset.dtype} must be uint32 or int32")
    if not 0 <= indirect_dim < len(base.pattern):
        raise IndexError(f"ap: indirect_dim {indirect_dim} out of range for a {len(base.pattern)}-D tensor "
                         f"'{base.name}'")
    if not pattern or any(c < 1 for _, c in pattern):
        raise NkiUsageError(f"ap: pattern {[list(p) for p in pattern]} needs at least one [stride, count] with "
                            "count >= 1")
    rows = pattern[0][1]
    if vector_offset.size < rows:
        raise violation("ap", "vector_offset", f"{vector_offset.size} indices for {rows} rows (the pattern's dim 0)")
    scale = base.pattern[indirect_dim][0]
    return IndirectView(base, offset, ((scale, rows), *pattern[1:]), vector_offset)


def check_indirect_dma(ins: str, role: str, t: IndirectView, dge_mode: object, generation: int) -> None:
    """The DGE reference: indirect DMAs run on the software DGE, NC-v3 (trn2) or later."""
    if generation < 3:
        raise violation(ins, role, "indirect (vector_offset) DMA needs NC-v3+ (trn2) (DGE reference, 'Mode "
                        "Selection Summary')")
    if getattr(dge_mode, "name", "unknown") not in ("unknown", "swdge"):
        raise violation(ins, "dge_mode", f"{dge_mode.name} with a vector_offset operand '{role}': only unknown or "
                        "swdge (DGE reference, 'How .ap() Affects DGE Mode')")
    idx = t.indices
    if idx.layout()[2] != 1 and ins != "dma_transpose":
        raise violation(ins, role, f"vector_offset {idx.shape}: one index per partition (shape (P, 1))")


def row_mask(ins: str, role: str, t: IndirectView, addresses: np.ndarray, skip: bool) -> np.ndarray:
    """Rows inside the tensor; an out-of-bounds row is an error unless ``oob_mode.skip`` drops it."""
    keep = t.in_bounds(addresses)
    if not skip and not keep.all():
        row = int(np.argmin(keep))
        raise violation(ins, role, f"index {int(t.row_indices()[row])} of row {row} puts the access outside "
                        f"'{t.name}' ({t.storage.size} elements); oob_mode=oob_mode.skip would skip it")
    return keep
