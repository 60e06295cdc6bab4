"""Small NKI helpers shared by the kernel's sections: pools, engine rotation, PE transposes."""
import nki.isa as nisa
import nki.language as nl

from .schedule import free_pieces

PMAX = 128
BANK_BYTES = 2048
BANK_FP32 = 512


class Pool:
    """A fixed ring of equally shaped on-chip tensors, allocated once (multi-buffering)."""

    def __init__(self, count, shape, dtype, buffer, name, zero=False):
        self.items = [nl.ndarray(shape, dtype, buffer=buffer, name=f"{name}{i}") for i in range(count)]
        if zero:   # partitions no load ever writes must hold finite values (they meet zero weights)
            for t in self.items:
                memset_pieces(t, 0.0, nisa.engine.gpsimd)
        self.next = 0

    def take(self):
        t = self.items[self.next]
        self.next = (self.next + 1) % len(self.items)
        return t


def memset_pieces(t, value, engine):
    """``nisa.memset`` of a whole tile in pieces an engine can access at once (``schedule.free_pieces``)."""
    for piece in free_pieces(tuple(t.shape[1:])):
        nisa.memset(t[(slice(0, t.shape[0]),) + piece], value, engine=engine)


class Evictor:
    """PSUM -> SBUF copies alternated between VectorE and ScalarE (ScalarE cannot copy on trn1)."""

    def __init__(self, target):
        self.engines = (nisa.engine.vector,) if target == "trn1" else (nisa.engine.vector, nisa.engine.scalar)
        self.i = 0

    def copy(self, dst, src):
        eng = self.engines[self.i % len(self.engines)]
        self.i += 1
        nisa.tensor_copy(dst, src, engine=eng)


