"""Analytic per-engine cost accounting with the figures of nkisim's cost model (trn1/2/3).

Pure Python. The formulas restate ``docs/nkisim-cost-model.md`` / ``nki-api.md`` §8 so the planner
can estimate a plan without running it: TensorE ``max(min(64, M), N)`` cycles (x4 fp32);
Vector/Scalar/GpSimd ``max(64, N*streams/speedup) + 60`` cycles; DMA bytes over the core's
bandwidth at efficiency ``run / (run + 256)`` plus ~1.3 us start latency.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
OVERLAP_LOSS = 0.20   # share of the non-top engines' busy time that stalls the top one (kernels/README.md)


@dataclass(frozen=True)
class TargetFigures:
    name: str
    tensor_ghz: float
    vector_ghz: float
    scalar_ghz: float
    gpsimd_ghz: float
    dma_bytes_per_ns: float
    vector_fast_modes: bool
    scalar_small_speedup: int
    sbuf_usable: int          # tile_size.total_available_sbuf_size (bytes per partition)
    psum_banks: int = 8
    dma_fixed_ns: float = 1300.0

    def ghz(self, engine: str) -> float:
        return {"vector": self.vector_ghz, "scalar": self.scalar_ghz, "gpsimd": self.gpsimd_ghz,
                "tensor": self.tensor_ghz}[engine]


TARGET_FIGURES = {
    "trn1": TargetFigures("trn1", 2.8, 1.12, 1.4, 1.4, 16 * 17.0, False, 1, 180_224),
    "trn2": TargetFigures("trn2", 2.4, 0.96, 1.2, 1.2, 16 * 23.0, True, 1, 212_984),
    "trn3": TargetFigures("trn3", 2.4, 1.2, 1.2, 1.2, 16 * 33.0, True, 2, 245_752),
}


@dataclass
class CostSheet:
    """Accumulated busy time (ns) per engine, plus DMA start latencies."""

    hw: TargetFigures
    busy: dict[str, float] = field(default_factory=lambda: {e: 0.0 for e in ENGINES})
    counts: dict[str, int] = field(default_factory=dict)

    def _count(self, op: str, n: float) -> None:
        self.counts[op] = self.counts.get(op, 0) + int(n)

    def matmul(self, m: int, n: int, fp32: bool, count: float = 1, op: str = "nc_matmul") -> None:
        cycles = max(min(64, m), n) * (4 if fp32 else 1)
        self.busy["tensor"] += count * cycles / self.hw.tensor_ghz
        self._count(op, count)

    def transpose(self, p: int, f: int, fp32: bool, count: float = 1) -> None:
        """PE transpose of data [p, f] (a matmul: stationary data, moving identity [p, p])."""
        self.matmul(f, p, fp32, count, op="nc_transpose")

    def compute(self, engine: str, n: int, streams: int = 1, speedup: float = 1.0, count: float = 1,
                op: str = "tensor_copy") -> None:
        work = n * min(max(streams, 1), 2) / speedup
        cycles = max(64.0, work) + 60.0
        self.busy[engine] += count * cycles / self.hw.ghz(engine)
        self._count(op, count)

    def copy_speedup(self, engine: str, two_byte: bool, psum_side: bool, contiguous: bool) -> float:
        """The documented fast modes for tensor_copy (VectorE trn2+, ScalarE trn3)."""
        if engine == "vector" and self.hw.vector_fast_modes and two_byte:
            return 2.0 if (psum_side or not contiguous) else 4.0
        if engine == "scalar" and self.hw.scalar_small_speedup > 1 and two_byte:
            return float(self.hw.scalar_small_speedup)
        return 1.0

    def evict(self, n: int, two_byte_dst: bool, count: float = 1, contiguous: bool = True) -> None:
        """PSUM -> SBUF copies, alternated between VectorE and ScalarE by the kernel."""
        half = count / 2.0
        for engine in ("vector", "scalar"):
            sp = self.copy_speedup(engine, two_byte_dst, True, contiguous)
            self.compute(engine, n, 1, sp, half)

    def dma(self, nbytes: float, run_bytes: float, count: float = 1) -> None:
        if nbytes <= 0 or count <= 0:
            return
        run = max(1.0, min(run_bytes, nbytes))
        eff = run / (run + 256.0)
        self.busy["dma"] += count * nbytes / (self.hw.dma_bytes_per_ns * eff)
        self._count("dma_copy", count)

    def total_ns(self, fill_ns: float) -> float:
        """Modelled time: the busiest engine, plus the share of the others' work that does not overlap it
        (dependencies between engines), plus the pipeline fill.

        OVERLAP_LOSS is calibrated against nkisim's dependency-aware schedule on the issue-7 bench
        shapes (the stalls there cost 18-26 % of the other engines' busy time; see kernels/README.md).
        """
        top = max(self.busy.values())
        rest = sum(self.busy.values()) - top
        return top + OVERLAP_LOSS * rest + fill_ns

    def add(self, other: CostSheet) -> None:
        """Add another sheet's busy times and counts into this one."""
        for e in ENGINES:
            self.busy[e] += other.busy[e]
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v

    def merged(self, other: CostSheet) -> CostSheet:
        out = CostSheet(self.hw)
        for e in ENGINES:
            out.busy[e] = self.busy[e] + other.busy[e]
        for k in set(self.counts) | set(other.counts):
            out.counts[k] = self.counts.get(k, 0) + other.counts.get(k, 0)
        return out
