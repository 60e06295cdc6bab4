"""Analytic per-engine cost accounting with the figures of nkisim's cost model (trn1/2/3).

Pure Python. The figures are read from nkisim's target tables (``nkisim.cost.TARGETS``, the central
values; ``nkisim.targets.TARGETS`` for SBUF sizes), so the planner and the emulator agree about the
hardware; the formulas restate ``docs/nkisim-cost-model.md`` so the planner can estimate a plan without
running it: TensorE ``max(min(64, M), N)`` cycles (x4 fp32) plus the issue overhead; Vector/Scalar/GpSimd
``max(64, N*streams/speedup)`` plus the engine's fixed overhead; DMA bytes over the core's bandwidth at the
descriptor efficiency ``run / (run + C0)``, at least each queue's descriptor generation (one issue time per
instruction on the queue nkisim routes it to; the queues run side by side), plus the start latency.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from conv3d_bwd.nkisim.cost import TARGETS as COST_TARGETS
from conv3d_bwd.nkisim.cost import HardwareTarget, dma_issue, dma_transpose_ns
from conv3d_bwd.nkisim.dge import DmaQueue
from conv3d_bwd.nkisim.targets import TARGETS as SPEC_TARGETS

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
# compose_ns's stall share (section_ns), fitted on every feasible candidate of 7 bench shapes at LNC1 and
# LNC2 (stem: its 11 lowest-estimate candidates; benchmarks/estimate_rank.py; kernels/README.md "Planner
# rules"): the results are flat between 0.1 and 0.2
SECTION_LOSS = 0.125
SECTION_POWER = 0.5


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
    matmul_min_cycles: int = 64
    matmul_issue_cycles: float = 14.0
    min_ii_cycles: int = 64
    access_overhead_cycles: int = 60
    vector_overhead_cycles: int = 144
    dma_descriptor_overhead_bytes: float = 150.0
    dma_issue_ns: float = 600.0              # per DMA instruction on its queue (the copies' DGE mode)
    dma_transpose_efficiency: float = 0.9    # dma_transpose from HBM, whole blocks
    # the nkisim target these figures come from: its DMA functions (transpose blocks, DGE queues) are the
    # one source of the DMA charges (``CostSheet.dma_transpose``, ``CostSheet.dma``)
    cost_target: HardwareTarget | None = None

    @property
    def target(self) -> HardwareTarget:
        return self.cost_target if self.cost_target is not None else COST_TARGETS[self.name]

    def transpose_ns(self, dst_shape: Sequence[int], itemsize: int, from_sbuf: bool = False) -> float:
        """Bandwidth time of one ``dma_transpose`` writing ``dst_shape`` (nkisim's whole-block charge,
        ``nkisim.cost.dma_transpose_ns``); a lone transfer lands that long after its start latency."""
        return dma_transpose_ns(dst_shape, itemsize, self.target, from_sbuf)

    def ghz(self, engine: str) -> float:
        return {"vector": self.vector_ghz, "scalar": self.scalar_ghz, "gpsimd": self.gpsimd_ghz,
                "tensor": self.tensor_ghz}[engine]

    def descriptor_efficiency(self, run_bytes: float) -> float:
        """Share of the DMA bandwidth a transfer of ``run_bytes`` contiguous runs uses."""
        return run_bytes / (run_bytes + self.dma_descriptor_overhead_bytes)

    def lone_dma_ns(self, nbytes: float, run_bytes: float, partitions: int) -> float:
        """One transfer alone on the queues (nkisim): start latency, then its bytes at the share of the
        16 DMA engines its partitions reach (``min(16, ceil(P / 8))`` of them)."""
        run = max(1.0, min(run_bytes, nbytes))
        rate = min(16, -(-max(1, partitions) * 16 // 128)) / 16
        return self.dma_fixed_ns + nbytes / (self.dma_bytes_per_ns * self.descriptor_efficiency(run)) / rate

    def compute_overhead(self, engine: str) -> float:
        """Fixed cycles per instruction of a VectorE / ScalarE / GpSimd instruction."""
        return self.vector_overhead_cycles if engine == "vector" else self.access_overhead_cycles


def figures_of(hw: HardwareTarget) -> TargetFigures:
    """The planner's figures of one nkisim cost target (its central values)."""
    issue = {"hwdge": hw.hwdge_issue_ns, "swdge": hw.swdge_issue_ns}.get(hw.unknown_copy_dge, hw.static_issue_ns)
    return TargetFigures(
        hw.name, hw.tensor_ghz, hw.vector_ghz, hw.scalar_ghz, hw.gpsimd_ghz, hw.dma_bytes_per_ns,
        hw.vector_fast_modes, hw.scalar_small_dtype_speedup, SPEC_TARGETS[hw.name].usable_sbuf_bytes,
        SPEC_TARGETS[hw.name].psum_banks, hw.dma_fixed_ns, hw.matmul_min_cycles, hw.matmul_issue_cycles,
        hw.min_ii_cycles, hw.access_overhead_cycles, hw.vector_overhead_cycles, hw.dma_descriptor_overhead_bytes,
        issue, hw.dma_transpose_from_hbm_efficiency, hw)


