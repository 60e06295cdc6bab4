"""Published trn2 hardware figures that nkisim's cost model is held to, and the runs that reproduce them.

Sources (paths in the Neuron documentation source tree, titles as published):

- ``nki/guides/tutorials/kernel-optimization.rst``, "Introduction to NKI Kernel Optimization": a
  4096x8192 @ 8192x8192 float32 matmul on one trn2 NeuronCore, four versions; the totals are the
  profiler timelines' spans in ``nki/img/how-to/v{2,3,4,5}-full.png`` (39.89, 28.20, 28.41, 28.30 ms).
- ``nki/get-started/about/nki-dma-overview.rst``, "Introduction to Direct Memory Access (DMA) with NKI",
  Example 1: ``A[4, 4096]`` bfloat16 HBM -> SBUF runs on one DMA engine, which "takes 1416 ns to load
  32 KiB".
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import isa as nisa
from .. import language as nl
from ..cost import Summary, get_target, instr_timing
from ..kernel import TensorSpec, jit, run
from .matmul_versions import VERSIONS

__all__ = ["PUBLISHED_MATMUL_MS", "SINGLE_ENGINE_LOAD_NS", "MatmulCheck", "model_matmul", "model_single_engine_load"]

# tutorial version -> (this project's kernel, published total in ms)
PUBLISHED_MATMUL_MS: dict[str, tuple[str, float]] = {
    "v2": ("tiled", 39.89),
    "v3": ("hoisted", 28.20),
    "v4": ("free_blocked", 28.41),
    "v5": ("all_blocked", 28.30),
}
MATMUL_SHAPES = ((8192, 4096), (8192, 8192))   # lhsT [K, M], rhs [K, N], float32
SINGLE_ENGINE_LOAD_NS = 1416.0


@dataclass(frozen=True)
class MatmulCheck:
    """One tutorial version: the published total and nkisim's modelled one."""

    version: str
    kernel: str
    published_ms: float
    summary: Summary

    @property
    def modelled_ms(self) -> float:
        return self.summary.modelled_us / 1000.0

    @property
    def ratio(self) -> float:
        """Modelled / published."""
        return self.modelled_ms / self.published_ms


def model_matmul(version: str, band: bool = False) -> MatmulCheck:
    """Trace the project's kernel for tutorial ``version`` at the published shape and model it on trn2."""
    kernel, published = PUBLISHED_MATMUL_MS[version]
    specs = [TensorSpec(shape, "float32") for shape in MATMUL_SHAPES]
    result = run(jit(VERSIONS[kernel]), *specs, target="trn2", trace_only=True, cost_band=band)
    return MatmulCheck(version, kernel, published, result.summary)


def _load_a(a):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def model_single_engine_load() -> float:
    """The modelled time the one DMA engine spends on the DMA overview's ``A[4, 4096]`` bf16 load (ns):
    the transfer alone, without the fixed start latency (the profile shows the engine's transfer)."""
    result = run(jit(_load_a), TensorSpec((4, 4096), "bfloat16"), target="trn2", trace_only=True, cost_band=False)
    load = result.trace.instrs[0]
    timing = instr_timing(load, get_target("trn2"))
    return timing.latency_ns - timing.dma_fixed_ns
