"""Cost model of one NeuronCore per target, from the published hardware figures.

Every figure carries its source (a page of the Neuron documentation, a published profile, or nki-library's
cost code) or is an assumption with an optimistic and a pessimistic value (:data:`ASSUMPTIONS`); the
list with pages and figures is ``docs/nkisim-cost-model.md``.

Each instruction gets an :class:`InstrTiming`: its *occupancy* (how long it blocks its
engine; for DMA, how long it uses the core's shared DMA bandwidth) and its *latency* (how
long after it starts its results are visible to dependent instructions). The schedule in
:mod:`nkisim.schedule` turns these into a modelled kernel time; :func:`summarize` reports it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import NamedTuple

from .dge import DmaQueue, hwdge_transpose_violation
from .trace import Access, Instr, Trace

__all__ = [
    "ASSUMPTIONS",
    "TARGETS",
    "Assumption",
    "CostModelError",
    "DmaIssue",
    "Engine",
    "HardwareTarget",
    "InstrTiming",
    "Summary",
    "dma_issue",
    "dma_transpose_efficiency",
    "dma_transpose_ns",
    "get_target",
    "instr_cost_ns",
    "instr_timing",
    "matmul_dims",
    "matmul_flops",
    "summarize",
    "transpose_block_bytes",
]


class CostModelError(ValueError):
    """A bad argument to the cost model (names the argument, the value and the rule)."""


class Engine(str, Enum):
    """The engines of one NeuronCore, as named in trace records."""

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"


ENGINE_NAMES = tuple(e.value for e in Engine)


@dataclass(frozen=True)
class HardwareTarget:
    """Figures of one NeuronCore of a target (all per core). Each field's source, or its assumption band
    (:data:`ASSUMPTIONS`), is listed in ``docs/nkisim-cost-model.md``."""

    name: str
    tensor_ghz: float            # TensorE clock
    vector_ghz: float            # VectorE clock
    scalar_ghz: float            # ScalarE clock
    gpsimd_ghz: float            # GpSimd clock
    dma_engines: int             # DMA engines per core (16 on trn1/2/3)
    dma_engine_bytes_per_ns: float  # bandwidth of one DMA engine
    pe_rows: int = 128           # PE array 128x128 (all targets)
    pe_cols: int = 128
    vector_fast_modes: bool = False  # trn2+ VectorE 2x/4x modes for 2-byte copies
    scalar_small_dtype_speedup: int = 1  # trn3 ScalarE: 256 bf16/fp8 per cycle vs 128 others
    hwdge_queues: int = 0        # hardware DGE blocks per core (two on NC-v3+; none before)
    # TensorE
    matmul_min_cycles: int = 64           # MM_INIT_LATENCY = 64 cycles (arch guide, TensorE cost model)
    matmul_issue_cycles: float = 14.0     # fit: tutorial v3 profile, TensorE active 28.16 ms / 32768 matmuls
    # VectorE, ScalarE, GpSimd
    min_ii_cycles: int = 64               # MIN_II ~64 cycles for small tiles
    access_overhead_cycles: int = 60      # arch guide: ~60 cycles static overhead per SBUF/PSUM access
    vector_overhead_cycles: int = 144     # nki-library topk cost code: fixed DVE instruction overhead
    dependent_interval_cycles: int = 264  # perf guide Opt #5a: 189 ns = 264 ScalarE cycles between dependent
    # DMA
    dma_fixed_ns: float = 1300.0          # DMA bandwidth guide: ~1300 ns semaphore-to-start per transfer
    dma_descriptor_overhead_bytes: float = 150.0  # fit: DMA overview's throughput curve above 2 KiB/partition
    hwdge_issue_ns: float = 600.0         # DGE reference, trn2 arch guide: ~600 ns per hardware-DGE instruction
    swdge_issue_ns: float = 600.0         # fit: tutorial v2, 66,048 software-DGE DMAs in 39.89 ms
    swdge_gpsimd_ns: float = 100.0        # assumption: GpSimd time per software-DGE instruction
    static_issue_ns: float = 300.0        # assumption: per-instruction cost with host-made descriptors
    unknown_copy_dge: str = "swdge"       # assumption: the mode the compiler gives dma_copy under 'unknown'
    dma_transpose_from_hbm_efficiency: float = 0.9   # trn2 arch guide: HBM->SBUF up to 90 %
    dma_transpose_from_sbuf_efficiency: float = 0.5  # trn2 arch guide: SBUF->SBUF up to 50 %
    dma_transpose_block_partitions: int = 128        # trn2 arch guide: blocks of [par_dim(128), 16]
    dma_transpose_block_elems: int = 16
    # Calibration: per-engine factors on the modelled times, fitted from hardware latencies
    # (see docs/nkisim-cost-model.md, "Calibration"); () means the documented figures as they are.
    engine_factors: tuple[tuple[str, float], ...] = ()

    def bound(self, end: str) -> HardwareTarget:
        """This target with every assumption at its ``'optimistic'`` or ``'pessimistic'`` end."""
        if end not in ("optimistic", "pessimistic"):
            raise CostModelError(f"end={end!r}: must be 'optimistic' or 'pessimistic'")
        pick = 0 if end == "optimistic" else 1
        return dataclasses.replace(self, **{name: a.ends[pick] for name, a in ASSUMPTIONS.items()})

    def calibrated(self, factors: Mapping[str, float]) -> HardwareTarget:
        """A copy whose engine times are scaled by ``factors`` ({engine: factor > 0})."""
        for engine, factor in factors.items():
            if engine not in ENGINE_NAMES:
                raise CostModelError(f"factors[{engine!r}]: engine must be one of {ENGINE_NAMES}")
            if not (isinstance(factor, (int, float)) and factor > 0 and math.isfinite(factor)):
                raise CostModelError(f"factors[{engine!r}]={factor!r}: must be a finite number > 0")
        merged = {**dict(self.engine_factors), **{e: float(f) for e, f in factors.items()}}
        return dataclasses.replace(self, engine_factors=tuple(sorted(merged.items())))

    @cached_property
    def dma_bytes_per_ns(self) -> float:
        """Aggregate DMA bandwidth of one core (bytes/ns == GB/s)."""
        return self.dma_engines * self.dma_engine_bytes_per_ns

    def tensor_peak_flops(self, fp32: bool = False) -> float:
        """Dense TensorE peak in FLOP/s: 128x128 MACs per cycle (fp32 at a quarter)."""
        peak = 2.0 * self.pe_rows * self.pe_cols * self.tensor_ghz * 1e9
        return peak / 4.0 if fp32 else peak

    @cached_property
    def _clocks(self) -> dict[str, float]:
        return {"tensor": self.tensor_ghz, "vector": self.vector_ghz, "scalar": self.scalar_ghz,
                "gpsimd": self.gpsimd_ghz}

    def engine_ghz(self, engine: str) -> float:
        """Clock of a compute engine in GHz."""
        return self._clocks[engine]


@dataclass(frozen=True)
class Assumption:
    """A figure no public source pins down: its optimistic and pessimistic ends (the central value is the
    target's field) and why."""

    ends: tuple[object, object]   # (optimistic, pessimistic): the ends giving the shorter / longer time
    why: str


# The uncertainty band: the schedule runs once at the central values and once at each end (``summarize``).
# docs/nkisim-cost-model.md explains every entry; the same values hold on every target.
ASSUMPTIONS: dict[str, Assumption] = {
    "matmul_issue_cycles": Assumption(
        (7.0, 16.0), "fit to one profile; the profile counts two hardware matmuls per fp32 nc_matmul (7 each)"),
    "vector_overhead_cycles": Assumption(
        (60, 144), "nki-library's figure is for topk's DVE instructions; the arch guide's access overhead is ~60"),
    "dependent_interval_cycles": Assumption(
        (164, 264), "measured on NC-v2 ScalarE only; the arch guide's 'add ~100 cycles' gives 164"),
    "dma_descriptor_overhead_bytes": Assumption(
        (100.0, 256.0), "read off an unlabelled plot; 256 B is where the DMA guide says transfers turn overhead-bound"),
    "swdge_issue_ns": Assumption(
        (500.0, 850.0), "the DMA overview's curve implies ~850 ns per [128, <2 KiB] transfer; v2 gives 604"),
    "swdge_gpsimd_ns": Assumption(
        (50.0, 600.0), "no figure; profiles show short GpSimd ticks per DMA, at worst all of the ~600 ns"),
    "static_issue_ns": Assumption(
        (100.0, 600.0), "DGE reference: 'lowest per-transfer latency', no figure; at worst as the hardware DGE"),
    "unknown_copy_dge": Assumption(
        ("hwdge", "swdge"), "the compiler decides; published trn2 profiles of default-mode DMAs show software DGE"),
    "dma_transpose_from_hbm_efficiency": Assumption(
        (0.9, 0.5), "'up to 90 %' is the best case; the performance guide says 'much lower DMA bandwidth'"),
    "dma_transpose_from_sbuf_efficiency": Assumption(
        (0.5, 0.25), "'up to 50 %' is the best case; no measured figure"),
}


# Sources (docs/nkisim-cost-model.md "Hardware tables"): the architecture guides (clocks), the DMA
# bandwidth guide and the DMA overview (engines, bytes per engine), the DGE reference (hardware DGE).
TARGETS: dict[str, HardwareTarget] = {
    "trn1": HardwareTarget(
        name="trn1",
        tensor_ghz=2.8,               # trn1/inf2 arch guide table: TensorE 2.8 GHz
        vector_ghz=1.12,              # VectorE 1.12 GHz
        scalar_ghz=1.4,               # ScalarE 1.4 GHz
        gpsimd_ghz=1.4,               # GpSimd 1.4 GHz
        dma_engines=16,               # DMA bandwidth guide: 16 engines per core
        dma_engine_bytes_per_ns=17.0,  # DMA bandwidth guide: 17 B/ns per engine, 272 GB/s
    ),
    "trn2": HardwareTarget(
        name="trn2",
        tensor_ghz=2.4,               # trn2 arch guide table: TensorE 2.4 GHz
        vector_ghz=0.96,              # VectorE 0.96 GHz
        scalar_ghz=1.2,               # ScalarE 1.2 GHz
        gpsimd_ghz=1.2,               # GpSimd 1.2 GHz
        dma_engines=16,               # DMA bandwidth guide: 16 engines per core
        dma_engine_bytes_per_ns=23.0,  # DMA bandwidth guide: 23 B/ns per engine, 368 GB/s
        vector_fast_modes=True,       # trn2 arch guide "Vector Engine Performance Mode"
        hwdge_queues=2,               # DGE reference / trn2 arch guide: two DGE instances per core
    ),
    "trn3": HardwareTarget(
        name="trn3",
        tensor_ghz=2.4,               # trn3 arch guide table: TensorE 2.4 GHz
        vector_ghz=1.2,               # VectorE 1.2 GHz
        scalar_ghz=1.2,               # ScalarE 1.2 GHz
        gpsimd_ghz=1.2,               # GpSimd 1.2 GHz
        dma_engines=16,               # DMA bandwidth guide: 16 engines per core
        dma_engine_bytes_per_ns=33.0,  # DMA bandwidth guide: 33 B/ns per engine, 528 GB/s
        vector_fast_modes=True,       # assumption: the trn2 performance modes carry over
        scalar_small_dtype_speedup=2,  # trn3 arch guide: ScalarE 256 bf16/fp8 per cycle vs 128
        hwdge_queues=2,               # assumption: the trn2 DGE blocks carry over (NC-v3+)
    ),
}


_TARGET_ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
                   "trn3": "trn3", "gen4": "trn3"}