TARGET_FIGURES = {name: figures_of(hw) for name, hw in COST_TARGETS.items()}


@dataclass
class CostSheet:
    """Accumulated busy time (ns) per engine, plus DMA start latencies."""

    hw: TargetFigures
    busy: dict[str, float] = field(default_factory=lambda: {e: 0.0 for e in ENGINES})
    counts: dict[str, int] = field(default_factory=dict)
    # busy time per section of the kernel (see ``section``); "main" until the first call
    sections: dict[str, dict[str, float]] = field(default_factory=dict)
    _open: str = "main"
    waits: dict[str, float] = field(default_factory=dict)
    # pipelined steps per section (``pipeline_steps``; ``section_ns``'s few-step term)
    steps: dict[str, int] = field(default_factory=dict)
    # units per section streamed through a load ring (``ring_units``)
    units: dict[str, int] = field(default_factory=dict)
    # per section: the wait for its first step's loads already charged in the fill (``pipeline_head``)
    steps_head: dict[str, float] = field(default_factory=dict)
    # per section: the DMA -> PE flow-shop makespan of its steps (``flow_shop``; ``section_ns``'s ``flow_ns``)
    flow: dict[str, float] = field(default_factory=dict)
    _mark: dict[str, float] = field(default_factory=lambda: {e: 0.0 for e in ENGINES})
    # DMA descriptor generation per queue (``nkisim.dge.DmaQueue`` value -> issue ns), as nkisim routes the
    # kernel's DMAs (``nkisim.cost.dma_issue``); the GpSimd time software DGE takes (not GpSimd busy: it does
    # not hold GpSimd's instruction stream in nkisim either)
    queue_issue: dict[str, float] = field(default_factory=dict)
    dge_gpsimd_ns: float = 0.0
    # DMA ns charged per op ("dma_copy", "dma_transpose") through ``dma`` / ``dma_transpose``
    dma_op_ns: dict[str, float] = field(default_factory=dict)
    # per section: the DGE issue time per queue charged in it (``section_busy``'s queue floor)
    section_queues: dict[str, dict[str, float]] = field(default_factory=dict)
    _qmark: dict[str, float] = field(default_factory=dict)
    # the part of ``queue_issue`` booked under ``ahead`` (loads no engine's program order holds), in total
    # and per section; ``ahead_tail``: per section, the share of its run after its last ahead load lands
    ahead_issue: dict[str, float] = field(default_factory=dict)
    section_ahead: dict[str, dict[str, float]] = field(default_factory=dict)
    ahead_tail: dict[str, float] = field(default_factory=dict)
    _amark: dict[str, float] = field(default_factory=dict)
    _ahead: bool = False
    # stores that wait for one another (``dma``'s ``serial``): their lone times in total and per section
    serial_ns: float = 0.0
    section_serial: dict[str, float] = field(default_factory=dict)
    _smark: float = 0.0

    def section(self, name: str) -> None:
        """Charge what follows to section ``name`` (the busy time since the previous call goes to the
        section open until now). A section may be opened several times (tap passes): it accumulates."""
        self._close()
        self._open = name

    def _close(self) -> None:
        delta = {e: self.busy[e] - self._mark[e] for e in ENGINES}
        if any(delta.values()) or self._open in self.sections:
            acc = self.sections.setdefault(self._open, dict.fromkeys(ENGINES, 0.0))
            for e in ENGINES:
                acc[e] += delta[e]
        for q, ns in self.queue_issue.items():
            if ns != self._qmark.get(q, 0.0):
                acc_q = self.section_queues.setdefault(self._open, {})
                acc_q[q] = acc_q.get(q, 0.0) + ns - self._qmark.get(q, 0.0)
        for q, ns in self.ahead_issue.items():
            if ns != self._amark.get(q, 0.0):
                acc_a = self.section_ahead.setdefault(self._open, {})
                acc_a[q] = acc_a.get(q, 0.0) + ns - self._amark.get(q, 0.0)
        if self.serial_ns != self._smark:
            self.section_serial[self._open] = self.section_serial.get(self._open, 0.0) + self.serial_ns - self._smark
        self._mark = dict(self.busy)
        self._qmark = dict(self.queue_issue)
        self._amark = dict(self.ahead_issue)
        self._smark = self.serial_ns

    def serial_trail(self, ns: float) -> None:
        """The open section's last serial store is charged as its trail (``ns``: what the trail charges of
        it): not also in the chain."""
        self.serial_ns -= max(0.0, min(ns, self.serial_ns - self._smark))

    def serial_start(self, items: int) -> None:
        """The open section's serial stores start after its first of ``items`` even bands is computed: their
        chain begins with that band's TensorE work."""
        if self.serial_ns > self._smark and items > 0:
            self.serial_ns += (self.busy["tensor"] - self._mark["tensor"]) / items

    def serial_lanes(self, lanes: int) -> None:
        """The open section's serial stores so far form ``lanes`` chains that run side by side (stores of
        different outputs' regions that no span overlap orders)."""
        if lanes > 1:
            self.serial_ns -= (self.serial_ns - self._smark) * (1.0 - 1.0 / lanes)

    @contextmanager
    def ahead(self) -> Iterator[None]:
        """DMA charged inside runs ahead of program order: loads from HBM into tiles of their own that nothing
        holds (no buffer to wait for: dx's transposed filters), which nkisim starts as soon as their queue is
        free, beside whatever the engines run. Their descriptor generation is not a floor of their section's
        DMA but a chain per queue from the kernel's start (``compose_ns``'s ``ahead``)."""
        before, self._ahead = self._ahead, True
        try:
            yield
        finally:
            self._ahead = before

    def ahead_share(self, share: float) -> None:
        """The open section runs ``share`` of its time after its last ahead load lands (C_in-outer dx: the
        last group's matmuls wait for that group's filters)."""
        self.ahead_tail[self._open] = share

    def queue_share(self, queue: str) -> int:
        """How many queues take ``queue``'s instructions (an unknown-trigger hardware-DGE instruction takes
        the less busy of the two)."""
        return max(1, self.hw.target.hwdge_queues) if queue == DmaQueue.HWDGE_ANY.value else 1

    def queue_floor_ns(self, queues: dict[str, float] | None = None) -> float:
        """The longest DMA queue's descriptor generation (``queues``: issue ns per queue, default this
        sheet's): the DMA work cannot end sooner, whatever the bandwidth (nkisim: a queue generates one
        instruction's descriptors at a time; an unknown-trigger hardware-DGE instruction takes the
        less busy of the two queues)."""
        queues = self.queue_issue if queues is None else queues
        return max((ns / self.queue_share(q) for q, ns in queues.items()), default=0.0)

    def dma_ns(self) -> float:
        """The DMA's time: its bandwidth time, at least the longest queue's issue time."""
        return max(self.busy["dma"], self.queue_floor_ns())

    def serial_floors(self) -> dict[str, float]:
        """Per section, its chain of serial stores (``dma``'s ``serial``): a floor of its time (a latency
        chain, not bandwidth the other engines stall on)."""
        self._close()
        return dict(self.section_serial)

    def queue_times(self) -> dict[str, dict[str, float]]:
        """Per section, the descriptor generation per queue in queue time (``queue_share``)."""
        self._close()
        return {k: {q: ns / self.queue_share(q) for q, ns in v.items()} for k, v in self.section_queues.items()}

    def ahead_queues(self) -> dict[str, dict[str, float]]:
        """Per section, the ahead loads' descriptor generation per queue in queue time (``queue_share``)."""
        self._close()
        return {k: {q: ns / self.queue_share(q) for q, ns in v.items()} for k, v in self.section_ahead.items()}

    def section_busy(self) -> dict[str, dict[str, float]]:
        """Busy ns per engine of every section charged so far (they sum to ``busy``), plus the
        ``exposed`` DMA waits as the DMA time of their sections."""
        self._close()
        out = {k: dict(v) for k, v in self.sections.items()}
        for k, queues in self.section_queues.items():   # a section's DMA takes at least its queues' issue
            sec = out.setdefault(k, dict.fromkeys(ENGINES, 0.0))   # (but for its ahead loads': compose_ns)
            ahead = self.section_ahead.get(k, {})
            sec["dma"] = max(sec["dma"], self.queue_floor_ns({q: ns - ahead.get(q, 0.0) for q, ns in queues.items()}))
        for k, ns in self.waits.items():
            out.setdefault(k, dict.fromkeys(ENGINES, 0.0))["dma"] += ns
        return out

    def merged_dma_ns(self, names: Sequence[str]) -> float:
        """The DMA time of sections ``names`` run as one body (dw's boxes between dx's items): their bandwidth
        time summed, at least the longest queue's descriptor generation summed over them (less their ahead
        loads), plus their exposed waits. Not the sum of each one's floor: their loads on different queues
        generate descriptors side by side (slowfast_fuse LNC2: dw's x^T fills on the hardware-DGE queues run
        under dx's stores on the software DGE)."""
        self._close()
        queues: dict[str, float] = {}
        for k in names:
            ahead = self.section_ahead.get(k, {})
            for q, ns in self.section_queues.get(k, {}).items():
                queues[q] = queues.get(q, 0.0) + ns - ahead.get(q, 0.0)
        bandwidth = sum(self.sections.get(k, {}).get("dma", 0.0) for k in names)
        return max(bandwidth, self.queue_floor_ns(queues)) + sum(self.waits.get(k, 0.0) for k in names)

    def ring_units(self, n: int) -> None:
        """The open section streams ``n`` more units through its load ring (dw's boxes): a queue it loads
        from, taken by other work, stalls it beyond about one unit's time (``compose_ns``)."""
        self.units[self._open] = self.units.get(self._open, 0) + n

    def pipeline_steps(self, n: int) -> None:
        """The open section streams ``n`` more pipelined steps (dw's x^T tiles of its row passes): with few
        steps its engines cannot overlap much (``section_ns``)."""
        self.steps[self._open] = self.steps.get(self._open, 0) + n

    def pipeline_head(self, ns: float) -> None:
        """The open section's first step waits ``ns`` for its loads, charged in the fill (dw's head):
        ``section_ns``'s few-step term does not count that part of the first step again."""
        self.steps_head[self._open] = max(self.steps_head.get(self._open, 0.0), ns)

    def flow_shop(self, steps: list[tuple[list[tuple[float, int]], float, float]], head_ns: float = 0.0,
                  first_parts: int = 1) -> None:
        """The open section is a pipeline of ``steps`` (``flow_shop_ns``): it lasts at least their makespan
        on the DMA and PE queues less ``head_ns``, the part of the first step's loads the fill charges."""
        self.flow[self._open] = max(self.flow.get(self._open, 0.0), flow_shop_ns(steps, first_parts, self.hw.dma_fixed_ns) - head_ns)

    def exposed(self, name: str, ns: float) -> None:
        """A DMA wait of ``ns`` (a lone transfer's time, not bandwidth) as section ``name`` (a trail:
        ``compose_ns`` hides it in a later section's idle DMA time or exposes it at the end). Not busy."""
        self.waits[name] = self.waits.get(name, 0.0) + max(0.0, ns)

    def count(self, op: str, n: float) -> None:
        """Record ``n`` more instructions of kind ``op`` (for work charged to ``busy`` directly, e.g. a
        ``dma_transpose`` at its own efficiency)."""
        self.counts[op] = self.counts.get(op, 0) + int(n)

    def matmul(self, m: int, n: int, fp32: bool, count: float = 1, op: str = "nc_matmul") -> None:
        hw = self.hw
        cycles = max(min(hw.matmul_min_cycles, m), n) * (4 if fp32 else 1) + hw.matmul_issue_cycles
        self.busy["tensor"] += count * cycles / self.hw.tensor_ghz
        self.count(op, count)

    def transpose(self, p: int, f: int, fp32: bool, count: float = 1) -> None:
        """PE transpose of data [p, f] (a matmul: stationary data, moving identity [p, p])."""
        self.matmul(f, p, fp32, count, op="nc_transpose")

    def compute(self, engine: str, n: int, streams: int = 1, speedup: float = 1.0, count: float = 1,
                op: str = "tensor_copy") -> None:
        work = n * min(max(streams, 1), 2) / speedup
        cycles = max(self.hw.min_ii_cycles, work) + self.hw.compute_overhead(engine)
        self.busy[engine] += count * cycles / self.hw.ghz(engine)
        self.count(op, count)

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

    def _issue(self, op: str, count: float, src_shape: Sequence[int] | None = None, itemsize: int = 2) -> float:
        """Book ``count`` DMA instructions' descriptor generation on the queue nkisim routes them to (the
        kernel's DMAs leave ``dge_mode`` and the trigger engine to the compiler); the per-instruction issue
        time the queue(s) serialise: a hardware-DGE instruction of unknown trigger shares the two queues."""
        route = dma_issue(op, self.hw.target, src_shape=src_shape, itemsize=itemsize)
        self.queue_issue[route.queue] = self.queue_issue.get(route.queue, 0.0) + count * route.issue_ns
        if self._ahead:
            self.ahead_issue[route.queue] = self.ahead_issue.get(route.queue, 0.0) + count * route.issue_ns
        self.dge_gpsimd_ns += count * route.gpsimd_ns
        share = self.hw.target.hwdge_queues if route.queue == DmaQueue.HWDGE_ANY.value else 1
        return route.issue_ns / max(1, share)

    def dma(self, nbytes: float, run_bytes: float, count: float = 1, serial: int = 0) -> None:
        """``count`` ``dma_copy`` of ``nbytes`` each in contiguous runs of ``run_bytes``. ``serial`` (the
        transfer's on-chip partitions): a store into an output whose earlier stores it must wait for
        (nkisim orders two writes of one HBM tensor whose element spans overlap, and a store of several
        channels of a channel-major tensor spans every other store of those channels), so these stores
        run one after another, each alone (``TargetFigures.lone_dma_ns``): the section's DMA lasts at least
        their sum."""
        if nbytes <= 0 or count <= 0:
            return
        if serial:
            self.serial_ns += count * self.hw.lone_dma_ns(nbytes, run_bytes, serial)
        run = max(1.0, min(run_bytes, nbytes))
        # the descriptor generation holds the queue, not the bandwidth (nkisim): its floor is the queue's
        # (``queue_floor_ns``), which copies on other queues run beside
        self._issue("dma_copy", count)
        per = nbytes / (self.hw.dma_bytes_per_ns * self.hw.descriptor_efficiency(run))
        self.busy["dma"] += count * per
        self.dma_op_ns["dma_copy"] = self.dma_op_ns.get("dma_copy", 0.0) + count * per
        self.count("dma_copy", count)

    def dma_transpose(self, dst_shape: Sequence[int], itemsize: int, from_sbuf: bool = False, count: float = 1,
                      src_shape: Sequence[int] | None = None) -> float:
        """``count`` ``dma_transpose`` writing ``dst_shape`` (the destination tile as the NKI body slices it,
        partitions first) of ``itemsize``-byte elements, from HBM or (``from_sbuf``) SBUF: nkisim's charge,
        whole [128 x 16] destination blocks at the transpose efficiency (``nkisim.cost.dma_transpose_ns``)
        as DMA bandwidth time; its descriptor generation goes to the queue nkisim routes it to
        (``src_shape``, None: the hardware-DGE form), which runs beside the copies' software-DGE queue
        (``queue_floor_ns``). Returns the bandwidth ns charged."""
        if count <= 0 or not dst_shape or min(dst_shape) <= 0:
            return 0.0
        occupancy = dma_transpose_ns(dst_shape, itemsize, self.hw.target, from_sbuf)
        self._issue("dma_transpose", count, src_shape, itemsize)
        ns = count * occupancy
        self.busy["dma"] += ns
        self.dma_op_ns["dma_transpose"] = self.dma_op_ns.get("dma_transpose", 0.0) + ns
        self.count("dma_transpose", count)
        return ns

    def add(self, other: CostSheet, times: int = 1) -> None:
        """Add another sheet's busy times and counts into this one, ``times`` times (identical work
        repeated: one multiplication instead of a loop of adds)."""
        for e in ENGINES:
            self.busy[e] += other.busy[e] * times
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v * times
        for q, v in other.queue_issue.items():
            self.queue_issue[q] = self.queue_issue.get(q, 0.0) + v * times
        for q, v in other.ahead_issue.items():
            self.ahead_issue[q] = self.ahead_issue.get(q, 0.0) + v * times
        self.serial_ns += other.serial_ns * times
        for op, v in other.dma_op_ns.items():
            self.dma_op_ns[op] = self.dma_op_ns.get(op, 0.0) + v * times
        self.dge_gpsimd_ns += other.dge_gpsimd_ns * times

    def scaled(self, factor: float) -> CostSheet:
        """A sheet with this one's busy times times ``factor`` (a share of evenly sized work; counts kept
        only at factor 1, else dropped)."""
        out = CostSheet(self.hw)
        for e in ENGINES:
            out.busy[e] = self.busy[e] * factor
        out.queue_issue = {q: ns * factor for q, ns in self.queue_issue.items()}
        out.ahead_issue = {q: ns * factor for q, ns in self.ahead_issue.items()}
        out.serial_ns = self.serial_ns * factor
        if factor == 1.0:
            out.counts = dict(self.counts)
        return out

    def merged(self, other: CostSheet) -> CostSheet:
        out = CostSheet(self.hw)
        for e in ENGINES:
            out.busy[e] = self.busy[e] + other.busy[e]
        for k in set(self.counts) | set(other.counts):
            out.counts[k] = self.counts.get(k, 0) + other.counts.get(k, 0)
        for q in set(self.queue_issue) | set(other.queue_issue):
            out.queue_issue[q] = self.queue_issue.get(q, 0.0) + other.queue_issue.get(q, 0.0)
        for q in set(self.ahead_issue) | set(other.ahead_issue):
            out.ahead_issue[q] = self.ahead_issue.get(q, 0.0) + other.ahead_issue.get(q, 0.0)
        out.serial_ns = self.serial_ns + other.serial_ns
        out.dge_gpsimd_ns = self.dge_gpsimd_ns + other.dge_gpsimd_ns
        for op in set(self.dma_op_ns) | set(other.dma_op_ns):
            out.dma_op_ns[op] = self.dma_op_ns.get(op, 0.0) + other.dma_op_ns.get(op, 0.0)
        return out



