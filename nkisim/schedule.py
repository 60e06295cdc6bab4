"""A dependency-aware list schedule of a trace on the modelled NeuronCore(s).

Model (see ``docs/nkisim-cost-model.md``):

- Each compute engine (tensor, vector, scalar, gpsimd) runs its instructions in program
  order, one at a time: an instruction starts when the engine is free and its inputs are
  ready, and blocks the engine for its occupancy.
- DMA: each instruction runs on the queue its DGE mode and trigger engine give (``nkisim.dge``);
  a queue generates descriptors one instruction at a time, in the order they are triggered (a
  transfer waiting for its data holds no slot). After the fixed start latency the bytes flow
  through the core's DMA bandwidth, a shared fluid resource that several transfers fill together
  (each capped at the fraction of the 16 engines its shape can use).
- Dependencies: RAW, WAR and WAW between accesses to the same storage whose partition ranges
  and element spans overlap. RAW/WAW wait for the producer's latency; WAR waits until the
  reader has finished. Matmuls accumulating into the same PSUM region on the TensorE
  pipeline back to back (WAW between TensorE instructions waits only for the occupancy).
- Under LNC2 each program runs on its own core; ``sendrecv`` and ``core_barrier`` pair the
  k-th such instruction of each core: none starts before all are ready. The modelled time is
  the later-finishing core.
"""
from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field

from .cost import HardwareTarget, InstrTiming, get_target, instr_timing, matmul_flops
from .dge import DmaQueue
from .trace import Instr

__all__ = ["FluidBandwidth", "ScheduleResult", "schedule", "schedule_programs"]

_SYNC_OPS = frozenset({"sendrecv", "core_barrier"})
_HBM = frozenset({"hbm", "private_hbm", "shared_hbm"})
_COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_HWDGE_ANY = DmaQueue.HWDGE_ANY.value
_HWDGE_QUEUES = (DmaQueue.HWDGE_ACT.value, DmaQueue.HWDGE_SP.value)
# A remembered access is a tuple (p_lo, p_hi, s_lo, s_hi, visible_ns, release_ns, engine), kept
# per storage in a list of writes and a list of reads.
_MAX_ENTRIES = 16  # per storage and kind; beyond it the oldest half is merged conservatively


@dataclass(frozen=True)
class ScheduleResult:
    """Modelled times of a schedule (ns)."""

    makespan_ns: float
    core_makespan_ns: tuple[float, ...]
    busy_ns: dict[str, float]                 # summed over cores; dma = bandwidth time used
    starts_ns: tuple[tuple[float, ...], ...] = ()   # per core, per instruction (if recorded)
    ends_ns: tuple[tuple[float, ...], ...] = ()     # per core: when results are visible
    # per core, per instruction (if recorded): the engine it ran on, or 'dma:<queue>' (DmaQueue value), or
    # 'sync'; with starts_ns/ends_ns this is the timeline of the run
    lanes: tuple[tuple[str, ...], ...] = ()
    # per core: when each instruction released its engine or DMA queue (the timeline's slice ends)
    releases_ns: tuple[tuple[float, ...], ...] = ()
    queue_busy_ns: dict[str, float] = field(default_factory=dict)  # DMA queue -> issue time, all cores
    instr_counts: dict[str, int] = field(default_factory=dict)  # op -> count, all cores
    matmul_flops: int = 0                     # 2*K*M*N per matmul, transposes excluded
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    # engine -> {engine whose result it waited for: ns idle}; 'merged' = an older merged region
    stalls_ns: dict[str, dict[str, float]] = field(default_factory=dict)
    op_busy_ns: dict[str, float] = field(default_factory=dict)  # occupancy per op, all cores