def get_target(target: object) -> HardwareTarget:
    """The hardware table of ``target``: a name, an alias, a HardwareTarget or anything with ``.name``."""
    if isinstance(target, HardwareTarget):
        return target
    name = target if isinstance(target, str) else getattr(target, "name", target)
    key = _TARGET_ALIASES.get(name.strip().lower()) if isinstance(name, str) else None
    if key is None:
        raise CostModelError(
            f"target={target!r}: must be one of {sorted(TARGETS)} (or gen2/gen3/gen4, inf2)")
    return TARGETS[key]


_ITEMSIZE = {
    "float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4,
    "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
    "float8_e4m3": 1, "float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e8m0fnu": 1,
    "int8": 1, "uint8": 1, "bool_": 1, "bool": 1,
}
_TWO_BYTE_FLOATS = frozenset({"bfloat16", "float16"})
_SMALL_FLOATS = frozenset({"bfloat16", "float16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn"})
_FP32_INPUTS = frozenset({"float32", "tfloat32"})
_DMA_OPS = frozenset({"dma_copy", "dma_transpose", "dma_compute", "sendrecv"})
_MATMUL_OPS = frozenset({"nc_matmul"})
# ops whose tensor-shaped reads stream through the engine and are counted for the x2 rule
_VECTOR_FAST_COPY_OPS = frozenset({"tensor_copy", "tensor_scalar"})


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype, 4)