# Section kinds for ``compose_ns``: a *lead* is DMA work the next section needs first (dx's filters), a
# *trail* finishes the previous section (dw's casts and stores, dx's last store, db's store after a fold);
# every other section is a *body*.
LEAD_SECTIONS = frozenset({"dx_filters", "dx_prefetch"})
TRAIL_SECTIONS = frozenset({"dw_finish", "dx_tail", "db_store"})
# the bodies that read the leads' loads (dx's filters, its prefetched band)
LEAD_READERS = frozenset({"dx", "dx+dw"})
COMPUTE = ("tensor", "vector", "scalar", "gpsimd")


def flow_shop_ns(steps: list[tuple[list[tuple[float, int]], float, float]], first_parts: int = 1,
                 latency: float = 0.0) -> float:
    """Makespan of a pipeline of steps on two in-order queues, the DMA then the PE, as the program issues them:
    per step (its loads: (DMA ns, the step that reads it), its PE ns, the store DMA ns issued after its
    matmuls). The DMA takes loads in program order at full bandwidth (a store takes its bandwidth but, placed
    when its matmuls are done, holds up no load); a step's matmuls start when the step before them is done
    and the loads it reads have landed, except the first step, which runs in ``first_parts`` parts as its
    loads land (the shared-dy kernel's first step, C_out tile outer). A DMA-bound start (the filters and
    the first steps' loads) followed by PE-bound steps costs the PE only the DMA's lead over it; loads
    issued late (dy^T by DMA on the last steps) show up as PE waits near the end. A load lands ``latency``
    after its bytes are through (the DMA start latency, not bandwidth): the first load's is the fill's, so
    the makespan is counted from there (loads issued only just ahead of their step, on a DMA as busy as the
    PE, make the PE wait for it)."""
    ready = [0.0] * len(steps)
    dma_t = pe_t = 0.0
    for k, (loads, pe, store) in enumerate(steps):
        for ns, need in sorted(loads, key=lambda ld: ld[1]):
            dma_t += ns
            ready[need] = max(ready[need], dma_t + latency)
        if k == 0 and first_parts > 1:   # part t starts when t / first_parts of the step's loads are in
            pe_t = max(ready[0] * t / first_parts + pe * (first_parts - t + 1) / first_parts
                       for t in range(1, first_parts + 1))
        else:
            pe_t = max(pe_t, ready[k]) + pe
        dma_t += store
    return max(0.0, pe_t - latency)


