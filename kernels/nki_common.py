"""Small NKI helpers shared by the kernel's sections: pools, engine rotation, PE transposes."""
import nki.isa as nisa
import nki.language as nl

PMAX = 128
BANK_BYTES = 2048
BANK_FP32 = 512


class Pool:
    """A fixed ring of equally shaped on-chip tensors, allocated once (multi-buffering)."""

    def __init__(self, count, shape, dtype, buffer, name):
        self.items = [nl.ndarray(shape, dtype, buffer=buffer, name=f"{name}{i}") for i in range(count)]
        self.next = 0

    def take(self):
        t = self.items[self.next]
        self.next = (self.next + 1) % len(self.items)
        return t


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


def band_slices(start, size, step):
    """A slice of ``size`` elements from ``start`` with ``step`` (step-sliced views on free dims)."""
    return slice(start, start + (size - 1) * step + 1, step)