class InstrTiming(NamedTuple):
    """How one instruction uses the machine (a NamedTuple: built once per instruction, so cheap).

    ``occupancy_ns``: time it blocks its engine (for DMA: time it uses the core's shared DMA
    bandwidth, at full rate). ``latency_ns``: time from its start until dependents may start
    (compute engines) -- for DMA, the fixed start latency ``dma_fixed_ns`` is separate and the
    transfer itself runs at ``dma_rate`` (fraction of the core's DMA bandwidth it can use).
    """

    engine: str
    occupancy_ns: float
    latency_ns: float
    dma_fixed_ns: float = 0.0
    dma_rate: float = 1.0
    queue: str = ""           # DMA: the in-order queue it runs on (DmaQueue value)
    issue_ns: float = 0.0     # DMA: time it holds its queue (descriptor generation)
    gpsimd_ns: float = 0.0    # DMA: GpSimd time it takes (software DGE)


def matmul_dims(instr: Instr) -> tuple[int, int, int]:
    """(K, M, N) of a TensorE matmul or transpose: contraction, stationary free, moving free.

    Uses the emulator's attrs when present, else the operand accesses (an ``nc_transpose`` of
    data [P, F] is a matmul with stationary = data (K=P, M=F) and moving = identity (N=P)).
    """
    k = m = n = None
    for key, value in instr.attrs:
        if key == "moving_free":
            n = value
        elif key == "stationary_free":
            m = value
        elif key == "contraction":
            k = value
    if m is not None and n is not None:
        if k is None:
            k = max((a.partitions for a in instr.accesses if not a.write), default=0)
        return int(k), int(m), int(n)
    by_role = {a.role: a for a in instr.accesses}
    if "stationary" in by_role and "moving" in by_role:
        st, mv = by_role["stationary"], by_role["moving"]
        return st.partitions, st.free_elems, mv.free_elems
    data = next((a for a in instr.accesses if not a.write), None)
    if data is None:
        return 0, 0, 0
    return data.partitions, data.free_elems, data.partitions