def section_ns(busy: dict[str, float], loss: float = SECTION_LOSS, power: float = SECTION_POWER,
               steps: int = 0, head_ns: float = 0.0, flow_ns: float = 0.0) -> float:
    """One pipelined section run alone: its busiest engine, plus a stall share of every other engine that
    grows with how close that engine comes to the busiest (``loss * b * (b / top) ** power``): an engine
    that is nearly as busy as the bottleneck often holds it up (shared dependencies, PSUM banks, DMA
    queues), one that is mostly idle rarely does.

    ``steps`` (> 0: the section is a pipeline of that many steps, each through every engine): a pipeline
    of n steps costs at least its busiest engine plus the others' time of one step (``others / n``: the
    first step's loads before the first matmul, the last step's matmuls after the last load); with few
    steps (a dw pass of a few x^T bundles) that term, not the stall share, dominates.
    ``head_ns``: the part of the first step's loads the caller charges elsewhere (the fill's head).

    ``flow_ns`` (> 0: the section's DMA -> PE flow-shop makespan, ``flow_shop_ns``, known step by step): the
    DMA's hold on the PE is that makespan, not a stall share: the section lasts the longer of it and the
    compute engines' ``section_ns`` (the shared-dy GEMM kernel, whose DMA-bound first steps and PE-bound
    rest a share of the whole DMA time overcharges)."""
    if flow_ns > 0.0:
        return max(flow_ns, section_ns({e: b for e, b in busy.items() if e != "dma"}, loss, power))
    top_engine = max(busy, key=busy.get)
    top = busy[top_engine]
    if top <= 0.0:
        return 0.0
    others = [b for e, b in busy.items() if e != top_engine]
    # (b > 0: a sum of busy times that cancel can round to -1e-14, whose fractional power is complex)
    t = top + loss * sum(b * (b / top) ** power for b in others if b > 0.0)
    if steps > 0:
        t = max(t, top + max(0.0, sum(others) / steps - head_ns))
    return t