def transpose_pool(dtype_bytes, dtype, count=2):
    """PSUM tiles of one bank in the input dtype, for PE transposes (dst dtype == data dtype)."""
    return Pool(count, (PMAX, BANK_BYTES // dtype_bytes), dtype, nl.psum, "ps_t")


def co_bank_packs(co_tiles, bank):
    """C_out tiles packed in order into PSUM banks of ``bank`` elements (so one eviction moves
    several): per bank, the C_out offset of its first tile, its [(tile index, column, size)], its width."""
    packs, c = [], 0
    while c < len(co_tiles):
        members, width = [], 0
        while c < len(co_tiles) and width + co_tiles[c][1] <= bank:
            members.append((c, width, co_tiles[c][1]))
            width += co_tiles[c][1]
            c += 1
        packs.append((co_tiles[members[0][0]][0], members, width))
    return packs


def band_slices(start, size, step):
    """A slice of ``size`` elements from ``start`` with ``step`` (step-sliced views on free dims)."""
    return slice(start, start + (size - 1) * step + 1, step)


def load_padded(buf, ext, lo, hi, src, stage_pool, p0=0, engine=None, pieces=1):
    """Fill ``buf[:p, :E0, :E1, :E2]`` with ``src`` placed at [lo, hi) per axis and zeros elsewhere.

    Only the border slabs are zeroed. When H or W is padded the interior is not contiguous per
    partition, so a DMA straight into it would move runs of one W row (slow descriptors): then the
    DMA lands contiguously in a staging tile and VectorE (or ``engine``) places it.
    """
    view, place = stage_padded(buf, ext, lo, hi, src, stage_pool, p0, engine, pieces)
    place()
    return view


def stage_padded(buf, ext, lo, hi, src, stage_pool, p0=0, engine=None, pieces=1):
    """``load_padded`` in two parts: the border zeros and the DMA now; the placement copy (when the load is
    staged) returned as a callable, so that a prefetch can queue it on its engine later, when the DMA has
    landed (an engine runs its instructions in order: a placement issued right behind its DMA would hold
    up everything issued after it on that engine until the DMA lands). ``pieces``: a staged load moves as
    that many DMAs and placements of consecutive D rows, so that readers of the first rows wait for the
    first piece only (a section's first band, which nothing loaded ahead)."""
    p = buf.shape[0] - p0 if src is None else src.shape[0]
    buf = buf[p0:p0 + p]     # a partition region (regions start at 0/32/64/96)
    view = buf[:p, :ext[0], :ext[1], :ext[2]]
    if src is None or any(h <= l for l, h in zip(lo, hi)):
        memset_pieces(view, 0.0, nisa.engine.gpsimd)
        return view, _nothing
    _zero_border(buf, p, ext, lo, hi)
    interior = buf[:p, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    if _contiguous(ext, lo, hi) or stage_pool is None:
        nisa.dma_copy(dst=interior, src=src)
        return view, _nothing
    n = [hi[a] - lo[a] for a in range(3)]
    stage = stage_pool.take()[p0:p0 + p]   # same partitions as the destination
    plane = n[1] * n[2]
    k = max(1, min(pieces, n[0]))
    runs = [(n[0] * i // k, n[0] * (i + 1) // k) for i in range(k)]   # (k <= n[0]: none empty)
    for a, b in runs:
        nisa.dma_copy(dst=stage[:p, a * plane:b * plane], src=src if len(runs) == 1 else src[:, a:b])

    def place():
        # VectorE places it (2x mode for 2-byte strided copies; GpSimd would be ~3x slower)
        for a, b in runs:
            nisa.tensor_copy(dst=interior[:, a:b], src=stage[:p, a * plane:b * plane],
                             engine=nisa.engine.vector if engine is None else engine)
    return view, place


def _nothing():
    """A placement with nothing to place (the load was not staged)."""


def _zero_border(buf, p, ext, lo, hi, axes=(0, 1, 2)):
    """Zero the slabs of ``buf[:p, :E0, :E1, :E2]`` outside [lo, hi) (GpSimd: otherwise idle), the
    slabs of ``axes`` in that order (the slabs across every d plane first: a placement of some planes
    waits for those, not for a whole padding plane's)."""
    for a in axes:
        for s0, s1 in ((0, lo[a]), (hi[a], ext[a])):
            if s1 > s0:
                idx = [slice(None, ext[0]), slice(None, ext[1]), slice(None, ext[2])]
                idx[a] = slice(s0, s1)
                nisa.memset(buf[:p, idx[0], idx[1], idx[2]], 0.0, engine=nisa.engine.gpsimd)


def _contiguous(ext, lo, hi):
    """Whether the interior [lo, hi) of an ``ext`` buffer is one contiguous run per partition."""
    return lo[2] == 0 and hi[2] == ext[2] and (lo[1] == 0 and hi[1] == ext[1] or hi[0] - lo[0] == 1)


def packed_fill_shared(fills, fills_partitions):
    """Whether region fills ``[(lo, hi, src)]`` can share their memsets and placement: every region
    has data, the same layout, and the regions cover all partitions (no idle rows to keep zero)."""
    lo0, hi0, _ = fills[0]
    return (fills_partitions and len(fills) > 1
            and all(src is not None and lo == lo0 and hi == hi0 for lo, hi, src in fills)
            and all(h > l_ for l_, h in zip(lo0, hi0)))


def load_padded_regions(buf, ext, lo, hi, srcs, pitch, stage_pool):
    """``load_padded`` of several partition regions with the same layout (region r at r*pitch):
    one set of border memsets and, when staged, one placement over every region's partitions
    (the same bytes land where per-region loads would put them)."""
    p = len(srcs) * pitch
    _zero_border(buf, p, ext, lo, hi)
    interior = buf[:p, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    if _contiguous(ext, lo, hi) or stage_pool is None:
        for r, src in enumerate(srcs):
            nisa.dma_copy(dst=buf[r * pitch:(r + 1) * pitch, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]], src=src)
        return buf[:p, :ext[0], :ext[1], :ext[2]]
    n = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    stage = stage_pool.take()
    for r, src in enumerate(srcs):
        nisa.dma_copy(dst=stage[r * pitch:(r + 1) * pitch, :n], src=src)
    nisa.tensor_copy(dst=interior, src=stage[:p, :n], engine=nisa.engine.vector)
    return buf[:p, :ext[0], :ext[1], :ext[2]]