def _is_transpose(instr: Instr) -> bool:
    return instr.op == "nc_transpose" or bool(instr.attr("is_transpose", False))


def _matmul_fp32(instr: Instr) -> bool:
    flag = instr.attr("fp32")
    if flag is not None:
        return bool(flag)
    return any(a.dtype in _FP32_INPUTS for a in instr.accesses
               if not a.write and a.role in ("stationary", "moving", "data"))


def matmul_flops(instr: Instr) -> int:
    """Useful FLOPs of a matmul (2*K*M*N); 0 for transposes and non-matmuls."""
    if instr.op not in _MATMUL_OPS or _is_transpose(instr):
        return 0
    k, m, n = matmul_dims(instr)
    return 2 * k * m * n


def _tensor_timing(instr: Instr, hw: HardwareTarget) -> InstrTiming:
    _, m, n = matmul_dims(instr)
    # arch guide: back-to-back matmul costs max(N_moving, MM_INIT_LATENCY) cycles (a short stationary
    # lowers the floor); fp32 inputs cost about 4x.
    cycles = max(min(hw.matmul_min_cycles, m), n)
    if _matmul_fp32(instr):
        cycles *= 4
    elif instr.attr("perf_mode") == "double_row":
        cycles /= 2  # FP8 double_row gives 2x on v3+
    # tutorial fit: a fixed issue overhead per instruction on top of the streaming time
    occupancy = (cycles + hw.matmul_issue_cycles) / hw.tensor_ghz
    # assumption: results leave the pipeline MM_INIT_LATENCY cycles after the last column enters
    latency = occupancy + hw.matmul_min_cycles / hw.tensor_ghz
    return InstrTiming("tensor", occupancy, latency)


def _inner_contiguous(a: Access) -> bool:
    return a.free_elems <= 1 or a.contiguous_bytes >= min(2 * _itemsize(a.dtype),
                                                          a.free_elems * _itemsize(a.dtype))


def _compute_speedup(instr: Instr, engine: str, hw: HardwareTarget, streams: int) -> float:
    """Documented dtype-dependent fast modes (trn2+ VectorE, trn3 ScalarE)."""
    if engine == "vector":
        if not hw.vector_fast_modes:
            return 1.0
    elif engine != "scalar" or hw.scalar_small_dtype_speedup <= 1:
        return 1.0
    small = _TWO_BYTE_FLOATS if engine == "vector" else _SMALL_FLOATS
    has_sbuf = has_psum = psum_read = False
    contiguous = True
    for a in instr.accesses:
        buffer = a.buffer
        if buffer == "sbuf":
            if a.dtype not in small:
                return 1.0
            has_sbuf = True
        elif buffer == "psum":
            has_psum = True
            psum_read = psum_read or not a.write
        else:
            continue
        if contiguous and not _inner_contiguous(a):
            contiguous = False
    if not has_sbuf:
        return 1.0
    if engine == "scalar":
        return float(hw.scalar_small_dtype_speedup)  # trn3 arch guide: ScalarE 256 bf16/fp8 per cycle
    if instr.op in _VECTOR_FAST_COPY_OPS:
        # trn2 arch guide: 4x bf16/fp16 SBUF->SBUF inner-contiguous; 2x when one side PSUM or not contiguous
        return 2.0 if has_psum or not contiguous else 4.0
    if instr.op == "tensor_tensor" and streams >= 2 and not psum_read:
        return 2.0  # trn2 arch guide: tensor_tensor 2x when both inputs are bf16/fp16 in SBUF
    return 1.0