def compose_ns(sections: dict[str, dict[str, float]], order: list[str], fill_ns: float,
               hw: TargetFigures, steps: dict[str, int] | None = None,
               steps_head: dict[str, float] | None = None, flow: dict[str, float] | None = None,
               ahead: dict[str, dict[str, float]] | None = None, ahead_tail: dict[str, float] | None = None,
               queues: dict[str, dict[str, float]] | None = None, floors: dict[str, float] | None = None,
               units: dict[str, int] | None = None) -> float:
    """Modelled time of a kernel from the busy time of its sections, taken in issue order (max-plus):

    - a *body* section occupies the engines for ``section_ns`` of its busy time; bodies run one after the
      other (every engine is an in-order queue and a section's engines move together: evictions follow
      the matmuls they drain); what its DMA leaves idle is *credit* a later lead may use;
    - a *lead* section (DMA the next body needs before it starts: filter loads) spends the credit of the
      bodies before it (the DMA queues load it while they compute); the rest is exposed. Its compute
      (PE transposes of fp32/trn1 filters, their evictions) runs in order on its engines;
    - a *trail* section (casts and stores that end a body) runs its compute in order and its DMA in the
      next body's idle DMA time; the part that finds none (the end of the kernel) is exposed;
    - plus ``fill_ns``: latencies no busy time covers (first loads, LNC2 rendezvous).
    A section missing from ``order`` is a body appended at the end. ``steps``: the pipelined steps of a
    body (``CostSheet.steps``; ``section_ns``). ``flow``: a body's DMA -> PE flow-shop makespan
    (``CostSheet.flow``).

    ``ahead`` (``CostSheet.ahead_queues``): per section, the queue time of its loads that run ahead of
    program order (dx's filters); ``queues`` (``CostSheet.queue_times``): per section, the queue time of all
    its DMA. Each DMA queue generates descriptors in order, one instruction at a time, beside the engines
    and the other queues: the ahead loads form a chain per queue from the kernel's start (the last lands a
    start latency after its descriptors), or, issued before any body, from the fill (behind the kernel's
    first loads). A body with other work on a queue with such a chain waits for it (its first loads queue
    behind it), then that work joins the chain. A lead's chain is what its readers
    (``LEAD_READERS``) wait for, so the bodies issued around it on other queues hide its queue time whether
    they come before or after it (issued inside a body that uses its queue, it cannot run ahead: its queue
    time is DMA time that body's idle DMA time may hide, as a lead's bandwidth); a body with ahead loads of its own ends no sooner than their chain plus
    its ``ahead_tail`` share (the work after its last ahead load). ``floors`` (``CostSheet.serial_floors``):
    a body lasts at least its chain of serial stores. ``units`` (``CostSheet.units``): the units a body
    streams through its load ring; a lead issued inside a body that uses its queue takes that queue for its
    issue time, and the body, whose ring holds about one unit ahead, stalls for the rest.
    """
    facts = SectionFacts(steps or {}, steps_head or {}, flow or {}, ahead or {}, ahead_tail or {}, queues or {},
                         floors or {}, units or {})
    line = _Timeline(hw, fill_ns, facts)
    for name in [n for n in order if n in sections] + [n for n in sections if n not in order]:
        if name in LEAD_SECTIONS:
            line.lead(name, sections[name])
        elif name in TRAIL_SECTIONS:
            line.trail(sections[name])
        else:
            line.body(name, sections[name])
    return line.end()


