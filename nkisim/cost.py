"""Cost model of one NeuronCore per target, from the documented hardware figures.

Every figure carries its source (``../shared/docs/nki-api.md`` §8 unless said otherwise); choices the
docs do not make are marked *inference* here and explained in ``docs/nkisim-cost-model.md``.

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

from .trace import Access, Instr, Trace

__all__ = [
    "TARGETS",
    "CostModelError",
    "Engine",
    "HardwareTarget",
    "InstrTiming",
    "Summary",
    "get_target",
    "instr_cost_ns",
    "instr_timing",
    "matmul_dims",
    "matmul_flops",
    "summarize",
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
    """Documented figures of one NeuronCore of a target (all per core)."""

    name: str
    tensor_ghz: float            # TensorE clock
    vector_ghz: float            # VectorE clock
    scalar_ghz: float            # ScalarE clock
    gpsimd_ghz: float            # GpSimd clock
    dma_engines: int             # DMA engines (queues) per core
    dma_engine_bytes_per_ns: float  # bandwidth of one DMA engine
    pe_rows: int = 128           # PE array 128x128 (all targets)
    pe_cols: int = 128
    vector_fast_modes: bool = False  # trn2+ VectorE 2x/4x modes for 2-byte copies
    scalar_small_dtype_speedup: int = 1  # trn3 ScalarE: 256 bf16/fp8 per cycle vs 128 others
    # Compute-engine figures, the same on every documented target.
    min_ii_cycles: int = 64              # MIN_II ~64 cycles for small tiles (§8 "VectorE and ScalarE")
    access_overhead_cycles: int = 60     # ~60 cycles fixed per SBUF/PSUM access (§8, stated for v2)
    dependent_overhead_cycles: int = 100  # ~100 cycles static overhead when back-to-back dependent
    matmul_min_cycles: int = 64          # MM_INIT_LATENCY = 64 cycles (§8 "TensorE matmul")
    dma_fixed_ns: float = 1300.0         # ~1300 ns semaphore-to-start per DMA transfer (§8 "DMA")
    # inference: a descriptor's fixed cost, expressed as the bytes that could have moved meanwhile;
    # calibrated so >= 4 KiB runs reach ~94 %, 2 KiB ~89 %, <= 256 B <= 50 % (the guide's thresholds).
    dma_descriptor_overhead_bytes: float = 256.0
    dma_transpose_from_hbm_efficiency: float = 0.9   # trn2 arch guide: HBM->SBUF up to 90 %
    dma_transpose_from_sbuf_efficiency: float = 0.5  # trn2 arch guide: SBUF->SBUF up to 50 %
    # Calibration: per-engine factors on the modelled times, fitted from hardware latencies
    # (see docs/nkisim-cost-model.md, "Calibration"); () means the documented figures as they are.
    engine_factors: tuple[tuple[str, float], ...] = ()

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


# Sources: docs/nki-api.md §8 table (trainium_inferentia2_arch.html, trainium2_arch.html,
# trainium3_arch.html, nki-dma-bandwidth-guide.html).
TARGETS: dict[str, HardwareTarget] = {
    "trn1": HardwareTarget(
        name="trn1",
        tensor_ghz=2.8,               # §8: TensorE clock 2.8 GHz (NC-v2)
        vector_ghz=1.12,              # §8: VectorE 1.12 GHz, 128 lanes
        scalar_ghz=1.4,               # §8: ScalarE 1.4 GHz, 128 per cycle
        gpsimd_ghz=1.4,               # §8: GpSimd 1.4 GHz, 8 x 512-bit cores (= 128 fp32 lanes)
        dma_engines=16,               # §8: 16 DMA engines per core
        dma_engine_bytes_per_ns=17.0,  # §8: 16 x 17 B/ns = 272 GB/s (DMA bandwidth guide)
    ),
    "trn2": HardwareTarget(
        name="trn2",
        tensor_ghz=2.4,               # §8: TensorE clock 2.4 GHz (NC-v3)
        vector_ghz=0.96,              # §8: VectorE 0.96 GHz; 512 bf16 elem/cycle in perf mode
        scalar_ghz=1.2,               # §8: ScalarE 1.2 GHz, 128 per cycle
        gpsimd_ghz=1.2,               # §8: GpSimd 1.2 GHz
        dma_engines=16,               # §8: 16 DMA engines per core
        dma_engine_bytes_per_ns=23.0,  # §8: 16 x 23 B/ns = 368 GB/s
        vector_fast_modes=True,       # §8: trn2 tensor_copy/tensor_scalar 4x/2x, tensor_tensor 2x
    ),
    "trn3": HardwareTarget(
        name="trn3",
        tensor_ghz=2.4,               # §8: TensorE clock 2.4 GHz (NC-v4)
        vector_ghz=1.2,               # §8: VectorE 1.2 GHz; 512 bf16/fp8, 256 others
        scalar_ghz=1.2,               # §8: ScalarE 1.2 GHz; 256 bf16/fp8, 128 others
        gpsimd_ghz=1.2,               # §8: GpSimd 1.2 GHz, 128 per cycle
        dma_engines=16,               # §8: 16 DMA engines per core
        dma_engine_bytes_per_ns=33.0,  # §8: 16 x 33 B/ns = 528 GB/s
        vector_fast_modes=True,       # inference: trn3 VectorE has the same 512/256 modes as trn2
        scalar_small_dtype_speedup=2,  # §8: ScalarE 256 bf16/fp8 per cycle vs 128 others
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
    # §8: back-to-back matmul costs max(min(64, N_stationary), N_moving) cycles; x4 for fp32.
    cycles = max(min(hw.matmul_min_cycles, m), n)
    if _matmul_fp32(instr):
        cycles *= 4
    elif instr.attr("perf_mode") == "double_row":
        cycles /= 2  # §8: FP8 double_row gives 2x on v3+
    occupancy = cycles / hw.tensor_ghz
    # inference: results leave the deep pipeline MM_INIT_LATENCY cycles after the last column enters
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
        return float(hw.scalar_small_dtype_speedup)  # §8: trn3 ScalarE 256 bf16/fp8 per cycle
    if instr.op in _VECTOR_FAST_COPY_OPS:
        # §8: 4x bf16/fp16 SBUF->SBUF inner-contiguous; 2x when one side PSUM or non-contiguous
        return 2.0 if has_psum or not contiguous else 4.0
    if instr.op == "tensor_tensor" and streams >= 2 and not psum_read:
        return 2.0  # §8: tensor_tensor 2x when both inputs are bf16 (fp16: inference) in SBUF
    return 1.0


def _compute_timing(instr: Instr, engine: str, hw: HardwareTarget) -> InstrTiming:
    n = 0
    streams = 0
    for a in instr.accesses:
        n = max(n, a.free_elems)
        if not a.write and a.free_elems > 1:
            streams += 1
    # §8: ~N cycles with one input, ~2N with two; per-partition scalars ([P,1]) do not stream.
    work = n * min(max(streams, 1), 2) / _compute_speedup(instr, engine, hw, streams)
    # §8: MIN_II ~64 cycles; plus the ~60-cycle fixed SBUF/PSUM access overhead per instruction.
    cycles = max(hw.min_ii_cycles, work) + hw.access_overhead_cycles
    ghz = hw.engine_ghz(engine)
    occupancy = cycles / ghz
    # §8: ~100 cycles static overhead when back-to-back dependent: the 60 above plus 40 more
    # before a dependent may start.
    latency = occupancy + (hw.dependent_overhead_cycles - hw.access_overhead_cycles) / ghz
    return InstrTiming(engine, occupancy, latency)


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
    nbytes = max(read_bytes, write_bytes)
    if nbytes == 0:
        return InstrTiming("dma", 0.0, hw.dma_fixed_ns, hw.dma_fixed_ns, 1.0)
    contiguous = contiguous or nbytes
    if instr.op == "dma_transpose":
        # trn2 arch guide: DMA transpose reaches up to 90 % (from HBM) / 50 % (SBUF->SBUF)
        efficiency = (hw.dma_transpose_from_sbuf_efficiency if src_on_chip
                      else hw.dma_transpose_from_hbm_efficiency)
    else:
        # inference: each descriptor (contiguous run) pays a fixed cost worth C0 bytes of transfer
        efficiency = contiguous / (contiguous + hw.dma_descriptor_overhead_bytes)
    # §8 "use P = 128 so that all 16 engines participate": an on-chip side with P partitions
    # spreads over ceil(P / 8) engines; HBM<->HBM spreads its descriptors over all engines.
    if partitions:
        engines = min(hw.dma_engines, math.ceil(partitions * hw.dma_engines / 128))
    else:
        engines = min(hw.dma_engines, max(1, math.ceil(nbytes / contiguous)))
    rate = engines / hw.dma_engines
    occupancy = nbytes / (hw.dma_bytes_per_ns * efficiency)
    return InstrTiming("dma", occupancy, hw.dma_fixed_ns + occupancy / rate, hw.dma_fixed_ns, rate)


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
        }

    def format(self) -> str:
        """A readable text table."""
        cores = max(1, len(self.core_us))
        lines = [
            f"nkisim cost model: target {self.target}, lnc {self.lnc}, {self.instructions} instructions",
            f"  modelled time        {self.modelled_us:12.3f} us"
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
              lnc: int = 1, peaks: Mapping[str, int] | None = None) -> Summary:
    """Schedule the trace(s) on the modelled core(s) of ``target`` and summarise the run.

    ``peaks`` (filled by the emulator): {'sbuf_bytes_per_partition': int, 'psum_banks': int}.
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
    )