def _compute_timing(instr: Instr, engine: str, hw: HardwareTarget) -> InstrTiming:
    n = 0
    streams = 0
    for a in instr.accesses:
        n = max(n, a.free_elems)
        if not a.write and a.free_elems > 1:
            streams += 1
    # arch guide: ~N cycles with one input, ~2N with two; per-partition scalars ([P,1]) do not stream.
    work = n * min(max(streams, 1), 2) / _compute_speedup(instr, engine, hw, streams)
    # MIN_II ~64 cycles; plus a fixed per-instruction overhead (VectorE: nki-library's figure; others: the
    # arch guide's ~60-cycle SBUF/PSUM access overhead).
    overhead = hw.vector_overhead_cycles if engine == "vector" else hw.access_overhead_cycles
    cycles = max(hw.min_ii_cycles, work) + overhead
    ghz = hw.engine_ghz(engine)
    occupancy = cycles / ghz
    # perf guide: back-to-back dependent tiny instructions start dependent_interval_cycles apart; the part
    # of that interval a tiny instruction's occupancy does not cover delays every dependent.
    extra = max(0.0, hw.dependent_interval_cycles - (hw.min_ii_cycles + overhead))
    return InstrTiming(engine, occupancy, occupancy + extra / ghz)


class DmaIssue(NamedTuple):
    """Where a DMA instruction's descriptors are generated: its queue (``DmaQueue`` value), the time it holds
    that queue (``issue_ns``) and the GpSimd time it takes (``gpsimd_ns``, software DGE only)."""

    queue: str
    issue_ns: float
    gpsimd_ns: float


def dma_issue(op: str, hw: HardwareTarget, dge_mode: str = "unknown", trigger: str = "unknown",
              src_shape: Sequence[int] | None = None, itemsize: int = 2) -> DmaIssue:
    """The queue and descriptor-generation figures of one DMA instruction (``op`` ``dma_copy``,
    ``dma_transpose`` or ``sendrecv``) from its ``dge_mode`` and trigger engine (DGE reference "DGE Modes";
    docs/nkisim-cost-model.md "What a DMA instruction costs"). ``src_shape`` / ``itemsize``: a
    ``dma_transpose``'s source, which decides whether ``unknown`` means the hardware DGE (None: taken to
    have the hardware-DGE form). Pure: the planner's estimate uses it too."""
    if op == "sendrecv":
        return DmaIssue(DmaQueue.SENDRECV.value, hw.static_issue_ns, 0.0)
    mode = dge_mode
    if mode == "unknown":
        if op == "dma_transpose":
            # DGE reference: a static transpose runs with 'none' or 'hwdge'; hwdge only in its form
            ok = src_shape is None or hwdge_transpose_violation(src_shape, itemsize) is None
            mode = "hwdge" if ok and hw.hwdge_queues else "none"
        else:
            mode = hw.unknown_copy_dge
    if mode == "hwdge" and not hw.hwdge_queues:
        mode = "swdge"   # no hardware DGE before NC-v3
    if mode == "hwdge":
        queue = {"scalar": DmaQueue.HWDGE_ACT, "sync": DmaQueue.HWDGE_SP}.get(trigger, DmaQueue.HWDGE_ANY)
        return DmaIssue(queue.value, hw.hwdge_issue_ns, 0.0)
    if mode == "swdge":
        return DmaIssue(DmaQueue.SWDGE.value, hw.swdge_issue_ns, hw.swdge_gpsimd_ns)
    return DmaIssue(DmaQueue.STATIC.value, hw.static_issue_ns, 0.0)


def _dma_route(instr: Instr, hw: HardwareTarget) -> DmaIssue:
    """(queue, issue ns, GpSimd ns) of a DMA instruction from its dge_mode and trigger engine."""
    src = next((a for a in instr.accesses if not a.write), None)
    return dma_issue(instr.op, hw, instr.attr("dge_mode", "unknown"), instr.attr("engine", "unknown"),
                     src.shape if src is not None else None, _itemsize(src.dtype) if src is not None else 2)