@dataclass(frozen=True)
class SectionFacts:
    """What ``compose_ns`` knows of its sections beyond their busy time, per section name (see there)."""

    steps: dict[str, int]
    steps_head: dict[str, float]
    flow: dict[str, float]
    ahead: dict[str, dict[str, float]]
    ahead_tail: dict[str, float]
    queues: dict[str, dict[str, float]]
    floors: dict[str, float]
    units: dict[str, int]


@dataclass
class _Timeline:
    """``compose_ns``'s state as it places the sections in issue order."""

    hw: TargetFigures
    fill_ns: float
    facts: SectionFacts
    total: float = field(init=False)
    credit: float = 0.0        # idle DMA time of the bodies so far, usable by a lead
    trailing: list[float] = field(default_factory=list)   # trail DMA still to place into the next body's idle DMA
    trail_compute: list[float] = field(default_factory=list)   # the trails' compute with PE work (casts ->
                                                               # dw^T transposes) before that body
    trail_free: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COMPUTE, 0.0))   # ... without PE
    chain: dict[str, float] = field(default_factory=dict)   # per DMA queue: when its ahead loads so far are through
    leads_in: float = 0.0      # when the leads' ahead loads are through (their readers wait for it)
    first_body: bool = True
    last_queues: set[str] = field(default_factory=set)   # the queues the last body's own (not ahead) work uses
    last_t: float = 0.0        # the last body's time
    last_units: int = 0        # and its ring units

    def __post_init__(self) -> None:
        self.total = self.fill_ns

    def lead(self, name: str, busy: dict[str, float]) -> None:
        """DMA the next body needs first: its ahead loads chain per queue, the rest spends the credit."""
        dma = busy["dma"]
        for q, ns in self.facts.ahead.get(name, {}).items():
            if q in self.last_queues:   # the body it is issued in uses its queue: no run ahead beside it,
                dma = max(dma, ns)      # its queue time is DMA time that body's idle DMA time may hide,
                if self.last_units:     # and the body stalls for it beyond one unit of its ring
                    self.total += max(0.0, ns - self.last_t / self.last_units)
                continue
            # (issued before any body, behind the kernel's first loads: the fill; else from the start)
            self.chain[q] = self.chain.get(q, self.fill_ns if self.first_body else self.hw.dma_fixed_ns) + ns
            self.leads_in = max(self.leads_in, self.chain[q])
        self.total += section_ns(_compute(busy)) + max(0.0, dma - self.credit)
        self.credit = max(0.0, self.credit - dma)

    def trail(self, busy: dict[str, float]) -> None:
        """Casts and stores ending a body: compute in order, DMA into the next body's idle DMA time."""
        compute = _compute(busy)
        if compute["tensor"] > 0.0:
            self.trail_compute.append(section_ns(compute))
        else:
            for e in COMPUTE:
                self.trail_free[e] += compute[e]
        self.trailing.append(busy["dma"])

    def body(self, name: str, busy: dict[str, float]) -> None:
        """A pipelined section, after the trails before it, behind the chains of the queues it uses."""
        f = self.facts
        # a trail without PE work (x-stationary dw's casts) does not hold the in-order PE: its engines
        # take it in order ahead of the body's own work on them, inside the body
        busy = {e: busy[e] + self.trail_free.get(e, 0.0) for e in busy}
        t = section_ns(busy, steps=f.steps.get(name, 0), head_ns=f.steps_head.get(name, 0.0),
                       flow_ns=f.flow.get(name, 0.0))
        t = max(t, f.floors.get(name, 0.0))
        if t <= 0.0:
            return
        idle = max(0.0, t - busy["dma"])
        hidden = min(idle, sum(self.trailing))
        # the trails' PE chains run in order before the body's; their DMA in its idle DMA time
        begin = self.total + sum(self.trail_compute)
        if name in LEAD_READERS:   # the leads' loads must be in
            begin = max(begin, self.leads_in)
        own = f.ahead.get(name, {})
        rest = {q: ns - own.get(q, 0.0) for q, ns in f.queues.get(name, {}).items()
                if q in self.chain and ns - own.get(q, 0.0) > 0.0}
        # its own work on a queue with a chain queues behind it (its first loads: the body waits)
        begin = max([begin, *(self.chain[q] for q in rest)])
        self.first_body = False
        self.last_queues = {q for q, ns in f.queues.get(name, {}).items() if ns - own.get(q, 0.0) > 0.0}
        self.last_t, self.last_units = t, f.units.get(name, 0)
        end = begin + t
        for q, ns in rest.items():
            self.chain[q] = begin + ns
            end = max(end, self.chain[q])
        for q, ns in own.items():   # its ahead loads go on from their queue's chain
            self.chain[q] = self.chain.get(q, self.hw.dma_fixed_ns) + ns
            end = max(end, self.chain[q] + t * f.ahead_tail.get(name, 0.0))
        self.total = end + _exposed(self.trailing, hidden)
        self.trailing, self.trail_compute = [], []
        self.trail_free = dict.fromkeys(COMPUTE, 0.0)
        self.credit += idle - hidden

    def end(self) -> float:
        """The kernel's time: at the end, the last trails' DMA and compute run side by side."""
        if any(self.trail_free.values()):
            self.trail_compute.append(section_ns(self.trail_free))
        return self.total + _exposed(self.trailing + self.trail_compute, 0.0)


def _compute(busy: dict[str, float]) -> dict[str, float]:
    return {e: busy[e] for e in COMPUTE}


def _exposed(trails: list[float], hidden: float) -> float:
    """What of the trails' DMA no idle time hides: trails in flight together (dx's last store, dw's
    stores, an LNC2 exchange) are in flight on different queues, so they overlap one another like the engines of a
    section (``section_ns`` of the pieces, scaled to the part not hidden)."""
    total = sum(trails)
    if total <= hidden or total <= 0.0:
        return 0.0
    together = section_ns({str(i): t for i, t in enumerate(trails)})
    return (total - hidden) * together / total