class FluidBandwidth:
    """A shared bandwidth in time bins; transfers fill free capacity first come, first fit.

    Work is measured in ns of full-rate use. A transfer starting at ``t0`` takes from each bin
    at most ``rate`` of the bin's time and what the earlier placed transfers left free. Full bins
    are skipped through a union-find "next non-full bin" map, so placement stays cheap.
    """

    __slots__ = ("_next", "_used", "bin_ns")

    def __init__(self, bin_ns: float = 100.0) -> None:
        self.bin_ns = bin_ns
        self._used: dict[int, float] = {}
        self._next: dict[int, int] = {}

    def forget_before(self, t: float) -> None:
        """Drop the bins that end before ``t``: no transfer will be placed there any more."""
        cut = int(t // self.bin_ns)
        self._used = {b: u for b, u in self._used.items() if b >= cut}
        # a chain through dropped bins still leads to a kept bin (>= cut) or past the end
        self._next = {b: self._find(b) for b in self._next if b >= cut}

    def __len__(self) -> int:
        return len(self._used)

    def _find(self, b: int) -> int:
        nxt = self._next
        root = b
        while root in nxt:
            root = nxt[root]
        while b in nxt and nxt[b] != root:  # path compression
            nxt[b], b = root, nxt[b]
        return root

    def place(self, t0: float, work_ns: float, rate: float = 1.0) -> float:
        """Reserve ``work_ns`` from ``t0`` on; returns when the transfer ends."""
        if work_ns <= 0.0:
            return t0
        size = self.bin_ns
        used = self._used
        nxt = self._next
        b = int(t0 // size)
        t = t0
        remaining = work_ns
        while True:
            if b in nxt:  # skip full bins
                b = self._find(b)
                t = b * size
            bin_end = (b + 1) * size
            avail = bin_end - t
            already = used.get(b, 0.0)
            cap = min(size - already, rate * avail)
            if cap <= 1e-9:
                b += 1
                t = bin_end
                continue
            take = min(cap, remaining)
            already += take
            used[b] = already
            if already >= size - 1e-9:
                nxt[b] = b + 1
            remaining -= take
            if remaining <= 1e-9:
                return t + avail * (take / cap)
            b += 1
            t = bin_end


class _Core:
    """Schedule state of one core."""

    def __init__(self, instrs: Sequence[Instr], hw: HardwareTarget, record: bool) -> None:
        self.instrs = instrs
        self.hw = hw
        self.pos = 0
        self.engine_free = dict.fromkeys(_COMPUTE_ENGINES, 0.0)
        self.queues: dict[str, FluidBandwidth] = {}   # DMA queue -> its descriptor-generation slots
        self.gpsimd_dge = FluidBandwidth()              # GpSimd's software-DGE work
        self.queue_busy: dict[str, float] = {}   # DMA queue -> summed issue time
        self.lanes: list[str] = []               # per instruction (if recorded): engine or 'dma:<queue>'
        self.bandwidth = FluidBandwidth()
        self.writes: dict[int, list[tuple]] = {}
        self.reads: dict[int, list[tuple]] = {}
        self.busy = dict.fromkeys((*_COMPUTE_ENGINES, "dma"), 0.0)
        self.makespan = 0.0
        self.record = record
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.releases: list[float] = []
        self._pending: tuple[Instr, InstrTiming, float] | None = None
        self.counts: dict[str, int] = {}
        self.op_busy: dict[str, float] = {}  # occupancy per op (DMA: bandwidth time)
        self.stalls: dict[str, dict[str, float]] = {}  # engine -> producer engine -> idle ns
        self._blocker = ""
        self.flops = 0
        self.hbm_read = 0
        self.hbm_write = 0

    # -- dependencies ---------------------------------------------------------------------
    def _ready(self, instr: Instr, engine: str) -> float:
        """When every RAW, WAW and WAR hazard of ``instr`` has cleared (and who cleared last)."""
        ready = 0.0
        blocker = ""
        writes = self.writes
        reads = self.reads
        for a in instr.accesses:
            sid = a.storage
            ws = writes.get(sid)
            rs = reads.get(sid) if a.write else None
            if not ws and not rs:
                continue
            p_lo = a.partition_start
            p_hi = p_lo + a.partitions
            s_lo, s_hi = a.span
            if ws:
                # RAW / WAW; TensorE accumulation into PSUM pipelines back to back.
                pipelined = a.write and engine == "tensor"
                for e in ws:
                    if e[0] >= p_hi or p_lo >= e[1] or e[2] >= s_hi or s_lo >= e[3]:
                        continue
                    t = e[5] if (pipelined and e[6] == "tensor") else e[4]
                    if t > ready:
                        ready = t
                        blocker = e[6]
            if rs:
                for e in rs:  # WAR
                    if e[0] >= p_hi or p_lo >= e[1] or e[2] >= s_hi or s_lo >= e[3]:
                        continue
                    if e[5] > ready:
                        ready = e[5]
                        blocker = e[6]
        self._blocker = blocker
        return ready

    def _remember(self, instr: Instr, engine: str, visible: float, release: float) -> None:
        """Record the accesses of a scheduled instruction, pruning what they make redundant."""
        writes = self.writes
        reads = self.reads
        for a in instr.accesses:
            sid = a.storage
            p_lo = a.partition_start
            p_hi = p_lo + a.partitions
            s_lo, s_hi = a.span
            entry = (p_lo, p_hi, s_lo, s_hi, visible, release, engine)
            if a.buffer in _HBM:
                if a.write:
                    self.hbm_write += a.nbytes
                else:
                    self.hbm_read += a.nbytes
            if a.write:
                # Everything this write covers is ordered before it: a later access that would
                # depend on those entries depends on this write, which finishes after them.
                rs = reads.get(sid)
                if rs:
                    rs[:] = [e for e in rs if not (p_lo <= e[0] and e[1] <= p_hi
                                                   and s_lo <= e[2] and e[3] <= s_hi)]
                ws = writes.get(sid)
                if ws is None:
                    writes[sid] = [entry]
                    continue
                ws[:] = [e for e in ws if not (p_lo <= e[0] and e[1] <= p_hi
                                               and s_lo <= e[2] and e[3] <= s_hi)]
                ws.append(entry)
                if len(ws) > _MAX_ENTRIES:
                    writes[sid] = _merge_oldest(ws)
            else:
                rs = reads.get(sid)
                if not rs:
                    reads[sid] = [entry]
                    continue
                last = rs[-1]
                if last[0] == p_lo and last[1] == p_hi and last[2] == s_lo and last[3] == s_hi \
                        and last[5] <= release:
                    rs[-1] = entry  # the same region read again, finishing no earlier
                    continue
                rs.append(entry)
                if len(rs) > _MAX_ENTRIES:
                    reads[sid] = _merge_oldest(rs)

    # -- execution ------------------------------------------------------------------------
    def _execute(self, instr: Instr, timing: InstrTiming, ready: float) -> None:
        engine = timing.engine
        if engine == "dma":
            queue = timing.queue
            if queue == _HWDGE_ANY:   # the compiler picks the trigger engine: the less busy DGE
                queue = min(_HWDGE_QUEUES, key=lambda q: self.queue_busy.get(q, 0.0))
            slots = self.queues.get(queue)
            if slots is None:
                slots = self.queues[queue] = FluidBandwidth()
            # The queue generates descriptors one instruction at a time, in the order they are triggered; a
            # transfer still waiting for its data is not triggered yet and holds no slot.
            start = max(ready, slots.place(ready, timing.issue_ns) - timing.issue_ns)
            self.queue_busy[queue] = self.queue_busy.get(queue, 0.0) + timing.issue_ns
            if timing.gpsimd_ns:   # software DGE: GpSimd generates the descriptors
                self.gpsimd_dge.place(start, timing.gpsimd_ns)
                self.busy["gpsimd"] += timing.gpsimd_ns
            # the fixed start latency counts from the descriptor generation and includes it
            data_start = start + timing.dma_fixed_ns
            end = self.bandwidth.place(data_start, timing.occupancy_ns, timing.dma_rate)
            # a lone transfer never beats its own engines' rate
            end = max(end, data_start + timing.occupancy_ns / timing.dma_rate)
            self.busy["dma"] += timing.occupancy_ns
            visible = release = end
            lane = "dma:" + queue
        elif engine == "sync":
            start = visible = release = ready
            lane = "sync"
        else:
            free_at = self.engine_free[engine]
            start = max(free_at, ready)
            if ready > free_at:
                self._stall(engine, ready - free_at)
            release = start + timing.occupancy_ns
            visible = start + timing.latency_ns
            self.engine_free[engine] = release
            self.busy[engine] += timing.occupancy_ns
            lane = engine
        self._remember(instr, engine, visible, release)
        self.makespan = max(self.makespan, visible)
        if self.record:
            self.starts.append(start)
            self.ends.append(visible)
            self.lanes.append(lane)
            self.releases.append(release)

    def _stall(self, engine: str, wait: float) -> None:
        """The engine sat idle ``wait`` ns for a dependency produced on ``self._blocker``."""
        per_engine = self.stalls.setdefault(engine, {})
        producer = self._blocker or "merged"
        per_engine[producer] = per_engine.get(producer, 0.0) + wait

    def run_until_sync(self) -> float | None:
        """Schedule up to the next cross-core sync; returns its ready time, None at the end."""
        instrs = self.instrs
        hw = self.hw
        n = len(instrs)
        counts = self.counts
        op_busy = self.op_busy
        while self.pos < n:
            instr = instrs[self.pos]
            self.pos += 1
            op = instr.op
            counts[op] = counts.get(op, 0) + 1
            timing = instr_timing(instr, hw)
            if op == "nc_matmul":
                flops = matmul_flops(instr)
                self.flops += flops
                if not flops:
                    op = "nc_matmul[transpose]"
            op_busy[op] = op_busy.get(op, 0.0) + timing.occupancy_ns
            ready = self._ready(instr, timing.engine)
            if instr.op in _SYNC_OPS:
                self._pending = (instr, timing, ready)
                return ready
            self._execute(instr, timing, ready)
        return None

    def finish_sync(self, ready: float) -> None:
        """Run the pending sync instruction once every core has reached it."""
        assert self._pending is not None
        instr, timing, own_ready = self._pending
        self._pending = None
        self._execute(instr, timing, max(ready, own_ready))


def _merge_oldest(entries: list[tuple]) -> list[tuple]:
    """Fold the older half of the entries into one hull with the latest times (conservative)."""
    if len(entries) <= _MAX_ENTRIES // 2:
        return entries
    half = len(entries) // 2
    old, keep = entries[:half], entries[half:]
    hull = (min(e[0] for e in old), max(e[1] for e in old), min(e[2] for e in old),
            max(e[3] for e in old), max(e[4] for e in old), max(e[5] for e in old), "")
    return [hull, *keep]


def schedule_programs(programs: Sequence[Sequence[Instr]], target: str | HardwareTarget,
                      record: bool = False) -> ScheduleResult:
    """Schedule one instruction list per core; cores meet at ``sendrecv``/``core_barrier``."""
    hw = get_target(target)
    cores = [_Core(instrs, hw, record) for instrs in programs] or [_Core((), hw, record)]
    live = list(cores)
    # The schedule allocates many small tuples and no cycles: pausing the cyclic collector saves
    # its repeated scans of the (large) trace.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while live:
            waiting = []
            for core in live:
                ready = core.run_until_sync()
                if ready is not None:
                    waiting.append((core, ready))
            if waiting:
                meet = max(r for _, r in waiting)
                for core, _ in waiting:
                    core.finish_sync(meet)
            live = [core for core, _ in waiting]
    finally:
        if gc_was_enabled:
            gc.enable()
    busy: dict[str, float] = {}
    for core in cores:
        for engine, t in core.busy.items():
            busy[engine] = busy.get(engine, 0.0) + t
    core_times = tuple(core.makespan for core in cores)
    counts: dict[str, int] = {}
    stalls: dict[str, dict[str, float]] = {}
    op_busy: dict[str, float] = {}
    queue_busy: dict[str, float] = {}
    for core in cores:
        for q, t in core.queue_busy.items():
            queue_busy[q] = queue_busy.get(q, 0.0) + t
        for op, k in core.counts.items():
            counts[op] = counts.get(op, 0) + k
        for op, t in core.op_busy.items():
            op_busy[op] = op_busy.get(op, 0.0) + t
        for engine, waits in core.stalls.items():
            total = stalls.setdefault(engine, {})
            for producer, t in waits.items():
                total[producer] = total.get(producer, 0.0) + t
    return ScheduleResult(
        makespan_ns=max(core_times),
        core_makespan_ns=core_times,
        busy_ns=busy,
        starts_ns=tuple(tuple(c.starts) for c in cores) if record else (),
        ends_ns=tuple(tuple(c.ends) for c in cores) if record else (),
        lanes=tuple(tuple(c.lanes) for c in cores) if record else (),
        releases_ns=tuple(tuple(c.releases) for c in cores) if record else (),
        queue_busy_ns=queue_busy,
        instr_counts=counts,
        matmul_flops=sum(c.flops for c in cores),
        hbm_read_bytes=sum(c.hbm_read for c in cores),
        hbm_write_bytes=sum(c.hbm_write for c in cores),
        stalls_ns=stalls,
        op_busy_ns=op_busy,
    )


def schedule(instrs: Sequence[Instr], target: str | HardwareTarget,
             record: bool = False) -> ScheduleResult:
    """Schedule one core's instructions."""
    return schedule_programs([instrs], target, record)