def transpose_block_bytes(dst_shape: Sequence[int], itemsize: int, hw: HardwareTarget) -> int:
    """Bytes a ``dma_transpose`` writing ``dst_shape`` is charged: its destination in whole
    [128 partitions x 16 elements] blocks, whatever part of each it fills (trn2 arch guide "DMA Transpose":
    the 16 engines write one such block at a time). ``[P, ..., F]`` is ``ceil(P/128) * prod(middle) *
    ceil(F/16)`` blocks."""
    shape = tuple(int(d) for d in dst_shape)
    if not shape:
        return 0
    outer = 1
    for d in shape[1:-1]:
        outer *= d
    inner = shape[-1] if len(shape) > 1 else 1
    blocks = (-(-shape[0] // hw.dma_transpose_block_partitions) * outer
              * -(-inner // hw.dma_transpose_block_elems))
    return blocks * hw.dma_transpose_block_partitions * hw.dma_transpose_block_elems * itemsize


def dma_transpose_efficiency(hw: HardwareTarget, from_sbuf: bool) -> float:
    """Share of the core's DMA bandwidth a ``dma_transpose``'s blocks move at (trn2 arch guide: up to 90 %
    from HBM, up to 50 % SBUF to SBUF)."""
    return hw.dma_transpose_from_sbuf_efficiency if from_sbuf else hw.dma_transpose_from_hbm_efficiency


def dma_transpose_ns(dst_shape: Sequence[int], itemsize: int, hw: HardwareTarget, from_sbuf: bool = False) -> float:
    """Bandwidth time (occupancy) of one ``dma_transpose`` writing ``dst_shape``: its whole blocks at the
    transpose efficiency (the 16 engines cooperate on each block, so the transfer may use all of them)."""
    return (transpose_block_bytes(dst_shape, itemsize, hw)
            / (hw.dma_bytes_per_ns * dma_transpose_efficiency(hw, from_sbuf)))


def _transpose_block_bytes(instr: Instr, hw: HardwareTarget) -> int:
    """Bytes a dma_transpose instruction is charged (``transpose_block_bytes`` of its destination)."""
    dst = next((a for a in instr.accesses if a.write), None)
    if dst is None or not dst.shape:
        return 0
    return transpose_block_bytes(dst.shape, _itemsize(dst.dtype), hw)


def _dma_timing(instr: Instr, hw: HardwareTarget) -> InstrTiming:
    read_bytes = write_bytes = 0
    contiguous = 0
    partitions = 0
    src_on_chip = False
    for a in instr.accesses:
        if a.write:
            write_bytes += a.nbytes
        else:
            read_bytes += a.nbytes
            if a.buffer in ("sbuf", "psum"):
                src_on_chip = True
        if a.contiguous_bytes > 0 and (contiguous == 0 or a.contiguous_bytes < contiguous):
            contiguous = a.contiguous_bytes
        if a.buffer in ("sbuf", "psum") and a.partitions > partitions:
            partitions = a.partitions
    queue, issue, gpsimd = _dma_route(instr, hw)
    nbytes = max(read_bytes, write_bytes)
    if nbytes == 0:
        return InstrTiming("dma", 0.0, hw.dma_fixed_ns, hw.dma_fixed_ns, 1.0, queue, issue, gpsimd)
    contiguous = contiguous or nbytes
    if instr.op == "dma_transpose":
        efficiency = dma_transpose_efficiency(hw, src_on_chip)
        # the 16 engines cooperate on each block (arch guide), so the transfer may use all of them
        occupancy = max(nbytes, _transpose_block_bytes(instr, hw)) / (hw.dma_bytes_per_ns * efficiency)
        rate = 1.0
    else:
        # fit to the DMA overview's curve: each descriptor (contiguous run) costs a fixed C0 bytes' time
        efficiency = contiguous / (contiguous + hw.dma_descriptor_overhead_bytes)
        # DMA overview: each engine serves 8 partitions, so P partitions use ceil(P / 8) of the 16
        # engines; HBM<->HBM spreads its descriptors over all engines.
        if partitions:
            engines = min(hw.dma_engines, math.ceil(partitions * hw.dma_engines / 128))
        else:
            engines = min(hw.dma_engines, max(1, math.ceil(nbytes / contiguous)))
        rate = engines / hw.dma_engines
        occupancy = nbytes / (hw.dma_bytes_per_ns * efficiency)
    start = max(hw.dma_fixed_ns, issue)
    return InstrTiming("dma", occupancy, start + occupancy / rate, start, rate, queue, issue, gpsimd)


def instr_timing(instr: Instr, target: str | HardwareTarget) -> InstrTiming:
    """Occupancy and latency of one instruction on ``target``."""
    hw = get_target(target)
    engine = instr.engine
    if engine == "dma" or instr.op in _DMA_OPS:
        timing = _dma_timing(instr, hw)
    elif engine == "tensor":
        timing = _tensor_timing(instr, hw)
    elif engine in ("vector", "scalar", "gpsimd"):
        timing = _compute_timing(instr, engine, hw)
    elif instr.op == "core_barrier" or engine == "sync":
        return InstrTiming("sync", 0.0, 0.0)
    else:
        raise CostModelError(f"instr.engine={engine!r} (op {instr.op!r}): must be one of {ENGINE_NAMES}")
    if hw.engine_factors:
        factor = dict(hw.engine_factors).get(timing.engine, 1.0)
        if timing.engine == "dma":
            # the transfer time scales; the fixed start latency stays as documented
            occupancy = timing.occupancy_ns * factor
            return timing._replace(occupancy_ns=occupancy,
                                   latency_ns=timing.dma_fixed_ns + occupancy / timing.dma_rate)
        return timing._replace(occupancy_ns=timing.occupancy_ns * factor,
                               latency_ns=timing.latency_ns * factor)
    return timing


def instr_cost_ns(instr: Instr, target: str | HardwareTarget) -> float:
    """Engine occupancy of one instruction in ns.

    Compute engines: the time the engine is blocked. DMA: the time of the transfer alone on an
    idle core -- the fixed start latency plus the bytes at the bandwidth this transfer can use.
    """
    t = instr_timing(instr, target)
    if t.engine == "dma":
        return t.latency_ns
    return t.occupancy_ns


# ----------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Summary:
    """What a run costs on the modelled core(s)."""

    modelled_us: float
    engine_busy_us: Mapping[str, float]
    tensor_util: float               # TensorE busy / (modelled time x cores)
    hbm_read_bytes: int
    hbm_write_bytes: int
    instr_counts: Mapping[str, int]
    matmul_flops: int                # 2*K*M*N per matmul, transposes excluded
    peak_sbuf_bytes_per_partition: int
    peak_psum_banks: int
    target: str
    lnc: int
    core_us: tuple[float, ...] = ()  # modelled time per core (program)
    flops_util: float = 0.0          # matmul FLOPs / (modelled time x cores x bf16 peak)
    instructions: int = 0
    # engine -> {engine it waited for: us idle}, summed over cores: where the overlap breaks
    stall_us: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    # occupancy per op ('nc_matmul[transpose]' for is_transpose matmuls; DMA: bandwidth time)
    op_busy_us: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # the uncertainty band: the modelled time with every assumption at its optimistic / pessimistic end
    # (ASSUMPTIONS); (modelled_us, modelled_us) when not computed
    band_us: tuple[float, float] = (0.0, 0.0)
    queue_busy_us: Mapping[str, float] = dataclasses.field(default_factory=dict)  # DMA queue -> issue time

    @property
    def flops_util_pessimistic(self) -> float:
        """``flops_util`` at the pessimistic end of the band."""
        high = self.band_us[1]
        return self.flops_util * self.modelled_us / high if high > 0 else 0.0

    def band_text(self) -> str:
        """``modelled 125.5 us [110.2 .. 161.0]``."""
        low, high = self.band_us
        return f"modelled {self.modelled_us:.1f} us [{low:.1f} .. {high:.1f}]"

    def to_dict(self) -> dict:
        """JSON-ready copy."""
        return {
            "modelled_us": self.modelled_us,
            "engine_busy_us": dict(self.engine_busy_us),
            "tensor_util": self.tensor_util,
            "hbm_read_bytes": self.hbm_read_bytes,
            "hbm_write_bytes": self.hbm_write_bytes,
            "instr_counts": dict(self.instr_counts),
            "matmul_flops": self.matmul_flops,
            "peak_sbuf_bytes_per_partition": self.peak_sbuf_bytes_per_partition,
            "peak_psum_banks": self.peak_psum_banks,
            "target": self.target,
            "lnc": self.lnc,
            "core_us": list(self.core_us),
            "flops_util": self.flops_util,
            "instructions": self.instructions,
            "stall_us": {e: dict(w) for e, w in self.stall_us.items()},
            "op_busy_us": dict(self.op_busy_us),
            "band_us": list(self.band_us),
            "flops_util_pessimistic": self.flops_util_pessimistic,
            "queue_busy_us": dict(self.queue_busy_us),
        }

    def format(self) -> str:
        """A readable text table."""
        cores = max(1, len(self.core_us))
        lines = [
            f"nkisim cost model: target {self.target}, lnc {self.lnc}, {self.instructions} instructions",
            f"  modelled time        {self.modelled_us:12.3f} us   [{self.band_us[0]:.3f} .. {self.band_us[1]:.3f}]"
            + (f"   (per core: {', '.join(f'{c:.3f}' for c in self.core_us)})" if cores > 1 else ""),
            f"  TensorE utilisation  {self.tensor_util:12.1%}",
            f"  matmul FLOPs         {self.matmul_flops:12.4g}   ({self.flops_util:.1%} of bf16 peak)",
            f"  HBM read / write     {self.hbm_read_bytes:12d} / {self.hbm_write_bytes} bytes",
            (f"  peak SBUF / PSUM     {self.peak_sbuf_bytes_per_partition:12d} B per partition / "
             f"{self.peak_psum_banks} banks"),
            "  engine      busy us    busy %",
        ]
        total = self.modelled_us * cores
        for engine, busy in self.engine_busy_us.items():
            share = busy / total if total > 0 else 0.0
            lines.append(f"  {engine:<8} {busy:10.3f}  {share:8.1%}")
        for engine, waits in self.stall_us.items():
            if waits:
                lines.append(f"  {engine} idle, waiting for: " + ", ".join(
                    f"{producer} {us:.3f} us" for producer, us in sorted(waits.items(), key=lambda kv: -kv[1])))
        if self.queue_busy_us:
            lines.append("  DMA queue issue us: " + ", ".join(
                f"{q} {us:.3f}" for q, us in sorted(self.queue_busy_us.items())))
        if self.op_busy_us:
            lines.append("  busy us by op: " + ", ".join(
                f"{op} {us:.3f}" for op, us in sorted(self.op_busy_us.items(), key=lambda kv: -kv[1])))
        lines.append("  instruction counts: " + ", ".join(
            f"{op} {n}" for op, n in sorted(self.instr_counts.items())))
        return "\n".join(lines)


def _split_programs(traces: Trace | Sequence[Trace] | Iterable[Instr]) -> list[list[Instr]]:
    """One instruction list per core: by program_id, or one per trace when several untagged."""
    if isinstance(traces, Trace):
        trace_list: list = [traces.instrs]
    elif isinstance(traces, Sequence) and traces and all(isinstance(t, Trace) for t in traces):
        trace_list = [t.instrs for t in traces]
    else:
        trace_list = [list(traces)]
    ids_per_trace = [{i.program_id for i in instrs} for instrs in trace_list]
    if len(trace_list) > 1 and all(ids <= {0} for ids in ids_per_trace):
        return [list(instrs) for instrs in trace_list]
    programs: dict[int, list[Instr]] = {}
    for instrs in trace_list:
        for instr in instrs:
            programs.setdefault(instr.program_id, []).append(instr)
    return [programs[pid] for pid in sorted(programs)] or [[]]


def summarize(traces: Trace | Sequence[Trace] | Iterable[Instr], target: str | HardwareTarget,
              lnc: int = 1, peaks: Mapping[str, int] | None = None, band: bool = True) -> Summary:
    """Schedule the trace(s) on the modelled core(s) of ``target`` and summarise the run.

    ``peaks`` (filled by the emulator): {'sbuf_bytes_per_partition': int, 'psum_banks': int}.
    ``band``: also schedule with every assumption at its optimistic and its pessimistic end
    (``Summary.band_us``); False skips the two extra schedules.
    """
    from .schedule import schedule_programs  # local: schedule imports this module

    hw = get_target(target)
    if lnc not in (1, 2):
        raise CostModelError(f"lnc={lnc!r}: must be 1 or 2")
    programs = _split_programs(traces)
    result = schedule_programs(programs, hw)
    counts = result.instr_counts
    flops = result.matmul_flops
    hbm_read, hbm_write = result.hbm_read_bytes, result.hbm_write_bytes
    modelled_us = result.makespan_ns / 1000.0
    if band:
        ends = tuple(schedule_programs(programs, hw.bound(end)).makespan_ns / 1000.0
                     for end in ("optimistic", "pessimistic"))
        band_us = (min(ends[0], modelled_us), max(ends[1], modelled_us))
    else:
        band_us = (modelled_us, modelled_us)
    cores = max(1, len(programs))
    busy_us = {e: result.busy_ns.get(e, 0.0) / 1000.0 for e in ENGINE_NAMES}
    capacity = modelled_us * cores
    peaks = peaks or {}
    return Summary(
        modelled_us=modelled_us,
        engine_busy_us=busy_us,
        tensor_util=busy_us["tensor"] / capacity if capacity > 0 else 0.0,
        hbm_read_bytes=hbm_read,
        hbm_write_bytes=hbm_write,
        instr_counts=counts,
        matmul_flops=flops,
        peak_sbuf_bytes_per_partition=int(peaks.get("sbuf_bytes_per_partition", 0)),
        peak_psum_banks=int(peaks.get("psum_banks", 0)),
        target=hw.name,
        lnc=lnc,
        core_us=tuple(t / 1000.0 for t in result.core_makespan_ns),
        flops_util=(flops / (capacity * 1e-6 * hw.tensor_peak_flops()) if capacity > 0 else 0.0),
        instructions=sum(len(p) for p in programs),
        stall_us={e: {p: t / 1000.0 for p, t in w.items()} for e, w in result.stalls_ns.items()},
        op_busy_us={op: t / 1000.0 for op, t in result.op_busy_ns.items()},
        band_us=band_us,
        queue_busy_us={q: t / 1000.0 for q, t in result.queue_busy_ns.items()},
    )

